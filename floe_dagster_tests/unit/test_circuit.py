"""The launch circuit after an outage (core/plan/circuit.py, Coordination.outage_circuit, run_tick): the
probe of a half-open circuit never goes back to a table whose run met the outage while another table
is due. The clock is injected: every time below is given, never read."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from floe_dagster.core.plan.circuit import (
    PROBE_SKIP_REASON,
    TRIPPED_SKIP_REASON,
    OutageCircuit,
    only_the_probe,
    probe_decision,
)
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.basics.tables import TableName
from floe_dagster_tests.unit.test_ledger_view import coordination  # noqa: F401 (the fixture: SQLite, PostgreSQL)

T0 = datetime(2026, 12, 2, 1, 0, tzinfo=timezone.utc)
PAUSE = timedelta(minutes=5)
RDF = Operation.REWRITE_DATA_FILES
A, B, C = (TableName("demo", ("sales",), name) for name in ("a", "b", "c"))


def due(table: TableName, rank: int, shadow: bool = False) -> Decision:
    return Decision(table=table, operation=RDF, policy="p", decision="run", why=("interval: due",),
                    trigger="interval", debt_score=10.0 - rank, debt_breakdown={}, bytes_estimate=0,
                    next_eligible=None, rank=rank, shadow=shadow)


def outcome(run: str, table: TableName, finished: datetime, succeeded: bool, kind: str | None = None) -> Outcome:
    return Outcome(run, table.qualified, RDF, finished - timedelta(seconds=30), finished, succeeded, "interval", kind)


def test_the_probe_is_the_best_ranked_table_that_did_not_trip_the_circuit():
    decisions = [due(B, 1), due(A, 2), due(C, 3)]
    assert probe_decision(decisions, {B.qualified}).table == A
    kept = only_the_probe(decisions, {B.qualified})
    assert [(d.table.name, d.decision) for d in kept] == [("b", "skip"), ("a", "run"), ("c", "skip")]
    assert kept[0].reasons[0] == TRIPPED_SKIP_REASON and kept[2].reasons[0] == PROBE_SKIP_REASON
    assert kept[0].reasons[1:] == ("interval: due",)  # the planner's own reasons stay behind it


def test_a_table_that_tripped_it_probes_only_when_no_other_table_is_due():
    assert probe_decision([due(B, 1)], {B.qualified}).table == B
    # Every table that met the outage since the last success waits; a shadow decision never probes.
    decisions = [due(B, 1), due(A, 2), due(C, 3, shadow=True)]
    assert probe_decision(decisions, {A.qualified, B.qualified}).table == B
    assert probe_decision([due(A, 1)], set()).table == A and probe_decision([], {B.qualified}) is None


def test_the_circuit_remembers_which_tables_tripped_it_until_a_run_succeeds(coordination):  # SQLite and PostgreSQL
    coordination.record_outcome(outcome("r0", A, T0, succeeded=True))
    assert coordination.outage_circuit(T0, PAUSE) is None
    coordination.record_outcome(outcome("r1", B, T0 + timedelta(minutes=1), succeeded=False, kind="outage"))
    circuit = coordination.outage_circuit(T0 + timedelta(minutes=2), PAUSE)
    assert circuit == OutageCircuit(T0 + timedelta(minutes=6), frozenset({B.qualified}))
    assert circuit.is_open(T0 + timedelta(minutes=5, seconds=59)) and not circuit.is_open(T0 + timedelta(minutes=6))
    # The probe on another table met the outage too: both wait, and the pause starts again.
    coordination.record_outcome(outcome("r2", C, T0 + timedelta(minutes=7), succeeded=False, kind="outage"))
    circuit = coordination.outage_circuit(T0 + timedelta(minutes=8), PAUSE)
    assert circuit == OutageCircuit(T0 + timedelta(minutes=12), frozenset({B.qualified, C.qualified}))
    # A table's own failure neither trips it nor joins the list.
    coordination.record_outcome(outcome("r3", A, T0 + timedelta(minutes=13), succeeded=False))
    assert coordination.outage_circuit(T0 + timedelta(minutes=13), PAUSE).tripped_by == {B.qualified, C.qualified}
    coordination.record_outcome(outcome("r4", A, T0 + timedelta(minutes=14), succeeded=True))
    assert coordination.outage_circuit(T0 + timedelta(minutes=14), PAUSE) is None
    # After a success, only the outages since count.
    coordination.record_outcome(outcome("r5", C, T0 + timedelta(minutes=20), succeeded=False, kind="outage"))
    assert coordination.outage_circuit(T0 + timedelta(minutes=20), PAUSE).tripped_by == {C.qualified}
