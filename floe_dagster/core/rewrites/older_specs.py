"""The files of older partition specs on a table partitioned after the fact, where no ``where`` selects
partitions of every spec (core/rewrites/partition_scope.py decides when these are used). Pure.

Iceberg's bin-pack puts every file written under another spec (and the current spec's all-null
partition) into one rewrite group, and an older spec's file holds rows of every current partition, so a
run that rewrites some of them writes a file into every partition it spans. So that each run's charge
is what Iceberg rewrites, and no run of a backlog takes a file an earlier one wrote, the backlog is
staged:

1. The current spec's partitions, whole, by ``where`` (:func:`current_spec_first`). The where also
   scans the older files whose column metrics overlap the chosen partitions (all of them, when each
   holds rows of every day), so ``min-file-size-bytes`` is lowered for the run to the smallest older
   file: a file is only a candidate under that size (or over the maximum, or with too many deletes),
   so no older file is one.
2. Then the older specs' files alone, whole or by ``max-files-to-rewrite`` sized by their own largest
   files: by their own where when the current spec has an identity field no older spec has
   (:func:`older_specs_unit`, ``col NOT IN (...) OR col IS NULL``); otherwise, with no where (a time
   field, ``days(at)``, is the usual case: ``NOT`` of a day range is a range the older files' metrics rule
   out), with ``min-input-files`` raised one above the files any current partition holds, so that
   Iceberg keeps the older specs' group alone (:func:`older_specs_by_count`). Once this stage has begun
   the backlog stays in it (the ledger's :attr:`~floe_dagster.core.rewrites.scope_values.Backlog.older_first`),
   and its backlog is the older files left: what its runs wrote into the current spec's partitions is
   left to the next scheduled run, a new backlog.

Stage 1 needs older files larger than the current partitions' files it compacts (the usual shape:
older files written whole, newer ones by a fanout writer); otherwise it finds nothing and the older
files go first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from floe_dagster.core.rewrites.estimates import partition_group_indexes
from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.rewrites.scope_predicates import (
    Inexpressible, expressible, normalize, older_spec_predicate, same_source, unit_key,
)
from floe_dagster.core.rewrites.scope_units import (
    FileSet, Parsed, ScopeUnit, SpecLayout, files_within, group_units, parsed_groups, ranked, select_units, unit_of,
)
from floe_dagster.core.rewrites.scope_values import PartitionField, PartitionSelection

if TYPE_CHECKING:  # pragma: no cover
    from floe_dagster.core.facts.measurements import TableMetrics


@dataclass(frozen=True)
class OlderSpecs:
    """The files of the specs with no field on ``field`` (and the current spec's partitions where it is
    null), selected by excluding the current spec's values of it (``keys``), and what they weigh."""

    field: PartitionField
    keys: tuple[str, ...]
    unit: ScopeUnit


def _layout_and_groups(metrics: "TableMetrics") -> tuple[SpecLayout, Parsed] | None:
    layout = SpecLayout.of(metrics)
    if layout is None or not metrics.data_file_groups:
        return None
    try:
        return layout, parsed_groups(layout, metrics.data_file_groups)
    except ValueError:
        return None


def _older_live(layout: SpecLayout, parsed: Parsed) -> set[int]:
    return {spec_id for spec_id, _, sizes, _, _ in parsed if sizes} - {layout.current}


def older_specs_unit(metrics: "TableMetrics", rules: RewriteRules) -> OlderSpecs | None:
    """The older specs' files, which one where selects exactly (scope_predicates.older_spec_predicate)
    when the current spec has an identity field no older live spec has. They are one rewrite group
    (beside the current spec's partitions with that field null), so a file count within them is charged
    with their own largest files, and leaves alone what earlier runs wrote into the current spec's
    partitions. None when no such field or no current-spec value exists."""
    found = _layout_and_groups(metrics)
    if found is None:
        return None
    layout, parsed = found
    older = _older_live(layout, parsed)
    current = layout.specs[layout.current]
    index = next((i for i, f in enumerate(current) if f.kind == "identity" and expressible(f) and not any(
        same_source(g, f) and g.kind != "void" for spec_id in older for g in layout.specs.get(spec_id, ()))), None)
    if index is None or not older:
        return None
    shared, own, keys = FileSet(), [], set()
    for spec_id, values, sizes, deletes, _ in parsed:
        if spec_id != layout.current or all(v is None for v in values):
            shared.add(sizes, deletes, rules)
        elif len(values) != len(current):
            return None
        elif values[index] is not None:
            keys.add(unit_key([normalize(current[index], values[index])]))
        elif sizes:  # a partition of the current spec where the field is null: a rewrite group of its own
            files = FileSet()
            files.add(sizes, deletes, rules)
            own.append((files, False))
    try:
        older_spec_predicate(current[index], sorted(keys))
    except (Inexpressible, ValueError):
        return None
    return OlderSpecs(current[index], tuple(sorted(keys)), unit_of("", [(shared, False), *own], rules, True))


