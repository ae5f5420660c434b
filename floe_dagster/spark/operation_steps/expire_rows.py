"""EXPIRE_ROWS in a run: the policy's column checked against the table before anything runs (it must be a
top-level date, timestamp or timestamptz column: the message names the policy, the field and the table, and
says so when the name is a nested field's); then, under the lock, one Spark SQL
``DELETE FROM <table> WHERE <column> < <cut-off>``.

Spark decides how the rows go, as for any DELETE on an Iceberg table: when every file the filter selects
lies wholly before the cut-off (by its partition, or by its column bounds), Iceberg's ``SparkTable``
answers ``canDeleteWhere`` and ``deleteWhere`` drops those files in one metadata commit, writing no data or
delete file; otherwise the delete is row-level, in the table's ``write.delete.mode`` (copy-on-write
rewrites the files holding old rows, merge-on-read writes delete files). For the metadata-only path the
filter must reach Iceberg as a plain comparison of the column, so the cut-off is written as a literal of
the column's own type (``DATE``, ``TIMESTAMP_NTZ`` or ``TIMESTAMP``): a cast of the column would not. The
column is one back-quoted identifier whatever its name holds (``a.b`` is never read as a struct's field).
A zone-less column's cut-off is the wall clock of the policy's ``timezone`` (core/operation_kinds/
expire_rows.py). What the delete did is read from the snapshot summaries it committed, after the commit.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Mapping

from floe_dagster.core.operation_kinds.expire_rows import (
    COLUMN_TYPES,
    DEFAULT_GRANULARITY,
    DEFAULT_TIMEZONE,
    ZONELESS_TYPES,
    ExpireRowsConfig,
    delete_kind,
    deleted_numbers,
)
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import MaintenanceFailed
from floe_dagster.spark.operation_steps.step import Committed, EngineJob, OperationStep, Prepared, TableWork, as_text
from floe_dagster.spark.procedures import ProcedureCall, spark_table_reference
from floe_dagster.spark.sql_literals import quote_identifier, quote_literal, timestamp_literal

if TYPE_CHECKING:
    from pyiceberg.schema import Schema

    from floe_dagster.core.operations import Operation


KIND = "EXPIRE_ROWS"


def cutoff_literal(column_type: str, cutoff: datetime) -> str:
    """The cut-off as a literal of the column's type: a ``date`` compares with the cut-off's day (a date is
    deleted only when its whole day lies before the cut-off), a ``timestamp`` without zone with the cut-off's
    wall-clock time (both from the naive wall cut-off), a ``timestamptz`` with the instant."""
    if column_type == "date":
        return "DATE " + quote_literal(cutoff.date().isoformat())
    if column_type == "timestamp":
        return "TIMESTAMP_NTZ " + quote_literal(cutoff.strftime("%Y-%m-%d %H:%M:%S.%f"))
    return timestamp_literal(cutoff)


def column_cutoff(config: ExpireRowsConfig, column_type: str, now: datetime) -> datetime:
    """The cut-off for the column's type: wall-clock (naive) for a zone-less column, the instant otherwise."""
    return config.wall_cutoff(now) if column_type in ZONELESS_TYPES else config.cutoff(now)


def delete_sql(table: TableName, column: str, column_type: str, cutoff: datetime) -> str:
    """``DELETE FROM <table> WHERE <column> < <cut-off>``: the table and the column only as back-quoted
    identifiers, the cut-off only as a typed literal (spark/sql_literals.py)."""
    return (f"DELETE FROM {spark_table_reference(table)} WHERE {quote_identifier(column)} < "
            f"{cutoff_literal(column_type, cutoff)}")


def column_type(work: TableWork) -> str:
    """The policy's column's type in the table as read, or MaintenanceFailed naming the policy, the field and
    the table: the column is missing, or not a date or timestamp."""
    config: ExpireRowsConfig = work.config
    schema = work.before.schema()
    field = next((f for f in schema.fields if f.name == config.column), None)  # top-level only, by exact name
    where = f"policy '{work.resolved.policy_name}': rowRetention.column"
    if field is None:
        nested = _nested_field(schema, config.column)
        hint = (f"; {config.column!r} is a field inside a struct, and row retention needs a top-level column"
                if nested else "")
        raise MaintenanceFailed(
            f"{where} names {config.column!r}, which table '{work.table.qualified}' does not have as a top-level "
            f"column (its columns: {', '.join(f.name for f in schema.fields)}){hint}")
    kind = str(field.field_type)
    if kind not in COLUMN_TYPES:
        raise MaintenanceFailed(
            f"{where} names {config.column!r}, a {kind} column of table '{work.table.qualified}'; row retention "
            f"needs a {', '.join(COLUMN_TYPES[:-1])} or {COLUMN_TYPES[-1]} column")
    return kind


def _nested_field(schema: Schema, name: str) -> bool:
    """Whether ``name`` is the dotted path of a field inside a struct (PyIceberg resolves full names)."""
    try:
        return schema.find_field(name) is not None
    except ValueError:
        return False


class ExpireRowsStep(OperationStep):
    kind = KIND

    def check(self, work: TableWork) -> None:
        """Before the lock and any Spark work: the column exists and holds dates or timestamps."""
        column_type(work)

    def prepare(self, work: TableWork) -> Prepared:
        return Prepared(engine_inputs={"column_type": column_type(work)})

    def render_call(self, op: Operation, table: TableName, config: ExpireRowsConfig, now: datetime,
                    table_properties: Mapping[str, str] | None = None, file_io: str | None = None, *,
                    column_type: str = "timestamptz", **unused: object) -> ProcedureCall:
        """Not a CALL: the DELETE (the column's type from the table; by default a timestamptz)."""
        assert config.column is not None, "rowRetention.column is required"
        cutoff = column_cutoff(config, column_type, now)
        arguments = {"column": config.column, "column_type": column_type, "max_age": config.max_age,
                     "granularity": config.granularity or DEFAULT_GRANULARITY, "cutoff": cutoff.isoformat(),
                     **({"timezone": config.timezone or DEFAULT_TIMEZONE} if column_type in ZONELESS_TYPES else {})}
        return ProcedureCall(op, table, delete_sql(table, config.column, column_type, cutoff), arguments)

    def render(self, job: EngineJob) -> ProcedureCall:
        return self.render_call(job.op, job.table, job.config, job.now,
                                column_type=job.inputs.get("column_type", "timestamptz"))

    def after_commit(self, done: Committed) -> dict[str, object]:
        """What the delete did, from the summaries of the snapshots it committed: the rows deleted, the files
        dropped and written, how (metadata-only, copy-on-write, merge-on-read), the cut-off."""
        summaries = [done.after.snapshot_by_id(snapshot_id).summary for snapshot_id in done.outcome.new_snapshot_ids]
        numbers = deleted_numbers([summary for summary in summaries if summary is not None])
        return {**numbers, "changed": done.work.op.spec.changed(numbers), "bytes_rewritten": numbers["bytes_written"],
                "delete_kind": delete_kind(numbers), "cutoff": as_text(done.outcome.arguments["cutoff"])}


STEP = ExpireRowsStep()
