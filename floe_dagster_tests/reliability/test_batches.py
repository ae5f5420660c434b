"""Batched runs through the real stack (real Spark, PyIceberg, Dagster instance): the debt-score
sensor admits three due tables as one run; a table that fails, or whose lock is held, fails or is
skipped alone while the others are compacted and materialized; a run killed in the middle of a batch
frees every table lock, the next tick marks its unfinished tables failed, no row is lost, and the
next batch succeeds; two launchers at once never put one table in two runs."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, build_sensor_context

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import is_lock_free, table_lock_name
from floe_dagster.coordination.runs import run_lock_name
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import checksum, create_fragmented_table
from floe_dagster_tests.reliability.test_killed_rewrite import wait_for

pytestmark = pytest.mark.spark

RDF = Operation.REWRITE_DATA_FILES
BIN = Path(sys.executable).parent
POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
"""
A, B, C = (TableName("demo", ("sales",), name) for name in ("a", "b", "c"))


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    config = write_settings(tmp_path, POLICIES, "batching: {max-tables: 20}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    return settings


def build(settings, sizes: dict[TableName, tuple[int, int]]):
    for table, (files, rows) in sizes.items():
        create_fragmented_table(settings, table, files, rows)
    refresh_table_cache(settings)
    return build_definitions(settings)


def the_batch(defs, instance):
    """The sensor's run request for the three tables' compaction."""
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        data = defs.resolve_sensor_def(SENSOR_NAME).evaluate_tick(context)
    requests = [r for r in data.run_requests or [] if r.partition_key == RDF.value]
    assert len(requests) == 1, data.skip_message
    return requests[0]


def execute(defs, instance, request):
    return defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key=request.partition_key, asset_selection=request.asset_selection,
        tags=request.tags, raise_on_error=False)


def materialized(result) -> set[str]:
    return {".".join(m.asset_key.path) for m in result.asset_materializations_for_node("iceberg_tables")}


def failure_of(result) -> str:
    steps = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    return steps[0].event_specific_data.user_failure_data.description


def contents(settings, *tables):
    catalog = open_catalog(settings.catalog)
    return {t: checksum(load_table(catalog, t).scan().to_arrow()) for t in tables}


def test_a_table_that_fails_fails_alone(lake):
    settings = lake
    defs = build(settings, {A: (6, 10), B: (6, 10), C: (6, 10)})
    before = contents(settings, A, C)
    # One of b's data files is gone from storage: its rewrite must fail.
    victim = next(iter(load_table(open_catalog(settings.catalog), B).inspect.files().to_pydict()["file_path"]))
    os.remove(victim.removeprefix("file://").removeprefix("file:"))
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)
        assert sorted(".".join(k.path) for k in request.asset_selection) == [A.qualified, B.qualified, C.qualified]
        result = execute(defs, instance, request)
    assert not result.success
    assert materialized(result) == {A.qualified, C.qualified}  # the others' materializations landed
    message = failure_of(result)
    assert "failed on 1 of 3 table(s)" in message and B.qualified in message
    assert A.qualified not in message and C.qualified not in message
    catalog = open_catalog(settings.catalog)
    assert table_counts(load_table(catalog, A))["data_files"] == 1 and table_counts(load_table(catalog, C))["data_files"] == 1
    assert contents(settings, A, C) == before  # compacted, rows unchanged
    history = Coordination(settings.coordination_url).all_history()
    assert history[(B.qualified, RDF)].consecutive_failures == 1  # its own backoff counts
    assert history[(A.qualified, RDF)].last_run_succeeded and history[(C.qualified, RDF)].last_run_succeeded
    # The HTTP API lists it under Floe's PARTIAL_FAILURE, and for the failed table.
    from floe_dagster.api.operation_reads import OperationReads as ApiService

    with DagsterInstance.get() as instance:
        service = ApiService(settings, instance)
        partial = service.operations(None, None, "PARTIAL_FAILURE", 20, 0)
        assert [item["runId"] for item in partial["operations"]] == [result.run_id]
        assert result.run_id in [item["runId"] for item in service.operations(B.qualified, None, None, 20, 0)["operations"]]
    # An operator finds the batch run from each table: `floe-dagster runs TABLE`.
    for table, status in ((A, "succeeded"), (B, "failed")):
        listed = subprocess.run([str(BIN / "floe-dagster"), "runs", table.qualified], capture_output=True, text=True,
                                check=True).stdout
        assert result.run_id in listed and "REWRITE_DATA_FILES" in listed and status in listed, listed


def test_a_table_whose_lock_is_held_is_skipped_alone_without_counting(lake):
    settings = lake
    defs = build(settings, {A: (6, 10), B: (6, 10), C: (6, 10)})
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)
        # Another run maintains b: its table lock is held (in another process, as a run would).
        holder = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\nfrom floe_dagster.coordination.locks import hold_lock\n"
             "with hold_lock(sys.argv[1], sys.argv[2]):\n    print('held', flush=True)\n    time.sleep(300)\n",
             table_lock_name(B), Coordination(settings.coordination_url).url], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            result = execute(defs, instance, request)
            # A run of b alone (Dagit's Materialize): nothing it could do, so it fails fast.
            alone = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
                instance=instance, partition_key=RDF.value, asset_selection=[AssetKey(["demo", "sales", "b"])],
                raise_on_error=False)
        finally:
            holder.kill()
            holder.wait()
        assert result.success  # skipping a busy table is not a failure of the run
        assert materialized(result) == {A.qualified, C.qualified}
        tags = instance.get_run_by_id(result.run_id).tags
        assert tags.get(T.SKIPPED) == B.qualified and T.FAILURE_KIND not in tags  # skipped, not failed
        assert not alone.success and "every table's lock is held" in failure_of(alone)
        tags = instance.get_run_by_id(alone.run_id).tags
        assert (tags.get(T.SKIPPED), tags.get(T.FAILURE_KIND)) == (B.qualified, "lock_held")
    coordination = Coordination(settings.coordination_url)
    skipped = coordination.outcomes_for(B.qualified)
    assert [(o["succeeded"], o["failure_kind"]) for o in skipped] == [(False, "lock_held")] * 2
    history = coordination.all_history()[(B.qualified, RDF)]
    assert history.consecutive_failures == 0 and history.runs == 0  # not counted against it


