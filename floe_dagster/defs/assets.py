"""Table assets: one ``AssetSpec`` per Iceberg table in one multi-asset, partitioned by operation (one
partition per kind of the operation registry, core/operation_kinds/).

Materializing partition ``OP`` of a table runs that operation on it under the table lock, as named steps
(defs/table_run.py), and records the procedure's numbers, the table's before/after counts and Dagster's
standard table metadata (row count, columns, table name, location: defs/table_metadata.py) as
materialization metadata. Each asset's definition names its owners, its ``floe/policy`` tag and a
description of when its policy's operations run (defs/asset_policy.py).
"""

from __future__ import annotations

import functools
import getpass
import logging
from datetime import datetime, timezone
from typing import Iterator, Mapping, Sequence

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    Nothing,
    Out,
    StaticPartitionsDefinition,
    op,
)

from floe_dagster.coordination.database import Coordination, learned_writers
from floe_dagster.coordination.runs import run_lock_name
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.runs.run_tags import Origin, decision_from_tags, tables_run_tags, with_upstream_from_tags
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import writers_by_table
from floe_dagster.defs.asset_policy import AssetPolicyFacts, asset_policy_facts
from floe_dagster.defs.names import (
    COORDINATION_RESOURCE,
    ENGINE_RESOURCE,
    asset_key_for,
    group_names_for,
    output_name_for,
    schedule_names_for,
    table_for_asset_key,
    unmappable_reason,
)
from floe_dagster.defs.table_metadata import definition_metadata
from floe_dagster.defs.table_outcomes import BatchOutcomes
from floe_dagster.defs.table_run import maintain_table
from floe_dagster.errors import OUTAGE, failure_kind
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.known_locations import known_locations
from floe_dagster.policies import ResolvedOperation, load_policy_set, resolve_operation
from floe_dagster.redaction import masked_failures
from floe_dagster.settings import Settings
from floe_dagster.spark.engine import IcebergSparkEngine

log = logging.getLogger(__name__)

OPERATIONS_PARTITIONS = StaticPartitionsDefinition([op.value for op in ALL_OPERATIONS])
TABLES_ASSET_NAME = "iceberg_tables"
_KINDS = {"iceberg", "spark"}


def mappable_tables(tables: Sequence[TableName]) -> tuple[list[TableName], list[str]]:
    """The tables that can be assets, and a message for each one left out."""
    kept, left_out = [], []
    for table in tables:
        reason = unmappable_reason(table)
        if reason:
            left_out.append(f"{reason}; it is left out of the code location")
        else:
            kept.append(table)
    return kept, left_out


def build_table_assets(tables: Sequence[TableName], settings: Settings) -> AssetsDefinition:
    """The multi-asset over every table (``can_subset`` so a run materializes only its tables).

    Output names are set explicitly with a reversible escape: Dagster would otherwise derive them
    from the asset key, which fails for names with spaces or non-ASCII letters.
    Owners, tags and the description's summary are made once per effective policy.

    Built as ``@multi_asset(outs=...)`` builds it (the same op, outputs and specs), but from one
    ``AssetSpec`` per table: ``AssetOut`` makes each table's spec three times over (its own, then with
    its key, then with the partitions), 20,000 specs more at 10,000 tables on every code location load
    (benchmarks/README.md, 6)."""
    facts_of = _policy_facts_by_table(settings)
    groups = group_names_for(table.namespace for table in tables)  # unique over all the namespaces
    specs, outs, keys = [], {}, {}
    for table in tables:
        facts = facts_of(table)
        key, description = asset_key_for(table), facts.description(table.qualified)
        metadata = definition_metadata(table.qualified)
        specs.append(AssetSpec(key, group_name=groups[table.namespace], kinds=_KINDS, description=description,
                               metadata=metadata, owners=facts.owners, tags=facts.tags,
                               partitions_def=OPERATIONS_PARTITIONS))
        name = output_name_for(table)
        outs[name] = Out(Nothing, description=description, metadata=metadata, is_required=False)
        keys[name] = key

    # config_schema: @multi_asset's default, an empty config (Dagit's launchpad shows it).
    @op(name=TABLES_ASSET_NAME, out=outs, required_resource_keys={ENGINE_RESOURCE, COORDINATION_RESOURCE},
        config_schema={}, pool=settings.maintenance.pool)  # the pool: shared with the user's own Spark assets
    def iceberg_tables(context):  # no annotation: Dagster reads it before `annotations` resolve
        coordination: Coordination = getattr(context.resources, COORDINATION_RESOURCE).coordination
        # Held for the whole run, so a tick can tell a dead run (lock free) from a live one. An error that
        # leaves the step reaches Dagit masked, a library's too (redaction.masked_failures).
        with masked_failures(), coordination.locks.hold(run_lock_name(context.run.run_id)):
            yield from _maintain_selected(context, settings, coordination)

    assets_def = AssetsDefinition(keys_by_output_name=keys, node_def=iceberg_tables, can_subset=True, specs=specs)
    return with_writer_deps(assets_def, tables, settings)


