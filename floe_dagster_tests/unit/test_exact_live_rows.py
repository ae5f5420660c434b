"""The row check trusts a snapshot summary's rows only when no delete file can make them wrong."""

from floe_dagster.iceberg.snapshot_summary import exact_live_rows


def test_rows_come_from_the_summary_only_without_delete_files():
    assert exact_live_rows({"total-records": "30", "total-delete-files": "0", "total-position-deletes": "0"}) == 30
    assert exact_live_rows({"total-records": "30"}) == 30  # a writer that leaves zero totals out


def test_delete_files_leave_the_rows_to_spark():
    # A dangling position delete (its data file rewritten) or a deletion vector: the difference lies.
    assert exact_live_rows({"total-records": "30", "total-delete-files": "1", "total-position-deletes": "1"}) is None
    assert exact_live_rows({"total-records": "30", "total-delete-files": "1", "total-equality-deletes": "2"}) is None
    assert exact_live_rows({"total-records": "30", "total-delete-files": "1"}) is None


def test_a_summary_that_cannot_be_read_decides_nothing():
    assert exact_live_rows(None) is None
    assert exact_live_rows({"total-records": "many"}) is None
    assert exact_live_rows({"total-records": "30", "total-delete-files": "x"}) is None


def test_a_chain_of_partial_progress_commits_counts_each_snapshot_once():
    """Partial progress commits one ``replace`` per file group, each the parent of the next: with delete
    files every snapshot is counted with Spark, once (N + 1 counts for N commits, not 2N)."""
    from dagster_pyspark import LazyPySparkResource

    from floe_dagster.core.tables import TableName
    from floe_dagster.spark.engine import IcebergSparkEngine

    counted: list[int] = []

    class CountingEngine(IcebergSparkEngine):
        def _count(self, spark, table, snapshot_id):
            counted.append(snapshot_id)
            return 30

    with_deletes = {"total-records": "31", "total-delete-files": "1", "total-position-deletes": "1"}
    snapshots = [{"snapshot_id": 1, "parent_id": None, "operation": "overwrite", "summary": with_deletes}]
    snapshots += [{"snapshot_id": i, "parent_id": i - 1, "operation": "replace", "summary": with_deletes}
                  for i in (2, 3, 4)]
    engine = CountingEngine(pyspark=LazyPySparkResource(spark_config={}), catalog_name="demo")
    check = engine.verify_rows(None, TableName("demo", ("sales",), "orders"), snapshots[1:], snapshots, 10**9)
    assert sorted(counted) == [1, 2, 3, 4]
    assert (check.method, check.checked_snapshots, check.rows_before, check.rows_after) == (
        "snapshot-summary+spark-count", (2, 3, 4), 30, 30)
