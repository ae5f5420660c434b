"""Fast tests of the adapters around the planner, without Spark or a catalog: the tick's ledger
arithmetic, the one run-tag builder every launcher uses, the coordination database's locks, and
dead-run detection on a real Dagster instance."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test

from floe_dagster.coordination.database import ADMISSION_TTL, Coordination
from floe_dagster.coordination.locks import AdvisoryLocks, FileLocks, lock_backend_for, locks_for, locks_of
from floe_dagster.coordination.runs import mark_dead_runs, run_lock_name, runs_in_flight
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.runs.run_decision import LedgerRow, RunDecision, item_key
from floe_dagster.core.runs.run_tags import Origin, PolicyFacts, run_tags, shared_run_tags
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import LockHeld
from floe_dagster.core.plan.compute_budget import InFlightAdmission
from floe_dagster.scheduling.inputs import ledger_state, queued_runs

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
RDF, EXPIRE = Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS
ORDERS = TableName("demo", ("sales",), "orders")


def row(table, op, slot, attempt, run_id=None, admitted=NOW, estimated=0) -> LedgerRow:
    key = item_key(table, op, slot, attempt)
    return LedgerRow(id=1, table_name=table, operation=op, slot=slot, attempt=attempt, item_key=key,
                     trigger="interval", reason="due", debt_score=0.0, estimated_bytes=estimated, admitted_at=admitted,
                     launcher="sensor:default", run_id=run_id, batch_key=key)


# -- the tick's ledger arithmetic ------------------------------------------------------------------------


def test_an_admission_without_a_run_holds_its_item_and_bytes_until_it_expires():
    fresh = row("demo.a", RDF, "s1", 0, admitted=NOW - timedelta(minutes=1), estimated=100)
    stale = row("demo.b", RDF, "s1", 0, admitted=NOW - ADMISSION_TTL - timedelta(seconds=1), estimated=1000)
    state = ledger_state([fresh, stale], NOW, running=frozenset())
    assert state.in_flight == {("demo.a", RDF)}  # the daemon never launched b's run: it expired
    assert state.bytes_in_flight == 100
    assert state.unfinished == (InFlightAdmission("demo.a", RDF, 100),)  # the compute budget's estimates


def test_a_created_run_counts_its_estimate_only_while_it_is_in_flight():
    running = row("demo.a", RDF, "s1", 0, run_id="r1", estimated=300)
    finished = row("demo.b", RDF, "s1", 0, run_id="r2", estimated=5000)  # its real bytes are in the outcomes
    state = ledger_state([running, finished], NOW, running=frozenset({("demo.a", RDF)}))
    assert state.in_flight == {("demo.a", RDF)}
    assert state.bytes_in_flight == 300
    # b finished: the compute budget charges what its outcome recorded, not its estimate.
    assert state.unfinished == (InFlightAdmission("demo.a", RDF, 300),)


def test_last_attempts_are_per_table_operation_and_slot():
    rows = [row("demo.a", RDF, "s1", 0, run_id="r1"), row("demo.a", RDF, "s1", 2, run_id="r3"),
            row("demo.a", RDF, "s1", 1, run_id="r2"), row("demo.a", RDF, "s2", 0, run_id="r4"),
            row("demo.a", EXPIRE, "s1", 0, run_id="r5")]
    state = ledger_state(rows, NOW, running=frozenset())
    assert state.last_attempts == {("demo.a", RDF, "s1"): 2, ("demo.a", RDF, "s2"): 0, ("demo.a", EXPIRE, "s1"): 0}
    assert state.in_flight == frozenset() and state.bytes_in_flight == 0


def test_ledger_state_over_a_real_coordination_database(tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    item = RunDecision(TableName("demo", ("sales",), "a"), RDF, "interval", "due", 1.0, "s1", 0, 42)
    admitted = coordination.admit([item], NOW - timedelta(minutes=2))
    assert admitted
    [read_back] = coordination.ledger_rows()
    assert read_back.admitted_at == NOW - timedelta(minutes=2)  # UTC, whatever the database hands back
    assert read_back.item_key == read_back.batch_key == item.item_key  # a batch of its own
    assert RunDecision.from_ledger(item.table, read_back) == RunDecision(
        item.table, RDF, "interval", "due", 1.0, "s1", 0, 42, batch_key=item.item_key, ledger_row=read_back.id)
    state = ledger_state([read_back], NOW, frozenset())
    assert state.in_flight == {("demo.sales.a", RDF)} and state.bytes_in_flight == 42
    coordination.attach_run(admitted[0].item_key, "run-1")
    state = ledger_state(coordination.ledger_rows(), NOW, frozenset())
    assert state.in_flight == frozenset() and state.last_attempts == {("demo.sales.a", RDF, "s1"): 0}


def test_naive_times_from_storage_are_utc():
    assert naive_as_utc(datetime(2026, 1, 1, 12)) == datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    plus_two = timezone(timedelta(hours=2))
    assert naive_as_utc(datetime(2026, 1, 1, 14, tzinfo=plus_two)) == datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


# -- the one run-tag builder ----------------------------------------------------------------------------------

POLICY = PolicyFacts("daily", "v1", {T.POLICY_TAG_PREFIX + "team": "sales"}, timeout_s=3600)
COMMON = {T.TABLE, T.NAMESPACE, T.OPERATION, T.POLICY, T.POLICY_VERSION, T.TRIGGER, T.REASON, T.ACTOR,
          T.DAGSTER_PRIORITY, T.DAGSTER_MAX_RUNTIME, T.POLICY_TAG_PREFIX + "team"}


def decision(**overrides) -> RunDecision:
    """A planner decision, as admitted."""
    fields = dict(table=ORDERS, operation=RDF, policy="daily", decision="run", why=("interval due",),
                  trigger="interval", debt_score=250.0, debt_breakdown={}, bytes_estimate=1234, next_eligible=None,
                  rank=1, slot="2026-11-24T12:00:00+00:00", attempt=1, max_runtime_s=900.0)
    fields.update(overrides)
    return RunDecision.admitted(Decision(**fields))


def test_every_launcher_gets_the_same_tag_set():
    automated = run_tags(ORDERS, RDF, POLICY, Origin("interval", "interval due", "sensor:default"), decision())
    manual = run_tags(ORDERS, RDF, POLICY, Origin("manual", "why", "alice", "trigger-1"))
    backfill = run_tags(ORDERS, RDF, POLICY, Origin("backfill", "refill", "bob", "backfill-1"))
    for tags in (automated, manual, backfill):
        assert COMMON <= set(tags), COMMON - set(tags)
    assert manual[T.TRIGGER_ID] == "trigger-1" and T.TRIGGER_ID not in automated
    # what only the planner knows: its decision
    assert automated[T.BATCH_KEY] == item_key("demo.sales.orders", RDF, "2026-11-24T12:00:00+00:00", 1)
    assert automated[T.DEBT_SCORE] == "250.0" and automated[T.ESTIMATED_BYTES] == "1234"
    assert automated[T.ATTEMPT] == "1"


def test_max_runtime_is_the_decisions_else_the_policys_timeout():
    assert run_tags(ORDERS, RDF, POLICY, Origin("interval", "", "s"), decision())[T.DAGSTER_MAX_RUNTIME] == "900"
    assert run_tags(ORDERS, RDF, POLICY, Origin("manual", "", "a"))[T.DAGSTER_MAX_RUNTIME] == "3600"
    no_timeout = PolicyFacts(None)
    assert T.DAGSTER_MAX_RUNTIME not in run_tags(ORDERS, RDF, no_timeout, Origin("manual", "", "a"))


def test_priority_bands_order_manual_critical_scheduled_backfill():
    def priority(trigger: str, debt: float = 0.0) -> int:
        tags = run_tags(ORDERS, RDF, POLICY, Origin(trigger, "", "x"), decision(trigger=trigger, debt_score=debt))
        return int(tags[T.DAGSTER_PRIORITY])

    assert priority("manual") > priority("critical") > priority("interval", 999) > priority("backfill", 999)
    assert priority("interval", 950) > priority("interval", 50)


def test_a_reason_is_cut_to_fit_a_tag():
    tags = run_tags(ORDERS, RDF, POLICY, Origin("manual", "x" * 5000, "a"))
    assert len(tags[T.REASON]) == T.MAX_REASON_CHARS


def test_shared_tags_of_a_run_over_several_tables():
    other = TableName("demo", ("sales",), "items")
    tags = shared_run_tags([ORDERS, other], RDF, Origin("backfill", "b", "bob", "id-1"))
    assert tags[T.NAMESPACE] == "sales" and T.TABLE not in tags and tags[T.TRIGGER_ID] == "id-1"
    mixed = shared_run_tags([ORDERS, TableName("demo", ("hr",), "people")], RDF, Origin("manual", "", "a"))
    assert T.NAMESPACE not in mixed


# -- locks ------------------------------------------------------------------------------------------------------


def test_the_lock_backend_follows_the_coordination_database(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert lock_backend_for(f"sqlite:///{tmp_path / 'c.db'}") == "file"
    assert lock_backend_for("postgresql+psycopg2://floe@db/floe") == "advisory"
    assert isinstance(locks_for(f"sqlite:///{tmp_path / 'c.db'}"), FileLocks)
    assert isinstance(locks_for("postgresql://floe:floe@127.0.0.1:5432/floe"), AdvisoryLocks)
    assert isinstance(Coordination(f"sqlite:///{tmp_path / 'c.db'}").locks, FileLocks)
    # Configured, not sniffed: a SQLite database may be told to use file locks elsewhere, or refused.
    assert isinstance(locks_of("file", "postgresql://floe@db/floe"), FileLocks)
    with pytest.raises(ValueError, match="lock backend"):
        locks_of("flock", f"sqlite:///{tmp_path / 'c.db'}")


def test_file_locks_exclude_another_process_and_free_when_it_dies(tmp_path):
    locks = FileLocks(tmp_path / "locks")
    name = "floe-table:demo.sales.'odd name'/x"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from floe_dagster.coordination.locks import FileLocks\n"
         "with FileLocks(Path(sys.argv[1])).hold(sys.argv[2]):\n    print('held', flush=True)\n    time.sleep(60)\n",
         str(tmp_path / "locks"), name], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not locks.is_free(name)
        with pytest.raises(LockHeld, match=f"pid {holder.pid}"):
            with locks.hold(name):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert locks.is_free(name)  # the OS freed the dead holder's lock
    with locks.wait_for(name, timeout_s=1):
        assert not locks.is_free(name)


# -- dead runs on a real instance ---------------------------------------------------------------------------------


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with DagsterInstance.ephemeral() as instance:
        yield instance


def test_a_started_run_whose_lock_is_free_is_marked_failed_once(instance, tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    coordination.locks = FileLocks(tmp_path / "locks")
    alive = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.STARTED,
                                tags=run_tags(ORDERS, RDF, POLICY, Origin("interval", "due", "sensor")))
    dead = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.STARTED,
                               tags=run_tags(TableName("demo", ("sales",), "items"), RDF, POLICY,
                                             Origin("interval", "due", "sensor")))
    queued = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.NOT_STARTED,
                                 tags=run_tags(ORDERS, EXPIRE, POLICY, Origin("cron", "due", "schedule")))
    in_flight = runs_in_flight(instance)
    assert {r.run_id for r in in_flight} == {alive.run_id, dead.run_id, queued.run_id}
    assert queued_runs(in_flight) == 1
    # Records have no start time here; give them one older than the grace period.
    started = NOW - timedelta(minutes=10)
    in_flight = [replace(r, start_time=started) if r.status == DagsterRunStatus.STARTED else r for r in in_flight]
    with coordination.locks.hold(run_lock_name(alive.run_id)):
        assert mark_dead_runs(instance, coordination, in_flight, NOW) == [dead.run_id]
        assert mark_dead_runs(instance, coordination, in_flight, NOW) == []  # already marked
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive.run_id).status == DagsterRunStatus.STARTED
    history = coordination.all_history()[("demo.sales.items", RDF)]
    assert history.consecutive_failures == 1 and history.last_run_succeeded is False


def test_outcomes_of_a_lock_held_run_never_count(tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    coordination.record_outcome(Outcome("r1", "demo.t", RDF, NOW, NOW, False, "manual", failure_kind="lock_held"))
    history = coordination.all_history()[("demo.t", RDF)]
    assert history.runs == 0 and history.consecutive_failures == 0 and history.last_run_start is None


def test_a_batch_runs_tables_come_from_its_asset_selection(instance):
    """One writer per table does not rest on the floe/table tag: a run over several tables (a batch,
    or one started from Dagit) holds each of its tables in flight."""
    from dagster import AssetKey

    from floe_dagster.scheduling.inputs import ledger_state

    items = TableName("demo", ("sales",), "items")
    batch = create_run_for_test(
        instance, job_name="floe_maintenance", status=DagsterRunStatus.STARTED,
        asset_selection=frozenset({AssetKey(["demo", "sales", "orders"]), AssetKey(["demo", "sales", "items"])}),
        tags=shared_run_tags([ORDERS, items], RDF, Origin("interval", "due", "sensor")))
    (found,) = runs_in_flight(instance)
    assert found.run_id == batch.run_id and found.table_names == ("demo.sales.items", "demo.sales.orders")
    running = frozenset((t, found.operation) for t in found.table_names)
    assert ledger_state([], NOW, running).in_flight == {("demo.sales.items", RDF), ("demo.sales.orders", RDF)}
