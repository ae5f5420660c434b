"""The planner's records (core/plan/planner.py): the scheduler's settings, the inputs of a plan, one
decision per (table, operation), and the plan. Also the three ways every stage of the plan makes a
decision (:func:`build_decision`, :func:`replace_decision`, :func:`skip`): without the frozen
dataclass's generated ``__init__``, as a tick makes 50,000 decisions and 2-3 copies of each.

A decision is cheap and explained on demand: it keeps its reasons as :class:`Reason`\\ s (a code and the
few values its words need) and its skipped work's byte estimate as :class:`LazyEstimate`; the words and
the estimate are made when someone reads them (``plan``, ``explain``, the API, the ledger and run tags),
as almost nobody reads a skipped decision's."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Sequence, TypedDict

from floe_dagster.core.plan.batches import ONE_TABLE_PER_RUN, BatchSettings, RunClass
from floe_dagster.core.plan.compute_budget import InFlightAdmission, compute_hours_problem, read_compute_hours
from floe_dagster.core.policies.conditions import ConditionResult
from floe_dagster.core.facts.debt import DebtWeights
from floe_dagster.core.plan.fair_shares import FAIR_SHARES_OFF, FairShareSettings, PastAdmission
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.value.learned_ranking import LEARNING_OFF, RankingSettings
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.owner_overrides import OwnerOverrides, with_overrides
from floe_dagster.core.rewrites.partition_scope import Backlog, PartitionSelection
from floe_dagster.core.policies.policy import PolicySet
from floe_dagster.core.schedules.quiet import QuietVerdict
from floe_dagster.core.runs.run_decision import item_key
from floe_dagster.core.schedules.sla import SlaVerdict
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import setting
from floe_dagster.core.schedules.writers import AssetKeyPath, Writer, WriterHold, WriterRun


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
    max_compute_hours_per_hour: float | None = setting(
        None, "executor CPU hours over a rolling hour: admitted on each table's compute estimate, charged with what "
        "the finished runs recorded (null: no compute budget; 0 is refused)", reader=read_compute_hours, schema=float)
    failure_backoff_threshold: int = setting(3, "failures in a row before a table backs off")
    failure_backoff_hours: float = setting(6, "the first backoff, doubled with each further failure (at most 7 days)")
    zero_change_threshold: int = setting(5, "runs that changed nothing before a table's interval is stretched")
    zero_change_frequency_reduction_percent: float = setting(50, "how much each stretch lengthens the interval")
    zero_change_min_interval_hours: float = setting(6, "the shortest stretched interval")
    max_run_requests_per_tick: int = setting(25, "runs requested per tick, even with the unlimited budgets above")
    max_queued_runs: int = setting(100, "floe's queued runs at any time, even with the unlimited budgets above")

    def __post_init__(self) -> None:
        problem = compute_hours_problem(self.max_compute_hours_per_hour)
        if problem:
            raise ValueError(f"scheduler.{problem}")


class Reason:
    """One reason of a decision: its code, and its detail told by ``tell(*args)`` (or ``tell`` itself, a
    text) only when read (:attr:`text`: ``code: detail``, or ``code`` alone without a detail). A reason
    whose whole text is told (code None) takes its code from the text's first word before a colon."""

    __slots__ = ("code", "tell", "args")

    def __init__(self, code: str | None, tell: "str | Callable[..., str]" = "", *args: object) -> None:
        self.code, self.tell, self.args = code, tell, args

    @property
    def text(self) -> str:
        detail = self.tell if self.tell.__class__ is str else self.tell(*self.args)  # type: ignore[operator]
        if self.code is None:
            return detail  # type: ignore[return-value]
        return f"{self.code}: {detail}" if detail else self.code

    def __eq__(self, other: object) -> bool:
        return self.text == (other.text if isinstance(other, Reason) else other)

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return repr(self.text)


def text_of(reason: "str | Reason") -> str:
    return reason if reason.__class__ is str else reason.text  # type: ignore[union-attr, return-value]


def code_of(reason: "str | Reason") -> str:
    """The code a reason starts with."""
    if reason.__class__ is str:
        return reason.partition(":")[0]  # type: ignore[union-attr]
    return reason.code if reason.code is not None else reason.text.partition(":")[0]  # type: ignore[union-attr]


