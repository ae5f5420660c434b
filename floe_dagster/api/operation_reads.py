"""Floe's operation records over HTTP: recent maintenance runs (filtered by table, trigger and
status), one run by id, one table's runs, and the stats over a window. Runs are read from the Dagster
instance (its run tags), the tables a batch run maintained from the coordination database's outcomes,
a shadow policy's decisions from its ledger rows; api/operation_items.py shapes each record.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

from dagster import DagsterInstance, RunsFilter

from floe_dagster.api.operation_items import CONFLICT, SHADOW, operation_item, shadow_item
from floe_dagster.api.run_facts import DAGSTER_STATUSES, FLOE_STATUS, run_facts
from floe_dagster.api.timestamps import iso, utc_now
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.coordination.runs import IN_FLIGHT_STATUSES
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.errors import ApiError
from floe_dagster.settings import Settings

MAX_OUTCOME_RUNS = 1000

# Floe's record statuses beside ours (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, and CONFLICT: the
# runs in which a table lost a commit race, a filter only, as PARTIAL_FAILURE is; docs/http-api.md).
_NEVER_A_RUN = {"NO_POLICY", "NO_OPERATIONS"}
_RECORD_STATUSES = ["PENDING", "RUNNING", "SUCCESS", "PARTIAL_FAILURE", "FAILED", "NO_POLICY", "NO_OPERATIONS",
                    "SUCCEEDED", "CANCELLED", "CONFLICT", "SHADOW"]

MAX_WINDOW = timedelta(days=3650)


def parse_window(text: str | None) -> timedelta:
    """Floe's stats window: ``24h``, ``7d``, ``30m`` or a number of hours (default 24h); 400 otherwise, with
    Floe's message (a window over ten years is refused too: the run query would start before any run)."""
    value = (text or "").strip().lower() or "24h"
    match = re.fullmatch(r"(\d{1,9})([hdm]?)", value)
    window = None
    if match:
        amount, unit = int(match.group(1)), match.group(2) or "h"
        window = {"h": timedelta(hours=amount), "d": timedelta(days=amount), "m": timedelta(minutes=amount)}[unit]
    if window is None or window > MAX_WINDOW:
        raise ApiError(400, "VALIDATION_FAILED", f"Invalid window format: {text}. Use format like '24h', '7d', '1h'",
                       {"field": "window"})
    return window


