"""Backfills through the real Dagster daemon: ``floe-dagster backfill --dagster-backfill`` over a
namespace (one Dagster backfill of the maintenance job restricted to the namespace's assets: one run
maintaining several tables, each under its own lock) and ``floe-dagster backfill`` (one queued run
per table); the daemon launches them, the runs carry the audit tags, and the tables change. These
are the docs' commands (docs/automation.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from floe_dagster.core import run_tags as T
from floe_dagster.core.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, DemoSizes, build_demo_lakehouse, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import dagster_daemon, write_settings

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POLICIES = """
- name: all
  tablePattern: "*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
"""


def quick_dequeue(dagster_home: Path) -> None:
    """The run queue looked at every second rather than every 5 (the instance's dagster.yaml, test-only)."""
    path = dagster_home / "dagster.yaml"
    text = path.read_text()
    assert "    max_concurrent_runs: 2\n" in text
    path.write_text(text.replace("    max_concurrent_runs: 2\n",
                                 "    max_concurrent_runs: 2\n    dequeue_interval_seconds: 1\n"))


def test_namespace_backfill_and_per_table_backfill_run_through_the_daemon(tmp_path, dagster_home):
    config = write_settings(tmp_path, POLICIES)
    settings = load_settings(config, environ={})
    # sales.customers written by PyIceberg beforehand: the demo would start a Spark session in this process
    # only for its position deletes, which no backfill here reads.
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    catalog.create_table("sales.customers", schema=EVENT_SCHEMA).append(rows(0, 5))
    quick_dequeue(dagster_home)
    build_demo_lakehouse(settings, DemoSizes(small_files=10, snapshots=5, position_delete_commits=1,
                                            old_orphans=0, young_orphans=0, skewed_files=6, other_partition_files=1))
    refresh_table_cache(settings)
    # The scheduler is off so that only the backfills run.
    env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(dagster_home), "FLOE_SCHEDULER_ENABLED": "false"}

    def run(*command):
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    # The daemon loads its code location while the backfills are asked for: it launches them when they come.
    # (The instance's storage is made first, before two processes share it.)
    with DagsterInstance.get() as instance, dagster_daemon(env):
        out = run(str(BIN / "floe-dagster"), "backfill", "--tables", "demo.sales.*", "--operation", "REWRITE_MANIFESTS",
                  "--dagster-backfill")
        assert "one REWRITE_MANIFESTS run over 3 table(s)" in out and "included demo.sales.events" in out
        backfill_id = out.split("Dagster backfill ")[1].split()[0]
        out = run(str(BIN / "floe-dagster"), "backfill", "--tables", "demo.ops.metrics", "--operation",
                  "REWRITE_DATA_FILES")
        assert "1 run(s) queued" in out
        deadline = time.time() + 420
        while time.time() < deadline:
            runs = instance.get_runs()
            if len(runs) == 2 and all(r.is_finished for r in runs):
                break
            time.sleep(2)
        runs = {r.tags.get("dagster/backfill") is not None: r for r in instance.get_runs()}

    dagster_run, floe_run = runs[True], runs[False]
    assert dagster_run.status == DagsterRunStatus.SUCCESS and floe_run.status == DagsterRunStatus.SUCCESS
    with DagsterInstance.get() as instance:
        backfill = instance.get_backfill(backfill_id)
        namespace_run = instance.get_run_by_id(dagster_run.run_id)
    # The backfill of the one maintenance job, restricted to the namespace's tables (no namespace job).
    assert backfill.partition_set_origin.partition_set_name == "floe_maintenance_partition_set"
    assert backfill.partition_names == ["REWRITE_MANIFESTS"]
    assert namespace_run.job_name == "floe_maintenance"
    assert {k.to_user_string() for k in namespace_run.asset_selection} == {
        "demo/sales/customers", "demo/sales/events", "demo/sales/orders"}
    tags = namespace_run.tags
    assert tags["dagster/backfill"] == backfill_id and tags["dagster/partition"] == "REWRITE_MANIFESTS"
    assert tags["floe/trigger"] == "backfill" and tags["floe/operation"] == "REWRITE_MANIFESTS"
    assert tags[T.NAMESPACE] == "sales" and tags["floe/reason"] == "backfill from the CLI"
    assert tags[T.TRIGGER_ID] and tags["dagster/priority"] == "0"
    assert floe_run.tags["floe/trigger"] == "backfill" and floe_run.tags["floe/table"] == "demo.ops.metrics"

    events = table_counts(load_table(catalog, TableName.parse("sales.events", "demo")))
    assert events["manifests"] == 1 and events["snapshots"] == 6  # 5 appends + the manifest rewrite
    metrics = table_counts(load_table(catalog, TableName.parse("ops.metrics", "demo")))
    assert metrics["data_files"] == 4  # 'eu' compacted from 6 files to 1; the 3 single-file regions as they were
