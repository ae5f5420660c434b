"""The stored facts read from the table's metadata file alone (both tiers, no other read), and the summary
tier's counts from the current snapshot's summary (the full tier counts the manifests instead:
fact_reducers/manifests.py)."""

from __future__ import annotations

from pyiceberg.manifest import ManifestContent

from floe_dagster.core.facts.table_facts import SUMMARY
from floe_dagster.iceberg.catalog import schema_columns
from floe_dagster.iceberg.fact_reducers import MetadataRead, reduces
from floe_dagster.iceberg.metadata_reduction import (
    measured_refs,
    metadata_files_written,
    newest_foreign_commit,
    partition_specs,
)
from floe_dagster.iceberg.snapshot_summary import (
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_FILE_SIZE,
    TOTAL_RECORDS,
    summary_total,
)
from floe_dagster.iceberg.table_statistics import statistics_fields


@reduces("snapshot_count", "oldest_snapshot_ms", "newest_snapshot_ms", "current_snapshot_id")
def snapshots(read: MetadataRead) -> dict[str, object]:
    snapshots, current = read.metadata.snapshots, read.metadata.current_snapshot()
    return {
        "snapshot_count": len(snapshots),
        "oldest_snapshot_ms": min((s.timestamp_ms for s in snapshots), default=None),
        "newest_snapshot_ms": max((s.timestamp_ms for s in snapshots), default=None),
        "current_snapshot_id": current.snapshot_id if current else None,
    }


@reduces("newest_foreign_commit_ms", "newest_foreign_commit_operation")
def foreign_commit(read: MetadataRead) -> dict[str, object]:
    foreign_ms, foreign_operation = newest_foreign_commit(read.metadata.snapshots)
    return {"newest_foreign_commit_ms": foreign_ms, "newest_foreign_commit_operation": foreign_operation}


@reduces("metadata_files_tracked", "metadata_files_written")
def metadata_files(read: MetadataRead) -> dict[str, object]:
    return {"metadata_files_tracked": len(read.metadata.metadata_log) + 1,
            "metadata_files_written": metadata_files_written(read.metadata_location)}


@reduces("properties", "location", "columns")
def table(read: MetadataRead) -> dict[str, object]:
    metadata = read.metadata
    return {"properties": dict(metadata.properties), "location": metadata.location,
            "columns": schema_columns(metadata.schema())}


@reduces("refs")
def refs(read: MetadataRead) -> dict[str, object]:
    return {"refs": measured_refs(read.metadata, read.collected_at_ms, read.pinned_files)}


@reduces("partition_spec_id", "partition_specs")
def specs(read: MetadataRead) -> dict[str, object]:
    return {"partition_spec_id": read.metadata.default_spec_id, "partition_specs": partition_specs(read.metadata)}


@reduces("statistics_snapshot_id", "statistics_snapshots_behind", "statistics_rows_changed",
         "partition_statistics_snapshot_id")
def statistics(read: MetadataRead) -> dict[str, object]:
    return statistics_fields(read.metadata)


@reduces("data_file_count", "total_data_bytes", "record_count", "delete_file_count", tiers=(SUMMARY,))
def summary_counts(read: MetadataRead) -> dict[str, object]:
    """The current snapshot's summary totals. The summary counts delete files together, and its
    ``total-files-size`` includes the delete files' bytes. When it lacks totals (some writers omit them)
    and the read has a FileIO, counts come from the manifest list instead."""
    current = read.metadata.current_snapshot()
    summary = current.summary if current is not None else None
    keys = (TOTAL_DATA_FILES, TOTAL_DELETE_FILES, TOTAL_RECORDS, TOTAL_FILE_SIZE)
    totals = {key: summary_total(summary, key) for key in keys}
    lacking = any(value is None for key, value in totals.items() if key != TOTAL_FILE_SIZE)
    if current is not None and read.io is not None and lacking:
        data_files = delete_files = records = 0
        for manifest in current.manifests(read.io):
            live = (manifest.added_files_count or 0) + (manifest.existing_files_count or 0)
            if manifest.content == ManifestContent.DATA:
                data_files += live
                records += (manifest.added_rows_count or 0) + (manifest.existing_rows_count or 0)
            else:
                delete_files += live
        totals.update({TOTAL_DATA_FILES: data_files, TOTAL_DELETE_FILES: delete_files, TOTAL_RECORDS: records})
    return {
        "data_file_count": totals[TOTAL_DATA_FILES] or 0,
        "total_data_bytes": totals[TOTAL_FILE_SIZE] or 0,
        "record_count": totals[TOTAL_RECORDS] or 0,
        "delete_file_count": totals[TOTAL_DELETE_FILES] or 0,
    }
