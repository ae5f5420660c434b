"""SLA contracts through the real stack (issue 28, deliver 4): real PyIceberg tables in a SQLite catalog, a
real Dagster instance, the coordination database, the debt-score sensor as the daemon evaluates it, the
command line in process, and the HTTP API over real HTTP. No Spark: nothing is executed.

``demo.sales.orders`` promises a successful compaction at most an hour old; its last one started three
hours ago, and its conditions (never met) and minimum interval (a week) would hold it. ``demo.sales.events``
is due by its interval under a policy of higher priority. The breach: a failed ``sla_rewrite_data_files``
check in the instance (ERROR, its owner in the metadata), the orders compaction first in ``plan`` and in
the sensor's run requests (trigger ``sla``), ``floe_sla_breached`` over ``/metrics``; a success turns the
check green at the next tick. The owner is written as an attacker would: HTML, quotes and a backslash
come back exactly, on one line, in every surface."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone

import requests
from dagster import AssetCheckKey, AssetSelection, DagsterInstance, Definitions, define_asset_job
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from prometheus_client.parser import text_string_to_metric_families

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.cli import main as floe_cli
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_automation import evaluate_sensor
from floe_dagster_tests.reliability._support import create_fragmented_table
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY, start_server

ORDERS = TableName("demo", ("sales",), "orders")
EVENTS = TableName("demo", ("sales",), "events")
RDF = Operation.REWRITE_DATA_FILES
OWNER = '<img src=x onerror="alert(1)"> data\\team & co'
POLICIES = f"""
- name: orders-sla
  tablePattern: "demo.sales.orders"
  rewriteDataFiles: {{}}
  rewriteDataFilesSchedule:
    sla: {{maxAge: PT1H, severity: ERROR, owner: {json.dumps(OWNER)}}}
  triggerConditions: {{deleteFileCountAbove: 1000000, minIntervalMinutes: 10080}}
- name: events-busy
  tablePattern: "demo.sales.events"
  priority: 5
  rewriteDataFiles: {{}}
  rewriteDataFilesSchedule: {{interval: PT1H}}
"""
CHECK = AssetCheckKey(asset_key_for(ORDERS), "sla_rewrite_data_files")
CODE_LOCATION = """
from floe_dagster.defs.build import build_definitions
from floe_dagster.settings import load_settings

