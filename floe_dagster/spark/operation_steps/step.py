"""What an operation kind does in a maintenance run: its :class:`OperationStep`, one per module of
``spark/operation_steps/`` (``STEP``), the engine side of the kind's spec (``core/operation_kinds/``).

A run of one table is a sequence of named steps (``defs/table_run.py``); a kind's step takes part in
each, and every hook has a default that does nothing kind-specific:

1. ``check``: the kind's own pre-checks, from the table as read, before the lock (statistics columns);
2. ``prepare``: under the table lock, before the engine call (the refs' retention before an expiry, an
   orphan cleanup's context); what it gives the engine call, and what it keeps for after the commit;
3. ``render`` the call (``arguments``: its named arguments), ``run`` it in the engine's unit of work
   (default: the ``CALL`` and its rows) and ``summarise`` the rows into a ``ProcedureResult``;
4. ``after_commit``: the kind's checks of what landed and its metadata add-ons, named per kind (as
   ``include_metadata`` in dagster-sling's component): plain values, or :class:`Shown` for a value the
   defs layer shows typed (JSON, Markdown, a path, text).

A kind that commits without the engine (``uses_engine`` false: APPLY_TABLE_PROPERTIES, one PyIceberg
metadata commit) implements ``commit`` (under the lock) and ``finish`` (its checks and metadata) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
import logging
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol, Sequence

from floe_dagster.core.rewrites.partition_scope import RewriteScope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.procedures import CallArguments, ProcedureCall, ProcedureResult, call_sql

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from floe_dagster.coordination.quarantine_roots import QuarantineRoots
    from floe_dagster.core.operations import Operation
    from floe_dagster.policies import ResolvedOperation
    from floe_dagster.spark.engine_outcome import EngineOutcome
    from floe_dagster.spark.orphan_runs import ListedHook


@dataclass(frozen=True)
class Shown:
    """A metadata value shown typed: ``kind`` is ``json``, ``md``, ``path`` or ``text`` (Dagster's
    MetadataValue of that name, made in the defs layer)."""

    kind: str
    value: object


def as_json(value: object) -> Shown:
    return Shown("json", value)


def as_text(value: object) -> Shown:
    return Shown("text", value)


def as_path(value: object) -> Shown:
    return Shown("path", value)


def as_markdown(value: str) -> Shown:
    return Shown("md", value)


@dataclass
class TableWork:
    """One table's maintenance run as the steps see it (built by defs/table_run.py)."""

    op: Operation
    table: TableName
    resolved: ResolvedOperation  # the config, the policy's name, refRetention, allowed properties
    catalog: Catalog
    run_id: str
    log: logging.Logger  # the run's logger (Dagster's DagsterLogManager is one)
    before: Table | None = None  # the PyIceberg table as read before the lock (engine kinds)
    quarantine_roots: QuarantineRoots | None = None  # orphan cleanup's remembered roots (None: none)

    @property
    def config(self) -> Any:
        return self.resolved.config


@dataclass(frozen=True)
class Prepared:
    """What a step's ``prepare`` gives: keyword arguments of the engine call, and its own state for after."""

    engine_inputs: Mapping[str, object] = field(default_factory=dict)
    state: object = None


class StepEngine(Protocol):
    """What a step reads of the engine (spark/engine.py's IcebergSparkEngine): the facts its call is rendered
    with. Named here so that the steps never import the engine, which imports them."""

    file_io: str | None  # the catalog's FileIO class in Spark: how orphan cleanup lists
    iceberg_version: str | None
    spark_line: str | None
    quarantine_location: str | None

    @property
    def orphans_listed_hook(self) -> ListedHook | None: ...


@dataclass(frozen=True)
class EngineJob:
    """One operation on one table inside the engine: what a step renders and runs."""

    op: Operation
    table: TableName
    config: Any
    now: datetime
    table_properties: Mapping[str, str]
    scope: RewriteScope | None
    inputs: Mapping[str, Any]  # the step's prepared engine inputs (statistics, orphans)
    engine: StepEngine


