"""The ``health`` asset checks: one :class:`AssetCheckSpec` per table asset, declared in their own
checks definition (:func:`build_health_checks`), **not** as ``check_specs`` of the table multi-asset:
check specs there would plan the check in every maintenance run, which the maintenance op does not
evaluate, so each run would leave a "planned, never evaluated" execution as the check's latest.

The results are recorded **without a run** (``instance.report_runless_asset_event``) by the debt-score
sensor (defs/health_reporting.py decides when, defs/health_events.py builds the events). Dagster stores
a runless evaluation whether or not the check is declared, but Dagit lists only declared checks. The
checks definition can also be executed (Dagit's "Execute" on the Checks tab): it collects the selected
tables' health now and records the same observation and result. The maintenance job must not select it
(``AssetSelection.assets(...).without_checks()``), or every maintenance run would run it too.
``health.checks: false`` in floe.yaml leaves the checks out (the observations are still recorded): at
5,000 tables they add about 1.6 s to a code location load (``dagster definitions validate`` 6.0 → 7.6 s,
snapshot 9.1 → 12.9 MB; benchmarks/bench_health_checks.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    In,
    Nothing,
    Out,
    op,
)

from floe_dagster.defs.names import COORDINATION_RESOURCE
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.health_events import HEALTH_CHECK_NAME, table_health_events
from floe_dagster.defs.last_reported import remember_fingerprints
from floe_dagster.defs.names import asset_key_for, escaped_name, table_for_asset_key
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.redaction import failures_masked
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings

HEALTH_CHECKS_NAME = "iceberg_table_health"


# -- settings ------------------------------------------------------------------------------------------


def health_checks_enabled(settings: Settings) -> bool:
    """``health.checks`` in floe.yaml (default true)."""
    return settings.health.checks


# -- check specs and the checks definition ----------------------------------------------------------------


def _escaped(key: AssetKey) -> str:
    """A Dagster name (``[A-Za-z0-9_]+``) for an asset key, distinct for distinct keys."""
    return escaped_name(key.path)


def check_output_name(key: AssetKey) -> str:
    return f"health__{_escaped(key)}"


_DESCRIPTION = (
    "Health under the effective policy's healthThresholds: passes when healthy, WARN on "
    "warnings, ERROR on critical issues. Reported by the debt-score sensor whenever the "
    "table's metadata or health changes (no run needed); Execute collects it now."
)


def health_check_specs(tables: Sequence[TableName]) -> list[AssetCheckSpec]:
    """One ``health`` check per table asset (unpartitioned: health is the table's, not an operation's)."""
    return [AssetCheckSpec(HEALTH_CHECK_NAME, asset=asset_key_for(table), description=_DESCRIPTION, blocking=False)
            for table in tables]


def build_health_checks(tables: Sequence[TableName], settings: Settings, *,
                        with_deps: bool = False) -> AssetChecksDefinition:
    """The ``health`` checks of every table in one subsettable checks definition."""
    specs = {check_output_name(spec.asset_key): spec for spec in health_check_specs(tables)}
    # One Out for every check: Dagster makes each output's definition from it (its type resolved once).
    optional = Out(Nothing, is_required=False)
    outs = dict.fromkeys(specs, optional)
    # No inputs: ``@multi_asset_check`` would give the op one input per checked asset, and Dagster's
    # job building then costs O(tables²) (asset_job.build_node_deps: 4 s more at 5,000 tables).
    # Health is read from the catalog, not from an upstream output, so nothing is lost but the
    # ordering after a maintenance step in a combined run.
    keys_by_input = {f"in__{_escaped(spec.asset_key)}": spec.asset_key for spec in specs.values()} if with_deps else {}

    @op(name=HEALTH_CHECKS_NAME, ins=dict.fromkeys(keys_by_input, In(Nothing)), out=outs,
        required_resource_keys={COORDINATION_RESOURCE},
        description="Collects the selected tables' health now and records it (observation and check result).")
    @failures_masked
    def iceberg_table_health(context):  # no annotation: Dagster reads it before `annotations` resolve
        yield from _evaluate_checks(context, settings)

    return AssetChecksDefinition.create(
        keys_by_input_name=keys_by_input,
        node_def=iceberg_table_health,
        check_specs_by_output_name=specs,
        can_subset=True,
    )


def _evaluate_checks(context, settings: Settings):
    keys = sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.to_string())
    tables = [table_for_asset_key(key.asset_key) for key in keys]
    now = datetime.now(timezone.utc)
    policies = load_policy_set(settings)
    history = getattr(context.resources, COORDINATION_RESOURCE).coordination.all_history()
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        snapshot = collector.collect(tables, tier="full")
    remembered: dict[str, str] = {}
    for table in tables:
        metrics = snapshot.metrics.get(table)
        if metrics is None:
            yield AssetCheckResult(
                asset_key=asset_key_for(table), check_name=HEALTH_CHECK_NAME, passed=False,
                severity=AssetCheckSeverity.WARN,
                description=f"no health: {snapshot.errors.get(table, 'not collected')}",
            )
            continue
        events = table_health_events(table, metrics, policies, now, history, settings.debt)
        yield events.observation
        evaluation = events.evaluation
        yield AssetCheckResult(
            asset_key=evaluation.asset_key, check_name=evaluation.check_name, passed=evaluation.passed,
            severity=evaluation.severity, metadata=evaluation.metadata, description=evaluation.description,
        )
        remembered[table.qualified] = events.fingerprint
    remember_fingerprints(context.instance, remembered)


__all__ = [
    "HEALTH_CHECK_NAME", "HEALTH_CHECKS_NAME", "health_check_specs", "build_health_checks", "health_checks_enabled",
    "check_output_name",
]
