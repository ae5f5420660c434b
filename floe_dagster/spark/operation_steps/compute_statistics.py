"""COMPUTE_STATISTICS in a run: the policy's columns checked against the table before anything runs;
``compute_table_stats``, then ``compute_partition_stats`` on a partitioned table, each only where the
current snapshot lacks its file (core/facts/statistics.statistics_work: neither is the no-change run); after
it, what the current snapshot's statistics files hold. Neither call commits a snapshot: Iceberg
registers the files in the table metadata, so no rows change and the row check does not apply."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Mapping, Sequence

from floe_dagster.core.operation_kinds.compute_statistics import ComputeStatisticsConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.facts.statistics import StatisticsState, statistics_work
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import MaintenanceFailed
from floe_dagster.iceberg.table_statistics import statistics_facts, statistics_state, unknown_columns
from floe_dagster.spark.operation_steps.step import (
    Committed,
    EngineJob,
    OperationStep,
    Prepared,
    Ran,
    TableWork,
    as_json,
    as_path,
    as_text,
)
from floe_dagster.spark.procedures import (
    CallArguments,
    ProcedureCall,
    ProcedureResult,
    call_sql,
    spark_table_reference,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


KIND = "COMPUTE_STATISTICS"


class ComputeStatisticsStep(OperationStep):
    kind = KIND

    def check(self, work: TableWork) -> None:
        """Before any Spark work: Iceberg's own message about an unknown column would print the whole schema."""
        table, config = work.before, work.config
        missing = unknown_columns(table.metadata, config.columns)
        if missing:
            raise MaintenanceFailed(
                f"policy '{work.resolved.policy_name}': computeStatistics.columns names "
                f"{', '.join(map(repr, missing))}, which table '{work.table.qualified}' does not have (its columns: "
                f"{', '.join(table.schema().column_names)})")

    def prepare(self, work: TableWork) -> Prepared:
        """The table's statistics files as its metadata registers them (PyIceberg): what is left to compute."""
        return Prepared(engine_inputs={"statistics": statistics_state(work.before.metadata)})

    def arguments(self, call: CallArguments, config: ComputeStatisticsConfig, now: datetime,
                  table_properties: Mapping[str, str]) -> None:
        call.add("snapshot_id", call.snapshot_id)
        call.add("columns", list(config.columns) if config.columns else None)

    def render(self, job: EngineJob) -> ProcedureCall:
        statistics = job.inputs.get("statistics")
        return self.render_call(job.op, job.table, job.config, job.now,
                                snapshot_id=statistics.current_snapshot_id if statistics else None)

    def run(self, spark: SparkSession, job: EngineJob, call: ProcedureCall) -> Ran:
        """Without the table's statistics state from its metadata, Spark reads the current snapshot and the
        partitioning, and the statistics are computed whatever exists."""
        state = job.inputs.get("statistics") or _statistics_state(spark, job.table)
        config = job.config
        work = statistics_work(state, config.columns, config.wants_partition_stats)
        call = self.render_call(job.op, job.table, config, job.now, snapshot_id=state.current_snapshot_id)
        statements: list[str] = []
        table_rows: list[dict[str, object]] = []
        partition_rows: list[dict[str, object]] = []
        if work.table_stats:
            table_rows = [row.asDict() for row in spark.sql(call.sql).collect()]
            statements.append(call.sql)
        if work.partition_stats:
            partitions = partition_statistics_call(job.table, state.current_snapshot_id)
            partition_rows = [row.asDict() for row in spark.sql(partitions.sql).collect()]
            statements.append(partitions.sql)
        sql = ";\n".join(statements) if statements else "-- nothing to compute: " + "; ".join(work.reasons)
        arguments = {**call.arguments, "partition_stats": work.partition_stats}
        return Ran(result=summarize_statistics(table_rows, partition_rows),
                   call=replace(call, sql=sql, arguments=arguments), extra={"statistics_reasons": list(work.reasons)})

    def summarise(self, op: Operation, rows: Sequence[Mapping[str, object]]) -> ProcedureResult:
        return summarize_statistics(rows, [])

    def after_commit(self, done: Committed) -> dict[str, object]:
        """What the current snapshot's statistics files hold after the run (written now or before): the
        Puffin file, its columns and their NDVs, the partition statistics file; and why the run did what it did."""
        current = done.after.current_snapshot()
        facts = statistics_facts(done.after.metadata, current.snapshot_id if current else None)
        metadata: dict[str, object] = {"statistics_reasons": as_json(done.outcome.extra.get("statistics_reasons", []))}
        for key in ("statistics_file", "partition_statistics_file"):
            if key in facts:
                metadata[key] = as_path(facts[key])
        if "statistics_snapshot_id" in facts:
            metadata["statistics_snapshot_id"] = as_text(str(facts["statistics_snapshot_id"]))
            metadata["statistics_columns"] = as_json(facts["statistics_columns"])
            metadata["ndv"] = as_json(facts["ndv"])
        return metadata


def partition_statistics_call(table: TableName, snapshot_id: int | None) -> ProcedureCall:
    """``compute_partition_stats`` (Iceberg 1.10 and later) for ``snapshot_id`` (None: the current
    snapshot). Iceberg refuses it on an unpartitioned table ("Table must be partitioned"), so the engine
    makes this call only on partitioned ones; for a snapshot that already has its file, Iceberg returns
    that file and writes nothing."""
    call = CallArguments(table, None, snapshot_id=snapshot_id)
    call.add("snapshot_id", snapshot_id)
    return ProcedureCall(Operation(KIND), table, call_sql(table, "compute_partition_stats", call), call.decided)


def summarize_statistics(table_rows: Sequence[Mapping[str, object]],
                         partition_rows: Sequence[Mapping[str, object]]) -> ProcedureResult:
    """compute_table_stats' rows (``statistics_file``) and compute_partition_stats'
    (``partition_statistics_file``), each empty when it was not called: a file written is a change."""
    written = sum(1 for row in table_rows if row.get("statistics_file"))
    partition_written = sum(1 for row in partition_rows if row.get("partition_statistics_file"))
    numbers = {"statistics_files_written": written, "partition_statistics_files_written": partition_written}
    op = Operation(KIND)
    return ProcedureResult(op, numbers, op.spec.changed(numbers), 0)


def _statistics_state(spark: SparkSession, table: TableName) -> StatisticsState:
    """Without the table's metadata from PyIceberg: the current snapshot (``history``) and whether the
    table is partitioned (its ``partitions`` table has a ``partition`` column only then)."""
    reference = spark_table_reference(table)
    current = spark.sql(f"SELECT snapshot_id FROM {reference}.history WHERE is_current_ancestor "
                        "ORDER BY made_current_at DESC LIMIT 1").collect()
    partitioned = "partition" in spark.table(f"{reference}.partitions").columns
    return StatisticsState(current[0]["snapshot_id"] if current else None, partitioned, None, None, None)


STEP = ComputeStatisticsStep()
