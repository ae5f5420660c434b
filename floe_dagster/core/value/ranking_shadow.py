"""The static and the learned ranking side by side (issue 29's shadow mode for ranking), pure.

Given the planner's candidates (the decisions that passed every gate; any objects with the
:class:`Ranked` attributes), :func:`both_orders` returns the static order, exactly the planner's
(debt score, then policy priority, schedule priority, table name and Floe's operation order), and
the learned one: the same keys with the debt score × each item's measured-efficiency factor
(core/value/learned_ranking.py). :func:`compare_rankings` goes one step further: it spends one compute
budget in each order (one operation per table, an item whose estimate does not fit is skipped for
smaller ones behind it, as the byte budget does) and tells what each would admit, the items only one
of them admits, and the benefit each expects per compute hour. That is what shadow mode records per
tick before anyone switches ``ranking.learned`` on: the live pass keeps the static order, and the
comparison says what the learned order would have done instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, Hashable, Iterable, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.core.operations import Operation


class Ranked(Protocol):
    """What the ranking reads of a candidate (the planner's ``Decision`` has all of it)."""

    debt_score: float
    policy_priority: int
    schedule_priority: int

    @property
    def table(self) -> TableName: ...  # ``.qualified``

    @property
    def operation(self) -> Operation: ...  # ``.order``


T = TypeVar("T", bound=Ranked)


def static_rank_key(item: Ranked) -> tuple:
    """The planner's candidate order (core/plan/planner.py sorts its candidates by this key)."""
    return (-item.debt_score, -item.policy_priority, -item.schedule_priority, item.table.qualified,
            item.operation.order)


def learned_rank_key(item: Ranked, factor: float) -> tuple:
    """The static key with the debt score × the item's efficiency factor; ties as the planner breaks them.
    A factor that is no finite number ≥ 0 counts as 1 (a NaN would make the order depend on the input's)."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor >= 0):
        factor = 1.0
    return (-item.debt_score * factor, *static_rank_key(item)[1:])


@dataclass(frozen=True)
class RankedOrders(Generic[T]):
    static: tuple[T, ...]
    learned: tuple[T, ...]

    def moves(self, key: Callable[[T], Hashable]) -> dict[Hashable, tuple[int, int]]:
        """Each item's (static rank, learned rank), 1-based, by ``key``."""
        static = {key(item): rank for rank, item in enumerate(self.static, 1)}
        return {key(item): (static[key(item)], rank) for rank, item in enumerate(self.learned, 1)}


def both_orders(candidates: Iterable[T], factor_of: Callable[[T], float]) -> RankedOrders[T]:
    """The candidates in the static order and in the learned one."""
    items = list(candidates)
    factors = {id(item): factor_of(item) for item in items}
    return RankedOrders(tuple(sorted(items, key=static_rank_key)),
                        tuple(sorted(items, key=lambda item: learned_rank_key(item, factors[id(item)]))))


def admit_within_compute(order: Sequence[T], budget_s: float | None, compute_of: Callable[[T], float],
                         used_s: float = 0.0) -> list[T]:
    """The items ``order`` admits under ``budget_s`` estimated compute seconds (None: unlimited) of
    which ``used_s`` are used already: one operation per table, an item that does not fit skipped for
    smaller ones behind it; an item larger than the whole budget is admitted alone into an unused
    budget, as the byte budget does."""
    admitted: list[T] = []
    tables: set[str] = set()
    used = used_s
    for item in order:
        table = item.table.qualified
        if table in tables:
            continue
        cost = max(0.0, compute_of(item))
        if budget_s is not None and used + cost > budget_s and not (used == 0 and cost > budget_s):
            continue
        admitted.append(item)
        tables.add(table)
        used += cost
    return admitted


@dataclass(frozen=True)
class RankingComparison(Generic[T]):
    """What each order admits under one compute budget, and what each expects to buy."""

    orders: RankedOrders[T]
    static_admitted: tuple[T, ...]
    learned_admitted: tuple[T, ...]
    static_compute_s: float
    learned_compute_s: float
    static_benefit: float
    learned_benefit: float

    @property
    def only_static(self) -> tuple[T, ...]:
        chosen = {id(item) for item in self.learned_admitted}
        return tuple(item for item in self.static_admitted if id(item) not in chosen)

    @property
    def only_learned(self) -> tuple[T, ...]:
        chosen = {id(item) for item in self.static_admitted}
        return tuple(item for item in self.learned_admitted if id(item) not in chosen)

    @staticmethod
    def per_hour(benefit: float, compute_s: float) -> float | None:
        return benefit * 3600 / compute_s if compute_s > 0 else None

    def summary(self) -> str:
        """One line for a tick's notes and ``explain``."""
        static = self.per_hour(self.static_benefit, self.static_compute_s)
        learned = self.per_hour(self.learned_benefit, self.learned_compute_s)

        def told(value: float | None) -> str:
            return f"{value:,.0f}" if value is not None else "-"

        return (f"ranking shadow: static admits {len(self.static_admitted)}, learned {len(self.learned_admitted)} "
                f"({len(self.only_learned)} only by learned, {len(self.only_static)} only by static); expected "
                f"file opens saved per compute hour: static {told(static)}, learned {told(learned)}")

    def to_json(self, key: Callable[[T], str]) -> dict[str, object]:
        return {"static": [key(i) for i in self.static_admitted], "learned": [key(i) for i in self.learned_admitted],
                "onlyStatic": [key(i) for i in self.only_static], "onlyLearned": [key(i) for i in self.only_learned],
                "staticComputeSeconds": round(self.static_compute_s, 1),
                "learnedComputeSeconds": round(self.learned_compute_s, 1),
                "staticBenefit": round(self.static_benefit, 1), "learnedBenefit": round(self.learned_benefit, 1),
                "summary": self.summary()}


def compare_rankings(candidates: Iterable[T], factor_of: Callable[[T], float], compute_of: Callable[[T], float],
                     benefit_of: Callable[[T], float], budget_s: float | None,
                     used_s: float = 0.0) -> RankingComparison[T]:
    """Both orders, and what each admits under ``budget_s`` (estimated compute seconds, ``used_s`` of
    them used already; None: unlimited) with its expected compute and benefit (``compute_of``,
    ``benefit_of``: the same estimates for both)."""
    orders = both_orders(candidates, factor_of)
    static = admit_within_compute(orders.static, budget_s, compute_of, used_s)
    learned = admit_within_compute(orders.learned, budget_s, compute_of, used_s)
    return RankingComparison(orders, tuple(static), tuple(learned),
                             sum(compute_of(i) for i in static), sum(compute_of(i) for i in learned),
                             sum(benefit_of(i) for i in static), sum(benefit_of(i) for i in learned))


__all__ = [
    "Ranked", "static_rank_key", "learned_rank_key", "RankedOrders", "both_orders", "admit_within_compute",
    "RankingComparison", "compare_rankings",
]
