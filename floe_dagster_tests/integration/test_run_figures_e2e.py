"""What a run cost and bought, through the real stack (issue 29, deliverables 1 and 2): one Dagster run
compacts two tables on real Spark with the Iceberg runtime; each table's materialization carries the
compute of its own Spark jobs (executor CPU, task time, bytes read and written, from Spark's status store)
and its benefit, checked against the table's metadata as PyIceberg reads it before and after; the outcome
rows, the history read, the operations API, explain and ``/metrics`` (over real HTTP) carry the same.

The two tables differ in size about a hundred-fold, and the big one runs first: a figure scoped by
anything wider than the table's own job tag (the run, the session) would give the small one the big one's
bytes."""

from __future__ import annotations

import os
import re
import uuid
from datetime import timedelta

import pyarrow.parquet as pq
import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.api.metric_counters import OutcomeTally
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._seeded import seeded_table, viewer_config
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY, start_server

pytestmark = pytest.mark.spark

POLICY = """
- name: figures
  tablePattern: "demo.figures.*"
  rewriteDataFiles: {strategy: BINPACK, minInputFiles: 2}
  rewriteDataFilesSchedule: {interval: PT1H}
"""
BIG = TableName("demo", ("figures",), "a_big")  # maintained first (the run goes by name)
SMALL = TableName("demo", ("figures",), "b_small")
FILES = 6


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    config, settings = viewer_config(tmp_path, POLICY, monkeypatch)
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("figures")
    for table, rows_per_file in ((BIG, 4000), (SMALL, 40)):
        seeded_table(catalog, f"figures.{table.name}", FILES, rows_per_file)
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        yield settings, instance


def data_files(settings, table: TableName) -> int:
    """The table's live data files as PyIceberg plans a scan of it."""
    return len(list(load_table(open_catalog(settings.catalog), table).scan().plan_files()))


def plain(metadata) -> dict:
    return {name: getattr(value, "value", value) for name, value in metadata.items()}


def sample(text: str, name: str) -> float:
    found = re.search(rf'^{name}\{{operation="rewrite_data_files"\}} (\S+)$', text, re.M)
    assert found, f"{name} is not served"
    return float(found.group(1))


def test_each_tables_run_records_its_own_compute_and_benefit(lake, monkeypatch):
    settings, instance = lake
    monkeypatch.setattr(OutcomeTally, "LAG", timedelta(0))  # count an outcome at the next scrape
    before = {table: data_files(settings, table) for table in (BIG, SMALL)}
    assert before == {BIG: FILES, SMALL: FILES}
    server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
    headers = {"X-API-Key": VIEWER_KEY}
    try:
        first = requests.get(f"{url}/metrics", headers=headers, timeout=60).text  # the counters start at 0
        assert sample(first, "floe_operation_executor_cpu_seconds_total") == 0.0

        result = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key="REWRITE_DATA_FILES",
            asset_selection=[asset_key_for(BIG), asset_key_for(SMALL)])
        assert result.success
        figures = {table: plain(instance.get_latest_materialization_event(asset_key_for(table))
                                .asset_materialization.metadata) for table in (BIG, SMALL)}
        for table in (BIG, SMALL):
            _assert_compute(figures[table])
            _assert_benefit(settings, table, figures[table], before[table])
        _assert_scoped(figures[BIG], figures[SMALL])

        # The outcome rows and the history read (what a learned ranking reads).
        coordination = CoordinationResource.from_settings(settings).coordination
        for table in (BIG, SMALL):
            [past] = coordination.run_figures(table.qualified, Operation.REWRITE_DATA_FILES)
            assert past.run_id == result.run_id
            assert past.compute.executor_cpu_s == figures[table]["floe/compute/executor_cpu_s"]
            assert past.benefit.files_removed == figures[table]["floe/benefit/files_removed"]

        # The operations API (each table's metrics), explain (the last run's figures), /metrics (the sums).
        page = requests.get(f"{url}/api/v1/operations", params={"table": SMALL.qualified}, headers=headers,
                            timeout=60).json()
        [small_record] = [t for t in page["operations"][0]["tables"] if t["table"] == SMALL.qualified]
        assert small_record["metrics"]["floe/compute/bytes_read"] == figures[SMALL]["floe/compute/bytes_read"]
        assert small_record["metrics"]["floe/benefit/files_removed"] == FILES - 1
        status = requests.get(f"{url}/api/v1/tables/figures/b_small/trigger-status", headers=headers,
                              timeout=60).json()["operationStatuses"]["REWRITE_DATA_FILES"]["lastRun"]
        assert status["figuresRunId"] == result.run_id
        assert status["compute"]["task_s"] == figures[SMALL]["floe/compute/task_s"]
        assert status["benefit"]["before"]["data_files"] == FILES and status["benefit"]["after"]["data_files"] == 1

        served = requests.get(f"{url}/metrics", headers=headers, timeout=60).text
        both = lambda key: sum(figures[t][key] for t in (BIG, SMALL))  # noqa: E731
        assert sample(served, "floe_operation_executor_cpu_seconds_total") == pytest.approx(
            both("floe/compute/executor_cpu_s"))
        assert sample(served, "floe_operation_bytes_read_total") == both("floe/compute/bytes_read")
        assert sample(served, "floe_operation_bytes_written_total") == both("floe/compute/bytes_written")
        assert sample(served, "floe_operation_files_removed_total") == 2 * (FILES - 1)
        assert sample(served, "floe_operation_task_seconds_total") > 0
    finally:
        server.should_exit = True
        thread.join(20)


