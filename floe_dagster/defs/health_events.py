"""A table's health as Dagit shows it: the events recorded for one table, built from its health record.

* an ``AssetObservation`` whose metadata are the health numbers as numbers (data files, small-file
  percent, delete-file ratio, snapshots, manifests, bytes, partition skew, debt score...), so the
  asset's plots show them over time, plus the status, tier and policy as text, and Dagster's
  standard table metadata (row count, columns, table name, location: defs/table_metadata.py);
* an ``AssetCheckEvaluation`` of the table's ``health`` check: passed when healthy, severity WARN
  for warnings, ERROR for critical issues, the issues listed in its metadata. It names the asset's
  latest materialization (``target_materialization_data``): Dagit shows a check result only when it
  belongs to the latest materialization.

Their :func:`fingerprint` changes exactly when what Dagit shows would (defs/health_reporting.py
reports a table again only then).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from dagster import AssetCheckEvaluation, AssetCheckSeverity, AssetObservation, MetadataValue
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # the record's type; not exported
    AssetCheckEvaluationTargetMaterializationData,
)

from floe_dagster.core.facts.debt import DebtWeights
from floe_dagster.core.facts.fact_catalogue import views
from floe_dagster.core.facts.health_assessment import CRITICAL, HEALTHY, HealthAssessment
from floe_dagster.core.policies.health_record import assess_table, health_record, thresholds_for
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.policies.policy import PolicySet
from floe_dagster.core.facts.table_facts import Fact, stable_version
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.table_metadata import (
    COLUMN_SCHEMA_KEY,
    ROW_COUNT_KEY,
    TABLE_NAME_KEY,
    URI_KEY,
    table_metadata,
)

HEALTH_CHECK_NAME = "health"

# The keys an observation holds besides the facts' (core/facts/fact_catalogue.py: those Dagit plots come first,
# those only Floe's health history reads come after the first group), each written by observation_metadata.
SUMMARY_KEYS = ("debt_score", "critical_issues", "warning_issues", "status", "tier", "policy", "snapshot_id",
                "metadata_location")
DETAIL_KEYS = ("assessed_at", "issues", "thresholds", "stale_refs", "ref_pinned_snapshots", "ref_pinned_bytes", "refs",
               "property_drift", "table_properties")
TABLE_METADATA_KEYS = (COLUMN_SCHEMA_KEY, ROW_COUNT_KEY, TABLE_NAME_KEY, URI_KEY)  # defs/table_metadata.py


def observation_keys() -> tuple[str, ...]:
    """Every key a health observation may hold, in its order (some only when the table has refs or its
    policy declares properties)."""
    facts = views()
    return (*(f.name for f in facts.dagit), *SUMMARY_KEYS, *(f.name for f in facts.history_only), *DETAIL_KEYS,
            *TABLE_METADATA_KEYS)


def observation_format() -> int:
    """Part of every fingerprint: derived from what an observation holds (:func:`observation_keys`), so a
    fact that Dagit gains (or loses) reports each table once more, with it."""
    memo = views().memo
    if "observation format" not in memo:
        memo["observation format"] = stable_version("health observation", observation_keys())
    return memo["observation format"]


@dataclass(frozen=True)
class TableHealthEvents:
    table: TableName
    status: str
    fingerprint: str
    observation: AssetObservation
    evaluation: AssetCheckEvaluation


# This process's observation format (:func:`observation_format`).
OBSERVATION_FORMAT = observation_format()


def fingerprint(report: HealthAssessment) -> str:
    """What Dagit shows for a table changes exactly when this does: the table's metadata file, the
    metrics' tier, the status, the issues (type and severity), the thresholds, or what an
    observation holds (:func:`observation_format`)."""
    text = json.dumps([
        observation_format(), report.metrics.metadata_location, report.tier, report.status,
        sorted((issue.type.value, issue.severity.value) for issue in report.issues),
        report.thresholds.to_json(),
    ], sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _fact_value(value: Any) -> MetadataValue | None:
    """A fact's value as observation metadata: a number as a number (Dagit plots it), a text as text; an
    unmeasured value (None) and a flag are left out."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return MetadataValue.int(value)
    if isinstance(value, str):
        return MetadataValue.text(value)
    return MetadataValue.float(float(value))


def _put_facts(metadata: dict[str, Any], facts: tuple[Fact, ...], record: Mapping[str, Any]) -> None:
    """Each fact's value from the health record (its derived number, else its value in the record's metrics)."""
    for fact in facts:
        value = _fact_value(record["derived" if fact.derived is not None else "metrics"].get(fact.name))
        if value is not None:
            metadata[fact.name] = value


