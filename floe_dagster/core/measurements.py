"""What was measured about one table: the input of health, trigger conditions and the debt score.

Raw values only (file sizes, timestamps in epoch milliseconds), never counts tied to one policy's
thresholds, so one record serves every policy and can be cached by metadata location.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal, NamedTuple

from floe_dagster.core.statistics import rows_changed_percent

Tier = Literal["summary", "full"]


class ColumnFacts(NamedTuple):
    """One top-level column of the table's current schema, as Iceberg prints its type (``long``,
    ``decimal(10, 2)``, ``struct<street: optional string, ...>``)."""

    name: str
    type: str
    required: bool
    doc: str | None = None


class RefFacts(NamedTuple):
    """One branch or tag other than main as the metadata says (raw values, the same for every policy;
    core/refs.py says how ``pinned_*`` are computed)."""

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


@dataclass(frozen=True)
class TableMetrics:
    qualified_name: str  # catalog.namespace.table
    metadata_location: str | None
    tier: Tier  # "summary": metadata file and snapshot summary only; "full": manifests read too
    collected_at_ms: int

    data_file_count: int = 0
    total_data_bytes: int = 0
    record_count: int = 0
    # Full tier only (None in the summary tier): every live data file's size in bytes.
    data_file_sizes: tuple[int, ...] | None = None

    delete_file_count: int = 0  # position + equality (the summary counts them together)
    position_delete_file_count: int | None = None  # full tier only
    equality_delete_file_count: int | None = None  # full tier only

    snapshot_count: int = 0
    oldest_snapshot_ms: int | None = None
    newest_snapshot_ms: int | None = None  # also the last write
    # The newest snapshot another writer committed (operation not ``replace``: append, overwrite,
    # delete; floe's own commits are all ``replace``), and its operation: the quiet period
    # (core/quiet.py). Both tiers, from the metadata file; None: no such snapshot is retained.
    newest_foreign_commit_ms: int | None = None
    newest_foreign_commit_operation: str | None = None

    manifest_count: int | None = None  # full tier only
    manifest_total_bytes: int | None = None  # full tier only

    # Full tier only: partitions (partition value + spec id) holding at least one live data file; an
    # unpartitioned table with data has 1, an empty table 0.
    partition_count: int | None = None
    max_files_per_partition: int | None = None  # full tier only

    current_snapshot_id: int | None = None
    # Both tiers, from the metadata file: the newest table statistics file of the current lineage
    # (core/statistics.py), the commits since it and the rows they added or deleted (None: no statistics
    # file covers the lineage), and the newest partition statistics file's snapshot.
    statistics_snapshot_id: int | None = None
    statistics_snapshots_behind: int | None = None
    statistics_rows_changed: int | None = None
    partition_statistics_snapshot_id: int | None = None
    # Both tiers, from the metadata file: the metadata.json files Iceberg tracks (the current one and its
    # metadata log), and how many were ever written, from the version number in the current file's name
    # (``00042-<uuid>.metadata.json``: Java's and PyIceberg's catalogs number each commit; ``v42.metadata.json``
    # for Hadoop tables); None when the name carries no number. Without
    # ``write.metadata.delete-after-commit.enabled`` every file written stays on storage until orphan
    # cleanup removes the untracked ones.
    metadata_files_tracked: int | None = None
    metadata_files_written: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    location: str | None = None  # the table's base location (``file:/...``, ``s3://...``)
    columns: tuple[ColumnFacts, ...] | None = None  # the current schema's columns (None: not read)

    # Full tier only: the inputs of the byte estimates (core/estimates.py) and of partition-scoped
    # rewrites (core/partition_scope.py), in scan order. Raw numbers, so they hold for every policy.
    # data_file_groups: (group key, data file sizes, ((index into sizes, delete files applying, rows
    # removed by file-scoped position deletes, record count), ...) for files with deletes only), one
    # group per (spec id, partition): see :func:`data_group_key` (Iceberg's rewrite planner puts every
    # file of another spec in the current spec's all-null partition: core/estimates.py merges them).
    data_file_groups: tuple[tuple[str, tuple[int, ...], tuple[tuple[int, int, int, int], ...]], ...] | None = None
    # position_delete_groups: (partition key, position delete file sizes).
    position_delete_groups: tuple[tuple[str, tuple[int, ...]], ...] | None = None

    # The branches and tags other than main, with what each alone keeps alive (core/refs.py; bytes in
    # the full tier only). None: not measured (a record cached before refs were).
    refs: tuple[RefFacts, ...] | None = None

    # Both tiers, from the metadata file: the default partition spec's id and every spec, each as (spec
    # id, its fields as (source column id, source column path in the current schema or None when the
    # schema no longer has it, transform as Iceberg prints it, the source column's type or "")).
    # None: not measured (a record cached before specs were).
    partition_spec_id: int | None = None
    partition_specs: tuple[tuple[int, tuple[tuple[int, str | None, str, str], ...]], ...] | None = None

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

    @cached_property
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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("data_file_sizes", "data_file_groups", "position_delete_groups", "columns", "refs",
                    "partition_specs"):
            data[key] = _lists(data[key])
        return data

    def report_json(self) -> dict[str, Any]:
        """For reports and asset metadata: the record without its per-file lists (which grow with the
        table), its columns (asset metadata has them as Dagster's column schema) and its refs (the
        health record lists them under ``refs``), plus the derived values."""
        data = self.to_json()
        for key in ("data_file_sizes", "data_file_groups", "position_delete_groups", "columns", "refs",
                    "partition_specs", "partition_spec_id"):
            del data[key]
        data.update(
            min_file_bytes=self.min_file_bytes,
            max_file_bytes=self.max_file_bytes,
            avg_file_bytes=self.avg_file_bytes,
            delete_file_ratio=self.delete_file_ratio,
            partition_skew=self.partition_skew,
            statistics_rows_changed_percent=self.statistics_rows_changed_percent,
        )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TableMetrics":
        data = dict(data)
        for key in ("data_file_sizes", "data_file_groups", "position_delete_groups", "partition_specs"):
            data[key] = _tuples(data.get(key))
        columns = data.get("columns")
        data["columns"] = tuple(ColumnFacts(*column) for column in columns) if columns is not None else None
        refs = data.get("refs")
        data["refs"] = tuple(RefFacts(*ref) for ref in refs) if refs is not None else None
        return cls(**data)


def format_bytes(value: int | float) -> str:
    """A size as people read it: ``512 B``, ``1.4 GiB``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


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


def _lists(value: Any) -> Any:
    """Nested tuples as nested lists (the JSON shape)."""
    return [_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tuples(value: Any) -> Any:
    """Nested lists back into nested tuples (the record's shape, hashable and comparable)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (tuple, list)) else value
