"""One table's trouble stays its own ("Blast radius" in docs/security.md), through the real stack: real
Spark, the real SQLite catalog, batch runs the debt-score sensor requests, run in a real Dagster
instance. A table whose metadata is garbage, or whose catalog row points to a metadata file that is
gone, fails alone and backs off while the others are compacted; the circuit breaker stays closed and
the next tick plans as usual. A table whose Spark job fails inside a task, with "Connection refused"
in its text, fails alone the same way (not an outage). A Spark error after a commit landed (the row
check's count) is that table's failure naming the landed snapshot, and the batch goes on. A rewrite
that changed the rows is rolled back when only its own snapshots are on top, and left alone (and said
so) when a writer committed on top."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy
from dagster import AssetKey, DagsterEventType, DagsterInstance
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyspark import SparkContext
from pyspark.sql import SparkSession

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB
from floe_dagster.demo import local_path
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.scheduling.tick import CIRCUIT_PAUSE, run_tick
from floe_dagster.spark import engine as engine_module
from floe_dagster.spark.driver_restart import start_fresh_spark
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import configured
from floe_dagster_tests.reliability._support import checksum, create_fragmented_table
from floe_dagster_tests.reliability.test_killed_rewrite import wait_for
from floe_dagster_tests.reliability.test_batches import (
    POLICIES,
    RDF,
    A,
    B,
    C,
    build,
    contents,
    execute,
    failure_of,
    materialized,
    the_batch,
)
from floe_dagster_tests.reliability.test_row_check import java_list
from floe_dagster_tests.unit.test_outages import closed_port

pytestmark = pytest.mark.spark


def current_snapshot(settings, table: TableName) -> int:
    return load_table(open_catalog(settings.catalog), table).current_snapshot().snapshot_id


def break_metadata(settings, table: TableName, how: str) -> None:
    """``garbage``: the table's current metadata.json overwritten; ``missing``: its catalog row points to
    a metadata file that does not exist (a catalog that refuses the one table)."""
    catalog = open_catalog(settings.catalog)
    location = load_table(catalog, table).metadata_location
    if how == "garbage":
        local_path(location).write_bytes(b"\x00{ this is not table metadata")
        return
    with catalog.engine.begin() as connection:  # the SQL catalog's own table
        connection.execute(sqlalchemy.text(
            "UPDATE iceberg_tables SET metadata_location = :gone WHERE table_namespace = :ns AND table_name = :name"),
            {"gone": location.replace(".metadata.json", "-gone.metadata.json"), "ns": "sales", "name": table.name})


def b_failed_alone_and_backs_off(settings, instance, coordination) -> dict:
    """b's outcome is its own failure (not an outage) with one backoff step, and the circuit stays closed:
    the next tick plans, and skips b alone for its backoff. Returns b's outcome."""
    [outcome] = coordination.outcomes_for(B.qualified)
    assert (outcome["succeeded"], outcome["failure_kind"]) == (False, None)
    assert coordination.all_history()[(B.qualified, RDF)].consecutive_failures == 1
    now = datetime.now(timezone.utc)
    assert coordination.outage_circuit(now, CIRCUIT_PAUSE) is None
    tick = run_tick(settings, instance, coordination, now, "sensor:test", None)
    assert tick.skipped_tick is None
    b = next(d for d in tick.plan.decisions if d.table == B and d.operation == RDF)
    assert b.decision == "skip" and b.reasons[0].startswith("failure_backoff: 1 consecutive failure(s)")
    return outcome


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    # Tables this small are counted with Spark after a rewrite: the row check's count is a real Spark read.
    return configured(tmp_path, monkeypatch, POLICIES,
                      "batching: {max-tables: 20}\nmaintenance: {row-count-check-max-bytes: 1000000000}\n")


@pytest.mark.parametrize("how, when", [("garbage", "tick"), ("missing", "tick"),
                                       ("garbage", "run")])
