"""Every operation end to end on the demo's kind of tables: real Spark with the Iceberg runtime, a
real PyIceberg SQLite catalog, a real Dagster instance. Asserts what a user would check: files on
disk, snapshots in metadata, rows unchanged, the run's tags and the materialization's metadata."""

from __future__ import annotations

import os

import pytest
from dagster import DagsterInstance

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import DemoSizes, build_demo_lakehouse, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import DEFAULT_ICEBERG_VERSION, load_settings
from floe_dagster.spark.operation_steps.rewrite_manifests import supports_manifest_sort_by
from floe_dagster.spark.runtime import installed_spark_line
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark

POLICIES = """
- name: sales-all
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {interval: PT1H}
  expireSnapshots: {retainLast: 3, maxSnapshotAge: PT0S}
  expireSnapshotsSchedule: {interval: PT1H}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: PT1H}
  rewritePositionDeleteFiles: {rewriteAll: true}
  rewritePositionDeleteFilesSchedule: {interval: PT1H}
- name: ops-orphans
  tablePattern: "demo.ops.*"
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: P1D}
- name: metrics-manifests            # Floe's Java-action fields (issue 23): accepted, passed where possible
  tablePattern: "demo.ops.metrics"
  rewriteManifests: {sortBy: [region], stagingLocation: /tmp/floe-staging, rewriteIf: {specId: 0, content: DATA}}
  rewriteManifestsSchedule: {interval: P1D}
"""
SIZES = DemoSizes(small_files=40, snapshots=12, position_delete_commits=6, old_orphans=3, young_orphans=2,
                  skewed_files=6, other_partition_files=1)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    settings = load_settings(write_settings(root, POLICIES), environ={})
    build_demo_lakehouse(settings, SIZES)
    return settings


@pytest.fixture
def instance(dagster_home):
    with DagsterInstance.get() as instance:
        yield instance


def contents(settings, name):
    table = load_table(open_catalog(settings.catalog), TableName.parse(name, "demo"))
    data = table.scan().to_arrow()
    return data.sort_by([("id", "ascending"), ("kind", "ascending"), ("amount", "ascending")])


def files_under(table) -> set[str]:
    root = local_path(table.location())
    return {str(p) for p in root.rglob("*") if p.is_file()}


def trigger(settings, instance, name, op, reason="test"):
    summary = trigger_table(settings, name, [op], reason=reason, actor="tester", trigger_id=f"t-{op}",
                            instance=instance)
    assert summary.succeeded, summary.lines()
    return summary.outcomes[0]


def assert_pyiceberg_can_commit(settings, name):
    """The engine left no SQLite lock behind: a PyIceberg writer commits right after the run."""
    table = load_table(open_catalog(settings.catalog), TableName.parse(name, "demo"))
    before = table_counts(table)["records"]
    table.append(rows(900_000, 1))
    assert table_counts(load_table(open_catalog(settings.catalog), TableName.parse(name, "demo")))["records"] == before + 1


@pytest.mark.spark4_smoke  # every operation, each a Dagster run
def test_rewrite_data_files_compacts_small_files(lake, instance):
    before_rows = contents(lake, "sales.orders")
    outcome = trigger(lake, instance, "demo.sales.orders", "REWRITE_DATA_FILES")
    table = load_table(open_catalog(lake.catalog), TableName.parse("sales.orders", "demo"))
    counts = table_counts(table)
    assert counts["data_files"] == 1  # 40 tiny files, one partition, far under the target size
    assert contents(lake, "sales.orders").equals(before_rows)
    assert outcome.metadata["rewritten_data_files_count"] == 40
    assert outcome.metadata["data_files_before"] == 40 and outcome.metadata["data_files_after"] == 1
    assert outcome.metadata["row_check"] == "snapshot-summary" and outcome.metadata["rows_checked"] == 400
    # The engine's time split: the CALL, and floe's own reads and checks around it.
    phases = outcome.metadata["engine_phases"]
    assert set(phases) == {"session", "snapshots_before", "call", "snapshots_after", "row_check", "release"}
    assert outcome.metadata["call_s"] == phases["call"] > 0
    assert outcome.metadata["overhead_s"] == pytest.approx(outcome.metadata["duration_s"] - phases["call"], abs=0.002)

    run = instance.get_run_by_id(outcome.run_id)
    assert run.tags["floe/table"] == "demo.sales.orders"
    assert run.tags["floe/operation"] == "REWRITE_DATA_FILES"
    assert run.tags["floe/trigger"] == "manual" and run.tags["floe/policy"] == "sales-all"
    assert run.tags[T.ACTOR] == "tester" and run.tags[T.TRIGGER_ID] == "t-REWRITE_DATA_FILES"
    event = instance.get_latest_materialization_event(asset_key_for(TableName("demo", ("sales",), "orders")))
    assert event.dagster_event.partition == "REWRITE_DATA_FILES"
    assert event.asset_materialization.metadata["rewritten_data_files_count"].value == 40
    assert_pyiceberg_can_commit(lake, "sales.orders")


