"""Iceberg Spark procedure calls, the part every kind shares: the ``CALL`` statement with its named
arguments safely quoted, the call as built, and its result as numbers. Each kind's arguments are its
step's (``spark/operation_steps/<kind>.py``); ``operation_steps.build_procedure_call`` renders one.

No Spark import here: building and parsing are pure, so they are tested without a JVM. Table names
reach SQL only as back-quoted identifiers inside an escaped string literal, and every string value
(filters, locations, timestamps, option values) only as an escaped literal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping

from floe_dagster.core.rewrites.partition_scope import RewriteScope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.sql_literals import quote_identifier, quote_literal, timestamp_literal

if TYPE_CHECKING:
    from floe_dagster.core.operations import Operation


def table_argument(table: TableName) -> str:
    """The procedures' ``table`` argument: a literal holding the quoted multi-part identifier, catalog
    included. Iceberg reads a first part that names a catalog as that catalog, so without it a namespace
    named like a catalog would be taken for one; and on Spark 4, Iceberg logs a warning with a stack
    trace for every first part that is not a catalog."""
    return quote_literal(spark_table_reference(table))


def spark_table_reference(table: TableName) -> str:
    """The table as a Spark SQL identifier, catalog included, for queries such as ``SELECT count(*)``."""
    return ".".join(quote_identifier(p) for p in (table.catalog, *table.identifier))


def _options_map(options: Mapping[str, object]) -> str:
    items = []
    for key, value in options.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        items.append(f"{quote_literal(key)}, {quote_literal(str(value))}")
    return "map(" + ", ".join(items) + ")"


@dataclass(frozen=True)
class ProcedureCall:
    operation: Operation
    table: TableName
    sql: str
    arguments: dict[str, Any] = field(default_factory=dict)  # what was decided, for the run's metadata


@dataclass(frozen=True)
class ProcedureResult:
    operation: Operation
    numbers: dict[str, int]  # the procedure's output columns, as numbers
    changed: bool  # False is a "zero-change" run (docs/automation.md, "Zero-change throttling")
    bytes_rewritten: int
    orphan_files: tuple[str, ...] = ()


def release(version: str | None) -> tuple[int, int] | None:
    """``major.minor`` of a version (None: unset or unreadable)."""
    try:
        major, minor = (int(part) for part in (version or "").split(".")[:2])
    except ValueError:
        return None
    return major, minor


class CallArguments:
    """A ``CALL``'s named arguments as SQL text, and what was decided (the call's ``arguments``), with
    the facts of the engine and the run a kind's arguments may depend on."""

    def __init__(self, table: TableName, file_io: str | None, scope: RewriteScope | None = None,
                 iceberg_version: str | None = None, spark_line: str | None = None,
                 snapshot_id: int | None = None):
        self.sql: list[tuple[str, str]] = [("table", table_argument(table))]
        self.decided: dict[str, object] = {}
        self.file_io = file_io  # the catalog's FileIO class in Spark (io-impl); None: Iceberg's default
        self.scope = scope  # a partition-scoped rewrite's partitions (None: the whole table)
        self.iceberg_version = iceberg_version  # the Iceberg Spark runtime's (None: floe-dagster's default)
        self.spark_line = spark_line  # "3.5", "4.1" (None: unknown)
        self.snapshot_id = snapshot_id  # the snapshot a call describes (None: the current one)

    def add(self, name: str, value: Any) -> None:
        """A typed value as the argument ``name``, rendered by its type (true/false, a number, a string
        literal, a ``map(...)`` for a mapping or its items, an ``array(...)`` of literals for a list);
        unset (None, or an empty mapping): none."""
        if isinstance(value, tuple):
            value = dict(value)
        if value is None or (isinstance(value, Mapping) and not value):
            return
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = str(value)
        elif isinstance(value, str):
            text = quote_literal(value)
        elif isinstance(value, list):
            text = "array(" + ", ".join(quote_literal(str(item)) for item in value) + ")"
        else:
            text = _options_map(value)
        self.sql.append((name, text))
        self.decided[name] = value

    def older_than(self, moment: datetime) -> None:
        self.sql.append(("older_than", timestamp_literal(moment)))
        self.decided["older_than"] = moment.isoformat()


def call_sql(table: TableName, procedure: str, call: CallArguments) -> str:
    """``CALL <catalog>.system.<procedure>(name => value, ...)``."""
    name = f"{quote_identifier(table.catalog)}.`system`.{procedure}"
    return f"CALL {name}(" + ", ".join(f"{arg} => {value}" for arg, value in call.sql) + ")"


__all__ = ["ProcedureCall", "ProcedureResult", "CallArguments", "call_sql", "table_argument",
           "spark_table_reference", "release"]
