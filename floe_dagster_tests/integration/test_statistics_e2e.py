"""COMPUTE_STATISTICS through the real stack: Iceberg's compute_table_stats and compute_partition_stats
run by Spark in a Dagster run on tiny PyIceberg tables. Asserts the Puffin file on disk, its registration
in the table metadata (PyIceberg's ``statistics`` for the current snapshot, with an ``ndv`` per column),
that Iceberg's Puffin reader and Parquet read the files back, the partition statistics file, the no-change
rerun, and the health collector's staleness as new snapshots land."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table.puffin import PuffinFile
from pyiceberg.transforms import IdentityTransform

from floe_dagster.core.operation_kinds.compute_statistics import ComputeStatisticsConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import load_policies
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import commit_equality_delete

pytestmark = pytest.mark.spark

STATS = Operation.COMPUTE_STATISTICS
POLICIES = """
- name: stats
  tablePattern: "demo.lake.*"
  computeStatistics: {}
  computeStatisticsSchedule: {interval: P1D}
  triggerConditions: {statsStaleSnapshots: 2}
- name: stats-typo
  tablePattern: "demo.lake.typo"
  computeStatistics: {columns: [id, regoin]}
- name: stats-mor
  tablePattern: "demo.lake.mor"
  computeStatistics: {}
  computeStatisticsSchedule: {interval: P1D}
  triggerConditions: {statsStaleRowsPercent: 18}
