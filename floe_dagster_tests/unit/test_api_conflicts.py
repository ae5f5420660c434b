"""Lost commit races and orphan cleanup's backlog over real HTTP, without Spark: the FastAPI application on
uvicorn, a real PyIceberg SQLite catalog, a real Dagster instance and the coordination database.

The runs are real Dagster runs whose events are the ones the maintenance asset writes (the conflict
observation is built by ``defs/assets.py`` itself); a stand-in for the daemon (its heartbeat, and each
queued run started and finished with those events) lets a trigger with ``?wait=true`` see its runs
finish. Covers: a trigger whose only operation lost its race (per-operation ``CONFLICT``, Floe's record
status ``SUCCESS``, the record-level ``conflicts``), the operations list and its ``?status=CONFLICT``
filter, the ``COMMIT_CONFLICTS`` health issue after ten in a row (API, CLI text, Dagit's check) and the
orphan backlog in trigger status."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from dagster import (
    AssetMaterialization,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)
from dagster._core.events import AssetObservationData, StepMaterializationData
from dagster._daemon.types import DaemonHeartbeat

from floe_dagster.api.auth import hash_key
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.commit_conflicts import CONFLICT_STREAK_ISSUE
from floe_dagster.core.runs.history import CONFLICT, Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.table_outcomes import _conflict_observation
from floe_dagster.defs.health_events import table_health_events
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.policies import load_policy_set
from floe_dagster.reports.health_report import format_health_text, health_report
from floe_dagster_tests.unit.test_api_http import assert_error, serving

POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: P1D}
"""
OPERATOR_KEY = "floe_conflictOperatorOperator00001"
ORDERS = TableName("demo", ("sales",), "orders")
WINNER = "snapshot 4242 (overwrite) at 2026-11-24T12:00:00+00:00"
RACE = ("rewrite_data_files on 'demo.sales.orders' lost a commit race: a concurrent row-level DELETE, UPDATE or "
        f"MERGE added deletes to a file this rewrite replaced; the commit that won: {WINNER} (Cannot commit, "
        "found new position delete for replaced data file)")


def _orders(settings) -> None:
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    orders = _create(catalog, "sales.orders")
    for i in range(3):
        orders.append(rows(i * 10, 10))
    refresh_table_cache(settings)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    keys = f"ops-bot:OPERATOR:{hash_key(OPERATOR_KEY)}\n"
    with serving(tmp_path_factory.mktemp("api-conflicts"), POLICIES, keys, _orders) as served:
        yield {**served, "coordination": CoordinationResource.from_settings(served["settings"]).coordination}


def call(api, method, path, **kwargs):
    import requests

    return requests.request(method, api["url"] + path, headers={"X-API-Key": OPERATOR_KEY}, timeout=60, **kwargs)


def _event(run: DagsterRun, kind: DagsterEventType, data=None, message: str = "") -> DagsterEvent:
    return DagsterEvent(event_type_value=kind.value, job_name=run.job_name, event_specific_data=data,
                        message=message)


def finish_run(instance: DagsterInstance, run: DagsterRun, table: TableName, op: Operation, *,
               conflict: str | None = None, metadata: dict | None = None) -> None:
    """Start and finish ``run`` with the events the maintenance asset writes: the conflict observation
    and the ``dagster/floe.conflicts`` tag of a lost race, else a materialization with ``metadata``."""
    instance.report_dagster_event(_event(run, DagsterEventType.RUN_START), run.run_id)
    if conflict is not None:
        decision = T.decision_from_tags(table, op, run.tags)
        instance.add_run_tags(run.run_id, {T.CONFLICTS: table.qualified})
        observation = _conflict_observation(decision, conflict)
        instance.report_dagster_event(_event(run, DagsterEventType.ASSET_OBSERVATION,
                                             AssetObservationData(observation)), run.run_id)
    else:
        materialization = AssetMaterialization(asset_key=asset_key_for(table), partition=op.value,
                                               metadata=metadata or {"changed": True})
        instance.report_dagster_event(_event(run, DagsterEventType.ASSET_MATERIALIZATION,
                                             StepMaterializationData(materialization)), run.run_id)
    instance.report_dagster_event(_event(run, DagsterEventType.RUN_SUCCESS), run.run_id)


def a_run(instance: DagsterInstance, table: TableName, op: Operation, trigger_id: str) -> DagsterRun:
    run = DagsterRun(job_name="floe_maintenance", status=DagsterRunStatus.NOT_STARTED,
                     tags={T.TABLE: table.qualified, T.OPERATION: op.value, T.TRIGGER: "manual",
                           T.TRIGGER_ID: trigger_id, "dagster/partition": op.value})
    return instance.add_run(run)


