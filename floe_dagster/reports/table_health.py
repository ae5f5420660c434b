"""One table's health as a record (``floe-dagster health TABLE [--json]``) and as text.

The record holds what Dagit shows for the table (``defs/health.py`` reports the same numbers as
observations and check results): the raw metrics, the numbers derived from them under the table's
effective policy's ``healthThresholds`` (Floe's defaults when no enabled policy matches), the issues
with their severities, the overall status, and the debt score with its inputs and breakdown.

Debt score: the planner scores each (table, operation) separately; the issues and the days since the
last write are the table's, only the failure inputs (failure rate and consecutive failures) come from
that operation's history. The record's ``debt.score`` is the **worst (highest) score over the
operations the effective policy configures**, which is the score of the table's most urgent item in
the planner's ranking; each operation's score and failure inputs are listed under
``debt.operations``. A table with no policy (or a policy configuring nothing) gets the table-level
score: issues and days since write, with no failure inputs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from floe_dagster.core.debt import DebtWeights, debt_score
from floe_dagster.core.health import HealthReport, HealthThresholds, Severity, assess_health
from floe_dagster.core.history import OperationHistory
from floe_dagster.core.localtime import as_utc
from floe_dagster.core.metrics import TableMetrics
from floe_dagster.core.operations import Operation
from floe_dagster.core.policy import Policy, PolicySet
from floe_dagster.core.tables import TableName
from floe_dagster.settings import Settings


def resolve_table(settings: Settings, table: TableName | str) -> TableName:
    """``catalog.ns.table`` or ``ns.table`` (text) as a TableName in the configured catalog."""
    if isinstance(table, TableName):
        return table
    return TableName.parse(str(table), settings.catalog.name)


def thresholds_for(policies: PolicySet, table: TableName) -> tuple[Policy | None, HealthThresholds]:
    """The effective policy and its thresholds; Floe's defaults when no enabled policy matches."""
    policy = policies.effective_policy(table)
    return policy, (policy.health_thresholds if policy is not None else HealthThresholds())


def table_debt(
    policy: Policy | None,
    report: HealthReport,
    history: Mapping[tuple[str, Operation], OperationHistory] | None,
    now: datetime,
    weights: DebtWeights | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The debt score of a table: the worst over its policy's configured operations (see the module
    docstring), with every operation's score and the inputs."""
    if weights is not None and not isinstance(weights, DebtWeights):
        weights = DebtWeights.from_mapping(weights)
    metrics = report.metrics
    now_ms = int(as_utc(now).timestamp() * 1000)
    days = TableMetrics.age_days(metrics.newest_snapshot_ms, now_ms)
    inputs = {
        "critical_issues": report.count(Severity.CRITICAL),
        "warning_issues": report.count(Severity.WARNING),
        "info_issues": report.count(Severity.INFO),
        "days_since_write": None if days is None else round(days, 6),
    }
    operations: dict[str, Any] = {}
    worst: tuple[float, str | None, dict[str, float]] | None = None
    for op in (policy.configured_operations() if policy is not None else []):
        past = (history or {}).get((report.qualified_name, op))
        failure_rate = past.failure_rate if past is not None else 0.0
        consecutive = past.consecutive_failures if past is not None else 0
        score = debt_score(report.issues, days_since_write=days, failure_rate=failure_rate,
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
        score = debt_score(report.issues, days_since_write=days, weights=weights)
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
    report: HealthReport,
    policy: Policy | None,
    history: Mapping[tuple[str, Operation], OperationHistory] | None,
    now: datetime,
    weights: DebtWeights | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
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
    }