def older_specs_selection(older: OlderSpecs, cap: int, common: dict[str, Any]) -> PartitionSelection:
    """The older specs' files by their own where, whole or by a count of their largest files; the backlog
    is what is left of them (what the runs write into the current spec's partitions is not)."""
    unit, max_files = older.unit, None
    count = unit.files
    if unit.bytes > cap:  # Iceberg keeps the first files of the group: at most the largest ones
        count = max(files_within(unit.sizes, cap), min(2, len(unit.sizes)))
        max_files = count
    charge = sum(unit.sizes[:count])
    backlog = max(unit.bytes - charge, 0)
    return PartitionSelection((), charge, count, int(backlog > 0), backlog, oversized=charge > cap,
                              max_files=max_files, **{**common, "fields": (older.field,)},
                              older_specs_excluding=older.keys)


# -- staged by Iceberg's file rules (no identity field) ------------------------------------------------


@dataclass(frozen=True)
class _Split:
    """The older specs' rewrite group, and the current spec's partitions (each a group of its own)."""

    older: FileSet
    current: list[tuple[Any, Any, Any]]  # the collector's groups of the current spec's partitions
    current_files: list[FileSet]


def _split(metrics: "TableMetrics", rules: RewriteRules) -> tuple[SpecLayout, _Split] | None:
    found = _layout_and_groups(metrics)
    if found is None or rules.rewrite_all:
        return None
    layout, parsed = found
    if not _older_live(layout, parsed):
        return None
    older, current, current_files = FileSet(), [], []
    for spec_id, values, sizes, deletes, key in parsed:
        if spec_id != layout.current or all(v is None for v in values):
            older.add(sizes, deletes, rules)
        elif sizes:
            current.append((key, sizes, deletes))
            files = FileSet()
            files.add(sizes, deletes, rules)
            current_files.append(files)
    return layout, _Split(older, current, current_files)


def current_spec_first(metrics: "TableMetrics", rules: RewriteRules, cap: int, table: ScopeUnit,
                       limit: int) -> PartitionSelection | None:
    """The current spec's partitions with the most benefit per byte that fit in ``cap``, whole, with
    ``min-file-size-bytes`` at most the smallest older file: the where scans the older files whose
    metrics overlap the chosen partitions, and none of them is then a candidate. None when an older
    file would still be one (a delete rule, over the maximum size) or no partition is worth a run."""
    found = _split(metrics, rules)
    if found is None:
        return None
    layout, split = found
    older = split.older
    if not older.sizes or any(older.hits) or max(older.sizes) > rules.max_file_size_bytes:
        return None
    floor = min(rules.min_file_size_bytes, min(older.sizes))
    narrowed = replace(rules, min_file_size_bytes=floor)
    try:
        fields, units = group_units(layout, split.current, narrowed)
    except (Inexpressible, ValueError, StopIteration):
        return None
    useful = ranked(units)
    chosen = select_units(useful, cap, limit) if fields else []
    if not chosen:
        return None
    charge = sum(u.bytes for u in chosen)
    rest = len(useful) - len(chosen) + 1  # and the older specs' files
    return PartitionSelection(tuple(u.key for u in chosen), charge, sum(u.files for u in chosen), rest,
                              max(table.bytes - charge, 0), cap, fields=fields, spec_id=layout.current,
                              min_file_size=floor if floor < rules.min_file_size_bytes else None)


def older_specs_by_count(metrics: "TableMetrics", rules: RewriteRules, cap: int) -> PartitionSelection | None:
    """The older specs' group alone: ``min-input-files`` one above the most candidates any current
    partition holds (one not kept for its size or its deletes alone), so Iceberg keeps no current
    partition's group, and a count of the older files' largest that fits in ``cap``. The count leaves
    either none or enough for the next run, whose partitions hold one file more each (so a backlog of
    them drains while its runs number less than the files a run takes, less two). None when a current
    partition's group is kept whatever the count, or the older group is not kept."""
    found = _split(metrics, rules)
    if found is None:
        return None
    layout, split = found
    unbounded = replace(rules, min_input_files=2**31 - 1)  # groups kept by their bytes or deletes alone
    if any(partition_group_indexes(f.sizes, f.hits, unbounded) for f in split.current_files):
        return None
    low, high = rules.min_file_size_bytes, rules.max_file_size_bytes
    most = max((sum(1 for size, hit in zip(f.sizes, f.hits) if size < low or size > high or hit)
                for f in split.current_files), default=0)
    floor = max(rules.min_input_files, most + 1, 2)
    older = split.older
    picked = [i for group in partition_group_indexes(older.sizes, older.hits, replace(rules, min_input_files=floor))
              for i in group]
    if not picked:
        return None
    sizes = sorted((older.sizes[i] for i in picked), reverse=True)
    count, max_files = len(sizes), None
    if sum(sizes) > cap:
        count = max(files_within(sizes, cap), min(2, len(sizes)))
        tail = floor + 1  # the next run's partitions may hold a file more each: it needs more files than that
        if 0 < len(sizes) - count < tail and len(sizes) - tail >= 2 and sum(sizes[:tail]) <= cap:
            count = len(sizes) - tail  # leave the next run enough to take them alone, all at once
        max_files = count
    charge = sum(sizes[:count])
    # Fewer older files left than the next run would need: no later run of this backlog can take them
    # alone, so they are left to the next scheduled run, as what this backlog's runs wrote is.
    backlog = sum(sizes) - charge if len(sizes) - count > floor else 0
    return PartitionSelection((), charge, count, int(backlog > 0), backlog, cap, oversized=charge > cap,
                              fields=(), max_files=max_files, spec_id=layout.current, min_input_files=floor)
