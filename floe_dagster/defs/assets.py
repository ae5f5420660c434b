"""Table assets: one ``AssetSpec`` per Iceberg table in one multi-asset, partitioned by operation.

Materializing partition ``OP`` of a table runs that operation on it under the table lock, and
records the procedure's numbers, the table's before/after counts and Dagster's standard table
metadata (row count, columns, table name, location: defs/table_metadata.py) as materialization
metadata. Each asset's definition names its owners, its ``floe/policy`` tag and a description of
when its policy's operations run (defs/asset_policy.py).
"""

from __future__ import annotations

import getpass
import logging
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, Sequence

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    AssetOut,
    MaterializeResult,
    MetadataValue,
    Nothing,
    StaticPartitionsDefinition,
    multi_asset,
)
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import Locks, table_lock_name
from floe_dagster.coordination.runs import run_lock_name
from floe_dagster.core import run_tags as T
from floe_dagster.core.commit_conflicts import (
    FAILED,
    PARTIAL,
    PARTIAL_PROGRESS,
    WINNER_PREFIX,
    RewriteProgress,
)
from floe_dagster.core.estimates import estimate_error_pct
from floe_dagster.core.operation_config import ComputeStatisticsConfig, RewriteDataFilesConfig
from floe_dagster.core.operations import ALL_OPERATIONS, Operation, gc_disabled, gc_disabled_reason
from floe_dagster.core.partition_scope import RewriteScope
from floe_dagster.core.run_decision import RunDecision
from floe_dagster.core.run_tags import Origin, decision_from_tags, tables_run_tags
from floe_dagster.core.tables import TableName
from floe_dagster.defs.asset_policy import AssetPolicyFacts, asset_policy_facts
from floe_dagster.defs.envelope_check import within_envelope
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
from floe_dagster.defs.table_metadata import definition_metadata, table_metadata
from floe_dagster.defs.table_outcomes import BatchOutcomes
from floe_dagster.defs.table_properties_run import apply_table_properties
from floe_dagster.errors import (
    CONFLICT,
    OUTAGE,
    CommitConflict,
    FailedAfterCommit,
    MaintenanceFailed,
    RowCountMismatch,
    failure_kind,
)
from floe_dagster.iceberg.catalog import (
    TableReads,
    open_catalog,
    partition_fields,
    row_count,
    schema_columns,
    table_counts,
)
from floe_dagster.iceberg.ref_retention import apply_ref_retention
from floe_dagster.iceberg.rollback import roll_back_run
from floe_dagster.iceberg.rewrite_progress import rewrite_progress
from floe_dagster.iceberg.row_proof import MetadataRowProof
from floe_dagster.iceberg.table_statistics import statistics_facts, statistics_state, unknown_columns
from floe_dagster.policies import ResolvedOperation, load_policy_set, resolve_operation
from floe_dagster.settings import Settings
from floe_dagster.spark.engine import EngineOutcome, IcebergSparkEngine
from floe_dagster.spark.orphan_runs import orphan_context

log = logging.getLogger(__name__)

OPERATIONS_PARTITIONS = StaticPartitionsDefinition([op.value for op in ALL_OPERATIONS])
TABLES_ASSET_NAME = "iceberg_tables"


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