def health_report(settings: Settings, table: TableName | str, now: datetime, tier: str = "full") -> dict[str, Any]:
    """Collect (or take from the cache) one table's metrics at ``tier`` and assess them.

    Raises :class:`floe_dagster.iceberg.catalog.UnknownTable` when the table is not in the catalog,
    :class:`floe_dagster.iceberg.catalog.CatalogUnavailable` when the catalog cannot be reached, and
    :class:`floe_dagster.iceberg.health_collector.HealthError` when its metadata cannot be read.
    """
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.errors import UnknownTable
    from floe_dagster.coordination.database import Coordination
    from floe_dagster.iceberg.health_collector import HealthCollector
    from floe_dagster.policies import load_policy_set

    name = resolve_table(settings, table)
    if tier not in ("summary", "full"):
        raise ValueError(f"tier must be 'summary' or 'full', got {tier!r}")
    policies = load_policy_set(settings)
    catalog = open_catalog(settings.catalog)
    with HealthCollector(catalog, settings) as collector:
        try:
            metrics = collector.metrics_for(name, tier)  # type: ignore[arg-type]
        except UnknownTable as exc:
            raise UnknownTable(f"{exc} (`floe-dagster tables --refresh` lists the catalog's tables)") from None
    policy, thresholds = thresholds_for(policies, name)
    assessed = assess_health(metrics, thresholds, now)
    history = Coordination(settings.coordination_url).all_history()
    return health_record(assessed, policy, history, now, settings.debt)


# -- text ---------------------------------------------------------------------------------------------


def _bytes(value: Any) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") or "0"
    return str(value)


def format_health_text(report: Mapping[str, Any]) -> str:
    """The record for humans: status and issues first, then the numbers and the debt score."""
    d = report["derived"]
    m = report["metrics"]
    debt = report["debt"]
    lines = [
        f"{report['qualified_name']}: {report['status'].upper()}",
        f"  assessed {report['assessed_at']} from {report['tier']} metrics; thresholds: {report['thresholds_from']}",
    ]
    if report["issues"]:
        lines.append("  issues:")
        for issue in report["issues"]:
            lines.append(f"    {issue['severity']:<8} {issue['type']}: {issue['message']}")
    else:
        lines.append("  issues: none")
    small = "" if d.get("small_file_count") is None else (
        f" ({d['small_file_count']} small = {_num(d['small_file_percent'])}%, {d['large_file_count']} large)")
    lines += [
        "  numbers:",
        f"    data files      {d['data_file_count']}{small}, {_bytes(d['total_data_bytes'])}, "
        f"{m.get('record_count', 0)} records, avg {_bytes(d.get('avg_file_bytes'))}",
        f"    delete files    {d['delete_file_count']} (ratio {_num(d['delete_file_ratio'], 4)}; position "
        f"{_num(m.get('position_delete_file_count'))}, equality {_num(m.get('equality_delete_file_count'))})",
        f"    snapshots       {d['snapshot_count']} (oldest {_num(d['oldest_snapshot_age_days'])} d, "
        f"newest {_num(d['newest_snapshot_age_days'])} d ago)",
        f"    manifests       {_num(d['manifest_count'])} ({_bytes(d['manifest_total_bytes'])})",
        f"    partitions      {_num(d['partition_count'])} (skew {_num(d['partition_skew'])})",
    ]
    if report["tier"] == "summary":
        lines.append("    (summary tier: no manifests read, so file sizes, manifests and partitions are unknown)")
    breakdown = ", ".join(f"{k} {_num(v)}" for k, v in debt["breakdown"].items() if v)
    worst = f" (worst operation {debt['operation']})" if debt.get("operation") else ""
    lines.append(f"  debt score {_num(debt['score'])}{worst}: {breakdown or 'nothing owed'}")
    for op, item in debt.get("operations", {}).items():
        lines.append(f"    {op:<30} {_num(item['score']):>7}  failure rate {_num(item['failure_rate'])}%, "
                     f"{item['consecutive_failures']} consecutive failure(s), {item['runs']} run(s)")
    return "\n".join(lines)


__all__ = ["health_report", "format_health_text", "health_record", "table_debt", "thresholds_for", "resolve_table"]
