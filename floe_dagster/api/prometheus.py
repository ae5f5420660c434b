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
seen at the first scrape, a drop (rows deleted) carried (:class:`SinceStart`); both are in
api/metric_counters.py. The last day's runs are read in api/metric_runs.py, and the families built from
plain values in api/metric_families.py: here, the collector that reads every source at a scrape and
what it serves of each. A source that cannot be read is left out of the scrape and
``floe_metrics_source_up{source}`` says so; the other sources are still served.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping

from dagster import DagsterInstance, DagsterRunStatus
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from floe_dagster.coordination.database import ADMISSION_TTL, Coordination
from floe_dagster.coordination.runs import QUEUED_STATUSES
from floe_dagster.core.plan.compute_budget import WINDOW as COMPUTE_WINDOW, spent_in_window
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.api.metric_counters import FIGURE_COUNTERS, OutcomeTally, SinceStart
from floe_dagster.api.metric_families import Key, counter, gauge, operation_label, window_summary
from floe_dagster.api.metric_runs import WINDOW, AdmissionWindow, run_totals
from floe_dagster.defs.sla_reporting import read_sla_states
from floe_dagster.policies import load_policy_set
from floe_dagster.scheduling.tick_stats import read_tick_stats
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

QUEUED = tuple(status.value for status in QUEUED_STATUSES)
# The tick summary's running totals → Floe's trigger counters.
_FLOE_TRIGGER_TOTALS = {
    "evaluations": "floe_trigger_evaluations_total",
    "conditions_met": "floe_trigger_conditions_met_total",
    "conditions_not_met": "floe_trigger_conditions_not_met_total",
    "blocked_by_interval": "floe_trigger_blocked_by_interval_total",
    "forced_by_critical": "floe_trigger_forced_by_critical_pipeline_total",
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
        ops = [operation_label(op.value) for op in ALL_OPERATIONS]
        found = {operation_label(op): value for op, value in counts.items()}
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
    values = {(state["table"], operation_label(state["operation"]), state["severity"], state.get("owner") or ""):
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