def test_a_table_whose_metadata_cannot_be_read_fails_alone_and_backs_off(lake, how, when):
    """Broken before the sensor's tick, b has no health, so it ranks last in the batch; broken between the
    tick and the run, it ranks with the others (by name: a, b, c) and c runs after it failed."""
    settings = lake
    defs = build(settings, {A: (6, 10), B: (6, 10), C: (6, 10)})
    before = contents(settings, A, C)
    snapshots_before = {t: current_snapshot(settings, t) for t in (A, C)}
    if when == "tick":  # broken before the tick
        break_metadata(settings, B, how)
    coordination = Coordination(settings.coordination_url)
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)  # the sensor's tick: not catalog_unavailable, b is in the batch
        assert sorted(".".join(k.path) for k in request.asset_selection) == [A.qualified, B.qualified, C.qualified]
        if when == "run":  # broken between the tick and the run
            break_metadata(settings, B, how)
        result = execute(defs, instance, request)
        assert not result.success
        assert materialized(result) == {A.qualified, C.qualified}
        message = failure_of(result)
        assert "failed on 1 of 3 table(s)" in message and f"could not load '{B.qualified}'" in message
        tags = instance.get_run_by_id(result.run_id).tags
        assert T.FAILURE_KIND not in tags  # the table's own failure, not an outage
        # The others are compacted into new snapshots, their rows unchanged.
        catalog = open_catalog(settings.catalog)
        for table in (A, C):
            assert table_counts(load_table(catalog, table))["data_files"] == 1
            assert current_snapshot(settings, table) != snapshots_before[table]
        assert contents(settings, A, C) == before
        # No circuit breaker: nothing was an outage, so the next tick plans, and b backs off alone.
        b_failed_alone_and_backs_off(settings, instance, coordination)


def count_fails_for(table: TableName):
    """The row check's count, as the engine has it, except that for ``table`` it is a real Spark query
    that fails (an AnalysisException), after the rewrite's CALL committed."""
    real = IcebergSparkEngine._count

    def count(self, spark, counted, snapshot_id):
        if counted == table:
            vanished = TableName(counted.catalog, counted.namespace, f"{counted.name}_vanished")
            spark.sql(f"SELECT count(*) FROM {spark_table_reference(vanished)}").collect()
        return real(self, spark, counted, snapshot_id)

    return count


def test_a_spark_error_after_the_commit_is_that_tables_failure_naming_the_snapshot(lake, monkeypatch):
    settings = lake
    defs = build(settings, {A: (6, 10), B: (6, 10), C: (6, 10)})
    before = contents(settings, A, B, C)
    monkeypatch.setattr(IcebergSparkEngine, "_count", count_fails_for(B))
    coordination = Coordination(settings.coordination_url)
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)
        result = execute(defs, instance, request)
        assert not result.success
        assert materialized(result) == {A.qualified, C.qualified}  # the next table in the batch still ran
        landed = current_snapshot(settings, B)
        catalog = open_catalog(settings.catalog)
        assert table_counts(load_table(catalog, B))["data_files"] == 1  # b's compaction did land
        [outcome] = coordination.outcomes_for(B.qualified)
        assert (outcome["succeeded"], outcome["failure_kind"], outcome["snapshot_after"]) == (False, None, landed)
        assert f"committed snapshot(s) {landed}; then the row check failed" in outcome["message"]
        assert "TABLE_OR_VIEW_NOT_FOUND" in outcome["message"]
        assert f"committed snapshot(s) {landed}" in failure_of(result)
        # b's asset says the commit landed, on its operation partition.
        [shown] = [o for o in _observations_of(instance, result.run_id, B)]
        assert shown["outcome"] == "failed" and shown["commit_landed"] is True
        assert shown["committed_snapshots"] == [str(landed)]
        assert coordination.all_history()[(B.qualified, RDF)].consecutive_failures == 1
        tick = run_tick(settings, instance, coordination, datetime.now(timezone.utc), "sensor:test", None)
        b = next(d for d in tick.plan.decisions if d.table == B and d.operation == RDF)
        assert b.reasons[0].startswith("failure_backoff")  # backoff applies: the next tick does not admit it
    assert contents(settings, A, B, C) == before


def _observations_of(instance, run_id: str, table: TableName) -> list[dict]:
    """The observations the run made on the table's operation partition (not its health reports)."""
    key = AssetKey(["demo", *table.namespace, table.name])
    found = []
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_OBSERVATION):
        observation = record.dagster_event.event_specific_data.asset_observation
        if observation.asset_key == key and observation.partition == RDF.value:
            found.append({k: getattr(v, "value", getattr(v, "data", v)) for k, v in observation.metadata.items()})
    return found