@pytest.mark.spark4_smoke
def test_expire_snapshots_down_to_retain_last(lake, instance):
    before_rows = contents(lake, "sales.events")
    table = load_table(open_catalog(lake.catalog), TableName.parse("sales.events", "demo"))
    assert len(table.metadata.snapshots) == 12
    old_manifest_lists = {s.manifest_list for s in table.metadata.snapshots[:-3]}
    outcome = trigger(lake, instance, "sales.events", "EXPIRE_SNAPSHOTS")
    table = load_table(open_catalog(lake.catalog), TableName.parse("sales.events", "demo"))
    assert len(table.metadata.snapshots) == 3
    assert outcome.metadata["deleted_manifest_lists_count"] == 9
    # Its benefit: the snapshots expired and every file its procedure deleted; its compute, Spark's jobs.
    deleted = sum(v for k, v in outcome.metadata.items() if k.startswith("deleted_") and k.endswith("_count"))
    assert outcome.metadata["floe/benefit/snapshots_expired"] == 9
    assert outcome.metadata["floe/benefit/files_deleted"] == deleted >= 9
    assert outcome.metadata["floe/compute/executor_cpu_s"] > 0 and outcome.metadata["floe/compute/jobs"] >= 1
    assert not any(os.path.exists(local_path(p)) for p in old_manifest_lists)
    assert contents(lake, "sales.events").equals(before_rows)
    assert_pyiceberg_can_commit(lake, "sales.events")


@pytest.mark.spark4_smoke
def test_rewrite_manifests(lake, instance):
    before_rows = contents(lake, "sales.events")
    table = load_table(open_catalog(lake.catalog), TableName.parse("sales.events", "demo"))
    assert table_counts(table)["manifests"] > 1
    outcome = trigger(lake, instance, "sales.events", "REWRITE_MANIFESTS")
    table = load_table(open_catalog(lake.catalog), TableName.parse("sales.events", "demo"))
    assert table_counts(table)["manifests"] == 1
    assert outcome.metadata["rewritten_manifests_count"] > 1
    assert contents(lake, "sales.events").equals(before_rows)


@pytest.mark.spark4_smoke  # sort_by: Spark 4.1 from Iceberg 1.11, Spark 3.5 from 1.12; noted as ignored elsewhere
def test_rewrite_manifests_with_floes_sort_by_staging_location_and_rewrite_if(lake, instance):
    name = TableName.parse("ops.metrics", "demo")
    for start, region in ((500_000, "us"), (500_100, "eu")):  # two more commits: three manifests
        load_table(open_catalog(lake.catalog), name).append(rows(start, 5, region))

    def rows_of() -> list[dict]:  # every row, in an order that does not depend on the files
        return sorted(load_table(open_catalog(lake.catalog), name).scan().to_arrow().to_pylist(), key=repr)

    before_rows = rows_of()
    before = table_counts(load_table(open_catalog(lake.catalog), name))["manifests"]
    assert before >= 3
    trigger(lake, instance, "ops.metrics", "REWRITE_MANIFESTS")
    table = load_table(open_catalog(lake.catalog), name)
    assert table_counts(table)["manifests"] < before
    assert rows_of() == before_rows
    event = instance.get_latest_materialization_event(asset_key_for(name))
    sql = event.asset_materialization.metadata["procedure_call"].value
    arguments = event.asset_materialization.metadata["arguments"].value
    assert "spec_id => 0" in sql and "floe-staging" not in sql  # rewriteIf's specId; stagingLocation ignored
    if supports_manifest_sort_by(DEFAULT_ICEBERG_VERSION, installed_spark_line()):  # the real procedure took it
        assert "sort_by => array('region')" in sql and arguments["sort_by"] == ["region"]
    else:
        assert "sort_by" not in sql
        assert arguments["sort_by_ignored"].startswith(f"['region']: rewrite_manifests has no sort_by on Spark "
                                                       f"{installed_spark_line()} with Iceberg {DEFAULT_ICEBERG_VERSION}")


@pytest.mark.spark4_smoke
def test_orphan_cleanup_removes_only_old_unreferenced_files(lake, instance):
    table = load_table(open_catalog(lake.catalog), TableName.parse("ops.audit_log", "demo"))
    before_files = files_under(table)
    old = {f for f in before_files if "orphan-old" in f}
    young = {f for f in before_files if "orphan-young" in f}
    referenced = {str(local_path(task.file.file_path)) for task in table.scan().plan_files()}
    assert len(old) == 3 and len(young) == 2 and referenced
    outcome = trigger(lake, instance, "ops.audit_log", "ORPHAN_CLEANUP")
    after_files = files_under(load_table(open_catalog(lake.catalog), TableName.parse("ops.audit_log", "demo")))
    assert not (old & after_files)
    assert young <= after_files and referenced <= after_files
    assert outcome.metadata["orphan_files_count"] == 3
    assert outcome.metadata["floe/benefit/files_deleted"] == 3  # the live table is unchanged: nothing else
    assert outcome.metadata["floe/benefit/files_removed"] == outcome.metadata["floe/benefit/bytes_reclaimed"] == 0


@pytest.mark.spark4_smoke
def test_rewrite_position_delete_files(lake, instance):
    name = TableName.parse("sales.customers", "demo")
    table = load_table(open_catalog(lake.catalog), name)
    live_before = table.scan().to_arrow().num_rows
    assert table_counts(table)["delete_files"] == 6
    outcome = trigger(lake, instance, "sales.customers", "REWRITE_POSITION_DELETE_FILES")
    table = load_table(open_catalog(lake.catalog), name)
    assert table_counts(table)["delete_files"] == 1
    assert outcome.metadata["rewritten_delete_files_count"] == 6
    # Delete files: the summaries cannot decide; the metadata proof does, with no Spark count.
    assert outcome.metadata["row_check"] == "snapshot-summary+metadata-proof"
    assert table.scan().to_arrow().num_rows == live_before == 600 - 6 * 12


def test_unknown_table_is_a_clear_error_before_any_run(lake, instance):
    with pytest.raises(LookupError, match="table 'demo.sales.nope' does not exist in catalog 'demo'"):
        trigger_table(lake, "demo.sales.nope", [], reason="x", actor="t", trigger_id="x", instance=instance)
    assert not instance.get_runs()