def observation_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """The observation's metadata: every health number Dagit plots as a number, then status and context as
    text (:func:`observation_keys`)."""
    facts = views()
    metadata: dict[str, object] = {}
    _put_facts(metadata, facts.dagit, record)
    debt = record["debt"]
    metadata["debt_score"] = MetadataValue.float(float(debt["score"]))
    # Every issue, a lost-race streak's too (the debt's inputs leave that one out).
    metadata["critical_issues"] = MetadataValue.int(sum(1 for i in record["issues"] if i["severity"] == "critical"))
    metadata["warning_issues"] = MetadataValue.int(sum(1 for i in record["issues"] if i["severity"] == "warning"))
    metadata["status"] = MetadataValue.text(record["status"])
    metadata["tier"] = MetadataValue.text(record["tier"])
    metadata["policy"] = MetadataValue.text(record["policy"] or "")
    snapshot_id = record["metrics"].get("current_snapshot_id")
    metadata["snapshot_id"] = MetadataValue.text("" if snapshot_id is None else str(snapshot_id))
    metadata["metadata_location"] = MetadataValue.text(record["metrics"].get("metadata_location") or "")
    _put_facts(metadata, facts.history_only, record)  # what the API's health history serves in Floe's shape
    metadata["assessed_at"] = MetadataValue.text(record["assessed_at"])
    metadata["issues"] = MetadataValue.json(
        [{"type": i["type"], "severity": i["severity"], "message": i["message"]} for i in record["issues"]])
    metadata["thresholds"] = MetadataValue.json(record["thresholds"])
    refs = record.get("refs") or []
    if refs:  # branches and tags other than main: how many are stale, what they keep (core/facts/refs.py)
        metadata["stale_refs"] = MetadataValue.int(sum(1 for ref in refs if ref["stale"]))
        metadata["ref_pinned_snapshots"] = MetadataValue.int(sum(ref["pinned_snapshots"] for ref in refs))
        measured = [ref["pinned_bytes"] for ref in refs if ref["pinned_bytes"] is not None]
        if measured:
            metadata["ref_pinned_bytes"] = MetadataValue.int(sum(measured))
        metadata["refs"] = MetadataValue.json(refs)
    declared = record.get("table_properties")
    if declared is not None:  # the policy's tableProperties: how many keys drift, and which
        metadata["property_drift"] = MetadataValue.int(len(declared["drift"]))
        metadata["table_properties"] = MetadataValue.json(declared)
    return metadata


def _issue_line(issue: Mapping[str, object]) -> str:
    return f"{issue['severity']}: {issue['message']}"


def check_evaluation(
    table: TableName, record: Mapping[str, Any], target: AssetCheckEvaluationTargetMaterializationData | None = None
) -> AssetCheckEvaluation:
    status = record["status"]
    issues = record["issues"]
    counted = [i for i in issues if i["severity"] in ("warning", "critical")]
    metadata: dict[str, Any] = {
        "status": MetadataValue.text(status),
        "critical_issues": MetadataValue.int(sum(1 for i in issues if i["severity"] == "critical")),
        "warning_issues": MetadataValue.int(sum(1 for i in issues if i["severity"] == "warning")),
        "debt_score": MetadataValue.float(float(record["debt"]["score"])),
        "thresholds_from": MetadataValue.text(record["thresholds_from"]),
        "issues": MetadataValue.json(issues),
    }
    for issue in issues:
        metadata[f"issue {issue['type']}"] = MetadataValue.text(_issue_line(issue))
    if status == HEALTHY:
        description = "healthy" + (f" ({'; '.join(_issue_line(i) for i in issues)})" if issues else "")
    else:
        description = f"{status}: " + "; ".join(_issue_line(i) for i in counted)
    return AssetCheckEvaluation(
        asset_key=asset_key_for(table),
        check_name=HEALTH_CHECK_NAME,
        passed=status == HEALTHY,
        severity=AssetCheckSeverity.ERROR if status == CRITICAL else AssetCheckSeverity.WARN,
        metadata=metadata,
        description=description[:2000],
        target_materialization_data=target,
    )


def table_health_events(
    table: TableName,
    metrics: TableMetrics,
    policies: PolicySet,
    now: datetime,
    history: Mapping[Any, Any] | None = None,
    debt_weights: DebtWeights | None = None,
) -> TableHealthEvents:
    policy, thresholds = thresholds_for(policies, table)
    report = assess_table(metrics, thresholds, now, history, policy)
    return assessment_events(table, report, policy, now, history, debt_weights)


def assessment_events(table, report, policy, now, history, debt_weights, target=None) -> TableHealthEvents:
    """The events of a table already assessed; ``target``: the materialization the result belongs to."""
    record = health_record(report, policy, history, now, debt_weights)
    metrics = report.metrics
    observation = AssetObservation(
        asset_key=asset_key_for(table),
        description=f"health: {record['status']} ({record['tier']} tier)",
        metadata={**observation_metadata(record),
                  **table_metadata(table.qualified, metrics.location, metrics.record_count, metrics.columns)},
    )
    return TableHealthEvents(table, record["status"], fingerprint(report), observation,
                             check_evaluation(table, record, target))


__all__ = [
    "HEALTH_CHECK_NAME", "TableHealthEvents", "table_health_events", "assessment_events", "check_evaluation",
    "observation_metadata", "fingerprint", "observation_keys", "observation_format",
]
