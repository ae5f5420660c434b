"""What the reliability tests check, the way a user would: a table's content as an order-independent
checksum, every file any snapshot references, and small real lakehouses to break."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa
from pyiceberg.table import Table

from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, _write_files, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.settings import Settings


def checksum(data: pa.Table) -> tuple[int, int]:
    """(rows, sum of per-row hashes mod 2^64): equal for the same multiset of rows in any order and
    any file layout, different when a row is lost, duplicated or changed."""
    hashes = pd.util.hash_pandas_object(data.to_pandas(), index=False).to_numpy()
    return data.num_rows, int(hashes.sum(dtype="uint64"))


def create_fragmented_table(settings: Settings, table: TableName, files: int, rows_per_file: int = 10) -> Table:
    """A table of ``files`` small data files in one snapshot (ids 0 … files × rows_per_file − 1)."""
    catalog = open_catalog(settings.catalog)
    if table.namespace not in {tuple(n) for n in catalog.list_namespaces()}:
        catalog.create_namespace(table.namespace)
    created = catalog.create_table(table.identifier, schema=EVENT_SCHEMA)
    created.add_files(_write_files(created, [rows(i * rows_per_file, rows_per_file) for i in range(files)]))
    return load_table(catalog, table)


def referenced_files(table: Table, local_path: Callable[[str], Path] = local_path) -> dict[str, set[str]]:
    """Every file the table's metadata references, by kind, as local paths: the metadata files in
    the log, every snapshot's manifest list, manifests, data and delete files (expired snapshots are
    gone from the metadata, so 'every snapshot' is every snapshot a reader may still time-travel to).
    ``local_path`` maps a location to its file (an object storage test passes its server's)."""
    io = table.io
    found: dict[str, set[str]] = {k: set() for k in ("metadata", "manifest_list", "manifest", "data", "delete")}
    found["metadata"].add(str(local_path(table.metadata_location)))
    found["metadata"] |= {str(local_path(entry.metadata_file)) for entry in table.metadata.metadata_log}
    for snapshot in table.metadata.snapshots:
        found["manifest_list"].add(str(local_path(snapshot.manifest_list)))
        for manifest in snapshot.manifests(io):
            found["manifest"].add(str(local_path(manifest.manifest_path)))
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                kind = "data" if entry.data_file.content == 0 else "delete"
                found[kind].add(str(local_path(entry.data_file.file_path)))
    for statistics in table.metadata.statistics:
        found.setdefault("statistics", set()).add(str(local_path(statistics.statistics_path)))
    return found


def commit_equality_delete(engine, table: TableName, path: Path, ids: list[int], partition_path: str | None = None) -> None:
    """An equality delete file on ``id`` (field 1) written with pyarrow at ``path`` and committed with Iceberg's
    RowDelta through the engine's Spark session (Spark SQL writes no equality deletes); ``partition_path``:
    the partition it belongs to (``part=0``), none for an unpartitioned table."""
    import os

    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": ids}, schema=pa.schema([
        pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"})])), path)
    with engine.unit_of_work() as spark:
        jvm = spark._jvm
        java_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table.qualified)
        field_ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
        field_ids[0] = 1
        builder = (jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(java_table.spec())
                   .ofEqualityDeletes(field_ids).withPath(f"file:{path}").withFormat("parquet")
                   .withFileSizeInBytes(os.path.getsize(path)).withRecordCount(len(ids)))
        if partition_path is not None:
            builder = builder.withPartitionPath(partition_path)
        java_table.newRowDelta().addDeletes(builder.build()).commit()