@dataclass(frozen=True)
class Ran:
    """What a step's ``run`` did: the CALL's rows (then ``summarise`` makes the result), or its own result;
    the call that ran when it is not the rendered one; extra facts and metadata for the run."""

    rows: list[dict[str, object]] | None = None  # Spark's rows (Row.asDict)
    result: ProcedureResult | None = None
    call: ProcedureCall | None = None
    extra: dict[str, object] = field(default_factory=dict)
    metadata: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Committed:
    """What the run knows once the engine call returned: the table read after it, the engine's outcome,
    and what the step's ``prepare`` kept."""

    work: TableWork
    after: Table  # the PyIceberg table read after the call
    outcome: EngineOutcome
    state: Any = None


class OperationStep:
    """A kind's engine side; subclasses set ``kind`` (the spec's name) and override what they need."""

    kind: ClassVar[str] = ""
    result_columns: ClassVar[tuple[str, ...]] = ()  # the procedure's output columns summed into numbers
    uses_engine: ClassVar[bool] = True
    # The result's numbers that count files the run deleted from storage (a run's benefit: ``files_deleted``).
    deleted_files_columns: ClassVar[tuple[str, ...]] = ()

    def check(self, work: TableWork) -> None:
        """The kind's pre-checks, before the lock and any engine call (MaintenanceFailed names the problem)."""

    def prepare(self, work: TableWork) -> Prepared:
        """Under the table lock, before the engine call."""
        return Prepared()

    def arguments(self, call: CallArguments, config: Any, now: datetime, table_properties: Mapping[str, str]) -> None:
        """The call's named arguments, rendered from the policy's typed config."""
        raise NotImplementedError(f"{type(self).__name__} renders no procedure call")

    def render_call(self, op: Operation, table: TableName, config: Any, now: datetime,
                    table_properties: Mapping[str, str] | None = None, file_io: str | None = None, *,
                    scope: RewriteScope | None = None, iceberg_version: str | None = None,
                    file_list_view: str | None = None, spark_line: str | None = None,
                    snapshot_id: int | None = None) -> ProcedureCall:
        """The ``CALL`` statement (see operation_steps.build_procedure_call for the arguments)."""
        call = CallArguments(table, file_io, scope, iceberg_version, spark_line, snapshot_id)
        self.arguments(call, config, now, table_properties or {})
        if file_list_view is not None:
            call.add("file_list_view", file_list_view)
        return ProcedureCall(operation=op, table=table, sql=call_sql(table, op.procedure, call), arguments=call.decided)

    def render(self, job: EngineJob) -> ProcedureCall:
        """The call the engine makes for ``job``, with the engine's facts (before Spark starts)."""
        engine = job.engine
        return self.render_call(job.op, job.table, job.config, job.now, job.table_properties, engine.file_io,
                                scope=job.scope, iceberg_version=engine.iceberg_version, spark_line=engine.spark_line)

    def run(self, spark: SparkSession, job: EngineJob, call: ProcedureCall) -> Ran:
        """Inside the engine's unit of work: the CALL, and its rows."""
        return Ran(rows=[row.asDict() for row in spark.sql(call.sql).collect()])

    def summarise(self, op: Operation, rows: Sequence[Mapping[str, Any]]) -> ProcedureResult:
        """The procedure's output rows as numbers, and whether the run changed anything (the spec's rule)."""
        numbers = {column: 0 for column in self.result_columns}
        for row in rows:
            for column in numbers:
                value = row.get(column)
                numbers[column] += int(value) if value is not None else 0
        changed = op.spec.changed(numbers)
        return ProcedureResult(op, numbers, changed, numbers.get("rewritten_bytes_count", 0))

    def files_deleted(self, result: ProcedureResult) -> int:
        """How many files the run deleted from storage (or moved out of the table: a quarantine), by its result."""
        return sum(int(result.numbers.get(column) or 0) for column in self.deleted_files_columns)

    def after_commit(self, done: Committed) -> dict[str, object]:
        """The kind's checks of what landed, and its metadata add-ons."""
        return {}

    def commit(self, work: TableWork) -> object:
        """Under the table lock, for a kind that commits without the engine: the commit, and what it read."""
        raise NotImplementedError(f"{type(self).__name__} runs in the engine")

    def finish(self, work: TableWork, committed: Any) -> tuple[dict[str, object], Table]:
        """After ``commit``: its checks, and (its metadata, the table read after it)."""
        raise NotImplementedError(f"{type(self).__name__} runs in the engine")


__all__ = ["OperationStep", "TableWork", "Prepared", "EngineJob", "Ran", "Committed", "Shown", "as_json",
           "as_text", "as_path", "as_markdown"]
