"""The row check's proof from metadata against Spark's counts, on real merge-on-read tables: Spark writes
the data files and the position deletes (DELETE, UPDATE), runs the real procedures (a partial-progress
chain of commits, a position delete rewrite), and broken rewrites are committed through Iceberg's own
Java API in the same session. For every commit the proof's verdict (PyIceberg and pyarrow, no Spark)
must equal the verdict of Spark's ``count(*)`` of the commit and its parent; the engine's check
decides with the proof alone where it can and falls back to Spark's count where it cannot (equality
deletes). A rewrite that loses a row or resurrects a deleted one is caught either way."""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone

import pytest
from dagster import DagsterInstance

from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operation_kinds.rewrite_position_delete_files import RewritePositionDeleteFilesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.row_proof import CannotProve
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import local_path
from floe_dagster.errors import RowCountMismatch
from floe_dagster.iceberg.catalog import TableReads, load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.iceberg.row_proof import MetadataRowProof
from floe_dagster.launching.manual import FAILED, SUCCEEDED, trigger_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import commit_equality_delete
from floe_dagster_tests.reliability.test_row_check import java_list

pytestmark = pytest.mark.spark

PARTS = 4  # partitions; each gets FILES data files of ROWS rows
FILES, ROWS = 3, 20
CHAIN = RewriteDataFilesConfig(partial_progress_enabled=True, partial_progress_max_commits=PARTS, rewrite_all=True)


POLICY = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {partialProgressEnabled: true, rewriteAll: true}
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """One lakehouse and Spark session for the module (its runs, too: FLOE_CONFIG names its floe.yaml)."""
    config = write_settings(tmp_path_factory.mktemp("row-proof"), POLICY)
    settings = load_settings(config, environ={})
    open_catalog(settings.catalog).create_namespace("sales")
    engine = IcebergSparkEngine.from_settings(settings)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLOE_CONFIG", str(config))
        yield settings, engine
    engine.stop()


@pytest.fixture
def table(lake, request):
    """A new format 2 merge-on-read table (its name from the test's): PARTS partitions of FILES files, then
    a DELETE and an UPDATE that write position delete files (one per data file they touch)."""
    settings, engine = lake
    name = TableName(settings.catalog.name, ("sales",), re.sub(r"\W+", "_", request.node.name.removeprefix("test_")))
    ref = spark_table_reference(name)
    with engine.unit_of_work() as spark:
        spark.sql(f"CREATE TABLE {ref} (id BIGINT, part INT, v STRING) USING iceberg PARTITIONED BY (part) "
                  "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
                  "'write.update.mode'='merge-on-read', 'write.delete.granularity'='file')")
        for batch in range(FILES):
            start = batch * PARTS * ROWS
            spark.sql(f"INSERT INTO {ref} SELECT id, CAST(id % {PARTS} AS INT), 'x' "
                      f"FROM range({start}, {start + PARTS * ROWS}, 1, 1)")
        spark.sql(f"DELETE FROM {ref} WHERE id % 7 = 3")
        spark.sql(f"UPDATE {ref} SET v = 'y' WHERE id % 11 = 5")
    return name


def spark_rows(engine, name: TableName, snapshot_id: int) -> int:
    with engine.unit_of_work() as spark:
        return spark.sql(f"SELECT count(*) AS n FROM {spark_table_reference(name)} "
                         f"VERSION AS OF {snapshot_id}").collect()[0]["n"]


def verdicts(settings, engine, name: TableName, before: set[int]) -> list[tuple[bool, bool]]:
    """For each replace commit made since ``before``: (the proof holds, Spark counts the same rows)."""
    table = load_table(open_catalog(settings.catalog), name)
    proof = MetadataRowProof(lambda: table)
    found = []
    for snapshot in table.metadata.snapshots:
        if snapshot.snapshot_id in before or snapshot.summary.operation.value != "replace":
            continue
        holds = proof(snapshot.parent_snapshot_id, snapshot.snapshot_id).holds
        found.append((holds, spark_rows(engine, name, snapshot.parent_snapshot_id)
                      == spark_rows(engine, name, snapshot.snapshot_id)))
    return found


def snapshot_ids(settings, name: TableName) -> set[int]:
    return {s.snapshot_id for s in load_table(open_catalog(settings.catalog), name).metadata.snapshots}


def counting(monkeypatch) -> list[int]:
    """The snapshots Spark counts from now on (the engine's ``_count`` recorded, then run)."""
    counted: list[int] = []
    real = IcebergSparkEngine._count

    def count(self, spark, table, snapshot_id):
        counted.append(snapshot_id)
        return real(self, spark, table, snapshot_id)

    monkeypatch.setattr(IcebergSparkEngine, "_count", count)
    return counted


