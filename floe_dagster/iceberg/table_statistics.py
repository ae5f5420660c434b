"""A table's statistics files as its metadata registers them (PyIceberg only, no file read): how far
the newest one lags (health), what a ``COMPUTE_STATISTICS`` run finds (the engine's no-change rule)
and what it left (the materialization)."""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import ancestors_of
from pyiceberg.table.statistics import StatisticsFile

from floe_dagster.core.facts.statistics import LineageSnapshot, StatisticsState, statistics_lag
from floe_dagster.iceberg.snapshot_summary import summary_total

NDV_PROPERTY = "ndv"  # the property Iceberg's theta-sketch blobs carry their distinct-value estimate in
# A commit summary's counts of the rows it changed, in LineageSnapshot's order (core/facts/statistics.py).
_ROWS_CHANGED_KEYS = ("added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")


def _lineage(metadata: TableMetadata) -> list[LineageSnapshot]:
    found = []
    for snapshot in ancestors_of(metadata.current_snapshot(), metadata):
        summary = snapshot.summary
        operation = getattr(summary.operation, "value", str(summary.operation)) if summary is not None else "unknown"
        found.append(LineageSnapshot(snapshot.snapshot_id, operation, *(
            summary_total(summary, key, 0) or 0 for key in _ROWS_CHANGED_KEYS)))
    return found


def _newest_partition_statistics(metadata: TableMetadata, lineage: list[LineageSnapshot]) -> int | None:
    return statistics_lag(lineage, (f.snapshot_id for f in metadata.partition_statistics)).snapshot_id


def statistics_fields(metadata: TableMetadata) -> dict[str, object]:
    """The statistics fields of a :class:`TableMetrics` record."""
    lineage = _lineage(metadata)
    lag = statistics_lag(lineage, (f.snapshot_id for f in metadata.statistics))
    return {
        "statistics_snapshot_id": lag.snapshot_id,
        "statistics_snapshots_behind": lag.snapshots_behind,
        "statistics_rows_changed": lag.rows_changed,
        "partition_statistics_snapshot_id": _newest_partition_statistics(metadata, lineage),
    }


def statistics_file(metadata: TableMetadata, snapshot_id: int | None) -> StatisticsFile | None:
    return next((f for f in metadata.statistics if f.snapshot_id == snapshot_id), None)


def _column_names(metadata: TableMetadata, field_ids: list[int]) -> list[str]:
    schema = metadata.schema()
    return [schema.find_column_name(field_id) or str(field_id) for field_id in field_ids]  # id: a dropped column


def unknown_columns(metadata: TableMetadata, columns: tuple[str, ...] | None) -> list[str]:
    """The policy's ``columns`` the table's current schema lacks (checked before Spark starts)."""
    missing = []
    for column in columns or ():
        try:
            metadata.schema().find_field(column)
        except ValueError:
            missing.append(column)
    return missing


def statistics_state(metadata: TableMetadata) -> StatisticsState:
    """What a ``COMPUTE_STATISTICS`` run starts from."""
    lineage = _lineage(metadata)
    newest = statistics_lag(lineage, (f.snapshot_id for f in metadata.statistics)).snapshot_id
    found = statistics_file(metadata, newest)
    columns = None
    if found is not None:
        columns = frozenset(name for blob in found.blob_metadata for name in _column_names(metadata, blob.fields))
    current = metadata.current_snapshot()
    return StatisticsState(
        current_snapshot_id=current.snapshot_id if current is not None else None,
        partitioned=not metadata.spec().is_unpartitioned(),
        statistics_snapshot_id=newest,
        statistics_columns=columns,
        partition_statistics_snapshot_id=_newest_partition_statistics(metadata, lineage),
    )


def statistics_facts(metadata: TableMetadata, snapshot_id: int | None) -> dict[str, object]:
    """The current snapshot's statistics files, for a run's materialization: the Puffin file's path, its
    columns with each one's NDV (the sketches' estimate, from the metadata: no file read), the partition
    statistics file's path. Empty where there is none."""
    facts: dict[str, object] = {}
    found = statistics_file(metadata, snapshot_id)
    if found is not None:
        ndv: dict[str, object] = {}
        for blob in found.blob_metadata:
            value = (blob.properties or {}).get(NDV_PROPERTY)
            for name in _column_names(metadata, blob.fields):
                ndv[name] = int(value) if value is not None and str(value).isdigit() else value
        facts.update(statistics_file=found.statistics_path, statistics_snapshot_id=found.snapshot_id,
                     statistics_columns=sorted(ndv), ndv=ndv)
    partition = next((f for f in metadata.partition_statistics if f.snapshot_id == snapshot_id), None)
    if partition is not None:
        facts["partition_statistics_file"] = partition.statistics_path
    return facts
