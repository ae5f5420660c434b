"""The planner: from tables, policies, health, history and ``now``, the ordered, budgeted decisions
docs/automation.md describes. Pure: the launchers (schedules, the debt-score sensor), ``floe-dagster plan``,
``explain`` and the HTTP API all call :func:`plan` and differ only in what they do with the result.

Gates, in order; a skipped decision's reasons start with the first gate that blocked it:
schedule_disabled, gc_disabled; table_missing, not_loaded; window_closed, day_not_allowed; not_due;
failure_backoff; conflict_retry; zero_change_throttle; conditions_unmet, min_interval, no_health; not_quiet
(core/quiet.py); in_flight (a run of the table, or another of its operations admitted earlier in the
same tick: one operation per table at a time); the budgets budget_tables, budget_operations,
budget_bytes, tick_cap, or budget_share when fair shares split them (core/fair_shares.py).

Admitted decisions are grouped into batches (core/batches.py): one run per batch. The table and
operation budgets and the byte budget count (table, operation) items; ``max-run-requests-per-tick``
and ``max-queued-runs`` count runs, so a new batch is what a tick cap stops.

A shadow policy's decisions (``mode: shadow``) pass the same gates, reading a history in which their
newest recorded shadow decision stands in for a successful run; the ones that would run are ranked
in a budget pass of their own, after the live pass, with budgets of their own (their bytes are the
shadow rows' of the last hour, no run of theirs is ever queued), so they never take budget from live
work. They come out as ``run`` decisions with ``shadow`` set, ranked after every live one:
:attr:`Plan.admitted` is the live work, :attr:`Plan.shadowed` what would have run.
"""

from __future__ import annotations

import gc
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping, Sequence

from floe_dagster.core.batches import ONE_TABLE_PER_RUN, BatchPacker, BatchSettings, RunClass
from floe_dagster.core.commit_conflicts import conflict_retry_delay
from floe_dagster.core.conditions import ConditionResult
from floe_dagster.core.debt import DebtWeights, TableDebt
from floe_dagster.core.history import CONFLICT_STREAK, OperationHistory
from floe_dagster.core.measurements import TableMetrics
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import ALL_OPERATIONS, Operation, gc_disabled, gc_disabled_reason
from floe_dagster.core.partition_scope import Backlog, PartitionSelection, plan_scope
from floe_dagster.core.policy import Policy, PolicySet
from floe_dagster.core.quiet import QuietVerdict, due_since, quiet_verdict
from floe_dagster.core.run_decision import SHADOW_ATTEMPT, SHADOW_PREFIX, item_key
from floe_dagster.core.estimates import EstimateOptionError, RewriteRules
from floe_dagster.core.fair_shares import (
    BYTES, FAIR_SHARES_OFF, OPERATIONS, RUNS, TABLES, FairQueue, FairShareSettings, PastAdmission, admission_costs,
    decayed_usage,
)
from floe_dagster.core.schedule import schedule_due
from floe_dagster.core.tables import TableName
from floe_dagster.core.validation import setting

MAX_BACKOFF = timedelta(days=7)
FIRST_BACKOFF = timedelta(minutes=5)


@dataclass(frozen=True)
class SchedulerSettings:
    """floe.yaml's ``scheduler`` section: Floe's keys, names (kebab case in the file) and defaults;
    0 means unlimited. The last two are not Floe's: Dagster-side caps that hold even with Floe's
    unlimited budgets (docs/automation.md, "Budgets")."""

    enabled: bool = setting(True, "false: the debt-score sensor's ticks plan and launch nothing")
    condition_based_triggering_enabled: bool = setting(
        True, "false: policies' trigger conditions are not checked, their schedules alone decide")
    max_tables_per_poll: int = setting(0, "tables admitted per tick")
    max_operations_per_poll: int = setting(0, "(table, operation) items admitted per tick")
    max_bytes_per_hour: int = setting(0, "estimated bytes admitted over a rolling hour")
    failure_backoff_threshold: int = setting(3, "failures in a row before a table backs off")
    failure_backoff_hours: float = setting(6, "the first backoff, doubled with each further failure (at most 7 days)")
    zero_change_threshold: int = setting(5, "runs that changed nothing before a table's interval is stretched")
    zero_change_frequency_reduction_percent: float = setting(50, "how much each stretch lengthens the interval")
    zero_change_min_interval_hours: float = setting(6, "the shortest stretched interval")
    max_run_requests_per_tick: int = setting(25, "runs requested per tick, even with the unlimited budgets above")
    max_queued_runs: int = setting(100, "floe's queued runs at any time, even with the unlimited budgets above")


