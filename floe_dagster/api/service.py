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
import threading
import time
import uuid
from datetime import datetime
from typing import Any

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.api.regex_matching import regex_matches
from floe_dagster.api.run_facts import DAGSTER_STATUSES, RunFacts, run_facts
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
from floe_dagster.errors import ApiError, LaunchFailed
from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.launching.manual import prepare_trigger, submit_queued
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
# A per-operation result whose table lost a commit race: the run succeeded, the table was not maintained.
CONFLICT = "CONFLICT"
# A shadow policy's recorded decisions (the ledger's shadow rows): what would have run, never a run.
SHADOW = "SHADOW"


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
        tables = list_tables(open_catalog(self.settings.catalog))
        if parsed.regex is None:
            matched = [t.qualified for t in tables if parsed.matches(t)]
        else:
            matched = regex_matches(text, tables)
        if matched:
            return {"valid": True, "message": f"Pattern matches {len(matched)} table(s)", "matchedTables": matched,
                    "matchCount": len(matched)}
        exact = parsed.regex is None and "*" not in text and "?" not in text
        if exact:
            return {"valid": False, "message": f"Table not found: {text}", "matchedTables": [], "matchCount": 0}
        return {"valid": True, "message": f"Warning: No tables currently match pattern '{text}'", "matchedTables": [],
                "matchCount": 0}

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
            "runId": facts.run_id,
            "jobName": facts.job_name,
            "table": own_table,
            "operation": tags.get(T.OPERATION) or tags.get("dagster/partition"),
            "status": facts.status,
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
        settings = self.settings
        if body["catalog"] != settings.catalog.name:
            raise ApiError(404, "TABLE_NOT_FOUND",
                           f"catalog '{body['catalog']}' is not served here (this server maintains "
                           f"catalog '{settings.catalog.name}')", {"catalog": body["catalog"]})
        table = table_name(settings, body["namespace"], body["table"])
        operations = [Operation(name) for name in body.get("operations") or []]
        # A blank policyName ("" or spaces) means no specific policy, as in Floe.
        policy_name = (body.get("policyName") or "").strip() or None
        prepared = prepare_trigger(settings, table, operations or None, policy_name, queued=True)
        policy, to_run = prepared.policy, prepared.to_run
        wanted = [*to_run, *prepared.skipped]
        start = utc_now()
        trigger_id = str(uuid.uuid4())
        skipped_results = [
            {"operationType": op.value, "status": "SKIPPED", "runId": None, "startTime": None, "endTime": None,
             "durationMs": None, "metrics": {}, "errorMessage": why, "conflict": None}
            for op, why in prepared.skipped.items()
        ]

        def response(status: str, message: str, results: list[dict[str, Any]], end: str | None = None,
                     dry_run: bool = False) -> dict[str, Any]:
            ordered = sorted([*results, *skipped_results], key=lambda r: Operation(r["operationType"]).order)
            duration = None
            if end is not None:
                duration = int(round((datetime.fromisoformat(end) - start).total_seconds() * 1000))
            conflicts = [{"operationType": r["operationType"], "runId": r["runId"], "conflict": r["conflict"]}
                         for r in ordered if r["status"] == CONFLICT]
            return {"orchestrationId": trigger_id, "status": status, "table": table.qualified,
                    "policyName": policy.name, "startTime": iso(start), "endTime": end, "durationMs": duration,
                    "operationResults": ordered, "message": message, "dryRun": dry_run, "conflicts": conflicts}

        if not to_run:
            why = (f"policy '{policy.name}' configures no operation for this table" if not wanted
                   else "every requested operation deletes files and the table sets gc.enabled=false")
            return 200, response("NO_OPERATIONS", why, [], dry_run=bool(body.get("dryRun"))), {}
        with self._table_lock(table.qualified):
            busy = self.busy(table)
            if busy:
                what = (f"run {busy['runId']} ({busy['runStatus']})" if busy.get("runId")
                        else f"the holder of lock {busy['lock']}")
                raise ApiError(409, "TABLE_BUSY", f"{table.qualified} is being maintained by {what}", busy)
            if body.get("dryRun"):
                results = [{"operationType": op.value, "status": "WOULD_RUN", "runId": None, "startTime": None,
                            "endTime": None, "durationMs": None, "metrics": {}, "errorMessage": None,
                            "conflict": None} for op in to_run]
                names = ", ".join(op.value for op in to_run)
                return 200, response("DRY_RUN", f"Would queue {len(to_run)} run(s): {names}; nothing was launched",
                                     results, dry_run=True), {}
            origin = Origin("manual", body.get("reason") or API_REASON, actor, trigger_id)
            try:
                run_ids = submit_queued(settings, prepared, origin, self.instance)
            except LaunchFailed as exc:
                raise ApiError(503, "LAUNCH_FAILED", f"the runs could not be queued: {exc}",
                               {"table": table.qualified}) from None
        watch = TriggerWatch(self.instance, trigger_id, run_ids).start()
        with self._guard:
            self._watches = {k: w for k, w in self._watches.items()
                             if w.finished_at is None or time.monotonic() - w.finished_at < 3600}
            self._watches[trigger_id] = watch
        follow = f"/api/v1/operations?triggerId={trigger_id}"
        no_daemon = not self.queue_daemon_live()
        if wait and not no_daemon:
            deadline = time.monotonic() + timeout_s
            while not watch.done.is_set() and not self.stopping.is_set() and time.monotonic() < deadline:
                watch.done.wait(min(WATCH_POLL_S, max(0.0, deadline - time.monotonic())))
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
            return 202, response(status, message, results), {"Location": follow}
        messages = {"SUCCESS": "All operations completed successfully", "PARTIAL_FAILURE": "Some operations failed",
                    "FAILED": "Maintenance failed", "CANCELLED": "The runs were cancelled"}
        message = messages[status]
        lost = [r["operationType"] for r in results if r["status"] == CONFLICT]
        if lost:
            message = (("All operations completed" if status == "SUCCESS" else message) +
                       f"; {', '.join(lost)} lost a commit race to another writer and changed nothing (see "
                       "conflicts): not a failure (no backoff); the automation runs it again when it is due, 5 to 15 "
                       "minutes after the race at the earliest")
        return 200, response(status, message, results, end), {"Location": follow}

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