# -- Spark's own process killed during one table's rewrite -----------------------------------------------


def spark_pid() -> int | None:
    """The pid of the Spark JVM PySpark started in this process (its spark-submit execs the JVM), if any."""
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    return process.pid if process is not None else None


def holds_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # the process or one of its descriptors went away meanwhile
        return False


@contextmanager
def spark_killed_while_reading(settings, table: TableName) -> Iterator[dict]:
    """SIGKILL Spark's JVM while a task of ``table``'s job is reading one of its data files, as a task out of
    memory ends a local-mode Spark. Hadoop's local file system opens a data file's checksum file
    (``.<name>.crc``) beside it and reads its header first: here that is a FIFO whose only writer (this
    test) never writes, so the task waits in that read, inside the job, until a watcher thread sees the
    JVM hold the FIFO open and kills it. The data file itself is never touched; the FIFO goes after."""
    victim = local_path(load_table(open_catalog(settings.catalog), table).inspect.files().to_pydict()["file_path"][0])
    fifo = victim.parent / f".{victim.name}.crc"
    assert not fifo.exists()
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # a reader's open returns at once; its read waits for bytes never written
    killed: dict = {}
    done = threading.Event()

    def kill_when_reading() -> None:
        def reading() -> int | str | None:  # the JVM's pid once it holds the FIFO open; "done": the run ended
            if done.is_set():
                return "done"
            pid = spark_pid()
            return pid if pid is not None and holds_open(pid, fifo) else None

        found = wait_for(reading, "Spark's JVM to read the table's data file", timeout_s=300, every_s=0.02)
        if found != "done":
            os.kill(found, signal.SIGKILL)
            killed["pid"] = found

    watcher = threading.Thread(target=kill_when_reading, daemon=True)
    watcher.start()
    try:
        yield killed
    finally:
        done.set()
        watcher.join(timeout=30)
        os.close(writer)
        fifo.unlink()
        if killed and spark_pid() == killed["pid"]:  # nothing started a fresh Spark: later tests need one
            start_fresh_spark(IcebergSparkEngine.from_settings(settings))


def test_spark_killed_during_one_tables_rewrite_is_that_tables_failure_and_the_batch_goes_on(lake):
    """The issue's attack: in one batch, Spark's own process (local mode's JVM, where the tasks run) dies
    while b's rewrite is under way, as it does when one of b's tasks runs out of memory. Spark answered as
    b's work began and a fresh Spark starts and answers: b's failure, with backoff, and c is compacted in
    the same run on the fresh Spark. Without the rule it is an outage: the batch stops at b, c is not
    maintained, b gets no backoff and launches pause."""
    settings = lake
    defs = build(settings, {A: (6, 10), B: (6, 10), C: (6, 10)})
    before = contents(settings, A, B, C)
    b_snapshot = current_snapshot(settings, B)
    coordination = Coordination(settings.coordination_url)
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)
        assert sorted(".".join(k.path) for k in request.asset_selection) == [A.qualified, B.qualified, C.qualified]
        with spark_killed_while_reading(settings, B) as killed:
            result = execute(defs, instance, request)
        assert killed, "Spark's JVM was never seen reading b's data file"
        assert not result.success
        assert materialized(result) == {A.qualified, C.qualified}  # c too: the batch went on after b
        tags = instance.get_run_by_id(result.run_id).tags
        assert T.FAILURE_KIND not in tags and tags[T.SPARK_RESTARTED] == B.qualified
        message = b_failed_alone_and_backs_off(settings, instance, coordination)["message"]
        assert "Spark's process died during this table's work" in message
        assert "a fresh Spark was started" in message and "spark.driver.memory" in message
        assert "Spark's process died during this table's work" in failure_of(result)
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)  # the killed JVM is gone (reaped), and a fresh one serves the run's last table
    assert spark_pid() not in (None, killed["pid"])
    catalog = open_catalog(settings.catalog)
    for table in (A, C):
        assert table_counts(load_table(catalog, table))["data_files"] == 1
    assert table_counts(load_table(catalog, B))["data_files"] == 6 and current_snapshot(settings, B) == b_snapshot
    assert contents(settings, A, B, C) == before  # every row of each, b's readable and unchanged


