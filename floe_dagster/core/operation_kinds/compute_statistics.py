"""COMPUTE_STATISTICS (floe-dagster's, not Floe's): Iceberg's ``compute_table_stats`` (NDV sketches in a
Puffin file) and, on partitioned tables, ``compute_partition_stats``, for the current snapshot; the
policy's ``computeStatistics``. Ordered after the other kinds, so that the statistics describe the files
they left (core/facts/statistics.py: what a run has left to compute)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from floe_dagster.core.operation_config import OperationConfig, boolean, option
from floe_dagster.core.operation_kinds.spec import OperationSpec
from floe_dagster.core.basics.validation import Location, get_str_list


def _columns(at: Location, raw: Mapping[str, object], key: str) -> tuple[str, ...] | None:
    """A non-empty list of column names (``a``, ``nested.field``), each once."""
    columns = get_str_list(at, raw, key, None)
    if columns is None:
        return None
    if not columns:
        at.child(key).error("must name at least one column; leave it out to compute statistics of every column")
    seen: set[str] = set()
    for index, column in enumerate(columns):
        name = column.strip()
        if any(ch in name for ch in ",()`'\""):
            at.child(key).child(index).error(f"{column!r} is not a column name")
        elif name in seen:
            at.child(key).child(index).error(f"{column!r} is listed twice")
        seen.add(name)
    return tuple(c.strip() for c in columns)


@dataclass(frozen=True)
class ComputeStatisticsConfig(OperationConfig):
    columns: tuple[str, ...] | None = option(_columns)  # compute_table_stats' columns (unset: every column)
    # compute_partition_stats too (unset: yes); only ever on partitioned tables, where Iceberg refuses
    # nothing (on an unpartitioned table it fails, so the engine never calls it there).
    partition_stats: bool | None = option(boolean)

    @property
    def wants_partition_stats(self) -> bool:
        return self.partition_stats is not False


class ComputeStatistics(OperationSpec):
    name = "COMPUTE_STATISTICS"
    policy_key = "computeStatistics"
    procedure = "compute_table_stats"  # and, on a partitioned table, compute_partition_stats
    order = 60
    config_type = ComputeStatisticsConfig
    no_change = ("`COMPUTE_STATISTICS` changed nothing when the current snapshot already had its statistics (no "
                 "file written; [Operations](operations.md), \"Table statistics\").")
    docs_row = (
        "| `COMPUTE_STATISTICS` (floe-dagster's, not Floe's) | `compute_table_stats`, and "
        "`compute_partition_stats` on partitioned tables | `computeStatistics`: `columns` (default: every column), "
        "`partitionStats` (default true; only ever on partitioned tables). See \"Table statistics\" below |")

    def defaults(self) -> Mapping[str, object]:
        return {"partitionStats": True}

    def changed(self, numbers: Mapping[str, int]) -> bool:
        return bool(numbers["statistics_files_written"] or numbers["partition_statistics_files_written"])


SPEC = ComputeStatistics()
