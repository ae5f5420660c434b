"""Maintenance beside the writers (issue 28, deliverables 1 and 3), through the real stack: a PyIceberg SQLite
catalog, a real Dagster instance, the user's own code location beside floe's in one workspace, Dagit's
GraphQL, the debt-score sensor and ``floe-dagster serve`` over HTTP.

* a floe.yaml rule names the writer of ``demo.sales.orders``; the writer of ``demo.sales.events`` is
  learned from the ``dagster/table_name`` its materializations carry, by the sensor's cursor over the
  event log, and persisted (``floe_writers``);
* Dagit's asset graph shows writer -> table maintenance across the two code locations;
* ``explain`` and the HTTP trigger status name the writers;
* a writer run that is really started (its asset blocks until the test lets it go) holds the table's
  compaction (``writer_running``), and once the run ends the sensor requests the compaction.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading
from datetime import datetime, timezone

import pyarrow as pa
import pytest
import requests
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, build_sensor_context
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import read_cached_tables, refresh_table_cache
from floe_dagster.reports.explain import explain_table
from floe_dagster.reports.explain_text import format_explain_text
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_api import start_serve, stop

POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
"""
# Compaction only after a write (no interval): the orders table's writer is a floe.yaml rule's.
AFTER_WRITE_POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {afterWrite: {settle: PT0S}}
"""
# Compaction after writes only, with the default settle (PT5M) and maxSettle (PT1H).
SETTLE_POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {afterWrite: {}}
"""
WRITERS = """
writers:
  - {tables: "demo.sales.orders", asset: "warehouse/{namespace}/{table}"}
"""
ORDERS, EVENTS = TableName("demo", ("sales",), "orders"), TableName("demo", ("sales",), "events")
ORDERS_WRITER, EVENTS_WRITER = ["warehouse", "sales", "orders"], ["etl", "events"]

# The user's code location: two writers, each naming its table the Dagster way; the orders writer waits for a
# file to appear while it runs (the test's way of holding a real run in STARTED).
USER_LOCATION = """
import os, time
from pathlib import Path
from dagster import Definitions, MaterializeResult, asset

@asset(key=["warehouse", "sales", "orders"], metadata={"dagster/table_name": "demo.sales.orders"})
def orders_writer():
    gate = os.environ.get("WRITER_GATE")
    while gate and not Path(gate).exists():
        time.sleep(0.1)
    return MaterializeResult(metadata={"dagster/table_name": "demo.sales.orders"})

@asset(key=["etl", "events"])
def events_writer():
    return MaterializeResult(metadata={"dagster/table_name": "sales.events"})  # without the catalog

defs = Definitions(assets=[orders_writer, events_writer])
"""
FLOE_LOCATION = """
from floe_dagster.defs.build import build_definitions
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.settings import load_settings

settings = load_settings()
defs = build_definitions(settings, read_cached_tables(settings))
"""
WORKSPACE = """
load_from:
  - python_file: {relative_path: user_location.py, location_name: user-pipelines, working_directory: .}
  - python_file: {relative_path: floe_location.py, location_name: floe, working_directory: .}
"""
LINEAGE = """
query ($keys: [AssetKeyInput!]) {
  assetNodes(assetKeys: $keys) {
    assetKey { path } repository { location { name } } dependencyKeys { path } dependedByKeys { path }
  }
}
"""


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    yield from make_lake(tmp_path, monkeypatch, POLICIES)


@pytest.fixture
def after_write_lake(tmp_path, dagster_home, monkeypatch):
    yield from make_lake(tmp_path, monkeypatch, AFTER_WRITE_POLICIES)


@pytest.fixture
def settle_lake(tmp_path, dagster_home, monkeypatch):
    yield from make_lake(tmp_path, monkeypatch, SETTLE_POLICIES)


def make_lake(tmp_path, monkeypatch, policies):
    config = write_settings(tmp_path, policies, extra=WRITERS)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    for name in (ORDERS, EVENTS):
        table = catalog.create_table(name.identifier, schema=Schema(NestedField(1, "id", LongType(), required=False)))
        for i in range(3):  # small files: work for REWRITE_DATA_FILES
            table.append(pa.table({"id": [i]}))
    refresh_table_cache(settings)
    (tmp_path / "user_location.py").write_text(textwrap.dedent(USER_LOCATION))
    (tmp_path / "floe_location.py").write_text(textwrap.dedent(FLOE_LOCATION))
    (tmp_path / "workspace.yaml").write_text(textwrap.dedent(WORKSPACE))
    with DagsterInstance.get() as instance:
        yield settings, instance, tmp_path


