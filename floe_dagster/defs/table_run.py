"""One table's maintenance run, as named steps; the operation kind's own part of each is its step's
(``spark/operation_steps/``), so nothing here branches on the kind:

1. **pre-checks**, before any engine call: a config, the safety envelope (``within_envelope``: the
   locations checked against the table's real one), the table read (its counts and properties before),
   ``gc.enabled=false`` for a kind that deletes files, the kind's own checks (statistics columns);
2. **work under the table lock**: the kind's ``prepare`` (refRetention set before an expiry, an orphan
   cleanup's context), then the engine call, which ends with its own reads of what landed (the
   snapshots it committed, and the row check of a rewrite, with the proof from the table's metadata:
   iceberg/row_proof.py); a row-count mismatch is rolled back while the lock is held;
3. **post-commit reads**: the table as read after the call, the kind's checks of what landed (a
   partial-progress rewrite's lost races);
4. **metadata**: what every run reports (the numbers, counts before and after, the call, why it ran,
   its compute and benefit (``floe/compute/*``, ``floe/benefit/*``: core/runs/run_figures.py), Dagster's
   standard table keys), then the kind's add-ons, named per kind.

A kind that commits without the engine (APPLY_TABLE_PROPERTIES) has the same pre-checks and lock, its
own commit under it, and its own checks and metadata after it. Whatever fails, it is this table's
outcome, classified where the run records it (``defs/table_outcomes.py``, by ``errors.failure_kind``);
an error after the commit landed is FailedAfterCommit, which names the snapshots that landed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import Locks, table_lock_name
from floe_dagster.coordination.quarantine_roots import QuarantineRoots
from floe_dagster.core.rewrites.estimates import estimate_error_pct
from floe_dagster.core.operations import Operation, gc_disabled, gc_disabled_reason
from floe_dagster.core.policies.owner_overrides import owner_overrides
from floe_dagster.core.rewrites.partition_scope import RewriteScope
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.runs.run_figures import NO_SPARK, SPARK, Benefit, Compute, TableShape, with_orphans
from floe_dagster.core.storage.table_location import KnownLocations
from floe_dagster.defs.envelope_check import within_envelope
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.table_metadata import table_metadata
from floe_dagster.errors import CommitConflict, FailedAfterCommit, MaintenanceFailed, RowCountMismatch
from floe_dagster.iceberg.catalog import (
    TableReads,
    partition_fields,
    row_count,
    schema_columns,
    table_counts,
    table_shape,
)
from floe_dagster.iceberg.rollback import roll_back_run
from floe_dagster.iceberg.row_proof import MetadataRowProof
from floe_dagster.policies import ResolvedOperation
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.engine_outcome import EngineOutcome
from floe_dagster.spark.operation_steps import step_of
from floe_dagster.spark.operation_steps.step import Committed, OperationStep, Prepared, Shown, TableWork


def maintain_table(
    context: AssetExecutionContext, engine: IcebergSparkEngine, decision: RunDecision, resolved: ResolvedOperation,
    locks: Locks, catalog: Catalog, coordination: Coordination | None = None,
    known: Callable[[], KnownLocations] | None = None,
) -> MaterializeResult:
    """Run one operation on one table under its lock and describe what changed, and why it ran.
    ``coordination``: the quarantine roots orphan cleanup remembers; ``known``: the
    lake around the table, read once per run (the envelope checks the table's own location against it)."""
    table, op = decision.table, decision.operation
    if resolved.config is None:
        raise MaintenanceFailed(f"table '{table.qualified}': {resolved.why_not}")
    reads = TableReads(catalog, table)  # the one read before the lock, loaded when a step first needs it
    resolved = with_owner_overrides(reads, op, resolved)  # before the envelope, which checks the result
    resolved = within_envelope(reads, op, resolved, known)  # the safety envelope, before any engine call
    step = step_of(op)
    work = TableWork(op, table, resolved, catalog, context.run.run_id, context.log,
                     quarantine_roots=QuarantineRoots(coordination.engine) if coordination is not None else None)
    if not step.uses_engine:
        return _without_engine(step, work, decision, locks)
    before = _pre_checks(step, work, reads)
    with locks.hold(table_lock_name(table)):
        context.log.info(f"{op.value} on {table.qualified} (policy {resolved.policy_name})")
        prepared = step.prepare(work)
        outcome = _engine_call(engine, work, decision, before, prepared)
    try:  # the procedure's changes have landed: a failure from here on says so
        after = before.reads.latest  # read after the call (the row check's read)
        add_ons = step.after_commit(Committed(work, after, outcome, prepared.state))
        return _materialization(work, decision, outcome, before, after, add_ons)
    except (CommitConflict, MaintenanceFailed):
        raise  # the rewrite's progress: nothing of this run landed
    except Exception as exc:
        raise FailedAfterCommit.of(f"{op.procedure} on '{table.qualified}'", outcome.new_snapshot_ids,
                                   "reading the table after it", exc) from exc


def with_owner_overrides(reads: TableReads, op: Operation, resolved: ResolvedOperation) -> ResolvedOperation:
    """The config with the options the table's owner set in its ``floe.*`` properties, as its policy allows
    (core/policies/owner_overrides.py), read from the table now; a table its owner paused is not maintained. Read only
    when the policy allows owners anything (the planner and explain show the others' ignored properties), from the
    run's one read of the table."""
    if not resolved.owner_allow.allow:
        return resolved
    table = reads.name
    found = owner_overrides(resolved.policy_name or "", resolved.owner_allow, {op}, reads.latest.properties)
    if found is None:
        return resolved
    if found.paused:
        raise MaintenanceFailed(f"table '{table.qualified}': {found.pause_detail}; set it to true (or remove it) "
                                "to maintain the table again")
    return replace(resolved, config=found.config(op, resolved.config), owner_overrides=found)


def owner_metadata(work: TableWork) -> dict[str, object]:
    """The run's ``owner_overrides``: the options it took from the table's properties and those it ignored."""
    found = work.resolved.owner_overrides
    return {"owner_overrides": MetadataValue.json(found.to_json(work.op))} if found is not None else {}


@dataclass(frozen=True)
class _Before:
    """The table before the run: its reads (the first is this one), counts and properties, and the run's time."""

    reads: TableReads
    counts: dict[str, int]
    properties: dict[str, str]
    now: datetime
    shape: TableShape  # the benefit's "before" (core/runs/run_figures.py)


def _pre_checks(step: OperationStep, work: TableWork, reads: TableReads) -> _Before:
    """The table as read before the run (the run's one read, shared with the owner overrides and the
    envelope), the kind's own checks, and gc."""
    work.before = reads.latest
    properties = dict(work.before.properties)
    step.check(work)
    if work.op.needs_gc and gc_disabled(properties):
        raise MaintenanceFailed(f"table '{work.table.qualified}': {gc_disabled_reason(work.op)}")
    counts = table_counts(work.before)
    return _Before(reads, counts, properties, datetime.now(timezone.utc), table_shape(work.before, counts))


def _engine_call(engine: IcebergSparkEngine, work: TableWork, decision: RunDecision, before: _Before,
                 prepared: Prepared) -> EngineOutcome:
    """The engine call, under the lock; a rewrite that changed the rows is taken back while it is held."""
    table = work.table
    try:
        return engine.maintain(
            table, work.op, work.config, before.now, table_properties=before.properties,
            table_bytes=before.counts["total_bytes"], read_snapshots=before.reads.snapshots,
            scope=rewrite_scope(work.before, decision),
            row_proof=MetadataRowProof(lambda: before.reads.latest),  # the table as read after the call
            **prepared.engine_inputs)
    except RowCountMismatch as exc:  # the bad snapshot is current: take it back while the lock is held
        rollback = roll_back_run(work.catalog, table, exc.ours or [exc.snapshot_id])
        raise RowCountMismatch(f"{exc}; {rollback.detail}", exc.snapshot_id, exc.ours, rollback.rolled_back,
                               rollback.current_snapshot_id) from exc


def rewrite_scope(iceberg_table: Any, decision: RunDecision) -> RewriteScope | None:
    """A partition-scoped run as the planner chose it: its units with their fields and its file count
    (None: the whole table). A scope recorded before fields were means the current spec's."""
    scope = decision.scope
    if scope is None or not decision.operation.scopes_partitions:
        return None
    fields = scope.fields if scope.fields is not None else partition_fields(iceberg_table)
    return RewriteScope(scope.partitions, fields, scope.files, scope.max_files, scope.older_specs_excluding,
                        scope.min_file_size, scope.min_input_files)


def _materialization(work: TableWork, decision: RunDecision, outcome: EngineOutcome, read_before: _Before,
                     after_table: Table, add_ons: Mapping[str, object]) -> MaterializeResult:
    """What the run did, from the table read after the procedure, then the kind's add-ons."""
    before, after = read_before.counts, table_counts(after_table)
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
        "policy": work.resolved.policy_name or "",
        "policy_version": work.resolved.policy_version,
        **decision.metadata(),
        "procedure_call": MetadataValue.md(f"```sql\n{outcome.sql}\n```"),
        "arguments": MetadataValue.json(outcome.arguments),
        **owner_metadata(work),
    })
    if work.op.rewrites_data:  # estimate accuracy over time: estimated_bytes (the decision's) against bytes_rewritten
        metadata["estimate_error_pct"] = estimate_error_pct(decision.estimated_bytes, outcome.result.bytes_rewritten)
        if decision.scope is not None:
            scope = {"how": outcome.arguments.get("scope"), **decision.scope.to_json()}
            scope["partitions"] = scope["partitions"][:100]  # the ledger row keeps them all
            metadata["scope"] = MetadataValue.json(scope)
    if outcome.row_check.rows_after is not None:
        metadata["rows_checked"] = outcome.row_check.rows_after
    metadata.update(_figures(work, outcome, read_before.shape, table_shape(after_table, after)))
    if outcome.row_check.fallback:
        metadata["row_check_fallback"] = outcome.row_check.fallback
    # Dagster's standard keys, from the metadata read after the commit (no Spark query).
    metadata.update(table_metadata(work.table.qualified, after_table.location(), row_count(current),
                                   schema_columns(after_table.schema())))
    metadata.update(outcome.metadata)  # what the engine call reported (an orphan cleanup's quarantine)
    metadata.update(shown(add_ons))  # the kind's add-ons (a ref removed by an expiry makes it a change)
    return MaterializeResult(asset_key=asset_key_for(work.table), metadata=metadata)


