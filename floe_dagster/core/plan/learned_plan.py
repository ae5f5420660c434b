"""The learned ranking inside a plan (floe.yaml's ``ranking``): each candidate's measured-efficiency
factor, learned from the recorded runs of the plan's input (core/runs/run_figures.py →
core/value/learned_ranking.py), and shadow mode's comparison of the static and the learned order.

- ``ranking.learned``: the rank stage orders the candidates by debt score × factor
  (:func:`~floe_dagster.core.value.ranking_shadow.learned_rank_key`); ties as the static order breaks them.
- ``ranking.shadow``: after the live admission, both orders spend the same compute (the estimated
  compute of what the live admission admitted this tick) and the plan's notes say what each would
  admit and the benefit each expects per compute hour; nothing about what runs changes.

The factor's prior is what the item's byte estimate promises (core/rewrites/estimates.py: the files Iceberg's
planner would take, minus one file written per group: small-file groups write about one file each)
over its compute estimate; without an estimate (no full-tier health, an operation that rewrites
nothing) the fleet's efficiency for the operation. Benchmark 15 measured why: with the fleet's
prior alone, a table the static order never ran has no history and stays where it was. The compute
estimate is per GiB of the estimated bytes for rewrites, per run otherwise (core/value/learned_ranking.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from floe_dagster.core.value.learned_ranking import (
    ComputeEstimate,
    EfficiencyFactor,
    HistoryTotals,
    RankingSettings,
    efficiency_factor,
    estimate_compute,
    expected_files_removed,
)
from floe_dagster.core.rewrites.rewrite_rules import EstimateOptionError
from floe_dagster.core.operations import Operation
from floe_dagster.core.value.ranking_shadow import compare_rankings
from floe_dagster.core.value.run_history import RecordedRun, compute_source, learning_run

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
            figures = [f for f in map(learning_run, recorded) if f is not None]
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

    def factor(self, table: str, op: Operation, metrics: object = None, config: object = None) -> EfficiencyFactor:
        """The item's factor; its prior is what its byte estimate promises (the files Iceberg's planner would
        take minus one per file group it writes) over its compute estimate, else the fleet's efficiency."""
        own, fleet = self.items.get((table, op), _NONE), self.fleet.get(op, _NONE)
        rough = _rough_estimate(op, metrics, config)
        if rough is None:
            return efficiency_factor(own, fleet, settings=self.settings)
        expected = expected_files_removed(rough.files, rough.bytes, rough.groups, 0)
        return efficiency_factor(own, fleet, self.compute(table, op, rough.bytes), expected, self.settings)

    def to_json(self, table: str, op: Operation, factor: EfficiencyFactor | None, estimated_bytes: int,
                ranked_by: str, metrics: object = None, config: object = None) -> dict[str, object]:
        """``explain``'s ``efficiency``: the factor, the compute estimate, how the plan ranks, and where the
        compute figures came from (``executor_cpu``, ``wall``: the runs' durations, until compute is recorded)."""
        factor = factor or self.factor(table, op, metrics, config)
        return {**factor.to_json(), "ranking": ranked_by, "computeSource": self.sources.get((table, op)),
                "computeEstimate": self.compute(table, op, estimated_bytes).to_json()}


def _rough_estimate(op: Operation, metrics: object, config: object) -> Any:
    """The kind's byte estimate (files, bytes, groups) of a rewrite (None: no estimate, no full tier, or
    options Iceberg would refuse: the fleet's prior then)."""
    if metrics is None:
        return None
    try:
        rough = op.spec.byte_estimate(metrics, config)
    except EstimateOptionError:
        return None
    return rough


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