def user_defs(root):
    namespace: dict = {}
    exec(compile((root / "user_location.py").read_text(), "user_location.py", "exec"), namespace)
    return namespace["defs"]


def sensor_tick(settings, instance, cursor=None):
    defs = build_definitions(settings, read_cached_tables(settings))
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources, cursor=cursor) as context:
        result = sensor.evaluate_tick(context)
    return result, result.cursor


def materialize_user_asset(root, instance, key):
    job = user_defs(root).resolve_implicit_global_asset_job_def()
    from dagster import AssetKey

    result = job.execute_in_process(instance=instance, asset_selection=[AssetKey(key)])
    assert result.success
    return result.run_id


def test_writers_are_matched_shown_upstream_in_dagit_and_named_by_explain_and_http(lake):
    settings, instance, root = lake
    # The events writer materializes before floe knows it; the sensor's tick learns it from the event log.
    events_run = materialize_user_asset(root, instance, EVENTS_WRITER)
    _, cursor = sensor_tick(settings, instance)
    learned = Coordination(settings.coordination_url).writer_rows()
    [events_writer] = learned[EVENTS.qualified]
    assert (events_writer.asset_key, events_writer.source, events_writer.last_run_id) == (
        tuple(EVENTS_WRITER), "table_name", events_run)
    assert json.loads(cursor) == {"writers": events_writer.last_storage_id}  # the cursor: the last event read
    assert ORDERS.qualified not in learned  # its rule's writer has not materialized yet
    # A tick with nothing new reads nothing and keeps the cursor; floe's own asset is never its own writer.
    assert sensor_tick(settings, instance, cursor)[1] == cursor

    # Dagit's asset graph over the two code locations: writer -> table maintenance.
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    keys = [asset_key_for(ORDERS).path, asset_key_for(EVENTS).path, ORDERS_WRITER, EVENTS_WRITER]
    with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(root / "workspace.yaml")])) as process:
        answer = execute_dagster_graphql(process.create_request_context(), LINEAGE,
                                         {"keys": [{"path": list(k)} for k in keys]})
    assert not answer.errors, answer.errors
    nodes = {"/".join(n["assetKey"]["path"]): n for n in answer.data["assetNodes"]}
    assert nodes["demo/sales/orders"]["repository"]["location"]["name"] == "floe"
    assert nodes["demo/sales/orders"]["dependencyKeys"] == [{"path": ORDERS_WRITER}]
    assert nodes["demo/sales/events"]["dependencyKeys"] == [{"path": EVENTS_WRITER}]
    assert nodes["warehouse/sales/orders"]["repository"]["location"]["name"] == "user-pipelines"
    assert nodes["warehouse/sales/orders"]["dependedByKeys"] == [{"path": ["demo", "sales", "orders"]}]
    assert nodes["etl/events"]["dependedByKeys"] == [{"path": ["demo", "sales", "events"]}]

    # explain names the writers, and the HTTP API answers the same.
    report = explain_table(settings, Coordination(settings.coordination_url), "demo.sales.events",
                           datetime.now(timezone.utc), instance)
    assert report["writers"] == [{"assetKey": "etl/events", "source": "table_name", "lastMaterialization": {
        "storageId": events_writer.last_storage_id, "runId": events_run,
        "at": events_writer.last_materialized_at.isoformat()}}]
    assert "  written by etl/events (table_name), last materialized" in format_explain_text(report)
    process, url = start_serve(root / "floe.yaml", {**os.environ}, root / "serve.log")
    try:
        status = requests.get(url + "/api/v1/tables/sales/orders/trigger-status", timeout=60).json()
    finally:
        stop(process)
    assert status["writers"] == [{"assetKey": "warehouse/sales/orders", "source": "rule", "lastMaterialization": None}]
    assert status["operationStatuses"]["REWRITE_DATA_FILES"]["writerHold"]["held"] is False


