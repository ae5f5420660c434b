"""The trigger ledger and the history fold, on a real SQLite coordination database."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from dagster import build_resources
from sqlalchemy import text

from floe_dagster.coordination import database, schema
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import FileLocks
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.runs.run_figures import SPARK, Benefit, Compute, TableShape
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import COORDINATION_RESOURCE
from floe_dagster.settings import load_settings

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
RDF = Operation.REWRITE_DATA_FILES


def test_same_item_is_admitted_once_across_launchers(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    first, second = Coordination(url), Coordination(url)
    orders = TableName("demo", ("sales",), "orders")
    item = RunDecision(orders, RDF, "cron", "due", slot="2026-11-22T12:00:00+00:00", attempt=0)
    assert first.admit([item], T0, "schedule") == [item]
    assert second.admit([item], T0, "sensor") == []
    retry = RunDecision(orders, RDF, "cron", "retry", slot="2026-11-22T12:00:00+00:00", attempt=1)
    assert second.admit([retry], T0, "sensor") == [retry]
    rows = first.ledger_rows("demo.sales.orders")
    assert [(r.attempt, r.launcher, r.reason) for r in rows] == [(0, "schedule", "due"), (1, "sensor", "retry")]
    assert item.item_key != retry.item_key and "attempt-1" in retry.item_key


def outcome(run, ok, start, changed=True, kind=None, bytes_=0):
    return Outcome(run, "demo.t", RDF, start, start + timedelta(minutes=1), ok, "interval", kind, None, changed, bytes_, 7)


def test_history_fold(tmp_path):
    c = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    assert c.record_outcome(outcome("r1", True, T0, changed=True, bytes_=100))
    assert not c.record_outcome(outcome("r1", True, T0))  # the same (run, table) counts once
    c.record_outcome(outcome("r2", False, T0 + timedelta(hours=1)))
    c.record_outcome(outcome("r3", False, T0 + timedelta(hours=2)))
    c.record_outcome(outcome("r4", False, T0 + timedelta(hours=3), kind="lock_held"))  # not the table's fault
    state = c.all_history()[("demo.t", RDF)]
    assert state.consecutive_failures == 2 and state.last_success_start == T0
    assert state.runs == 3 and round(state.failure_rate) == 67
    c.record_outcome(outcome("r5", True, T0 + timedelta(hours=4), changed=False))
    c.record_outcome(outcome("r6", True, T0 + timedelta(hours=5), changed=False))
    state = c.all_history()[("demo.t", RDF)]
    assert state.consecutive_failures == 0 and state.consecutive_zero_change == 2
    assert state.last_success_start == T0 + timedelta(hours=5) and state.last_snapshot_after == 7


def test_outage_circuit_opens_and_closes(tmp_path):
    c = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    pause = timedelta(minutes=5)
    assert c.outage_circuit(T0, pause) is None
    c.record_outcome(outcome("o1", False, T0, kind="outage"))
    assert c.outage_circuit(T0, pause).resume_at == T0 + timedelta(minutes=1) + pause
    state = c.all_history()[("demo.t", RDF)]  # an outage is not the table's failure
    assert state.consecutive_failures == 0 and state.runs == 0
    c.record_outcome(outcome("ok", True, T0 + timedelta(minutes=10)))
    assert c.outage_circuit(T0 + timedelta(minutes=12), pause) is None


# -- the coordination resource ------------------------------------------------------------------------


def coordination_settings(url: str):
    return load_settings(environ={"FLOE_COORDINATION_URL": url})


def test_the_resource_takes_its_lock_backend_from_the_database_when_configured_and_opens_nothing(tmp_path):
    sqlite = CoordinationResource.from_settings(coordination_settings(f"sqlite:///{tmp_path / 'c.db'}"))
    postgres = CoordinationResource.from_settings(coordination_settings("postgresql://floe@db.invalid/floe"))
    assert (sqlite.lock_backend, postgres.lock_backend) == ("file", "advisory")
    assert not (tmp_path / "c.db").exists()  # opened on first use, not when the definitions are built


def test_the_resource_checks_its_tables_once_for_every_tick_and_run_of_the_process(tmp_path, monkeypatch):
    checks = []
    real_check = database.create_tables
    monkeypatch.setattr(database, "create_tables", lambda engine: checks.append(engine) or real_check(engine))
    resource = CoordinationResource.from_settings(coordination_settings(f"sqlite:///{tmp_path / 'c.db'}"))
    # Dagster makes a copy of the resource for every sensor tick, schedule tick and run.
    resources = {COORDINATION_RESOURCE: resource}
    with build_resources(resources) as tick, build_resources(resources) as run:
        first, second = getattr(tick, COORDINATION_RESOURCE), getattr(run, COORDINATION_RESOURCE)
        assert first is not resource and first.coordination is second.coordination
        assert isinstance(first.coordination.locks, FileLocks)
    assert len(checks) == 1


def test_a_resource_built_again_sees_a_database_recreated_under_the_same_url(tmp_path):
    """What the PostgreSQL tests do between tests: drop the tables, then build the definitions again."""
    settings = coordination_settings(f"sqlite:///{tmp_path / 'c.db'}")
    old = CoordinationResource.from_settings(settings).coordination
    with old.engine.begin() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(text(f"DROP TABLE {table.name}"))
    new = CoordinationResource.from_settings(settings).coordination
    assert new is not old and new.all_history() == {}
    assert new.record_outcome(outcome("r1", True, T0))


def test_a_database_from_before_conflicts_gets_their_columns_and_keeps_its_history(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    c = Coordination(url)
    c.record_outcome(outcome("r1", False, T0))
    with c.engine.begin() as connection:  # as a database created before the conflict columns existed
        connection.execute(text("ALTER TABLE floe_history DROP COLUMN consecutive_conflicts"))
        connection.execute(text("ALTER TABLE floe_history DROP COLUMN last_conflict_at"))
        connection.execute(text("ALTER TABLE floe_history DROP COLUMN last_conflict_writer"))
    reopened = Coordination(url)
    assert reopened.all_history()[("demo.t", RDF)].consecutive_failures == 1
    lost = replace(outcome("r2", False, T0 + timedelta(hours=1), kind="conflict"), conflict_writer="delete")
    reopened.record_outcome(lost)
    state = reopened.all_history()[("demo.t", RDF)]
    assert state.consecutive_failures == 1 and state.consecutive_conflicts == 1
    assert state.last_conflict_writer == "delete"
    assert state.last_conflict_at == T0 + timedelta(hours=1, minutes=1)


def test_recorded_runs_read_the_runs_figures_failures_included_and_survive_an_unreadable_row(tmp_path):
    old = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    at = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
    shape = TableShape(data_files=10, delete_files=0, live_bytes=100, manifests=1, snapshots=1)
    compute, benefit = Compute(SPARK, 9.0, executor_cpu_s=4.5), Benefit(replace(shape, data_files=13), shape)
    old.record_outcome(Outcome("r0", "demo.s.t", Operation.REWRITE_DATA_FILES, at, at, True, bytes_rewritten=5))
    old.record_outcome(Outcome("r1", "demo.s.t", Operation.REWRITE_DATA_FILES, at, at + timedelta(seconds=9), True,
                               compute=compute, benefit=benefit))
    old.record_outcome(Outcome("r2", "demo.s.t", Operation.REWRITE_DATA_FILES, at, at + timedelta(seconds=10), False,
                               failure_kind="error"))
    old.record_outcome(Outcome("r3", "demo.s.t", Operation.ORPHAN_CLEANUP, at, at + timedelta(seconds=1), True,
                               compute=compute))
    with old.engine.begin() as connection:  # a row a failing disk or a hand edit left unreadable
        connection.execute(text("UPDATE floe_outcomes SET figures = '{not json' WHERE run_id = 'r3'"))
    runs = old.recorded_runs()
    first, second, failed = runs[("demo.s.t", Operation.REWRITE_DATA_FILES)]
    assert (first.compute, first.benefit, first.bytes_rewritten) == (None, None, 5)
    assert (second.compute, second.benefit) == (compute, benefit)  # one declaration: core/runs/run_figures.py
    assert second.finished_at == at + timedelta(seconds=9)
    assert (failed.succeeded, failed.failure_kind, failed.compute) == (False, "error", None)
    (unreadable,) = runs[("demo.s.t", Operation.ORPHAN_CLEANUP)]
    assert (unreadable.compute, unreadable.benefit) == (None, None)  # never stops a tick
    assert list(old.recorded_runs([Operation.ORPHAN_CLEANUP])) == [("demo.s.t", Operation.ORPHAN_CLEANUP)]
    assert old.recorded_runs(since=at + timedelta(seconds=5)).keys() == {("demo.s.t", Operation.REWRITE_DATA_FILES)}


def test_the_code_locations_load_reads_the_writers_without_creating_anything(tmp_path):
    """Lineage at load (defs/assets.py writers_at_load) reads the learned writers with one query: a
    database not made yet has none and stays unmade; once the sensor recorded one, the load sees it; a
    database that cannot be reached raises at once (the load then falls back to floe.yaml's rules)."""
    import sqlalchemy

    from floe_dagster.coordination.database import learned_writers
    from floe_dagster.core.schedules.writers import SOURCE_TABLE_NAME, Writer

    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert learned_writers(url) == {}
    assert sqlalchemy.inspect(sqlalchemy.create_engine(url)).get_table_names() == []  # nothing created
    writer = Writer(("etl", "orders"), SOURCE_TABLE_NAME, 42, "run-42", T0)
    Coordination(url).record_writers({("demo.s.orders", ("etl", "orders")): writer})
    assert learned_writers(url) == {"demo.s.orders": (writer,)}
    with pytest.raises(sqlalchemy.exc.OperationalError):
        learned_writers("postgresql://floe:floe@127.0.0.1:1/none")