def with_writer_deps(assets_def, tables: Sequence[TableName], settings: Settings):
    """Each table asset with a known writer depends on it (Dagit's lineage, across code locations): one
    ``AssetDep`` with ``AllPartitionMapping`` (the table depends on whatever the writer wrote), added with
    ``map_asset_specs`` (the multi-asset keeps its reversible output names; ``internal_asset_deps`` is
    quadratic). Only tables with a writer: each writer key is a node and an input more in the snapshot."""
    writers = writers_at_load(settings, tables)
    own = {asset_key_for(table) for table in tables}
    upstream: dict[AssetKey, list[AssetKey]] = {}
    for table in tables:
        keys = [AssetKey(list(w.asset_key)) for w in writers.get(table.qualified, ())]
        for key in [k for k in keys if k in own]:
            log.warning("writer %s of table %s is one of floe's own table assets: no lineage edge is declared "
                        "(check floe.yaml's writers rules)", key.to_user_string(), table.qualified)
        if keys := [k for k in keys if k not in own]:
            upstream[asset_key_for(table)] = keys
    if not upstream:
        return assets_def
    return assets_def.map_asset_specs(lambda spec: spec.replace_attributes(deps=[
        *spec.deps, *(AssetDep(key, partition_mapping=AllPartitionMapping()) for key in upstream[spec.key])])
        if spec.key in upstream else spec)


def writers_at_load(settings: Settings, tables: Sequence[TableName]) -> dict[str, tuple]:
    """The tables' writers known when the code location loads: floe.yaml's rules and the learned ones the
    coordination database holds (a writer learned later shows after the next reload), read without creating
    anything and with a short connect timeout (coordination/database.py ``learned_writers``)."""
    try:
        learned = learned_writers(settings.coordination_url)
    except Exception:  # the coordination database cannot be reached: the rules alone, the runs will say more
        log.warning("the learned writers could not be read; lineage shows floe.yaml's writers rules only",
                    exc_info=True)
        learned = {}
    return writers_by_table(tables, settings.writers, learned)


def _policy_facts_by_table(settings: Settings):
    """A function of a table: its effective policy's :class:`AssetPolicyFacts`, made once per policy."""
    policies = load_policy_set(settings)
    schedule_names = schedule_names_for((policy, op) for policy, op, _, _ in policies.cron_rules())
    made: dict[str | None, AssetPolicyFacts] = {}

    def facts_of(table: TableName) -> AssetPolicyFacts:
        policy = policies.effective_policy(table)
        name = policy.name if policy is not None else None
        if name not in made:
            made[name] = asset_policy_facts(policy, settings.scheduler, schedule_names)
        return made[name]

    return facts_of


def _maintain_selected(context: AssetExecutionContext, settings: Settings,
                       coordination: Coordination) -> Iterator[MaterializeResult | AssetObservation]:
    """Maintain each selected table in turn, each under its own lock, with its own outcome and
    materialization: any error inside a table's step (before or after its commit) is that table's
    outcome (defs/table_outcomes.py), and the run goes on with the next table, unless it is an outage."""
    engine: IcebergSparkEngine = getattr(context.resources, ENGINE_RESOURCE)
    op = Operation(context.partition_key)
    tables = sorted(table_for_asset_key(key) for key in context.selected_asset_keys)
    policies = load_policy_set(settings)  # once per run
    # Each table's operation, resolved once: its config, and its policy for the tags and the metadata.
    resolved = {table: resolve_operation(settings, table, op, policies) for table in tables}
    run_tags = _add_missing_run_tags(context, tables, op, resolved)
    catalog = open_catalog(settings.catalog)
    # The lake around the tables (warehouse, namespaces, known tables' folders), read once per run when a
    # table's own location is checked (a kind that lists, deletes or moves files: core/storage/table_location.py).
    known = functools.cache(lambda: known_locations(catalog, settings))
    outcomes = BatchOutcomes(context, coordination, op)
    decisions = _run_decisions(coordination, tables, op, run_tags)
    for decision in decisions:
        started = datetime.now(timezone.utc)
        try:
            result = maintain_table(context, engine, decision, resolved[decision.table], coordination.locks, catalog,
                                    coordination, known)
        except Exception as exc:  # whatever it is, it is this table's outcome; the batch goes on
            yield from outcomes.failed(decision, started, exc)
            if failure_kind(exc) == OUTAGE:
                break  # Spark, the catalog or the storage cannot be reached: the others would fail the same way
            continue
        outcomes.succeeded(decision, started, result)
        yield result
    outcomes.finish(len(decisions))


def _run_decisions(coordination: Coordination, tables: list[TableName], op: Operation,
                   run_tags: dict[str, str]) -> list[RunDecision]:
    """Why the run maintains each table: its ledger row when a launcher admitted it (each table of a
    batch has its own), else what the run's tags say (a manual trigger, a backfill, Dagit). In the
    planner's rank order when the tables were admitted together (the ledger's order), else by name."""
    batch_key = T.tag_value(run_tags, T.BATCH_KEY)
    admitted = coordination.batch_rows(batch_key) if batch_key else {}
    decisions = [with_upstream_from_tags(RunDecision.from_ledger(table, admitted[table.qualified]), run_tags)
                 if table.qualified in admitted else decision_from_tags(table, op, run_tags) for table in tables]
    return sorted(decisions, key=lambda d: (d.ledger_row or 0, d.table))


def _add_missing_run_tags(context: AssetExecutionContext, tables: list[TableName], op: Operation,
                          resolved: Mapping[TableName, ResolvedOperation]) -> dict[str, str]:
    """Runs launched from Dagit or ``dagster job backfill`` get the audit tags at start, from the same
    builder as every other launcher; returns the run's tags with them."""
    existing = context.run.tags
    backfill = existing.get("dagster/backfill")
    origin = Origin(
        trigger="backfill" if backfill else "manual",
        reason=f"backfill {backfill}" if backfill else "materialized from Dagit or the dagster CLI",
        actor=existing.get("dagster/user") or getpass.getuser(),
    )
    wanted = tables_run_tags(tables, op, origin, lambda table: resolved[table].policy)
    missing = {k: v for k, v in wanted.items() if k not in existing}
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)
    return {**existing, **missing}
