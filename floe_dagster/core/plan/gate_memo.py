"""The gate stage's verdicts kept from one tick for the next (issue 35, item 8): a warm tick remakes only what
changed.

The debt-score sensor plans every few seconds, and between two ticks most tables change in nothing the gates
read: the same metrics record (the health collector keeps one per metadata location), the same histories, the
same policies. A (table, operation)'s verdict then depends on the clock alone, and most verdicts cannot change
before a known instant: a schedule not due until its interval ends or its next cron slot, a backoff until its
retry, a minimum interval until it ends. The gate stage (core/plan/plan_stages.py) keeps each table's decisions
with that instant (:func:`valid_until`) and the identity of their inputs (:func:`table_inputs`); the next tick
reuses a decision when the inputs are the same and its instant has not come, and makes it afresh otherwise.

What a reused decision says is what a fresh one would say, to the character:
- At the same clock every decision of a table whose inputs are the same is reused as it was (the plan is a
  function of its inputs).
- At a later clock only the verdicts whose words and fields hold until their instant are reused, with the parts
  that follow the clock made again: the debt score (the table's age and health ages), and a run decision's
  ``next_eligible`` (now). A verdict that reads the clock in other ways — a window or allowed days, a quiet period,
  an SLA contract, an adaptive cadence, trigger conditions that were unmet or read a snapshot's age, a writer, an
  after-write rule, a backlog's continuation — holds only at the clock it was made at (``valid_until`` is then
  that clock), and is made afresh at any other.
- Anything else a table's decisions read (another metrics record, a history, a run in flight, the policies, the
  scheduler's settings, the debt weights, the estimator) makes its decisions afresh; a change of the policies or
  settings forgets every table.

floe_dagster_tests/unit/test_gate_memo.py checks, tick after tick with a clock that crosses slots, windows,
backoffs and minimum intervals, that every reused decision equals a fresh one."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Sequence

from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.plan.decisions import Decision, PlanInput
from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.basics.tables import TableName

if TYPE_CHECKING:
    from floe_dagster.core.policies.conditions import ConditionResult
    from floe_dagster.core.schedules.schedule import Schedule

# Verdicts no clock changes: gates before the schedule's.
_STATIC = frozenset({"schedule_disabled", "owner_paused", "gc_disabled", "table_missing", "not_loaded"})
# A hold that ends at its own instant (the decision's field that names it), after a due schedule.
_HELD_UNTIL = {"failure_backoff": "backoff_until", "conflict_retry": "backoff_until",
               "zero_change_throttle": "throttled_until"}
_AFTER_DUE = frozenset({"in_flight", "min_interval"})
_TIME_THRESHOLDS = ("snapshotAgeAboveDays",)  # trigger conditions that measure an age (core/policies/conditions.py)


# An instant not told yet: :func:`valid_until` is asked only by a tick at another clock (:func:`holds`), so a
# cold tick, and a tick at the same clock, never pay for it.
LATER = object()


class TableEntry:
    """One table's decisions of a tick (the gate stage's, in its policy's operation order), the instant until
    which each holds (None: no clock changes it; ``at``: only at that clock; :data:`LATER`: not told yet), the
    clock they were made at, and their inputs: the metrics record (compared by identity), the rest compared by
    value."""

    __slots__ = ("metrics", "inputs", "at", "decisions", "until", "runs", "first_attempts")

    def __init__(self, metrics: Any, inputs: tuple | None, at: datetime, decisions: tuple[Decision, ...],
                 until: list[datetime | None | object]) -> None:
        self.metrics, self.inputs, self.at, self.decisions, self.until = metrics, inputs, at, decisions, until
        # Where its run decisions are (the tick's candidates), and whether each is its slot's first attempt (most
        # are): then a ledger without an attempt of the table leaves every one as it is, which a tick at the same
        # clock answers without reading them.
        self.runs = tuple(index for index, decision in enumerate(decisions) if decision.decision == "run")
        self.first_attempts = all(decisions[index].attempt == 0 for index in self.runs)

    def attempts_hold(self, last_attempts: Any, attempted: bool) -> bool:
        """Whether the ledger's attempts of their slots still give each run decision its attempt number
        (``attempted``: the ledger has an attempt of the table, :func:`attempted_tables`)."""
        if self.first_attempts and not attempted:
            return True
        return all(_attempt_holds(d, last_attempts) for d in self.decisions)


def _attempt_holds(decision: Decision, last_attempts: Any) -> bool:
    """A run decision's attempt number is still the one after the ledger's last attempt of its slot (a skipped
    decision has none)."""
    if decision.decision != "run":
        return True
    return last_attempts.get((decision.table.qualified, decision.operation, decision.slot), -1) + 1 == decision.attempt


class GateMemo:
    """The last tick's entries, and what every entry shared (``context``: the policies, the scheduler's settings,
    the debt weights, the estimator). A tick takes each table's entry out of ``tables`` as it reads it (so the
    decisions it replaces are freed as it goes: at 50,000 tables × 8 kinds, 400,000 of them) and puts its own
    in place of the whole dict when it ends. Two ticks at once (the sensor and an API request) each find fewer
    entries, and make those tables' decisions afresh: never a wrong one, as an entry is never changed (but for
    its instants told late, :data:`LATER`: the same whoever tells them)."""

    def __init__(self) -> None:
        self.context: tuple | None = None
        self.tables: dict[TableName, TableEntry] = {}


MEMO = GateMemo()


def forget() -> None:
    """Forget every kept decision (a benchmark's cold tick; nothing in the product needs it)."""
    MEMO.context, MEMO.tables = None, {}


def begin(data: PlanInput) -> dict[TableName, TableEntry]:
    """The entries this tick may reuse: the last tick's, or none when what every table shares changed."""
    context = (data.policies.policies, data.limits, data.debt_weights, data.estimate_bytes)
    previous = MEMO.context
    if previous is None or len(previous) != len(context) or any(
            a is not b and a != b for a, b in zip(previous, context)):
        MEMO.context, MEMO.tables = context, {}
    return MEMO.tables


def attempted_tables(data: PlanInput) -> frozenset[str]:
    """The tables the ledger has an attempt of (:meth:`TableEntry.attempts_hold`)."""
    return frozenset(key[0] for key in data.last_attempts)


def end(kept: dict[TableName, TableEntry]) -> None:
    """This tick's entries, for the next (the tables it did not plan are forgotten)."""
    MEMO.tables = kept


def table_histories(data: PlanInput, qualified: str) -> tuple:
    """The table's history of every operation kind, in their order (``op.order``; None: no run recorded): the gate
    stage reads them, and the zero-change gate all of them."""
    history_of = data.history.get
    return tuple([history_of((qualified, op)) for op in ALL_OPERATIONS])


def table_inputs(data: PlanInput, table: TableName, listed: bool, loaded: bool, ops: Sequence[Any],
                 qualified: str, flying: frozenset[str], histories: tuple) -> tuple | None:
    """What a table's decisions read besides its metrics record, the policies and the clock (None: something that
    cannot be compared, so the table is never kept: a writer, whose runs and first writes each tick reads anew).
    ``histories``: :func:`table_histories`, which the gate stage reads for the table anyway."""
    if data.writers.get(qualified):
        return None
    busy = qualified in flying and tuple((qualified, op) in data.in_flight for op in ops)
    backlogs = tuple(data.backlogs.get((qualified, op)) for op in ops) if data.backlogs else ()
    runs = tuple(data.recorded_runs.get((qualified, op)) for op in ops if op.spec.has_cadence) \
        if data.recorded_runs else ()
    return (listed, loaded, qualified in data.busy_tables, busy, backlogs, runs, histories)  # one tuple: 50,000 kept


def reusable(entry: TableEntry | None, metrics: Any, inputs: tuple | None, now: datetime) -> bool:
    """Whether a table's kept decisions may be read at all this tick (each then by its own instant)."""
    if entry is None or inputs is None or entry.metrics is not metrics:
        return False
    try:
        return entry.at <= now and entry.inputs == inputs
    except TypeError:  # naive and aware times mixed: never reused
        return False


def holds(entry: TableEntry, index: int, data: PlanInput, now: datetime, schedule: Schedule | None, policy: Any,
          last_success: datetime | None) -> bool:
    """Whether the kept decision ``index`` of the entry holds at ``now`` (its attempt too, for a run: the
    ledger's attempts of its slot). Its instant is told here the first time a tick at another clock asks, from
    what it was made of (the same inputs: the entry is read only when they are; the schedule and the policy
    equal to those it was made with, and its last success)."""
    decision = entry.decisions[index]
    if now != entry.at:
        until = entry.until[index]
        if until is LATER:
            until = entry.until[index] = valid_until(decision, schedule, policy, last_success, entry.at)
        if until is not None and not now < until:  # type: ignore[operator]
            return False
    return _attempt_holds(decision, data.last_attempts)


def valid_until(decision: Decision, schedule: Schedule | None, policy: Any, last_success: datetime | None,
                now: datetime) -> datetime | None:
    """The first instant at which the gates might decide otherwise for the same inputs: None (never), or ``now``
    itself for a verdict that reads the clock in ways not followed here (it holds at this clock only)."""
    try:
        return _valid_until(decision, schedule, policy, last_success, now)
    except (TypeError, ValueError):  # a naive time among the inputs: this clock only
        return now


def _valid_until(decision: Decision, schedule: Schedule | None, policy: Any, last_success: datetime | None,
                 now: datetime) -> datetime | None:
    if schedule is not None and schedule.sla is not None:
        return now  # every decision carries its SLA verdict at now
    code = decision.code if decision.decision == "skip" else None
    if code in _STATIC:
        return None
    if not _clock_free(schedule) or decision.cadence is not None or decision.backlog is not None:
        return now
    due_until = schedule.at(now).next_slot if schedule.kind == "cron" else None  # type: ignore[union-attr]
    if code == "not_due":
        return _earlier(decision.next_eligible, due_until)
    held = _HELD_UNTIL.get(code)  # type: ignore[arg-type]
    if held is not None:
        return _earlier(_utc(getattr(decision, held)), due_until)
    if code is None or code in _AFTER_DUE:
        until = _conditions_until(decision.condition_result, policy, last_success, now)
        return until if until is now else _earlier(until, due_until)
    return now


def _clock_free(schedule: Schedule | None) -> bool:
    """An enabled schedule whose verdict reads the clock only through its rule: always open (no window, every
    day), no quiet period, no after-write rule."""
    return schedule is not None and schedule.enabled and schedule.always_open and schedule.quiet is None \
        and schedule.after_write is None and not schedule.enforce_window_end


def _conditions_until(result: ConditionResult | None, policy: Any, last_success: datetime | None,
                      now: datetime) -> datetime | None:
    """Until when the trigger-condition gate's verdict holds: a forced one, or one not evaluated, forever; one
    that passed, until the critical-pipeline force would take over (a threshold that measures an age: this clock
    only); a minimum interval, until it ends; any other (unmet: its recheck time follows the clock) this clock."""
    if result is None or not result.evaluated or result.forced:
        return None
    conditions = policy.trigger_conditions
    if conditions is None:
        return None if result.passed else now
    if result.passed:
        if any(name in conditions.thresholds for name in _TIME_THRESHOLDS):
            return now
        until = None
    elif result.blocked_code == "min_interval":
        until = _utc(result.next_eligible)
    else:
        return now
    delay = conditions.critical_delay
    if delay is not None and last_success is not None:
        until = _earlier(until, _utc(last_success) + delay)
    return until


def _utc(moment: datetime | None) -> datetime | None:
    return as_utc(moment) if moment is not None else None


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None or a <= b else b