# -- a rewrite that changed the rows --------------------------------------------------------------------------

ORDERS = TableName("demo", ("sales",), "orders")


def drop_the_current_file(spark) -> None:
    """A ``replace`` commit that removes the rewrite's output file and adds nothing: the rows are gone
    (the row check must catch it), committed through Iceberg's own API in the run's Spark session."""
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ORDERS.qualified)
    files = java_list(table.currentSnapshot().addedDataFiles(table.io()))
    table.newRewrite().deleteFile(files[0]).commit()


def bad_rewrite(monkeypatch, writer_on_top: bool) -> None:
    """After the real rewrite_data_files CALL, and inside the run's own unit of work, a second replace
    drops the compacted file (as a broken rewrite would); ``writer_on_top``: then another writer appends."""
    real = engine_module.summarize_result

    def summarize(op, rows):
        spark = SparkSession.getActiveSession()
        drop_the_current_file(spark)
        if writer_on_top:
            spark.sql(f"INSERT INTO {spark_table_reference(ORDERS)} VALUES (1000, 'late', 1.0, 'eu', current_timestamp())")
        return real(op, rows)

    monkeypatch.setattr(engine_module, "summarize_result", summarize)


def run_orders(settings):
    defs = build_definitions(settings)
    with DagsterInstance.get() as instance:
        result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key=RDF.value, asset_selection=[AssetKey(["demo", "sales", "orders"])],
            raise_on_error=False)
        return result, _observations_of(instance, result.run_id, ORDERS)


@pytest.fixture
def orders(lake):
    create_fragmented_table(lake, ORDERS, files=6, rows_per_file=10)
    from floe_dagster.iceberg.table_cache import refresh_table_cache

    refresh_table_cache(lake)
    return lake


def test_a_rewrite_that_changed_the_rows_is_rolled_back_when_only_its_snapshots_are_on_top(orders, monkeypatch):
    settings = orders
    start = current_snapshot(settings, ORDERS)
    rows = checksum(load_table(open_catalog(settings.catalog), ORDERS).scan().to_arrow())
    bad_rewrite(monkeypatch, writer_on_top=False)
    result, shown = run_orders(settings)
    assert not result.success
    table = load_table(open_catalog(settings.catalog), ORDERS)
    assert table.current_snapshot().snapshot_id == start  # the snapshot before the run is current again
    assert checksum(table.scan().to_arrow()) == rows  # every row is back
    assert len(table.metadata.snapshots) == 3  # the run's two snapshots stay in the history until expired
    [outcome] = Coordination(settings.coordination_url).outcomes_for(ORDERS.qualified)
    assert not outcome["succeeded"] and outcome["failure_kind"] is None and outcome["snapshot_after"] == start
    assert "the rewrite changed the table's contents" in outcome["message"]
    assert f"rolled back: snapshot {start} is current again" in outcome["message"]
    assert f"rolled back: snapshot {start} is current again" in failure_of(result)
    [observation] = shown
    assert observation["outcome"] == "rolled_back" and observation["rolled_back"] is True
    assert observation["snapshot_id"] == str(start)


def test_a_rewrite_that_changed_the_rows_is_left_alone_when_a_writer_committed_on_top(orders, monkeypatch):
    settings = orders
    start = current_snapshot(settings, ORDERS)
    bad_rewrite(monkeypatch, writer_on_top=True)
    result, shown = run_orders(settings)
    assert not result.success
    table = load_table(open_catalog(settings.catalog), ORDERS)
    current = table.current_snapshot()
    assert current.snapshot_id != start and current.summary.operation.value == "append"  # the writer's, kept
    assert table.scan().to_arrow().num_rows == 1  # the broken rewrite's loss stays, for someone to check
    [outcome] = Coordination(settings.coordination_url).outcomes_for(ORDERS.qualified)
    assert f"NOT rolled back: another writer committed snapshot {current.snapshot_id} (append) on top" \
        in outcome["message"]
    assert outcome["snapshot_after"] == current.snapshot_id
    [observation] = shown
    assert observation["outcome"] == "failed" and observation["rolled_back"] is False


# -- partial progress: a file group that failed for its own reason -------------------------------------------