"""
PARTITIONED, PLAIN, TYPO, DIRECT, MOR = (TableName("demo", ("lake",), name)
                                         for name in ("events", "plain", "typo", "direct", "mor"))


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    settings = load_settings(write_settings(root, POLICIES), environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("lake")
    events = catalog.create_table("lake.events", schema=EVENT_SCHEMA,
                                  partition_spec=PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "region")))
    for start in (0, 30):
        events.append(rows(start, 30))  # 4 regions, 60 distinct ids
    catalog.create_table("lake.plain", schema=EVENT_SCHEMA).append(rows(0, 20))
    catalog.create_table("lake.typo", schema=EVENT_SCHEMA).append(rows(0, 5))
    catalog.create_table("lake.direct", schema=EVENT_SCHEMA, partition_spec=events.spec()).append(rows(0, 8))
    return settings


@pytest.fixture
def instance(dagster_home):
    with DagsterInstance.get() as instance:
        yield instance


def table(settings, name: TableName):
    return load_table(open_catalog(settings.catalog), name)


def trigger(settings, instance, name: TableName):
    summary = trigger_table(settings, name.qualified, [STATS], reason="test", actor="tester",
                            trigger_id=f"t-{name.name}-{datetime.now().timestamp()}", instance=instance)
    assert summary.succeeded, summary.lines()
    return summary.outcomes[0]


def metrics(settings, name: TableName):
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        return collector.metrics_for(name)


def stale(settings, name: TableName) -> bool:
    policy = load_policies(settings.policies).effective_policy(name)
    return policy.evaluate_conditions(STATS, metrics(settings, name), None, datetime.now(timezone.utc)).passed


@pytest.mark.spark4_smoke  # the procedures on both Spark lines
def test_statistics_are_written_registered_and_readable(lake, instance):
    assert metrics(lake, PARTITIONED).statistics_snapshot_id is None
    assert stale(lake, PARTITIONED)  # data and no statistics at all: stale, whatever the threshold
    before = table(lake, PARTITIONED)
    current = before.current_snapshot().snapshot_id

    outcome = trigger(lake, instance, PARTITIONED)
    meta = outcome.metadata
    assert meta["changed"] is True and meta["statistics_files_written"] == 1
    assert meta["partition_statistics_files_written"] == 1
    assert meta["new_snapshots"] == 0 and meta["row_check"] == "not-applicable"  # no commit, rows untouched
    assert meta["statistics_snapshot_id"] == str(current)
    assert meta["ndv"]["id"] == 60 and meta["ndv"]["region"] == 4  # theta sketches: exact at this size
    assert f"snapshot_id => {current}" in meta["procedure_call"] and "compute_partition_stats" in meta["procedure_call"]

    after = table(lake, PARTITIONED)
    assert after.current_snapshot().snapshot_id == current and len(after.metadata.snapshots) == 2
    (registered,) = [f for f in after.metadata.statistics if f.snapshot_id == current]
    assert registered.statistics_path == meta["statistics_file"]
    puffin = Path(local_path(registered.statistics_path))
    assert puffin.is_file() and puffin.stat().st_size > 0
    ndv = {after.schema().find_column_name(blob.fields[0]): int(blob.properties["ndv"])
           for blob in registered.blob_metadata}
    assert ndv == meta["ndv"] and set(ndv) == {"id", "kind", "amount", "region", "at"}
    # Iceberg's Puffin reader (PyIceberg's) reads the footer back: one theta sketch per column, with a payload
    read = PuffinFile(puffin.read_bytes())
    assert {blob.type for blob in read.footer.blobs} == {"apache-datasketches-theta-v1"}
    assert sorted(blob.fields[0] for blob in read.footer.blobs) == sorted(b.fields[0] for b in registered.blob_metadata)
    assert all(len(read.get_blob_payload(blob)) > 0 for blob in read.footer.blobs)

    (partition_stats,) = [f for f in after.metadata.partition_statistics if f.snapshot_id == current]
    assert partition_stats.statistics_path == meta["partition_statistics_file"]
    parquet = pq.read_table(local_path(partition_stats.statistics_path))
    assert parquet.num_rows == 4 and sum(parquet.column("data_record_count").to_pylist()) == 60

    # health: current right after the run
    fresh = metrics(lake, PARTITIONED)
    assert (fresh.statistics_snapshot_id, fresh.statistics_snapshots_behind, fresh.statistics_rows_changed) == (
        current, 0, 0)
    assert fresh.partition_statistics_snapshot_id == current
    assert not stale(lake, PARTITIONED)

    # the same snapshot again: nothing to compute, no new file
    again = trigger(lake, instance, PARTITIONED)
    assert again.metadata["changed"] is False and again.metadata["statistics_files_written"] == 0
    assert again.metadata["procedure_call"].startswith("```sql\n-- nothing to compute")
    assert table(lake, PARTITIONED).metadata.statistics == after.metadata.statistics

    # two new snapshots: stale at statsStaleSnapshots 2
    events = table(lake, PARTITIONED)
    events.append(rows(100, 5))
    assert not stale(lake, PARTITIONED)
    table(lake, PARTITIONED).append(rows(200, 5))
    lagging = metrics(lake, PARTITIONED)
    assert (lagging.statistics_snapshot_id, lagging.statistics_snapshots_behind, lagging.statistics_rows_changed) == (
        current, 2, 10)
    assert stale(lake, PARTITIONED)


def test_an_unpartitioned_table_gets_table_statistics_only(lake, instance):
    outcome = trigger(lake, instance, PLAIN)
    assert outcome.metadata["statistics_files_written"] == 1
    assert outcome.metadata["partition_statistics_files_written"] == 0
    assert "compute_partition_stats" not in outcome.metadata["procedure_call"]
    after = table(lake, PLAIN)
    assert [f.snapshot_id for f in after.metadata.statistics] == [after.current_snapshot().snapshot_id]
    assert after.metadata.partition_statistics == []


def test_a_column_the_table_lacks_fails_naming_the_policy_field_and_table(lake, instance):
    before = table(lake, TYPO).metadata_location
    summary = trigger_table(lake, TYPO.qualified, [STATS], reason="test", actor="tester", trigger_id="t-typo",
                            instance=instance)
    assert not summary.succeeded
    (outcome,) = summary.outcomes
    assert ("policy 'stats-typo': computeStatistics.columns names 'regoin', which table 'demo.lake.typo' does not "
            "have (its columns: id, kind, amount, region, at)") in outcome.message
    assert table(lake, TYPO).metadata_location == before  # nothing written


def test_the_engine_without_the_tables_metadata_reads_what_it_needs_through_spark(lake):
    """Called without PyIceberg's view (benchmarks, scripts): Spark's ``history`` gives the current snapshot
    and the ``partitions`` table the partitioning; both statistics are computed."""
    engine = IcebergSparkEngine.from_settings(lake)
    try:
        outcome = engine.maintain(DIRECT, STATS, ComputeStatisticsConfig(columns=("id",)), datetime.now(timezone.utc))
    finally:
        engine.release_catalog()
    current = table(lake, DIRECT).current_snapshot().snapshot_id
    assert outcome.result.numbers == {"statistics_files_written": 1, "partition_statistics_files_written": 1}
    assert outcome.new_snapshot_ids == () and f"snapshot_id => {current}, columns => array('id')" in outcome.sql
    after = table(lake, DIRECT).metadata
    assert [f.snapshot_id for f in after.statistics] == [current] == [f.snapshot_id for f in after.partition_statistics]
    assert [blob.fields for blob in after.statistics[0].blob_metadata] == [[1]]  # id only


def test_merge_on_read_deletes_make_the_statistics_stale_by_the_rows_they_delete(lake, instance):
    """A format-v2 merge-on-read table: after its statistics are computed, Spark's DELETE writes position
    delete files and no data file, and an equality delete file (Iceberg's RowDelta: Spark SQL writes none)
    deletes by key. The rows they delete count as changed since the statistics (statsStaleRowsPercent)."""
    engine = IcebergSparkEngine.from_settings(lake)
    try:
        with engine.unit_of_work() as spark:
            spark.sql(f"CREATE TABLE {MOR.qualified} (id BIGINT, kind STRING) USING iceberg TBLPROPERTIES "
                      "('format-version'='2', 'write.delete.mode'='merge-on-read')")
            spark.sql(f"INSERT INTO {MOR.qualified} SELECT id, 'k' FROM range(0, 40, 1, 1)")
        outcome = trigger(lake, instance, MOR)
        assert outcome.metadata["statistics_files_written"] == 1
        assert metrics(lake, MOR).statistics_rows_changed == 0 and not stale(lake, MOR)

        with engine.unit_of_work() as spark:
            spark.sql(f"DELETE FROM {MOR.qualified} WHERE id < 6")  # 6 rows: 15 % of the 40 the table records, under 18 %
            assert spark.sql(f"SELECT count(*) FROM {MOR.qualified}").collect()[0][0] == 34
        deleted = table(lake, MOR).current_snapshot()
        assert deleted.summary["added-position-deletes"] == "6" and "added-data-files" not in deleted.summary.additional_properties
        assert deleted.summary.get("deleted-records") is None  # no data file removed: only delete files
        lagging = metrics(lake, MOR)
        assert (lagging.statistics_snapshots_behind, lagging.statistics_rows_changed) == (1, 6)
        assert lagging.statistics_rows_changed_percent == pytest.approx(15.0)
        assert not stale(lake, MOR)

        commit_equality_delete(engine, MOR, Path(local_path(table(lake, MOR).location())) / "data" / "eq-deletes.parquet",
                               ids=[10, 11])  # 2 more rows: 8, 20 %
        with engine.unit_of_work() as spark:
            assert spark.sql(f"SELECT count(*) FROM {MOR.qualified}").collect()[0][0] == 32
        assert table(lake, MOR).current_snapshot().summary["added-equality-deletes"] == "2"
        stale_now = metrics(lake, MOR)
        assert (stale_now.statistics_snapshots_behind, stale_now.statistics_rows_changed) == (2, 8)
        assert stale_now.statistics_rows_changed_percent == pytest.approx(20.0)
        assert stale(lake, MOR)
    finally:
        engine.release_catalog()
