"""The demo's pipelines (floe_dagster/demo_writers.py, code location ``demo-pipelines``) beside floe's, through
the real stack: the demo lakehouse (PyIceberg, SQLite catalog), a real Dagster instance, the demo's own
workspace file (``write_workspace``), Dagit's GraphQL and the real ``dagster-daemon``.

* the writers append to, delete from and upsert into their tables, and name them (``dagster/table_name``);
  the demo's first writes teach floe the writers before Dagit loads, and the demo workspace loads both
  code locations with writer -> maintenance lineage;
* with the daemon, the writers' materializations lead to floe's after-write run over both written sales
  tables, launched by the daemon, tagged with the writers' run, each table's materialization naming its own
  writer's asset, run and storage id.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from dagster import (AssetKey, DagsterInstance, DagsterRunStatus, DefaultScheduleStatus, RunsFilter,
                     build_schedule_context)

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.demo import ARROW_SCHEMA, EVENT_SCHEMA, DemoSizes, build_demo_lakehouse, rows, write_workspace
from floe_dagster.demo_writers import (JOB_NAME, LIVE_IDS, LOCATION_NAME, SCHEDULE_NAME, WRITERS, build_demo_writers,
                                       first_writes)
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster_tests.conftest import configured, dagster_daemon
from floe_dagster_tests.integration.test_writers_beside import LINEAGE

# Only the sales tables are maintained, and only after their writers write: orders and events (customers has no
# writer), due together, so the one run the daemon may launch is a batch of both.
POLICIES = """
- name: sales-after-write
  tablePattern: "demo.sales.*"
  expireSnapshots: {retainLast: 5}
  expireSnapshotsSchedule: {afterWrite: {settle: PT0S}}