def test_a_group_that_failed_for_its_own_reason_is_a_failure_though_a_writer_committed(orders, monkeypatch):
    """Merge-on-read writers: floe rewrites with partial progress. One data file is gone from storage,
    so the table's one file group fails to rewrite (Iceberg counts it in failed_data_files_count and
    gives no reason), while another writer appends. Nothing of the run landed, but nothing shows a lost
    race either: the table's failure, with backoff, not a conflict."""
    settings = orders
    table = load_table(open_catalog(settings.catalog), ORDERS)
    table.transaction().set_properties({"write.delete.mode": "merge-on-read"}).commit_transaction()
    victim = table.inspect.files().to_pydict()["file_path"][0]
    local_path(victim).unlink()
    real = engine_module.summarize_result

    def writer_appends(op, rows):
        SparkSession.getActiveSession().sql(
            f"INSERT INTO {spark_table_reference(ORDERS)} VALUES (1000, 'late', 1.0, 'eu', current_timestamp())")
        return real(op, rows)

    monkeypatch.setattr(engine_module, "summarize_result", writer_appends)
    result, shown = run_orders(settings)
    assert not result.success and not shown  # no conflict observation
    [outcome] = Coordination(settings.coordination_url).outcomes_for(ORDERS.qualified)
    assert (outcome["succeeded"], outcome["failure_kind"]) == (False, None)
    assert "rewrote nothing" in outcome["message"] and "failed to rewrite" in outcome["message"]
    history = Coordination(settings.coordination_url).all_history()[(ORDERS.qualified, RDF)]
    assert (history.consecutive_failures, history.consecutive_conflicts) == (1, 0)


# -- a failure inside one table's Spark job, whose text is full of connection words ----------------------


def add_a_file_nobody_serves(settings, table: TableName, port: int) -> str:
    """One more data file in the table's metadata, at an HTTP address where nothing listens (as its owner
    may list a file on a host that is gone): Spark's job fails in the task that reads it, with Java's
    "Connection refused". The catalog, the table's metadata and manifests, and Spark all answer."""
    loaded = load_table(open_catalog(settings.catalog), table)
    model = next(iter(loaded.scan().plan_files())).file
    address = f"http://127.0.0.1:{port}/lake/{table.name}/part-gone.parquet"
    gone = DataFile.from_args(content=DataFileContent.DATA, file_path=address, file_format=FileFormat.PARQUET,
                              partition=model.partition, record_count=model.record_count,
                              file_size_in_bytes=model.file_size_in_bytes, _table_format_version=loaded.format_version)
    with loaded.transaction() as transaction:
        with transaction.update_snapshot().fast_append() as append:
            append.append_data_file(gone)
    return address


def test_a_failure_inside_one_tables_spark_job_is_its_own_though_its_text_says_connection_refused(lake):
    """The issue's scenario: one table's job fails with connection words in its text (an executor that
    dies makes the next stage's fetch fail with "Failed to connect to"; here a task cannot reach the
    one file its table lists on a host that is gone). It is that table's failure, with backoff: the
    batch goes on, the other tables are maintained in the same run, and launches do not pause."""
    settings = lake
    for table in (A, B, C):
        create_fragmented_table(settings, table, files=6, rows_per_file=10)
    before = contents(settings, A, C)
    add_a_file_nobody_serves(settings, B, closed_port())
    defs = build(settings, {})
    coordination = Coordination(settings.coordination_url)
    with DagsterInstance.get() as instance:
        request = the_batch(defs, instance)
        assert sorted(".".join(k.path) for k in request.asset_selection) == [A.qualified, B.qualified, C.qualified]
        result = execute(defs, instance, request)
        assert not result.success
        assert materialized(result) == {A.qualified, C.qualified}  # maintained in the same run
        assert T.FAILURE_KIND not in instance.get_run_by_id(result.run_id).tags  # not an outage
        message = b_failed_alone_and_backs_off(settings, instance, coordination)["message"]
        assert "Job aborted due to stage failure" in message and "part-gone.parquet" in message
    catalog = open_catalog(settings.catalog)
    for table in (A, C):
        assert table_counts(load_table(catalog, table))["data_files"] == 1
    assert contents(settings, A, C) == before

