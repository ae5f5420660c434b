"""Retention (scheduling/retention.py) on a real Dagster instance and coordination database: floe's
finished runs older than the setting are deleted with their ledger and outcome rows; what the planner
needs (the history fold, the ledger's last 8 days, running runs) stays, and a plan made before and
after pruning gives the same decisions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.ledger_view import OutcomeWindow, read_ledger_view
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.basics.tables import TableName
from floe_dagster.scheduling.inputs import LEDGER_LOOKBACK, ledger_state
from floe_dagster.scheduling.retention import prune, prune_if_due
from floe_dagster_tests.unit.test_planner import metrics

RDF = Operation.REWRITE_DATA_FILES
TABLES = [TableName("demo", ("sales",), name) for name in ("a", "b", "c")]
POLICIES = parse_policies_text("""
- name: p
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT6H}
""")


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with DagsterInstance.ephemeral() as instance:
        yield instance


def planned(coordination: Coordination, now: datetime) -> list[tuple]:
    view = read_ledger_view(coordination, now - LEDGER_LOOKBACK, OutcomeWindow(now - timedelta(hours=1)))  # a tick's
    ledger = ledger_state(view.admitted, now, frozenset())
    result = plan(PlanInput(
        now=now, catalog_tables=TABLES, loaded_tables=frozenset(TABLES), policies=POLICIES,
        limits=SchedulerSettings(), metrics={t: metrics(t) for t in TABLES}, history=view.history,
        in_flight=ledger.in_flight, last_attempts=ledger.last_attempts, bytes_last_hour=ledger.bytes_in_flight,
    ))
    return [(d.table.qualified, d.operation, d.decision, d.reasons, d.attempt, d.rank) for d in result.decisions]


def test_retention_deletes_old_floe_runs_and_rows_and_keeps_what_the_planner_needs(instance, tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    # Runs created now, pruned as seen 40 days later with 30 days of retention: all are old.
    floe_done = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.SUCCESS,
                                    tags={"floe/operation": RDF.value})
    floe_failed = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.FAILURE,
                                      tags={"floe/operation": RDF.value})
    floe_running = create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.STARTED,
                                       tags={"floe/operation": RDF.value})
    theirs = create_run_for_test(instance, job_name="daily_sales_pipeline", status=DagsterRunStatus.SUCCESS)
    now = datetime.now(timezone.utc) + timedelta(days=40)

    old, recent = now - timedelta(days=35), now - timedelta(days=2)
    a, b, c = (t.qualified for t in TABLES)
    coordination.admit([RunDecision(TABLES[0], RDF, "interval", "due", slot="s-old")], old)
    coordination.admit([RunDecision(TABLES[1], RDF, "interval", "due", slot="s-recent", attempt=2, batch_key="k")],
                       recent)
    coordination.attach_run("k", floe_running.run_id)
    for run_id, table, start, ok, changed in [("r1", a, old, True, True), ("r2", b, old, False, None),
                                              ("r3", b, old + timedelta(hours=1), False, None),
                                              ("r4", c, recent, True, False), ("r5", c, old, True, False)]:
        coordination.record_outcome(Outcome(run_id, table, RDF, start, start + timedelta(minutes=1), ok, "interval",
                                            changed=changed))
    history_before = coordination.all_history()
    plan_before = planned(coordination, now)

    pruned = prune(instance, coordination, now, days=30)

    assert pruned.runs == 2 and pruned.outcome_rows == 4 and pruned.ledger_rows == 1
    remaining = {run.run_id for run in instance.get_runs()}
    assert remaining == {floe_running.run_id, theirs.run_id}  # running, and not floe's, stay
    assert [o["run_id"] for o in coordination.outcomes_for(c)] == ["r4"]
    assert [row.table_name for row in coordination.ledger_rows()] == [b]  # the last 8 days stay
    # The fold the planner reads is untouched: last success, failure streak, zero-change streak.
    history = coordination.all_history()
    assert history == history_before
    assert history[(b, RDF)].consecutive_failures == 2 and history[(c, RDF)].consecutive_zero_change == 2
    assert planned(coordination, now) == plan_before


def test_retention_runs_once_a_day_and_not_at_all_when_off(instance, tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    create_run_for_test(instance, job_name="floe_maintenance", status=DagsterRunStatus.SUCCESS,
                        tags={"floe/operation": RDF.value})
    now = datetime.now(timezone.utc) + timedelta(days=40)
    assert prune_if_due(instance, coordination, now, days=0, shard="default") is None
    assert len(instance.get_runs()) == 1
    first = prune_if_due(instance, coordination, now, days=30, shard="default")
    assert first is not None and first.runs == 1
    assert prune_if_due(instance, coordination, now + timedelta(hours=23), days=30, shard="default") is None
    assert prune_if_due(instance, coordination, now + timedelta(hours=25), days=30, shard="default") is not None
