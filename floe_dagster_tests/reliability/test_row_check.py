"""The row check after a rewrite reads Iceberg's snapshot summaries (no Spark query) and still
catches a rewrite that lost rows: here a real ``replace`` commit made through Iceberg's own Java API in
Spark drops a data file, and the engine's check refuses it; one that would duplicate rows is refused
by Iceberg itself."""

from __future__ import annotations

import pytest

from floe_dagster.core.tables import TableName
from floe_dagster.errors import RowCountMismatch
from floe_dagster.iceberg.catalog import TableReads, open_catalog, table_counts
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
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
