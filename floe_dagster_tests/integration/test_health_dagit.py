"""Table health where users see it, against a real lakehouse (PyIceberg SQLite catalog built by the
demo, with Spark for the position deletes) and a real Dagster instance: the observations hold the
table's real numbers, the ``health`` check results follow the policy's thresholds, unchanged tables
record nothing, a status that changes with time or a maintenance run is recorded once, Dagit's
GraphQL shows the results of the declared checks, and ``health_report`` explains one table."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetSelection,
    DagsterInstance,
    Definitions,
    FloatMetadataValue,
    IntMetadataValue,
    MaterializeResult,
    asset,
    define_asset_job,
    materialize,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.health_checks import HEALTH_CHECK_NAME, build_health_checks, health_check_specs
from floe_dagster.defs.health_reporting import report_health_events
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import DemoSizes, build_demo_lakehouse, local_path
from floe_dagster.errors import UnknownTable
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.policies import load_policy_set
from floe_dagster.reports.health_report import format_health_text, health_report
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark  # the demo's sales.customers gets its position deletes from Spark

POLICIES = """
- name: orders-strict
  tablePattern: "demo.sales.orders"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
  healthThresholds: {smallFilePercentWarning: 10, smallFilePercentCritical: 50}
- name: events-snapshots
  tablePattern: "demo.sales.events"
  expireSnapshots: {retainLast: 2}
  expireSnapshotsSchedule: {interval: PT1H}
  healthThresholds: {smallFileSizeBytes: 1, snapshotCountWarning: 4, snapshotCountCritical: 1000}
- name: healthy-relaxed
  tablePattern: "demo.ops.healthy"
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: PT6H}
  healthThresholds: {smallFileSizeBytes: 1}
"""
SIZES = DemoSizes(small_files=12, snapshots=6, position_delete_commits=2, old_orphans=1, young_orphans=1,
                  skewed_files=3, other_partition_files=1)
ORDERS = TableName("demo", ("sales",), "orders")
EVENTS = TableName("demo", ("sales",), "events")
CUSTOMERS = TableName("demo", ("sales",), "customers")
HEALTHY = TableName("demo", ("ops",), "healthy")
AUDIT_LOG = TableName("demo", ("ops",), "audit_log")


@pytest.fixture(scope="module")
def lakehouse(tmp_path_factory):
    """Built once (Spark writes sales.customers); tests that change a table say so."""
    root = tmp_path_factory.mktemp("health_dagit")
    config = write_settings(root, POLICIES)
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, SIZES)
    refresh_table_cache(settings)
    return config


@pytest.fixture
def lake(lakehouse, dagster_home, monkeypatch):
    monkeypatch.setenv("FLOE_CONFIG", str(lakehouse))
    settings = load_settings(lakehouse, environ={})
    with DagsterInstance.get() as instance:
        yield settings, instance


def collect(settings, tier="full"):
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        return collector.collect(tier=tier)


def report(settings, instance, snapshot, now=None, **kwargs) -> int:
    return report_health_events(
        instance, snapshot, load_policy_set(settings), now or datetime.now(timezone.utc),
        history=Coordination(settings.coordination_url).all_history(), debt_weights=settings.debt, **kwargs,
    )


def observations(instance, table):
    return [r.asset_observation for r in instance.fetch_observations(asset_key_for(table), limit=100).records]


def check_records(instance, table):
    key = AssetCheckKey(asset_key_for(table), HEALTH_CHECK_NAME)
    return instance.event_log_storage.get_asset_check_execution_history(key, limit=100)


def evaluation(record):
    return record.event.dagster_event.event_specific_data


def real_counts(settings, table):
    return table_counts(load_table(open_catalog(settings.catalog), table))


def value(metadata_value):
    return metadata_value.value


def materialize_in_a_run(instance, table):
    """A materialization of the table's asset recorded by a run (a stand-in for a maintenance run)."""

    @asset(key=asset_key_for(table))
    def stand_in():
        return MaterializeResult()

    assert materialize([stand_in], instance=instance).success


