"""A maintenance run killed with SIGKILL mid-rewrite: the table still reads with the same rows, the
next tick detects the dead run (it stays STARTED, its run lock is free), marks it failed and records
the failure, and the next run on the table succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from floe_dagster.catalog import load_table, open_catalog, table_counts
from floe_dagster.coordination import Coordination
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.demo import DemoSizes, build_demo_lakehouse
from floe_dagster.locks import is_lock_free, table_lock_name
from floe_dagster.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster.table_cache import refresh_table_cache
from floe_dagster.tick import run_tick
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark

CLI = str(Path(sys.executable).parent / "floe-dagster")
POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
"""


def test_killed_run_is_detected_and_the_table_is_freed(tmp_path, dagster_home, monkeypatch):
    config = write_settings(tmp_path, POLICIES)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, DemoSizes(small_files=150, snapshots=2, position_delete_commits=1,
                                            old_orphans=0, young_orphans=0, skewed_files=1, other_partition_files=1))
    refresh_table_cache(settings)
    table = TableName.parse("sales.orders", "demo")
    catalog = open_catalog(settings.catalog)
    rows_before = load_table(catalog, table).scan().to_arrow().sort_by("id")

    process = subprocess.Popen(
        [CLI, "trigger", table.qualified, "--operation", "REWRITE_DATA_FILES"],
        env={**os.environ}, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 180
        run = None
        with DagsterInstance.get() as instance:
            while time.time() < deadline:
                runs = [r for r in instance.get_runs() if r.tags.get("floe/table") == table.qualified]
                if runs and runs[0].status == DagsterRunStatus.STARTED and not is_lock_free(table_lock_name(table)):
                    run = runs[0]
                    break
                time.sleep(0.5)
        assert run is not None, "the run never took its table lock"
        time.sleep(3)  # let Spark get going on the rewrite
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the CLI process and its Spark JVM
        process.wait()

    with DagsterInstance.get() as instance:
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.STARTED  # nobody marked it
        assert is_lock_free(table_lock_name(table))  # the OS freed the dead holder's lock
        # Same rows, same content: the killed rewrite committed nothing or everything.
        assert load_table(open_catalog(settings.catalog), table).scan().to_arrow().sort_by("id").equals(rows_before)

        later = datetime.now(timezone.utc) + timedelta(minutes=3)  # past the start-up grace
        result = run_tick(settings, instance, later, "test", None)
        assert run.run_id in result.dead_runs
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
        history = Coordination(settings.coordination_url).all_history()[(table.qualified, Operation.REWRITE_DATA_FILES)]
        assert history.consecutive_failures == 1 and history.last_success_start is None

        summary = trigger_table(settings, table.qualified, ["REWRITE_DATA_FILES"], reason="after the kill",
                                actor="test", trigger_id="retry", instance=instance)
        assert summary.succeeded, summary.lines()
    after = load_table(open_catalog(settings.catalog), table)
    assert table_counts(after)["data_files"] == 1
    assert after.scan().to_arrow().sort_by("id").equals(rows_before)