def test_a_started_writer_run_holds_the_compaction_until_it_ends(lake, monkeypatch):
    settings, instance, root = lake
    gate = root / "let-the-writer-finish"
    monkeypatch.setenv("WRITER_GATE", str(gate))
    writer = threading.Thread(target=materialize_user_asset, args=(root, instance, ORDERS_WRITER))
    writer.start()
    try:
        [started] = wait_for_started_run(instance)
        result, _ = sensor_tick(settings, instance)
        assert "demo.sales.orders" not in [r.tags.get("floe/table") for r in result.run_requests or []]
        report = explain_table(settings, Coordination(settings.coordination_url), "demo.sales.orders",
                               datetime.now(timezone.utc), instance)
        status = report["operationStatuses"]["REWRITE_DATA_FILES"]
        assert status["shouldTrigger"] is False
        assert status["reasons"][0].startswith(f"writer_running: its writer runs: warehouse/sales/orders (run "
                                               f"{started.run_id[:8]}, STARTED); waits until it ends, forced in 5h")
        assert status["writerHold"]["runs"] == [{"runId": started.run_id, "status": "STARTED",
                                                 "assetKey": "warehouse/sales/orders"}]
        # The table without a writer run is not held: events' compaction was requested in the same tick.
        assert any(r.tags.get("floe/table") == "demo.sales.events" for r in result.run_requests)
    finally:
        gate.write_text("go")
        writer.join(timeout=120)
    assert instance.get_run_by_id(started.run_id).status == DagsterRunStatus.SUCCESS
    result, _ = sensor_tick(settings, instance)
    assert [r.tags.get("floe/table") for r in result.run_requests] == ["demo.sales.orders"]


def wait_for_started_run(instance, timeout_s: float = 120.0):
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = instance.get_runs()
        if runs and runs[0].status == DagsterRunStatus.STARTED:
            return runs
        time.sleep(0.2)
    raise AssertionError(f"the writer's run never started: {[(r.run_id, r.status) for r in instance.get_runs()]}")


@pytest.mark.spark
def test_a_writers_materialization_triggers_a_run_that_links_to_the_write(after_write_lake):
    settings, instance, root = after_write_lake
    result, cursor = sensor_tick(settings, instance)
    assert not result.run_requests  # no write yet: an afterWrite-only schedule is not due every tick

    writer_run = materialize_user_asset(root, instance, ORDERS_WRITER)
    result, _ = sensor_tick(settings, instance, cursor)  # the cursor: only the new materialization is read
    [request] = result.run_requests
    [row] = Coordination(settings.coordination_url).writer_rows()[ORDERS.qualified]
    assert request.tags["floe/table"] == "demo.sales.orders" and request.tags["floe/trigger"] == "after_write"
    assert (request.tags["floe/upstream-asset"], request.tags["floe/upstream-run"],
            request.tags["floe/upstream-storage-id"]) == ("warehouse/sales/orders", writer_run,
                                                          str(row.last_storage_id))
    assert request.tags["dagster/floe.slot"] == f"write:{row.last_storage_id}"

    # The run (Spark) records the write in its materialization, beside Dagster's own pointer to it.
    defs = build_definitions(settings, read_cached_tables(settings))
    run = defs.resolve_job_def("floe_maintenance").execute_in_process(
        instance=instance, partition_key=request.partition_key, asset_selection=request.asset_selection,
        tags=request.tags)
    assert run.success
    event = instance.get_latest_materialization_event(asset_key_for(ORDERS))
    metadata = {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}
    assert (metadata["upstream_asset"], metadata["upstream_run"], metadata["upstream_storage_id"]) == (
        "warehouse/sales/orders", writer_run, row.last_storage_id)
    assert event.asset_materialization.tags[
        "dagster/input_event_pointer/warehouse/sales/orders"] == str(row.last_storage_id)
    # Maintained since that write: not due again until the writer writes again.
    result, _ = sensor_tick(settings, instance, cursor)
    assert not result.run_requests


def test_writer_rows_are_shared_and_never_go_back_on_both_databases(instance_home):
    from concurrent.futures import ThreadPoolExecutor

    from floe_dagster.core.schedules.writers import Writer

    at = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
    key = tuple(EVENTS_WRITER)
    newer = {(EVENTS.qualified, key): Writer(key, "table_name", 20, "run-20", at)}
    older = {(EVENTS.qualified, key): Writer(key, "rule", 10, "run-10", at)}
    # Two shards' sensors record the same new writer at once: one row, no error.
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda rows: Coordination().record_writers(rows), [newer, newer]))
    Coordination().record_writers(older)  # an older event read late: the row keeps the newer one
    assert Coordination().writer_rows() == {EVENTS.qualified: (Writer(key, "table_name", 20, "run-20", at),)}
    Coordination().record_writers({(EVENTS.qualified, key): Writer(key, "rule", 30, "run-30", at)})
    # A writer that named the table itself stays one when a rule names it too.
    assert Coordination().writer_rows()[EVENTS.qualified] == (Writer(key, "table_name", 30, "run-30", at),)