# -- observations and check results --------------------------------------------------------------------


def test_report_records_the_real_numbers_and_check_results(lake):
    settings, instance = lake
    snapshot = collect(settings)
    assert snapshot.complete and len(snapshot.metrics) == 6

    assert report(settings, instance, snapshot) == 6

    for table in snapshot.metrics:
        [observation] = observations(instance, table)
        counts = real_counts(settings, table)
        metadata = observation.metadata
        assert isinstance(metadata["data_file_count"], IntMetadataValue)  # numbers, so Dagit plots them
        assert value(metadata["data_file_count"]) == counts["data_files"], table
        assert value(metadata["delete_file_count"]) == counts["delete_files"], table
        assert value(metadata["snapshot_count"]) == counts["snapshots"], table
        assert value(metadata["manifest_count"]) == counts["manifests"], table
        assert value(metadata["record_count"]) == counts["records"], table
        assert isinstance(metadata["small_file_percent"], FloatMetadataValue)
        assert isinstance(metadata["debt_score"], FloatMetadataValue)
        assert value(metadata["tier"]) == "full"

    # The orders table's file count is the files really on disk; all of them are small.
    orders = observations(instance, ORDERS)[0].metadata
    on_disk = list((local_path(load_table(open_catalog(settings.catalog), ORDERS).location()) / "data").glob("*.parquet"))
    assert value(orders["data_file_count"]) == len(on_disk) == SIZES.small_files
    assert value(orders["small_file_percent"]) == 100.0
    assert value(orders["status"]) == "critical"
    assert value(orders["debt_score"]) >= 100
    customers = observations(instance, CUSTOMERS)[0].metadata
    assert value(customers["delete_file_count"]) == SIZES.position_delete_commits > 0
    assert value(customers["delete_file_ratio"]) > 0
    metrics_table = observations(instance, TableName("demo", ("ops",), "metrics"))[0].metadata
    # 3 files in 'eu', 1 in each of the 3 other regions: max 3 over an average of 6 / 4.
    assert value(metrics_table["partition_count"]) == 4 and value(metrics_table["partition_skew"]) == 2.0

    # Check results: ERROR for the critical table, WARN for the warning one, passed for the healthy one.
    [orders_check] = check_records(instance, ORDERS)
    assert orders_check.status is AssetCheckExecutionRecordStatus.FAILED and orders_check.run_id == ""
    result = evaluation(orders_check)
    assert not result.passed and result.severity is AssetCheckSeverity.ERROR
    assert "issue TOO_MANY_SMALL_FILES" in result.metadata
    assert value(result.metadata["issue TOO_MANY_SMALL_FILES"]).startswith("critical: small files")
    assert [i["type"] for i in value(result.metadata["issues"])] == ["TOO_MANY_SMALL_FILES"]

    [events_check] = check_records(instance, EVENTS)
    result = evaluation(events_check)
    assert events_check.status is AssetCheckExecutionRecordStatus.FAILED
    assert not result.passed and result.severity is AssetCheckSeverity.WARN
    assert [i["type"] for i in value(result.metadata["issues"])] == ["TOO_MANY_SNAPSHOTS"]

    [healthy_check] = check_records(instance, HEALTHY)
    assert healthy_check.status is AssetCheckExecutionRecordStatus.SUCCEEDED
    assert evaluation(healthy_check).passed and value(evaluation(healthy_check).metadata["status"]) == "healthy"


