"""Fair shares: how one admission pass splits the tick's budgets between groups of tables when
their demand exceeds them (floe.yaml's ``fair-shares`` section, docs/automation.md "Fair shares").

A *share* is the tables of one namespace (``by: namespace``), or of one value of a policy tag
(``by: tag:team``: the effective policy's ``tags``; the tables whose policy lacks the tag form one
share of their own). Each share has a weight: ``weights``, else ``default-weight``.

The planner offers its ranked candidates to the budgets in a fair order instead of its plain rank order: weighted
dominant-resource fairness by progressive filling. The next decision offered is always the next one (in rank order,
so debt order holds within a share) of the share whose *usage* is smallest, where a share's usage is the largest
fraction it took of any limited budget of the pass (tables, operations, bytes, compute, run requests) divided by its
weight (start-time fair queuing); equal usages go to the heavier share, then by the rank of the shares' next
decisions. So when a budget runs out, each share with demand got a part of it in proportion to its weight (as far
as its items' sizes allow), and a share that needs less than its part leaves the rest to the others in the same
pass. With one share, or off, the order is the plain rank order: behaviour unchanged.

**Memory across ticks.** A share's usage also counts what it was admitted in earlier ticks (the
ledger's live admissions of the last :data:`USAGE_HORIZON`), each admission's costs weighed by
``exp(-age / 1 h)`` (:func:`decayed_usage`): usage decays with a one-hour time constant. Without it
every tick started from zero, so with room for one table a tick the heavier share, first at equal
usage, won every tick and the other starved; with it the share that was just admitted has used more
and the other goes next, and over many ticks the shares get the budgets in the ratio of their weights.

Pure: :class:`FairQueue` knows nothing of decisions, only shares, items in order and costs.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, Sequence, TypeVar

from floe_dagster.core.basics.validation import Location, describe, setting

NAMESPACE = "namespace"
TAG_PREFIX = "tag:"
UNTAGGED = ""  # the share of the tables whose effective policy lacks the tag (or that have none)

# The budgets a pass splits, by the name their costs are charged under (compute: estimated seconds).
TABLES, OPERATIONS, BYTES, RUNS, COMPUTE = "tables", "operations", "bytes", "runs", "compute"

T = TypeVar("T")

# How long a share's admissions are remembered: usage decays as exp(-age / USAGE_TIME_CONSTANT), and an
# admission older than USAGE_HORIZON (weighing under e^-6, 0.25 %) is left out.
USAGE_TIME_CONSTANT = timedelta(hours=1)
USAGE_HORIZON = timedelta(hours=6)


def _read_weights(at: Location, raw: object) -> object:
    """``weights``: a mapping of share names to positive numbers (a namespace, or a tag's value)."""
    if not isinstance(raw, Mapping):
        at.error(f"expected a mapping of share names to weights (numbers > 0), got {describe(raw)}")
        return None
    weights: dict[str, float] = {}
    for name, value in raw.items():
        weight = _weight(value)
        if weight is None:
            at.child(str(name)).error(f"expected a weight (a number > 0), got {describe(value)}")
            continue
        weights[str(name)] = weight
    return weights


def _weight(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        weight = float(value)
    except (TypeError, ValueError):
        return None
    return weight if weight > 0 and math.isfinite(weight) else None


def _share_key(by: str) -> str | None:
    if by == NAMESPACE or (by.startswith(TAG_PREFIX) and by[len(TAG_PREFIX):].strip()):
        return None
    return f"expected 'namespace' or 'tag:<policy tag name>' (e.g. tag:team), got {by!r}"


@dataclass(frozen=True)
class FairShareSettings:
    """How the budgets are split between shares of the tables when demand exceeds them (see Automation)."""

    by: str | None = setting(
        None, "what makes a share: `namespace`, or `tag:<name>` (the effective policy's tag, e.g. tag:team); "
        "null: off, the budgets go in plain rank order", expects="namespace or tag:<name>", check=_share_key)
    weights: dict[str, float] = setting(
        default_factory=dict, description="each share's weight, by namespace or tag value (e.g. {sales: 2})",
        reader=_read_weights)
    default_weight: float = setting(1.0, "the weight of a share that weights does not name")

    def __post_init__(self) -> None:
        if self.by is not None and (problem := _share_key(self.by)):
            raise ValueError(f"by: {problem}")
        if _weight(self.default_weight) is None:
            raise ValueError(f"default-weight: expected a number > 0, got {self.default_weight!r}")
        for name, weight in self.weights.items():
            if _weight(weight) is None:
                raise ValueError(f"weights.{name}: expected a number > 0, got {weight!r}")

    @property
    def enabled(self) -> bool:
        return self.by is not None

    @property
    def tag(self) -> str | None:
        """The policy tag that makes the shares (``by: tag:<name>``), else None."""
        return self.by[len(TAG_PREFIX):].strip() if self.by and self.by.startswith(TAG_PREFIX) else None

    def share_of(self, namespace: str, policy_tags: Mapping[str, str]) -> str:
        """The share of a table in ``namespace`` whose effective policy has ``policy_tags``."""
        tag = self.tag
        return policy_tags.get(tag, UNTAGGED) if tag is not None else namespace

    def weight(self, share: str) -> float:
        return self.weights.get(share, self.default_weight)

    def describe(self, share: str) -> str:
        """A share as a reason names it: ``namespace 'sales'``, ``team 'data'``, ``tables without a team tag``."""
        tag = self.tag
        if tag is None:
            return f"namespace {share!r}"
        return f"{tag} {share!r}" if share != UNTAGGED else f"tables without a {tag} tag"


FAIR_SHARES_OFF = FairShareSettings()


def admission_costs(rewritten_bytes: int, max_tables_per_run: int, compute_s: float = 0.0) -> dict[str, float]:
    """What admitting one (table, operation) takes of each budget: a table, an operation, the bytes it
    rewrites, its seat of a run request (1/``max_tables_per_run``: a batch's tables share the run), and its
    estimated compute seconds (core/plan/compute_budget.py; 0 without a compute budget)."""
    return {TABLES: 1.0, OPERATIONS: 1.0, BYTES: float(rewritten_bytes), RUNS: 1.0 / max_tables_per_run,
            COMPUTE: float(compute_s)}


@dataclass(frozen=True)
class PastAdmission:
    """A live admission of an earlier tick (a ledger row), as the shares' memory needs it."""

    table: str  # qualified name
    admitted_at: datetime
    rewritten_bytes: int = 0  # its estimate when the operation rewrites data


def decayed_usage(admissions: Iterable[PastAdmission], now: datetime, share_of: Callable[[str], str | None],
                  max_tables_per_run: int) -> dict[str, dict[str, float]]:
    """Each share's costs of its admissions before ``now``, each weighed by ``exp(-age / 1 h)`` (an
    admission stamped after ``now``, a clock step, counts whole); ``share_of`` gives a table's share,
    None for a table no longer listed (left out)."""
    usage: dict[str, dict[str, float]] = {}
    for admission in admissions:
        age = max(timedelta(0), now - admission.admitted_at)
        share = share_of(admission.table) if age < USAGE_HORIZON else None
        if share is None:
            continue
        decay = math.exp(-(age / USAGE_TIME_CONSTANT))
        costs = usage.setdefault(share, dict.fromkeys((TABLES, OPERATIONS, BYTES, RUNS, COMPUTE), 0.0))
        for name, amount in admission_costs(admission.rewritten_bytes, max_tables_per_run).items():
            costs[name] += amount * decay
    return usage


class FairQueue(Generic[T]):
    """Items of several shares, each share's in its own order, offered one at a time in the fair order
    (see the module's docstring). Iterate it; after each item, :meth:`charge` what admitting it took
    (nothing for an item that was not admitted) before taking the next one.

    ``capacity`` holds the limited budgets of the pass (name → amount; unlimited budgets are left
    out); ``weight_of`` a share's weight; ``order_of`` an item's place in the overall ranking;
    ``prior`` each share's decayed costs of earlier ticks (:func:`decayed_usage`), counted in its usage
    beside what it takes in this pass. Between shares of equal usage, the heavier one goes first (its
    usage grows less with the item), then the one whose next item ranks first."""

    def __init__(self, items: Mapping[str, Sequence[T]], capacity: Mapping[str, float],
                 weight_of: Callable[[str], float], order_of: Callable[[T], Any],
                 prior: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._pending = {share: deque(queue) for share, queue in items.items() if queue}
        self._capacity = {name: max(float(amount), 1.0) for name, amount in capacity.items()}
        self._weight_of = weight_of
        self._order_of = order_of
        self._used: dict[str, dict[str, float]] = {share: dict.fromkeys(capacity, 0.0) for share in self._pending}
        self._prior = {share: {name: float((prior or {}).get(share, {}).get(name, 0.0)) for name in capacity}
                       for share in self._pending}
        # Each share's usage, computed again only when it is charged: most items offered are skipped
        # (nothing charged), and the tick offers tens of thousands of them.
        self._usage = {share: self.usage(share) for share in self._pending}
        self._heap = [self._entry(share) for share in self._pending]
        heapq.heapify(self._heap)

    @property
    def shares(self) -> tuple[str, ...]:
        """The shares that had items (the demand the budgets were split by)."""
        return tuple(self._used)

    @property
    def total_weight(self) -> float:
        return sum(self._weight_of(share) for share in self._used)

    def used(self, share: str, budget: str) -> float:
        """What the share took of a budget in this pass."""
        return self._used.get(share, {}).get(budget, 0.0)

    def used_before(self, share: str, budget: str) -> float:
        """The share's decayed costs of earlier ticks for a budget (``prior``)."""
        return self._prior.get(share, {}).get(budget, 0.0)

    def usage(self, share: str) -> float:
        """The largest fraction of a budget the share took, earlier ticks' decayed costs included,
        divided by its weight."""
        used, prior = self._used[share], self._prior[share]
        dominant = max(((used[name] + prior[name]) / amount for name, amount in self._capacity.items()), default=0.0)
        return dominant / self._weight_of(share)

    def _entry(self, share: str) -> tuple[float, float, Any, str]:
        return self._usage[share], -self._weight_of(share), self._order_of(self._pending[share][0]), share

    def charge(self, share: str, costs: Mapping[str, float]) -> None:
        used = self._used[share]
        for name, amount in costs.items():
            if name in used:
                used[name] += amount
        if costs:
            self._usage[share] = self.usage(share)

    def __iter__(self) -> Iterator[tuple[str, T]]:
        while self._heap:
            share = heapq.heappop(self._heap)[-1]
            queue = self._pending[share]
            yield share, queue.popleft()  # the caller charges it before the next item
            if queue:
                heapq.heappush(self._heap, self._entry(share))
