"""The tick's one read of the coordination database (coordination/ledger_view.py), on SQLite and PostgreSQL:
what it reads is what each separate read gave (the writers, the ledger window, the history, the hour's bytes,
the recorded runs the plan learns from), in a fixed number of statements on one connection."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event

from floe_dagster.coordination import schema
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.ledger_view import OutcomeWindow, read_ledger_view, read_recorded_runs
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import SOURCE_RULE, Writer
from floe_dagster_tests.conftest import postgres_url

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
RDF, EXPIRE, ORPHANS = Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS, Operation.ORPHAN_CLEANUP


@pytest.fixture(params=["sqlite", "postgres"])
def coordination(request, tmp_path):
    if request.param == "sqlite":
        return Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    found = Coordination(postgres_url("floe_coordination"))
    with found.engine.begin() as connection:  # the tests' convention: wipe, then fill
        for table in (schema.ledger, schema.outcomes, schema.history, schema.writers):
            connection.execute(table.delete())
    return found


def seeded(coordination: Coordination) -> Coordination:
    table = TableName("demo", ("sales",), "a")
    coordination.admit([RunDecision(table, RDF, "interval", "due", 1.0, "s1", 0, 42)], NOW - timedelta(minutes=2))
    coordination.admit([RunDecision(table, EXPIRE, "interval", "due", 1.0, "s1", 0, 0)], NOW - timedelta(days=9))
    runs = [("r1", RDF, timedelta(minutes=10), 100, True), ("r2", RDF, timedelta(days=3), 7, True),
            ("r3", ORPHANS, timedelta(days=400), 0, True), ("r4", EXPIRE, timedelta(minutes=5), 0, False)]
    for run, op, age, size, ok in runs:
        for name in ("demo.sales.a", "demo.sales.b"):
            coordination.record_outcome(Outcome(run, name, op, NOW - age - timedelta(seconds=30), NOW - age, ok,
                                                bytes_rewritten=size, failure_kind=None if ok else "table"))
    coordination.record_writers({("demo.sales.a", ("raw", "a")): Writer(("raw", "a"), SOURCE_RULE, 5, "w1", NOW),
                                 ("demo.sales.a", ("raw", "0")): Writer(("raw", "0"), SOURCE_RULE, 6, "w2", None),
                                 ("demo.sales.b", ("raw", "b")): Writer(("raw", "b"), SOURCE_RULE, None, None, NOW)})
    return coordination


@pytest.mark.parametrize("window", [
    OutcomeWindow(NOW - timedelta(hours=1)),
    OutcomeWindow(NOW - timedelta(hours=1), (ORPHANS,), learned=True, learned_since=NOW - timedelta(days=8)),
    OutcomeWindow(NOW - timedelta(hours=1), (), learned=True, learned_since=None),
])
def test_the_view_reads_what_each_read_gave_in_two_statements_on_one_connection(coordination, window):
    coordination = seeded(coordination)
    statements: list[str] = []
    connections: list[object] = []
    event.listen(coordination.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    event.listen(coordination.engine, "checkout", lambda *args: connections.append(args[1]))
    view = read_ledger_view(coordination, NOW - timedelta(days=8), window)
    assert len(statements) == 2 and len(connections) == 1, statements

    assert view.writers == coordination.writer_rows()
    # The ledger window: the rewrite's admission of 2 minutes ago, not the expiry's of 9 days ago.
    assert view.admitted == [row for row in coordination.ledger_rows() if row.operation is RDF]
    assert len(coordination.ledger_rows()) == 2
    assert view.history == coordination.all_history()
    expected = coordination.recorded_runs(window.cadenced) if window.cadenced else {}
    if window.learned:
        expected = {**coordination.recorded_runs(None, window.learned_since), **expected}
    assert view.recorded_runs == expected
    assert read_recorded_runs(coordination, window) == expected  # explain's read of a window on its own
    # The hour's bytes: r1's (r2 is older, r4 failed with none).
    assert view.bytes_rewritten_by_table == {"demo.sales.a": 100, "demo.sales.b": 100}