"""
TINY = DemoSizes(small_files=3, snapshots=8, position_delete_commits=0, old_orphans=1, young_orphans=0,
                 skewed_files=2, other_partition_files=1)
EVENTS_WRITER = ("pipelines", "sales", "events")
ORDERS_WRITER = ("pipelines", "sales", "orders")


@pytest.fixture
def demo(tmp_path, dagster_home, monkeypatch):
    settings = configured(tmp_path, monkeypatch, POLICIES)
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    # sales.customers exists already, so the demo's build leaves it alone: its position deletes need Spark,
    # and no writer touches it.
    catalog.create_table("sales.customers", schema=EVENT_SCHEMA).append(rows(0, 3))
    build_demo_lakehouse(settings, TINY)
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield settings, instance, write_workspace(dagster_home)


def record_count(settings, name: str) -> int:
    return open_catalog(settings.catalog).load_table(name).scan().to_arrow().num_rows


def test_the_demo_pipelines_write_their_tables_and_floe_knows_them_before_dagit_loads(demo, monkeypatch):
    settings, instance, workspace = demo
    before = {w.table: record_count(settings, w.table) for w in WRITERS}
    audit_before = open_catalog(settings.catalog).load_table("ops.audit_log").scan().to_arrow()
    run_id = first_writes(settings, instance)
    assert run_id and instance.get_run_by_id(run_id).status == DagsterRunStatus.SUCCESS
    after = {w.table: record_count(settings, w.table) for w in WRITERS}
    assert after == {"sales.orders": before["sales.orders"] + 5, "sales.events": before["sales.events"] + 5,
                     "ops.audit_log": before["ops.audit_log"] + 1, "ops.metrics": before["ops.metrics"] + 5}
    audit = open_catalog(settings.catalog).load_table("ops.audit_log").scan().to_arrow()
    assert len(set(audit["id"].to_pylist())) == audit.num_rows  # an upsert: no id twice
    assert audit.num_rows == audit_before.num_rows + 1
    # Each writer named its table on its materialization, and floe learned it from there.
    learned = Coordination(settings.coordination_url).writer_rows()
    for writer in WRITERS:
        event = instance.get_latest_materialization_event(AssetKey(list(writer.key)))
        assert event.asset_materialization.metadata["dagster/table_name"].value == f"demo.{writer.table}"
        [row] = learned[f"demo.{writer.table}"]
        assert (row.asset_key, row.source, row.last_run_id) == (writer.key, "table_name", run_id)
    assert first_writes(settings, instance) is None  # known: the next demo start writes nothing
    assert len(instance.get_runs()) == 1
    # So Dagit's first load of the demo's workspace shows each written table's writer upstream of it.
    nodes = lineage(instance, workspace, [("demo", *w.table.split(".")) for w in WRITERS])
    assert {key: node["dependencyKeys"] for key, node in nodes.items()} == {
        f"demo/{w.table.replace('.', '/')}": [{"path": list(w.key)}] for w in WRITERS}

    # The delete: the writer's own events older than 15 minutes go, newer ones and the seeded ones stay.
    table = open_catalog(settings.catalog).load_table("sales.events")
    old = rows(LIVE_IDS, 2).set_column(4, "at", pa.array([datetime.now(timezone.utc) - timedelta(hours=1)] * 2,
                                                         ARROW_SCHEMA.field("at").type))
    table.append(old)
    instance_runs = build_demo_writers(settings).resolve_job_def(JOB_NAME).execute_in_process(instance=instance)
    assert instance_runs.success
    ids = set(open_catalog(settings.catalog).load_table("sales.events").scan().to_arrow()["id"].to_pylist())
    assert not ids & set(old["id"].to_pylist())
    assert len(ids) == after["sales.events"] + 5

    # The schedule runs by default while the automation is on, and is stopped by default when it is off.
    writers = build_demo_writers(settings)
    schedule = writers.resolve_schedule_def(SCHEDULE_NAME)
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    # Its runs leave the queue before any of floe's (a queued writer run holds its tables' maintenance).
    assert int(writers.resolve_job_def(JOB_NAME).tags["dagster/priority"]) > max(
        T.run_priority(trigger, 1000.0) for trigger in T.TRIGGERS)
    # It asks for a run, but not while one is still queued (runs piling up would hold the tables' maintenance).
    with build_schedule_context(instance=instance) as context:
        assert len(schedule.evaluate_tick(context).run_requests) == 1
    instance.create_run_for_job(writers.resolve_job_def(JOB_NAME), status=DagsterRunStatus.NOT_STARTED)
    with build_schedule_context(instance=instance) as context:
        tick = schedule.evaluate_tick(context)
    assert not tick.run_requests and tick.skip_message == "a demo_writes run is still queued or running"
    monkeypatch.setenv("FLOE_SCHEDULER_ENABLED", "false")
    from floe_dagster.settings import load_settings

    off = load_settings()
    assert not off.scheduler.enabled
    assert build_demo_writers(off).resolve_schedule_def(SCHEDULE_NAME).default_status == \
        DefaultScheduleStatus.STOPPED


@pytest.mark.spark
def test_a_writers_materialization_leads_to_an_after_write_run_launched_by_the_daemon(demo):
    settings, instance, workspace = demo
    # The writers' run, as its schedule would launch it; floe has not read it yet (no first_writes).
    writer_run = build_demo_writers(settings).resolve_job_def(JOB_NAME).execute_in_process(instance=instance)
    assert writer_run.success and not Coordination(settings.coordination_url).writer_rows()
    writes = {writer: instance.fetch_materializations(AssetKey(list(writer)), limit=1).records[0].storage_id
              for writer in (EVENTS_WRITER, ORDERS_WRITER)}

    env = {**os.environ, "FLOE_CONFIG": os.environ["FLOE_CONFIG"], "DAGSTER_HOME": os.environ["DAGSTER_HOME"]}
    with dagster_daemon(env, str(workspace)):
        run = wait_for_after_write_run(instance, timeout_s=300)
    assert run.status == DagsterRunStatus.SUCCESS, run.status
    tags = run.tags
    # Requested by floe's sensor in the daemon, launched by the daemon's run queue: one batch of the two written
    # tables, tagged with the writers' run that made both due.
    assert (set(tags[T.TABLES].split(",")), tags[T.TRIGGER], tags["dagster/sensor_name"], tags[T.UPSTREAM_RUN]) == (
        {"demo.sales.events", "demo.sales.orders"}, "after_write", SENSOR_NAME, writer_run.run_id)
    # Each table's materialization names its own writer's asset, run and storage id (read from the demo's instance).
    for writer, storage_id in writes.items():
        event = instance.get_latest_materialization_event(AssetKey(["demo", *writer[1:]]))
        metadata = {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}
        assert event.run_id == run.run_id and event.asset_materialization.partition == "EXPIRE_SNAPSHOTS"
        assert (metadata["trigger"], metadata["upstream_asset"], metadata["upstream_run"],
                metadata["upstream_storage_id"]) == ("after_write", "/".join(writer), writer_run.run_id, storage_id)
    # Only the maintained tables ran, in that one run: the other writers' tables have no policy. The demo's
    # writers' schedule (every 3 minutes, on with the automation) may have written again while the daemon ran, and
    # that write may have its own after-write run; any such run answers a scheduled writers' run, not this one.
    after_write = instance.get_runs(RunsFilter(tags={T.TRIGGER: "after_write"}))
    assert [r.run_id for r in after_write if r.tags.get(T.UPSTREAM_RUN) == writer_run.run_id] == [run.run_id]
    for other in (r for r in after_write if r.run_id != run.run_id):
        upstream = instance.get_run_by_id(other.tags[T.UPSTREAM_RUN])
        assert (upstream.job_name, upstream.tags.get("dagster/schedule_name")) == (JOB_NAME, SCHEDULE_NAME), other.tags

    # Dagit over the demo's workspace: both code locations load, and the graph shows writer -> maintenance.
    nodes = lineage(instance, workspace, [("demo", "sales", "events"), EVENTS_WRITER])
    assert nodes["demo/sales/events"]["repository"]["location"]["name"] == "floe"
    assert nodes["demo/sales/events"]["dependencyKeys"] == [{"path": list(EVENTS_WRITER)}]
    assert nodes["pipelines/sales/events"]["repository"]["location"]["name"] == LOCATION_NAME
    assert nodes["pipelines/sales/events"]["dependedByKeys"] == [{"path": ["demo", "sales", "events"]}]


def wait_for_after_write_run(instance, timeout_s: float):
    """The first after-write run, once finished (the daemon's sensor requests it, its run queue launches it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = instance.get_runs(RunsFilter(tags={T.TRIGGER: "after_write"}))
        if runs and runs[-1].is_finished:
            return runs[-1]
        time.sleep(2)
    raise AssertionError(f"no after-write run finished: {[(r.run_id, r.status, r.tags) for r in instance.get_runs()]}")


def lineage(instance, workspace, keys) -> dict:
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(workspace)])) as process:
        context = process.create_request_context()
        errors = {name: entry.load_error for name, entry in context.get_code_location_entries().items()
                  if entry.load_error}
        assert not errors and set(context.get_code_location_entries()) == {"floe", LOCATION_NAME}, errors
        answer = execute_dagster_graphql(context, LINEAGE, {"keys": [{"path": list(k)} for k in keys]})
    assert not answer.errors, answer.errors
    return {"/".join(n["assetKey"]["path"]): n for n in answer.data["assetNodes"]}