@dataclass(frozen=True)
class Decision:
    table: TableName
    operation: Operation
    policy: str | None
    decision: str  # "run" or "skip"
    reasons: tuple[str, ...]
    trigger: str | None  # cron, interval, condition, critical (for a run)
    debt_score: float
    debt_breakdown: Mapping[str, float]
    estimated_bytes: int
    next_eligible: datetime | None
    rank: int | None
    slot: str | None = None
    attempt: int = 0
    policy_priority: int = 0
    schedule_priority: int = 0
    condition_result: ConditionResult | None = None  # the trigger-condition gate's verdict, once reached
    quiet: QuietVerdict | None = None  # the quiet gate's verdict, once reached (a schedule with quietFor)
    backoff_until: datetime | None = None
    throttled_until: datetime | None = None
    max_runtime_s: float | None = None
    enabled: bool = True
    run_class: RunClass | None = None  # what its run shares with the batch's other tables (a run decision)
    batch: int | None = None  # the batch (one run) it was admitted into this tick: 1, 2, …
    # A partition-scoped rewrite: the partitions it takes and the backlog it leaves (None: the whole table).
    scope: PartitionSelection | None = None
    backlog: Backlog | None = None  # what an earlier admission left to do (the ledger's), while open
    shadow: bool = False  # its policy's mode is shadow: a "run" decision is recorded, never run

    @property
    def conditions(self) -> dict[str, Any]:
        """The trigger-condition gate's verdict as JSON (empty when an earlier gate stopped the work);
        rendered on demand: only ``explain`` and the API show it, and a tick makes 50,000 decisions."""
        return self.condition_result.to_json() if self.condition_result is not None else {}

    @property
    def item_key(self) -> str:
        return item_key(self.table.qualified, self.operation, self.slot, self.attempt)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table.qualified,
            "operation": self.operation.value,
            "policy": self.policy,
            "decision": self.decision,
            "reasons": list(self.reasons),
            "trigger": self.trigger if self.decision == "run" else None,
            "debt_score": round(self.debt_score, 2),
            "estimated_bytes": self.estimated_bytes,
            "next_eligible": self.next_eligible.isoformat() if self.next_eligible else None,
            "rank": self.rank,
            **({"shadow": True} if self.shadow else {}),  # a shadow policy's: recorded, never run
            **({"scope": self.scope.to_json()} if self.scope is not None else {}),
        }


@dataclass(frozen=True)
class PlanInput:
    now: datetime
    catalog_tables: Sequence[TableName]  # what the catalog lists now
    loaded_tables: frozenset[TableName]  # the code location's assets
    policies: PolicySet
    limits: SchedulerSettings
    metrics: Mapping[TableName, TableMetrics] = field(default_factory=dict)
    history: Mapping[tuple[str, Operation], OperationHistory] = field(default_factory=dict)
    in_flight: frozenset[tuple[str, Operation]] = frozenset()  # runs queued/started + fresh ledger admissions
    # Tables a queued or running run maintains, whatever its operation: one run per table at a time.
    busy_tables: frozenset[str] = frozenset()
    last_attempts: Mapping[tuple[str, Operation, str], int] = field(default_factory=dict)  # from the ledger
    bytes_last_hour: int = 0
    queued_runs: int = 0
    debt_weights: DebtWeights | None = None  # settings.debt (None: the defaults)
    # Which due items this launcher may admit (a schedule: its own rule); the others are reported only.
    launcher_filter: Callable[["Decision"], bool] | None = None
    estimate_bytes: Callable[[TableName, Operation, TableMetrics | None, OperationConfig | None], int] | None = None
    batching: BatchSettings = ONE_TABLE_PER_RUN
    # The backlog the newest admission of each (table, operation) left (scheduling/inputs.ledger_state).
    backlogs: Mapping[tuple[str, Operation], Backlog] = field(default_factory=dict)
    # The shadow pass's own rolling hour: estimated bytes of the shadow rows recorded in the last hour.
    shadow_bytes_last_hour: int = 0
    fair_shares: FairShareSettings = FAIR_SHARES_OFF  # settings.fair_shares (off: plain rank order)
    # The live admissions of the last hours (the ledger's): the fair shares' memory across ticks.
    past_admissions: tuple[PastAdmission, ...] = ()


