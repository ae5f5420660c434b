"""The ``where`` of a partition-scoped rewrite as a structure (built here, written as Spark SQL by
spark/partition_predicates.py), and when it selects exactly the files of the chosen partitions on
every partition spec. Pure.

How Iceberg 1.11 picks the files of ``rewrite_data_files(where => ...)``: the planner scans with the
where as its filter (``BinPackRewriteFilePlanner``: ``table.newScan().filter(where).ignoreResiduals()``),
so a data file is kept when the where's *inclusive projection* onto the file's own spec
(``Projections.inclusive``: per partition field on a column the where names, the transform's
``project``, ANDed; ``true`` for a column the spec has no field on) matches its partition values
(``ManifestEvaluator`` on manifests, then on each file), and its column metrics cannot exclude it
(``InclusiveMetricsEvaluator``). A spec without a field on the column keeps every file whose metrics
cannot rule it out: an older spec's files spanning the chosen values are all taken.

So a where selects *exactly* the files of chosen partitions only when every spec with live files has,
for each column the where names, a field that *refines* the current one (:func:`refines`): the file's
partition value then decides whether all its rows match or none does, the projection is exact and the
metrics can exclude nothing (except a file of zero records, which only makes the run smaller). The
current spec's fields for which that holds are the ones a scope may use (core/rewrites/partition_scope.py).

What ``where`` can say (Iceberg 1.11 refuses its own partition functions, ``system.bucket(...)``:
"Cannot parse predicates"): identity values (``=``/``IN``), half-open ranges for year, month, day and
hour and for integer truncate, ``LIKE 'prefix%'`` for string truncate (Spark makes it Iceberg's
``startsWith``), ``IS NULL``. Not: bucket, void, decimal or binary truncate, binary/fixed/uuid/time
and nanosecond columns, a NaN, infinite or negative-zero float, a prefix holding ``%``, ``_`` or a
backslash, and time partitions before 1970 (Iceberg widens the inclusive projection of negative
time values by one partition, ``ProjectionUtil.fixInclusiveTimeProjection``).
"""

from __future__ import annotations

import json
import math
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple, Sequence

from floe_dagster.core.rewrites.scope_values import PartitionField

TEMPORAL_TRANSFORMS = ("hour", "day", "month", "year")  # finest first
_FINENESS = {name: rank for rank, name in enumerate(TEMPORAL_TRANSFORMS)}
_EPOCH_DAY = date(1970, 1, 1)
_US_PER_HOUR = 3_600_000_000
_US_PER_DAY = 86_400_000_000
_TIMESTAMPS = ("timestamp", "timestamptz")
_PLAIN_TYPES = ("string", "int", "long", "boolean", "date", "float", "double", *_TIMESTAMPS)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


class Inexpressible(ValueError):
    """A partition value or field ``where`` cannot select exactly."""


class Term(NamedTuple):
    """One condition on a source column. ``op``: ``in`` (values: one or more, each in Iceberg's
    internal form: days for a date, microseconds for a timestamp), ``not_in`` (the same, negated),
    ``range`` (values: the half-open ``(low, high)``), ``prefix`` (values: the prefix) or ``null``
    (no values)."""

    column: str  # the source column's path (dotted for a nested column)
    source_type: str
    op: str
    values: tuple[Any, ...]


Predicate = tuple[tuple[Term, ...], ...]  # OR of ANDs


def expressible(field: PartitionField) -> bool:
    """Whether ``where`` can select this field's partitions by their source column."""
    kind, source_type = field.kind, field.source_type
    if not field.source:
        return False
    if kind == "identity":
        return source_type in _PLAIN_TYPES or bool(_DECIMAL.match(source_type))
    if kind == "truncate":
        return source_type in ("int", "long", "string") and (field.width or 0) > 0
    if kind in TEMPORAL_TRANSFORMS:
        return source_type in _TIMESTAMPS or (source_type == "date" and kind != "hour")
    return False


def same_source(a: PartitionField, b: PartitionField) -> bool:
    if a.source_id is not None and b.source_id is not None:
        return a.source_id == b.source_id
    return bool(a.source) and a.source == b.source


def refines(field: PartitionField, target: PartitionField) -> bool:
    """Whether ``field``'s partition value decides ``target``'s (both on the same column): the same
    transform, identity, a finer time unit, an integer truncate whose width divides the target's, a
    string truncate at least as wide."""
    if not same_source(field, target) or field.kind == "void":
        return False
    if _same_transform(field, target) or field.kind == "identity":
        return True
    if field.kind in _FINENESS and target.kind in _FINENESS:
        return _FINENESS[field.kind] <= _FINENESS[target.kind]
    if field.kind == target.kind == "truncate" and field.width and target.width:
        if target.source_type == "string":
            return field.width >= target.width
        return target.width % field.width == 0
    return False