def build_table_assets(tables: Sequence[TableName], settings: Settings):
    """The multi-asset over every table (``can_subset`` so a run materializes only its tables).

    Output names are set explicitly with a reversible escape: Dagster would otherwise derive them
    from the asset key, which fails for names with spaces or non-ASCII letters.
    Owners, tags and the description's summary are made once per effective policy."""
    facts_of = _policy_facts_by_table(settings)
    groups = group_names_for(table.namespace for table in tables)  # unique over all the namespaces
    outs = {}
    for table in tables:
        facts = facts_of(table)
        outs[output_name_for(table)] = AssetOut(
            key=asset_key_for(table),
            group_name=groups[table.namespace],
            kinds={"iceberg", "spark"},
            description=facts.description(table.qualified),
            metadata=definition_metadata(table.qualified),
            owners=facts.owners,
            tags=facts.tags,
            is_required=False,
            dagster_type=Nothing,
        )

    @multi_asset(
        name=TABLES_ASSET_NAME,
        outs=outs,
        partitions_def=OPERATIONS_PARTITIONS,
        can_subset=True,
        required_resource_keys={ENGINE_RESOURCE, COORDINATION_RESOURCE},
    )
    def iceberg_tables(context):  # no annotation: Dagster reads it before `annotations` resolve
        coordination: Coordination = getattr(context.resources, COORDINATION_RESOURCE).coordination
        # Held for the whole run, so a tick can tell a dead run (lock free) from a live one.
        with coordination.locks.hold(run_lock_name(context.run.run_id)):
            yield from _maintain_selected(context, settings, coordination)

    return iceberg_tables


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
    outcomes = BatchOutcomes(context, coordination, op)
    decisions = _run_decisions(coordination, tables, op, run_tags)
    for decision in decisions:
        started = datetime.now(timezone.utc)
        try:
            result = maintain_table(context, engine, decision, resolved[decision.table], coordination.locks, catalog,
                                    coordination)
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
    decisions = [RunDecision.from_ledger(table, admitted[table.qualified]) if table.qualified in admitted
                 else decision_from_tags(table, op, run_tags) for table in tables]
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


def rewrite_scope(iceberg_table: Any, decision: RunDecision) -> RewriteScope | None:
    """A partition-scoped rewrite as the planner chose it: its units with their fields and its file
    count (None: the whole table). A scope recorded before fields were means the current spec's."""
    scope = decision.scope
    if scope is None or decision.operation is not Operation.REWRITE_DATA_FILES:
        return None
    fields = scope.fields if scope.fields is not None else partition_fields(iceberg_table)
    return RewriteScope(scope.partitions, fields, scope.files, scope.max_files)


def maintain_table(
    context: AssetExecutionContext, engine: IcebergSparkEngine, decision: RunDecision, resolved: ResolvedOperation,
    locks: Locks, catalog: Catalog, coordination: Coordination | None = None,
) -> MaterializeResult:
    """Run one operation on one table under its lock and describe what changed, and why it ran.
    ``coordination``: the history an orphan cleanup reads (a table's first one quarantines)."""
    table, op = decision.table, decision.operation
    if resolved.config is None:
        raise MaintenanceFailed(f"table '{table.qualified}': {resolved.why_not}")
    resolved = within_envelope(catalog, table, op, resolved)  # the safety envelope, before any engine call
    if op is Operation.APPLY_TABLE_PROPERTIES:  # a metadata commit, not a procedure
        return apply_table_properties(context, decision, resolved, locks, catalog)
    reads = TableReads(catalog, table)
    iceberg_table = reads.latest
    properties = dict(iceberg_table.properties)
    if isinstance(resolved.config, ComputeStatisticsConfig):
        missing = unknown_columns(iceberg_table.metadata, resolved.config.columns)
        if missing:  # before any Spark work: Iceberg's own message would print the whole schema
            raise MaintenanceFailed(
                f"policy '{resolved.policy_name}': computeStatistics.columns names {', '.join(map(repr, missing))}, "
                f"which table '{table.qualified}' does not have (its columns: "
                f"{', '.join(iceberg_table.schema().column_names)})")
    if op.needs_gc and gc_disabled(properties):
        raise MaintenanceFailed(f"table '{table.qualified}': {gc_disabled_reason(op)}")
    before = table_counts(iceberg_table)
    now = datetime.now(timezone.utc)
    with locks.hold(table_lock_name(table)):
        context.log.info(f"{op.value} on {table.qualified} (policy {resolved.policy_name})")
        # Before the expiry, under the lock: the refs' max-ref-age from refRetention, so the expiry removes
        # the refs older than that (iceberg/ref_retention.py).
        refs = apply_ref_retention(iceberg_table, table, resolved.ref_retention) \
            if op is Operation.EXPIRE_SNAPSHOTS else None
        orphans = None
        if op is Operation.ORPHAN_CLEANUP:  # read under the lock: no other run of the table can succeed meanwhile
            history = coordination.history_of(table.qualified, op) if coordination is not None else None
            orphans = orphan_context(catalog, iceberg_table, table, context.run.run_id,
                                     first_cleanup=history is not None and history.last_success_start is None)
        try:
            outcome = engine.maintain(
                table, op, resolved.config, now, table_properties=properties, table_bytes=before["total_bytes"],
                read_snapshots=reads.snapshots, scope=rewrite_scope(iceberg_table, decision),
                statistics=statistics_state(iceberg_table.metadata) if op is Operation.COMPUTE_STATISTICS else None,
                orphans=orphans, row_proof=MetadataRowProof(lambda: reads.latest),  # the table read after the CALL
            )
        except RowCountMismatch as exc:  # the bad snapshot is current: take it back while the lock is held
            rollback = roll_back_run(catalog, table, exc.ours or [exc.snapshot_id])
            raise RowCountMismatch(f"{exc}; {rollback.detail}", exc.snapshot_id, exc.ours, rollback.rolled_back,
                                   rollback.current_snapshot_id) from exc
    try:  # the procedure's changes have landed: a failure from here on says so
        return _materialization(context, decision, resolved, iceberg_table, reads.latest, outcome, before, refs)
    except (CommitConflict, MaintenanceFailed):
        raise  # the rewrite's progress: nothing of this run landed
    except Exception as exc:
        raise FailedAfterCommit.of(f"{op.procedure} on '{table.qualified}'", outcome.new_snapshot_ids,
                                   "reading the table after it", exc) from exc