class LazyEstimate:
    """A decision's byte estimate, made when read: ``estimate(table, op, metrics, config)``, the config the
    policy's with the table's owner overrides (a tick makes 50,000 decisions; admission reads the estimates of
    the work it admits, scopes or packs into an open batch, a reader any other's)."""

    __slots__ = ("estimate", "table", "op", "metrics", "policy", "owner", "made")

    def __init__(self, estimate: Callable[..., int], table: TableName, op: Operation, metrics: TableMetrics | None,
                 policy: Any, owner: OwnerOverrides | None) -> None:
        self.estimate, self.table, self.op, self.metrics, self.policy, self.owner = \
            estimate, table, op, metrics, policy, owner
        self.made: int | None = None

    def value(self) -> int:
        """The estimate, made at its first read and kept (its inputs are immutable; a candidate's is read by
        several admission steps)."""
        made = self.made
        if made is None:
            made = self.made = self.estimate(self.table, self.op, self.metrics,
                                             with_overrides(self.owner, self.op, self.policy.config(self.op)))
        return made

    def __eq__(self, other: object) -> bool:
        return self.value() == (other.value() if isinstance(other, LazyEstimate) else other)

    def __hash__(self) -> int:
        return hash(self.value())

    def __repr__(self) -> str:
        return repr(self.value())


@dataclass(frozen=True)
class Decision:
    table: TableName
    operation: Operation
    policy: str | None
    decision: str  # "run" or "skip"
    why: tuple[Reason | str, ...]  # its reasons, told on demand (:attr:`reasons`)
    trigger: str | None  # cron, interval, condition, critical, sla (for a run)
    debt_score: float
    debt_breakdown: Mapping[str, float]
    bytes_estimate: int | LazyEstimate  # :attr:`estimated_bytes`, estimated on demand for skipped work
    next_eligible: datetime | None
    rank: int | None
    slot: str | None = None
    attempt: int = 0
    policy_priority: int = 0
    schedule_priority: int = 0
    condition_result: ConditionResult | None = None  # the trigger-condition gate's verdict, once reached
    quiet: QuietVerdict | None = None  # the quiet gate's verdict, once reached (a schedule with quietFor)
    sla: SlaVerdict | None = None  # the operation's SLA contract at ``now`` (a schedule with sla), every decision
    writer_hold: WriterHold | None = None  # the writer_running gate's verdict, once reached (a known writer)
    upstream: Writer | None = None  # after_write: the newest writer materialization that made it due
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
    # Every gate let it run (its own verdict, which the trigger status answers with); skipped, the
    # admission held it back this tick: its first reason says why, the others are the gates'.
    passed_gates: bool = False
    # What the table's floe.* properties do under its policy (core/policies/owner_overrides.py); None: it sets none.
    owner_overrides: OwnerOverrides | None = None
    cadence: Any = None  # the kind's own cadence's verdict (an adaptive orphan cleanup), once the due gate read it
    # The learned ranking's factor (core/value/learned_ranking.EfficiencyFactor), once ranked by it.
    efficiency: Any = None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why: the first reason says what decided (a skip's code first), the others what the gates said."""
        return tuple(reason if reason.__class__ is str else reason.text for reason in self.why)  # type: ignore

    @property
    def code(self) -> str:
        """The code its first reason starts with ("" without a reason)."""
        return code_of(self.why[0]) if self.why else ""

    @property
    def estimated_bytes(self) -> int:
        estimate = self.bytes_estimate
        return estimate if estimate.__class__ is int else estimate.value()  # type: ignore[union-attr]

    @property
    def conditions(self) -> dict[str, object]:
        """The trigger-condition gate's verdict as JSON (empty when an earlier gate stopped the work);
        rendered on demand: only ``explain`` and the API show it, and a tick makes 50,000 decisions."""
        return self.condition_result.to_json() if self.condition_result is not None else {}

    @property
    def held_back(self) -> bool:
        """Every gate let it run, and this tick's admission held it back (one operation per table at a
        time, a budget, the tick cap): ``reasons[0]`` says why."""
        return self.passed_gates and self.decision == "skip"

    @property
    def item_key(self) -> str:
        return item_key(self.table.qualified, self.operation, self.slot, self.attempt)

    def to_json(self) -> dict[str, object]:
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
            **({"sla": self.sla.to_json()} if self.sla is not None else {}),  # a schedule with an SLA contract
            **({"ownerOverrides": self.owner_overrides.to_json(self.operation)}
               if self.owner_overrides is not None else {}),
        }


