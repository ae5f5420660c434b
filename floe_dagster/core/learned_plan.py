"""The learned ranking inside a plan (floe.yaml's ``ranking``): each candidate's measured-efficiency
factor, learned from the recorded runs of the plan's input (core/run_figures.py →
core/learned_ranking.py), and shadow mode's comparison of the static and the learned order.

- ``ranking.learned``: the rank stage orders the candidates by debt score × factor
  (:func:`~floe_dagster.core.ranking_shadow.learned_rank_key`); ties as the static order breaks them.
- ``ranking.shadow``: after the live admission, both orders spend the same compute (the estimated
  compute of what the live admission admitted this tick) and the plan's notes say what each would
  admit and the benefit each expects per compute hour; nothing about what runs changes.

The factor's prior here is the fleet's efficiency for the operation (the planner has the byte
estimate, not the file counts the estimate's own prior needs); the compute estimate is per GiB of
the decision's estimated bytes for rewrites, per run otherwise (core/learned_ranking.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from floe_dagster.core.learned_ranking import (
    ComputeEstimate,
    EfficiencyFactor,
    HistoryTotals,
    RankingSettings,
    efficiency_factor,
    estimate_compute,
)
from floe_dagster.core.operations import Operation
from floe_dagster.core.ranking_shadow import compare_rankings
from floe_dagster.core.run_figures import RecordedRun, compute_source, learning_figures

_NONE = HistoryTotals()


@dataclass
class LearnedView:
    """The decayed totals of every recorded (table, operation) and of the fleet per operation, made once
    per plan (or per ``explain``)."""

    settings: RankingSettings
    items: dict[tuple[str, Operation], HistoryTotals]
    fleet: dict[Operation, HistoryTotals]
    sources: dict[tuple[str, Operation], str | None] = field(default_factory=dict)
    _compute: dict[tuple[str, Operation, int], ComputeEstimate] = field(default_factory=dict)

    @classmethod
    def of(cls, runs: Mapping[tuple[str, Operation], Sequence[RecordedRun]], now: Any,
           settings: RankingSettings) -> "LearnedView":
        items: dict[tuple[str, Operation], HistoryTotals] = {}
        fleet: dict[Operation, HistoryTotals] = {}
        sources: dict[tuple[str, Operation], str | None] = {}
        for key, recorded in runs.items():
            figures = [f for f in map(learning_figures, recorded) if f is not None]
            totals = items[key] = HistoryTotals.of(figures, now, settings.history_half_life_days)
            fleet[key[1]] = fleet.get(key[1], _NONE) + totals
            sources[key] = compute_source(list(recorded))
        return cls(settings, items, fleet, sources)

    def compute(self, table: str, op: Operation, estimated_bytes: int) -> ComputeEstimate:
        key = (table, op, estimated_bytes)
        if key not in self._compute:
            self._compute[key] = estimate_compute(self.items.get((table, op), _NONE), self.fleet.get(op, _NONE),
                                                  estimated_bytes, self.settings)
        return self._compute[key]

    def factor(self, table: str, op: Operation) -> EfficiencyFactor:
        return efficiency_factor(self.items.get((table, op), _NONE), self.fleet.get(op, _NONE),
                                 settings=self.settings)

    def to_json(self, table: str, op: Operation, factor: EfficiencyFactor | None, estimated_bytes: int,
                ranked_by: str) -> dict[str, Any]:
        """``explain``'s ``efficiency``: the factor, the compute estimate, how the plan ranks, and where the
        compute figures came from (``executor_cpu``, ``wall``: the runs' durations, until compute is recorded)."""
        factor = factor or self.factor(table, op)
        return {**factor.to_json(), "ranking": ranked_by, "computeSource": self.sources.get((table, op)),
                "computeEstimate": self.compute(table, op, estimated_bytes).to_json()}


def ranked_by(settings: RankingSettings) -> str:
    """How the plan ranks: ``learned``, ``static``, or ``static (learned in shadow)``."""
    if settings.learned:
        return "learned"
    return "static (learned in shadow)" if settings.shadow else "static"


def shadow_note(view: LearnedView, candidates: Sequence[Any], admitted: Sequence[Any]) -> str:
    """Shadow mode's line in the plan's notes: both orders under the compute the live admission spent."""

    def compute_of(decision: Any) -> float:
        return view.compute(decision.table.qualified, decision.operation, decision.estimated_bytes).seconds

    def factor_of(decision: Any) -> float:
        return decision.efficiency.factor if decision.efficiency is not None else 1.0

    def benefit_of(decision: Any) -> float:  # the same estimate for both orders: shrunk efficiency × compute
        efficiency = decision.efficiency.efficiency if decision.efficiency is not None else None
        return (efficiency or 0.0) * compute_of(decision)

    budget = sum(compute_of(d) for d in admitted)
    comparison = compare_rankings(candidates, factor_of, compute_of, benefit_of, budget)
    return f"{comparison.summary()} (under the {budget:,.0f} compute s the live admission spent)"


__all__ = ["LearnedView", "ranked_by", "shadow_note"]