def _materialization(context: AssetExecutionContext, decision: RunDecision, resolved: ResolvedOperation,
                     iceberg_table: Table, after_table: Table, outcome: EngineOutcome, before: dict[str, int],
                     refs: Any) -> MaterializeResult:
    """What the run did, from the table read after the procedure (``after_table``, the row check's read)."""
    table, op = decision.table, decision.operation
    progress = _checked_progress(context, decision, resolved, iceberg_table, after_table, outcome)
    after = table_counts(after_table)
    current = after_table.current_snapshot()
    metadata: dict[str, Any] = {name: value for name, value in outcome.result.numbers.items()}
    for name in before:
        metadata[f"{name}_before"] = before[name]
        metadata[f"{name}_after"] = after[name]
    metadata.update({
        "changed": outcome.result.changed,
        "bytes_rewritten": outcome.result.bytes_rewritten,
        "duration_s": round(outcome.duration_s, 3),
        "call_s": round(outcome.call_s, 3),  # the procedure's own statements
        "overhead_s": round(outcome.overhead_s, 3),  # the engine's time around them (engine_phases)
        "engine_phases": MetadataValue.json(outcome.phases),
        "snapshot_id": MetadataValue.text(str(current.snapshot_id)) if current else MetadataValue.text(""),
        "new_snapshots": len(outcome.new_snapshot_ids),
        "row_check": outcome.row_check.method,
        "policy": resolved.policy_name or "",
        "policy_version": resolved.policy_version,
        **decision.metadata(),
        "procedure_call": MetadataValue.md(f"```sql\n{outcome.sql}\n```"),
        "arguments": MetadataValue.json(outcome.arguments),
    })
    if op.rewrites_data:  # estimate accuracy over time: estimated_bytes (the decision's) against bytes_rewritten
        metadata["estimate_error_pct"] = estimate_error_pct(decision.estimated_bytes, outcome.result.bytes_rewritten)
        if decision.scope is not None:
            scope = {"how": outcome.arguments.get("scope"), **decision.scope.to_json()}
            scope["partitions"] = scope["partitions"][:100]  # the ledger row keeps them all
            metadata["scope"] = MetadataValue.json(scope)
    if refs is not None:
        # A ref the expiry removed (older than its max-ref-age) is a change, for the zero-change throttle too.
        removed = refs.removed(after_table)
        metadata["changed"] = outcome.result.changed or bool(removed)
        metadata.update(refs_removed_count=len(removed), refs_removed=MetadataValue.json(removed),
                        ref_retention_set=MetadataValue.json(refs.changes_json()))
    if outcome.row_check.rows_after is not None:
        metadata["rows_checked"] = outcome.row_check.rows_after
    if outcome.row_check.fallback:
        metadata["row_check_fallback"] = outcome.row_check.fallback
    if progress is not None:
        metadata.update(progress.metadata())
    # Dagster's standard keys, from the metadata read after the commit (no Spark query).
    metadata.update(table_metadata(table.qualified, after_table.location(), row_count(current),
                                   schema_columns(after_table.schema())))
    if op is Operation.COMPUTE_STATISTICS:
        metadata.update(_statistics_metadata(after_table, current, outcome))
    metadata.update(outcome.metadata)  # an orphan cleanup's quarantine: files moved and purged, where, why
    if outcome.result.orphan_files:
        metadata["orphan_files_sample"] = MetadataValue.json(list(outcome.result.orphan_files[:20]))
    return MaterializeResult(asset_key=asset_key_for(table), metadata=metadata)


