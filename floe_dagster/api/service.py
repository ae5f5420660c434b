"""What each endpoint does, independent of HTTP. A refusal is an :class:`~floe_dagster.errors.ApiError`
with Floe's status code and a machine-readable code; the other errors (an unknown table, the catalog
down, invalid policy files...) reach the application's exception handlers (api/error_handlers.py).

The manual trigger queues runs exactly as Dagit does (:func:`floe_dagster.launching.submit.submit_runs`): one
run per operation, in Floe's order, sharing a ``dagster/floe.trigger-id``, tagged ``floe/trigger=manual``
and ``dagster/floe.actor`` (the API key's name). The daemon executes them; the table's tag-concurrency limit
(one run per ``floe/table``) and their equal priority run them one after another in that order. A
watcher (api/trigger_watch.py) follows each trigger's runs and cancels the ones still queued once one fails.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.api.catalog_reads import CatalogReads
from floe_dagster.api.regex_matching import regex_matches
from floe_dagster.api.run_facts import DAGSTER_STATUSES, FLOE_STATUS, RunFacts, run_facts
from floe_dagster.api.table_names import table_name
from floe_dagster.api.timestamps import iso, utc_now
from floe_dagster.api.trigger_watch import WATCH_POLL_S, TriggerWatch
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.coordination.locks import table_lock_name
from floe_dagster.coordination.runs import IN_FLIGHT_STATUSES, mark_dead_runs, runs_in_flight
from floe_dagster.core import run_tags as T
from floe_dagster.core.operations import Operation
from floe_dagster.core.patterns import TablePattern
from floe_dagster.core.run_tags import Origin
from floe_dagster.core.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.errors import ApiError, CatalogUnavailable, LaunchFailed
from floe_dagster.iceberg.catalog import list_tables, load_table, open_catalog
from floe_dagster.launching.manual import PreparedTrigger, prepare_trigger, submit_queued
from floe_dagster.reports.explain import explain_table
from floe_dagster.reports.health_report import floe_health_json, health_history, health_report
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

API_REASON = "manual trigger from the HTTP API"
MAX_OUTCOME_RUNS = 1000

# Floe's record statuses beside ours (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, and CONFLICT: the
# runs in which a table lost a commit race, a filter only, as PARTIAL_FAILURE is; docs/http-api.md).
_NEVER_A_RUN = {"NO_POLICY", "NO_OPERATIONS"}
_RECORD_STATUSES = ["PENDING", "RUNNING", "SUCCESS", "PARTIAL_FAILURE", "FAILED", "NO_POLICY", "NO_OPERATIONS",
                    "SUCCEEDED", "CANCELLED", "CONFLICT", "SHADOW"]
# An operation record's status as Floe words it: Floe has no cancelled record (a cancelled run did not
# maintain its table, so it is FAILED there; runStatus still says CANCELED).
FLOE_RECORD_STATUS = {"SUCCEEDED": "SUCCESS", "CANCELLED": "FAILED"}
# A per-operation result whose table lost a commit race: the run succeeded, the table was not maintained.
CONFLICT = "CONFLICT"
# A shadow policy's recorded decisions (the ledger's shadow rows): what would have run, never a run.
SHADOW = "SHADOW"


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


_STATUS_DESCRIPTIONS = {"PENDING": "Queued for the daemon", "RUNNING": "Running", "SUCCEEDED": "Completed successfully",
                        "FAILED": "Failed", "CANCELLED": "Cancelled"}


def _floe_record_keys(facts: RunFacts, table: str | None) -> dict[str, Any]:
    """Floe's OperationResponse keys for one run (ours follow beside them; ``status`` stays the run's own)."""
    name = None
    if table:
        try:
            name = TableName.parse(table, table.split(".", 1)[0])
        except ValueError:
            name = None
    numbers = facts.tables.get(table, {}) if table else {}
    operation = facts.tags.get(T.OPERATION) or facts.tags.get("dagster/partition")
    succeeded = facts.status == "SUCCEEDED"
    return {
        "id": facts.run_id,
        "catalog": name.catalog if name else None,
        "namespace": name.namespace_str if name else None,
        "tableName": name.name if name else None,
        "qualifiedTableName": table,
        "policyId": None,
        "engineType": "SPARK",
        "executionId": facts.run_id,
        "scheduleId": None,
        "policyVersion": None,
        "statusDescription": _STATUS_DESCRIPTIONS.get(facts.status, facts.status),
        "startedAt": iso(facts.start) or iso(facts.created),
        "completedAt": iso(facts.end),
        "results": {
            "operations": [{"operationType": operation, "status": facts.status, "metrics": numbers,
                            "errorMessage": facts.error}] if operation else [],
            "successCount": int(succeeded), "failedCount": int(facts.status == "FAILED"), "skippedCount": 0,
            "totalDurationMs": facts.duration_ms or 0,
        },
        "normalizedMetrics": numbers,
    }


def _exact(parsed: TablePattern, text: str) -> bool:
    """A pattern naming one table (no wildcard, no regex): matching nothing is an error, not a warning."""
    return parsed.regex is None and "*" not in text and "?" not in text


def _record_status(status: str | None) -> str | None:
    """A ``status`` filter in any case, Floe's SUCCESS read as SUCCEEDED; 400 with Floe's message otherwise."""
    if status is None or not status.strip():
        return None
    upper = status.strip().upper()
    if upper not in _RECORD_STATUSES:
        raise ApiError(400, "VALIDATION_FAILED", f"Invalid status: {status}. Valid values: "
                       f"[{', '.join(_RECORD_STATUSES)}]", {"field": "status"})
    return "SUCCEEDED" if upper == "SUCCESS" else upper


class ApiService:
    def __init__(self, settings: Settings, instance: DagsterInstance):
        self.settings = settings
        self.instance = instance
        self.coordination = CoordinationResource.from_settings(settings).coordination
        self.catalog_reads = CatalogReads(settings, instance)
        self._guard = threading.Lock()
        self._table_locks: dict[str, threading.Lock] = {}
        self._watches: dict[str, TriggerWatch] = {}
        # Set when the server stops: a ?wait=true trigger answers at once (202, the runs stay queued)
        # instead of holding the shutdown for up to its timeout.
        self.stopping = threading.Event()

    # -- reads --------------------------------------------------------------------------------------

    def trigger_status(self, namespace: str, table: str, at: datetime | None) -> dict[str, Any]:
        name = table_name(self.settings, namespace, table)
        report = explain_table(self.settings, self.coordination, name.qualified, at or utc_now(), self.instance)
        return json.loads(json.dumps(report, default=str))  # exactly what `explain --json` prints

    def health(self, namespace: str, table: str, tier: str, now: datetime | None = None) -> dict[str, Any]:
        name = table_name(self.settings, namespace, table)
        now = now or utc_now()
        report = health_report(self.settings, self.coordination, name, now, tier=tier)
        return json.loads(json.dumps(floe_health_json(report), default=str))  # Floe's shape, ours beside

    def health_history(self, namespace: str, table: str, limit: int) -> dict[str, Any]:
        name = table_name(self.settings, namespace, table)
        history = health_history(self.settings, self.instance, name, limit)
        return json.loads(json.dumps(history, default=str))

    def validate_pattern(self, pattern: str) -> dict[str, Any]:
        text = pattern.strip()
        if not text:
            raise ApiError(400, "VALIDATION_FAILED", "Pattern is required", {"field": "pattern"})
        try:
            parsed = TablePattern.parse(text)
        except ValueError as exc:
            raise ApiError(400, "INVALID_PATTERN", f"Invalid pattern: {exc}", {"pattern": text}) from None
        matched = self._matching_tables(parsed, text)
        if matched:
            return {"valid": True, "message": f"Pattern matches {len(matched)} table(s)", "matchedTables": matched,
                    "matchCount": len(matched)}
        if _exact(parsed, text):
            return {"valid": False, "message": f"Table not found: {text}", "matchedTables": [], "matchCount": 0}
        return {"valid": True, "message": f"Warning: No tables currently match pattern '{text}'", "matchedTables": [],
                "matchCount": 0}

    def _matching_tables(self, parsed: TablePattern, text: str) -> list[str]:
        """The catalog's tables the pattern matches, listed now (CatalogUnavailable when it is down)."""
        tables = list_tables(open_catalog(self.settings.catalog))
        if parsed.regex is None:
            return [t.qualified for t in tables if parsed.matches(t)]
        return regex_matches(text, tables)

    def check_policy_tables(self, policy) -> None:
        """Floe's check before it stores a policy: the catalog must answer (400 when down), and an exact
        pattern must name a table that exists (400); a wildcard matching nothing is allowed, as in Floe."""
        text = policy.table_pattern.text
        try:
            matched = self._matching_tables(policy.table_pattern, text)
        except CatalogUnavailable:
            log.warning("policy '%s' refused: the catalog cannot be reached to check its pattern", policy.name)
            raise ApiError(400, "VALIDATION_FAILED", "Catalog unavailable - cannot validate table pattern",
                           {"error": "Catalog connection failed. Check catalog configuration."}) from None
        if not matched and _exact(policy.table_pattern, text):
            raise ApiError(400, "VALIDATION_FAILED", f"Table not found: {text}",
                           {"pattern": text, "suggestion": "Verify the table exists in the catalog"})

    def table_location(self, table: TableName) -> str:
        """A table's location from its metadata (UnknownTable, CatalogUnavailable): what a policy's absolute
        location is checked against before it is written (core/envelope.py)."""
        return load_table(open_catalog(self.settings.catalog), table).location()

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
        items = [self._operation_item(run_facts(self.instance, record), qualified) for record in page]
        return {"operations": items, "total": total, "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < total}

    def operation(self, operation_id: str) -> dict[str, Any]:
        """Floe's ``/operations/{id}``: one maintenance run by its run id (Floe's ids are UUIDs, as run ids)."""
        try:
            uuid.UUID(operation_id)
        except ValueError:
            raise ApiError(400, "VALIDATION_FAILED", f"Invalid UUID: {operation_id}", {"id": operation_id}) from None
        records = list(self.instance.get_run_records(RunsFilter(run_ids=[operation_id]), limit=1))
        if not records or T.TRIGGER not in records[0].dagster_run.tags:  # not a maintenance run
            raise ApiError(404, "NOT_FOUND", f"Operation not found: {operation_id}",
                           {"resourceType": "Operation", "id": operation_id})
        return self._operation_item(run_facts(self.instance, records[0]), None)

    def table_operations(self, catalog: str, table: TableName, limit: int) -> dict[str, Any]:
        """Floe's ``/operations/table/{catalog}/{namespace}/{table}``: the table's newest runs (none for a
        catalog not served here, as Floe's store has none)."""
        items = [] if catalog != self.settings.catalog.name else \
            self.operations(table.qualified, None, None, limit, 0)["operations"]
        return {"operations": items, "total": len(items),
                "table": {"catalog": catalog, "namespace": table.namespace_str, "name": table.name,
                          "qualified": f"{catalog}.{table.namespace_str}.{table.name}"}}

    def stats(self, window: timedelta, now: datetime | None = None) -> dict[str, Any]:
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
                          offset: int) -> dict[str, Any]:
        """Floe's PARTIAL_FAILURE: failed runs that maintained some of their tables (a batch where one
        table failed), among the newest MAX_OUTCOME_RUNS failed runs."""
        failed = DAGSTER_STATUSES["FAILED"]
        records = list(self.instance.get_run_records(RunsFilter(tags=tags, statuses=failed), limit=MAX_OUTCOME_RUNS))
        if qualified:
            records = sorted([*records, *self._multi_table_runs(qualified, trigger_id, failed)],
                             key=lambda r: r.create_timestamp, reverse=True)
        partial = [facts for facts in (run_facts(self.instance, record) for record in records) if facts.tables]
        items = [self._operation_item(facts, qualified) for facts in partial[offset:offset + limit]]
        return {"operations": items, "total": len(partial), "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < len(partial)}

    def _conflicts(self, tags: dict[str, Any], qualified: str | None, trigger_id: str | None, limit: int,
                   offset: int) -> dict[str, Any]:
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
        items = [self._operation_item(facts, qualified) for facts in lost[offset:offset + limit]]
        return {"operations": items, "total": len(lost), "limit": limit, "offset": offset,
                "hasMore": offset + len(items) < len(lost)}

    def _shadow_decisions(self, qualified: str | None, trigger_id: str | None, limit: int,
                          offset: int) -> dict[str, Any]:
        """The shadow policies' recorded decisions (of ``table``, when given), newest first: no run, no
        trigger id; each says what would have run, when (``recordedAt``) and why."""
        if trigger_id:  # a trigger's runs are real runs: no shadow decision belongs to one
            return {"operations": [], "total": 0, "limit": limit, "offset": offset, "hasMore": False}
        total, rows = self.coordination.shadow_rows(qualified, limit, offset)
        items = [{
            "runId": None, "jobName": None, "table": row.table_name, "operation": row.operation.value,
            "status": SHADOW, "runStatus": None, "trigger": row.trigger, "triggerId": None, "policyName": None,
            "actor": None, "reason": row.reason, "createdAt": iso(row.admitted_at), "startTime": None,
            "endTime": None, "durationMs": None, "metrics": {}, "tables": [], "errorMessage": None,
            "conflict": None, "conflicts": [], "shadow": True, "recordedAt": iso(row.admitted_at),
            "slot": row.slot, "debtScore": row.debt_score, "estimatedBytes": row.estimated_bytes,
        } for row in rows]
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

    @staticmethod
    def _operation_item(facts: RunFacts, table: str | None) -> dict[str, Any]:
        tags = facts.tags
        own_table = tags.get(T.TABLE) or table
        if own_table is None and len(facts.tables) == 1:
            own_table = next(iter(facts.tables))
        return {
            **_floe_record_keys(facts, own_table),
            "runId": facts.run_id,
            "jobName": facts.job_name,
            "table": own_table,
            "operation": tags.get(T.OPERATION) or tags.get("dagster/partition"),
            # Floe's record status (a script checks SUCCESS); the run's own is runStatus.
            "status": FLOE_RECORD_STATUS.get(facts.status, facts.status),
            "runStatus": facts.dagster_status.value,
            "trigger": tags.get(T.TRIGGER),
            "triggerId": T.tag_value(tags, T.TRIGGER_ID),
            "policyName": tags.get(T.POLICY) or None,
            "actor": T.tag_value(tags, T.ACTOR),
            "reason": tags.get(T.REASON),
            "createdAt": iso(facts.created),
            "startTime": iso(facts.start),
            "endTime": iso(facts.end),
            "durationMs": facts.duration_ms,
            "metrics": facts.tables.get(own_table, {}) if own_table else {},
            "tables": [{"table": name, "metrics": numbers} for name, numbers in sorted(facts.tables.items())],
            "errorMessage": facts.error,
            # Lost commit races: `table`'s (its message naming the commit that won), and every table's.
            "conflict": facts.conflicts.get(own_table) if own_table else None,
            "conflicts": [{"table": name, "conflict": message} for name, message in sorted(facts.conflicts.items())],
            "shadow": False,  # a run; ?status=SHADOW lists the shadow policies' decisions, never runs
        }

    def readiness(self) -> tuple[bool, list[dict[str, str]]]:
        checks = []
        try:
            self.instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus.QUEUED]))
            checks.append({"name": "dagster-instance", "status": "UP"})
        except Exception:
            log.exception("health: the Dagster instance cannot be read")
            checks.append({"name": "dagster-instance", "status": "DOWN"})
        try:
            open_catalog(self.settings.catalog).list_namespaces()
            checks.append({"name": "catalog", "status": "UP"})
        except Exception:
            log.exception("health: the catalog cannot be reached")
            checks.append({"name": "catalog", "status": "DOWN"})
        return all(c["status"] == "UP" for c in checks), checks

    # -- the trigger -----------------------------------------------------------------------------------

    def _table_lock(self, qualified: str) -> threading.Lock:
        with self._guard:
            return self._table_locks.setdefault(qualified, threading.Lock())

    def busy(self, table: TableName) -> dict[str, Any] | None:
        """The run (or the lock holder) maintaining the table now, or None."""
        key = asset_key_for(table)
        in_flight = runs_in_flight(self.instance)
        dead = set(mark_dead_runs(self.instance, self.coordination, in_flight, utc_now()))
        matching = []
        for record in self.instance.get_run_records(RunsFilter(statuses=IN_FLIGHT_STATUSES)):
            run = record.dagster_run
            if run.run_id in dead:
                continue
            if run.tags.get(T.TABLE) == table.qualified or (run.asset_selection and key in run.asset_selection):
                matching.append(run)
        if matching:
            # The running one, else the queued one that runs first (records come newest first).
            running = [r for r in matching if r.status in (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED)]
            run = (running or matching[::-1])[0]
            return {"table": table.qualified, "runId": run.run_id, "runStatus": run.status.value,
                    "operation": run.tags.get(T.OPERATION) or run.tags.get("dagster/partition"),
                    "trigger": run.tags.get(T.TRIGGER), "triggerId": T.tag_value(run.tags, T.TRIGGER_ID)}
        lock = table_lock_name(table)
        if not self.coordination.locks.is_free(lock):
            return {"table": table.qualified, "runId": None, "lock": lock}
        return None

    def trigger(self, body: dict[str, Any], actor: str, wait: bool, timeout_s: float
                ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Queue a table's operations (launching.manual, as ``floe-dagster trigger`` runs them in process),
        then follow the runs; ``wait`` waits up to ``timeout_s`` for them to finish."""
        prepared = self._prepare_trigger(body)
        reply = TriggerReply(prepared)
        dry_run = bool(body.get("dryRun"))
        if not prepared.to_run:
            why = (f"policy '{prepared.policy.name}' configures no operation for this table" if not prepared.skipped
                   else "every requested operation deletes files and the table sets gc.enabled=false")
            return 200, reply.body("NO_OPERATIONS", why, [], dry_run=dry_run), {}
        with self._table_lock(prepared.table.qualified):
            self._refuse_if_busy(prepared.table)
            if dry_run:
                return 200, self._dry_run(reply, prepared.to_run), {}
            origin = Origin("manual", body.get("reason") or API_REASON, actor, reply.trigger_id)
            run_ids = self._queue(prepared, origin)
        watch = self._watch(reply.trigger_id, run_ids)
        no_daemon = not self.queue_daemon_live()
        if wait and not no_daemon:
            self._wait(watch, timeout_s)
        return self._answer(reply, run_ids, wait, no_daemon, timeout_s)

    def _prepare_trigger(self, body: dict[str, Any]) -> PreparedTrigger:
        """The checked trigger: the catalog served here, the table, its effective policy and what runs.
        The catalog down is Floe's 500 (its trigger answers any failure so), not our usual 503."""
        settings = self.settings
        if body["catalog"] != settings.catalog.name:
            raise ApiError(404, "TABLE_NOT_FOUND",
                           f"catalog '{body['catalog']}' is not served here (this server maintains "
                           f"catalog '{settings.catalog.name}')", {"catalog": body["catalog"]})
        table = table_name(settings, body["namespace"], body["table"])
        operations = [Operation(name) for name in body.get("operations") or []]
        # A blank policyName ("" or spaces) means no specific policy, as in Floe.
        policy_name = (body.get("policyName") or "").strip() or None
        try:
            return prepare_trigger(settings, table, operations or None, policy_name, queued=True)
        except CatalogUnavailable as exc:
            raise ApiError(500, "CATALOG_UNAVAILABLE", f"Internal error: {exc}", {"table": table.qualified}) from None

    def _refuse_if_busy(self, table: TableName) -> None:
        busy = self.busy(table)
        if busy:
            what = (f"run {busy['runId']} ({busy['runStatus']})" if busy.get("runId")
                    else f"the holder of lock {busy['lock']}")
            raise ApiError(409, "TABLE_BUSY", f"{table.qualified} is being maintained by {what}", busy)

    @staticmethod
    def _dry_run(reply: "TriggerReply", to_run: list[Operation]) -> dict[str, Any]:
        results = [_result(op.value, "WOULD_RUN") for op in to_run]
        names = ", ".join(op.value for op in to_run)
        return reply.body("DRY_RUN", f"Would queue {len(to_run)} run(s): {names}; nothing was launched", results,
                          dry_run=True)

    def _queue(self, prepared: PreparedTrigger, origin: Origin) -> list[str]:
        try:
            return submit_queued(self.settings, prepared, origin, self.instance)
        except LaunchFailed as exc:
            raise ApiError(503, "LAUNCH_FAILED", f"the runs could not be queued: {exc}",
                           {"table": prepared.table.qualified}) from None

    def _watch(self, trigger_id: str, run_ids: list[str]) -> TriggerWatch:
        """Follow the runs (cancelling the queued ones after a failure); watches finished an hour ago go."""
        watch = TriggerWatch(self.instance, trigger_id, run_ids).start()
        with self._guard:
            self._watches = {k: w for k, w in self._watches.items()
                             if w.finished_at is None or time.monotonic() - w.finished_at < 3600}
            self._watches[trigger_id] = watch
        return watch

    def _wait(self, watch: TriggerWatch, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not watch.done.is_set() and not self.stopping.is_set() and time.monotonic() < deadline:
            watch.done.wait(min(WATCH_POLL_S, max(0.0, deadline - time.monotonic())))

    def _answer(self, reply: "TriggerReply", run_ids: list[str], wait: bool, no_daemon: bool, timeout_s: float
                ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """202 while runs are queued or running (saying why it did not wait), else 200 with the outcome."""
        follow = f"/api/v1/operations?triggerId={reply.trigger_id}"
        results, status, end = self._results(run_ids)
        if status in ("PENDING", "RUNNING"):
            if self.stopping.is_set():
                message = (f"the API server is stopping: the {len(run_ids)} run(s) stay queued for the daemon; "
                           f"GET {follow} follows them")
            elif no_daemon:
                message = (f"{len(run_ids)} run(s) queued, but no dagster-daemon is running for this instance: "
                           f"they stay queued until one starts (`dagster-daemon run`); GET {follow} follows them")
            elif not wait:
                message = f"{len(run_ids)} run(s) queued for the daemon; GET {follow} follows them"
            else:
                message = f"still {status.lower()} after {timeout_s:g} s; GET {follow} follows the runs"
            return 202, reply.body(status, message, results), {"Location": follow}
        messages = {"SUCCESS": "All operations completed successfully", "PARTIAL_FAILURE": "Some operations failed",
                    "FAILED": "Maintenance failed", "CANCELLED": "The runs were cancelled"}
        message = messages[status]
        lost = [r["operationType"] for r in results if r["status"] == CONFLICT]
        if lost:
            message = (("All operations completed" if status == "SUCCESS" else message) +
                       f"; {', '.join(lost)} lost a commit race to another writer and changed nothing (see "
                       "conflicts): not a failure (no backoff); the automation runs it again when it is due, 5 to 15 "
                       "minutes after the race at the earliest")
        return 200, reply.body(status, message, results, end), {"Location": follow}

    def queue_daemon_live(self) -> bool:
        """Whether a dagster-daemon dequeues this instance's runs (a heartbeat within two minutes);
        True when the instance does not queue runs or the heartbeats cannot be read."""
        from dagster._daemon.controller import get_daemon_statuses
        from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

        kind = QueuedRunCoordinatorDaemon.daemon_type()
        try:
            status = get_daemon_statuses(self.instance, [kind], heartbeat_tolerance_seconds=90,
                                         ignore_errors=True)[kind]
        except Exception:  # pragma: no cover - a read failure must not fail a trigger already queued
            log.exception("the daemon heartbeats cannot be read")
            return True
        return status.healthy is not False

    def _results(self, run_ids: list[str]) -> tuple[list[dict[str, Any]], str, str | None]:
        records = {r.dagster_run.run_id: r for r in self.instance.get_run_records(RunsFilter(run_ids=run_ids))}
        results = []
        for run_id in run_ids:
            facts = run_facts(self.instance, records[run_id])
            op = facts.tags.get(T.OPERATION, "")
            table = facts.tags.get(T.TABLE, "")
            conflict = facts.conflicts.get(table) if facts.status == "SUCCEEDED" else None
            results.append({
                "operationType": op, "status": CONFLICT if conflict is not None else facts.status, "runId": run_id,
                "startTime": iso(facts.start), "endTime": iso(facts.end), "durationMs": facts.duration_ms,
                "metrics": facts.tables.get(table, {}), "errorMessage": facts.error, "conflict": conflict,
            })
        statuses = [r["status"] for r in results]
        if any(s in ("PENDING", "RUNNING") for s in statuses):
            return results, "RUNNING" if "RUNNING" in statuses else "PENDING", None
        # A lost race completed without failing and changed nothing, as a run with nothing to do does:
        # it counts with the successes for Floe's record status (docs/http-api.md, "Lost commit races").
        completed, failed = statuses.count("SUCCEEDED") + statuses.count(CONFLICT), statuses.count("FAILED")
        status = ("PARTIAL_FAILURE" if completed and failed else "FAILED" if failed
                  else "SUCCESS" if completed else "CANCELLED")
        ends = [r["endTime"] for r in results if r["endTime"]]
        return results, status, max(ends) if ends else iso(utc_now())



def _result(operation: str, status: str, error: str | None = None) -> dict[str, Any]:
    """A per-operation result that has no run (yet): skipped, or what a dry run would queue."""
    return {"operationType": operation, "status": status, "runId": None, "startTime": None, "endTime": None,
            "durationMs": None, "metrics": {}, "errorMessage": error, "conflict": None}


class TriggerReply:
    """A trigger's answer in Floe's shape: one trigger id and start time, the skipped operations (with
    why) among the results, in Floe's operation order."""

    def __init__(self, prepared: PreparedTrigger):
        self.prepared = prepared
        self.trigger_id = str(uuid.uuid4())
        self.start = utc_now()
        self.skipped = [_result(op.value, "SKIPPED", why) for op, why in prepared.skipped.items()]

    def body(self, status: str, message: str, results: list[dict[str, Any]], end: str | None = None,
             dry_run: bool = False) -> dict[str, Any]:
        ordered = sorted([*results, *self.skipped], key=lambda r: Operation(r["operationType"]).order)
        duration = None
        if end is not None:
            duration = int(round((datetime.fromisoformat(end) - self.start).total_seconds() * 1000))
        conflicts = [{"operationType": r["operationType"], "runId": r["runId"], "conflict": r["conflict"]}
                     for r in ordered if r["status"] == CONFLICT]
        return {"orchestrationId": self.trigger_id, "status": status, "table": self.prepared.table.qualified,
                "policyName": self.prepared.policy.name, "startTime": iso(self.start), "endTime": end,
                "durationMs": duration, "operationResults": ordered, "message": message, "dryRun": dry_run,
                "conflicts": conflicts}