def test_unchanged_tables_record_nothing_and_a_changed_one_is_reported_alone(lake):
    settings, instance = lake
    assert report(settings, instance, collect(settings)) == 6
    before = {t: (len(observations(instance, t)), len(check_records(instance, t))) for t in collect(settings).metrics}

    # Nothing changed: the collector computes nothing and the report records nothing, even when asked
    # about every table (a fresh process, a CLI command that collected first: same answer).
    unchanged = collect(settings)
    assert unchanged.computed == []
    assert report(settings, instance, unchanged, only=unchanged.computed) == 0
    assert report(settings, instance, unchanged) == 0
    assert {t: (len(observations(instance, t)), len(check_records(instance, t))) for t in unchanged.metrics} == before

    # Append to one table: only it is computed again and reported, with its new numbers.
    from floe_dagster.demo import rows

    load_table(open_catalog(settings.catalog), AUDIT_LOG).append(rows(50_000, 20))
    changed = collect(settings)
    assert changed.computed == [AUDIT_LOG]
    assert report(settings, instance, changed, only=changed.computed) == 1
    after = {t: (len(observations(instance, t)), len(check_records(instance, t))) for t in changed.metrics}
    assert after == {**before, AUDIT_LOG: (before[AUDIT_LOG][0] + 1, before[AUDIT_LOG][1] + 1)}
    latest = observations(instance, AUDIT_LOG)[0].metadata  # newest first
    assert value(latest["data_file_count"]) == real_counts(settings, AUDIT_LOG)["data_files"] == 2
    assert report(settings, instance, changed) == 0


def test_a_status_that_changes_with_time_is_reported_once(lake):
    settings, instance = lake
    now = datetime.now(timezone.utc)
    snapshot = collect(settings)
    assert report(settings, instance, snapshot, now=now) == 6

    # 40 days on, with no new commit, the healthy table's metadata is stale (critical): reported once.
    later = now + timedelta(days=40)
    assert report(settings, instance, snapshot, now=later, only=[HEALTHY]) == 1
    latest = evaluation(check_records(instance, HEALTHY)[0])  # newest first
    assert not latest.passed and latest.severity is AssetCheckSeverity.ERROR
    assert {"STALE_METADATA", "OLD_SNAPSHOTS"} <= {i["type"] for i in value(latest.metadata["issues"])}
    assert report(settings, instance, snapshot, now=later + timedelta(days=1), only=[HEALTHY]) == 0


def test_after_a_maintenance_run_the_result_is_recorded_again_once_its_materialization_is_stored(lake):
    """Dagit shows a check result only if it is newer than the latest materialization; orphan
    cleanup commits nothing, so the table's fingerprint does not change after it."""
    settings, instance = lake
    snapshot = collect(settings)
    assert report(settings, instance, snapshot) == 6
    coordination = Coordination(settings.coordination_url)
    started = datetime.now(timezone.utc)
    coordination.record_outcome(Outcome(
        run_id="run-1", table_name=HEALTHY.qualified, operation=Operation.ORPHAN_CLEANUP, started_at=started,
        finished_at=started + timedelta(seconds=5), succeeded=True, changed=False, trigger="interval",
    ))
    # The outcome is recorded, the run's materialization not yet: reporting now would be hidden by it.
    assert report(settings, instance, snapshot) == 0
    materialize_in_a_run(instance, HEALTHY)
    assert report(settings, instance, snapshot) == 1
    [materialization] = instance.fetch_materializations(asset_key_for(HEALTHY), limit=10).records
    newest = check_records(instance, HEALTHY)[0]  # newest first
    assert evaluation(newest).passed
    assert evaluation(newest).target_materialization_data.storage_id == materialization.storage_id
    assert report(settings, instance, snapshot) == 0


def test_a_time_budget_leaves_the_rest_for_the_next_call(lake):
    settings, instance = lake
    snapshot = collect(settings)
    ticks = iter(range(1000))
    assert report(settings, instance, snapshot, time_budget_s=1, timer=lambda: next(ticks)) == 1
    # A most severe table first (critical ones by name: demo.ops.audit_log); the others follow.
    recorded = {t: check_records(instance, t) for t in snapshot.metrics}
    assert [t for t, records in recorded.items() if records] == [AUDIT_LOG]
    assert evaluation(recorded[AUDIT_LOG][0]).severity is AssetCheckSeverity.ERROR
    assert report(settings, instance, snapshot) == 5
    assert report(settings, instance, snapshot) == 0


