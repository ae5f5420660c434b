"""Partition-scoped rewrites: what a ``rewrite_data_files`` run takes when the whole table's rewrite
exceeds what the run may rewrite (docs/automation.md, "Large tables: partition-scoped rewrites"), so
that the bytes it rewrites stay within the cap by construction.

Pure (no PyIceberg, Spark or Dagster). The inputs are the full health tier's files per (spec id,
partition) (:attr:`~floe_dagster.core.facts.measurements.TableMetrics.data_file_groups`), the table's
partition specs, and Iceberg's planner rules (core/rewrites/estimates.py).

*Units.* A scope selects by a ``where`` on partition source columns, which Iceberg evaluates on every
file of every spec (core/rewrites/scope_predicates.py). Only the current spec's fields that every spec with
live files refines can select exactly; the files are grouped into *units* by those fields' values (a
file of an older spec by the value its own fields decide). With no such field (a bucket-only spec, or
files of an older spec without a field on the column, such as an unpartitioned table that gained a
partition field), the whole table is one unit, selected without a ``where``.

*Charges.* A unit's charge is an upper bound of what Iceberg rewrites of it, whatever else is chosen:
a partition of the current spec is a rewrite group of its own, so its files that Iceberg's bin-pack
takes (all of them or none when they make one bin, the usual case; every file the size and delete rules
pick when they make several); files of older specs and of the current all-null partition form one
rewrite group together, so each unit's share of it is charged with every file the size and delete rules
pick (the group may pass the group rules only with the other units' files).

*The choice,* in order: (1) whole units by benefit per byte (data files removed plus delete files
applied, per byte), as many as fit in the cap, at most :data:`MAX_SCOPED_PARTITIONS`; (2a) with no
fields because older specs lack one (a table partitioned after the fact), the older specs' files by
their own where when one selects them exactly (:func:`older_specs_unit`), whole or by a count of their
own largest files, so what earlier runs wrote into the current spec never sizes or joins it; (2) when no unit
fits, the best unit (or the whole table) with ``max-files-to-rewrite`` = the most files whose largest
ones fit in the cap, at least two (Iceberg takes the first files of the groups it keeps, so the bytes
are at most the largest); (3) when not even two files fit, the smallest such step runs alone, over the
cap, and says so. A unit is only taken when Iceberg's bin-pack would rewrite some of it, so every run
makes progress and the backlog drains.

Whatever is not chosen is the *backlog* (units and bytes): the next tick plans it as new work of the
same slot (core/plan/plan_stages.py, continue_backlog).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.rewrites.estimates import _delete_rule_hit, all_null_key, partition_group_indexes
from floe_dagster.core.facts.measurements import data_group_spec
from floe_dagster.core.rewrites.scope_values import (  # the values, where callers have always found them
    Backlog as Backlog,
    PartitionField,
    PartitionSelection,
    RewriteScope as RewriteScope,
    partition_values,
)
from floe_dagster.core.rewrites.scope_predicates import (
    TEMPORAL_TRANSFORMS,
    Inexpressible,
    derive,
    expressible,
    normalize,
    older_spec_predicate,
    refines,
    same_source,
    scope_predicate,
    unit_key,
)

if TYPE_CHECKING:  # pragma: no cover
    from floe_dagster.core.facts.measurements import TableMetrics

# At most this many units (partitions, or values of the scope's fields) in one run's where: Iceberg
# evaluates the where's disjuncts on every manifest entry while planning (and Spark analyses the
# whole expression first), so the where's cost grows with its terms; 100 keeps planning cheap and
# the CALL readable while a day-partitioned table still compacts three months per run. More is left
# to the backlog.
MAX_SCOPED_PARTITIONS = 100


@dataclass(frozen=True)
class ScopeUnit:
    """What one unit takes at most (bytes, the sizes of the files Iceberg may take, input files) and
    gives (files removed, delete files applied) when Iceberg's bin-pack rewrites it."""

    key: str  # the unit's values of the scope's fields (a JSON list); "" for the whole table
    bytes: int
    files: int
    delete_files: int = 0  # delete files applying to the files rewritten (per data file)
    output_files: int = 1  # files written at the target size
    rewritten_files: int | None = None  # files the bin-pack rewrites (None: ``files``)
    sizes: tuple[int, ...] = ()  # the files charged, largest first
    expressible: bool = True  # its values can be selected by a where

    @property
    def rewritten(self) -> int:
        return self.files if self.rewritten_files is None else self.rewritten_files

    @property
    def useful(self) -> bool:
        """Iceberg's bin-pack rewrites some of it (files merged or split, deletes applied): progress."""
        return self.rewritten > 0 and self.bytes > 0

    @property
    def benefit(self) -> int:
        return (max(self.rewritten - self.output_files, 0) if self.rewritten else 0) + self.delete_files

    @property
    def benefit_per_byte(self) -> float:
        return self.benefit / self.bytes if self.bytes > 0 else 0.0