def _same_transform(a: PartitionField, b: PartitionField) -> bool:
    return a.transform.replace(" ", "").lower() == b.transform.replace(" ", "").lower()


def normalize(field: PartitionField, value: Any) -> Any:
    """A recorded partition value (the collector's JSON) in Iceberg's internal form for the field."""
    if value is None:
        return None
    kind, source_type = field.kind, field.source_type
    if kind in TEMPORAL_TRANSFORMS:
        return _days(value) if isinstance(value, str) else _integer(value)
    if kind != "identity":
        return value
    if source_type == "date":
        return _days(value) if isinstance(value, str) else _integer(value)
    if source_type in _TIMESTAMPS:
        return _micros(value) if isinstance(value, str) else _integer(value)
    if _DECIMAL.match(source_type):
        return Decimal(str(value))
    return value


def derive(field: PartitionField, target: PartitionField, value: Any) -> Any:
    """``target``'s partition value from ``field``'s (normalized; ``refines(field, target)``)."""
    if value is None or _same_transform(field, target):
        return value
    if field.kind == "identity":
        return apply_transform(target, value)
    if field.kind in _FINENESS:
        return _coarsen(field.kind, target.kind, value)
    return _truncate(target, value)


def apply_transform(field: PartitionField, value: Any) -> Any:
    """The field's transform of a source value in internal form (a date's days, a timestamp's micros)."""
    if value is None or field.kind == "identity":
        return value
    if field.kind == "truncate":
        return _truncate(field, value)
    if field.kind in _FINENESS:
        if field.source_type == "date":
            return _coarsen("day", field.kind, value)
        if field.kind == "hour":
            return value // _US_PER_HOUR
        return _coarsen("day", field.kind, value // _US_PER_DAY)
    raise Inexpressible(field.transform)


def unit_key(values: Sequence[object]) -> str:
    """A scope unit's values (internal form) as the key the selection and the ledger keep."""
    return json.dumps([str(v) if isinstance(v, Decimal) else v for v in values], separators=(",", ":"))


def scope_predicate(fields: Sequence[PartitionField], keys: Sequence[str]) -> Predicate:
    """The where selecting the rows whose values of ``fields`` are one of the ``keys`` (unit keys:
    JSON lists of those fields' values). One field: its identity values in one ``IN``, touching ranges
    merged. Raises :class:`Inexpressible` for a field or value ``where`` cannot select exactly."""
    if not fields or not keys:
        raise Inexpressible("no fields or no partitions to select")
    for field in fields:
        if not expressible(field):
            raise Inexpressible(f"{field.transform} of {field.source} ({field.source_type})")
    try:
        rows = [json.loads(key) for key in keys]
    except ValueError as exc:
        raise Inexpressible(str(exc)) from exc
    if any(not isinstance(row, list) or len(row) != len(fields) for row in rows):
        raise Inexpressible(f"a partition key does not hold {len(fields)} value(s)")
    if len(fields) == 1:
        return _one_field(fields[0], [normalize(fields[0], row[0]) for row in rows])
    disjuncts = {tuple(term(f, normalize(f, v)) for f, v in zip(fields, row)) for row in rows}
    return tuple(sorted(disjuncts, key=repr))


def older_spec_predicate(field: PartitionField, excluded: Sequence[str]) -> Predicate:
    """The where selecting exactly the files of partition specs with no field on ``field``'s column
    (and the current spec's partitions whose ``field`` is null), when the current spec's partitions
    hold the values ``excluded`` (unit keys of ``field`` alone): ``col NOT IN (excluded) OR col IS
    NULL``. Iceberg's inclusive projection of either term onto a spec without a field on the column is
    ``true``, and its metrics never exclude a file for ``NOT IN`` (Spark adds ``IS NOT NULL``, which
    excludes only a file whose column is all null, which ``IS NULL`` keeps); on the current spec the
    identity value decides. Only an identity field qualifies."""
    if field.kind != "identity" or not expressible(field) or not excluded:
        raise Inexpressible(f"{field.transform} of {field.source}: no exact complement")
    values = []
    for key in excluded:
        row = json.loads(key)
        if not isinstance(row, list) or len(row) != 1 or row[0] is None:
            raise Inexpressible(f"an excluded value {key!r} is not one value")
        values.append(_checked(field.source_type, normalize(field, row[0])))
    column, source_type = field.source, field.source_type
    excluding = Term(column, source_type, "not_in", tuple(sorted(set(values))))
    return ((excluding,), (Term(column, source_type, "null", ()),))


def term(field: PartitionField, value: Any) -> Term:
    """The condition selecting exactly the rows of one partition value of ``field``."""
    column, source_type, kind = field.source, field.source_type, field.kind
    if value is None:
        return Term(column, source_type, "null", ())
    if kind == "identity":
        return Term(column, source_type, "in", (_checked(source_type, value),))
    if kind == "truncate" and source_type == "string":
        prefix = str(value)
        if len(prefix) < (field.width or 0):  # shorter than the width: the value itself
            return Term(column, source_type, "in", (prefix,))
        if any(ch in prefix for ch in "%_\\"):  # Spark makes only a plain LIKE 'prefix%' Iceberg's startsWith
            raise Inexpressible(prefix)
        return Term(column, source_type, "prefix", (prefix,))
    return Term(column, source_type, "range", _bounds(field, value))


def _one_field(field: PartitionField, values: list[Any]) -> Predicate:
    present = [v for v in values if v is not None]
    terms: list[Term] = []
    if present and (field.kind == "identity" or (field.kind == "truncate" and field.source_type == "string")):
        each = {term(field, v) for v in present}
        singles = sorted({t.values[0] for t in each if t.op == "in"})
        if singles:
            terms.append(Term(field.source, field.source_type, "in", tuple(singles)))
        terms.extend(sorted(t for t in each if t.op == "prefix"))
    elif present:
        merged: list[list[Any]] = []
        for low, high in sorted({_bounds(field, v) for v in present}):
            if merged and low <= merged[-1][1]:  # touching or overlapping: one range
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        terms.extend(Term(field.source, field.source_type, "range", (low, high)) for low, high in merged)
    if len(present) < len(values):
        terms.append(Term(field.source, field.source_type, "null", ()))
    return tuple((t,) for t in terms)


def _bounds(field: PartitionField, value: Any) -> tuple[int, int]:
    """The half-open range of source values (internal form) one temporal or integer-truncate value covers."""
    if field.kind == "truncate":
        if isinstance(value, bool) or not isinstance(value, int):
            raise Inexpressible(value)
        return value, value + int(field.width or 1)
    value = _integer(value)
    if value < 0:  # Iceberg widens negative time projections by one partition
        raise Inexpressible(f"{field.transform} value {value} before 1970")
    if field.kind == "hour":
        low, high = value * _US_PER_HOUR, (value + 1) * _US_PER_HOUR
        return low, high
    low_day, high_day = _day_range(field.kind, value)
    if field.source_type == "date":
        return low_day, high_day
    return low_day * _US_PER_DAY, high_day * _US_PER_DAY


def _day_range(kind: str, value: int) -> tuple[int, int]:
    if kind == "day":
        return value, value + 1
    if kind == "month":
        year, month = divmod(value, 12)
        low = date(1970 + year, month + 1, 1)
        high = date(low.year + (low.month == 12), low.month % 12 + 1, 1)
    else:  # year
        low, high = date(1970 + value, 1, 1), date(1971 + value, 1, 1)
    return (low - _EPOCH_DAY).days, (high - _EPOCH_DAY).days


def _coarsen(unit: str, target: str, value: int) -> int:
    """A time partition value in ``unit`` (hour, day, month) as ``target``'s (coarser or the same)."""
    if unit == target:
        return value
    if unit == "hour":
        return _coarsen("day", target, value // 24)
    if unit == "day":
        day = _EPOCH_DAY + timedelta(days=value)
        months = (day.year - 1970) * 12 + day.month - 1
        return months if target == "month" else months // 12
    return value // 12  # month to year


def _truncate(field: PartitionField, value: Any) -> Any:
    width = int(field.width or 1)
    if isinstance(value, str):
        return value[:width]
    if isinstance(value, bool) or not isinstance(value, int):
        raise Inexpressible(value)
    return value - value % width  # Python's % floors, as Iceberg's truncate does for negative values


def _checked(source_type: str, value: Any) -> Any:
    """An identity value ``where`` can compare exactly, in internal form."""
    if source_type in ("int", "long", "date", *_TIMESTAMPS):
        if isinstance(value, bool) or not isinstance(value, int):
            raise Inexpressible(value)
        return value
    if source_type == "boolean":
        if not isinstance(value, bool):
            raise Inexpressible(value)
        return value
    if source_type == "string":
        if not isinstance(value, str):
            raise Inexpressible(value)
        return value
    if source_type in ("float", "double"):
        number = float(value)
        if math.isnan(number) or math.isinf(number) or (number == 0 and math.copysign(1, number) < 0):
            raise Inexpressible(value)
        return number
    try:
        number = Decimal(str(value))
    except InvalidOperation as exc:
        raise Inexpressible(value) from exc
    if not number.is_finite():
        raise Inexpressible(value)
    return number


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Inexpressible(value)
    return value


def _days(text: str) -> int:
    try:
        return (date.fromisoformat(text) - _EPOCH_DAY).days
    except ValueError as exc:
        raise Inexpressible(text) from exc


def _micros(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise Inexpressible(text) from exc
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
