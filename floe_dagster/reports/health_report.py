"""One table's health report (``floe-dagster health TABLE [--json]`` and the HTTP API's health):
collect its metrics, assess them (core/table_health.py builds the record), and render it as text.
Dagit shows the same record as observations and check results (defs/health_checks.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.health import assess_health
from floe_dagster.core.table_health import health_record, thresholds_for
from floe_dagster.core.tables import TableName
from floe_dagster.errors import UnknownTable
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings


def resolve_table(settings: Settings, table: TableName | str) -> TableName:
    """``catalog.ns.table`` or ``ns.table`` (text) as a TableName in the configured catalog."""
    if isinstance(table, TableName):
        return table
    return TableName.parse(str(table), settings.catalog.name)


def health_report(settings: Settings, table: TableName | str, now: datetime, tier: str = "full") -> dict[str, Any]:
    """Collect (or take from the cache) one table's metrics at ``tier`` and assess them.

    Raises :class:`~floe_dagster.errors.UnknownTable` when the table is not in the catalog,
    :class:`~floe_dagster.errors.CatalogUnavailable` when the catalog cannot be reached, and
    :class:`~floe_dagster.errors.HealthError` when its metadata cannot be read.
    """
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


__all__ = ["health_report", "format_health_text", "resolve_table"]
