"""Definitions built from settings (``floe.yaml``), the cached table list and the policies. Building
them lists no catalog (see table_cache) and starts no Spark."""

from __future__ import annotations

import logging
from typing import Sequence

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.basics.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.assets import build_table_assets, mappable_tables
from floe_dagster.defs.health_checks import build_health_checks, health_checks_enabled
from floe_dagster.defs.names import COORDINATION_RESOURCE, ENGINE_RESOURCE, MAINTENANCE_JOB
from floe_dagster.defs.schedules import build_schedules
from floe_dagster.defs.sla_checks import build_sla_checks, declared_contracts, sla_check_specs
from floe_dagster.defs.sensors import build_sensor
from floe_dagster.iceberg.table_cache import tables_for_code_location
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings
from floe_dagster.spark.engine import IcebergSparkEngine

log = logging.getLogger(__name__)


def build_definitions(
    settings: Settings, tables: Sequence[TableName] | None = None, shard: Scope = DEFAULT_SCOPE
) -> Definitions:
    """The definitions for the cached table list within a shard, or for the given tables (the CLI's
    in-process runs)."""
    load_policy_set(settings)  # a bad policy set stops the load with every error listed
    listed = shard.select(tables_for_code_location(settings)) if tables is None else tables
    tables, left_out = mappable_tables(listed)
    for message in left_out:
        log.warning(message)
    if not tables:
        log.warning("no tables in catalog '%s' yet: the code location has no assets", settings.catalog.name)
        return Definitions(resources=resources(settings))
    assets = build_table_assets(tables, settings)
    # The health checks are reported without runs (defs/health.py); no maintenance run carries them.
    checks = [build_health_checks(tables, settings)] if health_checks_enabled(settings) else []
    # One sla_<operation> check per contract a live policy declares (defs/sla_checks.py), reported without runs.
    sla_specs = sla_check_specs(declared_contracts(tables, load_policy_set(settings)))
    checks += [build_sla_checks(sla_specs, settings)] if sla_specs else []
    # The only job: each job over the multi-asset re-resolves it on every load (at 5,000 tables, a
    # job for each of 5 namespaces took `definitions validate` from 5.6 s to 12.4 s: benchmarks/
    # README.md, 6). A namespace is backfilled with an asset selection of this job
    # (launching/backfill.py) or from its asset group in Dagit.
    maintenance_job = define_asset_job(
        MAINTENANCE_JOB,
        selection=AssetSelection.assets(assets).without_checks(),
        description="Run one maintenance operation (the partition) on the selected Iceberg tables.",
        # One step maintains every table of the run: executing it in the run's own process spares
        # the multiprocess executor's second Python process (and its imports) per run.
        executor_def=in_process_executor,
    )
    return Definitions(
        assets=[assets],
        asset_checks=checks,
        jobs=[maintenance_job],
        sensors=[build_sensor(settings, maintenance_job, tables, shard)],
        schedules=build_schedules(settings, maintenance_job, tables, shard),
        resources=resources(settings),
    )


def resources(settings: Settings) -> dict[str, object]:
    """The Spark engine and the coordination database; neither starts or opens anything until used."""
    return {ENGINE_RESOURCE: IcebergSparkEngine.from_settings(settings),
            COORDINATION_RESOURCE: CoordinationResource.from_settings(settings)}