def _assert_compute(metadata: dict) -> None:
    assert metadata["floe/compute/source"] == "spark" and "floe/compute/unavailable" not in metadata
    assert metadata["floe/compute/executor_cpu_s"] > 0 and metadata["floe/compute/task_s"] > 0
    assert metadata["floe/compute/bytes_read"] > 0 and metadata["floe/compute/bytes_written"] > 0
    assert metadata["floe/compute/jobs"] >= 1 and metadata["floe/compute/tasks"] >= 1
    assert 0 < metadata["floe/compute/wall_s"] <= metadata["duration_s"]


def _assert_benefit(settings, table: TableName, metadata: dict, files_before: int) -> None:
    """The benefit agrees with the table's metadata as PyIceberg reads it before and after."""
    after = load_table(open_catalog(settings.catalog), table)
    assert metadata["floe/benefit/data_files_before"] == files_before
    assert metadata["floe/benefit/data_files_after"] == data_files(settings, table) == 1
    assert metadata["floe/benefit/files_removed"] == files_before - 1
    assert metadata["floe/benefit/scan_files_before"] == files_before and metadata["floe/benefit/scan_files_after"] == 1
    live = sum(task.file.file_size_in_bytes for task in after.scan().plan_files())
    assert metadata["floe/benefit/live_bytes_after"] == metadata["floe/benefit/scan_bytes_after"] == live
    assert metadata["floe/benefit/mean_file_bytes_after"] == live
    assert metadata["floe/benefit/snapshots_after"] == len(after.metadata.snapshots) == 2
    assert metadata["floe/benefit/metadata_file_bytes_after"] == os.path.getsize(local_path(after.metadata_location))
    assert metadata["floe/benefit/manifests_after"] == len(after.current_snapshot().manifests(after.io))


def _assert_scoped(big: dict, small: dict) -> None:
    """Each table's figures are its own jobs': what it read is about what it rewrote, and the small table's
    (maintained second) hold nothing of the big one's."""
    for metadata in (big, small):
        assert metadata["floe/compute/bytes_read"] >= 0.9 * metadata["rewritten_bytes_count"]
        assert metadata["floe/compute/bytes_read"] <= 2 * metadata["rewritten_bytes_count"]
    assert big["rewritten_bytes_count"] > 20 * small["rewritten_bytes_count"]
    assert small["floe/compute/bytes_read"] < big["rewritten_bytes_count"]
    assert small["floe/compute/bytes_written"] < big["floe/compute/bytes_written"]
