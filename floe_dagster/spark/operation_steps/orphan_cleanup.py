"""ORPHAN_CLEANUP in a run: under the lock, the run's context (the table's location and store, the
quarantine roots the coordination database remembers for it); then the plain
``remove_orphan_files`` call, or rounds under a cap or into the quarantine (spark/orphan_runs.py,
spark/orphan_calls.py); after it, a sample of the files it removed."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Mapping, Sequence

from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.operation_steps.step import (
    Committed,
    EngineJob,
    OperationStep,
    Prepared,
    Ran,
    TableWork,
    as_json,
)
from floe_dagster.spark.orphan_calls import orphan_call, summarize_orphan_cleanup
from floe_dagster.spark.orphan_runs import OrphanCleanup, orphan_context
from floe_dagster.spark.procedures import ProcedureCall, ProcedureResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from floe_dagster.core.operations import Operation


SAMPLE = 20  # the removed files the materialization names


class OrphanCleanupStep(OperationStep):
    kind = "ORPHAN_CLEANUP"
    deleted_files_columns = ("orphan_files_count",)

    def prepare(self, work: TableWork) -> Prepared:
        """Read under the lock: no other run of the table can succeed meanwhile."""
        context = orphan_context(work.catalog, work.before, work.table, work.run_id, work.quarantine_roots,
                                 excluded=work.resolved.listing_exclusions)
        return Prepared(engine_inputs={"orphans": context})

    def render_call(self, op: Operation, table: TableName, config: OrphanCleanupConfig, now: datetime,
                    table_properties: Mapping[str, str] | None = None, file_io: str | None = None, *,
                    iceberg_version: str | None = None, file_list_view: str | None = None,
                    **unused: object) -> ProcedureCall:
        return orphan_call(table, config, now, table_properties, file_io, iceberg_version, file_list_view)

    def run(self, spark: SparkSession, job: EngineJob, call: ProcedureCall) -> Ran:
        """The purge of what stayed quarantined past its grace period, then the plain call or the rounds."""
        engine = job.engine
        cleanup = OrphanCleanup(spark, job.table, job.config, job.now, job.table_properties, engine.file_io,
                                engine.iceberg_version, job.inputs.get("orphans"), engine.quarantine_location,
                                engine.orphans_listed_hook)
        result, sql, metadata = cleanup.run(call)
        return Ran(result=result, call=replace(call, sql=sql), metadata=metadata)

    def summarise(self, op: Operation, rows: Sequence[Mapping[str, object]]) -> ProcedureResult:
        """Unstreamed: every path comes back (see summarize_orphan_cleanup)."""
        return summarize_orphan_cleanup(rows, streamed=False)

    def after_commit(self, done: Committed) -> dict[str, object]:
        files = done.outcome.result.orphan_files
        return {"orphan_files_sample": as_json(list(files[:SAMPLE]))} if files else {}


STEP = OrphanCleanupStep()