def _figures(work: TableWork, outcome: EngineOutcome, before: TableShape, after: TableShape) -> dict[str, object]:
    """The run's compute (the engine's, of this table's own Spark jobs) and its benefit (the table's shape
    before and after, and the files its procedure deleted), as ``floe/compute/*`` and ``floe/benefit/*``."""
    compute = outcome.compute or Compute(SPARK, round(outcome.duration_s, 3), unavailable="not measured")
    benefit = Benefit(before, after, step_of(work.op).files_deleted(outcome.result))
    benefit = with_orphans(benefit, {**outcome.result.numbers, **outcome.metadata})  # an orphan cleanup's bytes
    return {**compute.to_metadata(), **benefit.to_metadata()}


def _without_engine(step: OperationStep, work: TableWork, decision: RunDecision, locks: Locks) -> MaterializeResult:
    """A kind that commits itself (one PyIceberg metadata commit) under the table lock, then checks it."""
    started = datetime.now(timezone.utc)
    with locks.hold(table_lock_name(work.table)):
        committed = step.commit(work)
    add_ons, after_table = step.finish(work, committed)
    current = after_table.current_snapshot()
    duration_s = round((datetime.now(timezone.utc) - started).total_seconds(), 3)
    metadata: dict[str, Any] = {
        **shown(add_ons),
        "duration_s": duration_s,
        # No Spark job: no executor work at all (one PyIceberg metadata commit).
        **Compute(NO_SPARK, duration_s, 0.0, 0.0, 0, 0, 0, 0, 0).to_metadata(),
        "snapshot_id": MetadataValue.text(str(current.snapshot_id) if current else ""),
        "policy": work.resolved.policy_name or "",
        "policy_version": work.resolved.policy_version,
        **decision.metadata(),
        **owner_metadata(work),
    }
    metadata.update(table_metadata(work.table.qualified, after_table.location(), row_count(current),
                                   schema_columns(after_table.schema())))
    return MaterializeResult(asset_key=asset_key_for(work.table), metadata=metadata)


def shown(values: Mapping[str, object]) -> dict[str, object]:
    """A step's metadata with its typed values (:class:`Shown`) as Dagster's MetadataValue of that kind."""
    return {name: getattr(MetadataValue, value.kind)(value.value) if isinstance(value, Shown) else value
            for name, value in values.items()}


__all__ = ["maintain_table", "rewrite_scope", "shown"]
