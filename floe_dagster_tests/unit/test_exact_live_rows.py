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