@dataclass(frozen=True)
class Plan:
    at: datetime
    decisions: list[Decision]
    notes: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> list[Decision]:
        """The live decisions admitted: the work that runs, in rank order."""
        return sorted((d for d in self.decisions if d.decision == "run" and not d.shadow), key=lambda d: d.rank or 0)

    @property
    def shadowed(self) -> list[Decision]:
        """The shadow policies' decisions that would run, in rank order (after every live one)."""
        return sorted((d for d in self.decisions if d.decision == "run" and d.shadow), key=lambda d: d.rank or 0)

    def batches(self, admitted: Iterable[Decision] | None = None) -> list[list[Decision]]:
        """The admitted decisions (or the given subset of them) by batch, each in rank order, the
        batches in the order of their first decision."""
        return group_batches(self.admitted if admitted is None else admitted)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "decisions": [d.to_json() for d in self.decisions], "notes": self.notes}

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for decision in self.decisions:
            if decision.decision == "skip" and decision.reasons:
                code = decision.reasons[0].split(":")[0]
                counts[code] = counts.get(code, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def group_batches(decisions: Iterable[Decision]) -> list[list[Decision]]:
    """Admitted decisions by batch (a decision without one is a batch of its own), in rank order."""
    by_batch: dict[object, list[Decision]] = {}
    for decision in sorted(decisions, key=lambda d: d.rank or 0):
        key = decision.batch if decision.batch is not None else ("alone", decision.item_key)
        by_batch.setdefault(key, []).append(decision)
    return list(by_batch.values())


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


def _table_snapshot_ours(qualified: str, history: Mapping[tuple[str, Operation], OperationHistory]) -> set[int]:
    return {
        h.last_snapshot_after for op in ALL_OPERATIONS
        if (h := history.get((qualified, op))) is not None and h.last_snapshot_after is not None
    }


_NO_HISTORY = OperationHistory()
_DECISION_DEFAULTS = {f.name: f.default for f in fields(Decision) if f.default is not MISSING}


def _decision(values: Mapping[str, Any], /, **changes: Any) -> Decision:
    """A :class:`Decision` of ``values`` with ``changes``, without its generated ``__init__`` (a frozen
    dataclass's sets each of its 20 fields through ``object.__setattr__``): a tick makes 50,000 of
    them and 2-3 copies each."""
    decision = object.__new__(Decision)
    decision.__dict__.update(values)
    decision.__dict__.update(changes)
    return decision


def _replace(original: Decision, /, **changes: Any) -> Decision:
    """``dataclasses.replace`` for :class:`Decision` (see :func:`_decision`)."""
    return _decision(original.__dict__, **changes)


def plan(data: PlanInput) -> Plan:
    """The decisions for every (table, operation) the policies configure, admitted ones ranked."""
    # A tick allocates ~100,000 small acyclic objects (decisions, reasons, verdicts); with the cyclic
    # collector on, they trigger collections that rescan every live object of the process (the
    # health metrics of every table among them): about a quarter of a 10,000-table tick. Nothing here
    # makes reference cycles, so the collector waits until the tick is done.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _plan(data)
    finally:
        if paused:
            gc.enable()


def _plan(data: PlanInput) -> Plan:
    now = data.now
    catalog_tables = frozenset(data.catalog_tables)
    decisions: list[Decision] = []
    notes: list[str] = []
    candidates: list[Decision] = []
    weights = data.debt_weights
    history_of = data.history.get
    estimate_bytes = data.estimate_bytes

    # Sorted by the fields' tuple (TableName's order) without calling its generated __lt__ per comparison.
    for table in sorted(catalog_tables.union(data.loaded_tables), key=lambda t: (t.catalog, t.namespace, t.name)):
        policy: Policy | None = data.policies.effective_policy(table)
        if policy is None:
            continue
        metrics = data.metrics.get(table)
        issues = policy.health_issues(metrics, now) if metrics is not None else ()
        table_debt = TableDebt(issues, metrics, now, weights)
        qualified = table.qualified
        for op in policy.configured_operations():
            history = history_of((qualified, op)) or _NO_HISTORY
            if policy.shadow:
                history = history.as_shadow_sees_it()
            score, breakdown = table_debt.with_history(history.failure_rate, history.consecutive_failures)
            schedule = policy.schedule(op)
            estimate = estimate_bytes(table, op, metrics, policy.config(op)) if estimate_bytes and op.rewrites_data else 0
            base = _decision(
                _DECISION_DEFAULTS, table=table, operation=op, policy=policy.name, decision="skip", reasons=(),
                trigger=None, debt_score=score, debt_breakdown=breakdown, estimated_bytes=estimate,
                next_eligible=None, rank=None, policy_priority=policy.priority,
                schedule_priority=schedule.priority if schedule else 0, enabled=bool(schedule and schedule.enabled),
                shadow=policy.shadow,
            )
            decision = _gate(data, catalog_tables, table, op, policy, schedule, metrics, history, base)
            (candidates if decision.decision == "run" else decisions).append(decision)

    candidates.sort(key=lambda d: (
        -d.debt_score, -d.policy_priority, -d.schedule_priority, d.table.qualified, d.operation.order))
    live = list(_admit_within_budgets(data, [d for d in candidates if not d.shadow], notes))
    decisions.extend(live)
    decisions.extend(_shadow_pass(data, [d for d in candidates if d.shadow], live, notes))
    unranked = 10**9
    decisions.sort(key=lambda d: (unranked if d.rank is None else d.rank, d.table.qualified, d.operation.order))
    return Plan(now, decisions, notes)


def _shadow_pass(data: PlanInput, candidates: list[Decision], live: list[Decision],
                 notes: list[str]) -> list[Decision]:
    """The shadow decisions through the same budgets with a fresh state of their own (nothing admitted
    yet, their own hour of bytes, no queued run), ranked and batched after the live ones."""
    if not candidates:
        return []
    shadow_notes: list[str] = []
    own_budgets = replace(data, bytes_last_hour=data.shadow_bytes_last_hour, queued_runs=0, past_admissions=())
    passed = list(_admit_within_budgets(own_budgets, candidates, shadow_notes))
    ranks = max((d.rank for d in live if d.rank is not None), default=0)
    batches = max((d.batch for d in live if d.batch is not None), default=0)
    notes.extend(f"shadow: {note}" for note in shadow_notes)
    return [d if d.rank is None else _replace(d, rank=d.rank + ranks, batch=(d.batch or 0) + batches)
            for d in passed]


def _skip(base: Decision, code: str, detail: str = "", **changes: Any) -> Decision:
    reason = f"{code}: {detail}" if detail else code
    return _replace(base, decision="skip", reasons=(reason, *changes.pop("more", ())), **changes)


def _open_from(schedule: Any, moment: datetime | None) -> datetime | None:
    """The first moment at or after ``moment`` inside the schedule's window on an allowed day: when a gate
    that ends at ``moment`` lets the work start (``next_eligible``, like :class:`Due`'s)."""
    return schedule.next_open(moment) if moment is not None else None


def _gate(
    data: PlanInput,
    catalog_tables: frozenset[TableName],  # built once per tick: a set per decision made the tick quadratic
    table: TableName,
    op: Operation,
    policy: Policy,
    schedule: Any,
    metrics: TableMetrics | None,
    history: OperationHistory,
    base: Decision,
) -> Decision:
    now, limits = data.now, data.limits
    if schedule is None or not schedule.enabled:
        return _skip(base, "schedule_disabled", f"{op.schedule_key} is missing or disabled")
    if op.needs_gc and metrics is not None and gc_disabled(metrics.properties):  # as the run checks it
        return _skip(base, "gc_disabled", gc_disabled_reason(op))
    if table not in catalog_tables:
        return _skip(base, "table_missing", "the table is no longer in the catalog")
    if table not in data.loaded_tables:
        return _skip(base, "not_loaded", "in the catalog but not yet an asset; it becomes one at the next reload")

    # The windows and allowed days come first (window_closed, day_not_allowed), then not_due.
    due = schedule_due(schedule, history.last_success_start, now)
    # A shadow decision never continues a backlog: a continuation is the same slot's next attempt, and
    # shadow decisions are recorded once per slot.
    backlog = data.backlogs.get((table.qualified, op)) if data.backlogs and not base.shadow else None
    if backlog is not None and backlog.open_after(history.last_success_start):
        base = _replace(base, backlog=backlog)
        if not due.due and due.blocked in (None, "not_due"):  # the window and the days still hold
            due = _backlog_due(backlog)
    if not due.due:
        return _skip(base, due.blocked or "not_due", due.detail, next_eligible=due.next_eligible)
    # What the gates below learn accumulates here and goes into the one copy they return.
    extra: dict[str, Any] = {"trigger": due.trigger, "slot": due.slot_key}

    backoff = backoff_delay(history.consecutive_failures, limits.failure_backoff_threshold, limits.failure_backoff_hours)
    if backoff and history.last_failure_at is not None and now < history.last_failure_at + backoff:
        until = history.last_failure_at + backoff
        why = (f" (the last {history.consecutive_conflicts} runs lost their commit race: from the "
               f"{CONFLICT_STREAK}th in a row on, each counts as a failure)" if history.conflicts_back_off else "")
        return _skip(base, "failure_backoff", f"{history.consecutive_failures} consecutive failure(s){why}; retry at "
                     f"{until.isoformat()}", next_eligible=_open_from(schedule, until), backoff_until=until, **extra)

    if history.consecutive_conflicts and history.last_conflict_at is not None:
        until = history.last_conflict_at + conflict_retry_delay(table.qualified, op.value, history.consecutive_conflicts)
        if now < until:
            return _skip(base, "conflict_retry", f"{history.consecutive_conflicts} lost commit race(s) in a row "
                         f"(not failures: no backoff); retry at {until.isoformat()}",
                         next_eligible=_open_from(schedule, until), backoff_until=until, **extra)

    if limits.zero_change_threshold > 0 and history.consecutive_zero_change >= limits.zero_change_threshold:
        new_data = metrics is not None and metrics.current_snapshot_id is not None \
            and metrics.current_snapshot_id not in _table_snapshot_ours(table.qualified, data.history)
        if not new_data and history.last_success_start is not None:
            interval = schedule.effective_interval() or timedelta(0)
            throttled = max(timedelta(hours=limits.zero_change_min_interval_hours),
                            interval * (1 + limits.zero_change_frequency_reduction_percent / 100))
            until = history.last_success_start + throttled
            if now < until:
                return _skip(base, "zero_change_throttle",
                             f"{history.consecutive_zero_change} runs changed nothing; next at {until.isoformat()}",
                             next_eligible=_open_from(schedule, until), throttled_until=until, **extra)

    conditions = policy.evaluate_conditions(
        op, metrics, history.last_success_start, now, limits.condition_based_triggering_enabled)
    extra["condition_result"] = conditions
    if conditions.forced:
        extra["trigger"] = "critical"
    elif not conditions.passed and extra["trigger"] != "backlog":  # a backlog was decided already
        return _skip(base, conditions.blocked_code, conditions.detail,
                     next_eligible=_open_from(schedule, conditions.next_eligible), **extra)

    quiet_reason: tuple[str, ...] = ()
    if schedule.quiet is not None:
        quiet = extra["quiet"] = quiet_verdict(schedule.quiet, metrics, due_since(due, metrics), now)
        if not quiet.passed:
            return _skip(base, "not_quiet", quiet.detail, next_eligible=_open_from(schedule, quiet.next_eligible),
                         **extra)
        quiet_reason = (quiet.detail,)

    if (table.qualified, op) in data.in_flight:
        return _skip(base, "in_flight", "a run of this table and operation is queued or running", **extra)
    if table.qualified in data.busy_tables:
        return _skip(base, "in_flight", "another run maintains this table (one run per table at a time)", **extra)

    reason = f"{due.trigger}: {due.detail}"
    if base.shadow:
        attempt = SHADOW_ATTEMPT
        reason = f"{SHADOW_PREFIX}{reason} (shadow policy '{policy.name}')"
    else:
        attempt = data.last_attempts.get((table.qualified, op, due.slot_key), -1) + 1
    window_end = schedule.window_end_after(now) if schedule.enforce_window_end else None
    runtime = schedule.timeout_hours * 3600
    if window_end is not None:
        runtime = min(runtime, max(60.0, (window_end - now).total_seconds()))
    return _replace(base, decision="run", reasons=(reason, *quiet_reason), attempt=attempt,
                   max_runtime_s=runtime, next_eligible=now, run_class=_run_class(schedule), **extra)


@dataclass(frozen=True)
class _BacklogDue:
    """The schedule's verdict for a backlog's continuation: due now, in the backlog's own slot (so the
    attempt number is the slot's next one)."""

    slot_key: str
    detail: str
    due: bool = True
    trigger: str = "backlog"
    blocked: str | None = None
    next_eligible: datetime | None = None
    # What the quiet gate reads (core/quiet.due_since): a continuation has been due since its slot.
    slot: datetime | None = None
    last_success_start: datetime | None = None


def _backlog_due(backlog: Backlog) -> _BacklogDue:
    return _BacklogDue(backlog.slot, f"continues slot {backlog.slot}: {backlog.partitions} partition(s), "
                                     f"{backlog.bytes} bytes left", slot=_slot_time(backlog.slot))


def _slot_time(slot_key: str) -> datetime | None:
    """A due slot's time, read back from its key (``Due.slot_key``: a cron slot's ISO time,
    ``interval:<ISO>``, ``condition:<ISO>``); None for ``...:first``, ``cron:none`` and manual work."""
    for text in (slot_key, slot_key.partition(":")[2]):
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            continue
    return None


def _run_class(schedule: Any) -> RunClass:
    days = ",".join(str(d) for d in sorted(schedule.allowed_days))
    return RunClass(
        timeout=f"{schedule.timeout_hours:g}h",
        window=f"{schedule.window_start}-{schedule.window_end} days {days} {schedule.timezone} "
               f"enforce {schedule.enforce_window_end}",
    )


BUDGET_CODES = ("budget_tables", "budget_operations", "budget_bytes", "tick_cap")


def _admit_within_budgets(data: PlanInput, candidates: list[Decision], notes: list[str]) -> list[Decision]:
    """One admission pass: the ranked ``candidates`` (each passed every gate before ``in_flight``)
    admitted or skipped against the budgets ``data`` gives (``limits``, ``bytes_last_hour``,
    ``queued_runs``), one operation per table, split between shares when ``data.fair_shares`` is on.
    Admitted decisions get their rank (1, 2, … in this pass) and batch; notes go to ``notes``. A
    second pass over other candidates (shadow policies) calls it again with its own budgets."""
    decisions: list[Decision] = []
    offered: list[Decision] = []
    for decision in candidates:
        if data.launcher_filter is not None and not data.launcher_filter(decision):
            decisions.append(_replace(decision, decision="skip", reasons=(
                "out_of_scope: another launcher admits it", *decision.reasons), trigger=decision.trigger))
        else:
            offered.append(decision)
    admission = _Admission(data, notes)
    if not data.fair_shares.enabled:
        decisions.extend(admission.offer(decision) for decision in offered)
        return decisions
    return decisions + _admit_fairly(data, admission, offered)


def _admit_fairly(data: PlanInput, admission: "_Admission", offered: list[Decision]) -> list[Decision]:
    """``offered`` in the fair order of core/fair_shares.py; a decision a budget stopped while
    several shares wanted it skips with ``budget_share``, naming its share's part."""
    shares = data.fair_shares
    share_of: dict[TableName, str] = {}

    def table_share(table: TableName) -> str:
        if table not in share_of:
            policy = data.policies.effective_policy(table) if shares.tag is not None else None  # by namespace: none needed
            share_of[table] = shares.share_of(table.namespace_str, policy.tags if policy is not None else {})
        return share_of[table]

    by_share: dict[str, list[Decision]] = {}
    for decision in offered:
        by_share.setdefault(table_share(decision.table), []).append(decision)
    order = {id(decision): index for index, decision in enumerate(offered)}
    listed = {table.qualified: table for table in data.catalog_tables} if data.past_admissions else {}
    prior = decayed_usage(data.past_admissions, data.now,
                          lambda name: table_share(listed[name]) if name in listed else None, data.batching.max_tables)
    queue = FairQueue(by_share, admission.capacity(), shares.weight, lambda d: order[id(d)], prior)
    decided: list[tuple[str, Decision]] = []
    for share, decision in queue:
        decision = admission.offer(decision)
        queue.charge(share, admission.last_costs)
        decided.append((share, decision))
    if len(queue.shares) < 2:  # nothing was split
        return [decision for _, decision in decided]
    # The reasons are told once the pass is over (a share's final part), once per (share, budget): a
    # tick may skip tens of thousands of decisions for a handful of shares.
    told: dict[tuple[str, str], str] = {}
    total_weight = queue.total_weight
    decisions = []
    for share, decision in decided:
        code = decision.reasons[0].split(":")[0] if decision.decision == "skip" and decision.reasons else None
        if code in BUDGET_CODES:
            reason = told.get((share, code))
            if reason is None:
                reason = told[(share, code)] = _share_reason(data, admission, queue, share, code, total_weight)
            decision = _replace(decision, reasons=(reason, *decision.reasons[1:]))
        decisions.append(decision)
    return decisions


def _share_reason(data: PlanInput, admission: "_Admission", queue: FairQueue, share: str, code: str,
                  total_weight: float) -> str:
    """Why a budget stopped a decision, told as its share's: what the share took of that budget and its weight."""
    budget, limit, what = admission.budget_named(code)
    used = queue.used(share, budget)
    shares = data.fair_shares
    before = queue.used_before(share, budget)
    if budget == RUNS:  # counted in seats: a table is 1/max-tables of a run
        part = f"{round(used * data.batching.max_tables)} tables of the {limit} {what}"
        before *= data.batching.max_tables
    else:
        part = f"{int(used)} of {limit} {what}"
    if before >= 0.05:  # the earlier ticks' admissions it is charged with (fair_shares' memory)
        earlier = f"{int(before)} bytes" if budget == BYTES else \
            f"{before:.1f} {'operations' if budget == OPERATIONS else 'tables'}"
        part += f", and {earlier} admitted in earlier ticks (decaying over an hour)"
    return (f"budget_share: {shares.describe(share)} used its share, {part}; "
            f"weight {shares.weight(share):g} of {total_weight:g}")


class _Admission:
    """The budgets of one admission pass and what it admitted so far: decisions are offered one at a
    time, in the pass's order (rank order, or the fair shares' order), and each is admitted or
    skipped with the first budget that stops it. Batches are filled in that order, so with fair
    shares a run may hold the tables of several shares."""

    def __init__(self, data: PlanInput, notes: list[str]) -> None:
        self.data, self.limits, self.notes = data, data.limits, notes
        self.tables_admitted: dict[TableName, Operation] = {}  # one operation per table at a time
        self.operations_admitted = 0
        self.bytes_before = self.bytes_used = data.bytes_last_hour
        self.runs_allowed = min(self.limits.max_run_requests_per_tick,
                                max(0, self.limits.max_queued_runs - data.queued_runs))
        self.rank = 0
        self.packer = BatchPacker(data.batching)
        self.last_costs: dict[str, float] = {}  # what the last decision offered took (fair_shares' names)
        self.tick_cap = (f"at most {self.runs_allowed} run requests this tick (max-run-requests-per-tick "
                         f"{self.limits.max_run_requests_per_tick}, queued runs {data.queued_runs}/"
                         f"{self.limits.max_queued_runs})")

    def capacity(self) -> dict[str, float]:
        """The limited budgets of the pass, by fair_shares' names (unlimited ones left out)."""
        limits = self.limits
        capacity = {RUNS: float(self.runs_allowed)}
        if limits.max_tables_per_poll:
            capacity[TABLES] = float(limits.max_tables_per_poll)
        if limits.max_operations_per_poll:
            capacity[OPERATIONS] = float(limits.max_operations_per_poll)
        if limits.max_bytes_per_hour:
            capacity[BYTES] = float(max(0, limits.max_bytes_per_hour - self.bytes_before))
        return capacity

    def budget_named(self, code: str) -> tuple[str, int, str]:
        """A budget reason code's budget: its fair_shares name, its amount in this pass, and its unit."""
        limits = self.limits
        return {
            "budget_tables": (TABLES, limits.max_tables_per_poll, "tables this tick (max-tables-per-poll)"),
            "budget_operations": (OPERATIONS, limits.max_operations_per_poll,
                                  "operations this tick (max-operations-per-poll)"),
            "budget_bytes": (BYTES, max(0, limits.max_bytes_per_hour - self.bytes_before),
                             "bytes left of max-bytes-per-hour this tick"),
            "tick_cap": (RUNS, self.runs_allowed, "run requests of this tick (the tick cap)"),
        }[code]

    def offer(self, decision: Decision) -> Decision:
        """The decision admitted (ranked, in a batch) or skipped."""
        self.last_costs = {}
        limits = self.limits
        admitted_op = self.tables_admitted.get(decision.table)
        if admitted_op is not None:
            # Its runs would meet at the table lock, and one would only skip the table.
            return _skip(decision, "in_flight", f"{admitted_op.value} of this table was admitted this tick "
                         f"(one operation per table at a time)", more=decision.reasons)
        if limits.max_tables_per_poll and len(self.tables_admitted) >= limits.max_tables_per_poll:
            return _skip(decision, "budget_tables", f"max-tables-per-poll {limits.max_tables_per_poll} reached",
                         more=decision.reasons)
        if limits.max_operations_per_poll and self.operations_admitted >= limits.max_operations_per_poll:
            return _skip(decision, "budget_operations",
                         f"max-operations-per-poll {limits.max_operations_per_poll} reached", more=decision.reasons)
        decision = _scoped(self.data, decision, self.bytes_used)
        alone = False  # larger than the whole budget, into an empty window: noted once admitted
        if limits.max_bytes_per_hour and decision.operation.rewrites_data:
            if self.bytes_used + decision.estimated_bytes > limits.max_bytes_per_hour:
                if decision.estimated_bytes > limits.max_bytes_per_hour and self.bytes_used == 0:
                    alone = True
                else:
                    return _skip(decision, "budget_bytes", f"{self.bytes_used} of {limits.max_bytes_per_hour} bytes "
                                 f"used in the last hour", more=decision.reasons)
        kind = (decision.operation, *(decision.run_class or RunClass()).key(self.data.batching.group_by))
        opens_new = self.packer.opens_new(kind, decision.estimated_bytes)
        if opens_new and self.packer.batches >= self.runs_allowed:
            return _skip(decision, "tick_cap", self.tick_cap, more=decision.reasons)
        if decision.scope is not None and decision.scope.oversized:
            self.notes.append(f"{decision.table.qualified} {decision.operation.value}: {decision.scope.describe()}")
        elif alone:
            self.notes.append(f"{decision.table.qualified} {decision.operation.value}: estimated "
                              f"{decision.estimated_bytes} bytes exceed the whole hourly budget; admitted alone")
        self.rank += 1
        self.tables_admitted[decision.table] = decision.operation
        self.operations_admitted += 1
        rewritten = decision.estimated_bytes if decision.operation.rewrites_data else 0
        self.bytes_used += rewritten
        # A run request is shared by the tables of its batch, whatever their share: each takes a seat.
        self.last_costs = admission_costs(rewritten, self.data.batching.max_tables)
        return _replace(decision, rank=self.rank, batch=self.packer.place(kind, decision.estimated_bytes))


def run_allowance(data: PlanInput, decision: Decision, bytes_used: int) -> tuple[int, str] | None:
    """What one rewrite run may take, and which limit says so: the rest of the hourly byte budget, the
    batch's byte limit, the policy's ``maxBytesPerRun`` (the smallest that is set); None: unlimited."""
    limits: list[tuple[int, str]] = []
    if data.limits.max_bytes_per_hour:
        limits.append((data.limits.max_bytes_per_hour - bytes_used, "the rest of max-bytes-per-hour"))
    if data.batching.max_bytes:
        limits.append((data.batching.max_bytes, "batching max-bytes"))
    policy = data.policies.effective_policy(decision.table)
    config = policy.config(decision.operation) if policy is not None else None
    per_run = getattr(config, "max_bytes_per_run", None)
    if per_run:
        limits.append((per_run, "the policy's maxBytesPerRun"))
    return min(limits) if limits else None


def _scoped(data: PlanInput, decision: Decision, bytes_used: int) -> Decision:
    """A rewrite whose estimate exceeds what the run may take, scoped so that what Iceberg rewrites
    stays within it (core/partition_scope.py): the partitions with the most benefit per byte, or a file
    count; unchanged when it fits, when the rest of the hourly budget is used up (budget_bytes decides),
    or without the full health tier (whole, as before). The estimate fits for certain when the whole
    table is within one bin of Iceberg's bin-pack (``max-file-group-size-bytes``); past that, which
    files a bin keeps depends on Iceberg's scan order, so the bound decides."""
    if not decision.operation.scopes_partitions or decision.estimated_bytes <= 0:
        return decision
    allowance = run_allowance(data, decision, bytes_used)
    if allowance is None or allowance[0] <= 0:
        return decision
    metrics = data.metrics.get(decision.table)
    policy = data.policies.effective_policy(decision.table)
    if metrics is None or policy is None:
        return decision
    try:
        rules = RewriteRules.for_data_files(policy.config(decision.operation), metrics.properties)
    except EstimateOptionError:
        return decision
    if decision.estimated_bytes <= allowance[0] and metrics.total_data_bytes <= rules.max_file_group_size_bytes:
        return decision
    selection = plan_scope(metrics, rules, allowance[0])
    if selection is None:  # no full tier, nothing Iceberg would rewrite, or all of it fits
        return decision
    reason = f"{selection.describe()}, under {allowance[1]}"
    return _replace(decision, scope=selection, estimated_bytes=selection.bytes,
                    reasons=(*decision.reasons, reason))
