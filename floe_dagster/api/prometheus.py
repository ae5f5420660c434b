"""``GET /metrics``: a Prometheus collector read at scrape time, never from a new plan.

Its sources, a few aggregate queries each (``GROUP BY``: no Python loop over tables):

- the coordination database: ``floe_outcomes`` (one row per table a run maintained: executions, compute and benefit,
  durations, bytes rewritten, failures by kind) and ``floe_ledger`` (the last day's admissions with
  their run, read from the day's first row by id: trigger-to-run latency; the last day's shadow
  rows by operation: what shadow policies would have run);
- the Dagster instance's run storage: floe runs queued and running, manual-trigger runs by status,
  the last day's runs (queue wait), and the debt-score sensor's last-tick summary per scope in its
  key-value store (:mod:`floe_dagster.scheduling.tick_stats`) and the SLA contracts' verdicts it
  last reported (:mod:`floe_dagster.defs.sla_reporting`: ``floe_sla_breached``);
- the policy files (enabled policies).

Floe's metric names wherever a floe-dagster fact matches (``floe_operation_*``, ``floe_maintenance_*``,
``floe_active_policies``, ``floe_running_operations``, ``floe_trigger_*``), floe-dagster's own
trigger metrics under ``floe_`` otherwise. docs/http-api.md lists them with their sources.

Counters count from the server's first scrape (0 then), as Floe's and every Prometheus client's
count from the process start, and never go down, whatever retention deletes. The outcome counters
add, at each scrape, the outcomes finished since the previous one (:class:`OutcomeTally`: one
``GROUP BY`` over that window, not over a month of rows); the others are stored totals minus those
seen at the first scrape, a drop (rows deleted) carried (:class:`SinceStart`). A source that cannot
be read is left out of the scrape and ``floe_metrics_source_up{source}`` says so; the other sources
are still served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Mapping

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.storage.runs.schema import RunsTable, RunTagsTable
from dagster._core.storage.runs.sql_run_storage import SqlRunStorage
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import ColumnElement, func, null, select
from sqlalchemy.engine import Engine

from floe_dagster.coordination.database import ADMISSION_TTL, Coordination
from floe_dagster.coordination.schema import ledger, outcomes
from floe_dagster.coordination.runs import IN_FLIGHT_STATUSES, QUEUED_STATUSES
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.plan.compute_budget import WINDOW as COMPUTE_WINDOW, spent_in_window
from floe_dagster.core.runs.history import CONFLICT, LOCK_HELD, OUTAGE
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.api.metric_families import Key, counter, gauge, window_summary
from floe_dagster.defs.sla_reporting import read_sla_states
from floe_dagster.policies import load_policy_set
from floe_dagster.scheduling.tick_stats import read_tick_stats
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

WINDOW = timedelta(days=1)  # latency and queue wait: the runs created in the last day
IN_FLIGHT = tuple(status.value for status in IN_FLIGHT_STATUSES)
QUEUED = tuple(status.value for status in QUEUED_STATUSES)
# What the runs cost and bought (the outcome rows' figure columns, core/runs/run_figures.py), summed per operation.
FIGURE_COUNTERS = (
    ("floe_operation_executor_cpu_seconds", "executor_cpu_s", "Executor CPU seconds of the tables' own Spark jobs"),
    ("floe_operation_task_seconds", "task_s", "Task time (slot seconds) of the tables' own Spark jobs"),
    ("floe_operation_compute_wall_seconds", "wall_s", "Wall seconds of the tables' Spark work (the CALL and the "
     "reads after it)"),
    ("floe_operation_bytes_read", "bytes_read", "Bytes the tables' Spark tasks read"),
    ("floe_operation_bytes_written", "bytes_written", "Bytes the tables' Spark tasks wrote (new data files)"),
    ("floe_operation_files_removed", "files_removed", "Live data and delete files fewer after the runs"),
    ("floe_operation_bytes_reclaimed", "bytes_reclaimed", "Live bytes fewer after the runs"),
    ("floe_operation_files_deleted", "files_deleted", "Files the runs deleted from storage (expired, orphans)"),
    ("floe_operation_snapshots_expired", "snapshots_expired", "Snapshots fewer in the tables' metadata after the runs"),
    ("floe_operation_orphan_bytes_reclaimed", "orphan_bytes_reclaimed", "Bytes of the orphan files the runs removed "
     "from the tables (deleted, or moved into the quarantine)"),
)
# The tick summary's running totals → Floe's trigger counters.
_FLOE_TRIGGER_TOTALS = {
    "evaluations": "floe_trigger_evaluations_total",
    "conditions_met": "floe_trigger_conditions_met_total",
    "conditions_not_met": "floe_trigger_conditions_not_met_total",
    "blocked_by_interval": "floe_trigger_blocked_by_interval_total",
    "forced_by_critical": "floe_trigger_forced_by_critical_pipeline_total",
}


class SinceStart:
    """Stored totals as counters: 0 at the first read of each source, never down afterwards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, dict[Key, list[float]]] = {}  # source → key → [last total, offset]

    def counted(self, source: str, totals: Mapping[Key, float]) -> dict[Key, float]:
        with self._lock:
            state = self._state.get(source)
            if state is None:  # the first read: what is stored already happened before the server
                self._state[source] = {key: [value, -value] for key, value in totals.items()}
                return {key: 0.0 for key in totals}
            for key in set(state) | set(totals):
                last, offset = state.get(key, (0.0, 0.0))
                value = totals.get(key, 0.0)  # a total whose rows were all deleted is 0
                if value < last:  # rows were deleted (retention): carry what they had counted
                    offset += last - value
                state[key] = [value, offset]
            return {key: value + offset for key, (value, offset) in state.items()}