def maintain(settings, engine, name: TableName, op: Operation, config, monkeypatch) -> tuple:
    """The run's engine call as defs/table_run.py makes it; returns the outcome and the snapshots Spark counted."""
    counted = counting(monkeypatch)
    reads = TableReads(open_catalog(settings.catalog), name)
    outcome = engine.maintain(name, op, config, datetime.now(timezone.utc), table_bytes=10**12,
                              read_snapshots=reads.snapshots,
                              row_proof=MetadataRowProof(lambda: reads.latest))
    return outcome, counted


def test_a_partial_progress_chain_is_proved_from_metadata_as_spark_counts_it(lake, table, monkeypatch):
    settings, engine = lake
    before = snapshot_ids(settings, table)
    outcome, counted = maintain(settings, engine, table, Operation.REWRITE_DATA_FILES, CHAIN, monkeypatch)
    check = outcome.row_check
    assert check.method == "snapshot-summary+metadata-proof" and counted == []  # no Spark query but the CALL
    assert len(check.checked_snapshots) == PARTS  # one commit per partition's file group
    live = PARTS * FILES * ROWS - len([i for i in range(PARTS * FILES * ROWS) if i % 7 == 3])
    assert check.rows_before == check.rows_after == live  # every data file was touched, once
    assert verdicts(settings, engine, table, before) == [(True, True)] * PARTS
    assert outcome.call_s > 0 and outcome.phases["row_check"] < outcome.duration_s


def test_a_position_delete_rewrite_is_proved_as_spark_counts_it(lake, table, monkeypatch):
    settings, engine = lake
    before = snapshot_ids(settings, table)
    outcome, counted = maintain(settings, engine, table, Operation.REWRITE_POSITION_DELETE_FILES,
                                RewritePositionDeleteFilesConfig(rewrite_all=True), monkeypatch)
    assert outcome.row_check.method == "snapshot-summary+metadata-proof" and counted == []
    assert verdicts(settings, engine, table, before) == [(True, True)]


def test_equality_deletes_leave_the_check_to_spark(lake, table, monkeypatch):
    settings, engine = lake
    location = local_path(load_table(open_catalog(settings.catalog), table).location())
    commit_equality_delete(engine, table, location / "data" / "part=0" / "eq-deletes.parquet", [0, 4], "part=0")
    outcome, counted = maintain(settings, engine, table, Operation.REWRITE_DATA_FILES, CHAIN, monkeypatch)
    check = outcome.row_check
    assert check.method == "snapshot-summary+spark-count" and check.fallback.startswith("equality delete files")
    assert len(counted) == len(set(counted)) == len(check.checked_snapshots) + 1  # each snapshot counted once


# -- rewrites that change the rows, committed with Iceberg's API -------------------------------------------------

def tamper(spark, name: TableName, how: str, tmp_path) -> None:
    """One ``replace`` commit through Iceberg's RewriteFiles on the current snapshot, in ``spark``'s session.
    ``lose``: a data file dropped; ``copy``: a data file with a delete swapped for a byte copy under a new path;
    ``readd``: that file removed and added back in one commit (a new data sequence number: its delete stops
    applying); ``drop-delete``: a live position delete file dropped. Validating from the current snapshot,
    as a careless engine would, lets Iceberg accept each of them."""
    jvm = spark._jvm
    java = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name.qualified)
    task = next(t for t in java_list(java.newScan().planFiles()) if not t.deletes().isEmpty())
    victim, delete = task.file(), task.deletes().get(0)
    rewrite = java.newRewrite().validateFromSnapshot(java.currentSnapshot().snapshotId())
    if how == "lose":
        rewrite = rewrite.deleteFile(victim)
    elif how == "copy":
        copy = tmp_path / "copy.parquet"
        shutil.copyfile(local_path(str(victim.location())), copy)
        moved = jvm.org.apache.iceberg.DataFiles.builder(java.spec()).copy(victim).withPath(f"file://{copy}").build()
        rewrite = rewrite.deleteFile(victim).addFile(moved)
    elif how == "readd":
        rewrite = rewrite.deleteFile(victim).addFile(victim)
    else:
        rewrite = rewrite.deleteFile(delete)
    rewrite.commit()


@pytest.mark.parametrize("how", ["lose", "copy", "readd", "drop-delete"])
def test_a_rewrite_that_changes_the_rows_is_caught_by_the_proof_as_by_spark(lake, table, how, tmp_path):
    settings, engine = lake
    before = snapshot_ids(settings, table)
    with engine.unit_of_work() as spark:
        tamper(spark, table, how, tmp_path)
    assert verdicts(settings, engine, table, before) == [(False, False)]
    reads = TableReads(open_catalog(settings.catalog), table)
    snapshots = reads.snapshots()
    new = [s for s in snapshots if s["snapshot_id"] not in before]
    [commit] = new
    parent = commit["parent_id"]
    after_rows, parent_rows = spark_rows(engine, table, commit["snapshot_id"]), spark_rows(engine, table, parent)
    with engine.unit_of_work() as spark, pytest.raises(RowCountMismatch) as failed:
        engine.verify_rows(spark, table, new, snapshots, 10**12, MetadataRowProof(lambda: reads.latest))
    assert f"has {after_rows} rows but its parent {parent} has {parent_rows}" in str(failed.value)  # Spark's figures
    assert "touched hold" in str(failed.value) and failed.value.snapshot_id == commit["snapshot_id"]