# -- the specs and the units --------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecLayout:
    """The table's partition specs as a scope needs them."""

    current: int
    specs: dict[int, tuple[PartitionField, ...]]

    @classmethod
    def of(cls, metrics: "TableMetrics") -> "SpecLayout | None":
        if metrics.partition_specs is None or metrics.partition_spec_id is None:
            return None
        specs = {spec_id: tuple(PartitionField(name, transform, source_type, source_id)
                                for source_id, name, transform, source_type in fields)
                 for spec_id, fields in metrics.partition_specs}
        return cls(metrics.partition_spec_id, specs) if metrics.partition_spec_id in specs else None

    def scope_fields(self, live_specs: set[int]) -> tuple[PartitionField, ...]:
        """The current spec's fields a where selects exactly by on every spec with live files; a time
        field that an older spec has only coarser (``month`` then ``day``) at the coarsest unit they
        share."""
        usable = []
        for current in self.specs[self.current]:
            for target in _coarser(current):
                if expressible(target) and all(
                        any(refines(f, target) for f in self.specs.get(spec_id, ())) for spec_id in live_specs):
                    usable.append(target)
                    break
        return tuple(usable)

    def unit_values(self, spec_id: int, values: list[object], fields: Sequence[PartitionField]) -> list[object]:
        """The scope fields' values of a partition of ``spec_id``."""
        own = self.specs.get(spec_id, ())
        if len(own) != len(values):
            raise Inexpressible(f"spec {spec_id} has {len(own)} field(s), a partition {len(values)} value(s)")
        result = []
        for target in fields:
            index = next(i for i, f in enumerate(own) if same_source(f, target) and refines(f, target))
            result.append(derive(own[index], target, normalize(own[index], values[index])))
        return result


def _coarser(field_: PartitionField) -> list[PartitionField]:
    """The field, then for a time field the same column at each coarser unit."""
    if field_.kind not in TEMPORAL_TRANSFORMS:
        return [field_]
    return [field_] + [PartitionField(field_.source, kind, field_.source_type, field_.source_id)
                       for kind in TEMPORAL_TRANSFORMS[TEMPORAL_TRANSFORMS.index(field_.kind) + 1:]]


@dataclass
class _Files:
    """Files of one rewrite group (or a unit's share of one), with their delete rule hits and counts."""

    sizes: list[int] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    deletes: list[int] = field(default_factory=list)

    def add(self, sizes: Sequence[int], deletes: Sequence[tuple[int, int, int, int]], rules: RewriteRules) -> None:
        hit = _delete_rule_hit(0, 0, 0, rules)
        start = len(self.sizes)
        self.sizes.extend(sizes)
        self.hits.extend([hit] * len(sizes))
        self.deletes.extend([0] * len(sizes))
        for index, count, rows, records in deletes:
            self.hits[start + index] = _delete_rule_hit(count, rows, records, rules)
            self.deletes[start + index] = count


def _charge(files: _Files, rules: RewriteRules, shared: bool) -> tuple[list[int], list[int]]:
    """(the files charged, the files the bin-pack rewrites) of one rewrite group, or of a unit's share
    of the shared group (``shared``: charged with every file the size and delete rules pick)."""
    picked = [i for group in partition_group_indexes(files.sizes, files.hits, rules) for i in group]
    candidates = [i for i, size in enumerate(files.sizes) if rules.rewrite_all or files.hits[i]
                  or size < rules.min_file_size_bytes or size > rules.max_file_size_bytes]
    several_bins = sum(files.sizes[i] for i in candidates) > rules.max_file_group_size_bytes
    return (candidates if shared or several_bins else picked), picked