def _op(name: str) -> str:
    """Floe's operation label: lowercase (``rewrite_data_files``)."""
    return name.lower()


def _seconds_between(engine: Engine, later: Any, earlier: Any) -> ColumnElement | None:
    if engine.dialect.name == "sqlite":
        return (func.julianday(later) - func.julianday(earlier)) * 86400.0
    if engine.dialect.name == "postgresql":
        return func.extract("epoch", later - earlier)
    return None


def outcome_totals(engine: Engine, after: datetime, until: datetime
                   ) -> list[tuple[str, bool, str | None, int, float | None, int, tuple[float, ...]]]:
    """(operation, succeeded, failure kind, rows, seconds, bytes rewritten, the FIGURE_COUNTERS' sums) of the
    outcomes finished in (``after``, ``until``]: one GROUP BY."""
    seconds = _seconds_between(engine, outcomes.c.finished_at, outcomes.c.started_at)
    query = (select(
        outcomes.c.operation, outcomes.c.succeeded, outcomes.c.failure_kind, func.count(),
        func.sum(seconds) if seconds is not None else null(),
        func.coalesce(func.sum(outcomes.c.bytes_rewritten), 0),
        *(func.coalesce(func.sum(outcomes.c[column]), 0) for _, column, _ in FIGURE_COUNTERS),
    ).where(outcomes.c.finished_at > naive_as_utc(after), outcomes.c.finished_at <= naive_as_utc(until))
        .group_by(outcomes.c.operation, outcomes.c.succeeded, outcomes.c.failure_kind))
    with engine.connect() as connection:
        return [(op, bool(ok), kind, int(n), None if secs is None else float(secs), int(size or 0),
                 tuple(float(v or 0) for v in sums))
                for op, ok, kind, n, secs, size, *sums in connection.execute(query)]


