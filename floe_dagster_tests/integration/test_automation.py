"""The launchers through a real Dagster instance, real PyIceberg catalog and real Spark runs: the
debt-score sensor and a cron schedule yield run requests with the audit tags and keys, evaluating
both at once admits each item once, executing the runs changes the tables, and the next evaluation
sees that history."""

from __future__ import annotations

import concurrent.futures
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from dagster import DagsterInstance, RunRequest, build_schedule_context, build_sensor_context

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.demo import DemoSizes, build_demo_lakehouse
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark

POLICIES = """
- name: sales-interval
  tablePattern: "demo.sales.*"
  priority: 1
  tags: {team: sales}
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H, timeout: 2}
  expireSnapshots: {retainLast: 2, maxSnapshotAge: PT0S}
  expireSnapshotsSchedule: {interval: PT1H}
- name: ops-cron
  tablePattern: "demo.ops.*"
  rewriteManifests: {}
  rewriteManifestsSchedule: {cronExpression: "* * * * *"}
"""
OPS_CRON_SCHEDULE = "floe_ops_cron_rewrite_manifests"  # policy ops-cron's rule, as Dagit lists it
SIZES = DemoSizes(small_files=12, snapshots=6, position_delete_commits=2, old_orphans=1, young_orphans=1,
                  skewed_files=3, other_partition_files=1)