def _checked_progress(context: AssetExecutionContext, decision: RunDecision, resolved: ResolvedOperation,
                      before: Table, after: Table, outcome: EngineOutcome) -> RewriteProgress | None:
    """What a rewrite landed (None: nothing to check). Nothing of ours landed: a lost race is a
    conflict (as if Iceberg had thrown), groups that failed for their own reason a failure."""
    table, op = decision.table, decision.operation
    progress = _rewrite_progress(before, after, resolved, outcome, dict(before.properties))
    if progress is not None and progress.outcome == FAILED:
        raise MaintenanceFailed(f"{op.procedure} on '{table.qualified}' rewrote nothing: {progress.describe()}")
    if progress is not None and progress.outcome == CONFLICT:
        raise CommitConflict(f"{op.procedure} on '{table.qualified}' lost a commit race: {progress.describe()}; "
                             f"{WINNER_PREFIX}{_newest_other_commit(before, after)}")
    if progress is not None and progress.outcome == PARTIAL:
        context.log.warning(f"{op.value} on {table.qualified} landed partly: {progress.describe()}; "
                            "the groups left are rewritten by a later run")
    return progress


def _statistics_metadata(after: Table, current: Any, outcome: EngineOutcome) -> dict[str, Any]:
    """What the current snapshot's statistics files hold after the run (written now or before): the
    Puffin file, its columns and their NDVs, the partition statistics file; and why the run did what it did."""
    facts = statistics_facts(after.metadata, current.snapshot_id if current else None)
    metadata: dict[str, Any] = {"statistics_reasons": MetadataValue.json(outcome.extra.get("statistics_reasons", []))}
    for key in ("statistics_file", "partition_statistics_file"):
        if key in facts:
            metadata[key] = MetadataValue.path(facts[key])
    if "statistics_snapshot_id" in facts:
        metadata["statistics_snapshot_id"] = MetadataValue.text(str(facts["statistics_snapshot_id"]))
        metadata["statistics_columns"] = MetadataValue.json(facts["statistics_columns"])
        metadata["ndv"] = MetadataValue.json(facts["ndv"])
    return metadata


def _rewrite_progress(before: Table, after: Table, resolved: ResolvedOperation, outcome: EngineOutcome,
                      properties: Mapping[str, str]) -> RewriteProgress | None:
    """What a data file rewrite landed, when something may have been lost silently: with partial
    progress (the policy's or floe's default for merge-on-read tables) or failed groups; else None."""
    if not isinstance(resolved.config, RewriteDataFilesConfig):
        return None
    options = outcome.arguments.get("options") or {}
    partial = bool(options.get(PARTIAL_PROGRESS))
    failed = int(outcome.result.numbers.get("failed_data_files_count", 0))
    if not partial and not failed:
        return None  # without partial progress a lost race throws (the engine's CommitConflict)
    return rewrite_progress(before, after, resolved.config, partial, failed, properties)


def _newest_other_commit(before: Table, after: Table) -> str:
    known = {s.snapshot_id for s in before.metadata.snapshots}
    others = [s for s in after.metadata.snapshots if s.snapshot_id not in known
              and (s.summary is None or s.summary.operation.value != "replace")]
    if not others:
        return "unknown (no other commit is left in the table's history)"
    newest = others[-1]
    operation = newest.summary.operation.value if newest.summary is not None else "unknown operation"
    at = datetime.fromtimestamp(newest.timestamp_ms / 1000, timezone.utc).isoformat()
    more = f", and {len(others) - 1} more" if len(others) > 1 else ""
    return f"snapshot {newest.snapshot_id} ({operation}) at {at}{more}"
