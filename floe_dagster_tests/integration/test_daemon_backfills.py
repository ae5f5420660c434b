"""Backfills through the real Dagster daemon: ``floe-dagster backfill --dagster-backfill`` over a
namespace (one Dagster backfill of the maintenance job restricted to the namespace's assets: one run
maintaining several tables, each under its own lock) and ``floe-dagster backfill`` (one queued run
per table); the daemon launches them, the runs carry the audit tags, and the tables change. These
are the docs' commands (docs/automation.md).

The same daemon also proves the maintenance step's Dagster pool (floe.yaml ``maintenance.pool``,
docs/configuration.md "The Spark pool"): with the pool's limit set to 1 by the documented command, the
two runs (which ``max_concurrent_runs: 2`` would let run side by side, as they maintain different
tables) never hold the pool at once: the second run's maintenance step starts once the first one's ended.
(One daemon for both: each daemon start and each run's Spark cost the suite about a minute on 2 cores.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.assets import build_table_assets
from floe_dagster.demo import EVENT_SCHEMA, DemoSizes, build_demo_lakehouse, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import dagster_daemon, write_settings

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POOL = "lake-spark"  # not the default: the floe.yaml key is what names it
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
    config = write_settings(tmp_path, POLICIES, f"maintenance:\n  pool: {POOL}\n")
    settings = load_settings(config, environ={})
    # sales.customers written by PyIceberg beforehand: the demo would start a Spark session in this process
    # only for its position deletes, which no backfill here reads.
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    catalog.create_table("sales.customers", schema=EVENT_SCHEMA).append(rows(0, 5))
    quick_dequeue(dagster_home)
    build_demo_lakehouse(settings, DemoSizes(small_files=10, snapshots=5, position_delete_commits=1,
                                            old_orphans=0, young_orphans=0, skewed_files=6, other_partition_files=1))
    maintenance_op = build_table_assets(refresh_table_cache(settings), settings).op
    assert maintenance_op.pool == POOL  # what the definitions declare
    # The scheduler is off so that only the backfills run.
    env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(dagster_home), "FLOE_SCHEDULER_ENABLED": "false"}

    def run(*command):
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    # Both backfills are asked for before the daemon starts, so that the two runs wait side by side when it
    # does and the pool alone keeps them apart (the backfill's run is made by the daemon on its first pass).
    run(str(BIN / "dagster"), "instance", "concurrency", "set", POOL, "1")  # the documented command
    out = run(str(BIN / "floe-dagster"), "backfill", "--tables", "demo.sales.*", "--operation", "REWRITE_MANIFESTS",
              "--dagster-backfill")
    assert "one REWRITE_MANIFESTS run over 3 table(s)" in out and "included demo.sales.events" in out
    backfill_id = out.split("Dagster backfill ")[1].split()[0]
    out = run(str(BIN / "floe-dagster"), "backfill", "--tables", "demo.ops.metrics", "--operation",
              "REWRITE_DATA_FILES")
    assert "1 run(s) queued" in out
    with DagsterInstance.get() as instance, dagster_daemon(env):
        most_claimed, waited = wait_for_two_runs(instance)
        runs = {r.tags.get("dagster/backfill") is not None: r for r in instance.get_runs()}
        steps = sorted(step_window(instance, run.run_id, maintenance_op.name) for run in runs.values())

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

    # The pool: the second run's maintenance step started only after the first one's ended, although the run
    # coordinator allows two runs; each run's plan claims one slot of the pool (its root step). (Whole runs may
    # overlap: a started run's slot is held for it only 5 s before its step claims it, and on busy cores a run
    # takes longer than that to reach its step, which then waits for the slot.)
    (_, first_end), (second_start, _) = steps
    assert second_start >= first_end, steps
    assert all(r.run_op_concurrency.root_key_counts == {POOL: 1} for r in runs.values())
    assert most_claimed == 1  # the slots as the instance recorded them while the runs went on
    assert waited  # one run waited, queued or at its step, while the other held the slot

    events = table_counts(load_table(catalog, TableName.parse("sales.events", "demo")))
    assert events["manifests"] == 1 and events["snapshots"] == 6  # 5 appends + the manifest rewrite
    metrics = table_counts(load_table(catalog, TableName.parse("ops.metrics", "demo")))
    assert metrics["data_files"] == 4  # 'eu' compacted from 6 files to 1; the 3 single-file regions as they were


def wait_for_two_runs(instance) -> tuple[int, bool]:
    """Polls the instance until both runs finished: the most slots of the pool claimed at once, and
    whether a run waited (queued, or its step waiting for a slot) while another one held the pool's slot."""
    most_claimed, waited = 0, False
    # Two runs one after the other, on 2 busy cores (about 340 s under a load of 20); less than the 900 s
    # pytest-timeout gives the whole test, so that a stuck run fails the asserts below with its status.
    deadline = time.time() + 600
    while time.time() < deadline:
        pool = instance.event_log_storage.get_concurrency_info(POOL)
        runs = instance.get_runs()
        claimed = len(pool.claimed_slots)
        most_claimed = max(most_claimed, claimed)
        waited = waited or (claimed == 1 and (pool.pending_step_count > 0
                                              or any(r.status == DagsterRunStatus.QUEUED for r in runs)))
        if len(runs) == 2 and all(r.is_finished for r in runs):
            break
        time.sleep(1)
    return most_claimed, waited


def step_window(instance, run_id: str, step: str) -> tuple[float, float]:
    """When the run's maintenance step started and when it ended (its events' times)."""
    def times(*kinds: DagsterEventType) -> list[float]:
        return [e.timestamp for e in instance.all_logs(run_id, of_type=set(kinds)) if e.step_key == step]

    (started,), (ended,) = times(DagsterEventType.STEP_START), times(DagsterEventType.STEP_SUCCESS,
                                                                     DagsterEventType.STEP_FAILURE)
    return started, ended