# -- the declared checks --------------------------------------------------------------------------------


def test_the_checks_are_declared_per_table_and_can_be_executed(lake):
    settings, instance = lake
    tables = sorted(collect(settings).metrics)
    specs = health_check_specs(tables)
    assert [s.asset_key for s in specs] == [asset_key_for(t) for t in tables]
    assert {s.name for s in specs} == {HEALTH_CHECK_NAME}
    checks = build_health_checks(tables, settings)
    job = define_asset_job("health_now", selection=AssetSelection.checks(AssetCheckKey(asset_key_for(EVENTS), "health")))
    base = build_definitions(settings, tables)  # the table assets, without checks of their own
    defs = Definitions(assets=base.assets, asset_checks=[checks], jobs=[job], resources=base.resources)
    result = defs.resolve_job_def("health_now").execute_in_process(instance=instance)
    assert result.success
    [record] = check_records(instance, EVENTS)
    assert record.run_id == result.run_id and evaluation(record).severity is AssetCheckSeverity.WARN
    assert check_records(instance, ORDERS) == []  # only the selected check ran
    [observation] = observations(instance, EVENTS)
    assert value(observation.metadata["snapshot_count"]) == SIZES.snapshots
    # What the run recorded counts as reported: the next report does not repeat it.
    assert report(settings, instance, collect(settings), only=[EVENTS]) == 0


GRAPHQL = """
query ($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks {
          checks { name executionForLatestMaterialization { status evaluation { severity } } }
        }
      }
    }
  }
}
"""

CODE_LOCATION = """
from dagster import Definitions
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.health_checks import build_health_checks
from floe_dagster.settings import load_settings
from floe_dagster.iceberg.table_cache import read_cached_tables

settings = load_settings()
tables = read_cached_tables(settings)
defs = build_definitions(settings, tables)
if not defs.asset_checks:  # before build.py declares the health checks itself
    defs = Definitions.merge(defs, Definitions(asset_checks=[build_health_checks(tables, settings)]))
"""


def test_dagit_shows_the_runless_results_of_the_declared_checks(lake, tmp_path):
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    settings, instance = lake
    snapshot = collect(settings)
    assert report(settings, instance, snapshot) == 6
    module = tmp_path / "code_location.py"
    module.write_text(textwrap.dedent(CODE_LOCATION))
    with define_out_of_process_context(str(module), "defs", instance) as context:
        def check_of(table):  # a new request context per query, as Dagit makes one per request
            fresh = context.process_context.create_request_context()
            result = execute_dagster_graphql(fresh, GRAPHQL, {"assetKey": {"path": list(asset_key_for(table).path)}})
            assert not result.errors, result.errors
            [check] = result.data["assetNodeOrError"]["assetChecksOrError"]["checks"]
            return check

        orders = check_of(ORDERS)
        assert orders["name"] == "health"
        assert orders["executionForLatestMaterialization"] == {"status": "FAILED", "evaluation": {"severity": "ERROR"}}
        assert check_of(EVENTS)["executionForLatestMaterialization"]["evaluation"]["severity"] == "WARN"
        assert check_of(HEALTHY)["executionForLatestMaterialization"]["status"] == "SUCCEEDED"

        # A real maintenance run that commits nothing (orphan cleanup of a table without orphans)
        # materializes the table: Dagit hides the older result until the next report, which follows
        # the run's materialization although the table's metadata did not change.
        job = build_definitions(settings, sorted(snapshot.metrics)).resolve_job_def(MAINTENANCE_JOB)
        job = job.get_subset(asset_selection={asset_key_for(HEALTHY)}, asset_check_selection=set())  # as runs do
        run = job.execute_in_process(instance=instance, partition_key="ORPHAN_CLEANUP")
        assert run.success
        assert check_of(HEALTHY)["executionForLatestMaterialization"] is None
        after = collect(settings)
        assert after.computed == []  # the table did not change
        assert report(settings, instance, after) == 1
        assert check_of(HEALTHY)["executionForLatestMaterialization"]["status"] == "SUCCEEDED"
        assert check_of(ORDERS)["executionForLatestMaterialization"]["status"] == "FAILED"