def _unit(key: str, parts: Sequence[tuple[_Files, bool]], rules: RewriteRules, exact: bool) -> ScopeUnit:
    charged: list[int] = []
    rewritten = deletes = outputs = 0
    for files, shared in parts:
        indexes, picked = _charge(files, rules, shared)
        charged.extend(files.sizes[i] for i in indexes)
        if picked:
            rewritten += len(picked)
            deletes += sum(files.deletes[i] for i in picked)
            outputs += max(1, -(-sum(files.sizes[i] for i in picked) // rules.target_file_size_bytes))
    charged.sort(reverse=True)
    return ScopeUnit(key, sum(charged), len(charged), deletes, outputs, rewritten, tuple(charged), exact)


Fields = tuple[PartitionField, ...]


def scope_units(metrics: "TableMetrics", rules: RewriteRules) -> tuple[Fields, list[ScopeUnit], ScopeUnit]:
    """(the scope's fields, the units, the whole table as one unit). Without the specs (a record
    collected before they were) or with a partition key that does not fit its spec: no fields."""
    groups = metrics.data_file_groups or ()
    whole: dict[str, _Files] = {}
    for key, sizes, deletes in groups:  # Iceberg's own groups, for the whole table
        spec_id, partition = data_group_spec(key)
        name = "" if spec_id is not None or all_null_key(partition) else partition
        whole.setdefault(name, _Files()).add(sizes, deletes, rules)
    table = _unit("", [(files, False) for files in whole.values()], rules, True)
    layout = SpecLayout.of(metrics)
    if layout is None:
        return (), [], table
    try:
        return _units(layout, groups, rules) + (table,)
    except (Inexpressible, ValueError, StopIteration):
        return (), [], table


def _units(layout: SpecLayout, groups: Sequence[Any], rules: RewriteRules) -> tuple[Fields, list[ScopeUnit]]:
    parsed = []
    for key, sizes, deletes in groups:
        spec_id, partition = data_group_spec(key)
        spec_id = layout.current if spec_id is None else spec_id
        parsed.append((spec_id, partition_values(partition), sizes, deletes))
    fields = layout.scope_fields({spec_id for spec_id, _, sizes, _ in parsed if sizes})
    if not fields:
        return (), []
    shared_units: set[str] = set()
    members: dict[str, list[tuple[_Files, bool]]] = {}
    shared: dict[str, _Files] = {}
    for spec_id, values, sizes, deletes in parsed:
        key = unit_key(layout.unit_values(spec_id, values, fields))
        if spec_id == layout.current and not all(v is None for v in values):
            files = _Files()
            files.add(sizes, deletes, rules)
            members.setdefault(key, []).append((files, False))
        else:  # the rewrite group of the other specs and the current all-null partition
            shared_units.add(key)
            shared.setdefault(key, _Files()).add(sizes, deletes, rules)
    for key, files in shared.items():  # one unit holding the whole shared group: charged as a group
        members.setdefault(key, []).append((files, len(shared_units) > 1))
    units = []
    for key, parts in members.items():
        try:
            scope_predicate(fields, [key])
            exact = True
        except Inexpressible:
            exact = False
        units.append(_unit(key, parts, rules, exact))
    return fields, units


# -- the choice ---------------------------------------------------------------------------------------


def select_units(units: Sequence[ScopeUnit], cap: int, limit: int = MAX_SCOPED_PARTITIONS) -> list[ScopeUnit]:
    """The expressible units with the most benefit per byte that fit in ``cap`` together (a unit that
    does not fit is passed over for smaller ones behind it), at most ``limit`` of them."""
    chosen: list[ScopeUnit] = []
    used = 0
    for unit in _ranked(units):
        if len(chosen) >= limit:
            break
        if unit.expressible and used + unit.bytes <= cap:
            chosen.append(unit)
            used += unit.bytes
    return chosen


def _ranked(units: Sequence[ScopeUnit]) -> list[ScopeUnit]:
    useful = [u for u in units if u.useful]
    return sorted(useful, key=lambda u: (-u.benefit_per_byte, -u.benefit, u.bytes, u.key))


def files_within(sizes: Sequence[int], cap: int) -> int:
    """How many files ``max-files-to-rewrite`` may allow so that any of them fit in ``cap``: the most
    whose largest ones (``sizes`` is largest first) add up to at most ``cap``."""
    total = count = 0
    for size in sizes:
        if total + size > cap:
            break
        total += size
        count += 1
    return count


def plan_scope(metrics: "TableMetrics", rules: RewriteRules, cap: int,
               limit: int = MAX_SCOPED_PARTITIONS) -> PartitionSelection | None:
    """What a rewrite capped at ``cap`` bytes takes (see the module's doc); None without the full
    tier, when Iceberg would rewrite nothing, or when all it may rewrite fits (no scope needed)."""
    if metrics.data_file_groups is None:
        return None
    fields, units, table = scope_units(metrics, rules)
    if not table.useful or table.bytes <= cap:
        return None
    useful = _ranked(units)
    leftover = max(0, table.bytes - sum(u.bytes for u in useful))  # work only the whole table's groups reach
    common = {"cap": cap, "fields": fields, "spec_id": metrics.partition_spec_id}
    chosen = select_units(useful, cap, limit)
    if chosen:
        rest = [u for u in useful if u not in chosen]
        return PartitionSelection(
            tuple(u.key for u in chosen), sum(u.bytes for u in chosen), sum(u.files for u in chosen),
            len(rest) + bool(leftover), sum(u.bytes for u in rest) + leftover, **common)
    older = None if fields else older_specs_unit(metrics, rules)
    if older is not None and older.unit.useful:  # (2a) the older specs' files first, by their own sizes
        return _older_specs(older, cap, table, common)
    steps = [u for u in useful if u.expressible] + [table]
    for unit in steps:  # (2) one unit, or the whole table, by a file count whose largest files fit
        count = files_within(unit.sizes, cap)
        if count >= 2:
            return _counted(unit, count, useful, table, common)
    smallest = min(steps, key=lambda u: sum(u.sizes[:2]))  # (3) the smallest step that makes progress
    return _counted(smallest, min(2, len(smallest.sizes)), useful, table, common, oversized=True)


def _counted(unit: ScopeUnit, count: int, useful: list[ScopeUnit], table: ScopeUnit, common: dict[str, Any],
             oversized: bool = False) -> PartitionSelection:
    charge = sum(unit.sizes[:count])
    if unit is table:
        partitions, backlog = (), table.bytes - charge
        backlog_units = 1 if backlog > 0 else 0
    else:
        partitions = (unit.key,)
        others = [u for u in useful if u is not unit]
        left = unit.bytes - charge
        backlog = left + sum(u.bytes for u in others) + max(0, table.bytes - sum(u.bytes for u in useful))
        backlog_units = len(others) + (left > 0)
    return PartitionSelection(partitions, charge, count, backlog_units, max(backlog, 0), oversized=oversized,
                              max_files=count, **common)


# -- files of older specs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OlderSpecs:
    """The files of the specs with no field on ``field`` (and the current spec's partitions where it is
    null), selected by excluding the current spec's values of it (``keys``), and what they weigh."""

    field: PartitionField
    keys: tuple[str, ...]
    unit: ScopeUnit


def older_specs_unit(metrics: "TableMetrics", rules: RewriteRules) -> OlderSpecs | None:
    """On a table partitioned after the fact, where no where selects partitions of every spec: the
    older specs' files, which one where selects exactly (scope_predicates.older_spec_predicate) when
    the current spec has an identity field no older live spec has. They are one rewrite group (beside
    the current spec's partitions with that field null), so a file count within them is charged with
    their own largest files, and leaves alone what earlier runs wrote into the current spec's
    partitions. None when no such field or no current-spec value exists."""
    layout = SpecLayout.of(metrics)
    if layout is None or not metrics.data_file_groups:
        return None
    try:
        parsed = [(layout.current if spec_id is None else spec_id, partition_values(partition), sizes, deletes)
                  for key, sizes, deletes in metrics.data_file_groups
                  for spec_id, partition in [data_group_spec(key)]]
    except ValueError:
        return None
    older = {spec_id for spec_id, _, sizes, _ in parsed if sizes} - {layout.current}
    current = layout.specs[layout.current]
    index = next((i for i, f in enumerate(current) if f.kind == "identity" and expressible(f) and not any(
        same_source(g, f) and g.kind != "void" for spec_id in older for g in layout.specs.get(spec_id, ()))), None)
    if index is None or not older:
        return None
    shared, own, keys = _Files(), [], set()
    for spec_id, values, sizes, deletes in parsed:
        if spec_id != layout.current or all(v is None for v in values):
            shared.add(sizes, deletes, rules)
        elif len(values) != len(current):
            return None
        elif values[index] is not None:
            keys.add(unit_key([normalize(current[index], values[index])]))
        elif sizes:  # a partition of the current spec where the field is null: a rewrite group of its own
            files = _Files()
            files.add(sizes, deletes, rules)
            own.append((files, False))
    try:
        older_spec_predicate(current[index], sorted(keys))
    except (Inexpressible, ValueError):
        return None
    return OlderSpecs(current[index], tuple(sorted(keys)), _unit("", [(shared, False), *own], rules, True))


def _older_specs(older: OlderSpecs, cap: int, table: ScopeUnit, common: dict[str, Any]) -> PartitionSelection:
    unit, max_files = older.unit, None
    count = unit.files
    if unit.bytes > cap:  # Iceberg keeps the first files of the group: at most the largest ones
        count = max(files_within(unit.sizes, cap), min(2, len(unit.sizes)))
        max_files = count
    charge = sum(unit.sizes[:count])
    backlog = max(table.bytes - charge, 0)
    return PartitionSelection((), charge, count, int(backlog > 0), backlog, oversized=charge > cap,
                              max_files=max_files, **{**common, "fields": (older.field,)},
                              older_specs_excluding=older.keys)
