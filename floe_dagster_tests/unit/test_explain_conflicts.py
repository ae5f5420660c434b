"""``explain`` shows a table's lost commit races: the streak and when the next attempt may start."""

from datetime import datetime, timezone

from floe_dagster.core.runs.commit_conflicts import conflict_retry_delay
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.reports.explain import _conflicts

TABLE = TableName("demo", ("sales",), "orders")


def test_the_conflict_streak_and_the_jittered_retry():
    last = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
    history = OperationHistory(consecutive_conflicts=3, last_conflict_at=last, last_conflict_writer="delete")
    shown = _conflicts(TABLE, Operation.REWRITE_DATA_FILES, history)
    retry = last + conflict_retry_delay(TABLE.qualified, "REWRITE_DATA_FILES", 3)
    assert shown == {"consecutiveConflicts": 3, "lastConflictAt": last.isoformat(), "retryAt": retry.isoformat(),
                     "writerOperation": "delete", "countsAsFailure": False}


def test_no_conflict_no_retry():
    assert _conflicts(TABLE, Operation.REWRITE_DATA_FILES, OperationHistory(last_conflict_writer="delete")) == {
        "consecutiveConflicts": 0, "lastConflictAt": None, "retryAt": None, "writerOperation": None,
        "countsAsFailure": False}
    assert _conflicts(TABLE, Operation.REWRITE_DATA_FILES, None)["retryAt"] is None
