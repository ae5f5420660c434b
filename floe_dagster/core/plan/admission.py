"""Admission: what a tick takes of the work every gate let run (core/plan/gates.py), in rank order.

One pass offers the ranked candidates one at a time; each is admitted (ranked 1, 2, … in the pass and
placed in a batch: core/plan/batches.py) or held back with the first step of :data:`ADMISSION` that stops
it. Before the pass, a launcher's filter leaves other launchers' work out (``out_of_scope``); with
fair shares on (core/plan/fair_shares.py) the offers follow the shares' order, and a budget that stopped a
decision while several shares wanted it is told as its share's (``budget_share``). The live decisions
make one pass; the shadow policies' make another, with budgets of their own (core/plan/plan_stages.py)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from floe_dagster.core.plan.batches import BatchPacker, RunClass
from floe_dagster.core.plan.decisions import Decision, PlanInput, Reason, replace_decision, skip, skipped_with
from floe_dagster.core.rewrites.rewrite_rules import EstimateOptionError
from floe_dagster.core.rewrites.estimates import data_file_rules
from floe_dagster.core.plan.compute_budget import compute_budget
from floe_dagster.core.plan.learned_plan import LearnedView
from floe_dagster.core.plan.fair_shares import (
    BYTES, COMPUTE, OPERATIONS, RUNS, TABLES, FairQueue, admission_costs, decayed_usage,
)
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.owner_overrides import with_overrides
from floe_dagster.core.rewrites.partition_scope import plan_scope
from floe_dagster.core.basics.tables import TableName

BUDGET_CODES = ("budget_tables", "budget_operations", "budget_bytes", "budget_compute", "tick_cap")
_NOTHING_TAKEN: Mapping[str, float] = MappingProxyType({})  # what a held-back offer took (one for them all)
_NO_RUN_CLASS = RunClass()


@dataclass(frozen=True)
class AdmissionStep:
    """A named step of admission and the reason codes it holds work back with; ``step``: the function that
    takes the pass and the offer and returns the decision held back, or None to let it on (it may change
    the offer's decision: the partition scoping does), when the step is one of the pass's (the launcher's
    filter and the fair shares' reasons are around the pass)."""

    name: str
    codes: tuple[str, ...]
    doc: str
    step: "Callable[[_Pass, Offer], Decision | None] | None" = None
    # Whether the pass needs the step at all (a budget that is set); None: always. A pass offers its steps only
    # the ones it needs: a tick offers up to 200,000 candidates, most of them to hold back.
    needed: "Callable[[_Pass], bool] | None" = None
    # Whether the step may hold or change work of the operation's kind; None: every kind's.
    applies: "Callable[[Operation], bool] | None" = None


def admit_within_budgets(data: PlanInput, candidates: list[Decision], notes: list[str],
                         learned: LearnedView | None = None) -> list[Decision]:
    """One admission pass: the ranked ``candidates`` (each passed every gate) admitted or skipped
    against the budgets ``data`` gives (``limits``, ``bytes_last_hour``, ``queued_runs``), one operation
    per table, split between shares when ``data.fair_shares`` is on. Admitted decisions get their rank
    (1, 2, … in this pass) and batch; notes go to ``notes``. A second pass over other candidates
    (shadow policies) calls it again with its own budgets. ``learned``: the plan's view of the recorded
    runs, which the compute budget estimates with (made here when not given). The decisions returned are in
    the candidates' order: the i-th is what admission made of the i-th candidate (the plan's stages put each
    in its candidate's place)."""
    admission = _Pass(data, notes, learned)
    in_scope = data.launcher_filter
    if in_scope is None and not data.fair_shares.enabled:
        return [admission.offer(decision)[0] for decision in candidates]
    decisions: list[Decision | None] = []
    offered: list[Decision] = []
    for decision in candidates:
        if in_scope is not None and not in_scope(decision):
            decisions.append(skip(decision, "out_of_scope", "another launcher admits it", more=decision.why))
        else:
            decisions.append(None)
            offered.append(decision)
    # Out of scope, a candidate is never offered: the pass's state and notes are those of the offered alone.
    made = iter(_admit_fairly(data, admission, offered) if data.fair_shares.enabled else
                [admission.offer(decision)[0] for decision in offered])
    return [decision if decision is not None else next(made) for decision in decisions]


def _admit_fairly(data: PlanInput, admission: "_Pass", offered: list[Decision]) -> list[Decision]:
    """``offered`` in the fair order of core/plan/fair_shares.py; a decision a budget stopped while
    several shares wanted it skips with ``budget_share``, naming its share's part. Returns what admission made of
    each, in ``offered``'s order."""
    shares = data.fair_shares
    share_of: dict[TableName, str] = {}

    def table_share(table: TableName) -> str:
        if table not in share_of:
            # By namespace, no policy is needed.
            policy = data.policies.effective_policy(table) if shares.tag is not None else None
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
    decided: list[tuple[str, int, Decision]] = []  # in the queue's order, with the offered decision's index
    for share, decision in queue:
        index = order[id(decision)]
        decision, costs = admission.offer(decision)
        queue.charge(share, costs)
        decided.append((share, index, decision))
    made: list[Decision] = list(offered)  # each replaced by what admission made of it
    if len(queue.shares) < 2:  # nothing was split
        for _, index, decision in decided:
            made[index] = decision
        return made
    # The reasons are told once the pass is over (a share's final part), once per (share, budget): a
    # tick may skip tens of thousands of decisions for a handful of shares.
    told: dict[tuple[str, str], str] = {}
    total_weight = queue.total_weight
    for share, index, decision in decided:
        code = decision.code if decision.decision == "skip" else None
        if code in BUDGET_CODES:
            reason = told.get((share, code))
            if reason is None:
                reason = told[(share, code)] = _share_reason(data, admission, queue, share, code, total_weight)
            decision = replace_decision(decision, why=(reason, *decision.why[1:]))
        made[index] = decision
    return made


def _share_reason(data: PlanInput, admission: "_Pass", queue: FairQueue, share: str, code: str,
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


class Offer:
    """One decision on offer, and what the steps learn of it for its admission: made for each offer, so
    nothing of one offer is left for the next."""

    __slots__ = ("decision", "alone", "compute_cost", "compute_alone", "kind")

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.alone = False  # larger than the whole byte budget, into an empty window: noted once admitted
        self.compute_cost = 0.0  # its compute estimate
        self.compute_alone = False
        self.kind: tuple = ()  # its batch kind (operation and run class)


class _Pass:
    """The budgets of one admission pass and what it admitted so far: decisions are offered one at a
    time, in the pass's order (rank order, or the fair shares' order), and each goes through the steps
    of :data:`ADMISSION` in order and is admitted, or skipped by the first step that stops it. Batches are
    filled in that order, so with fair shares a run may hold the tables of several shares."""

    def __init__(self, data: PlanInput, notes: list[str], learned: LearnedView | None = None) -> None:
        self.data, self.limits, self.notes = data, data.limits, notes
        # One operation per table at a time, by qualified name: a string keeps its hash, a TableName's is a
        # Python call, and a tick offers up to 200,000 candidates, most of tables not admitted.
        self.tables_admitted: dict[str, Operation] = {}
        self.operations_admitted = 0
        self.bytes_before = self.bytes_used = data.bytes_last_hour
        self.runs_allowed = min(self.limits.max_run_requests_per_tick,
                                max(0, self.limits.max_queued_runs - data.queued_runs))
        self.rank = 0
        self.packer = BatchPacker(data.batching)
        self.tick_cap = (f"at most {self.runs_allowed} run requests this tick (max-run-requests-per-tick "
                         f"{self.limits.max_run_requests_per_tick}, queued runs {data.queued_runs}/"
                         f"{self.limits.max_queued_runs})")
        self.tick_cap_reason = Reason("tick_cap", self.tick_cap)  # one for every decision it holds back
        self.closed = self.runs_allowed <= 0  # the tick cap holds back any further offer (:meth:`_admit`)
        self.compute = compute_budget(data, learned)  # None: no max-compute-hours-per-hour
        self.compute_before = self.compute.window.used_s if self.compute is not None else 0.0
        self.compute_used = self.compute_before
        if self.compute is not None and self.compute.window.over_spent:
            notes.append(f"compute budget: {self.compute.window.describe()}")
        needed = [step for step in ADMISSION if step.step is not None and (step.needed is None or step.needed(self))]
        # Each kind's steps, by its order in Floe's operations (a list index: an offer reads its kind's).
        self.steps_by_kind = [tuple(step.step for step in needed if step.applies is None or step.applies(op))
                              for op in ALL_OPERATIONS]

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
        if self.compute is not None:
            capacity[COMPUTE] = self.compute.left_s
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
            "budget_compute": (COMPUTE, int(self.compute.left_s) if self.compute is not None else 0,
                               "compute seconds left of max-compute-hours-per-hour this tick"),
            "tick_cap": (RUNS, self.runs_allowed, "run requests of this tick (the tick cap)"),
        }[code]

    def offer(self, decision: Decision) -> tuple[Decision, Mapping[str, float]]:
        """The decision admitted (ranked, in a batch) or skipped by the first step that stops it, and what
        it took of the budgets (fair_shares' names; nothing when held back)."""
        offer = Offer(decision)
        for step in self.steps_by_kind[decision.operation.order]:
            held = step(self, offer)
            if held is not None:
                return held, _NOTHING_TAKEN
        return self._admit(offer)

    def _admit(self, offer: Offer) -> tuple[Decision, dict[str, float]]:
        decision = offer.decision
        if decision.scope is not None and decision.scope.oversized:
            self.notes.append(f"{decision.table.qualified} {decision.operation.value}: {decision.scope.describe()}")
        elif offer.alone:
            self.notes.append(f"{decision.table.qualified} {decision.operation.value}: estimated "
                              f"{decision.estimated_bytes} bytes exceed the whole hourly budget; admitted alone")
        if offer.compute_alone:
            self.notes.append(f"{decision.table.qualified} {decision.operation.value}: estimated "
                              f"{offer.compute_cost:.0f} compute s exceed the whole max-compute-hours-per-hour; "
                              "admitted alone")
        self.rank += 1
        self.tables_admitted[decision.table.qualified] = decision.operation
        self.operations_admitted += 1
        estimated = decision.estimated_bytes
        rewritten = estimated if decision.operation.rewrites_data else 0
        self.bytes_used += rewritten
        self.compute_used += offer.compute_cost
        # A run request is shared by the tables of its batch, whatever their share: each takes a seat.
        costs = admission_costs(rewritten, self.data.batching.max_tables, offer.compute_cost)
        # Admitted work carries its estimate as a number (a held-back candidate's is made when read).
        batch = self.packer.place(offer.kind, estimated)
        # Every run the tick may request is open and none has a table's room: the tick cap holds back every
        # further offer, whatever its kind or bytes (most of a tick's up to 200,000 candidates).
        self.closed = self.packer.batches >= self.runs_allowed and self.packer.all_full()
        return replace_decision(decision, rank=self.rank, batch=batch, bytes_estimate=estimated), costs


# -- the steps, in order: each the pass and the offer, and the decision held back or None --------------


def _one_per_table(p: _Pass, offer: Offer) -> Decision | None:
    decision = offer.decision
    admitted_op = p.tables_admitted.get(decision.table.qualified)
    if admitted_op is None:
        return None
    # Its runs would meet at the table lock, and one would only skip the table.
    return skip(decision, "in_flight", f"{admitted_op.value} of this table was admitted this tick "
                f"(one operation per table at a time)", more=decision.why)


def _table_budget(p: _Pass, offer: Offer) -> Decision | None:
    limit = p.limits.max_tables_per_poll
    if limit and len(p.tables_admitted) >= limit:
        return skip(offer.decision, "budget_tables", f"max-tables-per-poll {limit} reached", more=offer.decision.why)
    return None


def _operation_budget(p: _Pass, offer: Offer) -> Decision | None:
    limit = p.limits.max_operations_per_poll
    if limit and p.operations_admitted >= limit:
        return skip(offer.decision, "budget_operations", f"max-operations-per-poll {limit} reached",
                    more=offer.decision.why)
    return None


def _scope(p: _Pass, offer: Offer) -> None:
    offer.decision = scoped(p.data, offer.decision, p.bytes_used)


def _byte_budget(p: _Pass, offer: Offer) -> Decision | None:
    decision, limit = offer.decision, p.limits.max_bytes_per_hour
    if limit and decision.operation.rewrites_data and p.bytes_used + decision.estimated_bytes > limit:
        if decision.estimated_bytes > limit and p.bytes_used == 0:
            offer.alone = True
        else:
            return skip(decision, "budget_bytes", f"{p.bytes_used} of {limit} bytes used in the last hour",
                        more=decision.why)
    return None


def _compute_budget(p: _Pass, offer: Offer) -> Decision | None:
    if p.compute is None:
        return None
    decision = offer.decision
    estimate = p.compute.estimate(decision.table.qualified, decision.operation, decision.estimated_bytes)
    offer.compute_cost = estimate.seconds
    limit = p.compute.window.limit_s
    if p.compute_used + estimate.seconds > limit:
        if estimate.seconds > limit and p.compute_used == 0:
            offer.compute_alone = True
        else:
            window = p.compute.window.describe(p.compute_used - p.compute_before)
            return skip(decision, "budget_compute", f"{window}; this run needs {estimate.why}", more=decision.why)
    return None


def _tick_cap(p: _Pass, offer: Offer) -> Decision | None:
    decision = offer.decision
    if p.closed:
        return skipped_with(decision, p.tick_cap_reason, decision.why)
    kind = offer.kind = (decision.run_class or _NO_RUN_CLASS).batch_kind(decision.operation, p.data.batching.group_by)
    # The count first: a candidate held back reads its estimate only when an open batch has room for it.
    packer = p.packer
    if packer.batches >= p.runs_allowed and (packer.full(kind) or packer.opens_new(kind, decision.estimated_bytes)):
        return skipped_with(decision, p.tick_cap_reason, decision.why)
    return None


ADMISSION: tuple[AdmissionStep, ...] = (
    AdmissionStep("launcher", ("out_of_scope",),
                  "a schedule's tick admits its own cron rule's work, the debt-score sensor the rest"),
    AdmissionStep("one operation per table", ("in_flight",),
                  "another operation of the table was admitted earlier in the same tick", _one_per_table),
    AdmissionStep("table budget", ("budget_tables",), "`max-tables-per-poll` tables admitted this tick",
                  _table_budget, lambda p: bool(p.limits.max_tables_per_poll)),
    AdmissionStep("operation budget", ("budget_operations",),
                  "`max-operations-per-poll` (table, operation) items admitted this tick", _operation_budget,
                  lambda p: bool(p.limits.max_operations_per_poll)),
    AdmissionStep("partition scoping", (), "a rewrite larger than its run may take is scoped to the partitions "
                  "with the most benefit per byte (it holds nothing back)", _scope,
                  applies=lambda op: op.scopes_partitions),
    AdmissionStep("byte budget", ("budget_bytes",), "`max-bytes-per-hour` estimated bytes over a rolling hour",
                  _byte_budget, lambda p: bool(p.limits.max_bytes_per_hour), lambda op: op.rewrites_data),
    AdmissionStep("compute budget", ("budget_compute",), "`max-compute-hours-per-hour` executor CPU hours over a "
                  "rolling hour: each table's compute estimate, charged with the finished runs' recorded compute",
                  _compute_budget, lambda p: p.compute is not None),
    AdmissionStep("tick cap", ("tick_cap",), "a new run past `max-run-requests-per-tick` or `max-queued-runs`",
                  _tick_cap),
    AdmissionStep("fair shares", ("budget_share",),
                  "with fair shares on, a budget told as the share's part of it and its weight"),
)
ADMISSION_CODES: tuple[str, ...] = tuple(code for step in ADMISSION for code in step.codes)


def run_allowance(data: PlanInput, config: object, bytes_used: int) -> tuple[int, str] | None:
    """What one rewrite run may take, and which limit says so: the rest of the hourly byte budget, the
    batch's byte limit, the policy's ``maxBytesPerRun`` (``config``: the decision's, with the table's owner
    overrides) (the smallest that is set); None: unlimited."""
    limits: list[tuple[int, str]] = []
    if data.limits.max_bytes_per_hour:
        limits.append((data.limits.max_bytes_per_hour - bytes_used, "the rest of max-bytes-per-hour"))
    if data.batching.max_bytes:
        limits.append((data.batching.max_bytes, "batching max-bytes"))
    per_run = getattr(config, "max_bytes_per_run", None)
    if per_run:
        limits.append((per_run, "the policy's maxBytesPerRun"))
    return min(limits) if limits else None


def scoped(data: PlanInput, decision: Decision, bytes_used: int) -> Decision:
    """A rewrite whose estimate exceeds what the run may take, scoped so that what Iceberg rewrites
    stays within it (core/rewrites/partition_scope.py): the partitions with the most benefit per byte, or a file
    count; unchanged when it fits, when the rest of the hourly budget is used up (budget_bytes decides),
    or without the full health tier (whole, as before). The estimate fits for certain when the whole
    table is within one bin of Iceberg's bin-pack (``max-file-group-size-bytes``); past that, which
    files a bin keeps depends on Iceberg's scan order, so the bound decides."""
    if not decision.operation.scopes_partitions:
        return decision
    policy = data.policies.effective_policy(decision.table)  # read once: a tick offers thousands of rewrites
    config = with_overrides(decision.owner_overrides, decision.operation,
                            policy.config(decision.operation) if policy is not None else None)
    allowance = run_allowance(data, config, bytes_used)
    if allowance is None or allowance[0] <= 0:
        return decision
    metrics = data.metrics.get(decision.table)
    if metrics is None or policy is None:
        return decision
    try:
        rules = data_file_rules(config, metrics.properties)
    except EstimateOptionError:
        return decision
    # A backlog at the older specs' files stays scoped to them even when the table's rewrite would fit:
    # that would compact again what its runs wrote into the current spec's partitions.
    older_first = decision.backlog is not None and decision.backlog.older_first
    whole = not older_first and metrics.total_data_bytes <= rules.max_file_group_size_bytes
    # The estimate is made when read (a full-tier one groups every file): a table whose rewrite cannot exceed the
    # run's allowance needs none, and most candidates a tick holds back past its cap are such tables.
    if whole and metrics.data_bytes_at_most <= allowance[0]:
        return decision
    if decision.estimated_bytes <= 0 or (whole and decision.estimated_bytes <= allowance[0]):
        return decision
    selection = plan_scope(metrics, rules, allowance[0], older_first=older_first)
    if selection is None:  # no full tier, nothing Iceberg would rewrite, or all of it fits
        return decision
    reason = f"{selection.describe()}, under {allowance[1]}"
    return replace_decision(decision, scope=selection, bytes_estimate=selection.bytes,
                            why=(*decision.why, reason))