def test_a_write_committed_below_the_cursor_is_still_read(lake):
    """On PostgreSQL a materialization can commit with a storage id below one the sensor already read (ids
    come from a sequence at insert): the sensor reads a short overlap below its cursor again."""
    from floe_dagster.scheduling.writer_facts import learn_writers

    settings, instance, root = lake
    run_id = materialize_user_asset(root, instance, ORDERS_WRITER)
    [summary] = instance.get_asset_event_summary_records(
        DagsterEventType.ASSET_MATERIALIZATION, limit=1)
    coordination = Coordination(settings.coordination_url)
    tables = read_cached_tables(settings)
    ahead = summary.storage_id + 3  # as if a later event had been read before this one committed
    assert learn_writers(instance, coordination, tables, settings.writers, "demo", ahead) == (ahead, 1)
    [row] = coordination.writer_rows()[ORDERS.qualified]
    assert (row.last_storage_id, row.last_run_id, row.source) == (summary.storage_id, run_id, "rule")
    assert learn_writers(instance, coordination, tables, settings.writers, "demo", ahead) == (ahead, 0)


def record_write(instance, key, at: datetime) -> None:
    """A materialization of ``key`` in the instance's event log at ``at`` (a runless event, as a writer outside
    Dagster reports one, but with its own time: the test cannot wait an hour)."""
    from dagster import AssetKey, AssetMaterialization
    from dagster._core.events import DagsterEvent, StepMaterializationData
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

    event = DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name=RUNLESS_JOB_NAME,
                         event_specific_data=StepMaterializationData(AssetMaterialization(AssetKey(key))))
    instance.report_dagster_event(event, run_id=RUNLESS_RUN_ID, timestamp=at.timestamp())


def test_a_writer_every_minute_cannot_starve_an_after_write_only_table(settle_lake):
    """The table owner's attack (issue 34): a writer that materializes every minute never leaves the default
    settle (PT5M) a pause; once its oldest write the table has not had is older than maxSettle (PT1H), the
    sensor requests the compaction anyway, and explain says why."""
    from datetime import timedelta

    settings, instance, _ = settle_lake
    now = datetime.now(timezone.utc)
    for minutes_ago in range(70, -1, -1):  # a write every minute for 70 minutes, the newest just now
        record_write(instance, ORDERS_WRITER, now - timedelta(minutes=minutes_ago, seconds=1))
    # explain says why (the writer as the sensor learns it), before the sensor admits it.
    from floe_dagster.scheduling.writer_facts import learn_writers

    learn_writers(instance, Coordination(settings.coordination_url), read_cached_tables(settings), settings.writers,
                  "demo", None)
    report = explain_table(settings, Coordination(settings.coordination_url), "demo.sales.orders",
                           datetime.now(timezone.utc), instance)
    reason = report["operationStatuses"]["REWRITE_DATA_FILES"]["reasons"][0]
    oldest = now - timedelta(minutes=70, seconds=1)
    assert reason.startswith("after_write: forced after maxSettle PT1H although the writer keeps writing (oldest "
                             "unprocessed write at " + oldest.isoformat()[:19]), reason
    assert reason.endswith("(afterWrite ANY_UPDATED, settle PT5M, maxSettle PT1H)")
    result, _ = sensor_tick(settings, instance)
    [request] = result.run_requests
    [row] = Coordination(settings.coordination_url).writer_rows()[ORDERS.qualified]
    assert (request.tags["floe/table"], request.tags["floe/trigger"], request.tags["dagster/floe.slot"]) == (
        "demo.sales.orders", "after_write", f"write:{row.last_storage_id}")
    assert now - row.last_materialized_at < timedelta(minutes=1)  # the writer was still writing
    # The next tick (Dagster makes its instance anew each tick) knows the oldest write without the event log.
    from floe_dagster.scheduling.writer_facts import first_write_lookup

    def no_read(*args, **kwargs):
        raise AssertionError("the event log was read again for a moment already answered")

    with DagsterInstance.get() as next_tick:
        next_tick.fetch_materializations = no_read
        assert abs(first_write_lookup(next_tick)(tuple(ORDERS_WRITER), None) - oldest) < timedelta(seconds=1)