# -- health_report ----------------------------------------------------------------------------------------


def test_health_report_for_one_table(lake):
    settings, _ = lake
    now = datetime.now(timezone.utc)
    record = health_report(settings, Coordination(settings.coordination_url), "sales.orders", now)
    json.dumps(record)  # JSON-able as it is
    assert record["qualified_name"] == "demo.sales.orders" and record["tier"] == "full"
    assert record["policy"] == "orders-strict" and record["status"] == "critical"
    assert record["metrics"]["data_file_count"] == real_counts(settings, ORDERS)["data_files"] == SIZES.small_files
    assert record["derived"]["small_file_percent"] == 100.0
    assert [(i["type"], i["severity"]) for i in record["issues"]] == [("TOO_MANY_SMALL_FILES", "critical")]
    assert record["thresholds"]["smallFilePercentCritical"] == 50
    debt = record["debt"]
    assert debt["operation"] == "REWRITE_DATA_FILES" and set(debt["operations"]) == {"REWRITE_DATA_FILES"}
    assert debt["breakdown"]["critical_issues"] == 100 and debt["inputs"]["critical_issues"] == 1
    assert debt["score"] == pytest.approx(sum(v for k, v in debt["breakdown"].items() if k != "capped"))
    text = format_health_text(record)
    assert text.startswith("demo.sales.orders: CRITICAL")
    assert "TOO_MANY_SMALL_FILES" in text and "debt score" in text

    # A table no policy matches is assessed with Floe's defaults; the qualified form works too.
    other = health_report(settings, Coordination(settings.coordination_url), TableName.parse("demo.ops.audit_log", "demo"),
                          now)
    assert other["policy"] is None and other["thresholds_from"].startswith("defaults")
    assert other["thresholds"]["smallFilePercentCritical"] == 50 and other["debt"]["operation"] is None


def test_health_report_debt_takes_the_worst_operation(lake):
    settings, _ = lake
    coordination = Coordination(settings.coordination_url)
    started = datetime.now(timezone.utc) - timedelta(hours=1)
    for i in range(2):
        coordination.record_outcome(Outcome(
            run_id=f"failed-{i}", table_name=ORDERS.qualified, operation=Operation.REWRITE_DATA_FILES,
            started_at=started + timedelta(minutes=i), finished_at=started + timedelta(minutes=i, seconds=30),
            succeeded=False, message="boom",
        ))
    debt = health_report(settings, Coordination(settings.coordination_url), ORDERS, datetime.now(timezone.utc))["debt"]
    item = debt["operations"]["REWRITE_DATA_FILES"]
    assert item["consecutive_failures"] == 2 and item["failure_rate"] == 100.0
    assert debt["breakdown"]["consecutive_failures"] == 40 and debt["breakdown"]["failure_rate"] == 100


def test_health_report_on_an_unknown_table_is_a_clear_error(lake):
    settings, _ = lake
    with pytest.raises(UnknownTable, match=r"'demo\.sales\.nope' does not exist in catalog 'demo'"):
        health_report(settings, Coordination(settings.coordination_url), "sales.nope", datetime.now(timezone.utc))
    with pytest.raises(UnknownTable, match="nope"):
        health_report(settings, Coordination(settings.coordination_url), "demo.sales.nope", datetime.now(timezone.utc))
    with pytest.raises(ValueError, match="expected catalog.namespace.table"):
        health_report(settings, Coordination(settings.coordination_url), "orders", datetime.now(timezone.utc))
