"""The gates' data flow (core/plan/gates.py, core/plan/plan_stages.py): what one (table, operation) carries
through the gates (:class:`Facts`, never changed), what they learn on the way (:class:`Learned`), a gate's
shape (:class:`Gate`: its check, codes, and the facts it reads and learns), and :func:`check_order`, which
refuses a list of gates and turns in which a step reads a fact no step before it learns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from floe_dagster.core.plan.decisions import Decision, PlanInput
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import Policy
from floe_dagster.core.schedules.sla import SlaVerdict
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import WriterHold

if TYPE_CHECKING:  # annotations only
    from floe_dagster.core.policies.conditions import ConditionResult
    from floe_dagster.core.schedules.orphan_cadence import CadenceVerdict
    from floe_dagster.core.policies.owner_overrides import OwnerOverrides
    from floe_dagster.core.schedules.quiet import QuietVerdict
    from floe_dagster.core.schedules.schedule import Schedule
    from floe_dagster.core.rewrites.scope_values import Backlog
    from floe_dagster.core.schedules.writers import Writer


class LearnedDue(Protocol):
    """A due verdict as the later gates read it: the schedule's (:class:`Due`, :class:`AfterWriteDue`) or a
    backlog's continuation's (core/plan/gate_chains.py's ``BacklogDue``, which imports this module)."""

    slot_key: str
    detail: str
    due: bool
    trigger: str


class Told(Protocol):
    """A verdict that tells its own words when read."""

    @property
    def detail(self) -> str: ...


class DataFlowStep(Protocol):
    """A gate, or a plan's turn between gates: what it reads and learns of :class:`Learned`."""

    @property
    def name(self) -> str: ...

    @property
    def reads(self) -> tuple[str, ...]: ...

    @property
    def learns(self) -> tuple[str, ...]: ...


class Facts:
    """One (table, operation) on its way through the gates: what they read, and the decision they skip or
    let run (``decision``: its debt, estimate and policy already set). A gate never changes it: what the
    gates learn goes into :class:`Learned`. Made once per table (``listed``: the catalog lists it,
    ``loaded``: it is an asset), then :meth:`of` sets each operation's facts before its decision goes
    through the gates (a tick makes 50,000 decisions of 10,000 tables; nothing keeps a Facts)."""

    __slots__ = ("data", "table", "policy", "metrics", "listed", "loaded", "owner", "busy", "op", "schedule",
                 "history", "decision")

    def __init__(self, data: PlanInput, table: TableName, policy: Policy, metrics: TableMetrics | None,
                 listed: bool, loaded: bool, owner: OwnerOverrides | None, busy: bool) -> None:
        # owner: its floe.* properties' verdict; busy: a run of the table may be in flight (for Gate.table_passes)
        self.data, self.table, self.policy, self.metrics, self.listed, self.loaded, self.owner, self.busy = \
            data, table, policy, metrics, listed, loaded, owner, busy

    def of(self, op: Operation, schedule: Schedule, history: OperationHistory, decision: Decision) -> "Facts":
        """These facts for the table's operation ``op``."""
        self.op, self.schedule, self.history, self.decision = op, schedule, history, decision
        return self


class Learned:
    """What the gates (and the plan's turns between them) learned of one decision so far: each field is
    set by the gate that declares it in :attr:`Gate.learns` and read by those that declare it in
    :attr:`Gate.reads`. Never changed: :meth:`but` makes the next one. (Its fields are class defaults and
    the learned ones the instance's: a tick makes one or two per decision.)"""

    FIELDS = ("due", "trigger", "slot", "cadence", "upstream", "condition_result", "quiet", "writer_hold",
              "escalation", "backlog", "passes")
    # The fields a decision keeps (its own fields of the same names), in every verdict after the due gate.
    KEPT = frozenset(("trigger", "slot", "cadence", "upstream", "condition_result", "quiet", "writer_hold",
                      "backlog"))
    due: LearnedDue | None = None  # the schedule's verdict (or a backlog's continuation's)
    trigger: str | None = None
    slot: str | None = None
    cadence: CadenceVerdict | None = None  # a kind's own cadence's verdict
    upstream: Writer | None = None  # after_write: the writer's materialization that made it due
    condition_result: ConditionResult | None = None
    quiet: QuietVerdict | None = None
    writer_hold: WriterHold | None = None
    escalation: SlaVerdict | None = None  # a breached SLA contract
    backlog: Backlog | None = None  # an open backlog of a partition-scoped rewrite
    passes: frozenset[str] = frozenset()  # the gates a turn lets the decision past (their holds are ignored)

    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)

    def but(self, **changes: object) -> "Learned":
        learned = object.__new__(Learned)
        learned.__dict__.update(self.__dict__, **changes)
        return learned

    def kept(self) -> dict[str, object]:
        """What a decision after the due gate keeps of it (its Decision fields)."""
        kept = self.KEPT
        return {name: value for name, value in self.__dict__.items() if name in kept and value is not None}


NOTHING_LEARNED = Learned()


@dataclass(frozen=True)
class Gate:
    """A named check, the reason codes it skips with (in the order it tells them), and the facts it reads
    and learns (:class:`Learned`'s fields)."""

    name: str
    codes: tuple[str, ...]
    # Its verdict: the decision skipped, a new Learned (passed, having learned), or None (passed).
    check: Callable[[Facts, Learned], "Decision | Learned | None"]
    doc: str  # what it holds back, for docs/automation.md's table
    reads: tuple[str, ...] = ()
    learns: tuple[str, ...] = ()
    # Whether it lets every decision of a table pass, read once per table (its Facts) or per schedule: such a gate
    # is left out of the table's chain (core/plan/gate_chains.py), as a tick makes 50,000 decisions.
    table_passes: Callable[[Facts], bool] | None = None
    schedule_passes: Callable[[Schedule | None], bool] | None = None


def check_order(steps: tuple[DataFlowStep, ...]) -> tuple[DataFlowStep, ...]:
    """``steps`` (gates, and the plan's turns between them), refused when one reads a fact no step before
    it learns, or learns one :class:`Learned` does not have: the order of the list is its data flow."""
    learned: set[str] = set()
    for step in steps:
        unknown = [name for name in (*step.reads, *step.learns) if name not in Learned.FIELDS]
        if unknown:
            raise ValueError(f"gate step '{step.name}' names facts a gate does not learn: {', '.join(unknown)}")
        missing = [name for name in step.reads if name not in learned]
        if missing:
            raise ValueError(f"gate step '{step.name}' reads {', '.join(missing)}, which no step before it learns: "
                             f"move it after the step that learns it")
        learned.update(step.learns)
    return steps
