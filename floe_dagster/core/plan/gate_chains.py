"""The gates with the turns between them (:data:`TURNS`: a backlog's continuation after the due gate, an SLA's
escalation after the zero-change gate), in one checked order (:data:`GATE_STEPS`), and a decision's way through
them (:func:`through_gates`): a chain per table and schedule that leaves out the gates that let all of it pass
(:class:`GateChains`). The gate stage of the plan (core/plan/plan_stages.py) passes every decision through."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Sequence

from floe_dagster.core.plan.decisions import Decision, PlanInput, replace_decision
from floe_dagster.core.plan.gate_flow import NOTHING_LEARNED, Facts, Learned, check_order
from floe_dagster.core.plan.gates import GATES, admissible
from floe_dagster.core.rewrites.partition_scope import Backlog


# -- the turns: stages of one decision between two gates -----------------------------------------------


@dataclass(frozen=True)
class Turn:
    """A stage of one decision between two gates: after the gate named ``after``, it reads that gate's
    verdict (``held``: the decision it skipped, or None) and what the gates learned, and returns both,
    turned. The gates it lets the decision past (``Learned.passes``) are checked still (what they learn is
    kept) but do not hold it."""

    name: str
    after: str
    turn: Callable[[Facts, Learned, Decision | None], tuple[Learned, Decision | None]]
    doc: str
    reads: tuple[str, ...] = ()
    learns: tuple[str, ...] = ()


# What an escalation and a continuation let past: their trigger conditions were met, or are overruled.
_PAST_CONDITIONS = frozenset({"conditions"})


def _escalate(f: Facts, known: Learned, held: Decision | None) -> tuple[Learned, Decision | None]:
    """A breached SLA contract (core/schedules/sla.py) escalates work no gate before held past the conditions."""
    verdict = f.decision.sla
    if held is None and verdict is not None and verdict.breached:
        known = known.but(escalation=verdict, passes=known.passes | _PAST_CONDITIONS)
    return known, held


def _continue_backlog(f: Facts, known: Learned, held: Decision | None) -> tuple[Learned, Decision | None]:
    """A rewrite scoped to some partitions left a backlog (the ledger's), open until a success starts after
    it: the decision carries it once the schedule is read, and when the schedule's own rule is not due
    (its window and days open), the backlog's slot continues: due now (trigger ``backlog``), past the
    conditions (they were met when its slot was admitted). A shadow decision never continues a backlog:
    a continuation is the same slot's next attempt, and shadow decisions are recorded once per slot."""
    backlogs = f.data.backlogs
    backlog = backlogs.get((f.table.qualified, f.op)) if backlogs and not f.decision.shadow else None
    if backlog is None or not backlog.open_after(f.history.last_success_start):
        return known, held
    if held is None:
        return known.but(backlog=backlog), None
    if held.code != "not_due":
        return known, replace_decision(held, backlog=backlog)
    due = backlog_due(backlog)
    return Learned(due=due, trigger=due.trigger, slot=due.slot_key, backlog=backlog, passes=_PAST_CONDITIONS), None


TURNS: tuple[Turn, ...] = (
    Turn("backlog", "due", _continue_backlog, "holds nothing: a partition-scoped rewrite's open backlog continues "
         "in its slot when the schedule's own rule is not due (trigger `backlog`), past the conditions",
         learns=("due", "trigger", "slot", "backlog", "passes")),
    Turn("sla", "zero change", _escalate, "holds nothing: a breached SLA contract (the schedule's `sla`) escalates "
         "the work past the conditions, as the critical force does, and ranks it first (trigger `sla`)",
         learns=("escalation", "passes")),
)
# The gates in order, each with the turns after it; the whole order checked at import.
GATE_STEPS = tuple((gate, tuple(turn for turn in TURNS if turn.after == gate.name)) for gate in GATES)
check_order(tuple(step for gate, turns in GATE_STEPS for step in (gate, *turns)))


# Each gate's check, name and learned facts, and its turns' functions, read once (a tick passes 50,000 decisions).
_CHECKS = tuple((gate.check, gate.name, gate.learns, tuple(turn.turn for turn in turns))
                for gate, turns in GATE_STEPS)
# The gates that may tell, once per table or per schedule, that they let every decision pass (each a bit).
_TABLE_PASSES = tuple((1 << i, gate.table_passes) for i, (gate, _) in enumerate(GATE_STEPS) if gate.table_passes)
_SCHEDULE_PASSES = tuple((1 << i, gate.schedule_passes) for i, (gate, _) in enumerate(GATE_STEPS)
                         if gate.schedule_passes)


def _lets_pass(f: Facts, known: Learned) -> None:
    return None


class GateChains:
    """A tick's gate chains: for a table, each operation's gates left after those that let the whole table pass
    (:attr:`Gate.table_passes`, read once per table) or its schedule (:attr:`Gate.schedule_passes`). A gate so left
    out would have returned None for each decision; its turns are kept. Made once per policy and set of passing
    gates (a tick, whose policies live as long as it does)."""

    def __init__(self, flying: frozenset[str]) -> None:
        self.flying = flying  # the tables with a run of some operation in flight
        self.made: dict[tuple[int, int], tuple[tuple, ...]] = {}

    def busy(self, qualified: str, data: PlanInput) -> bool:
        return qualified in self.flying or qualified in data.busy_tables

    def of(self, f: Facts, policy: Any, ops: Sequence) -> tuple[tuple, ...]:
        passing = 0
        for bit, passes in _TABLE_PASSES:
            if passes(f):
                passing |= bit
        key = (passing, id(policy))
        found = self.made.get(key)
        if found is None:
            found = self.made[key] = tuple(_chain(passing, policy.schedule(op)) for op in ops)
        return found


def _chain(passing: int, schedule: Any) -> tuple:
    for bit, passes in _SCHEDULE_PASSES:
        if passes(schedule):
            passing |= bit
    return tuple(entry if not passing & (1 << i) else (_lets_pass, *entry[1:])
                 for i, entry in enumerate(_CHECKS) if entry[3] or not passing & (1 << i))


def through_gates(f: Facts, checks: tuple = _CHECKS) -> Decision:
    """The decision skipped by the first gate of ``checks`` that holds it (a gate its turns let it past holds
    nothing), else :func:`admissible`."""
    known = NOTHING_LEARNED
    for check, name, learns, turns in checks:
        verdict = check(f, known)
        held = None
        if verdict is not None:
            if verdict.__class__ is Learned:
                known = verdict
            elif name in known.passes:  # checked, not held: what it learned is kept
                known = known.but(**{learned: getattr(verdict, learned) for learned in learns})
            else:
                held = verdict
        for turn in turns:
            known, held = turn(f, known, held)
        if held is not None:
            return held
    return admissible(f, known)


@dataclass(frozen=True)
class BacklogDue:
    """The schedule's verdict for a backlog's continuation: due now, in the backlog's own slot (so the
    attempt number is the slot's next one)."""

    slot_key: str
    detail: str
    due: bool = True
    trigger: str = "backlog"
    blocked: str | None = None
    next_eligible: datetime | None = None
    # What the quiet gate reads (core/schedules/quiet.due_since): a continuation has been due since its slot.
    slot: datetime | None = None
    last_success_start: datetime | None = None


def backlog_due(backlog: Backlog) -> BacklogDue:
    return BacklogDue(backlog.slot, f"continues slot {backlog.slot}: {backlog.partitions} partition(s), "
                                    f"{backlog.bytes} bytes left", slot=slot_time(backlog.slot))


def slot_time(slot_key: str) -> datetime | None:
    """A due slot's time, read back from its key (``Due.slot_key``: a cron slot's ISO time,
    ``interval:<ISO>``, ``condition:<ISO>``); None for ``...:first``, ``cron:none`` and manual work."""
    for text in (slot_key, slot_key.partition(":")[2]):
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            continue
    return None
