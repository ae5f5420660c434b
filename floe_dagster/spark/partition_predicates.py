"""The ``where`` that limits a partition-scoped ``rewrite_data_files`` to the partitions the planner
chose (core/partition_scope.py), on the partition's source columns: Iceberg 1.11's ``where`` accepts
plain comparisons, ranges, ``IN``, ``LIKE 'prefix%'`` and ``IS NULL``, and refuses its own partition
functions (``system.bucket``), so a value it cannot select exactly makes the whole predicate None.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Sequence

from floe_dagster.core.partition_scope import TEMPORAL_TRANSFORMS, PartitionField, partition_values
from floe_dagster.spark.sql_literals import quote_identifier, quote_literal, timestamp_literal


_EPOCH_DAY = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_TIMESTAMPS = ("timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns")


class _Inexpressible(Exception):
    """A partition value ``where`` cannot select exactly (bucket, a float NaN, a binary column, ...)."""


def column_reference(source: str) -> str:
    """A (possibly nested, dotted) source column as back-quoted parts."""
    return ".".join(quote_identifier(part) for part in source.split("."))


def partition_predicate(fields: Sequence[PartitionField], keys: Sequence[str]) -> str | None:
    """A Spark SQL predicate that selects exactly the rows of the given partitions (collector keys: the
    current spec's values as a JSON list), on the source columns: ``col = literal`` for identity, a
    half-open range for year/month/day/hour and integer truncate, ``LIKE 'prefix%'`` for string
    truncate; None when a field cannot be expressed (bucket, decimal or binary truncate, ...)."""
    if not keys:
        return None
    try:
        active = [(i, f) for i, f in enumerate(fields) if f.kind != "void"]
        if not active:
            return None  # nothing tells the partitions apart
        rows = [partition_values(key) for key in keys]
        if len(active) == 1:
            return _one_field(active[0][1], [row[active[0][0]] for row in rows])
        terms = sorted({" AND ".join(_field_term(f, row[i]) for i, f in active) for row in rows})
        return " OR ".join(f"({term})" for term in terms)
    except (_Inexpressible, ValueError, TypeError, IndexError, OverflowError, InvalidOperation):
        return None


def _one_field(field_: PartitionField, values: list[Any]) -> str:
    """One field: identity values as one ``IN`` list, ranges merged where they touch."""
    column = column_reference(field_.source)
    has_null = any(v is None for v in values)
    present = [v for v in values if v is not None]
    terms: list[str] = []
    if field_.kind == "identity" and present:
        literals = sorted({_literal(field_.source_type, v) for v in present})
        terms.append(f"{column} = {literals[0]}" if len(literals) == 1 else f"{column} IN ({', '.join(literals)})")
    elif present and field_.kind == "truncate" and field_.source_type == "string":
        terms.extend(_field_term(field_, v) for v in sorted(set(present)))
    elif present:
        merged: list[list[Any]] = []
        for low, high in sorted({_bounds(field_, v) for v in present}):
            if merged and low <= merged[-1][1]:  # touching or overlapping: one range
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        terms.extend(_range_text(field_, column, low, high) for low, high in merged)
    if has_null:
        terms.append(f"{column} IS NULL")
    return terms[0] if len(terms) == 1 else " OR ".join(f"({t})" for t in terms)


def _field_term(field_: PartitionField, value: Any) -> str:
    column = column_reference(field_.source)
    if value is None:
        return f"{column} IS NULL"
    if field_.kind == "identity":
        return f"{column} = {_literal(field_.source_type, value)}"
    if field_.kind == "truncate" and field_.source_type == "string":
        prefix = str(value)
        if len(prefix) < (field_.width or 0):  # shorter than the width: the value itself
            return f"{column} = {quote_literal(prefix)}"
        if any(ch in prefix for ch in "%_\\"):  # Spark turns only a plain LIKE 'prefix%' into Iceberg's startsWith
            raise _Inexpressible(prefix)
        return f"{column} LIKE {quote_literal(prefix + '%')}"
    low, high = _bounds(field_, value)
    return _range_text(field_, column, low, high)


def _bounds(field_: PartitionField, value: Any) -> tuple[Any, Any]:
    """The half-open range [low, high) of source values a temporal or integer-truncate value covers."""
    kind, source_type = field_.kind, field_.source_type
    if kind == "truncate" and source_type in ("int", "long") and not isinstance(value, bool):
        return int(value), int(value) + int(field_.width or 1)
    if kind not in TEMPORAL_TRANSFORMS or (source_type != "date" and source_type not in _TIMESTAMPS):
        raise _Inexpressible(field_.transform)
    if kind == "hour":
        if source_type == "date":
            raise _Inexpressible(field_.transform)
        start = _EPOCH + timedelta(hours=int(value))
        return start, start + timedelta(hours=1)
    if kind == "day":
        day = date.fromisoformat(value) if isinstance(value, str) else _EPOCH_DAY + timedelta(days=int(value))
        low, high = day, day + timedelta(days=1)
    elif kind == "month":
        year, month = divmod(int(value), 12)
        low = date(1970 + year, month + 1, 1)
        high = date(low.year + (low.month == 12), low.month % 12 + 1, 1)
    else:  # year
        low, high = date(1970 + int(value), 1, 1), date(1971 + int(value), 1, 1)
    if source_type == "date":
        return low, high
    return (datetime(low.year, low.month, low.day, tzinfo=timezone.utc),
            datetime(high.year, high.month, high.day, tzinfo=timezone.utc))


def _range_text(field_: PartitionField, column: str, low: Any, high: Any) -> str:
    return f"{column} >= {_bound_literal(field_.source_type, low)} AND {column} < {_bound_literal(field_.source_type, high)}"


def _bound_literal(source_type: str, value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        if source_type.startswith("timestamptz"):
            return timestamp_literal(value)
        return "TIMESTAMP_NTZ " + quote_literal(value.strftime("%Y-%m-%d %H:%M:%S.%f"))
    return "DATE " + quote_literal(value.isoformat())


def _literal(source_type: str, value: Any) -> str:
    """An identity partition value as a Spark SQL literal of its source column's type."""
    if source_type == "string":
        return quote_literal(str(value))
    if source_type in ("int", "long"):
        if isinstance(value, bool):
            raise _Inexpressible(value)
        return str(int(value))
    if source_type == "boolean":
        return "true" if value is True else "false" if value is False else _raise(value)
    if source_type in ("float", "double"):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise _Inexpressible(value)
        return f"CAST({quote_literal(repr(number))} AS {source_type.upper()})"
    if source_type == "date":
        day = date.fromisoformat(value) if isinstance(value, str) else _EPOCH_DAY + timedelta(days=int(value))
        return "DATE " + quote_literal(day.isoformat())
    if source_type in ("timestamp", "timestamptz"):
        if isinstance(value, str):
            moment = datetime.fromisoformat(value)
            moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        else:
            moment = _EPOCH + timedelta(microseconds=int(value))
        return _bound_literal(source_type, moment)
    decimal = _DECIMAL.match(source_type)
    if decimal:
        number = Decimal(str(value))
        if not number.is_finite():
            raise _Inexpressible(value)
        return f"CAST({quote_literal(str(number))} AS DECIMAL({decimal.group(1)}, {decimal.group(2)}))"
    raise _Inexpressible(source_type)  # binary, fixed, uuid, time, nanosecond timestamps: not selected by value


def _raise(value: Any) -> str:
    raise _Inexpressible(value)