class OutcomeTally:
    """The outcome counters: each read adds the outcomes finished since the previous read, up to
    ``LAG`` ago (a run records each table's outcome as it finishes; the lag covers the commit and the
    clocks of other hosts). Each outcome is counted once, and retention deleting old rows changes
    nothing. The first read only sets the start."""

    LAG = timedelta(seconds=60)

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one window at a time: concurrent scrapes never count one twice
        self._after: datetime | None = None
        self.timed = True  # False on a database whose durations this cannot compute in SQL
        self.totals: dict[Key, float] = {}
        for op in ALL_OPERATIONS:  # every series from the start, so increase() sees the first one
            name = _op(op.value)
            for status in ("succeeded", "failed", CONFLICT):
                self.totals[("floe_operation_executions_total", (name, status))] = 0.0
            self.totals[("floe_operation_conflicts_total", (name,))] = 0.0
            for sample in ("floe_operation_duration_seconds_count", "floe_operation_duration_seconds_sum",
                           "floe_bytes_rewritten_total", *(name + "_total" for name, _, _ in FIGURE_COUNTERS)):
                self.totals[(sample, (name,))] = 0.0
            for kind in ("error", LOCK_HELD, OUTAGE):
                self.totals[("floe_operation_failures_total", (name, kind))] = 0.0

    def read(self, engine: Engine, now: datetime) -> dict[Key, float]:
        until = now - self.LAG
        with self._lock:
            if self._after is None:  # the first read: the table can be read (no row is)
                with engine.connect() as connection:
                    connection.execute(select(outcomes.c.run_id).limit(0)).all()
            elif until > self._after:
                for op, succeeded, kind, n, seconds, size, sums in outcome_totals(engine, self._after, until):
                    self._add(_op(op), succeeded, kind, n, seconds, size)
                    for (name, _, _), amount in zip(FIGURE_COUNTERS, sums):
                        key = (name + "_total", (_op(op),))
                        self.totals[key] = self.totals.get(key, 0.0) + amount
            if self._after is None or until > self._after:
                self._after = until
            return dict(self.totals)

    def _add(self, operation: str, succeeded: bool, kind: str | None, n: int, seconds: float | None,
             size: int) -> None:
        totals = self.totals
        conflict = not succeeded and kind == CONFLICT  # a lost commit race: no failure (no backoff)
        status = "succeeded" if succeeded else CONFLICT if conflict else "failed"
        for key, amount in (
            (("floe_operation_executions_total", (operation, status)), n),
            (("floe_operation_duration_seconds_count", (operation,)), n),
            (("floe_operation_duration_seconds_sum", (operation,)), seconds or 0.0),
            (("floe_bytes_rewritten_total", (operation,)), size),
        ):
            totals[key] = totals.get(key, 0.0) + amount
        if conflict:
            key = ("floe_operation_conflicts_total", (operation,))
            totals[key] = totals.get(key, 0.0) + n
        elif not succeeded:
            key = ("floe_operation_failures_total", (operation, kind or "error"))
            totals[key] = totals.get(key, 0.0) + n
        self.timed = self.timed and (seconds is not None or n == 0)


def first_admissions(engine: Engine, since: datetime, from_id: int = 0) -> dict[str, datetime]:
    """Each run's earliest admission (a batch run has one row per table), admitted since then, among
    the ledger rows from ``from_id`` on (the primary key: a range, not the whole ledger)."""
    query = (select(ledger.c.run_id, func.min(ledger.c.admitted_at))
             .where(ledger.c.id >= from_id, ledger.c.run_id.is_not(None), ledger.c.admitted_at >= naive_as_utc(since))
             .group_by(ledger.c.run_id))
    with engine.connect() as connection:
        return {run_id: naive_as_utc(admitted) for run_id, admitted in connection.execute(query)}


