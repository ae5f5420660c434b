"""One table's health report (``floe-dagster health TABLE [--json]`` and the HTTP API's health):
collect its metrics, assess them (core/policies/health_record.py builds the record), and render it as text.
Dagit shows the same record as observations and check results (defs/health_events.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from dagster import DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.facts.fact_catalogue import views
from floe_dagster.core.policies.health_record import assess_table, health_record, thresholds_for
from floe_dagster.core.facts.table_facts import Fact
from floe_dagster.core.facts.table_facts import bytes_text as _bytes
from floe_dagster.core.facts.table_facts import number_text as _num
from floe_dagster.core.facts.refs import format_age
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.errors import UnknownTable
from floe_dagster.iceberg.catalog import existing_table, open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings


def resolve_table(settings: Settings, table: TableName | str) -> TableName:
    """``catalog.ns.table`` or ``ns.table`` (text) as a TableName in the configured catalog."""
    if isinstance(table, TableName):
        return table
    return TableName.parse(str(table), settings.catalog.name)


def health_report(settings: Settings, coordination: Coordination, table: TableName | str, now: datetime,
                  tier: str = "full") -> dict[str, object]:
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
            raise UnknownTable(f"{exc} (`floe-dagster tables --refresh` lists the catalog's tables)", name) from None
    policy, thresholds = thresholds_for(policies, name)
    history = coordination.all_history()
    assessed = assess_table(metrics, thresholds, now, history, policy)
    return health_record(assessed, policy, history, now, settings.debt)


# -- Floe's shape (the HTTP API) -------------------------------------------------------------------------


def formatted_size(size: Any) -> str | None:
    """Floe's size text: bytes below 1 KiB, then KB and MB with one decimal, GB with two."""
    if size is None:
        return None
    value = float(size)
    if value < 1024:
        return f"{int(value)} B"
    if value < 1024**2:
        return f"{value / 1024:.1f} KB"
    if value < 1024**3:
        return f"{value / 1024**2:.1f} MB"
    return f"{value / 1024**3:.2f} GB"


def _whole_days(value: Any) -> int | None:
    return None if value is None else int(value)


def _floe_report(qualified: str, assessed_at: str, status: str | None, numbers: Mapping[str, object],
                 issues: list, thresholds: Mapping[str, object]) -> dict[str, object]:
    """Floe's HealthReport keys with Floe's types, in Floe's order, from floe-dagster's numbers (the
    health record's metrics and derived values, or a health observation's metadata: the same names).
    Each fact's key is declared with the fact (core/facts/fact_catalogue.py)."""
    report: dict[str, Any] = {"qualifiedName": qualified, "assessedAt": assessed_at, "healthStatus": status}
    for fact in views().api:
        api, value = fact.api, numbers.get(fact.name)
        report[api.key] = _whole_days(value) if api.whole else value
        if api.formatted:
            report[api.formatted] = formatted_size(value)
    report["issues"] = [{"type": i["type"], "severity": i["severity"], "message": i["message"]} for i in issues]
    report["thresholds"] = dict(thresholds)
    return report


def floe_health_json(record: Mapping[str, Any]) -> dict[str, object]:
    """A health record (core/policies/health_record.health_record) in Floe's HealthReport shape; floe-dagster's
    richer fields follow under their own keys (tier, policy, derived numbers, raw metrics, debt)."""
    numbers = {**record["metrics"], **record["derived"]}
    return {
        **_floe_report(record["qualified_name"], record["assessed_at"], record["status"], numbers,
                       record["issues"], record["thresholds"]),
        # floe-dagster's own, beyond Floe's report
        "tier": record["tier"],
        "policy": record["policy"],
        "thresholdsFrom": record["thresholds_from"],
        "issueDetails": record["issues"],
        "derived": record["derived"],
        "metrics": record["metrics"],
        "debt": record["debt"],
        "refs": record["refs"],
        "refsMethod": record["refs_method"],
        "tableProperties": record.get("table_properties"),
    }


# -- history: the observations the debt-score sensor records ------------------------------------------


def health_observations(instance: DagsterInstance, table: TableName, limit: int) -> list[object]:
    """The table's newest health observations, ``limit`` at most. A table's asset also carries
    observations of an operation partition (a lost commit race, a shadow policy's decision): those are
    not health reports, so only the unpartitioned ones count, read page by page past the others."""
    found: list[object] = []
    cursor = None
    while len(found) < limit:
        page = instance.fetch_observations(asset_key_for(table), limit=max(limit, 20), cursor=cursor)
        found += [r for r in page.records if r.event_log_entry.asset_observation.partition is None]
        if not page.has_more:
            break
        cursor = page.cursor
    return found[:limit]


