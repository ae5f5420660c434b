"""The units of a partition-scoped rewrite (core/rewrites/partition_scope.py chooses among them): the
table's partition specs as a scope needs them, the files of each rewrite group with the rules Iceberg's
bin-pack applies to them, what each unit is charged (at most what Iceberg rewrites of it) and gives, and
the choice of whole units under a cap. Pure (no PyIceberg, Spark or Dagster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.rewrites.estimates import _delete_rule_hit, all_null_key, partition_group_indexes
from floe_dagster.core.facts.measurements import data_group_spec
from floe_dagster.core.rewrites.scope_values import PartitionField, partition_values
from floe_dagster.core.rewrites.scope_predicates import (
    TEMPORAL_TRANSFORMS,
    Inexpressible,
    derive,
    expressible,
    normalize,
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
class FileSet:
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


def _charge(files: FileSet, rules: RewriteRules, shared: bool) -> tuple[list[int], list[int]]:
    """(the files charged, the files the bin-pack rewrites) of one rewrite group, or of a unit's share
    of the shared group (``shared``: charged with every file the size and delete rules pick)."""
    picked = [i for group in partition_group_indexes(files.sizes, files.hits, rules) for i in group]
    candidates = [i for i, size in enumerate(files.sizes) if rules.rewrite_all or files.hits[i]
                  or size < rules.min_file_size_bytes or size > rules.max_file_size_bytes]
    several_bins = sum(files.sizes[i] for i in candidates) > rules.max_file_group_size_bytes
    return (candidates if shared or several_bins else picked), picked


def unit_of(key: str, parts: Sequence[tuple[FileSet, bool]], rules: RewriteRules, exact: bool) -> ScopeUnit:
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
    whole: dict[str, FileSet] = {}
    for key, sizes, deletes in groups:  # Iceberg's own groups, for the whole table
        spec_id, partition = data_group_spec(key)
        name = "" if spec_id is not None or all_null_key(partition) else partition
        whole.setdefault(name, FileSet()).add(sizes, deletes, rules)
    table = unit_of("", [(files, False) for files in whole.values()], rules, True)
    layout = SpecLayout.of(metrics)
    if layout is None:
        return (), [], table
    try:
        return group_units(layout, groups, rules) + (table,)
    except (Inexpressible, ValueError, StopIteration):
        return (), [], table


def group_units(layout: SpecLayout, groups: Sequence[Any], rules: RewriteRules) -> tuple[Fields, list[ScopeUnit]]:
    parsed = []
    for key, sizes, deletes in groups:
        spec_id, partition = data_group_spec(key)
        spec_id = layout.current if spec_id is None else spec_id
        parsed.append((spec_id, partition_values(partition), sizes, deletes))
    fields = layout.scope_fields({spec_id for spec_id, _, sizes, _ in parsed if sizes})
    if not fields:
        return (), []
    shared_units: set[str] = set()
    members: dict[str, list[tuple[FileSet, bool]]] = {}
    shared: dict[str, FileSet] = {}
    for spec_id, values, sizes, deletes in parsed:
        key = unit_key(layout.unit_values(spec_id, values, fields))
        if spec_id == layout.current and not all(v is None for v in values):
            files = FileSet()
            files.add(sizes, deletes, rules)
            members.setdefault(key, []).append((files, False))
        else:  # the rewrite group of the other specs and the current all-null partition
            shared_units.add(key)
            shared.setdefault(key, FileSet()).add(sizes, deletes, rules)
    for key, files in shared.items():  # one unit holding the whole shared group: charged as a group
        members.setdefault(key, []).append((files, len(shared_units) > 1))
    units = []
    for key, parts in members.items():
        try:
            scope_predicate(fields, [key])
            exact = True
        except Inexpressible:
            exact = False
        units.append(unit_of(key, parts, rules, exact))
    return fields, units


# -- the choice ---------------------------------------------------------------------------------------


def select_units(units: Sequence[ScopeUnit], cap: int, limit: int = MAX_SCOPED_PARTITIONS) -> list[ScopeUnit]:
    """The expressible units with the most benefit per byte that fit in ``cap`` together (a unit that
    does not fit is passed over for smaller ones behind it), at most ``limit`` of them."""
    chosen: list[ScopeUnit] = []
    used = 0
    for unit in ranked(units):
        if len(chosen) >= limit:
            break
        if unit.expressible and used + unit.bytes <= cap:
            chosen.append(unit)
            used += unit.bytes
    return chosen


def ranked(units: Sequence[ScopeUnit]) -> list[ScopeUnit]:
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


Parsed = list[tuple[int, list[object], Sequence[int], Sequence[Any], str]]


def parsed_groups(layout: SpecLayout, groups: Sequence[Any]) -> Parsed:
    """The collector's groups as (spec id, partition values, sizes, deletes, key); raises ValueError for
    a key that is no JSON list."""
    parsed: Parsed = []
    for key, sizes, deletes in groups:
        spec_id, partition = data_group_spec(key)
        spec_id = layout.current if spec_id is None else spec_id
        parsed.append((spec_id, partition_values(partition), sizes, deletes, key))
    return parsed