class AdmissionWindow:
    """:func:`first_admissions` of the last day, read from the first ledger row admitted in it: rows
    are numbered as they are admitted, so that row's id bounds the day, and moves up as the day does.
    Only the first read scans the ledger (a month of rows under retention) to find it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._from_id: int | None = None

    def read(self, engine: Engine, since: datetime) -> dict[str, datetime]:
        with self._lock:
            with engine.connect() as connection:
                first = connection.execute(select(func.min(ledger.c.id)).where(
                    ledger.c.id >= (self._from_id or 0), ledger.c.admitted_at >= naive_as_utc(since))).scalar()
                if first is None:  # nothing admitted since: later rows come after the last one
                    first = (connection.execute(select(func.max(ledger.c.id))).scalar() or 0) + 1
            self._from_id = max(self._from_id or 0, int(first))
            return first_admissions(engine, since, self._from_id)


def sql_run_storage(instance: DagsterInstance) -> SqlRunStorage:
    storage = instance.run_storage
    for _ in range(3):
        if isinstance(storage, SqlRunStorage):
            return storage
        storage = getattr(getattr(storage, "_storage", None), "run_storage", None)  # LegacyRunStorage
    raise TypeError(f"the instance's run storage is not SQL ({type(instance.run_storage).__name__})")


def _floe_runs() -> ColumnElement:
    """Runs that maintain tables (coordination.runs.is_floe_run, in SQL): floe's jobs, or floe's tags."""
    tagged = select(RunTagsTable.c.id).where(RunTagsTable.c.run_id == RunsTable.c.run_id,
                                             RunTagsTable.c.key == T.OPERATION).exists()
    return RunsTable.c.pipeline_name.like("floe%") | tagged


def run_totals(instance: DagsterInstance, since: datetime) -> dict[str, object]:
    """From the run storage, three queries: floe runs in flight by status, manual-trigger runs by
    status, and the floe runs created since then (id, created, started)."""
    storage = sql_run_storage(instance)
    in_flight = (select(RunsTable.c.status, func.count()).where(RunsTable.c.status.in_(IN_FLIGHT), _floe_runs())
                 .group_by(RunsTable.c.status))
    manual = (select(RunsTable.c.status, func.count())
              .select_from(RunsTable.join(RunTagsTable, RunTagsTable.c.run_id == RunsTable.c.run_id))
              .where(RunTagsTable.c.key == T.TRIGGER, RunTagsTable.c.value == "manual")
              .group_by(RunsTable.c.status))
    recent = select(RunsTable.c.run_id, RunsTable.c.create_timestamp, RunsTable.c.start_time).where(
        RunsTable.c.create_timestamp >= since.astimezone(timezone.utc).replace(tzinfo=None), _floe_runs())
    with storage.connect() as connection:
        return {
            "in_flight": {status: int(n) for status, n in connection.execute(in_flight)},
            "manual": {status: int(n) for status, n in connection.execute(manual)},
            "recent": [(run_id, naive_as_utc(created).timestamp(), start)
                       for run_id, created, start in connection.execute(recent) if created is not None],
        }


def _timestamp(text: str | None) -> float | None:
    try:
        return naive_as_utc(datetime.fromisoformat(text)).timestamp() if text else None
    except ValueError:
        return None


class FloeCollector(Collector):
    """The ``floe_*`` metrics of one API server, read from its sources at each scrape."""

    def __init__(self, settings: Settings, instance: DagsterInstance, coordination: Coordination,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.settings, self.instance, self.coordination, self.clock = settings, instance, coordination, clock
        self.since_start = SinceStart()
        self.outcomes = OutcomeTally()
        self.admissions = AdmissionWindow()

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = self.clock()
        up: dict[str, int] = {}

        def read(source: str, what: Callable[[], Any]) -> Any:
            try:
                value = what()
            except Exception:  # one source down: the others are still served
                log.warning("metrics: the %s cannot be read", source, exc_info=True)
                up[source] = 0
                return None
            up.setdefault(source, 1)
            return value

        engine = self.coordination.engine
        done = read("coordination", lambda: self.outcomes.read(engine, now))
        admissions = read("coordination", lambda: self.admissions.read(engine, now - WINDOW - ADMISSION_TTL))
        shadow = read("coordination", lambda: self.coordination.shadow_counts_since(now - WINDOW))
        spent = read("coordination", lambda: spent_in_window(
            self.coordination.recorded_runs(None, now - COMPUTE_WINDOW), now))
        runs = read("instance", lambda: run_totals(self.instance, now - WINDOW))
        ticks = read("instance", lambda: read_tick_stats(self.instance))
        slas = read("instance", lambda: read_sla_states(self.instance))
        policies = read("policies", lambda: load_policy_set(self.settings))

        if done is not None:
            yield from self._outcomes(done)
        if shadow is not None:
            yield from self._shadow(shadow)
        if spent is not None:
            yield from self._compute_budget(spent[0])
        if runs is not None:
            yield from self._runs(runs, admissions)
        if ticks is not None:
            yield from self._ticks(ticks)
        if slas is not None:
            yield sla_gauge(slas)
        if policies is not None:
            yield gauge("floe_active_policies", "Enabled maintenance policies in the policy files",
                         float(sum(1 for policy in policies if policy.enabled)))
        yield gauge("floe_metrics_source_up", "Whether this scrape could read the source (1) or not (0)",
                     labels=["source"], values={(source,): float(ok) for source, ok in up.items()})
        yield gauge("floe_metrics_scrape_duration_seconds", "How long the floe_* metrics of this scrape took",
                     time.perf_counter() - started)

    # -- the coordination database's outcomes ------------------------------------------------------------
    def _outcomes(self, counted: dict[Key, float]) -> Iterator[Metric]:
        yield counter("floe_operation_executions", "Total number of operation executions",
                       ["operation", "status"], counted)
        if self.outcomes.timed:
            summary = Metric("floe_operation_duration_seconds", "Duration of maintenance operations", "summary")
            for (name, labels), value in sorted(counted.items()):
                if name.startswith("floe_operation_duration_seconds_"):
                    summary.add_sample(name, {"operation": labels[0]}, value)
            yield summary
        yield counter("floe_bytes_rewritten", "Bytes the maintenance runs rewrote (rewrite operations)",
                       ["operation"], counted)
        for name, _, documentation in FIGURE_COUNTERS:
            yield counter(name, documentation, ["operation"], counted)
        yield counter("floe_operation_failures", "Failed operation executions by kind: error (the table's), "
                       "lock_held (another run held the table's lock), outage (Spark or the catalog was down)",
                       ["operation", "kind"], counted)
        yield counter("floe_operation_conflicts", "Operation executions whose commit lost a race with another "
                       "writer (outcome conflict: not failures, no backoff; retried 5-15 minutes later)",
                       ["operation"], counted)

    def _compute_budget(self, spent_s: float) -> Iterator[Metric]:
        """The compute budget's rolling hour as the planner charges it (core/plan/compute_budget.py): what the runs
        that finished in it spent, against ``max-compute-hours-per-hour`` (left out when unset)."""
        yield gauge("floe_compute_budget_spent_seconds", "Compute seconds (executor CPU) the runs that finished in the "
                     "last hour recorded: the compute budget's window", spent_s)
        limit = self.settings.scheduler.max_compute_hours_per_hour
        if limit:
            yield gauge("floe_compute_budget_limit_seconds", "max-compute-hours-per-hour in seconds per rolling hour",
                         limit * 3600.0)

    # -- the ledger's shadow rows ---------------------------------------------------------------------------------
    @staticmethod
    def _shadow(counts: Mapping[str, tuple[int, datetime]]) -> Iterator[Metric]:
        """What the shadow policies would have run: every operation's series from the start (0)."""
        ops = [_op(op.value) for op in ALL_OPERATIONS]
        found = {_op(op): value for op, value in counts.items()}
        yield gauge("floe_shadow_decisions", "Shadow policies' decisions the ledger recorded in the last day "
                     "(what would have run; no run is created)", labels=["operation"],
                     values={(op,): float(found[op][0]) if op in found else 0.0 for op in ops})
        yield gauge("floe_shadow_last_decision_timestamp_seconds", "When the newest shadow decision of the last "
                     "day was recorded (when it would have run; Unix time)", labels=["operation"],
                     values={(op,): found[op][1].timestamp() for op in ops if op in found})

    # -- the instance's runs ----------------------------------------------------------------------------------
    def _runs(self, runs: dict[str, Any], admissions: dict[str, datetime] | None) -> Iterator[Metric]:
        in_flight = runs["in_flight"]
        yield gauge("floe_running_operations", "Floe maintenance runs running now (STARTED)",
                     float(in_flight.get(DagsterRunStatus.STARTED.value, 0)))
        yield gauge("floe_queued_runs", "Floe maintenance runs waiting in the run queue",
                     float(sum(in_flight.get(status, 0) for status in QUEUED)))
        manual = runs["manual"]
        totals = {
            ("floe_maintenance_triggers_total", ()): float(sum(manual.values())),
            ("floe_maintenance_success_total", ()): float(manual.get(DagsterRunStatus.SUCCESS.value, 0)),
            ("floe_maintenance_failures_total", ()): float(manual.get(DagsterRunStatus.FAILURE.value, 0)),
        }
        counted = self.since_start.counted("manual", totals)
        yield counter("floe_maintenance_triggers", "Total number of maintenance operations triggered", [], counted)
        yield counter("floe_maintenance_success", "Total number of successful maintenance operations", [], counted)
        yield counter("floe_maintenance_failures", "Total number of failed maintenance operations", [], counted)
        recent = runs["recent"]
        yield window_summary("floe_run_queue_wait_seconds", "Queue wait of the floe runs created in the last "
                              "day: run start minus run creation (started runs)",
                              [start - created for _, created, start in recent if start is not None])
        if admissions is not None:
            latency = [created - admissions[run_id].timestamp() for run_id, created, _ in recent
                       if run_id in admissions]
            yield window_summary("floe_trigger_to_run_latency_seconds", "Trigger-to-run latency of the runs "
                                  "created in the last day: run creation minus the ledger's admission",
                                  [max(0.0, value) for value in latency])

    # -- the debt-score sensor's last ticks ----------------------------------------------------------------
    def _ticks(self, records: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        decisions: dict[tuple[str, ...], float] = {}
        at, seconds, skipped, runs, backoff, throttled = {}, {}, {}, {}, {}, {}
        # Floe's unlabelled counters are there (at 0) before any tick, as Floe's fixed meters are.
        totals: dict[Key, float] = defaultdict(float, {(name, ()): 0.0 for name in _FLOE_TRIGGER_TOTALS.values()})
        for scope, record in records.items():
            key = (scope,)
            if (moment := _timestamp(record.get("at"))) is not None:
                at[key] = moment
            seconds[key] = float(record.get("seconds") or 0.0)
            if record.get("skipped_tick"):
                skipped[(scope, str(record["skipped_tick"]))] = 1.0
            if "admitted" in record:  # a tick planned
                for trigger, n in record["admitted"].items():
                    decisions[(scope, "admitted", trigger)] = float(n)
                for operation, n in (record.get("shadow") or {}).items():
                    decisions[(scope, "shadow", operation)] = float(n)
                for code, n in record.get("skipped", {}).items():
                    decisions[(scope, "skipped", code)] = float(n)
                decisions[(scope, "refused", "duplicate")] = float(record.get("refused", 0))
                runs[key] = float(record.get("runs_requested", 0))
                backoff[key] = float(record.get("tables_in_backoff", 0))
                throttled[key] = float(record.get("tables_throttled", 0))
            tick_totals = record.get("totals") or {}
            totals[("floe_ledger_duplicates_refused_total", key)] += tick_totals.get("duplicates_refused", 0)
            for name, total in _FLOE_TRIGGER_TOTALS.items():
                totals[(total, ())] += tick_totals.get(name, 0)  # Floe's: summed over the scopes
            for operation, results in (tick_totals.get("by_operation") or {}).items():
                for result, n in results.items():
                    totals[("floe_trigger_evaluations_by_operation_total", (operation, result))] += n
        counted = self.since_start.counted("ticks", totals)
        yield gauge("floe_tick_decisions", "The debt-score sensor's last planned tick: decisions by outcome "
                     "(admitted: by trigger; shadow: recorded shadow decisions, by operation; skipped: by reason "
                     "code; refused: the ledger already had them)",
                     labels=["scope", "outcome", "reason"], values=decisions)
        yield gauge("floe_tick_timestamp_seconds", "When the debt-score sensor's last tick ran (Unix time)",
                     labels=["scope"], values=at)
        yield gauge("floe_tick_duration_seconds", "How long the debt-score sensor's last tick took",
                     labels=["scope"], values=seconds)
        yield gauge("floe_tick_skipped", "1 when the last tick planned or launched nothing, by reason code "
                     "(lock_held, circuit_open, catalog_unavailable, scheduler_disabled); the decision gauges "
                     "are then the last planned tick's", labels=["scope", "reason"], values=skipped)
        yield gauge("floe_tick_runs_requested", "Runs the last planned tick requested (one per batch)",
                     labels=["scope"], values=runs)
        yield gauge("floe_tables_in_backoff", "Tables skipped for failure backoff by the last planned tick",
                     labels=["scope"], values=backoff)
        yield gauge("floe_tables_throttled", "Tables skipped by the zero-change throttle in the last planned tick",
                     labels=["scope"], values=throttled)
        yield counter("floe_ledger_duplicates_refused", "Admissions the ledger refused because another launcher "
                       "had admitted the same (table, operation, slot, attempt)", ["scope"], counted)
        for name, documentation in (
            ("floe_trigger_evaluations", "Total number of trigger condition evaluations"),
            ("floe_trigger_conditions_met", "Total evaluations where trigger conditions were met"),
            ("floe_trigger_conditions_not_met", "Total evaluations where trigger conditions were not met"),
            ("floe_trigger_blocked_by_interval", "Total evaluations blocked by minimum interval"),
            ("floe_trigger_forced_by_critical_pipeline", "Total evaluations forced by critical pipeline deadline"),
        ):
            yield counter(name, documentation, [], counted)
        yield counter("floe_trigger_evaluations_by_operation", "Trigger evaluations by operation type",
                       ["operation", "result"], counted)


def sla_gauge(states: Mapping[str, Mapping[str, object]]) -> Metric:
    """``floe_sla_breached``: 1 per (table, operation) whose SLA contract the sensor's last tick found breached,
    0 while met, from what it reported (defs/sla_reporting.py). The owner is a label value as the policy wrote
    it: the exposition format escapes it (a policy refuses control characters in it anyway)."""
    values = {(state["table"], _op(state["operation"]), state["severity"], state.get("owner") or ""):
              float(bool(state.get("breached")))
              for scope in states.values() for state in scope.values() if isinstance(state, dict) and "table" in state}
    return gauge("floe_sla_breached", "1 when the operation's SLA contract is breached (its last success is older "
                  "than maxAge), 0 while met; as the debt-score sensor's last tick found it",
                  labels=["table", "operation", "severity", "owner"], values=values)


def metrics_registry(settings: Settings, instance: DagsterInstance, coordination: Coordination) -> CollectorRegistry:
    """A fresh registry for one application: the floe collector, and the process's own metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FloeCollector(settings, instance, coordination))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