def health_history(settings: Settings, instance: DagsterInstance, table: TableName, limit: int) -> dict[str, object]:
    """Floe's ``/health/history``: the table's health reports, newest first, from the health
    observations the debt-score sensor records whenever the table's health changes (no new
    assessment). An unknown table with no history is UnknownTable."""
    records = health_observations(instance, table, limit)
    if not records:
        existing_table(settings.catalog, table.qualified)  # UnknownTable when it is not in the catalog
    history = [_observed_report(table, record) for record in records]
    return {"catalog": table.catalog, "namespace": table.namespace_str, "table": table.name, "history": history,
            "total": len(history)}


def latest_health(settings: Settings, instance: DagsterInstance, tables: list[TableName], limit: int
                  ) -> dict[str, object]:
    """Floe's ``/tables/health/latest``: each table's newest health report, newest first, ``limit`` at most,
    from the observations the debt-score sensor records (each table's newest: one indexed query a table,
    no assessment; the SQL event log keeps no last observation in its asset records). Tables never
    observed are left out, as Floe leaves out tables never assessed."""
    observed = []
    for table in tables:
        records = health_observations(instance, table, 1)
        if records:
            observed.append(_observed_report(table, records[0]))
    observed.sort(key=lambda report: report["assessedAt"] or "", reverse=True)
    reports = observed[:limit]
    return {"catalog": settings.catalog.name, "reports": reports, "total": len(reports)}


def _observed_report(table: TableName, record: Any) -> dict[str, object]:
    md = {key: value.value for key, value in record.event_log_entry.asset_observation.metadata.items()}
    assessed = md.get("assessed_at") or datetime.fromtimestamp(record.timestamp, timezone.utc).isoformat()
    return {
        **_floe_report(table.qualified, assessed, md.get("status"), md, md.get("issues") or [],
                       md.get("thresholds") or {}),
        # floe-dagster's own
        "tier": md.get("tier"),
        "policy": md.get("policy") or None,
        "debtScore": md.get("debt_score"),
        "snapshotId": md.get("snapshot_id") or None,
    }


# -- text ---------------------------------------------------------------------------------------------


def _fact_text(fact: Fact, metrics: Mapping[str, object], derived: Mapping[str, object]) -> str:
    """A fact's health text line after its label: its own render, else its value."""
    if fact.text.render is not None:
        return fact.text.render(metrics, derived)
    return _num(derived[fact.name] if fact.name in derived else metrics.get(fact.name))


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
    lines.append("  numbers:")
    lines += [f"    {fact.text.label:<15} {_fact_text(fact, m, d)}" for fact in views().text]
    if report["tier"] == "summary":
        lines.append("    (summary tier: no manifests read, so file sizes, manifests and partitions are unknown)")
    if report.get("refs"):
        lines.append("  branches and tags (what each alone keeps beyond main's retention):")
    for ref in report.get("refs") or []:
        limit = f"max {format_age(ref['max_age_ms'])} from {ref['max_age_from']}" if ref["max_age_ms"] is not None \
            else "no maximum age"
        age = "?" if ref["age_days"] is None else format_age(int(ref["age_days"] * 86_400_000))
        lines.append(f"    {ref['type']:<6} {ref['name']!r}: {age} old ({limit}){' STALE' if ref['stale'] else ''}; "
                     f"alone keeps {ref['pinned_snapshots']} snapshot(s), {_bytes(ref['pinned_bytes'])}")
    declared = report.get("table_properties")
    if declared is not None:
        drift = declared["drift"]
        lines.append(f"  table properties: {len(declared['declared'])} declared, "
                     + (f"{len(drift)} drifted:" if drift else "no drift"))
        lines += [f"    {item['key']}: declared {item['declared']!r}, table has "
                  f"{'unset' if item['current'] is None else repr(item['current'])}" for item in drift]
    breakdown = ", ".join(f"{k} {_num(v)}" for k, v in debt["breakdown"].items() if v)
    worst = f" (worst operation {debt['operation']})" if debt.get("operation") else ""
    lines.append(f"  debt score {_num(debt['score'])}{worst}: {breakdown or 'nothing owed'}")
    for op, item in debt.get("operations", {}).items():
        lines.append(f"    {op:<30} {_num(item['score']):>7}  failure rate {_num(item['failure_rate'])}%, "
                     f"{item['consecutive_failures']} consecutive failure(s), {item['runs']} run(s)")
    return "\n".join(lines)


__all__ = ["health_report", "health_history", "format_health_text", "floe_health_json", "resolve_table"]
