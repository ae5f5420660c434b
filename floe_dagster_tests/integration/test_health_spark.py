"""Health of a table with real delete files, and byte estimates against what Iceberg really rewrites.

Spark writes the data and the position deletes (merge-on-read, file granularity). Spark SQL cannot
write equality deletes, so the test writes one equality delete file with pyarrow and commits it with
Iceberg's own Java API (``RowDelta``) through the same Spark session; Spark's row count proves it is
applied. One Spark session for the module; the catalog is released after each unit of work (SQLite).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe_dagster.core.rewrites.estimates import (
    estimate_rewrite_data_files,
    estimate_rewrite_position_delete_files,
)
from floe_dagster.core.operation_kinds.rewrite_position_delete_files import RewritePositionDeleteFilesConfig
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster_tests.integration._health_tables import (
    data_files_on_disk,
    files_in_partition,
    lakehouse,
    metadata_json,
    name,
    table_dir,
)

pytestmark = pytest.mark.spark

TABLE = "demo.db.events"
ROWS_PER_INSERT = 10


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """Partition a: 6 files, 3 of them with one deleted row each (3 file-scoped position delete files);
    b: 2 files and one equality delete file (2 rows); c: 2 files, one losing 4 of its 10 rows to a
    file-scoped position delete file (40 %, above Iceberg's 0.3 delete-ratio threshold)."""
    settings, catalog = lakehouse(tmp_path_factory.mktemp("health-spark"))
    catalog.create_namespace("db")
    engine = IcebergSparkEngine.from_settings(settings)
    with engine.unit_of_work() as spark:
        spark.sql(
            f"CREATE TABLE {TABLE} (id BIGINT, part STRING, payload STRING) USING iceberg PARTITIONED BY (part) "
            "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.delete.granularity'='file')"
        )
        inserts = [("a", i * 10) for i in range(6)] + [("b", 60), ("b", 70), ("c", 80), ("c", 90)]
        for part, start in inserts:
            spark.sql(
                f"INSERT INTO {TABLE} SELECT id, '{part}', concat('row-', id) FROM range({start}, {start + ROWS_PER_INSERT}, 1, 1)"
            )
        for start in (0, 10, 20):
            spark.sql(f"DELETE FROM {TABLE} WHERE id = {start + 3}")
        spark.sql(f"DELETE FROM {TABLE} WHERE id BETWEEN 80 AND 83")
    table = catalog.load_table("db.events")
    equality_file = table_dir(table) / "data" / "part=b" / "eqdel-00001.parquet"
    schema = pa.schema([pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"})])
    pq.write_table(pa.table({"id": [60, 71]}, schema=schema), equality_file)
    with engine.unit_of_work() as spark:
        jvm = spark._jvm
        java_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, TABLE)
        field_ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
        field_ids[0] = 1
        delete_file = (
            jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(java_table.spec())
            .ofEqualityDeletes(field_ids)
            .withPath(f"file:{equality_file}")
            .withFormat("parquet")
            .withFileSizeInBytes(os.path.getsize(equality_file))
            .withRecordCount(2)
            .withPartitionPath("part=b")
            .build()
        )
        java_table.newRowDelta().addDeletes(delete_file).commit()
        counts = dict(spark.sql(f"SELECT part, count(*) FROM {TABLE} GROUP BY part").collect())
    assert counts == {"a": 57, "b": 18, "c": 16}  # every delete file is really applied
    yield settings, catalog, engine
    engine.stop()


def test_full_tier_with_position_and_equality_deletes(lake):
    settings, catalog, _ = lake
    table = catalog.load_table("db.events")
    data = data_files_on_disk(table)
    deletes = data_files_on_disk(table, deletes=True)
    position = {p: s for p, s in deletes.items() if p.endswith("-deletes.parquet")}
    assert (len(data), len(position), len(deletes)) == (10, 4, 5)

    m = HealthCollector(catalog, settings).metrics_for(name(catalog, "db.events"), tier="full")

    assert m.data_file_count == 10 and m.record_count == 100
    assert sorted(m.data_file_sizes) == sorted(data.values()) and m.total_data_bytes == sum(data.values())
    assert (m.delete_file_count, m.position_delete_file_count, m.equality_delete_file_count) == (5, 4, 1)
    assert m.delete_file_ratio == 0.5
    assert (m.partition_count, m.max_files_per_partition) == (3, 6)
    meta = metadata_json(table)
    times = [s["timestamp-ms"] for s in meta["snapshots"]]
    assert m.snapshot_count == len(meta["snapshots"]) == 10 + 4 + 1  # inserts, deletes, the row delta
    assert (m.oldest_snapshot_ms, m.newest_snapshot_ms) == (min(times), max(times))
    assert m.current_snapshot_id == meta["current-snapshot-id"]

    # Which delete files apply to which data file, per partition, as Iceberg's DeleteFileIndex says.
    groups = {key: (sizes, deletes) for key, sizes, deletes in m.data_file_groups}
    assert sorted(groups['["a"]'][0]) == sorted(files_in_partition(data, "part", "a").values())
    assert sorted(d[1:] for d in groups['["a"]'][1]) == [(1, 1, 10)] * 3  # one file-scoped delete, 1 row
    assert sorted(d[1:] for d in groups['["b"]'][1]) == [(1, 0, 10)] * 2  # the equality delete, not scoped
    assert [d[1:] for d in groups['["c"]'][1]] == [(1, 4, 10)]
    position_groups = {key: sorted(sizes) for key, sizes in m.position_delete_groups}
    assert position_groups == {
        '["a"]': sorted(files_in_partition(position, "part", "a").values()),
        '["c"]': sorted(files_in_partition(position, "part", "c").values()),
    }


def test_manifests_match_icebergs_own_manifests_table(lake):
    """Spark merges manifests as it commits, so which manifests are current is asked of Iceberg's Java
    side (the ``manifests`` metadata table: data and delete manifests); their sizes come from disk."""
    settings, catalog, engine = lake
    m = HealthCollector(catalog, settings).metrics_for(name(catalog, "db.events"), tier="full")
    with engine.unit_of_work() as spark:
        listed = spark.sql(f"SELECT path, length, content FROM {TABLE}.manifests").collect()
    assert {row["content"] for row in listed} == {0, 1}
    assert m.manifest_count == len(listed)
    assert m.manifest_total_bytes == sum(os.path.getsize(row["path"].replace("file:", "", 1)) for row in listed)


def test_summary_tier_counts_delete_files_together(lake):
    settings, catalog, _ = lake
    table = catalog.load_table("db.events")
    data = data_files_on_disk(table)
    deletes = data_files_on_disk(table, deletes=True)
    collector = HealthCollector(catalog, str(Path(settings.data_dir) / "summary-cache"))

    snapshot = collector.collect([name(catalog, "db.events")], tier="summary")

    assert snapshot.files_read == 1
    m = snapshot.metrics[name(catalog, "db.events")]
    assert (m.data_file_count, m.delete_file_count, m.record_count) == (10, 5, 100)
    assert m.position_delete_file_count is None and m.equality_delete_file_count is None
    # The snapshot summary's total-files-size covers data and delete files alike.
    assert m.total_data_bytes == sum(data.values()) + sum(deletes.values())


def test_estimates_match_what_iceberg_rewrites(lake):
    """Runs the procedures for real and compares their rewritten bytes with the estimates made from
    the collected metrics just before. Mutates db.events: no later test may use that table."""
    settings, catalog, engine = lake
    collector = HealthCollector(catalog, settings)
    events = name(catalog, "db.events")

    before = collector.metrics_for(events, tier="full")
    options = RewritePositionDeleteFilesConfig(min_input_files=2)
    expected_deletes = estimate_rewrite_position_delete_files(before, options)
    # a's three small position delete files form a group of 3 ≥ 2; c's single file does not.
    assert (expected_deletes.files, expected_deletes.partitions) == (3, 1)
    with engine.unit_of_work() as spark:
        (row,) = spark.sql(
            "CALL demo.system.rewrite_position_delete_files(table => 'db.events', "
            "options => map('min-input-files', '2'))"
        ).collect()
    assert row["rewritten_delete_files_count"] == expected_deletes.files
    assert row["rewritten_bytes_count"] == expected_deletes.bytes

    changed = collector.collect([events], tier="full")
    assert changed.computed == [events] and 0 < changed.files_read
    after = changed.metrics[events]
    assert after.position_delete_file_count == 1 + row["added_delete_files_count"]

    # Defaults: a's 6 small files (≥ 5 input files) and c's 2 files, kept only because one of them
    # lost 40 % of its rows to file-scoped deletes; b's 2 files stay (equality deletes are not scoped).
    expected = estimate_rewrite_data_files(after)
    a = files_in_partition(data_files_on_disk(catalog.load_table("db.events")), "part", "a")
    c = files_in_partition(data_files_on_disk(catalog.load_table("db.events")), "part", "c")
    assert (expected.files, expected.bytes) == (8, sum(a.values()) + sum(c.values()))
    with engine.unit_of_work() as spark:
        (row,) = spark.sql("CALL demo.system.rewrite_data_files(table => 'db.events')").collect()
    assert row["rewritten_data_files_count"] == expected.files
    assert row["rewritten_bytes_count"] == expected.bytes


def test_deletes_committed_with_data_follow_icebergs_sequence_rules(lake):
    """An upsert-like commit (one RowDelta adds a data file, an equality delete and a position delete):
    position deletes apply to data files of the same sequence number, equality deletes only to older
    ones, and an unpartitioned table's equality deletes are global. Spark's row count confirms it."""
    settings, catalog, engine = lake
    upserts = "demo.db.upserts"
    with engine.unit_of_work() as spark:
        spark.sql(f"CREATE TABLE {upserts} (id BIGINT, part STRING, payload STRING) USING iceberg "
                  "TBLPROPERTIES ('format-version'='2')")
        spark.sql(f"INSERT INTO {upserts} SELECT id, 'x', concat('row-', id) FROM range(0, 10, 1, 1)")
    table = catalog.load_table("db.upserts")
    folder = table_dir(table) / "data"
    new_data = folder / "upsert-data.parquet"
    pq.write_table(pa.table(
        {"id": [5, 6, 7], "part": ["x"] * 3, "payload": ["new-5", "new-6", "new-7"]},
        schema=pa.schema([
            pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"}),
            pa.field("part", pa.string(), metadata={"PARQUET:field_id": "2"}),
            pa.field("payload", pa.string(), metadata={"PARQUET:field_id": "3"}),
        ]),
    ), new_data)
    equality = folder / "eqdel-upsert.parquet"
    pq.write_table(pa.table({"id": [5]}, schema=pa.schema([
        pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"})])), equality)
    position = folder / "upsert-pos-deletes.parquet"  # no file_path bounds: partition-scoped
    pq.write_table(pa.table({"file_path": [f"file:{new_data}"], "pos": [1]}, schema=pa.schema([
        pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": "2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"}),
    ])), position)
    with engine.unit_of_work() as spark:
        jvm = spark._jvm
        java_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, upserts)
        spec = java_table.spec()
        field_ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
        field_ids[0] = 1
        data_file = (jvm.org.apache.iceberg.DataFiles.builder(spec).withPath(f"file:{new_data}")
                     .withFileSizeInBytes(os.path.getsize(new_data)).withRecordCount(3).withFormat("parquet").build())
        eq_file = (jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(spec).ofEqualityDeletes(field_ids)
                   .withPath(f"file:{equality}").withFormat("parquet")
                   .withFileSizeInBytes(os.path.getsize(equality)).withRecordCount(1).build())
        pos_file = (jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(spec).ofPositionDeletes()
                    .withPath(f"file:{position}").withFormat("parquet")
                    .withFileSizeInBytes(os.path.getsize(position)).withRecordCount(1).build())
        java_table.newRowDelta().addRows(data_file).addDeletes(eq_file).addDeletes(pos_file).commit()
        ids = sorted(r["id"] for r in spark.sql(f"SELECT id FROM {upserts}").collect())
    # Old file: 5 removed by the equality delete. New file: 5 kept (same sequence number), 6 removed.
    assert ids == [0, 1, 2, 3, 4, 5, 6, 7, 7, 8, 9]

    m = HealthCollector(catalog, settings).metrics_for(name(catalog, "db.upserts"), tier="full")

    assert (m.data_file_count, m.position_delete_file_count, m.equality_delete_file_count) == (2, 1, 1)
    ((key, sizes, deletes),) = m.data_file_groups
    per_file = {sizes[index]: (count, rows) for index, count, rows, _ in deletes}
    assert len(set(sizes)) == 2  # told apart by size
    old_size = next(s for s in sizes if s != os.path.getsize(new_data))
    assert per_file == {old_size: (2, 0), os.path.getsize(new_data): (1, 0)}
