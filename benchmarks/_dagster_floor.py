"""Benchmark 6's floor: Dagster alone, with code location definitions of floe's shape and no floe code.

``FLOE_FLOOR_TABLES`` table assets (``demo.nsNN.tNNNNN`` in ``FLOE_FLOOR_NAMESPACES`` groups) in one subsettable
op-backed assets definition partitioned by 8 static keys, each with two kinds, a policy tag, a description of
floe's length and the ``dagster/table_name`` metadata; one unpartitioned asset check per table in a checks
definition of its own; one asset job selecting the assets without their checks (in-process executor); 5
schedules and a sensor on it; two resources. ``dagster definitions validate -f`` on this file measures what
Dagster costs for that many assets of that shape; benchmark 6 subtracts it from floe's figure.

``FLOE_FLOOR_WITHOUT`` (comma-separated) leaves parts out, to tell what each costs: ``checks`` (the asset checks),
``words`` (the descriptions, metadata, tags and kinds, on the specs and the op's outputs), ``partitions``,
``job`` (the asset job, the schedules and the sensor: only Dagster's implicit asset job is left).
"""

from __future__ import annotations

import os

from dagster import (
    AssetCheckSpec,
    AssetChecksDefinition,
    AssetSelection,
    AssetsDefinition,
    AssetSpec,
    ConfigurableResource,
    Definitions,
    Nothing,
    Out,
    ScheduleDefinition,
    SkipReason,
    StaticPartitionsDefinition,
    define_asset_job,
    in_process_executor,
    op,
    sensor,
)

TABLES = int(os.environ.get("FLOE_FLOOR_TABLES", "1"))
WITHOUT = set(filter(None, os.environ.get("FLOE_FLOOR_WITHOUT", "").split(",")))
NAMESPACES = int(os.environ.get("FLOE_FLOOR_NAMESPACES", "20"))
PARTITIONS = None if "partitions" in WITHOUT else StaticPartitionsDefinition([f"OPERATION_{i}" for i in range(8)])
SUMMARY = ("Policy 'default'.\n\n" + "".join(f"- OPERATION_{i}: cron `15 * * * *` UTC (schedule floor_{i})\n"
                                             for i in range(4)))


class Engine(ConfigurableResource):
    name: str = "engine"


class Ledger(ConfigurableResource):
    url: str = ""


def table_assets() -> AssetsDefinition:
    specs, outs, keys = [], {}, {}
    for i in range(TABLES):
        namespace, table = f"ns{i % NAMESPACES:02d}", f"t{i:05d}"
        qualified = f"demo.{namespace}.{table}"
        words = "words" not in WITHOUT
        description = f"Iceberg table `{qualified}`. {SUMMARY}" if words else None
        metadata = {"dagster/table_name": qualified} if words else None
        specs.append(AssetSpec(["demo", namespace, table], group_name=namespace,
                               kinds={"iceberg", "spark"} if words else None, description=description,
                               metadata=metadata, tags={"floe/policy": "default"} if words else None,
                               partitions_def=PARTITIONS))
        outs[f"t_{namespace}_{table}"] = Out(Nothing, description=description, metadata=metadata, is_required=False)
        keys[f"t_{namespace}_{table}"] = specs[-1].key

    @op(name="tables", out=outs, required_resource_keys={"engine", "ledger"}, config_schema={})
    def tables(context):
        yield from ()

    return AssetsDefinition(keys_by_output_name=keys, node_def=tables, can_subset=True, specs=specs)


def health_checks(assets: AssetsDefinition) -> AssetChecksDefinition:
    specs = {f"health_{i}": AssetCheckSpec("health", asset=key, description="Health.", blocking=False)
             for i, key in enumerate(sorted(assets.keys))}

    @op(name="health", out=dict.fromkeys(specs, Out(Nothing, is_required=False)), required_resource_keys={"ledger"})
    def health(context):
        yield from ()

    return AssetChecksDefinition.create(keys_by_input_name={}, node_def=health, check_specs_by_output_name=specs,
                                        can_subset=True)


ASSETS = table_assets()
JOB = define_asset_job("maintenance", selection=AssetSelection.assets(ASSETS).without_checks(),
                       executor_def=in_process_executor)


@sensor(job=JOB, minimum_interval_seconds=60)
def debt_score(context):
    return SkipReason("floor")


JOBS = "job" not in WITHOUT
defs = Definitions(
    assets=[ASSETS], asset_checks=[] if "checks" in WITHOUT else [health_checks(ASSETS)], jobs=[JOB] if JOBS else [],
    sensors=[debt_score] if JOBS else [],
    schedules=[ScheduleDefinition(name=f"floor_{i}", cron_schedule="15 * * * *", job=JOB) for i in range(5)]
    if JOBS else [],
    resources={"engine": Engine(), "ledger": Ledger()},
)