SCRIPT = """
import json, sys
from dagster import AssetKey, DagsterInstance
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB
from floe_dagster.settings import load_settings
request = json.loads(sys.argv[1])
job = build_definitions(load_settings()).resolve_job_def(MAINTENANCE_JOB)
with DagsterInstance.get() as instance:
    job.execute_in_process(instance=instance, partition_key=request["partition"], tags=request["tags"],
                           asset_selection=[AssetKey(path) for path in request["assets"]], raise_on_error=False)
"""


def test_a_run_killed_mid_batch_frees_its_locks_and_the_next_batch_succeeds(lake):
    settings = lake
    # a is quick; b is large, so the kill lands while Spark rewrites it; c has not started yet.
    defs = build(settings, {A: (6, 10), B: (40, 25_000), C: (6, 10)})
    before = contents(settings, A, B, C)
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)
        payload = json.dumps({"partition": request.partition_key, "tags": dict(request.tags),
                              "assets": [list(k.path) for k in request.asset_selection]})
        process = subprocess.Popen([sys.executable, "-c", SCRIPT, payload], env={**os.environ},
                                   start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def b_started():
                runs = [r for r in instance.get_runs() if r.tags.get(T.BATCH_KEY) == request.run_key]
                if not runs or runs[0].status != DagsterRunStatus.STARTED:
                    return None
                logs = [e.user_message or "" for e in instance.all_logs(runs[0].run_id)]
                return runs[0] if any(f"REWRITE_DATA_FILES on {B.qualified}" in m for m in logs) else None

            run = wait_for(b_started, "the batch to reach table b", every_s=0.2)
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the run's process and its Spark JVM
            process.wait()
        # Every lock of the batch is free again: the OS freed the dead holder's.
        assert all(is_lock_free(table_lock_name(t)) for t in (A, B, C))
        assert is_lock_free(run_lock_name(run.run_id))
        assert contents(settings, A, B, C) == before  # no row lost, none duplicated

        later = datetime.now(timezone.utc) + timedelta(minutes=3)  # past the dead-run grace
        coordination = Coordination(settings.coordination_url)
        result = run_tick(settings, instance, coordination, later, "test", None)
        assert result.dead_runs == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
        finished = {t: [(o["run_id"], o["succeeded"]) for o in coordination.outcomes_for(t.qualified)] for t in (A, B, C)}
        # Each table has one outcome of the run: its own success if it finished before the kill, else
        # the failure the tick recorded. b was being rewritten when the run died.
        assert finished[B] == [(run.run_id, False)]
        unfinished = {t for t in (A, B, C) if finished[t] == [(run.run_id, False)]}
        assert all(finished[t] == [(run.run_id, True)] for t in {A, B, C} - unfinished)

        # The unfinished tables are due again once their first backoff (5 minutes) has passed: one
        # batch, and it succeeds.
        retry = run_tick(settings, instance, coordination, later + timedelta(minutes=6), "test", None)
        assert [sorted(d.table.name for d in batch.decisions) for batch in retry.batches] == [
            sorted(t.name for t in unfinished)]
        batch = retry.batches[0]
        tags = {**dict(request.tags), T.BATCH_KEY: batch.batch_key}
        done = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key=RDF.value, tags=tags, raise_on_error=False,
            asset_selection=[AssetKey(["demo", "sales", d.table.name]) for d in batch.decisions])
        assert done.success
    assert contents(settings, A, B, C) == before
    catalog = open_catalog(settings.catalog)
    assert all(table_counts(load_table(catalog, t))["data_files"] < 6 for t in (A, B, C))


def test_two_launchers_at_once_never_put_one_table_in_two_runs(lake):
    settings = lake
    tables = [TableName("demo", ("sales",), f"t{i}") for i in range(8)]
    build(settings, {t: (3, 5) for t in tables})
    now = datetime.now(timezone.utc)
    with DagsterInstance.get() as instance:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            ticks = list(pool.map(lambda name: run_tick(settings, instance, Coordination(settings.coordination_url), now,
                                                        name, None), ["sensor:x", "sensor:y"]))
        again = run_tick(settings, instance, Coordination(settings.coordination_url), now, "sensor:z", None)
    batches = [batch for tick in (*ticks, again) for batch in tick.batches]
    in_runs = [d.table.qualified for batch in batches for d in batch.decisions]
    assert sorted(in_runs) == sorted(t.qualified for t in tables)  # each table once, in one run
    assert len(batches) == 1 and not again.admitted
    assert all(t.skipped_tick is None or t.skipped_tick.startswith("lock_held") for t in ticks)
