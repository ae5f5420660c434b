"""Table statistics (``COMPUTE_STATISTICS``): how far the newest statistics file lags the current
snapshot, and what a run has left to compute.

Iceberg keeps column statistics (NDV sketches in a Puffin file, from ``compute_table_stats``) and
partition statistics (a Parquet file, from ``compute_partition_stats``) per snapshot, registered in the
table metadata's ``statistics`` and ``partition-statistics``. Spark's planner reads only the file of the
snapshot it scans, so statistics help while they are the current snapshot's; every commit after them
makes them one snapshot staler, and rows written since make their NDVs less true.

Rows changed since the statistics count what each commit's summary says it added and deleted: whole
rows (``added-records``, ``deleted-records``, a copy-on-write change) and, on merge-on-read tables, the
rows its delete files delete (``added-position-deletes``, one a row; ``added-equality-deletes``, one a
delete record, each deleting every row with its values, so at least one row). A merge-on-read DELETE
or UPDATE writes no data file for the rows it removes: without the delete files it would count none.

Pure: the snapshots and statistics files are passed in as plain values (iceberg/ reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class LineageSnapshot:
    """One snapshot of the current snapshot's ancestry, as the lag needs it."""

    snapshot_id: int
    operation: str  # append, overwrite, delete, replace (a rewrite: rows unchanged)
    rows_added: int = 0  # the summary's added-records
    rows_deleted: int = 0  # the summary's deleted-records (rows of the data files the commit removed)
    position_deletes_added: int = 0  # the summary's added-position-deletes (merge-on-read: one a deleted row)
    equality_deletes_added: int = 0  # the summary's added-equality-deletes (merge-on-read: delete records)

    @property
    def rows_changed(self) -> int:
        """Rows the commit added or deleted, by data files or by delete files; a rewrite (``replace``:
        compaction, rewritten delete files) changes none."""
        if self.operation == "replace":
            return 0
        return self.rows_added + self.rows_deleted + self.position_deletes_added + self.equality_deletes_added


@dataclass(frozen=True)
class StatisticsLag:
    """The newest statistics file of the current lineage, and the snapshots and rows since it."""

    snapshot_id: int | None  # None: no statistics file covers a snapshot of the current lineage
    snapshots_behind: int | None  # commits after it, up to and including the current snapshot
    rows_changed: int | None  # rows added or deleted by those commits, delete files' rows too (rewrites change none)


NO_STATISTICS = StatisticsLag(None, None, None)


def statistics_lag(lineage: Sequence[LineageSnapshot], statistics_snapshot_ids: Iterable[int]) -> StatisticsLag:
    """``lineage``: the current snapshot first, then its parent, and so on. A statistics file of a
    snapshot outside the lineage (rolled back, or on another branch) describes none of its data."""
    covered = set(statistics_snapshot_ids)
    rows = 0
    for behind, snapshot in enumerate(lineage):
        if snapshot.snapshot_id in covered:
            return StatisticsLag(snapshot.snapshot_id, behind, rows)
        rows += snapshot.rows_changed
    return NO_STATISTICS


def rows_changed_percent(rows_changed: int | None, record_count: int) -> float | None:
    """Rows changed since the statistics, as a percentage of the rows the table holds now (100 at most
    a change as large as the table; above 100 when more changed than is left)."""
    if rows_changed is None:
        return None
    if record_count <= 0:
        return 100.0 if rows_changed else 0.0
    return rows_changed * 100.0 / record_count


@dataclass(frozen=True)
class StatisticsState:
    """What the table holds when a ``COMPUTE_STATISTICS`` run starts (read from its metadata)."""

    current_snapshot_id: int | None
    partitioned: bool  # the current spec partitions the table (compute_partition_stats refuses others)
    statistics_snapshot_id: int | None  # the newest table statistics file's snapshot (see statistics_lag)
    statistics_columns: frozenset[str] | None  # the columns that file has sketches for
    partition_statistics_snapshot_id: int | None  # the newest partition statistics file's snapshot


@dataclass(frozen=True)
class StatisticsWork:
    """The calls a run makes; neither: the statistics are already the current snapshot's."""

    table_stats: bool
    partition_stats: bool
    reasons: tuple[str, ...]

    @property
    def nothing(self) -> bool:
        return not self.table_stats and not self.partition_stats


def statistics_work(state: StatisticsState, columns: Sequence[str] | None, partition_stats: bool) -> StatisticsWork:
    """Table statistics unless the current snapshot has a file with every wanted column; partition
    statistics (when wanted) only on a partitioned table, unless the current snapshot has them."""
    current = state.current_snapshot_id
    if current is None:
        return StatisticsWork(False, False, ("the table has no snapshot: nothing to compute",))
    reasons = []
    table = state.statistics_snapshot_id != current
    if table:
        reasons.append(f"no table statistics for the current snapshot {current}")
    elif columns and state.statistics_columns is not None and not set(columns) <= state.statistics_columns:
        table = True
        missing = ", ".join(sorted(set(columns) - state.statistics_columns))
        reasons.append(f"the current snapshot's statistics lack {missing}")
    partitions = partition_stats and state.partitioned and state.partition_statistics_snapshot_id != current
    if partitions:
        reasons.append(f"no partition statistics for the current snapshot {current}")
    if not table and not partitions:
        reasons.append(f"statistics are already current for snapshot {current}")
    return StatisticsWork(table, partitions, tuple(reasons))


__all__ = [
    "LineageSnapshot", "StatisticsLag", "NO_STATISTICS", "statistics_lag", "rows_changed_percent",
    "StatisticsState", "StatisticsWork", "statistics_work",
]
