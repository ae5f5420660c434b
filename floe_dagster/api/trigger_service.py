"""``POST /api/v1/maintenance/trigger``, independent of HTTP: the ``maintenance`` router's service.

The manual trigger queues runs exactly as Dagit does (:func:`floe_dagster.launching.submit.submit_runs`): one
run per operation, in Floe's order, sharing a ``dagster/floe.trigger-id``, tagged ``floe/trigger=manual``
and ``dagster/floe.actor`` (the API key's name). The daemon executes them; the table's tag-concurrency limit
(one run per ``floe/table``) and their equal priority run them one after another in that order. A
watcher (api/trigger_watch.py) follows each trigger's runs and cancels the ones still queued once one fails.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime
from typing import Any, Callable

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.api.operation_items import CONFLICT
from floe_dagster.api.run_facts import run_facts
from floe_dagster.api.table_names import table_name
from floe_dagster.api.timestamps import iso, utc_now
from floe_dagster.api.trigger_watch import WATCH_POLL_S, TriggerWatch
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import table_lock_name
from floe_dagster.coordination.runs import IN_FLIGHT_STATUSES, mark_dead_runs, runs_in_flight
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_tags import Approval, Origin
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.errors import ApiError, CatalogUnavailable, LaunchFailed
from floe_dagster.launching.manual import PreparedTrigger, prepare_trigger, submit_queued
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

API_REASON = "manual trigger from the HTTP API"


class TriggerService:
    """A table's manual trigger: checked, refused while the table is busy, queued, then followed."""

    def __init__(self, settings: Settings, instance: DagsterInstance, coordination: Coordination,
                 stopping: threading.Event):
        self.settings = settings
        self.instance = instance
        self.coordination = coordination
        # Set when the server stops: a ?wait=true trigger answers at once (202, the runs stay queued)
        # instead of holding the shutdown for up to its timeout.
        self.stopping = stopping
        self._guard = threading.Lock()
        self._table_locks: dict[str, threading.Lock] = {}
        self._watches: dict[str, TriggerWatch] = {}

    def _table_lock(self, qualified: str) -> threading.Lock:
        with self._guard:
            return self._table_locks.setdefault(qualified, threading.Lock())

    def busy(self, table: TableName) -> dict[str, object] | None:
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

    def trigger(self, body: dict[str, Any], actor: str, wait: bool, timeout_s: float,
                approval: Approval | None = None, confirm: Callable[[PreparedTrigger, str], None] | None = None,
                ) -> tuple[int, dict[str, object], dict[str, str]]:
        """Queue a table's operations (launching.manual, as ``floe-dagster trigger`` runs them in process),
        then follow the runs; ``wait`` waits up to ``timeout_s`` for them to finish. An agent's approved
        proposal (``floe-dagster mcp``) runs with trigger ``agent`` and its ``approval``; ``confirm`` is
        called under the table's lock, after the busy check and just before anything is queued, with what
        would run and the trigger id (it raises an ApiError to refuse)."""
        prepared = self.prepare(body)
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
            if confirm is not None:
                confirm(prepared, reply.trigger_id)
            origin = Origin("agent" if approval else "manual", body.get("reason") or API_REASON, actor,
                            reply.trigger_id, approval)
            run_ids = self._queue(prepared, origin)
        watch = self._watch(reply.trigger_id, run_ids)
        no_daemon = not self.queue_daemon_live()
        if wait and not no_daemon:
            self._wait(watch, timeout_s)
        return self._answer(reply, run_ids, wait, no_daemon, timeout_s)

    def prepare(self, body: dict[str, Any]) -> PreparedTrigger:
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
    def _dry_run(reply: "TriggerReply", to_run: list[Operation]) -> dict[str, object]:
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
                ) -> tuple[int, dict[str, object], dict[str, str]]:
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


def _result(operation: str, status: str, error: str | None = None) -> dict[str, object]:
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

    def body(self, status: str, message: str, results: list[dict[str, object]], end: str | None = None,
             dry_run: bool = False) -> dict[str, object]:
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