def test_deletion_vectors_leave_the_check_to_spark(lake, table, monkeypatch):
    """Format 3: a DELETE writes a deletion vector, and PyIceberg 0.12 drops which data file each one names."""
    settings, engine = lake
    with engine.unit_of_work() as spark:
        spark.sql(f"ALTER TABLE {spark_table_reference(table)} SET TBLPROPERTIES ('format-version'='3')")
        spark.sql(f"DELETE FROM {spark_table_reference(table)} WHERE id % 13 = 1")
    current = load_table(open_catalog(settings.catalog), table)
    snapshot = current.current_snapshot()
    with pytest.raises(CannotProve, match="format 3"):
        MetadataRowProof(lambda: current)(snapshot.parent_snapshot_id, snapshot.snapshot_id)
    outcome, counted = maintain(settings, engine, table, Operation.REWRITE_DATA_FILES, CHAIN, monkeypatch)
    assert outcome.row_check.method == "snapshot-summary+spark-count" and "format 3" in outcome.row_check.fallback
    assert len(counted) == len(outcome.row_check.checked_snapshots) + 1


def trigger(settings, name: TableName, trigger_id: str):
    """A manual trigger of the table's REWRITE_DATA_FILES: a real Dagster run in this process (the policy's
    partial progress), its materialization and outcome recorded in the instance."""
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        summary = trigger_table(settings, name.qualified, ["REWRITE_DATA_FILES"], reason="test", actor="tester",
                                trigger_id=trigger_id, instance=instance)
    [outcome] = summary.outcomes
    return outcome


def test_a_run_records_the_proof_and_the_time_split(lake, table, dagster_home, monkeypatch):
    """Through the real stack: the run's materialization says the metadata proof decided every commit of the
    chain (no Spark count), and splits the engine's time into the CALL and the rest."""
    settings, engine = lake
    counted = counting(monkeypatch)
    outcome = trigger(settings, table, "t-proof-ok")
    assert outcome.status == SUCCEEDED, outcome.message
    metadata = outcome.metadata
    assert metadata["row_check"] == "snapshot-summary+metadata-proof" and counted == []
    assert "row_check_fallback" not in metadata and metadata["new_snapshots"] == PARTS
    phases = metadata["engine_phases"]
    assert set(phases) == {"session", "snapshots_before", "call", "snapshots_after", "row_check", "release"}
    assert metadata["call_s"] == phases["call"] > 0
    assert metadata["overhead_s"] == pytest.approx(metadata["duration_s"] - metadata["call_s"], abs=0.002)


def test_a_run_whose_rewrite_resurrected_a_row_is_rolled_back(lake, table, dagster_home, monkeypatch, tmp_path):
    """Through the real stack (a manual trigger's Dagster run): a careless commit in the run's unit of work
    swaps a file with a delete for a copy (the summaries' totals stay equal), then the real CALL commits its
    partial-progress chain. The proof finds the change in the first commit, Spark's count confirms it, and
    the run rolls the table back to where it started."""
    settings, engine = lake
    start = load_table(open_catalog(settings.catalog), table).current_snapshot().snapshot_id
    rows = spark_rows(engine, table, start)
    counted = counting(monkeypatch)
    real_call = IcebergSparkEngine._call

    def tamper_then_call(self, spark, step, job, call, snapshots_of, before):
        tamper(spark, table, "copy", tmp_path)
        return real_call(self, spark, step, job, call, snapshots_of, before)

    monkeypatch.setattr(IcebergSparkEngine, "_call", tamper_then_call)
    outcome = trigger(settings, table, "t-proof-resurrected")
    assert outcome.status == FAILED
    # Spark's whole-table count names the failure; the proof's figures for the touched files follow it, and
    # both see the rows the copy resurrected (the positions its old file's deletes named).
    found = re.search(r"has (\d+) rows but its parent (\d+) has (\d+); .*touched hold (\d+) live rows, "
                      r"(\d+) in its parent", outcome.message)
    assert found, outcome.message
    after, parent, before, proof_after, proof_before = map(int, found.groups())
    assert (parent, before) == (start, rows) and after - before == proof_after - proof_before > 0
    assert f"rolled back: snapshot {start} is current again" in outcome.message
    assert start in counted and len(counted) == len(set(counted)) == 2  # the bad commit and its parent, once
    assert load_table(open_catalog(settings.catalog), table).current_snapshot().snapshot_id == start
    assert spark_rows(engine, table, start) == rows
