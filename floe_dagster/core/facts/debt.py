"""Maintenance debt score (Floe's ``MaintenanceDebtScore``): how urgently a table needs maintenance.

score = Σ issues (CRITICAL 100, WARNING 50, INFO 10)
      + 0.5 × days since the newest snapshot
      + failure rate (0..100: percent of failed among the recent finished runs) × 1.0
      + 20 × consecutive failures,
capped at 1000. Weights come from ``floe.yaml``'s ``debt:`` section (:meth:`DebtWeights.from_mapping`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Iterable, Mapping

from floe_dagster.core.facts.health_assessment import HealthIssue, Severity
from floe_dagster.core.basics.localtime import epoch_ms
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.basics.validation import closest, setting


@dataclass(frozen=True)
class DebtWeights:
    critical: float = setting(100, "points per critical health issue")
    warning: float = setting(50, "points per warning")
    info: float = setting(10, "points per informational issue")
    per_day_since_write: float = setting(0.5, "points per day since the table's last write")
    failure_rate: float = setting(1.0, "multiplies the 0..100 failure rate of its maintenance")
    per_consecutive_failure: float = setting(20, "points per failure in a row")
    cap: float = setting(1000, "the highest score")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object] | None) -> "DebtWeights":
        """Read ``debt:`` (keys in kebab-case or snake_case); raises ValueError naming the bad key."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError(f"debt: expected a mapping of weights, got {raw!r}")
        names = [f.name for f in fields(cls)]
        values: dict[str, float] = {}
        for key, value in raw.items():
            name = str(key).replace("-", "_")
            if name not in names:
                suggestion = closest(name, names)
                hint = f"; did you mean '{suggestion.replace('_', '-')}'?" if suggestion else ""
                raise ValueError(f"debt.{key}: unknown weight{hint} (known: "
                                 f"{', '.join(n.replace('_', '-') for n in names)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
                raise ValueError(f"debt.{key}: expected a number ≥ 0, got {value!r}")
            values[name] = float(value)
        return cls(**values)

    def severity_weight(self, severity: Severity) -> float:
        return {Severity.CRITICAL: self.critical, Severity.WARNING: self.warning, Severity.INFO: self.info}[severity]


DEFAULT_WEIGHTS = DebtWeights()


@dataclass(frozen=True)
class DebtScore:
    score: float
    breakdown: Mapping[str, float]  # each component before the cap; "capped" when the cap applied

    def to_json(self) -> dict[str, object]:
        return {"score": self.score, "breakdown": dict(self.breakdown)}


def debt_score(
    issues: Iterable[HealthIssue],
    *,
    days_since_write: float | None,
    failure_rate: float = 0.0,
    consecutive_failures: int = 0,
    weights: DebtWeights | None = None,
) -> DebtScore:
    weights = weights or DEFAULT_WEIGHTS
    return _with_failures(_table_part(issues, days_since_write, weights), failure_rate, consecutive_failures, weights)


_CRITICAL, _WARNING, _INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO


def _table_part(issues: Iterable[HealthIssue], days_since_write: float | None,
                weights: DebtWeights) -> dict[str, float]:
    """The components that depend on the table alone (its health issues and age)."""
    critical = warning = info = 0
    for issue in issues:  # by identity: a dict keyed by the severity would hash it through Enum's Python __hash__
        severity = issue.severity
        if severity is _CRITICAL:
            critical += 1
        elif severity is _WARNING:
            warning += 1
        elif severity is _INFO:
            info += 1
        else:
            raise KeyError(severity)
    return {
        "critical_issues": round(weights.critical * critical, 4),
        "warning_issues": round(weights.warning * warning, 4),
        "info_issues": round(weights.info * info, 4),
        "days_since_write": round(weights.per_day_since_write * max(0.0, days_since_write or 0.0), 4),
    }


def _with_failures(table: Mapping[str, float], failure_rate: float, consecutive_failures: int,
                   weights: DebtWeights) -> DebtScore:
    return DebtScore(*_scored(table, failure_rate, consecutive_failures, weights))


def _scored(table: Mapping[str, float], failure_rate: float, consecutive_failures: int,
            weights: DebtWeights) -> tuple[float, dict[str, float]]:
    """(score, breakdown), without the record (the planner asks for 20,000 a tick)."""
    breakdown = dict(table)
    breakdown["failure_rate"] = round(weights.failure_rate * min(100.0, max(0.0, failure_rate)), 4)
    breakdown["consecutive_failures"] = round(weights.per_consecutive_failure * max(0, consecutive_failures), 4)
    total = sum(breakdown.values())
    if total > weights.cap:
        breakdown["capped"] = round(total - weights.cap, 4)
    return round(min(total, weights.cap), 4), breakdown


class TableDebt:
    """One table's debt at ``now``, for each failure history of its operations: the planner scores
    every (table, operation), and a table's operations share its issues and age (often their failure
    history too), so those parts are computed once per table and each distinct history once."""

    def __init__(self, issues: Iterable[HealthIssue], metrics: TableMetrics | None, now: datetime,
                 weights: DebtWeights | Mapping[str, object] | None = None):
        if weights is None:
            weights = DEFAULT_WEIGHTS
        elif not isinstance(weights, DebtWeights):
            weights = DebtWeights.from_mapping(weights)
        self.weights = weights
        days = None
        if metrics is not None:
            days = TableMetrics.age_days(metrics.newest_snapshot_ms, epoch_ms(now))
        self._table = _table_part(issues, days, weights)
        self._scores: dict[tuple[float, int], tuple[float, dict[str, float]]] = {}

    def with_history(self, failure_rate: float, consecutive_failures: int) -> tuple[float, dict[str, float]]:
        """(score, breakdown); the breakdown is shared by the callers that ask with the same history."""
        key = (failure_rate, consecutive_failures)
        found = self._scores.get(key)
        if found is None:
            found = self._scores[key] = _scored(self._table, failure_rate, consecutive_failures, self.weights)
        return found


__all__ = ["DebtWeights", "DebtScore", "TableDebt", "debt_score", "DEFAULT_WEIGHTS"]
