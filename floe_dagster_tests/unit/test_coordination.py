"""The trigger ledger and the history fold, on a real SQLite coordination database."""

from datetime import datetime, timedelta, timezone

from floe_dagster.coordination.database import Admission, Coordination
from floe_dagster.core.history import Outcome
from floe_dagster.core.operations import Operation

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
RDF = Operation.REWRITE_DATA_FILES


def test_same_item_is_admitted_once_across_launchers(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    first, second = Coordination(url), Coordination(url)
    item = Admission("demo.sales.orders", RDF, "2026-11-22T12:00:00+00:00", 0, "cron", "due")
    assert first.admit([item], T0, "schedule") == [item]
    assert second.admit([item], T0, "sensor") == []
    retry = Admission("demo.sales.orders", RDF, "2026-11-22T12:00:00+00:00", 1, "cron", "retry")
    assert second.admit([retry], T0, "sensor") == [retry]
    assert [r["attempt"] for r in first.ledger_rows("demo.sales.orders")] == [0, 1]
    assert item.run_key != retry.run_key and "attempt-1" in retry.run_key


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
    assert c.bytes_rewritten_since(T0) == 100 and c.bytes_rewritten_since(T0 + timedelta(hours=2)) == 0


def test_outage_circuit_opens_and_closes(tmp_path):
    c = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    pause = timedelta(minutes=5)
    assert c.outage_circuit(T0, pause) is None
    c.record_outcome(outcome("o1", False, T0, kind="outage"))
    assert c.outage_circuit(T0, pause) == T0 + timedelta(minutes=1) + pause
    state = c.all_history()[("demo.t", RDF)]  # an outage is not the table's failure
    assert state.consecutive_failures == 0 and state.runs == 0
    c.record_outcome(outcome("ok", True, T0 + timedelta(minutes=10)))
    assert c.outage_circuit(T0 + timedelta(minutes=12), pause) is None
