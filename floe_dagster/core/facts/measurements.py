"""What was measured about one table: the input of health, trigger conditions and the debt score.

Raw values only (file sizes, timestamps in epoch milliseconds), never counts tied to one policy's
thresholds, so one record serves every policy and can be cached by metadata location.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, NamedTuple

from floe_dagster.core.basics.quick_records import kept_property
from floe_dagster.core.facts.fact_catalogue import BUILTIN, views
from floe_dagster.core.facts.statistics import rows_changed_percent
from floe_dagster.core.facts.table_facts import COLUMNS, NESTED, PLAIN, REFS, Tier, format_bytes

__all__ = ["ColumnFacts", "RefFacts", "TableMetrics", "Tier", "data_group_key", "data_group_spec", "format_bytes"]


class ColumnFacts(NamedTuple):
    """One top-level column of the table's current schema, as Iceberg prints its type (``long``,
    ``decimal(10, 2)``, ``struct<street: optional string, ...>``)."""

    name: str
    type: str
    required: bool
    doc: str | None = None


class RefFacts(NamedTuple):
    """One branch or tag other than main as the metadata says (raw values, the same for every policy;
    core/facts/ref_pins.py says how ``pinned_*`` are computed)."""

    name: str
    type: str  # branch or tag
    snapshot_id: int
    head_timestamp_ms: int | None  # None: its snapshot is missing from the metadata
    max_ref_age_ms: int | None  # the ref's own settings (None: the table's default applies)
    max_snapshot_age_ms: int | None
    min_snapshots_to_keep: int | None
    pinned_snapshots: int  # the snapshots it alone keeps beyond main's retention
    pinned_files: int | None = None  # full tier only: the files only those snapshots reference ...
    pinned_bytes: int | None = None  # ... and their bytes


def _with_fact_fields(cls: type) -> type:
    """Every built-in stored fact of core/facts/fact_catalogue.py as a field of ``cls``, in the catalogue's order,
    with its default, then ``more_facts`` (the facts declared elsewhere): made before ``@dataclass`` reads the
    class, so the fields are plain dataclass attributes (the planner reads them for every table and tick)."""
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    for fact in BUILTIN:
        if fact.stored:
            annotations[fact.name] = fact.type
            setattr(cls, fact.name, field(default_factory=fact.default_factory) if fact.default_factory
                    else fact.default)
    annotations["more_facts"] = "Mapping[str, Any]"
    cls.more_facts = field(default_factory=dict)
    cls.__annotations__ = annotations
    return cls


@dataclass(frozen=True)
@_with_fact_fields
class TableMetrics:
    """One table's stored facts (core/facts/fact_catalogue.py declares each: its type, tier and meaning), after
    these four. A full-tier fact is its default (None) in the summary tier. ``more_facts``: the values of the
    facts an operation kind declared (:func:`~floe_dagster.core.facts.fact_catalogue.declare`), by name, read as
    attributes too."""

    qualified_name: str  # catalog.namespace.table
    metadata_location: str | None
    tier: Tier  # "summary": metadata file and snapshot summary only; "full": manifests read too
    collected_at_ms: int

    def __getattr__(self, name: str) -> Any:
        """A declared fact beyond the built-in ones (called only for names the class does not have)."""
        fact = views().by_name.get(name) if not name.startswith("_") else None
        if fact is None or not fact.stored or name == "more_facts":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.more_facts.get(name, fact.default_factory() if fact.default_factory else fact.default)

    @property
    def delete_file_ratio(self) -> float:
        return self.delete_file_count / self.data_file_count if self.data_file_count else 0.0

    @property
    def partition_skew(self) -> float | None:
        """Max over average data files per partition (1.0 means even)."""
        if not self.partition_count or self.max_files_per_partition is None or not self.data_file_count:
            return None
        return self.max_files_per_partition / (self.data_file_count / self.partition_count)

    @property
    def statistics_rows_changed_percent(self) -> float | None:
        return rows_changed_percent(self.statistics_rows_changed, self.record_count)

    @kept_property  # not a field: equality and asdict ignore it; every tick's partition scoping reads it
    def data_bytes_at_most(self) -> int:
        """No data-file rewrite of the table takes more: its data bytes (a summary-tier estimate, or one that fails),
        or its recorded files' sizes summed (a full-tier estimate selects among them), whichever is larger."""
        groups = self.data_file_groups
        recorded = 0 if groups is None else sum(sum(sizes) for _, sizes, _ in groups)
        return max(self.total_data_bytes, recorded)

    @kept_property  # not a field: equality and asdict ignore it
    def _sorted_sizes(self) -> list[int] | None:
        """The data file sizes in order, made once per (immutable) record: the health collector keeps one
        record per metadata location, and health, every operation's trigger conditions and every tick
        count its small and large files again, each a binary search here."""
        return sorted(self.data_file_sizes) if self.data_file_sizes is not None else None

    @property
    def min_file_bytes(self) -> int | None:
        return self._sorted_sizes[0] if self.data_file_sizes else None

    @property
    def max_file_bytes(self) -> int | None:
        return self._sorted_sizes[-1] if self.data_file_sizes else None

    @property
    def avg_file_bytes(self) -> float | None:
        return self.total_data_bytes / self.data_file_count if self.data_file_count else None

    def small_file_count(self, small_below_bytes: int) -> int | None:
        """Data files smaller than ``small_below_bytes``."""
        return bisect_left(self._sorted_sizes, small_below_bytes) if self.data_file_sizes is not None else None

    def large_file_count(self, large_above_bytes: int) -> int | None:
        """Data files larger than ``large_above_bytes``."""
        if self.data_file_sizes is None:
            return None
        return len(self._sorted_sizes) - bisect_right(self._sorted_sizes, large_above_bytes)

    @staticmethod
    def age_days(then_ms: int | None, now_ms: int) -> float | None:
        return None if then_ms is None else max(0.0, (now_ms - then_ms) / 86_400_000)

    @classmethod
    def measured(cls, qualified_name: str, metadata_location: str | None, tier: Tier, collected_at_ms: int,
                 facts: Mapping[str, Any]) -> "TableMetrics":
        """A record of stored facts by name (the iceberg layer's reducers' values)."""
        declared = views().declared_names
        if not declared:
            return cls(qualified_name, metadata_location, tier, collected_at_ms, **facts)
        return cls(qualified_name, metadata_location, tier, collected_at_ms,
                   **{k: v for k, v in facts.items() if k not in declared},
                   more_facts={k: v for k, v in facts.items() if k in declared})

    def to_json(self) -> dict[str, object]:
        """The record as the health cache keeps it: the four above, then every stored fact, in the catalogue's
        order."""
        data = asdict(self)
        more = data.pop("more_facts")
        for fact in views().stored:
            value = data[fact.name] if fact.name in data else more.get(fact.name, getattr(self, fact.name))
            data[fact.name] = value if fact.shape == PLAIN else _lists(value)
        return data

    def report_json(self) -> dict[str, object]:
        """For reports and asset metadata: the stored facts the record's report keeps (not the per-file lists,
        which grow with the table, its columns, which asset metadata has as Dagster's column schema, nor its
        refs, which the health record lists under ``refs``), then the computed facts it adds."""
        data = self.to_json()
        facts = views()
        for fact in facts.stored:
            if not fact.in_report:
                del data[fact.name]
        for fact in facts.report_extra:
            data[fact.name] = fact.measure(self, None)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TableMetrics":
        data = dict(data)
        facts = views()
        more = {f.name: _DECODE[f.shape](data.pop(f.name)) for f in facts.declared_stored if f.name in data}
        for fact in facts.stored:
            if fact.shape != PLAIN and fact.name not in more:
                data[fact.name] = _DECODE[fact.shape](data.get(fact.name))
        return cls(**data, more_facts=more)


