"""The ``where`` of a partition-scoped ``rewrite_data_files`` as Spark SQL: the structure
core/rewrites/scope_predicates.py builds from the chosen units (which also says when a where selects exactly
those files on every spec), written with literals of each source column's type. Iceberg 1.11's
``where`` accepts plain comparisons, ranges, ``IN``, ``LIKE 'prefix%'`` and ``IS NULL``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from floe_dagster.core.rewrites.partition_scope import PartitionField
from floe_dagster.core.rewrites.scope_predicates import (
    Inexpressible, Predicate, Term, older_spec_predicate, scope_predicate,
)
from floe_dagster.spark.sql_literals import quote_identifier, quote_literal, timestamp_literal

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def column_reference(source: str) -> str:
    """A (possibly nested, dotted) source column as back-quoted parts."""
    return ".".join(quote_identifier(part) for part in source.split("."))


def partition_predicate(fields: Sequence[PartitionField], keys: Sequence[str], older_specs: bool = False) -> str | None:
    """The Spark SQL predicate selecting exactly the rows whose values of ``fields`` are one of the
    ``keys`` (JSON lists of those values), or with ``older_specs`` the files of the older specs, whose
    one field's values are none of the ``keys`` (core/rewrites/scope_predicates.py, older_spec_predicate); None
    when a field or value cannot be written exactly."""
    try:
        if older_specs:
            return predicate_sql(older_spec_predicate(fields[0], keys)) if len(fields) == 1 else None
        return predicate_sql(scope_predicate(fields, keys))
    except (Inexpressible, ValueError, TypeError, OverflowError):
        return None


def predicate_sql(predicate: Predicate) -> str:
    disjuncts = [" AND ".join(_term_sql(t) for t in conjunct) for conjunct in predicate]
    if len(disjuncts) == 1:
        return disjuncts[0]
    return " OR ".join(f"({d})" for d in disjuncts)


def _term_sql(term: Term) -> str:
    column = column_reference(term.column)
    if term.op == "null":
        return f"{column} IS NULL"
    if term.op == "prefix":
        return f"{column} LIKE {quote_literal(term.values[0] + '%')}"
    if term.op == "range":
        low, high = (_literal(term.source_type, v) for v in term.values)
        return f"{column} >= {low} AND {column} < {high}"
    literals = [_literal(term.source_type, v) for v in term.values]
    if term.op == "not_in":
        return f"{column} NOT IN ({', '.join(literals)})"
    return f"{column} = {literals[0]}" if len(literals) == 1 else f"{column} IN ({', '.join(literals)})"


def _literal(source_type: str, value: Any) -> str:
    """A value in Iceberg's internal form as a Spark SQL literal of its source column's type."""
    if source_type == "string":
        return quote_literal(str(value))
    if source_type in ("int", "long"):
        return str(int(value))
    if source_type == "boolean":
        return "true" if value else "false"
    if source_type in ("float", "double"):
        return f"CAST({quote_literal(repr(float(value)))} AS {source_type.upper()})"
    if source_type == "date":
        return "DATE " + quote_literal((_EPOCH + timedelta(days=int(value))).date().isoformat())
    if source_type in ("timestamp", "timestamptz"):
        moment = _EPOCH + timedelta(microseconds=int(value))
        if source_type == "timestamptz":
            return timestamp_literal(moment)
        return "TIMESTAMP_NTZ " + quote_literal(moment.strftime("%Y-%m-%d %H:%M:%S.%f"))
    decimal = _DECIMAL.match(source_type)
    if decimal:
        return f"CAST({quote_literal(str(value))} AS DECIMAL({decimal.group(1)}, {decimal.group(2)}))"
    raise Inexpressible(source_type)
