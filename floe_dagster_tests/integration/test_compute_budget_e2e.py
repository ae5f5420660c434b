"""The compute budget through the real stack (issue 29, deliverable 3): a real compaction on Spark records
its executor CPU in the coordination database; the next plan (``floe-dagster plan``, the real tick's inputs)
charges the budget's window with that recorded figure, not an estimate, and holds the other due table back
with ``budget_compute`` while the window is over-spent; ``explain`` tells it as the table's wait, and
``/metrics`` (over real HTTP) serves the window's spend against the limit. With room, the table is admitted."""

from __future__ import annotations

import json
import re
import uuid

import pyarrow.parquet as pq
import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.cli import main
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._seeded import seeded_table, viewer_config
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY, start_server

pytestmark = pytest.mark.spark

POLICY = """
- name: budgeted
  tablePattern: "demo.budget.*"
  rewriteDataFiles: {strategy: BINPACK, minInputFiles: 2}
  rewriteDataFilesSchedule: {interval: PT1H}
"""
RAN, WAITS = TableName("demo", ("budget",), "ran"), TableName("demo", ("budget",), "waits")
BUDGET_VARIABLE = "FLOE_SCHEDULER__MAX_COMPUTE_HOURS_PER_HOUR"


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    config, settings = viewer_config(tmp_path, POLICY, monkeypatch)
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("budget")
    for table in (RAN, WAITS):
        seeded_table(catalog, f"budget.{table.name}", 4, 20)
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield config, settings, instance


def planned(config, capsys) -> dict[str, dict]:
    assert main(["--config", str(config), "plan", "--json"]) == 0
    return {d["table"]: d for d in json.loads(capsys.readouterr().out)["decisions"]
            if d["operation"] == "REWRITE_DATA_FILES"}


def test_the_next_plan_is_charged_with_the_compute_the_finished_run_recorded(lake, capsys, monkeypatch):
    config, settings, instance = lake
    result = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key="REWRITE_DATA_FILES", asset_selection=[asset_key_for(RAN)])
    assert result.success
    [run] = Coordination(settings.coordination_url).recorded_runs()[(RAN.qualified, Operation.REWRITE_DATA_FILES)]
    spent = run.compute.executor_cpu_s
    assert run.compute.source == "spark" and spent > 0

    # Half of what the run really spent: the window is over-spent, the other due table waits.
    monkeypatch.setenv(BUDGET_VARIABLE, repr(spent / 2 / 3600))
    decisions = planned(config, capsys)
    assert decisions[RAN.qualified]["reasons"][0].startswith("not_due: interval PT1H")  # ran within the hour
    waits = decisions[WAITS.qualified]
    assert waits["decision"] == "skip", waits
    reason = waits["reasons"][0]
    assert reason.startswith(f"budget_compute: {spent / 3600:.3g} of {spent / 2 / 3600:.3g} compute hours used in "
                             f"the last hour ({spent / 3600:.3g} spent by 1 finished run(s), 0 estimated for 0 in "
                             "flight)"), reason
    assert "over-spent" in reason
    # Its estimate learned the fleet's compute per byte from that run (the table has no history of its own).
    assert re.search(r"this run needs \S+ compute s: \S+ s/(GiB|run) \(no runs; prior \S+ s/(GiB|run), the fleet\)",
                     reason), reason

    assert main(["--config", str(config), "explain", WAITS.qualified, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["operationStatuses"]["REWRITE_DATA_FILES"]["waitsThisTick"] == reason
    window = explained["computeBudget"]  # the over-spend, whatever the table's own verdict
    assert (window["spentSeconds"], window["finishedRuns"], window["overSpent"]) == (round(spent, 1), 1, True)
    assert window["limitSeconds"] == round(spent / 2, 1) and "over-spent" in window["summary"]

    server, thread, url = start_server(create_app(load_settings(config), KeyStore(settings.api), instance))
    try:
        served = requests.get(f"{url}/metrics", headers={"X-API-Key": VIEWER_KEY}, timeout=60).text
    finally:
        server.should_exit = True
        thread.join(20)
    assert float(re.search(r"^floe_compute_budget_spent_seconds (\S+)$", served, re.M).group(1)) == \
        pytest.approx(spent)
    assert float(re.search(r"^floe_compute_budget_limit_seconds (\S+)$", served, re.M).group(1)) == \
        pytest.approx(spent / 2)

    # With room for the run's spend and the estimate, the waiting table is admitted.
    monkeypatch.setenv(BUDGET_VARIABLE, "10")
    assert planned(config, capsys)[WAITS.qualified]["decision"] == "run"