def data_group_key(spec_id: int, partition_key: str, current_spec_id: int) -> str:
    """The key of the data files of one (spec, partition): the partition key (a JSON list of the spec's
    partition values) for the default spec, ``<spec id>:<partition key>`` for any other, so a file of an
    older spec is never taken for a partition of the current one."""
    return partition_key if spec_id == current_spec_id else f"{spec_id}:{partition_key}"


def data_group_spec(key: str) -> tuple[int | None, str]:
    """A group key back as (spec id, partition key); spec id None: the default spec."""
    if key.startswith("["):
        return None, key
    spec, _, partition = key.partition(":")
    return int(spec), partition


def _lists(value: object) -> object:
    """Nested tuples as nested lists (the JSON shape)."""
    return [_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tuples(value: object) -> object:
    """Nested lists back into nested tuples (the record's shape, hashable and comparable)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (tuple, list)) else value


# How each JSON shape (core/facts/table_facts.py) is read back.
_DECODE: dict[str, Callable[[Any], Any]] = {
    PLAIN: lambda value: value,
    NESTED: _tuples,
    COLUMNS: lambda value: tuple(ColumnFacts(*column) for column in value) if value is not None else None,
    REFS: lambda value: tuple(RefFacts(*ref) for ref in value) if value is not None else None,
}
