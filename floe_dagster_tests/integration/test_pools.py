"""The maintenance step's Dagster pool (floe.yaml ``maintenance.pool``, docs/configuration.md "The Spark
pool"), through a real instance and the real daemon: with the pool's limit set to 1 by the documented
command, two maintenance runs of different tables (which ``max_concurrent_runs: 2`` and the per-table
tag limit would let run side by side) never hold the pool at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.defs.assets import build_table_assets
from floe_dagster.demo import DemoSizes, build_demo_lakehouse
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
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
"""


def test_a_pool_limit_of_one_keeps_two_maintenance_runs_apart(tmp_path, dagster_home):
    config = write_settings(tmp_path, POLICIES, f"maintenance:\n  pool: {POOL}\n")
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, DemoSizes(small_files=3, snapshots=2, position_delete_commits=0, old_orphans=0,
                                            young_orphans=0, skewed_files=2, other_partition_files=1))
    tables = refresh_table_cache(settings)
    assert build_table_assets(tables, settings).op.pool == POOL  # what the definitions declare
    env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(dagster_home),
           "FLOE_SCHEDULER_ENABLED": "false"}

    def run(*command: str) -> str:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    run(str(BIN / "dagster"), "instance", "concurrency", "set", POOL, "1")  # the documented command
    assert "1 run(s) queued" in run(str(BIN / "floe-dagster"), "backfill", "--tables", "demo.sales.orders",
                                    "--operation", "REWRITE_MANIFESTS")
    assert "1 run(s) queued" in run(str(BIN / "floe-dagster"), "backfill", "--tables", "demo.ops.metrics",
                                    "--operation", "REWRITE_MANIFESTS")
    most_claimed, waited_queued = _run_daemon_until_done(env)

    with DagsterInstance.get() as instance:
        records = sorted(instance.get_run_records(RunsFilter()), key=lambda r: r.start_time or 0)
    assert len(records) == 2 and all(r.dagster_run.status == DagsterRunStatus.SUCCESS for r in records)
    # The second started only after the first ended: one at a time, although the run coordinator allows
    # two; each run's plan claims one slot of the pool (its root step).
    first, second = records
    assert second.start_time >= first.end_time, (first.start_time, first.end_time, second.start_time)
    assert all(r.dagster_run.run_op_concurrency.root_key_counts == {POOL: 1} for r in records)
    assert most_claimed == 1  # the slots as the instance recorded them while the runs went on
    assert waited_queued  # one run waited in the queue while the other held the slot


def _run_daemon_until_done(env: dict[str, str]) -> tuple[int, bool]:
    """The daemon until both runs finished: the most slots of the pool claimed at once, and whether a run
    stayed queued while another one held the pool's slot."""
    most_claimed, waited_queued = 0, False
    deadline = time.time() + 480
    with dagster_daemon(env), DagsterInstance.get() as instance:
        while time.time() < deadline:
            claimed = len(instance.event_log_storage.get_concurrency_info(POOL).claimed_slots)
            runs = instance.get_runs()
            most_claimed = max(most_claimed, claimed)
            waited_queued = waited_queued or (claimed == 1 and any(r.status == DagsterRunStatus.QUEUED for r in runs))
            if len(runs) == 2 and all(r.is_finished for r in runs):
                break
            time.sleep(1)
    return most_claimed, waited_queued