def lakehouse(tmp_path, monkeypatch, batching: str):
    config = write_settings(tmp_path, POLICIES, f"batching: {batching}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, SIZES)
    refresh_table_cache(settings)
    return settings


@pytest.fixture
def setup(tmp_path, instance_home, monkeypatch):
    """A real lakehouse and a real instance (the embedded SQLite one and the PostgreSQL one), one
    table per run: each (table, operation) its own run request."""
    config = write_settings(tmp_path, POLICIES, "batching: {max-tables: 1}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, SIZES)
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield settings, instance, build_definitions(settings)


def evaluate_sensor(defs, instance):
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        return sensor.evaluate_tick(context)


def evaluate_schedule(defs, instance, name, when):
    schedule = defs.resolve_schedule_def(name)
    with build_schedule_context(instance=instance, scheduled_execution_time=when,
                                repository_def=defs.get_repository_def(), resources=defs.resources) as context:
        return schedule.evaluate_tick(context)


def execute(defs, instance, request: RunRequest):
    job = defs.resolve_job_def(MAINTENANCE_JOB)
    result = job.execute_in_process(
        instance=instance, partition_key=request.partition_key, asset_selection=request.asset_selection,
        tags=request.tags, raise_on_error=False,
    )
    return result


def test_sensor_and_schedule_admit_each_item_once_and_see_history(setup):
    settings, instance, defs = setup
    now = datetime.now(timezone.utc)

    # Both launchers at once: the scheduler lock and the ledger admit each item once.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        sensor_future = pool.submit(evaluate_sensor, defs, instance)
        schedule_future = pool.submit(evaluate_schedule, defs, instance,
                                      OPS_CRON_SCHEDULE, now)
        sensor_data, schedule_data = sensor_future.result(), schedule_future.result()
    requests = list(sensor_data.run_requests or []) + list(schedule_data.run_requests or [])
    # A launcher that finds the scheduler lock taken skips its tick (lock_held) and plans next time.
    if not sensor_data.run_requests:
        assert "lock_held" in sensor_data.skip_message
        requests += list(evaluate_sensor(defs, instance).run_requests or [])
    keys = [r.run_key for r in requests]
    assert len(keys) == len(set(keys))
    by_item = {(r.tags["floe/table"], r.tags["floe/operation"]): r for r in requests}
    assert len(by_item) == len(requests)
    # sales: 3 tables, the first of their 2 interval operations in Floe's order (one operation per
    # table a tick); ops: 3 tables × manifests at the current cron slot (the schedule's, or the
    # sensor's if the schedule lost the lock race and the slot is old enough).
    sales = {k for k in by_item if k[0].startswith("demo.sales.")}
    assert sales == {(f"demo.sales.{t}", "REWRITE_DATA_FILES") for t in ("orders", "events", "customers")}
    request = by_item[("demo.sales.orders", "REWRITE_DATA_FILES")]
    tags = request.tags
    assert tags["floe/trigger"] == "interval" and tags["floe/policy"] == "sales-interval"
    assert tags[T.POLICY_TAG_PREFIX + "team"] == "sales" and tags[T.POLICY_VERSION]
    assert tags[T.SLOT] == "interval:first" and tags[T.ATTEMPT] == "0"
    assert request.run_key == "demo.sales.orders|REWRITE_DATA_FILES|interval:first|attempt-0"
    assert tags["dagster/max_runtime"] == str(2 * 3600)
    assert int(tags["dagster/priority"]) >= 100 and float(tags[T.DEBT_SCORE]) >= 0
    assert request.partition_key == "REWRITE_DATA_FILES"

    # Admitted but not launched yet: the next tick does not admit them again.
    again = evaluate_sensor(defs, instance)
    assert not again.run_requests
    assert "in_flight" in again.skip_message

    # Execute the sales runs as the daemon would; the tables change.
    before = table_counts(load_table(open_catalog(settings.catalog), TableName.parse("sales.orders", "demo")))
    for key in sorted(sales):
        assert execute(defs, instance, by_item[key]).success
    after = table_counts(load_table(open_catalog(settings.catalog), TableName.parse("sales.orders", "demo")))
    assert before["data_files"] == 12 and after["data_files"] == 1 and after["snapshots"] == 2

    # The next evaluation sees that history: the rewrites' interval has not passed; each table's
    # next operation (expire) comes now that its rewrite is done.
    later = evaluate_sensor(defs, instance)
    assert {(r.tags["floe/table"], r.partition_key) for r in (later.run_requests or [])
            if r.tags["floe/table"].startswith("demo.sales.")} == {
        (f"demo.sales.{t}", "EXPIRE_SNAPSHOTS") for t in ("orders", "events", "customers")}
    runs = instance.get_runs()
    assert {run.tags.get(T.BATCH_KEY) for run in runs} >= {by_item[key].run_key for key in sales}


def count_resolutions(monkeypatch) -> Counter:
    """Count ``policies.resolve_operation`` calls by table, wherever floe_dagster imported it."""
    from floe_dagster import policies

    real = policies.resolve_operation
    calls: Counter = Counter()

    def counting(settings, table, op, *args, **kwargs):
        calls[table.qualified] += 1
        return real(settings, table, op, *args, **kwargs)

    for module in [m for name, m in sys.modules.items() if name.startswith("floe_dagster")]:
        if getattr(module, "resolve_operation", None) is real:
            monkeypatch.setattr(module, "resolve_operation", counting)
    return calls


def test_the_automated_path_resolves_a_tables_policy_once(setup, monkeypatch):
    """From the sensor's tick to the run's materialization, a table's policy is resolved once: the
    tick tags the run request with the policy the planner chose, and the run resolves it for its
    config, its missing tags and its metadata alike."""
    settings, instance, defs = setup
    calls = count_resolutions(monkeypatch)
    requests = {(r.tags["floe/table"], r.partition_key): r for r in evaluate_sensor(defs, instance).run_requests}
    request = requests[("demo.sales.orders", "REWRITE_DATA_FILES")]
    assert request.tags[T.POLICY] == "sales-interval" and request.tags[T.POLICY_VERSION]
    assert request.tags[T.POLICY_TAG_PREFIX + "team"] == "sales"
    result = execute(defs, instance, request)
    assert result.success
    [materialization] = result.asset_materializations_for_node("iceberg_tables")
    assert materialization.metadata["policy"].value == "sales-interval"
    assert calls == {"demo.sales.orders": 1}


def test_plan_shows_reasons_and_budgets(setup, monkeypatch):
    from floe_dagster.core.plan.planner import plan
    from floe_dagster.scheduling.inputs import gather

    settings, instance, defs = setup
    monkeypatch.setenv("FLOE_SCHEDULER_MAX_TABLES_PER_POLL", "1")
    limited = load_settings(environ={"FLOE_CONFIG": settings.source, "FLOE_SCHEDULER_MAX_TABLES_PER_POLL": "1"})
    coordination = Coordination(limited.coordination_url)
    data = gather(limited, instance, coordination, datetime.now(timezone.utc), None).plan_input
    result = plan(data)
    runs = [d for d in result.decisions if d.decision == "run"]
    assert {d.table for d in runs} and len({d.table for d in runs}) == 1
    assert any(d.reasons[0].startswith("budget_tables") for d in result.decisions)
    assert [d.rank for d in runs] == list(range(1, len(runs) + 1))


def test_schedule_admits_its_rule_at_cron_time(setup):
    settings, instance, defs = setup
    name = OPS_CRON_SCHEDULE
    now = datetime.now(timezone.utc)
    data = evaluate_schedule(defs, instance, name, now)
    evaluated = datetime.now(timezone.utc)
    requests = list(data.run_requests or [])
    assert {r.tags["floe/table"] for r in requests} == {"demo.ops.audit_log", "demo.ops.metrics", "demo.ops.healthy"}
    assert all(r.tags["floe/trigger"] == "cron" and r.partition_key == "REWRITE_MANIFESTS" for r in requests)
    # The rule's slot: the latest minute (the cron's) at or before the clock the schedule planned at, which is the
    # later of its scheduled time and the wall clock (defs/schedules.py): a minute may begin while it evaluates.
    slot = datetime.fromisoformat(requests[0].tags[T.SLOT])
    assert now.replace(second=0, microsecond=0) <= slot <= evaluated and slot.second == slot.microsecond == 0
    # Only its own rule: the sales tables' interval work is the sensor's.
    assert not [r for r in requests if r.tags["floe/table"].startswith("demo.sales.")]
    again = evaluate_schedule(defs, instance, name, now)
    assert not again.run_requests and "in_flight" in again.skip_message


def test_outage_opens_the_circuit_then_one_run_probes_on_another_table(setup, monkeypatch):
    from floe_dagster.core.plan.circuit import TRIPPED_SKIP_REASON
    from floe_dagster.core.runs.history import Outcome
    from floe_dagster.core.plan.planner import plan
    from floe_dagster.scheduling import tick
    from floe_dagster.scheduling.inputs import gather
    from floe_dagster.scheduling.tick import CIRCUIT_PAUSE, run_tick

    settings, instance, defs = setup
    now = datetime.now(timezone.utc)
    coordination = Coordination(settings.coordination_url)
    # The outage met the run of the table that ranks first: the probe must not go back to it.
    first = plan(gather(settings, instance, coordination, now, None).plan_input).admitted[0]
    coordination.record_outcome(Outcome(
        "outage-run", first.table.qualified, first.operation, now - timedelta(minutes=1), now, False,
        failure_kind="outage", message="Spark could not start"))
    gathered: list[datetime] = []  # the open circuit is read before anything is gathered (issue 35)
    monkeypatch.setattr(tick, "gather", lambda *args, **kwargs: gathered.append(args[3]) or gather(*args, **kwargs))
    paused = run_tick(settings, instance, coordination, now, "sensor:test", None)
    assert paused.skipped_tick == ("circuit_open: an outage failed runs; launches resume at "
                                   f"{(now + CIRCUIT_PAUSE).isoformat()}") and not paused.admitted
    assert gathered == [] and paused.plan is None
    probe = run_tick(settings, instance, coordination, now + CIRCUIT_PAUSE + timedelta(seconds=1), "sensor:test", None)
    assert gathered == [now + CIRCUIT_PAUSE + timedelta(seconds=1)]  # half-open: the plan picks the probe
    assert len(probe.admitted) == 1 and probe.admitted[0].table != first.table
    tripped = next(d for d in probe.plan.decisions if d.table == first.table and d.operation == first.operation)
    assert tripped.decision == "skip" and tripped.reasons[0] == TRIPPED_SKIP_REASON
    assert any(d.reasons[0].startswith("circuit_open: probing") for d in probe.plan.decisions)


def test_the_sensor_batches_due_tables_into_one_run_per_operation(tmp_path, instance_home, monkeypatch):
    settings = lakehouse(tmp_path, monkeypatch, "{max-tables: 20}")
    with DagsterInstance.get() as instance:
        defs = build_definitions(settings)
        data = evaluate_sensor(defs, instance)
        requests = {r.partition_key: r for r in data.run_requests or []}
        # 3 sales tables × 2 interval operations (and the ops cron slot, once the schedule's grace passed)
        rdf = requests["REWRITE_DATA_FILES"]
        tables = ["demo.sales.customers", "demo.sales.events", "demo.sales.orders"]
        assert sorted(".".join(k.path) for k in rdf.asset_selection) == tables
        tags = rdf.tags
        assert tags[T.BATCH_SIZE] == "3" and sorted(tags["floe/tables"].split(",")) == tables
        assert "floe/table" not in tags and tags["floe/operation"] == "REWRITE_DATA_FILES"
        assert tags["floe/trigger"] == "interval" and tags[T.TRIGGER_KINDS] == "interval"
        assert tags["floe/policy"] == "sales-interval" and tags[T.POLICY_TAG_PREFIX + "team"] == "sales"
        assert tags["dagster/max_runtime"] == str(2 * 3600) and tags[T.ACTOR] == "sensor:default"
        assert rdf.run_key == tags[T.BATCH_KEY] and rdf.run_key.startswith("batch:")

        # The ledger keeps one row per table, carrying the batch's key.
        coordination = Coordination(settings.coordination_url)
        rows = coordination.batch_rows(rdf.run_key)
        assert sorted(rows) == tables and all(r.run_id is None for r in rows.values())

        # One run maintains the three tables; each materialization carries its own decision.
        result = execute(defs, instance, rdf)
        assert result.success
        materialized = {".".join(m.asset_key.path): m for m in result.asset_materializations_for_node("iceberg_tables")}
        assert sorted(materialized) == tables
        for name, materialization in materialized.items():
            metadata = {k: v.value for k, v in materialization.metadata.items()}
            row = rows[name]
            assert metadata["trigger"] == "interval" and metadata["reason"] == row.reason
            assert metadata["slot"] == "interval:first" and metadata["attempt"] == 0
            assert metadata["ledger_row"] == row.id and metadata["debt_score"] == row.debt_score
            assert metadata["estimated_bytes"] == row.estimated_bytes
            assert metadata["policy"] == "sales-interval" and metadata["policy_version"]
            if name == "demo.sales.orders":  # 12 small files: rewritten, rows checked from metadata
                assert metadata["row_check"] == "snapshot-summary" and metadata["data_files_after"] == 1
                assert metadata["rows_checked"] == metadata["records_before"]
        # Each table has its own outcome of that run.
        for name in tables:
            assert [o["run_id"] for o in coordination.outcomes_for(name)] == [result.run_id]

        # The next tick attaches the run to the three ledger rows, and finds nothing due for them.
        later = evaluate_sensor(defs, instance)
        assert not [r for r in later.run_requests or [] if r.partition_key == "REWRITE_DATA_FILES"]
        assert {r.run_id for r in coordination.batch_rows(rdf.run_key).values()} == {result.run_id}
