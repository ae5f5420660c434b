"""A maintenance run killed with SIGKILL in the middle of rewrite_data_files on a large table: the
table still reads, with the same rows and the same content checksum (the rewrite committed nothing);
the next tick detects the dead run (it stays STARTED, its run lock is free), marks it failed and
records the failure; its table lock is free; and the next run on the table succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import is_lock_free, table_lock_name
from floe_dagster.coordination.runs import run_lock_name
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_maintenance_e2e import files_under
from floe_dagster_tests.reliability._support import checksum, create_fragmented_table

pytestmark = pytest.mark.spark

CLI = str(Path(sys.executable).parent / "floe-dagster")
POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
"""
# About a million rows in 40 files: the rewrite takes seconds, so the kill lands inside it.
FILES, ROWS_PER_FILE = 40, 25_000


def wait_for(condition, what: str, timeout_s: float = 180, every_s: float = 0.05):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def started_procedure(instance: DagsterInstance, table: TableName):
    """The run maintaining the table once it logged that it holds the table lock and calls Spark."""
    runs = [r for r in instance.get_runs() if r.tags.get("floe/table") == table.qualified]
    if not runs or runs[0].status != DagsterRunStatus.STARTED:
        return None
    logs = instance.all_logs(runs[0].run_id)
    return runs[0] if any(f"REWRITE_DATA_FILES on {table.qualified}" in (e.user_message or "") for e in logs) else None


def test_run_killed_mid_rewrite_leaves_the_table_intact_and_is_detected(tmp_path, dagster_home, monkeypatch):
    config = write_settings(tmp_path, POLICIES)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    table = TableName.parse("sales.orders", "demo")
    create_fragmented_table(settings, table, FILES, ROWS_PER_FILE)
    refresh_table_cache(settings)
    before = load_table(open_catalog(settings.catalog), table)
    content_before = checksum(before.scan().to_arrow())
    files_before = files_under(before)

    process = subprocess.Popen([CLI, "trigger", table.qualified, "--operation", "REWRITE_DATA_FILES"],
                               env={**os.environ}, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        with DagsterInstance.get() as instance:
            run = wait_for(lambda: started_procedure(instance, table), "the run to start the procedure", every_s=0.2)
        # Spark is writing the compacted file: the kill lands between the first write and the commit.
        wait_for(lambda: [f for f in files_under(before) - files_before if f.endswith(".parquet")],
                 "Spark to start writing the rewritten data")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the CLI process and its Spark JVM
        process.wait()

    after_kill = load_table(open_catalog(settings.catalog), table)
    written = {f for f in files_under(after_kill) - files_before if f.endswith(".parquet")}
    assert written, "the kill did not land during the rewrite"
    # The killed rewrite committed nothing: same snapshot, same rows, same content.
    assert after_kill.current_snapshot().snapshot_id == before.current_snapshot().snapshot_id
    assert checksum(after_kill.scan().to_arrow()) == content_before

    with DagsterInstance.get() as instance:
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.STARTED  # nobody marked it yet
        assert is_lock_free(table_lock_name(table))  # the OS freed the dead holder's locks
        assert is_lock_free(run_lock_name(run.run_id))
        later = datetime.now(timezone.utc) + timedelta(minutes=3)  # past the start-up grace
        result = run_tick(settings, instance, Coordination(settings.coordination_url), later, "test", None)
        assert result.dead_runs == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
        failure = instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
        assert any("the run's process is gone" in (e.message or "") for e in failure)
        history = Coordination(settings.coordination_url).all_history()[(table.qualified, Operation.REWRITE_DATA_FILES)]
        assert history.consecutive_failures == 1 and history.last_success_start is None

        summary = trigger_table(settings, table.qualified, ["REWRITE_DATA_FILES"], reason="after the kill",
                                actor="test", trigger_id="retry", instance=instance)
        assert summary.succeeded, summary.lines()
    after = load_table(open_catalog(settings.catalog), table)
    assert table_counts(after)["data_files"] < FILES
    assert checksum(after.scan().to_arrow()) == content_before
