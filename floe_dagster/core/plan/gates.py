"""The gates: whether one (table, operation)'s work may start now, checked in order (:data:`GATES`).

Each gate is a small named check that owns its reason codes (:attr:`Gate.codes`). It reads the
decision's :class:`Facts` (the table, its policy, schedule, health and history: never changed) and
what the gates before it learned (:class:`Learned`), and returns its verdict: None to let the work pass,
a new :class:`Learned` to let it pass with what it learned, or the decision skipped with one of its
codes, so that a skipped decision's first reason names the first gate that blocked it. A gate declares
the facts it reads and learns (:attr:`Gate.reads`, :attr:`Gate.learns`); :func:`check_order` refuses a
list in which a gate reads what no gate before it learns, at import. Work that passes every gate becomes a
``run`` decision (:func:`admissible`); the stages of the plan (core/plan/plan_stages.py) turn a verdict
between two gates (a backlog's continuation, an SLA's escalation), mark shadow decisions, rank and admit.

A new gate is one function and one :class:`Gate` in :data:`GATES`. The vocabulary of that flow (:class:`Facts`,
:class:`Learned`, :class:`Gate`, :func:`check_order`) is core/plan/gate_flow.py.

The planner's docstring, the gate table of docs/automation.md and explain's words about the gates'
order are checked against this list (floe_dagster_tests/unit/test_gates.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Mapping

from floe_dagster.core.schedules.after_write import TRIGGER_AFTER_WRITE, combined_due
from floe_dagster.core.plan.batches import RunClass
from floe_dagster.core.runs.commit_conflicts import conflict_retry_delay
from floe_dagster.core.plan.decisions import Decision, Reason, skip
from floe_dagster.core.runs.history import CONFLICT_STREAK, OperationHistory
from floe_dagster.core.basics.localtime import as_utc, naive_as_utc
from floe_dagster.core.basics.quick_records import kept_on
from floe_dagster.core.operations import ALL_OPERATIONS, Operation, gc_disabled, gc_disabled_reason
from floe_dagster.core.schedules.quiet import due_since, quiet_verdict
from floe_dagster.core.schedules.schedule import schedule_due
from floe_dagster.core.schedules.sla import SlaVerdict
from floe_dagster.core.schedules.schedule_due import TRIGGER_CONDITION
from floe_dagster.core.schedules.writers import writer_hold
from floe_dagster.core.plan.gate_flow import Facts, Gate, Learned, Told, check_order

if TYPE_CHECKING:  # annotations only (the plan's stages import this module)
    from floe_dagster.core.schedules.orphan_cadence import CadenceVerdict
    from floe_dagster.core.policies.owner_overrides import OwnerOverrides
    from floe_dagster.core.schedules.schedule import Schedule
    from floe_dagster.core.schedules.schedule_due import Due


MAX_BACKOFF = timedelta(days=7)
HOLDS_FOR_WRITERS = frozenset(op for op in ALL_OPERATIONS if op.holds_for_writers)  # the kinds' flag, once
CADENCED = frozenset(op for op in ALL_OPERATIONS if op.spec.has_cadence)  # the kinds with a cadence of their own
FIRST_BACKOFF = timedelta(minutes=5)


@lru_cache(maxsize=1024)  # a tick's failing decisions ask for a few distinct delays (timedelta arithmetic each)
def backoff_delay(consecutive_failures: int, threshold: int, hours: float) -> timedelta:
    """After the n-th consecutive failure: 5 min × 2^(n−1) below the threshold, then
    ``hours`` × 2^(n − threshold), capped at 7 days."""
    n = consecutive_failures
    if n <= 0:
        return timedelta(0)
    if n < threshold:
        delay = FIRST_BACKOFF * (2 ** min(n - 1, 20))
    else:
        delay = timedelta(hours=hours) * (2 ** min(n - threshold, 20))
    return min(delay, MAX_BACKOFF)


def open_from(schedule: Schedule, moment: datetime | None) -> datetime | None:
    """The first moment at or after ``moment`` inside the schedule's window on an allowed day: when a gate
    that ends at ``moment`` lets the work start (``next_eligible``, like :class:`Due`'s)."""
    return schedule.next_open(moment) if moment is not None else None


# -- what the gates' reasons say, told when read (core/plan/decisions.Reason) ------------------------------


def _schedule_missing(op: Operation) -> str:
    return f"{op.schedule_key} is missing or disabled"


def _pause_detail(owner: OwnerOverrides) -> str:
    return owner.pause_detail


def _detail_of(verdict: Told) -> str:
    """A verdict's own words (the due, quiet and writer verdicts tell theirs when read)."""
    return verdict.detail


def _backoff_detail(history: OperationHistory, until: datetime) -> str:
    why = (f" (the last {history.consecutive_conflicts} runs lost their commit race: from the "
           f"{CONFLICT_STREAK}th in a row on, each counts as a failure)" if history.conflicts_back_off else "")
    return f"{history.consecutive_failures} consecutive failure(s){why}; retry at {until.isoformat()}"


def _conflicts_detail(conflicts: int, until: datetime) -> str:
    return f"{conflicts} lost commit race(s) in a row (not failures: no backoff); retry at {until.isoformat()}"


def _zero_change_detail(runs: int, until: datetime) -> str:
    return f"{runs} runs changed nothing; next at {until.isoformat()}"


# -- the gates, in order ---------------------------------------------------------------------------


def _schedule_enabled(f: Facts, known: Learned) -> Decision | None:
    if f.schedule is None or not f.schedule.enabled:
        return skip(f.decision, "schedule_disabled", _schedule_missing, f.op)
    return None


def _owner_pause(f: Facts, known: Learned) -> Decision | None:
    owner = f.decision.owner_overrides  # the table's floe.* properties, read once per table (plan_stages)
    if owner is not None and owner.paused:
        return skip(f.decision, "owner_paused", _pause_detail, owner)
    return None


def _gc_allowed(f: Facts, known: Learned) -> Decision | None:
    if f.op.needs_gc and f.metrics is not None and gc_disabled(f.metrics.properties):  # as the run checks it
        return skip(f.decision, "gc_disabled", gc_disabled_reason, f.op)
    return None


def _listed(f: Facts, known: Learned) -> Decision | None:
    if not f.listed:  # looked up once per table
        return skip(f.decision, "table_missing", "the table is no longer in the catalog")
    return None


def _loaded(f: Facts, known: Learned) -> Decision | None:
    if not f.loaded:
        return skip(f.decision, "not_loaded", "in the catalog but not yet an asset; it becomes one at the next reload")
    return None


def _due(f: Facts, known: Learned) -> Decision | Learned:
    # The window and the allowed days come first (window_closed, day_not_allowed), then not_due. A kind's own
    # cadence (an adaptive orphan cleanup) takes the place of the interval or cron; the writers' new
    # materializations make it due too (or alone).
    verdict = f.op.spec.cadence(f.policy.config(f.op), f.data.recorded_runs.get((f.table.qualified, f.op), ()),
                                f.data.now) if f.op in CADENCED else None
    if verdict is None:
        due = schedule_due(f.schedule, f.history.last_success_start, f.data.now)
    else:
        due = own_cadence_due(f.schedule, verdict, f.history.last_success_start, f.data.now)
    if f.schedule.after_write is not None:
        due = combined_due(due, f.schedule.after_write, f.data.writers.get(f.table.qualified, ()), f.data.now,
                           clock_only=f.schedule.kind != TRIGGER_CONDITION, first_write_after=f.data.first_write_after)
    if not due.due:
        return skip(f.decision, due.blocked or "not_due", _detail_of, due, next_eligible=due.next_eligible,
                    **({"cadence": verdict} if verdict is not None else {}))  # None: the class's default
    return Learned(due=due, trigger=due.trigger, slot=due.slot_key, cadence=verdict,
                   upstream=due.upstream if due.trigger == TRIGGER_AFTER_WRITE else None)


def own_cadence_due(schedule: Schedule, verdict: CadenceVerdict, last_success_start: datetime | None,
                    now: datetime) -> Due:
    """The schedule's verdict with a kind's own cadence in place of its interval or cron: an interval that
    ends at the cadence's next run (its window, days and timeout still hold), told in the cadence's words."""
    last = naive_as_utc(last_success_start) if last_success_start is not None else None
    next_run = as_utc(verdict.next_run_at)
    interval = max(next_run - last, timedelta(seconds=1)) if last is not None else timedelta(seconds=1)
    if last is not None and next_run <= last:  # measured from older runs than the last success: due now
        interval = max(as_utc(now) - last, timedelta(seconds=1))
    due = schedule_due(replace(schedule, interval=interval, cron_expression=None, cron_5field=None), last, now)
    return replace(due, told=(_cadence_detail, verdict, due))


def _cadence_detail(verdict: CadenceVerdict, due: Due) -> str:
    return f"adaptive cadence, {verdict.why}" + (
        f"; {due.blocked.replace('_', ' ')}, eligible {due.next_eligible.isoformat()}"
        if due.blocked and due.blocked != "not_due" and due.next_eligible else "")


def _backoff(f: Facts, known: Learned) -> Decision | None:
    history, limits = f.history, f.data.limits
    if history.consecutive_failures <= 0 or history.last_failure_at is None:  # no failure: no backoff (most)
        return None
    backoff = backoff_delay(history.consecutive_failures, limits.failure_backoff_threshold,
                            limits.failure_backoff_hours)
    if backoff and history.last_failure_at is not None and f.data.now < history.last_failure_at + backoff:
        until = history.last_failure_at + backoff
        return skip(f.decision, "failure_backoff", _backoff_detail, history, until,
                    next_eligible=open_from(f.schedule, until), backoff_until=until, **known.kept())
    return None


def _conflicts(f: Facts, known: Learned) -> Decision | None:
    history = f.history
    if history.consecutive_conflicts and history.last_conflict_at is not None:
        until = history.last_conflict_at + conflict_retry_delay(f.table.qualified, f.op.value,
                                                                history.consecutive_conflicts)
        if f.data.now < until:
            return skip(f.decision, "conflict_retry", _conflicts_detail, history.consecutive_conflicts, until,
                        next_eligible=open_from(f.schedule, until), backoff_until=until, **known.kept())
    return None


def _zero_change(f: Facts, known: Learned) -> Decision | None:
    history, limits, metrics = f.history, f.data.limits, f.metrics
    if limits.zero_change_threshold <= 0 or history.consecutive_zero_change < limits.zero_change_threshold:
        return None
    new_data = metrics is not None and metrics.current_snapshot_id is not None \
        and metrics.current_snapshot_id not in _table_snapshots_ours(f.table.qualified, f.data.history)
    if new_data or history.last_success_start is None:
        return None
    interval = f.schedule.effective_interval() or timedelta(0)
    throttled = max(timedelta(hours=limits.zero_change_min_interval_hours),
                    interval * (1 + limits.zero_change_frequency_reduction_percent / 100))
    until = history.last_success_start + throttled
    if f.data.now < until:
        return skip(f.decision, "zero_change_throttle", _zero_change_detail, history.consecutive_zero_change, until,
                    next_eligible=open_from(f.schedule, until), throttled_until=until, **known.kept())
    return None


def _table_snapshots_ours(qualified: str, history: Mapping[tuple[str, Operation], OperationHistory]) -> set[int]:
    return {
        h.last_snapshot_after for op in ALL_OPERATIONS
        if (h := history.get((qualified, op))) is not None and h.last_snapshot_after is not None
    }


def _conditions(f: Facts, known: Learned) -> Decision | Learned:
    data = f.data
    conditions = f.policy.evaluate_conditions(
        f.op, f.metrics, f.history.last_success_start, data.now, data.limits.condition_based_triggering_enabled)
    known = known.but(condition_result=conditions, trigger="critical" if conditions.forced else known.trigger)
    if not conditions.forced and not conditions.passed:
        return skip(f.decision, conditions.blocked_code, conditions.detail,
                    next_eligible=open_from(f.schedule, conditions.next_eligible), **known.kept())
    return known


def _quiet(f: Facts, known: Learned) -> Decision | Learned | None:
    period = f.schedule.quiet
    if period is None:
        return None
    quiet = quiet_verdict(period, f.metrics, due_since(known.due, f.metrics), f.data.now)
    known = known.but(quiet=quiet)
    if not quiet.passed:
        return skip(f.decision, "not_quiet", _detail_of, quiet,
                    next_eligible=open_from(f.schedule, quiet.next_eligible), **known.kept())
    return known


def _writer_running(f: Facts, known: Learned) -> Decision | Learned | None:
    # A rewrite or an expiry of a table with a known writer (core/schedules/writers.py); the runs were read once
    # per tick.
    writers = f.data.writers.get(f.table.qualified) if f.op in HOLDS_FOR_WRITERS else None
    if not writers:
        return None
    hold = writer_hold(writers, f.data.writer_runs, due_since(known.due, f.metrics), f.schedule.max_writer_wait,
                       f.data.now)
    known = known.but(writer_hold=hold)
    if not hold.passed:
        return skip(f.decision, "writer_running", _detail_of, hold,
                    next_eligible=open_from(f.schedule, hold.next_eligible), **known.kept())
    return known


def _not_in_flight(f: Facts, known: Learned) -> Decision | None:
    data, qualified = f.data, f.table.qualified
    if (qualified, f.op) in data.in_flight:
        return skip(f.decision, "in_flight", "a run of this table and operation is queued or running", **known.kept())
    if qualified in data.busy_tables:
        return skip(f.decision, "in_flight", "another run maintains this table (one run per table at a time)",
                    **known.kept())
    return None


GATES: tuple[Gate, ...] = (
    Gate("schedule", ("schedule_disabled",), _schedule_enabled,
         "the operation's schedule is missing or `enabled: false`",
         schedule_passes=lambda schedule: schedule is not None and schedule.enabled),
    Gate("owner", ("owner_paused",), _owner_pause,
         "the table's owner set its property `floe.maintenance.enabled=false` and the policy's `ownerOverrides` "
         "allows it", table_passes=lambda f: f.owner is None or not f.owner.paused),
    Gate("gc", ("gc_disabled",), _gc_allowed,
         "an operation that deletes files (expiry, orphan cleanup) on a table that sets `gc.enabled=false`",
         table_passes=lambda f: f.metrics is None or not gc_disabled(f.metrics.properties)),
    Gate("catalog", ("table_missing",), _listed, "the catalog no longer lists the table",
         table_passes=lambda f: f.listed),
    Gate("loaded", ("not_loaded",), _loaded, "listed, but not an asset of the code location until its next reload",
         table_passes=lambda f: f.loaded),
    Gate("due", ("window_closed", "day_not_allowed", "not_due"), _due,
         "the schedule: its window or allowed days are closed now, or its cron slot, interval or condition "
         "cycle is not due", learns=("due", "trigger", "slot", "cadence", "upstream")),
    Gate("backoff", ("failure_backoff",), _backoff, "failures in a row: the next attempt waits, doubling",
         reads=("trigger",)),
    Gate("conflicts", ("conflict_retry",), _conflicts,
         "lost commit races in a row: the next attempt waits 5-15 minutes (not a failure)", reads=("trigger",)),
    Gate("zero change", ("zero_change_throttle",), _zero_change,
         "runs that changed nothing: the interval is stretched until another writer commits", reads=("trigger",)),
    Gate("conditions", ("conditions_unmet", "min_interval", "no_health", "no_drift"), _conditions,
         "the trigger conditions (declared table properties: their drift), their minimum intervals and the "
         "health they read; the critical-pipeline force, a breached SLA and a backlog's continuation pass it",
         reads=("trigger",), learns=("condition_result", "trigger")),
    Gate("quiet", ("not_quiet",), _quiet, "another writer committed within the schedule's `quietFor`",
         reads=("due",), learns=("quiet",), schedule_passes=lambda schedule: schedule is not None and
         schedule.quiet is None),
    Gate("writer", ("writer_running",), _writer_running,
         "a rewrite or an expiry while a run of the table's writer asset is queued or started, until the "
         "schedule's `maxWriterWait`", reads=("due",), learns=("writer_hold",),
         table_passes=lambda f: not f.data.writers.get(f.table.qualified)),
    Gate("in flight", ("in_flight",), _not_in_flight,
         "a run of the table is queued or running, or an admission in the ledger waits for its run",
         reads=("trigger",), table_passes=lambda f: not f.busy),
)
GATE_CODES: tuple[str, ...] = tuple(code for gate in GATES for code in gate.codes)


check_order(GATES)


def gate_named(name: str) -> Gate:
    return next(gate for gate in GATES if gate.name == name)


def gate_before(name: str) -> Gate:
    """The gate checked right before the one named (explain says which gate decided first)."""
    return GATES[GATES.index(gate_named(name)) - 1]


def admissible(f: Facts, known: Learned) -> Decision:
    """Work every gate let pass: a ``run`` decision in its due slot (its attempt the slot's next one),
    its run time bounded by the schedule's timeout and its window's end, with its run class; escalated by a
    breached SLA, its trigger is ``sla`` and the contract's verdict its second reason."""
    data, schedule, due, now = f.data, f.schedule, known.due, f.data.now
    reasons: tuple[Reason, ...] = (Reason(due.trigger, _detail_of, due),)
    if known.escalation is not None:
        reasons += (Reason("sla", _escalated, known.escalation),)
    quiet, hold = known.quiet, known.writer_hold
    if quiet is not None or hold is not None:  # most schedules have neither a quiet period nor a known writer
        reasons += tuple(Reason(None, _detail_of, v) for v in (quiet, hold)
                         if v is not None and (v is quiet or v.forced))
    window_end = schedule.window_end_after(now) if schedule.enforce_window_end else None
    runtime = schedule.timeout_hours * 3600
    if window_end is not None:
        runtime = min(runtime, max(60.0, (window_end - now).total_seconds()))
    # Set on the decision the gate stage made for this operation alone (no one holds it yet): a copy of each of
    # a tick's ~25,000 candidates saved.
    made = f.decision.__dict__
    made.update(known.kept())
    if known.escalation is not None:
        made["trigger"] = "sla"
    made.update(decision="run", passed_gates=True, why=reasons, max_runtime_s=runtime, next_eligible=now,
                attempt=data.last_attempts.get((f.table.qualified, f.op, due.slot_key), -1) + 1,
                run_class=_run_class(schedule))
    return f.decision


def _escalated(escalation: SlaVerdict) -> str:
    return f"{escalation.detail}; escalated past the conditions and minimum intervals"


def _run_class(schedule: Schedule) -> RunClass:
    """The schedule's run class, kept on the (immutable) schedule: the same for every table it governs."""
    return kept_on(schedule, "_run_class", _new_run_class, schedule)


def _new_run_class(schedule: Schedule) -> RunClass:
    days = ",".join(str(d) for d in sorted(schedule.allowed_days))
    return RunClass(timeout=f"{schedule.timeout_hours:g}h",
                    window=f"{schedule.window_start}-{schedule.window_end} days {days} {schedule.timezone} "
                           f"enforce {schedule.enforce_window_end}")
