"""One table's health as a record: what ``floe-dagster health``, the HTTP API and Dagit's
observations show. Pure: the metrics, the effective policy and the history are passed in.

The record holds the raw metrics, the numbers derived from them under the table's effective policy's
``healthThresholds`` (Floe's defaults when no enabled policy matches), the issues with their
severities, the overall status, and the debt score with its inputs and breakdown.

Debt score: the planner scores each (table, operation) separately; the issues and the days since the
last write are the table's, only the failure inputs (failure rate and consecutive failures) come from
that operation's history. The record's ``debt.score`` is the **worst (highest) score over the
operations the effective policy configures**, which is the score of the table's most urgent item in
the planner's ranking; each operation's score and failure inputs are listed under
``debt.operations``. A table with no policy (or a policy configuring nothing) gets the table-level
score: issues and days since write, with no failure inputs.

``table_properties``: when the effective policy declares ``tableProperties``, each declared value and
the drift (the declared keys whose table value differs: declared against current); else None.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Mapping, Sequence

from floe_dagster.core.runs.commit_conflicts import conflict_issues
from floe_dagster.core.facts.debt import DebtWeights, debt_score
from floe_dagster.core.facts.health_assessment import (
    HISTORY_ISSUES,
    HealthAssessment,
    HealthIssue,
    HealthThresholds,
    Severity,
    assess_health,
    health_status,
)
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.facts.table_properties import property_drift
from floe_dagster.core.policies.policy import Policy, PolicySet
from floe_dagster.core.facts.ref_pins import PINNED_METHOD
from floe_dagster.core.facts.refs import RefRetentionRule, ref_issues, ref_report
from floe_dagster.core.basics.tables import TableName


def thresholds_for(policies: PolicySet, table: TableName) -> tuple[Policy | None, HealthThresholds]:
    """The effective policy and its thresholds; Floe's defaults when no enabled policy matches."""
    policy = policies.effective_policy(table)
    return policy, (policy.health_thresholds if policy is not None else HealthThresholds())


def assess_table(metrics: TableMetrics, thresholds: HealthThresholds | None, now: datetime,
                 history: Mapping[tuple[str, Operation], OperationHistory] | None,
                 policy: Policy | None = None) -> HealthAssessment:
    """:func:`~floe_dagster.core.facts.health_assessment.assess_health`, then the stale branches and tags
    (``STALE_REF``, under ``policy``'s ``refRetention``: core/facts/refs.py) and the issues the history raises
    (an operation's long streak of lost commit races: ``COMMIT_CONFLICTS``), with the status again.
    What every health view shows: ``floe-dagster health``, the HTTP API and Dagit."""
    report = assess_health(metrics, thresholds, now)
    stale = ref_issues(metrics.refs, _ref_rules(policy), metrics.properties, now)
    return with_history_issues(report, history, stale)


def _ref_rules(policy: Policy | None) -> Sequence[RefRetentionRule]:
    return policy.ref_retention if policy is not None else ()


def with_history_issues(report: HealthAssessment,
                        history: Mapping[tuple[str, Operation], OperationHistory] | None,
                        more: Sequence[HealthIssue] = ()) -> HealthAssessment:
    extra = (*more, *conflict_issues(report.qualified_name, history))
    if not extra:
        return report
    issues = (*report.issues, *extra)
    return replace(report, issues=issues, status=health_status(issues))


def table_debt(
    policy: Policy | None,
    report: HealthAssessment,
    history: Mapping[tuple[str, Operation], OperationHistory] | None,
    now: datetime,
    weights: DebtWeights | None = None,
) -> dict[str, object]:
    """The debt score of a table: the worst over its policy's configured operations (see the module
    docstring), with every operation's score and the inputs."""
    metrics = report.metrics
    now_ms = int(as_utc(now).timestamp() * 1000)
    days = TableMetrics.age_days(metrics.newest_snapshot_ms, now_ms)
    owed = [issue for issue in report.issues if issue.type not in HISTORY_ISSUES]  # the planner's issues
    inputs = {
        "critical_issues": sum(1 for issue in owed if issue.severity is Severity.CRITICAL),
        "warning_issues": sum(1 for issue in owed if issue.severity is Severity.WARNING),
        "info_issues": sum(1 for issue in owed if issue.severity is Severity.INFO),
        "days_since_write": None if days is None else round(days, 6),
    }
    operations: dict[str, object] = {}
    worst: tuple[float, str | None, dict[str, float]] | None = None
    for op in (policy.configured_operations() if policy is not None else []):
        past = (history or {}).get((report.qualified_name, op))
        failure_rate = past.failure_rate if past is not None else 0.0
        consecutive = past.consecutive_failures if past is not None else 0
        score = debt_score(owed, days_since_write=days, failure_rate=failure_rate,
                           consecutive_failures=consecutive, weights=weights)
        operations[op.value] = {
            "score": score.score,
            "breakdown": dict(score.breakdown),
            "failure_rate": round(failure_rate, 4),
            "consecutive_failures": consecutive,
            "runs": past.runs if past is not None else 0,
            "failures": past.failures if past is not None else 0,
        }
        if worst is None or score.score > worst[0]:
            worst = (score.score, op.value, dict(score.breakdown))
    if worst is None:  # no policy, or nothing configured: the table-level score, no failure inputs
        score = debt_score(owed, days_since_write=days, weights=weights)
        worst = (score.score, None, dict(score.breakdown))
        method = "table level: issues and days since write (no configured operation, so no failure inputs)"
    else:
        method = "worst over the configured operations (the score of the table's most urgent planner item)"
    return {
        "score": worst[0],
        "operation": worst[1],
        "breakdown": worst[2],
        "inputs": inputs,
        "method": method,
        "operations": operations,
    }


def health_record(
    report: HealthAssessment,
    policy: Policy | None,
    history: Mapping[tuple[str, Operation], OperationHistory] | None,
    now: datetime,
    weights: DebtWeights | None = None,
) -> dict[str, object]:
    """The JSON-able record of one assessed table (what ``health_report`` returns)."""
    metrics = report.metrics
    catalog, *rest = metrics.qualified_name.split(".")
    return {
        "qualified_name": report.qualified_name,
        "assessed_at": report.assessed_at.isoformat(),
        "tier": report.tier,
        "status": report.status,
        "policy": policy.name if policy is not None else None,
        "thresholds_from": f"policy {policy.name}" if policy is not None else "defaults (no enabled policy matches)",
        "issues": [issue.to_json() for issue in report.issues],
        "metrics": metrics.report_json(),
        "derived": dict(report.derived),
        "thresholds": report.thresholds.to_json(),
        "debt": table_debt(policy, report, history, now, weights),
        # Branches and tags other than main: age, limit, what each alone keeps (core/facts/refs.py, ref_pins.py).
        "refs": ref_report(metrics.refs, _ref_rules(policy), metrics.properties, now),
        "refs_method": PINNED_METHOD,
        "table_properties": declared_properties_view(policy, metrics),
    }


def declared_properties_view(policy: Policy | None, metrics: TableMetrics) -> dict[str, object] | None:
    """The policy's declared table properties and the table's drift from them (None: none declared)."""
    config = policy.config(Operation.APPLY_TABLE_PROPERTIES) if policy is not None else None
    declared = getattr(config, "properties", None)
    if not declared:
        return None
    return {"declared": dict(declared),
            "drift": [d.to_json() for d in property_drift(declared, metrics.properties)]}
