"""The row check after a rewrite reads Iceberg's snapshot summaries (no Spark query) and still
catches a rewrite that lost rows: here a real ``replace`` commit made through Iceberg's own Java API in
Spark drops a data file, and the engine's check refuses it; one that would duplicate rows is refused
by Iceberg itself."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import local_path
from floe_dagster.errors import RowCountMismatch
from floe_dagster.iceberg.catalog import TableReads, open_catalog, table_counts
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import create_fragmented_table

pytestmark = [pytest.mark.spark, pytest.mark.spark4_smoke]

TABLE = TableName("demo", ("sales",), "orders")


def java_list(iterable) -> list:
    iterator, found = iterable.iterator(), []
    while iterator.hasNext():
        found.append(iterator.next())
    return found


@pytest.fixture
def engine_and_table(tmp_path, dagster_home):
    settings = load_settings(write_settings(tmp_path, "[]"), environ={})
    create_fragmented_table(settings, TABLE, files=3, rows_per_file=10)
    engine = IcebergSparkEngine.from_settings(settings)
    yield engine, TableReads(open_catalog(settings.catalog), TABLE)
    engine.stop()


def commit_replace(engine: IcebergSparkEngine, delete: int, add: list[int]) -> None:
    """A ``replace`` snapshot through Iceberg's RewriteFiles: remove the current file ``delete`` and add
    the files ``add`` (indexes into the current data files; re-adding one duplicates its rows)."""
    with engine.unit_of_work() as spark:
        jvm = spark._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, TABLE.qualified)
        files = java_list(table.currentSnapshot().addedDataFiles(table.io()))
        rewrite = table.newRewrite().deleteFile(files[delete])
        for index in add:
            rewrite = rewrite.addFile(files[index])
        rewrite.commit()


def check(engine: IcebergSparkEngine, reads: TableReads, before: set[int]):
    snapshots = reads.snapshots()
    new = [s for s in snapshots if s["snapshot_id"] not in before]
    assert [s["operation"] for s in new] == ["replace"]
    with engine.unit_of_work() as spark:
        return engine.verify_rows(spark, TABLE, new, snapshots, table_counts(reads.latest)["total_bytes"])


def test_a_rewrite_that_loses_rows_fails_the_check(engine_and_table):
    engine, reads = engine_and_table
    before = {s["snapshot_id"] for s in reads.snapshots()}
    commit_replace(engine, delete=0, add=[])
    with pytest.raises(RowCountMismatch, match="has 20 rows but its parent .* has 30"):
        check(engine, reads, before)


def test_a_rewrite_that_duplicates_rows_cannot_even_commit(engine_and_table):
    """Iceberg (1.10 and 1.11) refuses a ``replace`` that adds more records than it removes, so a duplicating
    rewrite never reaches the check (which would refuse it as it refuses a loss)."""
    engine, reads = engine_and_table
    before = {s["snapshot_id"] for s in reads.snapshots()}
    with pytest.raises(Exception, match="Invalid REPLACE operation: 20 added records > 10 replaced records"):
        commit_replace(engine, delete=0, add=[0, 1])
    assert {s["snapshot_id"] for s in reads.snapshots()} == before


def test_a_rewrite_that_keeps_the_rows_passes_from_metadata_alone(engine_and_table):
    engine, reads = engine_and_table
    before = {s["snapshot_id"] for s in reads.snapshots()}
    commit_replace(engine, delete=0, add=[0])  # the same file back: same rows
    result = check(engine, reads, before)
    assert result.method == "snapshot-summary" and result.rows_before == result.rows_after == 30


def test_a_rewrite_that_resurrects_a_deleted_row_fails_the_check(engine_and_table, tmp_path):
    """A merge-on-read DELETE leaves a position delete on a file; a ``replace`` that swaps that file for
    a copy under another path drops the delete (the row comes back) while ``total-records`` and
    ``total-position-deletes`` stay as they were: the summaries' difference agrees, so with delete
    files present the check must count with Spark, and it catches the resurrected row."""
    engine, reads = engine_and_table
    with engine.unit_of_work() as spark:
        ref = spark_table_reference(TABLE)
        spark.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')")
        spark.sql(f"DELETE FROM {ref} WHERE id = 3")
        jvm = spark._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, TABLE.qualified)
        files = [f for manifest in java_list(table.currentSnapshot().dataManifests(table.io()))
                 for f in java_list(jvm.org.apache.iceberg.ManifestFiles.read(manifest, table.io(), table.specs()))]
        victim = next(f for f in files if 3 in _ids(str(f.location())))
        copy = tmp_path / "copy.parquet"
        shutil.copyfile(local_path(str(victim.location())), copy)
        moved = jvm.org.apache.iceberg.DataFiles.builder(table.spec()).copy(victim).withPath(f"file://{copy}").build()
        before = {s["snapshot_id"] for s in reads.snapshots()}
        # Validating from the current snapshot, as a careless engine would, lets the delete go dangling.
        table.newRewrite().validateFromSnapshot(table.currentSnapshot().snapshotId()) \
            .deleteFile(victim).addFile(moved).commit()
    snapshots = reads.snapshots()
    new = [s for s in snapshots if s["snapshot_id"] not in before and s["operation"] == "replace"]
    summary, parent = new[0]["summary"], next(s for s in snapshots if s["snapshot_id"] == new[0]["parent_id"])["summary"]
    assert int(summary["total-records"]) - int(summary["total-position-deletes"]) == \
        int(parent["total-records"]) - int(parent["total-position-deletes"])  # the summaries agree…
    with engine.unit_of_work() as spark, pytest.raises(RowCountMismatch, match="has 30 rows but its parent .* has 29"):
        engine.verify_rows(spark, TABLE, new, snapshots, table_bytes=10**12)  # metadata-only size: …the rows do not


def _ids(path: str) -> list[int]:
    """The ids in one data file."""
    return pq.read_table(local_path(path), columns=["id"])["id"].to_pylist()