defs = build_definitions(load_settings())
"""
DAGIT_CHECK = """
query ($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode { assetChecksOrError { ... on AssetChecks { checks { name description } } } }
  }
  assetCheckExecutions(assetKey: $assetKey, checkName: "sla_rewrite_data_files", limit: 5) {
    runId status
    evaluation { success severity description metadataEntries { label ... on TextMetadataEntry { text } } }
  }
}
"""


def _success(coordination: Coordination, started: datetime, run_id: str) -> None:
    coordination.record_outcome(Outcome(run_id, ORDERS.qualified, RDF, started, started + timedelta(minutes=2),
                                        succeeded=True, trigger="manual", changed=True))


def _executions(instance: DagsterInstance):
    return instance.event_log_storage.get_asset_check_execution_history(CHECK, limit=10)


def test_a_breached_sla_fails_its_check_ranks_first_and_shows_in_metrics(tmp_path, dagster_home, monkeypatch,
                                                                         capsys):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"viewer:VIEWER:{hash_key(VIEWER_KEY)}\n")
    config = write_settings(tmp_path, POLICIES, f"api:\n  keys-file: {keys}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    for table in (ORDERS, EVENTS):
        create_fragmented_table(settings, table, files=3)
    refresh_table_cache(settings)
    coordination = Coordination(settings.coordination_url)
    _success(coordination, datetime.now(timezone.utc) - timedelta(hours=3), "old-run")

    defs = build_definitions(settings)
    declared = {key for checks in defs.asset_checks for key in checks.check_keys}
    assert CHECK in declared and AssetCheckKey(asset_key_for(EVENTS), "sla_rewrite_data_files") not in declared

    # plan: the breach first (trigger sla), past its conditions and minimum interval, before the
    # higher-priority policy's due work.
    assert floe_cli(["plan", "--json"]) == 0
    decisions = {(d["table"], d["operation"]): d for d in json.loads(capsys.readouterr().out)["decisions"]}
    orders, events = decisions[(ORDERS.qualified, RDF.value)], decisions[(EVENTS.qualified, RDF.value)]
    assert (orders["decision"], orders["rank"], orders["trigger"]) == ("run", 1, "sla")
    assert (events["decision"], events["rank"], events["trigger"]) == ("run", 2, "interval")
    assert orders["reasons"][1].startswith("sla: breached for ")
    assert orders["sla"]["breached"] is True and orders["sla"]["owner"] == OWNER and "sla" not in events

    with DagsterInstance.get() as instance:
        tick = evaluate_sensor(defs, instance)
        first = tick.run_requests[0]  # one batch: its tables in rank order, its trigger the first one's
        assert first.tags[T.TRIGGER] == "sla", first.tags
        assert first.tags[T.TABLES].split(",")[0] == ORDERS.qualified, first.tags

        # The check in the instance: failed, ERROR, its contract in the metadata.
        runs = _executions(instance)
        assert len(runs) == 1 and runs[0].status == AssetCheckExecutionRecordStatus.FAILED and runs[0].run_id == ""
        evaluation = runs[0].event.dagster_event.event_specific_data
        assert evaluation.severity.value == "ERROR" and not evaluation.passed
        meta = {k: v.value for k, v in evaluation.metadata.items()}
        assert meta["owner"] == OWNER and meta["max_age"] == "PT1H" and meta["breached_since"]
        assert datetime.fromisoformat(meta["last_success"]) < datetime.now(timezone.utc) - timedelta(hours=2)

        # Dagit, through its GraphQL, from the code location in its own process: the declared check and its
        # failed runless execution, the owner as text.
        from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

        module = tmp_path / "code_location.py"
        module.write_text(textwrap.dedent(CODE_LOCATION))
        with define_out_of_process_context(str(module), "defs", instance) as context:
            answer = execute_dagster_graphql(context, DAGIT_CHECK,
                                             {"assetKey": {"path": list(CHECK.asset_key.path)}})
        assert not answer.errors, answer.errors
        checks = answer.data["assetNodeOrError"]["assetChecksOrError"]["checks"]
        assert [c["name"] for c in checks if c["name"].startswith("sla_")] == ["sla_rewrite_data_files"]
        [execution] = answer.data["assetCheckExecutions"]
        assert (execution["runId"], execution["status"]) == ("", "FAILED")
        assert (execution["evaluation"]["success"], execution["evaluation"]["severity"]) == (False, "ERROR")
        assert execution["evaluation"]["description"].startswith("REWRITE_DATA_FILES: breached for ")
        assert {"label": "owner", "text": OWNER} in execution["evaluation"]["metadataEntries"]

        # Unchanged at the next tick: not reported again.
        evaluate_sensor(defs, instance)
        assert len(_executions(instance)) == 1

        # Dagit's Execute: the selected contract evaluated now, in a run, by the same rule.
        job = define_asset_job("sla_now", selection=AssetSelection.checks(CHECK))
        executed = Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=[job],
                               resources=defs.resources).resolve_job_def("sla_now").execute_in_process(instance=instance)
        assert executed.success
        in_run = _executions(instance)[0]
        assert in_run.run_id == executed.run_id and in_run.status == AssetCheckExecutionRecordStatus.FAILED

        server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
        try:
            text = requests.get(f"{url}/metrics", timeout=60).text
            breached = [sample for family in text_string_to_metric_families(text) if family.name == "floe_sla_breached"
                        for sample in family.samples]
            labels = {"table": ORDERS.qualified, "operation": "rewrite_data_files", "severity": "ERROR", "owner": OWNER}
            assert [(s.labels, s.value) for s in breached] == [(labels, 1.0)]
            line = next(li for li in text.splitlines() if li.startswith("floe_sla_breached{"))
            assert 'owner="<img src=x onerror=\\"alert(1)\\"> data\\\\team & co"' in line  # escaped, one line

            status = requests.get(f"{url}/api/v1/tables/sales/orders/trigger-status", headers={"X-API-Key": VIEWER_KEY},
                                  timeout=60).json()["operationStatuses"]["REWRITE_DATA_FILES"]
            assert status["sla"]["breached"] is True and status["sla"]["owner"] == OWNER
            assert status["sla"]["severity"] == "ERROR" and status["sla"]["measuredFrom"] == "last_success"

            assert floe_cli(["explain", "sales.orders"]) == 0
            explained = [li for li in capsys.readouterr().out.splitlines() if "SLA maxAge" in li]
            assert explained == [explained[0]] and explained[0].startswith(
                f"    SLA maxAge PT1H (ERROR, owner {json.dumps(OWNER)}): BREACHED - breached for ")

            # A success now: the check passes at the next tick, and /metrics says so.
            _success(coordination, datetime.now(timezone.utc) - timedelta(minutes=1), "new-run")
            evaluate_sensor(defs, instance)
            latest = _executions(instance)
            assert len(latest) == 3 and latest[0].status == AssetCheckExecutionRecordStatus.SUCCEEDED
            text = requests.get(f"{url}/metrics", timeout=60).text
            assert [s.value for f in text_string_to_metric_families(text) if f.name == "floe_sla_breached"
                    for s in f.samples] == [0.0]
        finally:
            server.should_exit = True
            thread.join(timeout=30)
