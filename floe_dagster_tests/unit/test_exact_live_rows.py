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

    from floe_dagster.core.basics.tables import TableName
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


def _nessie_replace(snapshot_id: int, **summary: str) -> dict:
    """A rewrite commit as a catalog that keeps only the current snapshot (Nessie) shows it: no parent."""
    return {"snapshot_id": snapshot_id, "parent_id": None, "operation": "replace",
            "summary": {"total-records": "60", "total-delete-files": "0", **summary}}


def _check_parentless(*snapshots: dict):
    from dagster_pyspark import LazyPySparkResource

    from floe_dagster.core.basics.tables import TableName
    from floe_dagster.spark.engine import IcebergSparkEngine

    class NoCountEngine(IcebergSparkEngine):
        def _count(self, spark, table, snapshot_id):
            raise AssertionError(f"snapshot {snapshot_id} is not in the metadata: Spark cannot count it")

    engine = NoCountEngine(pyspark=LazyPySparkResource(spark_config={}), catalog_name="nessie")
    return engine.verify_rows(None, TableName("nessie", ("sales",), "orders"), list(snapshots), list(snapshots), 0)


def test_a_rewrite_whose_parent_the_metadata_does_not_keep_is_checked_by_its_own_summary():
    """Nessie's metadata holds only the current snapshot: the rewrite's parent is gone, so its own
    summary says whether it kept the rows (removed = added); a partial-progress chain sums them."""
    check = _check_parentless(_nessie_replace(7, **{"deleted-records": "60", "added-records": "60"}))
    assert (check.method, check.checked_snapshots, check.rows_before, check.rows_after) == ("commit-summary", (7,), 60, 60)
    chain = _check_parentless(_nessie_replace(8, **{"deleted-records": "20", "added-records": "20"}),
                              _nessie_replace(9, **{"deleted-records": "40", "added-records": "40"}))
    assert (chain.method, chain.rows_before, chain.rows_after) == ("commit-summary", 60, 60)


def test_a_parentless_rewrite_that_lost_rows_fails_the_run():
    import pytest

    from floe_dagster.errors import RowCountMismatch

    with pytest.raises(RowCountMismatch, match="snapshot 7 written by this run removed 60 rows and added 59"):
        _check_parentless(_nessie_replace(7, **{"deleted-records": "60", "added-records": "59"}))


def test_a_parentless_rewrite_with_delete_files_says_it_could_not_be_checked():
    # The rewrite applied position deletes: removed records count deleted rows too, and no parent is
    # left for Spark to count, so the check says so rather than pass or fail on a guess.
    applied = _nessie_replace(7, **{"deleted-records": "60", "added-records": "55", "removed-delete-files": "1",
                                    "removed-position-deletes": "5"})
    assert _check_parentless(applied).method == "parent-not-kept"
    dangling = _nessie_replace(7, **{"deleted-records": "60", "added-records": "60", "total-delete-files": "1"})
    assert _check_parentless(dangling).method == "parent-not-kept"