class StandInDaemon:
    """The queued-run daemon's heartbeat, and each queued run of the trigger started and finished as a
    lost race (the events the asset writes), instead of executed."""

    def __init__(self, instance: DagsterInstance, conflict: str):
        self.instance, self.conflict = instance, conflict
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)

    def _run(self):
        while not self.stop.is_set():
            self.instance.add_daemon_heartbeat(DaemonHeartbeat(time.time(), "QUEUED_RUN_COORDINATOR", "stand-in"))
            for record in self.instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
                run = record.dagster_run
                self.instance.report_dagster_event(_event(run, DagsterEventType.RUN_DEQUEUED), run.run_id)
                table = TableName.parse(run.tags[T.TABLE], "demo")
                finish_run(self.instance, run, table, Operation(run.tags[T.OPERATION]), conflict=self.conflict)
            self.stop.wait(0.2)


def test_a_trigger_whose_operation_lost_its_race_is_a_success_with_its_conflict(api):
    instance = api["instance"]
    body = {"catalog": "demo", "namespace": "sales", "table": "orders", "operations": ["REWRITE_DATA_FILES"]}
    with StandInDaemon(instance, RACE):
        response = call(api, "POST", "/api/v1/maintenance/trigger?wait=true&timeout=60", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    # Floe's record status: a lost race is not a failure (no FAILED, no PARTIAL_FAILURE).
    assert answer["status"] == "SUCCESS", answer
    [result] = answer["operationResults"]
    assert result["operationType"] == "REWRITE_DATA_FILES" and result["status"] == "CONFLICT"
    assert WINNER in result["conflict"] and result["errorMessage"] is None and result["metrics"] == {}
    assert answer["conflicts"] == [{"operationType": "REWRITE_DATA_FILES", "runId": result["runId"],
                                    "conflict": result["conflict"]}]
    assert "REWRITE_DATA_FILES lost a commit race" in answer["message"] and "not a failure" in answer["message"]
    run = instance.get_run_by_id(result["runId"])
    assert run.status == DagsterRunStatus.SUCCESS and run.tags[T.CONFLICTS] == "demo.sales.orders"

    # The operations list says SUCCESS (its run succeeded) with the conflict beside it.
    listed = call(api, "GET", f"/api/v1/operations?triggerId={answer['orchestrationId']}").json()
    [item] = listed["operations"]
    assert (item["runId"], item["status"], item["table"]) == (result["runId"], "SUCCESS", "demo.sales.orders")
    assert item["conflict"] == result["conflict"] and item["errorMessage"] is None
    assert item["conflicts"] == [{"table": "demo.sales.orders", "conflict": result["conflict"]}]


def test_the_operations_filter_conflict_selects_the_runs_that_lost_a_race(api):
    instance = api["instance"]
    won = a_run(instance, ORDERS, Operation.ORPHAN_CLEANUP, "won")
    finish_run(instance, won, ORDERS, Operation.ORPHAN_CLEANUP, metadata={"orphan_files_count": 2})
    lost = a_run(instance, ORDERS, Operation.REWRITE_DATA_FILES, "lost")
    finish_run(instance, lost, ORDERS, Operation.REWRITE_DATA_FILES, conflict=RACE)

    def run_ids(query):
        answer = call(api, "GET", f"/api/v1/operations?{query}")
        assert answer.status_code == 200, answer.text
        return {o["runId"] for o in answer.json()["operations"]}

    conflicts = run_ids("status=CONFLICT&limit=100")
    assert lost.run_id in conflicts and won.run_id not in conflicts
    assert conflicts == run_ids("status=conflict&limit=100&table=demo.sales.orders")  # any case, by table
    assert not run_ids("status=CONFLICT&table=demo.sales.other")
    # Floe's SUCCESS still lists every run that succeeded, the lost race with its conflict field.
    succeeded = run_ids("status=SUCCESS&limit=100")
    assert {won.run_id, lost.run_id} <= succeeded
    assert lost.run_id not in run_ids("status=FAILED&limit=100")
    page = call(api, "GET", "/api/v1/operations?status=CONFLICT&limit=1").json()
    assert page["total"] >= 2 and page["hasMore"] and len(page["operations"]) == 1
    # An unknown status is refused as Floe refuses it, naming the valid ones (CONFLICT among them).
    body = assert_error(call(api, "GET", "/api/v1/operations?status=LOST"), 400, "VALIDATION_FAILED",
                        "Invalid status: LOST", "CONFLICT")
    assert body["details"] == {"field": "status"}


def test_ten_lost_races_in_a_row_are_a_health_issue_naming_the_writer(api):
    settings, coordination = api["settings"], api["coordination"]
    start = datetime.now(timezone.utc) - timedelta(hours=12)

    def lose(i: int, writer: str = "overwrite"):
        at = start + timedelta(minutes=20 * i)
        message = RACE.replace("(overwrite)", f"({writer})")
        coordination.record_outcome(Outcome(f"race-{i}", ORDERS.qualified, Operation.REWRITE_DATA_FILES, at,
                                            at + timedelta(minutes=1), False, "interval", CONFLICT, message,
                                            conflict_writer=writer))

    def conflict_issues(health):
        return [i for i in health["issueDetails"] if i["type"] == "COMMIT_CONFLICTS"]

    before = call(api, "GET", "/api/v1/tables/sales/orders/health").json()
    for i in range(CONFLICT_STREAK_ISSUE - 1):
        lose(i, "delete" if i == 0 else "overwrite")
    almost = call(api, "GET", "/api/v1/tables/sales/orders/health").json()
    assert not conflict_issues(almost) and almost["healthStatus"] == before["healthStatus"]
    lose(CONFLICT_STREAK_ISSUE - 1)

    health = call(api, "GET", "/api/v1/tables/sales/orders/health").json()
    [issue] = conflict_issues(health)
    assert issue["severity"] == "warning" and issue["operation"] == "REWRITE_DATA_FILES"
    assert issue["consecutive_conflicts"] == CONFLICT_STREAK_ISSUE and issue["writer_operation"] == "overwrite"
    for fragment in ("REWRITE_DATA_FILES", f"lost {CONFLICT_STREAK_ISSUE} commit races in a row",
                     "overwrite commits", "quietFor"):
        assert fragment in issue["message"]
    assert {"type": "COMMIT_CONFLICTS", "severity": "warning", "message": issue["message"]} in health["issues"]
    assert health["healthStatus"] in ("warning", "critical")
    issue_counts = ("critical_issues", "warning_issues", "info_issues")  # a busy writer is no debt
    assert [health["debt"]["inputs"][k] for k in issue_counts] == [before["debt"]["inputs"][k] for k in issue_counts]

    # explain shows the streak and the writer; the CLI's health text and Dagit's check the issue.
    status = call(api, "GET", "/api/v1/tables/sales/orders/trigger-status").json()
    shown = status["operationStatuses"]["REWRITE_DATA_FILES"]["conflicts"]
    assert (shown["consecutiveConflicts"], shown["writerOperation"]) == (CONFLICT_STREAK_ISSUE, "overwrite")
    record = health_report(settings, coordination, ORDERS, datetime.now(timezone.utc))
    assert f"warning  COMMIT_CONFLICTS: REWRITE_DATA_FILES lost {CONFLICT_STREAK_ISSUE}" in format_health_text(record)
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        metrics = collector.metrics_for(ORDERS, "summary")
    events = table_health_events(ORDERS, metrics, load_policy_set(settings), datetime.now(timezone.utc),
                                 coordination.all_history())
    assert not events.evaluation.passed and "issue COMMIT_CONFLICTS" in events.evaluation.metadata
    assert "overwrite commits" in events.evaluation.description

    # A success ends the streak, and the issue with it.
    done = start + timedelta(hours=5)
    coordination.record_outcome(Outcome("race-won", ORDERS.qualified, Operation.REWRITE_DATA_FILES, done,
                                        done + timedelta(minutes=1), True, "interval", changed=True))
    assert not conflict_issues(call(api, "GET", "/api/v1/tables/sales/orders/health").json())


def test_orphan_cleanups_backlog_is_in_trigger_status(api):
    instance = api["instance"]

    def orphan_backlog():
        answer = call(api, "GET", "/api/v1/tables/sales/orders/trigger-status")
        assert answer.status_code == 200, answer.text
        statuses = answer.json()["operationStatuses"]
        assert statuses["REWRITE_DATA_FILES"]["backlog"] is None  # no partition-scoped rewrite
        quarantine = statuses["ORPHAN_CLEANUP"]["quarantine"]  # explain shows the choice: the default here
        assert quarantine["enabled"] is True and quarantine["explicit"] is False and quarantine["gracePeriod"] == "P7D"
        assert "quarantine: false opts out" in quarantine["reason"]
        return statuses["ORPHAN_CLEANUP"]["backlog"]

    capped = a_run(instance, ORDERS, Operation.ORPHAN_CLEANUP, "capped")
    finish_run(instance, capped, ORDERS, Operation.ORPHAN_CLEANUP, metadata={
        "orphan_files_count": 3, "orphan_files_count_exact": True, "orphan_cap": 3, "orphan_cap_reached": True,
        "orphan_backlog_files": 20000, "orphan_backlog_exact": False, "orphan_rounds": 1})
    backlog = orphan_backlog()
    assert {k: backlog[k] for k in ("files", "exact", "cap", "capReached", "runId")} == {
        "files": 20000, "exact": False, "cap": 3, "capReached": True, "runId": capped.run_id}
    datetime.fromisoformat(backlog["at"])

    cleared = a_run(instance, ORDERS, Operation.ORPHAN_CLEANUP, "cleared")
    finish_run(instance, cleared, ORDERS, Operation.ORPHAN_CLEANUP, metadata={
        "orphan_files_count": 3, "orphan_backlog_files": 0, "orphan_backlog_exact": True})
    assert orphan_backlog() is None
