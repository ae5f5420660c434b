"""A shadow policy (``mode: shadow``) through the real stack: a real Dagster instance, the demo's real
PyIceberg catalog, the debt-score sensor and the tick it plans with, the API over real HTTP, the
command line. Over several ticks no run is ever created while the ledger records each decision once
per slot and Dagit shows it on the table's asset; switching the policy to live creates runs at the
next tick, and a real Spark run then maintains the table."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
import requests
from dagster import AssetRecordsFilter, DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.cli import main as floe_cli
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.run_decision import SHADOW_ATTEMPT
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import DemoSizes, build_demo_lakehouse
from floe_dagster.iceberg.table_cache import read_cached_tables, refresh_table_cache
from floe_dagster.policies import load_policy_set
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_automation import evaluate_schedule, evaluate_sensor, execute
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY, start_server

pytestmark = pytest.mark.spark

POLICY = """
- name: sales-onboarding
  tablePattern: "demo.sales.*"
  mode: {mode}
  rewriteDataFiles: {{}}
  rewriteDataFilesSchedule: {{interval: PT1H}}
  expireSnapshots: {{retainLast: 2, maxSnapshotAge: PT0S}}
  expireSnapshotsSchedule: {{interval: PT1H}}
- name: ops-cron-onboarding
  tablePattern: "demo.ops.*"
  mode: shadow
  rewriteManifests: {{}}
  rewriteManifestsSchedule: {{cronExpression: "* * * * *"}}
