"""Debt score: weights, breakdown, cap, configuration (mirrors MaintenanceDebtScoreTest)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from floe_dagster.core.facts.debt import DebtWeights, TableDebt, debt_score
from floe_dagster.core.facts.health_assessment import HealthIssue, IssueType, Severity, assess_health
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.facts.measurements import TableMetrics

NOW = datetime(2026, 6, 10, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
DAY_MS = 86_400_000


def issue(severity: Severity) -> HealthIssue:
    return HealthIssue(IssueType.TOO_MANY_SNAPSHOTS, severity, "x")


def table(**changes) -> TableMetrics:
    values = dict(qualified_name="demo.sales.t", metadata_location=None, tier="full", collected_at_ms=NOW_MS,
                  data_file_count=10, total_data_bytes=10 * 300 * 2**20, data_file_sizes=(300 * 2**20,) * 10,
                  snapshot_count=3, oldest_snapshot_ms=NOW_MS - DAY_MS, newest_snapshot_ms=NOW_MS - DAY_MS,
                  manifest_count=1, manifest_total_bytes=1000, partition_count=1, max_files_per_partition=10)
    values.update(changes)
    return TableMetrics(**values)


def test_components_and_breakdown():
    result = debt_score([issue(Severity.CRITICAL), issue(Severity.WARNING), issue(Severity.WARNING),
                         issue(Severity.INFO)], days_since_write=4, failure_rate=25, consecutive_failures=2)
    assert dict(result.breakdown) == {"critical_issues": 100, "warning_issues": 100, "info_issues": 10,
                                      "days_since_write": 2.0, "failure_rate": 25, "consecutive_failures": 40}
    assert result.score == 277


def test_capped_at_1000():
    result = debt_score([issue(Severity.CRITICAL)] * 12, days_since_write=0, failure_rate=100)
    assert result.score == 1000 and result.breakdown["capped"] == 300


def test_failure_rate_is_clamped_to_percent():
    assert debt_score([], days_since_write=None, failure_rate=250).score == 100


def test_a_critical_table_owes_more_than_a_healthy_one():
    critical = assess_health(table(snapshot_count=600), None, NOW)
    healthy = assess_health(table(), None, NOW)
    assert critical.status == "critical" and healthy.status == "healthy"
    assert TableDebt(critical.issues, critical.metrics, NOW).with_history(0, 0)[0] > TableDebt(
        healthy.issues, healthy.metrics, NOW).with_history(0, 0)[0]


def test_table_debt_adds_each_history_and_reads_a_weights_mapping():
    history = OperationHistory(runs=4, failures=1, consecutive_failures=1)
    debt = TableDebt([], table(), NOW, {"per-consecutive-failure": 5, "failure_rate": 2})
    score, breakdown = debt.with_history(history.failure_rate, history.consecutive_failures)
    assert breakdown["failure_rate"] == 50 and breakdown["consecutive_failures"] == 5
    assert breakdown["days_since_write"] == 0.5
    assert score == 55.5
    assert debt.with_history(0.0, 0) == (0.5, {"critical_issues": 0, "warning_issues": 0, "info_issues": 0,
                                              "days_since_write": 0.5, "failure_rate": 0, "consecutive_failures": 0})
    assert TableDebt([], None, NOW).with_history(0.0, 0)[0] == 0


def test_weights_from_mapping():
    weights = DebtWeights.from_mapping({"critical": 200, "per-day-since-write": 1, "cap": 5000})
    assert (weights.critical, weights.per_day_since_write, weights.cap, weights.warning) == (200, 1, 5000, 50)
    assert DebtWeights.from_mapping(None) == DebtWeights()
    assert debt_score([issue(Severity.CRITICAL)], days_since_write=2, weights=weights).score == 202


@pytest.mark.parametrize("raw, message", [
    ({"critcal": 5}, "debt.critcal: unknown weight; did you mean 'critical'"),
    ({"warning": "lots"}, "debt.warning: expected a number"),
    ({"cap": -1}, "debt.cap"),
    ({"info": True}, "debt.info"),
])
def test_bad_weights_name_the_key(raw, message):
    with pytest.raises(ValueError, match=message):
        DebtWeights.from_mapping(raw)
