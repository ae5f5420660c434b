"""SLA contracts in Dagit: one ``sla_<operation>`` asset check per (table, operation) whose policy declares
an ``sla`` (core/schedules/sla.py), on the table's maintenance asset, so Dagit's checks, asset health and alerts
(Dagster+ alert policies on check severity) work unchanged.

- **Unpartitioned**, one check per operation: a partitioned check would read better (one ``sla`` check,
  partitions = operations), but Dagster 1.13 stores a runless result per partition only once (the
  second report breaks ``idx_asset_check_executions_unique``: /work notes, issue 28 research §4.2).
- **Reported without a run** by the debt-score sensor (defs/sla_reporting.py), when the verdict
  changes or once an hour: ``passed``, ``severity`` (the contract's WARN or ERROR), metadata ``owner``,
  ``max_age``, ``last_success``, ``breached_since``. A shadow policy's contract is not declared (its
  decisions never run, so its real SLA would always fail); explain and the plan still show it.
- Declared in a checks definition of its own, like ``health`` (defs/health_checks.py), not on the
  maintenance multi-asset, so no maintenance run plans it. Dagit's *Execute* evaluates the selected
  contracts now with the same rule and records the result in that run.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Sequence

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    MetadataValue,
    Nothing,
    Out,
    op,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # the record's type; not exported
    AssetCheckEvaluationTargetMaterializationData,
)

from floe_dagster.core.basics.durations import format_iso_duration
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.operations import Operation
from floe_dagster.redaction import failures_masked
from floe_dagster.core.policies.policy import PolicySet
from floe_dagster.core.schedules.sla import ERROR, SlaContract, SlaVerdict, contracts, table_sla
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import COORDINATION_RESOURCE, asset_key_for, escaped_name, table_for_asset_key
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings

SLA_CHECKS_NAME = "iceberg_table_sla"
SLA_CHECK_PREFIX = "sla_"


def sla_check_name(operation: Operation) -> str:
    """``sla_expire_snapshots``: a Dagster name (letters, digits, ``_``)."""
    return SLA_CHECK_PREFIX + operation.value.lower()


def operation_of_check(name: str) -> Operation:
    return Operation.parse(name[len(SLA_CHECK_PREFIX):].upper())


def declared_contracts(tables: Iterable[TableName], policies: PolicySet
                       ) -> list[tuple[TableName, Operation, SlaContract]]:
    """Each (table, operation) whose live effective policy declares an SLA on a configured operation."""
    found = []
    for table in tables:
        policy = policies.effective_policy(table)
        if policy is not None and not policy.shadow:
            found += [(table, op, contract) for op, contract in contracts(policy).items()]
    return found


def sla_check_specs(declared: Sequence[tuple[TableName, Operation, SlaContract]]) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            sla_check_name(op), asset=asset_key_for(table), blocking=False,
            # The owner only in metadata (shown as text): a description is rendered as Markdown.
            description=(f"SLA: a successful {op.value} at most {format_iso_duration(contract.max_age)} ago "
                         f"({contract.severity} when breached; its owner in the metadata). Reported by the "
                         "debt-score sensor when the verdict changes; a breach runs the operation first."),
            metadata={"owner": MetadataValue.text(contract.owner), "max_age": format_iso_duration(contract.max_age),
                      "severity": contract.severity},
        )
        for table, op, contract in declared
    ]


def _output_name(key: AssetCheckKey) -> str:
    return f"sla__{escaped_name(key.asset_key.path)}__{key.name}"


def build_sla_checks(specs: Sequence[AssetCheckSpec], settings: Settings) -> AssetChecksDefinition:
    """Every declared contract in one subsettable checks definition (no inputs: see health_checks)."""
    by_output = {_output_name(spec.key): spec for spec in specs}
    outs = dict.fromkeys(by_output, Out(Nothing, is_required=False))  # one Out: its type resolved once

    @op(name=SLA_CHECKS_NAME, out=outs, required_resource_keys={COORDINATION_RESOURCE},
        description="Evaluates the selected SLA contracts now and records each result.")
    @failures_masked
    def iceberg_table_sla(context):  # no annotation: Dagster reads it before `annotations` resolve
        yield from _evaluate_now(context, settings)

    return AssetChecksDefinition.create(
        keys_by_input_name={}, node_def=iceberg_table_sla,
        check_specs_by_output_name=by_output, can_subset=True)


def _evaluate_now(context, settings: Settings):
    keys = sorted(context.selected_asset_check_keys, key=lambda k: (k.asset_key.to_string(), k.name))
    now = datetime.now(timezone.utc)
    policies = load_policy_set(settings)
    history = getattr(context.resources, COORDINATION_RESOURCE).coordination.all_history()
    tables = sorted({table_for_asset_key(key.asset_key) for key in keys}, key=lambda t: t.qualified)
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        metrics = collector.collect(tables, tier="summary").metrics
    for key in keys:
        table, op = table_for_asset_key(key.asset_key), operation_of_check(key.name)
        policy = policies.effective_policy(table)
        contract = contracts(policy).get(op) if policy is not None else None
        if contract is None:
            yield AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True,
                                   description="no SLA: the table's effective policy no longer declares one")
            continue
        past = history.get((table.qualified, op)) or OperationHistory()
        verdict = table_sla(contract, past.last_success_start, metrics.get(table), now)
        evaluation = sla_evaluation(table, op, verdict)
        yield AssetCheckResult(asset_key=evaluation.asset_key, check_name=evaluation.check_name,
                               passed=evaluation.passed, severity=evaluation.severity,
                               metadata=evaluation.metadata, description=evaluation.description)


def sla_metadata(verdict: SlaVerdict) -> dict[str, MetadataValue]:
    """The check result's metadata: owner, max_age, last_success, breached_since (text, empty when none)."""
    def iso(moment: datetime | None) -> str:
        return moment.isoformat() if moment is not None else ""

    contract = verdict.contract
    return {
        "owner": MetadataValue.text(contract.owner),
        "max_age": MetadataValue.text(format_iso_duration(contract.max_age)),
        "last_success": MetadataValue.text(iso(verdict.last_success) or "never"),
        "breached_since": MetadataValue.text(iso(verdict.breached_since) if verdict.breached else ""),
        "measured_from": MetadataValue.text(verdict.measured_from),
        "age_seconds": MetadataValue.float(verdict.age.total_seconds() if verdict.age is not None else 0.0),
    }


def sla_evaluation(table: TableName, op: Operation, verdict: SlaVerdict,
                   target: AssetCheckEvaluationTargetMaterializationData | None = None) -> AssetCheckEvaluation:
    severity = AssetCheckSeverity.ERROR if verdict.contract.severity == ERROR else AssetCheckSeverity.WARN
    return AssetCheckEvaluation(
        asset_key=asset_key_for(table), check_name=sla_check_name(op), passed=verdict.passed, severity=severity,
        description=f"{op.value}: {verdict.detail}", metadata=sla_metadata(verdict),
        target_materialization_data=target)


__all__ = [
    "SLA_CHECKS_NAME", "sla_check_name", "declared_contracts", "sla_check_specs", "build_sla_checks",
    "sla_evaluation", "sla_metadata",
]