"""
OPS_CRON_SCHEDULE = "floe_ops_cron_onboarding_rewrite_manifests"  # its cron rule's schedule
SALES = ("customers", "events", "orders")
OPS = ("EXPIRE_SNAPSHOTS", "REWRITE_DATA_FILES")
ORDERS = TableName("demo", ("sales",), "orders")
SIZES = DemoSizes(small_files=6, snapshots=3, position_delete_commits=1, old_orphans=0, young_orphans=0,
                  skewed_files=2, other_partition_files=1)


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"viewer:VIEWER:{hash_key(VIEWER_KEY)}\n")
    config = write_settings(tmp_path, POLICY.format(mode="shadow"),
                            f"batching: {{max-tables: 1}}\napi:\n  keys-file: {keys}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, SIZES)
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield settings, instance, tmp_path / "policies" / "policies.yaml"


def shadow_rows(coordination, prefix="demo.sales."):
    return [row for row in coordination.ledger_rows() if row.shadow and row.table_name.startswith(prefix)]


def test_a_shadow_policy_records_what_would_run_and_runs_nothing_until_switched_to_live(lake, capsys):
    settings, instance, policy_file = lake
    defs = build_definitions(settings)
    coordination = CoordinationResource.from_settings(settings).coordination
    started = datetime.now(timezone.utc)

    # Tick 1 (the sensor): each sales table's first operation would run (one operation per table a
    # tick, in the shadow pass too); none does.
    first = evaluate_sensor(defs, instance)
    assert not first.run_requests
    assert "3 shadow decision(s) recorded (no run)" in first.skip_message
    rows = shadow_rows(coordination)
    assert sorted((r.table_name, r.operation.value) for r in rows) == sorted(
        (f"demo.sales.{t}", "REWRITE_DATA_FILES") for t in SALES)
    assert all(r.attempt == SHADOW_ATTEMPT and r.run_id is None and r.reason.startswith("would run: interval: ")
               and r.reason.endswith("(shadow policy 'sales-onboarding')") for r in rows)
    assert [r for r in coordination.ledger_rows() if not r.shadow] == []  # nothing live was admitted

    # A shadow cron rule's schedule records its slot's decisions too, and requests no run.
    cron = evaluate_schedule(defs, instance, OPS_CRON_SCHEDULE, datetime.now(timezone.utc))
    assert not cron.run_requests and "3 shadow decision(s) recorded (no run)" in cron.skip_message
    assert {(r.table_name, r.trigger) for r in shadow_rows(coordination, "demo.ops.")} == {
        (f"demo.ops.{t}", "cron") for t in ("audit_log", "healthy", "metrics")}

    # Dagit: an observation on the table's asset, in the operation's partition.
    observations = [r.asset_observation for r in instance.fetch_observations(
        AssetRecordsFilter(asset_key=asset_key_for(ORDERS), asset_partitions=["REWRITE_DATA_FILES"]), limit=20).records]
    shadowed = [o for o in observations if "shadow" in o.metadata]
    assert len(shadowed) == 1
    meta = {k: getattr(v, "value", v) for k, v in shadowed[0].metadata.items()}
    assert meta["shadow"] is True and meta["operation"] == "REWRITE_DATA_FILES"
    assert meta["reason"].endswith("(shadow policy 'sales-onboarding')")
    assert datetime.fromisoformat(meta["would_run_at"]) >= started
    assert shadowed[0].description.startswith("shadow: would run at ")

    # Tick 2 (the sensor again): the shadow rows stand in for runs, so the rewrites are not due again
    # (nothing recorded twice) and each table's expiry, which waited, is recorded now.
    second = evaluate_sensor(defs, instance)
    assert not second.run_requests and "3 shadow decision(s) recorded (no run)" in second.skip_message
    assert sorted((r.table_name, r.operation.value) for r in shadow_rows(coordination)) == sorted(
        (f"demo.sales.{t}", op) for t in SALES for op in OPS)
    third_now = evaluate_sensor(defs, instance)
    assert not third_now.run_requests and "shadow decision" not in third_now.skip_message
    assert len(shadow_rows(coordination)) == 6

    # Tick 3, one interval later, through the tick the sensor plans with: recorded again, once.
    later = datetime.now(timezone.utc) + timedelta(hours=1, minutes=1)
    loaded = frozenset(read_cached_tables(settings) or ())
    for _ in range(2):
        third = run_tick(settings, instance, coordination, later, "sensor:default", loaded)
    assert third.batches == [] and third.admitted == []
    assert len(shadow_rows(coordination)) == 12
    assert instance.get_runs() == []  # no run was ever created

    # The surfaces: explain (trigger status), the shadow operations and /metrics over real HTTP; plan.
    when = later + timedelta(hours=1, minutes=1)
    server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
    try:
        headers = {"X-API-Key": VIEWER_KEY}
        status = requests.get(f"{url}/api/v1/tables/sales/orders/trigger-status", params={"at": when.isoformat()},
                              headers=headers, timeout=60).json()["operationStatuses"]["REWRITE_DATA_FILES"]
        assert status["shouldTrigger"] is False and status["shadow"] is True
        decision = status["shadowDecision"]
        assert decision["wouldRun"] is True and decision["wouldRunAt"] == when.isoformat()
        assert decision["summary"].startswith(f"shadow: would run at {when.isoformat()} because interval: ")
        assert datetime.fromisoformat(decision["lastRecordedAt"]) == later
        now_status = requests.get(f"{url}/api/v1/tables/sales/orders/trigger-status", headers=headers,
                                  timeout=60).json()["operationStatuses"]["REWRITE_DATA_FILES"]
        assert now_status["shadowDecision"]["wouldRun"] is False  # the last shadow row is its last "run"

        page = requests.get(f"{url}/api/v1/operations", params={"status": "shadow", "table": "demo.sales.orders"},
                            headers=headers, timeout=60).json()
        assert page["total"] == 4 and all(item["shadow"] and item["runId"] is None for item in page["operations"])
        assert datetime.fromisoformat(page["operations"][0]["recordedAt"]) == later
        assert requests.get(f"{url}/api/v1/operations", headers=headers, timeout=60).json()["total"] == 0

        metrics = requests.get(f"{url}/metrics", headers=headers, timeout=60).text
        assert re.search(r'^floe_shadow_decisions\{operation="rewrite_data_files"\} 6\.0$', metrics, re.M), metrics
        assert re.search(r'^floe_shadow_last_decision_timestamp_seconds\{operation="expire_snapshots"\} ', metrics,
                         re.M)
    finally:
        server.should_exit = True
        thread.join(20)
    assert floe_cli(["plan", "--at", when.isoformat()]) == 0
    printed = capsys.readouterr().out
    assert "0 to run, 6 shadow (recorded by the tick, never run)" in printed  # one a table; the ops cron rule's 3 too
    assert re.search(r"#\d+\s+shadow demo\.sales\.orders REWRITE_DATA_FILES \[interval\] debt \d+: shadow: would run "
                     rf"at {re.escape(when.isoformat())} because interval: ", printed), printed
    assert floe_cli(["explain", "demo.sales.orders", "--at", when.isoformat()]) == 0
    assert f"REWRITE_DATA_FILES: SHADOW - shadow: would run at {when.isoformat()}" in capsys.readouterr().out

    # Switched to live: the next tick requests the runs (the shadow rows were never runs), the same
    # policy version; a real run maintains the table.
    shadow_version = load_policy_set(settings).get("sales-onboarding").version
    policy_file.write_text(POLICY.format(mode="live"))  # the ops policy stays in shadow
    live = evaluate_sensor(defs, instance)
    requests_by_item = {(r.tags[T.TABLE], r.tags[T.OPERATION]): r for r in live.run_requests}
    assert set(requests_by_item) == {(f"demo.sales.{t}", "REWRITE_DATA_FILES") for t in SALES}  # one a table
    request = requests_by_item[("demo.sales.orders", "REWRITE_DATA_FILES")]
    assert request.tags[T.TRIGGER] == "interval" and request.run_key.endswith("|attempt-0")
    assert request.tags[T.POLICY_VERSION] == shadow_version
    result = execute(defs, instance, request)
    assert result.success
    [run] = instance.get_runs()
    assert run.tags[T.TABLE] == "demo.sales.orders"
    assert len(shadow_rows(coordination)) == 12
    assert len([r for r in coordination.ledger_rows() if not r.shadow]) == 3


@pytest.mark.postgres
def test_a_postgresql_ledger_of_an_older_version_gets_the_shadow_columns_and_records_once_per_slot():
    """The column migration on PostgreSQL (its own throwaway database: other tests share the fixed ones)."""
    import os

    import sqlalchemy

    from floe_dagster.coordination.database import Coordination
    from floe_dagster.core.operations import Operation
    from floe_dagster.core.runs.run_decision import RunDecision
    from floe_dagster_tests.conftest import postgres_url

    admin = sqlalchemy.create_engine(postgres_url("floe_coordination"), isolation_level="AUTOCOMMIT")
    name = f"floe_shadow_{os.getpid()}"
    with admin.connect() as connection:
        connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
        connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    url = postgres_url(name)
    try:
        old = Coordination(url)
        with old.engine.begin() as connection:  # as a version before shadow policies left it
            connection.execute(sqlalchemy.text("ALTER TABLE floe_ledger DROP COLUMN shadow"))
            connection.execute(sqlalchemy.text("ALTER TABLE floe_history DROP COLUMN last_shadow_at"))
        old.engine.dispose()
        coordination = Coordination(url)
        at = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
        item = RunDecision(ORDERS, Operation.REWRITE_DATA_FILES, "interval", "would run: interval: due", slot="s",
                           attempt=SHADOW_ATTEMPT, shadow=True)
        live = RunDecision(ORDERS, Operation.REWRITE_DATA_FILES, "interval", "interval: due", slot="s", attempt=0)
        assert coordination.admit([item, item, live], at) == [item, live]
        assert [(r.shadow, r.attempt) for r in coordination.ledger_rows()] == [(True, SHADOW_ATTEMPT), (False, 0)]
        assert coordination.all_history()[(ORDERS.qualified, Operation.REWRITE_DATA_FILES)].last_shadow_at == at
        assert coordination.shadow_counts_since(at) == {"REWRITE_DATA_FILES": (1, at)}
        coordination.engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
