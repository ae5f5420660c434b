"""Partition scoping against Iceberg's own file selection, property-based (issue 26, item 6): random
partition specs (identity, bucket, truncate, hour/day/month/year, several fields), evolved over 1-3
specs (fields added, removed, replaced; format v1 keeps removed fields as void), and files with
partition values and column bounds derived from their rows, in a real SQLite catalog.

For each table the real health collector measures it, core/rewrites/partition_scope.py builds its units and
picks a scope under a random cap, and PyIceberg's planner (``scan(row_filter=...).plan_files()``, the
same inclusive projection per spec and the same metrics evaluation as Iceberg's Java planner) plans the
where the scope would send. Checked: every unit's where plans exactly the files of that unit (whose rows
all share the unit's values, computed here from the rows with PyIceberg's transforms), the scope's
where plans exactly the chosen units' files, and what Iceberg's bin-pack would rewrite of them (or the
largest files ``max-files-to-rewrite`` lets it take) is at most the bytes charged, which are at most
the cap unless the scope says it is oversized."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pyiceberg.conversions import to_bytes
from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    NotIn,
    NotNull,
    Or,
    StartsWith,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.transforms import parse_transform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, IntegerType, LongType, NestedField, StringType, TimestamptzType

from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.rewrites.estimates import plan_data_file_rewrite
from floe_dagster.core.facts.measurements import data_group_spec
from floe_dagster.core.rewrites.partition_scope import plan_scope, scope_units
from floe_dagster.core.rewrites.scope_predicates import (
    Inexpressible,
    Predicate,
    Term,
    older_spec_predicate,
    scope_predicate,
    unit_key,
)
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster_tests.integration._health_tables import lakehouse, name

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "n", IntegerType(), required=False),
    NestedField(3, "region", StringType(), required=False),
    NestedField(4, "s", StringType(), required=False),
    NestedField(5, "at", TimestamptzType(), required=False),
    NestedField(6, "d", DateType(), required=False),
)
COLUMNS = {f.name: f for f in SCHEMA.fields}
POOL = [  # (source column, transform)
    ("region", "identity"), ("n", "identity"), ("d", "identity"), ("s", "identity"), ("id", "bucket[4]"),
    ("region", "bucket[3]"), ("n", "truncate[10]"), ("s", "truncate[2]"), ("s", "truncate[1]"), ("at", "hour"),
    ("at", "day"), ("at", "month"), ("at", "year"), ("d", "day"), ("d", "month"), ("d", "year"),
]
TIME = ("hour", "day", "month", "year")
HOUR_US = 3_600_000_000
INSTANTS = [19_800 * 24 * HOUR_US + h * HOUR_US for h in (0, 1, 5, 23, 24, 25, 24 * 31, 24 * 400)]
DAYS = [-400, -2, -1, 0, 19_800, 19_801, 19_831, 20_200]  # before 1970 too: inexpressible time values
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # the catalog's commits need no fsync
TARGET = 1000  # every file below is small (under 75 % of the target)


def _field_name(column: str, transform: str) -> str:
    return f"{column}_{transform.replace('[', '').replace(']', '')}"


row_values = st.fixed_dictionaries({
    "id": st.integers(0, 30),
    "n": st.one_of(st.none(), st.integers(-12, 31)),
    "region": st.sampled_from([None, "eu", "us", "ap"]),
    "s": st.sampled_from([None, "", "a", "ab", "abc", "b", "ba"]),
    "at": st.one_of(st.none(), st.sampled_from(INSTANTS)),
    "d": st.one_of(st.none(), st.sampled_from(DAYS)),
})


@st.composite
def evolutions(draw) -> dict[str, Any]:
    """The specs (each a list of (column, transform)), in order, and the rows written under each."""
    first = draw(st.lists(st.sampled_from(POOL), min_size=draw(st.sampled_from([0, 1, 1, 1])), max_size=2,
                          unique_by=lambda f: (f[0], f[1] in TIME or f[1])))
    specs = [first]
    used = set(first)
    for _ in range(draw(st.integers(0, 2))):
        fields = list(specs[-1])
        change = draw(st.sampled_from(["add", "remove", "replace"]))
        if change in ("remove", "replace") and fields:
            fields.remove(draw(st.sampled_from(fields)))
        if change in ("add", "replace"):  # Iceberg allows one time field per column in a spec
            timed = {column for column, transform in fields if transform in TIME}
            fresh = [f for f in POOL if f not in used and not (f[1] in TIME and f[0] in timed)]
            if fresh:
                fields.append(draw(st.sampled_from(fresh)))
        used.update(fields)
        specs.append(fields)
    # per spec, 1-3 appends of a few rows (so partitions hold several files)
    batches = [draw(st.lists(st.lists(row_values, min_size=1, max_size=8), min_size=1, max_size=3)) for _ in specs]
    return {"specs": specs, "batches": batches, "format": draw(st.sampled_from([1, 2])),
            "sizes": draw(st.lists(st.integers(60, 150), min_size=60, max_size=60)),
            "cap": draw(st.integers(250, 1500)),
            "rewrite_all": draw(st.booleans())}


def _evolve(table, before: list, after: list) -> None:
    removed = [f for f in before if f not in after]
    added = [f for f in after if f not in before]
    if removed:  # first, in an update of its own: a replaced time field may not coexist with its successor
        with table.update_spec() as update:
            for column, transform in removed:
                update.remove_field(_field_name(column, transform))
    if added:
        with table.update_spec() as update:
            for column, transform in added:
                update.add_field(column, parse_transform(transform), _field_name(column, transform))


def _data_files(table, rows: list[dict], sizes: list[int], start: int) -> list[tuple[DataFile, list[dict]]]:
    """One data file per partition of the current spec, with the metrics of its rows."""
    spec, by_partition = table.spec(), {}
    for row in rows:
        values = tuple(f.transform.transform(SCHEMA.find_type(f.source_id))(row[SCHEMA.find_column_name(f.source_id)])
                       for f in spec.fields)
        by_partition.setdefault(values, []).append(row)
    files = []
    for index, (values, members) in enumerate(by_partition.items()):
        lower, upper, nulls, counts = {}, {}, {}, {}
        for column, nested in COLUMNS.items():
            present = [r[column] for r in members if r[column] is not None]
            counts[nested.field_id] = len(members)
            nulls[nested.field_id] = len(members) - len(present)
            if present:
                lower[nested.field_id] = to_bytes(nested.field_type, min(present))
                upper[nested.field_id] = to_bytes(nested.field_type, max(present))
        data_file = DataFile.from_args(
            content=DataFileContent.DATA, file_path=f"{table.location()}/data/f{start + index}.parquet",
            file_format=FileFormat.PARQUET, partition=Record(*values), record_count=len(members),
            file_size_in_bytes=sizes[(start + index) % len(sizes)], value_counts=counts,
            null_value_counts=nulls, nan_value_counts={}, lower_bounds=lower, upper_bounds=upper)
        data_file.spec_id = spec.spec_id
        files.append((data_file, members))
    return files


def _build(root: Path, case: dict) -> tuple[Any, Any, dict[str, list[dict]]]:
    lake, catalog = lakehouse(root)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={"format-version": str(case["format"])})
    rows_of: dict[str, list[dict]] = {}
    previous: list = []
    for fields, appends in zip(case["specs"], case["batches"]):
        _evolve(table, previous, fields)  # each commit updates ``table`` in place
        previous = fields
        for rows in appends:
            files = _data_files(table, rows, case["sizes"], len(rows_of))
            with table.transaction() as transaction:
                with transaction.update_snapshot().fast_append() as append:
                    for data_file, members in files:
                        append.append_data_file(data_file)
                        rows_of[data_file.file_path] = members
    return lake, catalog, rows_of


def _expression(predicate: Predicate) -> BooleanExpression:
    result: BooleanExpression = AlwaysFalse()
    for conjunct in predicate:
        terms = [_term(t) for t in conjunct]
        both = terms[0]
        for t in terms[1:]:
            both = And(both, t)
        result = Or(result, both)
    return result


def _term(term: Term) -> BooleanExpression:
    if term.op == "null":
        return IsNull(term.column)
    if term.op == "prefix":
        return StartsWith(term.column, term.values[0])
    if term.op == "range":
        return And(GreaterThanOrEqual(term.column, term.values[0]), LessThan(term.column, term.values[1]))
    if term.op == "not_in":  # as Spark hands it to Iceberg: NOT IN also says IS NOT NULL
        return And(NotNull(term.column), NotIn(term.column, set(term.values)))
    if len(term.values) == 1:
        return EqualTo(term.column, term.values[0])
    return In(term.column, set(term.values))


def _unit_of(fields, rows: list[dict]) -> str:
    """The unit the file's rows are in, from the rows themselves (PyIceberg's transforms)."""
    keys = {unit_key([parse_transform(f.transform).transform(COLUMNS[f.source].field_type)(row[f.source])
                      for f in fields]) for row in rows}
    assert len(keys) == 1, f"a file's rows are in several units {keys}: its spec does not refine {fields}"
    return keys.pop()


def _planned(table, predicate: Predicate | None) -> set[str]:
    """The files PyIceberg's planner keeps for the where. Each disjunct is planned alone and the
    results joined (the same files: the projection and the metrics evaluation both distribute over
    OR), because PyIceberg 0.12's ResidualEvaluator compares a null partition value with ``<`` and
    fails once a file of a null partition passed through another disjunct."""
    if predicate is None:
        return {task.file.file_path for task in table.scan().plan_files()}
    return {task.file.file_path for conjunct in predicate
            for task in table.scan(row_filter=_expression((conjunct,))).plan_files()}


def _rewritten_at_most(table, paths: set[str], rules: RewriteRules, max_files: int | None) -> int:
    """What Iceberg's bin-pack rewrites of the planned files (grouped as its planner groups them),
    or, with max-files-to-rewrite, the largest files it may take."""
    current = table.spec().spec_id
    files = []
    for task in table.scan().plan_files():
        data_file = task.file
        if data_file.file_path in paths:
            values = [data_file.partition[i] for i in range(len(data_file.partition))]
            own = data_file.spec_id == current and not all(v is None for v in values)
            group = json.dumps(values) if own else "other"  # Iceberg's groupByPartition
            files.append((group, data_file.file_size_in_bytes))
    if max_files is None:
        return plan_data_file_rewrite(files, rules).bytes
    picked = []
    by_group: dict[str, list[int]] = {}
    for group, size in files:
        by_group.setdefault(group, []).append(size)
    for group, sizes in by_group.items():
        if plan_data_file_rewrite([(group, s) for s in sizes], rules).files:
            picked.extend(sizes)
    return sum(sorted(picked, reverse=True)[:max_files])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(evolutions())
def test_scoped_wheres_select_exactly_the_chosen_files_within_the_cap(case):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
        lake, catalog, rows_of = _build(Path(root), case)
        table = catalog.load_table("ns.t")
        metrics = HealthCollector(catalog, lake).metrics_for(name(catalog, "ns.t"), tier="full")
        rules = RewriteRules.sized(TARGET, min_input_files=2, rewrite_all=case["rewrite_all"])
        fields, units, whole = scope_units(metrics, rules)
        if not fields:
            assert units == []
        files_of: dict[str, set[str]] = {}
        for path, rows in rows_of.items():
            files_of.setdefault(_unit_of(fields, rows) if fields else "", set()).add(path)
        assert {u.key for u in units} == (set(files_of) if fields else set())
        for unit in units:  # every unit's where plans exactly its own files
            try:
                predicate = scope_predicate(fields, [unit.key])
            except Inexpressible:
                assert not unit.expressible
                continue
            assert unit.expressible and _planned(table, predicate) == files_of[unit.key], unit.key
        cap = case["cap"]
        chosen = plan_scope(metrics, rules, cap)
        if chosen is None:  # nothing to rewrite, or all of it fits
            assert not whole.useful or whole.bytes <= cap
            return
        event(f"specs with files: {len({data_group_spec(key)[0] for key, _, _ in metrics.data_file_groups})}")
        event(f"scope fields: {len(fields)}")
        older = chosen.older_specs_excluding is not None
        staged = not fields and chosen.older_specs_excluding is None and (chosen.partitions or chosen.min_input_files)
        how = 'older specs' if older else 'staged' if staged else 'where' if chosen.partitions else 'whole table'
        event(f"scope: {how}"
              f"{' + max-files' if chosen.max_files else ''}{' (oversized)' if chosen.oversized else ''}")
        run_rules = replace(rules, min_file_size_bytes=chosen.min_file_size or rules.min_file_size_bytes,
                            min_input_files=chosen.min_input_files or rules.min_input_files)
        if staged:  # a table partitioned after the fact, staged by Iceberg's file rules (core/rewrites/older_specs.py)
            _assert_staged(table, chosen, rows_of, run_rules)
            return
        if older:  # the files of specs without a field on the column, and the current spec's null ones
            predicate = older_spec_predicate(chosen.fields[0], chosen.older_specs_excluding)
            wanted = _older_specs_files(table, chosen.fields[0].source)
        else:
            predicate = scope_predicate(chosen.fields, chosen.partitions) if chosen.partitions else None
            wanted = set().union(*(files_of[key] for key in chosen.partitions)) if chosen.partitions else set(rows_of)
        selected = _planned(table, predicate)
        assert selected == wanted
        assert _rewritten_at_most(table, selected, rules, chosen.max_files) <= chosen.bytes
        assert chosen.bytes <= cap or chosen.oversized
        if chosen.max_files is None:  # whole units: the charge is the bytes of the files Iceberg may take
            assert chosen.bytes <= sum(t.file.file_size_in_bytes for t in table.scan().plan_files()
                                       if t.file.file_path in selected)


def _assert_staged(table, chosen, rows_of: dict[str, list[dict]], run_rules: RewriteRules) -> None:
    """The current spec's partitions whole: the where scans them and the older files whose metrics
    overlap, and with the run's min-file-size-bytes Iceberg rewrites the partitions' files alone, exactly
    the charge. The older specs' files alone: no where, and with the run's min-input-files no current
    partition's group is kept; the charge bounds what is."""
    current = table.spec().spec_id
    own = {t.file.file_path for t in table.scan().plan_files() if t.file.spec_id == current
           and not all(t.file.partition[i] is None for i in range(len(t.file.partition)))}
    if chosen.partitions:
        chosen_own = {p for p in own if _unit_of(chosen.fields, rows_of[p]) in chosen.partitions}
        selected = _planned(table, scope_predicate(chosen.fields, chosen.partitions))
        assert chosen_own <= selected and chosen.max_files is None
        assert _rewritten_at_most(table, selected, run_rules, None) == chosen.bytes == \
            _rewritten_at_most(table, chosen_own, run_rules, None)
    else:
        assert _rewritten_at_most(table, own, run_rules, None) == 0
        assert _rewritten_at_most(table, set(rows_of), run_rules, chosen.max_files) <= chosen.bytes
    assert chosen.bytes <= chosen.cap or chosen.oversized


def _older_specs_files(table, column: str) -> set[str]:
    """The files of specs with no (non-void) field on ``column``, and the current spec's files whose
    identity field on it is null."""
    source_id = table.schema().find_field(column).field_id
    current, wanted = table.spec(), set()
    for task in table.scan().plan_files():
        spec = table.specs()[task.file.spec_id]
        on_column = [i for i, f in enumerate(spec.fields) if f.source_id == source_id and str(f.transform) != "void"]
        if spec.spec_id == current.spec_id:
            if all(task.file.partition[i] is None for i in on_column):
                wanted.add(task.file.file_path)
        elif not on_column:
            wanted.add(task.file.file_path)
    return wanted