class PlanJson(TypedDict):
    """A plan as ``plan --json`` and the API show it."""

    at: str
    decisions: list[dict[str, object]]
    notes: list[str]


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
    # The tables' writers (core/schedules/writers.py), by qualified name: only tables that have one.
    writers: Mapping[str, tuple[Writer, ...]] = field(default_factory=dict)
    # The user's runs queued or started now that target a writer asset, by the asset key.
    writer_runs: Mapping[AssetKeyPath, tuple[WriterRun, ...]] = field(default_factory=dict)
    # A writer's first materialization after a moment, from the event log (core/schedules/after_write.py's maxSettle);
    # None: unknown, and an after-write rule forces nothing before its settle.
    first_write_after: Callable[[AssetKeyPath, datetime | None], datetime | None] | None = None
    ranking: RankingSettings = LEARNING_OFF  # settings.ranking: the static order, the learned one, or both
    # Each (table, operation)'s recorded runs with their figures (core/value/run_history.py), read only when the
    # learned ranking or a kind's own cadence needs them: scheduling/inputs.py.
    recorded_runs: Mapping[tuple[str, Operation], Sequence[RecordedRun]] = field(default_factory=dict)
    # The live admissions whose runs have not finished (the ledger's): the compute budget counts their estimates.
    admissions_in_flight: tuple[InFlightAdmission, ...] = ()


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

    def to_json(self) -> PlanJson:
        return {"at": self.at.isoformat(), "decisions": [d.to_json() for d in self.decisions], "notes": self.notes}

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for decision in self.decisions:
            if decision.decision == "skip" and decision.why:
                code = decision.code
                counts[code] = counts.get(code, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def group_batches(decisions: Iterable[Decision]) -> list[list[Decision]]:
    """Admitted decisions by batch (a decision without one is a batch of its own), in rank order."""
    by_batch: dict[object, list[Decision]] = {}
    for decision in sorted(decisions, key=lambda d: d.rank or 0):
        key = decision.batch if decision.batch is not None else ("alone", decision.item_key)
        by_batch.setdefault(key, []).append(decision)
    return list(by_batch.values())




def build_decision(values: Mapping[str, object], /, **changes: object) -> Decision:
    """A :class:`Decision` of ``values`` with ``changes``, without its generated ``__init__`` (a frozen
    dataclass's sets each of its 20 fields through ``object.__setattr__``): a tick makes 50,000 of
    them and 2-3 copies each."""
    decision = _new(Decision)
    kept = decision.__dict__
    kept.update(values)
    kept.update(changes)
    return decision


def replace_decision(original: Decision, /, **changes: object) -> Decision:
    """``dataclasses.replace`` for :class:`Decision` (see :func:`build_decision`)."""
    decision = _new(Decision)
    kept = decision.__dict__
    kept.update(original.__dict__)
    kept.update(changes)
    return decision


def skip(base: Decision, code: str, tell: "str | Callable[..., str]" = "", *args: Any, **changes: Any) -> Decision:
    """``base`` skipped: its first reason ``code: detail`` (the detail told by ``tell(*args)`` when read,
    or ``tell`` itself), then ``more`` (the reasons it had, when a later stage holds back what the gates
    let run: its ``why``). (One copy of ``base``, made here: three of every five decisions of a tick.)"""
    more = changes.pop("more", ()) if changes else ()
    return skipped_with(base, Reason(code, tell, *args), more, changes)


def skipped_with(base: Decision, reason: Reason, more: tuple = (), changes: Mapping[str, Any] | None = None
                 ) -> Decision:
    """``base`` skipped with ``reason`` first, then ``more``: :func:`skip` with a reason made by the caller, who
    may share one among many decisions (the tick cap holds back up to 200,000 a tick with the same words)."""
    decision = _new(Decision)
    kept = decision.__dict__
    kept.update(base.__dict__)
    if changes:
        kept.update(changes)
    kept["decision"] = "skip"
    kept["why"] = (reason, *more)
    return decision


_new = object.__new__
