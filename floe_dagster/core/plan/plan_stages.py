"""The stages of a plan, in order (:data:`STAGES`): every configured (table, operation) through the
gates (core/plan/gates.py), then the shadow decisions marked, the work ranked, the work a breached SLA
escalated moved first (core/schedules/sla.py), the live work admitted within the budgets (core/plan/admission.py), and
the shadow decisions admitted in a pass of their own.

Inside the gate stage, a shadow policy's decision reads its history as the shadow sees it (its newest recorded
shadow decision stands in for a success), and the turns between two gates (core/plan/gate_chains.py) continue a
live rewrite's backlog and escalate a breached SLA.
Each stage and gate owns its reason codes; :data:`REASON_CODES` is the vocabulary they make, in the
order a decision meets them, and :func:`gates_markdown` the table docs/automation.md shows."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import attrgetter
from typing import Any, Callable, Iterable, Sequence

from floe_dagster.core.plan import gate_memo
from floe_dagster.core.plan.admission import ADMISSION, ADMISSION_CODES, admit_within_budgets
from floe_dagster.core.facts.debt import TableDebt
from floe_dagster.core.plan.decisions import (
    Decision, LazyEstimate, PlanInput, Reason, build_decision, replace_decision, text_of,
)
from floe_dagster.core.plan.gate_chains import GATE_STEPS, GateChains, through_gates
from floe_dagster.core.plan.gate_flow import Facts
from floe_dagster.core.plan.gates import GATE_CODES
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.policies.owner_overrides import sets_owner_keys, with_overrides
from floe_dagster.core.plan.learned_plan import LearnedView, shadow_note
from floe_dagster.core.value.ranking_shadow import learned_rank_key, static_rank_key
from floe_dagster.core.runs.run_decision import SHADOW_ATTEMPT, SHADOW_PREFIX
from floe_dagster.core.schedules.sla import table_sla
from floe_dagster.core.basics.quick_records import kept_on
from floe_dagster.core.basics.tables import TableName

_NO_HISTORY = OperationHistory()


@dataclass
class PlanState:
    """What the stages hand on: every decision in the plan's order (skipped by a gate, or held back by admission),
    the ranked (admitted, live then shadow), the candidates (every gate let them run), and the notes. ``shadows``
    and ``slas``: whether any policy is a shadow one and any schedule has an SLA contract (else the stages that
    move those decisions have none to move: a tick has up to 200,000 candidates)."""

    data: PlanInput
    # Every decision of the gate stage in the plan's order (by table name, then Floe's operation order), each
    # candidate's place (``places``) then taken by what admission made of it, None where it was admitted.
    in_order: list[Decision | None] = field(default_factory=list)
    places: list[int] = field(default_factory=list)  # each candidate's (the same index) in ``in_order``
    # Whether the gate stage met the tables in the plan's order (no two of them share a qualified name).
    table_ordered: bool = True
    ranked: list[Decision] = field(default_factory=list)
    candidates: list[Decision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    learned: LearnedView | None = None  # the recorded runs' totals, when the ranking reads them
    shadows: bool = field(init=False)
    slas: bool = field(init=False)

    def __post_init__(self) -> None:
        policies = self.data.policies.policies
        self.shadows = any(policy.shadow for policy in policies)
        self.slas = any(schedule is not None and schedule.sla is not None
                        for policy in policies for schedule in policy.schedules.values())

    def reorder(self, order: list[int]) -> None:
        """The candidates (and their places) in ``order``: their indices."""
        candidates, places = self.candidates, self.places
        self.candidates, self.places = [candidates[i] for i in order], [places[i] for i in order]

    def part(self, shadow: bool) -> tuple[list[Decision], list[int]]:
        """The shadow candidates, or the live ones, with their places."""
        if not self.shadows:
            return (self.candidates, self.places) if not shadow else ([], [])
        chosen = [i for i, decision in enumerate(self.candidates) if decision.shadow is shadow]
        return [self.candidates[i] for i in chosen], [self.places[i] for i in chosen]

    def admitted(self, decisions: list[Decision], places: list[int]) -> None:
        """An admission pass's decisions, each what it made of the candidate at ``places``' same index: the
        admitted ranked, each other one in its candidate's place of the plan's order."""
        in_order, ranked = self.in_order, self.ranked
        for decision, place in zip(decisions, places):
            if decision.rank is None:
                in_order[place] = decision
            else:
                in_order[place] = None
                ranked.append(decision)

    def decided(self) -> list[Decision]:
        """The decisions not admitted, by table name, then Floe's operation order. The gate stage made them in that
        order and admission put its own in their places, so a tick sorts none of its up to 400,000 decisions
        (but when two tables share a qualified name: then they are sorted, as the plan's order only ties them)."""
        decided = [decision for decision in self.in_order if decision is not None]
        if not self.table_ordered:
            decided.sort(key=_BY_TABLE)
        return decided


@dataclass(frozen=True)
class Stage:
    name: str
    codes: tuple[str, ...]
    run: Callable[[PlanState], None]
    doc: str


def _gate_stage(state: PlanState) -> None:
    """Every (table, operation) the effective policies configure through the gates: the candidates
    (every gate let them run) and the skipped decisions. A table whose inputs did not change since the last
    tick reuses the decisions that still hold (core/plan/gate_memo.py).

    The tables go in runs of :data:`_TABLES_A_PASS`, each in two passes: first what each table needs (its policy,
    inputs and memo entry, and, when its decisions are made at this clock, its debt: its health issues), then its
    decisions. One kind of work over a run of tables, then the other, makes the same plan as both kinds table by
    table, and a cold tick at 10,000 tables about a tenth faster (benchmarks/README.md, section 1, "session 19")."""
    data = state.data
    previous, kept = gate_memo.begin(data), {}
    flying = frozenset(qualified for qualified, _ in data.in_flight)
    chains, attempted = GateChains(flying), gate_memo.attempted_tables(data)
    in_catalog = frozenset(data.catalog_tables)
    tables, state.table_ordered = _in_plan_order(in_catalog.union(data.loaded_tables))
    for first in range(0, len(tables), _TABLES_A_PASS):
        some = tables[first:first + _TABLES_A_PASS]
        _decide_tables(state, _tables_ready(data, some, in_catalog, previous, flying, attempted, kept), chains, kept)
    gate_memo.end(kept)


# The tables of one pass of each kind: enough for the passes' gain, few enough that the second pass finds the
# first one's reads (a table's memo entry, its records) still in the processor's caches.
_TABLES_A_PASS = 256


def _decide_tables(state: PlanState, work: list, chains: GateChains, kept: dict) -> None:
    """The second pass: each table of ``work`` (:func:`_tables_ready`) decided, its decisions put in the plan's
    order and its memo entry kept for the next tick."""
    data, in_order, places, candidates = state.data, state.in_order, state.places, state.candidates
    for item in work:
        if item.__class__ is gate_memo.TableEntry:  # its decisions all hold as they are
            entry = item
        else:
            table, policy, metrics, inputs, entry, debt, listed, loaded, histories = item
            made, until = _table_through_gates(data, table, policy, metrics, policy.operations, listed, loaded, entry,
                                               histories, chains, debt)
            entry = gate_memo.TableEntry(metrics, inputs, data.now, made, until)
            if inputs is not None:
                kept[table] = entry  # at the same clock and inputs, the same decisions
        start, made = len(in_order), entry.decisions
        in_order += made
        for index in entry.runs:
            candidates.append(made[index])
            places.append(start + index)


def _tables_ready(data: PlanInput, tables: list[TableName], in_catalog: frozenset[TableName], previous: dict,
                  flying: frozenset[str], attempted: frozenset[str], kept: dict) -> list:
    """Each governed table, in ``tables``' order: its memo entry when its decisions all hold as they are (it is
    kept for the next tick here), else what its decisions are made of: (table, policy, metrics, inputs, memo
    entry, debt, listed, loaded, histories), ``debt`` its :class:`TableDebt` at this clock."""
    loaded_tables, now = data.loaded_tables, data.now
    ready: list = []
    for table in tables:
        policy = data.policies.effective_policy(table)
        if policy is None:
            continue
        metrics, listed, loaded, qualified = data.metrics.get(table), table in in_catalog, table in loaded_tables, \
            table.qualified
        ops, histories = policy.operations, gate_memo.table_histories(data, qualified)
        inputs = None if policy.has_after_write else \
            gate_memo.table_inputs(data, table, listed, loaded, ops, qualified, flying, histories)
        # Taken out as it is read: the decisions it replaces are freed as the tick goes, not held to its end.
        entry = previous.pop(table, None)
        if not gate_memo.reusable(entry, metrics, inputs, now):
            entry = None
        elif entry.at == now and entry.attempts_hold(data.last_attempts, qualified in attempted):
            kept[table] = entry  # at the same clock and inputs, the same decisions
            ready.append(entry)
            continue
        issues = policy.health_issues(metrics, now) if metrics is not None else ()
        debt = TableDebt(issues, metrics, now, data.debt_weights)
        ready.append((table, policy, metrics, inputs, entry, debt, listed, loaded, histories))
    return ready


# The plan's order of the decisions it does not admit (core/plan/planner.py); the policies' operations are in
# Floe's operation order.
_BY_TABLE = attrgetter("table.qualified", "operation.order")


def _in_plan_order(tables: Iterable[TableName]) -> tuple[list[TableName], bool]:
    """The tables by qualified name (the plan's order), and whether that order is theirs alone: two tables may
    share a qualified name (a namespace part holding a dot), and are then tied (TableName's order after the name)."""
    ordered = sorted(tables, key=_QUALIFIED)  # strings: a fifth of the time of TableName's field tuples
    if len({table.qualified for table in ordered}) == len(ordered):
        return ordered, True
    ordered.sort(key=_TABLE_ORDER)
    ordered.sort(key=_QUALIFIED)  # stable: ties keep TableName's order
    return ordered, False


_TABLE_ORDER = attrgetter("catalog", "namespace", "name")  # TableName's order without its generated __lt__
_QUALIFIED = attrgetter("qualified")


def _table_through_gates(data: PlanInput, table: TableName, policy: Any, metrics: Any, ops: Sequence,
                         listed: bool, loaded: bool, entry: gate_memo.TableEntry | None, histories: tuple,
                         chains: GateChains, table_debt: TableDebt) -> tuple[tuple[Decision, ...], list[Any]]:
    """One table's decisions, each made through the gates or, when the memo's ``entry`` holds it still, reused
    with its debt score (``table_debt``'s, and a run's ``next_eligible``) made at this tick's clock; and until when
    each holds."""
    now, estimate_bytes = data.now, data.estimate_bytes
    owner = _owner_overrides(policy, metrics) if metrics is not None else None  # floe.* properties
    facts = Facts(data, table, policy, metrics, listed, loaded, owner, chains.busy(table.qualified, data))
    checks = chains.of(facts, policy, ops)  # each operation's gates, without those that let the whole table pass
    shadow = policy.shadow
    table_values = _table_values(table, policy, owner)
    made, until = [], []
    for index, op in enumerate(ops):
        history = histories[op.order] or _NO_HISTORY  # read once per table (gate_memo.table_histories)
        if shadow:  # the shadow's view: its newest recorded decision stands in for a success
            history = history.as_shadow_sees_it()
        score, breakdown = table_debt.with_history(history.failure_rate, history.consecutive_failures)
        schedule = policy.schedule(op)
        if entry is not None and gate_memo.holds(entry, index, data, now, schedule, policy,
                                                 history.last_success_start):
            made.append(_at_this_clock(entry.decisions[index], score, breakdown, now))
            until.append(entry.until[index])
            continue
        # Estimated when read (and kept): admission reads the candidates' it needs, a reader any other's.
        estimate = LazyEstimate(estimate_bytes, table, op, metrics, policy, owner) \
            if estimate_bytes and op.rewrites_data else 0
        base = build_decision(table_values, operation=op, debt_score=score, debt_breakdown=breakdown,
                              bytes_estimate=estimate)
        if schedule is None or not schedule.enabled or schedule.priority or schedule.sla is not None:
            _off_defaults(base, schedule, history, metrics, now)
        decision = through_gates(facts.of(op, schedule, history, base), checks[index])
        made.append(decision)
        until.append(gate_memo.LATER)  # told when a later tick asks (gate_memo.holds)
    return tuple(made), until


def _at_this_clock(kept: Decision, score: float, breakdown: Any, now: datetime) -> Decision:
    """A kept decision as this tick makes it: its debt at this clock, and a run's ``next_eligible`` now."""
    if kept.decision == "run":
        return replace_decision(kept, debt_score=score, debt_breakdown=breakdown, next_eligible=now)
    if score == kept.debt_score and breakdown == kept.debt_breakdown:
        return kept
    return replace_decision(kept, debt_score=score, debt_breakdown=breakdown)


def _table_values(table: TableName, policy: Any, owner: Any) -> dict[str, Any]:
    """What every decision of the table shares, merged once per table (a tick makes 50,000 decisions). A field
    at its class default is left out (read from the class, as :class:`Decision`'s defaults are class
    attributes): a decision's dict then holds at most 21 keys, CPython's smaller dict (464 bytes, against 832
    for all 33 fields), at 50,000 tables × 8 kinds 400,000 decisions, and fewer bytes for each copy to read."""
    values = {"table": table, "policy": policy.name, "decision": "skip", "why": (), "trigger": None,
              "next_eligible": None, "rank": None}
    if policy.priority != 0:
        values["policy_priority"] = policy.priority
    if policy.shadow:
        values["shadow"] = True
    if owner is not None:
        values["owner_overrides"] = owner
    return values


def _owner_overrides(policy: Any, metrics: Any) -> Any:
    """What the table's ``floe.*`` properties do under its policy (None: it sets none). Whether the record's
    properties hold such a key at all is kept on the (immutable) record: most tables hold none, and every tick
    reads every table's."""
    sets = kept_on(metrics, "_owner_keys", sets_owner_keys, metrics.properties)
    return policy.overrides_for(metrics.properties) if sets else None


def _off_defaults(base: Decision, schedule: Any, history: OperationHistory, metrics: Any, now: datetime) -> None:
    """The schedule's fields of the decision just made (no one holds it yet) that are not the class's defaults:
    a missing or disabled schedule, its priority, its SLA contract's verdict at ``now``."""
    kept = base.__dict__
    if schedule is None or not schedule.enabled:
        kept["enabled"] = False
    if schedule is not None:
        if schedule.priority != 0:
            kept["schedule_priority"] = schedule.priority
        if schedule.sla is not None:
            kept["sla"] = table_sla(schedule.sla, history.last_success_start, metrics, now)


def _shadow_stage(state: PlanState) -> None:
    """A shadow policy's candidates become shadow decisions: recorded, never run (the shadow attempt)."""
    if state.shadows:
        state.candidates = [_as_shadow(d) if d.shadow else d for d in state.candidates]


def _as_shadow(decision: Decision) -> Decision:
    reason = Reason(None, _as_shadow_said, decision.why[0], decision.policy)
    return replace_decision(decision, why=(reason, *decision.why[1:]), attempt=SHADOW_ATTEMPT)


def _as_shadow_said(first: Reason | str, policy: str | None) -> str:
    return f"{SHADOW_PREFIX}{text_of(first)} (shadow policy '{policy}')"


def _learned_view(state: PlanState) -> LearnedView:
    """The recorded runs' totals, made once per plan: the learned ranking and the compute budget's estimates
    (both admission passes) read the same view."""
    if state.learned is None:
        state.learned = LearnedView.of(state.data.recorded_runs, state.data.now, state.data.ranking)
    return state.learned


def _budget_view(state: PlanState) -> LearnedView | None:
    """The view the compute budget estimates with (None: no compute budget, so none is made for it)."""
    return _learned_view(state) if state.data.limits.max_compute_hours_per_hour else None


def _rank_stage(state: PlanState) -> None:
    """Debt score, policy priority, schedule priority, table name, then Floe's operation order; with
    ``ranking.learned`` the debt score × each candidate's measured-efficiency factor (core/plan/learned_plan.py)."""
    ranking = state.data.ranking
    if ranking.learned or ranking.shadow:
        view = _learned_view(state)
        data = state.data
        state.candidates = [replace_decision(d, efficiency=view.factor(
            d.table.qualified, d.operation, data.metrics.get(d.table), _config(data, d))) for d in state.candidates]
    candidates, reverse = state.candidates, False
    if ranking.learned:
        keys = [learned_rank_key(d, d.efficiency.factor) for d in candidates]
    elif state.table_ordered:
        # static_rank_key's order: the candidates are in the plan's order (the key's last two fields) and a
        # reversed sort keeps the order of equal keys, so the debt and the priorities are the only key (made in C).
        keys, reverse = list(map(_DEBT_AND_PRIORITIES, candidates)), True
    else:
        keys = list(map(static_rank_key, candidates))
    state.reorder(sorted(range(len(candidates)), key=keys.__getitem__, reverse=reverse))


_DEBT_AND_PRIORITIES = attrgetter("debt_score", "policy_priority", "schedule_priority")


def _config(data: PlanInput, decision: Decision) -> object:
    """The decision's operation config as its byte estimate read it: the policy's, with the table's owner overrides."""
    policy = data.policies.get(decision.policy) if decision.policy else None
    config = policy.config(decision.operation) if policy is not None else None
    return with_overrides(decision.owner_overrides, decision.operation, config)


def _sla_first_stage(state: PlanState) -> None:
    """Work a breached SLA escalated (trigger ``sla``) before the rest: ERROR before WARN, the longest
    breached first; the rank order otherwise (a stable sort)."""
    candidates = state.candidates
    escalated = [i for i, d in enumerate(candidates) if d.trigger == "sla"] if state.slas else None
    if escalated:
        escalated.sort(key=lambda i: candidates[i].sla.rank_key)
        state.reorder(escalated + [i for i, d in enumerate(candidates) if d.trigger != "sla"])


def _live_admission(state: PlanState) -> None:
    live, places = state.part(shadow=False)
    made = admit_within_budgets(state.data, live, state.notes, _budget_view(state))
    state.admitted(made, places)
    if state.data.ranking.shadow:  # both orders side by side, in the notes; the admitted in the pass's order
        admitted = sorted((d for d in made if d.decision == "run"), key=_RANK)
        state.notes.append(shadow_note(_learned_view(state), live, admitted))


_RANK = attrgetter("rank")


def _shadow_pass(state: PlanState) -> None:
    """The shadow decisions through the same admission with a fresh state of their own (nothing admitted
    yet, their own hour of bytes, no queued run), ranked and batched after the live ones."""
    candidates, places = state.part(shadow=True)
    if not candidates:
        return
    data, live = state.data, state.ranked  # the live admitted (the only ranked so far)
    shadow_notes: list[str] = []
    own_budgets = replace(data, bytes_last_hour=data.shadow_bytes_last_hour, queued_runs=0, past_admissions=())
    passed = admit_within_budgets(own_budgets, candidates, shadow_notes, _budget_view(state))
    ranks = max((d.rank for d in live if d.rank is not None), default=0)
    batches = max((d.batch for d in live if d.batch is not None), default=0)
    state.notes.extend(f"shadow: {note}" for note in shadow_notes)
    state.admitted([
        d if d.rank is None else replace_decision(d, rank=d.rank + ranks, batch=(d.batch or 0) + batches)
        for d in passed], places)


STAGES: tuple[Stage, ...] = (
    Stage("gates", GATE_CODES, _gate_stage, "every (table, operation) the effective policy configures, through the "
          "gates in order; a shadow policy's reads its history as the shadow sees it, and a live rewrite's "
          "backlog continues in its slot"),
    Stage("shadow", (), _shadow_stage, "a shadow policy's candidates become shadow decisions (recorded, never run)"),
    Stage("rank", (), _rank_stage, "debt score (× the measured-efficiency factor with `ranking.learned`), policy "
          "priority, schedule priority, table name, Floe's operation order"),
    Stage("sla first", (), _sla_first_stage, "work a breached SLA contract escalated (trigger `sla`) goes first: "
          "ERROR before WARN, the longest breached first"),
    Stage("live admission", ADMISSION_CODES, _live_admission, "the live candidates, in rank order, admitted "
          "within the budgets, one operation per table at a time; with `ranking.shadow`, both orders compared "
          "under the compute it spent (the plan's notes)"),
    Stage("shadow pass", (), _shadow_pass, "the shadow candidates through the same admission with budgets of "
          "their own, ranked after every live one"),
)
# Every reason code a skipped decision may start with, in the order a decision meets them.
REASON_CODES: tuple[str, ...] = tuple(dict.fromkeys(code for stage in STAGES for code in stage.codes))


def run_stages(data: PlanInput) -> PlanState:
    state = PlanState(data)
    for stage in STAGES:
        stage.run(state)
    return state


def gates_markdown() -> str:
    """docs/automation.md's gate table: the gates, then admission's steps (a test keeps the doc equal)."""
    lines = ["| stage | step | reason codes | holds back |", "| --- | --- | --- | --- |"]
    for gate, turns in GATE_STEPS:  # each gate, then the turns after it
        lines.append(f"| gates | {gate.name} | {_codes(gate.codes)} | {gate.doc} |")
        lines += [f"| gates | {turn.name} | - | {turn.doc} |" for turn in turns]
    lines += [f"| admission | {step.name} | {_codes(step.codes)} | {step.doc} |" for step in ADMISSION]
    return "\n".join(lines) + "\n"


def _codes(codes: tuple[str, ...]) -> str:
    return ", ".join(f"`{code}`" for code in codes) or "-"