def window_text(window: timedelta) -> str:
    """Floe's windowDuration: whole days as ``7d``, else hours (``30m`` for a window under whole hours)."""
    minutes = int(window.total_seconds() // 60)
    if minutes % 60:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours // 24}d" if hours >= 24 and hours % 24 == 0 else f"{hours}h"


def _record_status(status: str | None) -> str | None:
    """A ``status`` filter in any case, Floe's SUCCESS read as SUCCEEDED; 400 with Floe's message otherwise."""
    if status is None or not status.strip():
        return None
    upper = status.strip().upper()
    if upper not in _RECORD_STATUSES:
        raise ApiError(400, "VALIDATION_FAILED", f"Invalid status: {status}. Valid values: "
                       f"[{', '.join(_RECORD_STATUSES)}]", {"field": "status"})
    return "SUCCEEDED" if upper == "SUCCESS" else upper


class OperationReads:
    """Floe's operation records and stats: the ``operations`` router's service."""

    def __init__(self, settings: Settings, instance: DagsterInstance, coordination: Coordination | None = None):
        self.settings = settings
        self.instance = instance
        # The application shares its own; a script reading runs alone opens the settings' (once a process).
        self.coordination = coordination or CoordinationResource.from_settings(settings).coordination

    def operations(self, table: str | None, trigger_id: str | None, status: str | None, limit: int,
                   offset: int) -> dict[str, Any]:
        tags: dict[str, Any] = {T.TRIGGER: list(T.TRIGGERS)}
        qualified = None
        if table:
            try:
                qualified = TableName.parse(table, self.settings.catalog.name).qualified
            except ValueError as exc:
                raise ApiError(400, "INVALID_TABLE_NAME", str(exc), {"table": table}) from None
            tags[T.TABLE] = qualified
        if trigger_id:
            tags[self._trigger_id_key(trigger_id)] = trigger_id
        status = _record_status(status)
        if status in _NEVER_A_RUN:  # refused before any run (no policy, no operation): no run has them
            return {"operations": [], "total": 0, "limit": limit, "offset": offset, "hasMore": False}
        if status == "PARTIAL_FAILURE":
            return self._partial_failures(tags, qualified, trigger_id, limit, offset)
        if status == CONFLICT:
            return self._conflicts(tags, qualified, trigger_id, limit, offset)
        if status == SHADOW:
            return self._shadow_decisions(qualified, trigger_id, limit, offset)
        statuses = DAGSTER_STATUSES[status] if status else None
        filters = RunsFilter(tags=tags, statuses=statuses)
        total = self.instance.get_runs_count(filters)
        records = list(self.instance.get_run_records(filters, limit=offset + limit))
        if qualified:
            extra = self._multi_table_runs(qualified, trigger_id, statuses)
            total += len(extra)
            records = sorted([*records, *extra], key=lambda r: r.create_timestamp, reverse=True)
        page = records[offset:offset + limit]
        items = [operation_item(run_facts(self.instance, record), qualified) for record in page]
        return {"operations": items, "total": total, "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < total}

    def operation(self, operation_id: str) -> dict[str, object]:
        """Floe's ``/operations/{id}``: one maintenance run by its run id (Floe's ids are UUIDs, as run ids)."""
        try:
            uuid.UUID(operation_id)
        except ValueError:
            raise ApiError(400, "VALIDATION_FAILED", f"Invalid UUID: {operation_id}", {"id": operation_id}) from None
        records = list(self.instance.get_run_records(RunsFilter(run_ids=[operation_id]), limit=1))
        if not records or T.TRIGGER not in records[0].dagster_run.tags:  # not a maintenance run
            raise ApiError(404, "NOT_FOUND", f"Operation not found: {operation_id}",
                           {"resourceType": "Operation", "id": operation_id})
        return operation_item(run_facts(self.instance, records[0]), None)

    def table_operations(self, catalog: str, table: TableName, limit: int) -> dict[str, object]:
        """Floe's ``/operations/table/{catalog}/{namespace}/{table}``: the table's newest runs (none for a
        catalog not served here, as Floe's store has none)."""
        items = [] if catalog != self.settings.catalog.name else \
            self.operations(table.qualified, None, None, limit, 0)["operations"]
        return {"operations": items, "total": len(items),
                "table": {"catalog": catalog, "namespace": table.namespace_str, "name": table.name,
                          "qualified": f"{catalog}.{table.namespace_str}.{table.name}"}}

    def stats(self, window: timedelta, now: datetime | None = None) -> dict[str, object]:
        """Floe's StatsResponse over the maintenance runs created in the window (Floe's record counts:
        a failed run that maintained some of its tables is a partial failure)."""
        end = now or utc_now()
        start = end - window
        records = list(self.instance.get_run_records(
            RunsFilter(tags={T.TRIGGER: list(T.TRIGGERS)}, created_after=start)))
        counts = {"SUCCEEDED": 0, "FAILED": 0, "RUNNING": 0, "PARTIAL_FAILURE": 0}
        for record in records:
            status = FLOE_STATUS.get(record.dagster_run.status, "PENDING")
            if status == "FAILED" and run_facts(self.instance, record).tables:
                status = "PARTIAL_FAILURE"
            if status in counts:
                counts[status] += 1
        total = len(records)
        completed = total - counts["RUNNING"]
        return {
            "totalOperations": total, "successCount": counts["SUCCEEDED"], "failedCount": counts["FAILED"],
            "partialFailureCount": counts["PARTIAL_FAILURE"], "runningCount": counts["RUNNING"],
            "noPolicyCount": 0, "noOperationsCount": 0,  # refused before any run: never a run here
            "withFailuresCount": counts["FAILED"] + counts["PARTIAL_FAILURE"], "completedCount": completed,
            "successRate": counts["SUCCEEDED"] * 100.0 / completed if completed else 0.0,
            "windowStart": iso(start), "windowEnd": iso(end), "windowDuration": window_text(window),
        }

    def _trigger_id_key(self, trigger_id: str) -> str:
        """The tag key a trigger's runs carry its id under: runs made before the key moved to the run
        page carry the old one (all runs of one trigger are made by the same version)."""
        if self.instance.get_runs_count(RunsFilter(tags={T.TRIGGER_ID: trigger_id})):
            return T.TRIGGER_ID
        legacy = T.LEGACY_KEYS[T.TRIGGER_ID]
        return legacy if self.instance.get_runs_count(RunsFilter(tags={legacy: trigger_id})) else T.TRIGGER_ID

    def _partial_failures(self, tags: dict[str, Any], qualified: str | None, trigger_id: str | None, limit: int,
                          offset: int) -> dict[str, object]:
        """Floe's PARTIAL_FAILURE: failed runs that maintained some of their tables (a batch where one
        table failed), among the newest MAX_OUTCOME_RUNS failed runs."""
        failed = DAGSTER_STATUSES["FAILED"]
        records = list(self.instance.get_run_records(RunsFilter(tags=tags, statuses=failed), limit=MAX_OUTCOME_RUNS))
        if qualified:
            records = sorted([*records, *self._multi_table_runs(qualified, trigger_id, failed)],
                             key=lambda r: r.create_timestamp, reverse=True)
        partial = [facts for facts in (run_facts(self.instance, record) for record in records) if facts.tables]
        items = [operation_item(facts, qualified) for facts in partial[offset:offset + limit]]
        return {"operations": items, "total": len(partial), "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < len(partial)}

    def _conflicts(self, tags: dict[str, Any], qualified: str | None, trigger_id: str | None, limit: int,
                   offset: int) -> dict[str, object]:
        """Runs in which a table (the ``table`` asked for, when given) lost a commit race, among the
        newest MAX_OUTCOME_RUNS finished runs: the run tag ``dagster/floe.conflicts`` finds them, their
        events say which tables and why."""
        finished = [*DAGSTER_STATUSES["SUCCEEDED"], *DAGSTER_STATUSES["FAILED"]]
        records = list(self.instance.get_run_records(RunsFilter(tags=tags, statuses=finished),
                                                     limit=MAX_OUTCOME_RUNS))
        if qualified:
            records = sorted([*records, *self._multi_table_runs(qualified, trigger_id, finished)],
                             key=lambda r: r.create_timestamp, reverse=True)
        tagged = [record for record in records if record.dagster_run.tags.get(T.CONFLICTS)]
        lost = [facts for facts in (run_facts(self.instance, record) for record in tagged)
                if facts.conflicts and (qualified is None or qualified in facts.conflicts)]
        items = [operation_item(facts, qualified) for facts in lost[offset:offset + limit]]
        return {"operations": items, "total": len(lost), "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < len(lost)}

    def _shadow_decisions(self, qualified: str | None, trigger_id: str | None, limit: int,
                          offset: int) -> dict[str, object]:
        """The shadow policies' recorded decisions (of ``table``, when given), newest first: no run, no
        trigger id; each says what would have run, when (``recordedAt``) and why."""
        if trigger_id:  # a trigger's runs are real runs: no shadow decision belongs to one
            return {"operations": [], "total": 0, "limit": limit, "offset": offset, "hasMore": False}
        total, rows = self.coordination.shadow_rows(qualified, limit, offset)
        items = [shadow_item(row) for row in rows]
        return {"operations": items, "total": total, "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < total}

    def _multi_table_runs(self, qualified: str, trigger_id: str | None, statuses) -> list:
        """Runs that maintained the table without being tagged with it (a backfill over a namespace
        job): finished ones from the coordination database's outcomes, running ones by asset."""
        run_ids = {row["run_id"] for row in self.coordination.outcomes_for(qualified)[-MAX_OUTCOME_RUNS:]}
        found = list(self.instance.get_run_records(RunsFilter(run_ids=sorted(run_ids)))) if run_ids else []
        table = TableName.parse(qualified, self.settings.catalog.name)
        key = asset_key_for(table)
        for record in self.instance.get_run_records(RunsFilter(statuses=IN_FLIGHT_STATUSES)):
            selection = record.dagster_run.asset_selection
            if selection and key in selection:
                found.append(record)
        seen: set[str] = set()
        extra = []
        for record in found:
            run = record.dagster_run
            if run.run_id in seen or run.tags.get(T.TABLE) == qualified:
                continue  # counted by the tag query
            seen.add(run.run_id)
            if trigger_id and T.tag_value(run.tags, T.TRIGGER_ID) != trigger_id:
                continue
            if statuses and run.status not in statuses:
                continue
            if T.TRIGGER not in run.tags:
                continue
            extra.append(record)
        return extra

