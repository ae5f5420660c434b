"""What a run cost and bought (core/runs/run_figures.py): the benefit's deltas, the scan-cost proxy, the round
trips through the materialization's metadata and the outcome row, and the history read on a real SQLite
coordination database (also one created before the figure columns existed)."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.schema import FIGURE_COLUMNS
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_figures import (
    CONNECT_UNAVAILABLE,
    SPARK,
    SPARK_CONNECT,
    Benefit,
    Compute,
    TableShape,
    figures_from_json,
    figures_from_metadata,
    figures_json,
    outcome_columns,
)
from floe_dagster.reports.explain_text import format_explain_text

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
RDF = Operation.REWRITE_DATA_FILES
BEFORE = TableShape(data_files=40, delete_files=6, live_bytes=46_000, manifests=12, snapshots=12,
                    metadata_file_bytes=9_000)
AFTER = TableShape(data_files=2, delete_files=0, live_bytes=40_000, manifests=1, snapshots=13,
                   metadata_file_bytes=9_800)
COMPUTE = Compute(SPARK, wall_s=4.2, executor_cpu_s=0.61, task_s=2.05, bytes_read=3_072_612,
                  bytes_written=3_026_933, jobs=6, stages=6, tasks=6)


def test_the_scan_proxy_opens_every_live_data_and_delete_file():
    assert (BEFORE.scan_files, BEFORE.scan_bytes, BEFORE.mean_file_bytes) == (46, 46_000, 1_000)
    assert (AFTER.scan_files, AFTER.scan_bytes, AFTER.mean_file_bytes) == (2, 40_000, 20_000)
    empty = TableShape(0, 0, 0, 0, 0)
    assert empty.scan_files == 0 and empty.mean_file_bytes is None


def test_a_compaction_removes_files_and_reclaims_the_bytes_its_deletes_held():
    deltas = Benefit(BEFORE, AFTER).deltas()
    assert deltas == {"files_removed": 44, "bytes_reclaimed": 6_000, "files_deleted": 0, "data_files_removed": 38,
                      "delete_files_removed": 6, "manifests_removed": 11, "snapshots_expired": 0,
                      "scan_files_saved": 44, "scan_bytes_saved": 6_000}


def test_a_run_that_grew_the_table_buys_nothing_and_says_so_signed():
    grown = replace(AFTER, data_files=50, live_bytes=60_000)
    benefit = Benefit(BEFORE, grown)
    assert benefit.files_removed == 0 and benefit.bytes_reclaimed == 0  # never a negative benefit
    assert benefit.deltas()["scan_files_saved"] == -4 and benefit.deltas()["scan_bytes_saved"] == -14_000


def test_an_expiry_counts_snapshots_expired_and_the_files_its_procedure_deleted():
    expired = Benefit(BEFORE, replace(BEFORE, snapshots=3), files_deleted=17)
    assert expired.deltas()["snapshots_expired"] == 9 and expired.files_deleted == 17
    assert expired.files_removed == 0 and expired.bytes_reclaimed == 0  # the live table is unchanged


def test_the_metadata_keys_are_numbers_and_come_back_as_they_went():
    benefit = Benefit(BEFORE, AFTER, files_deleted=3)
    metadata = {**COMPUTE.to_metadata(), **benefit.to_metadata()}
    assert metadata["floe/compute/executor_cpu_s"] == 0.61 and metadata["floe/compute/bytes_read"] == 3_072_612
    assert metadata["floe/benefit/data_files_before"] == 40 and metadata["floe/benefit/data_files_after"] == 2
    assert metadata["floe/benefit/scan_files_before"] == 46 and metadata["floe/benefit/mean_file_bytes_after"] == 20_000
    assert metadata["floe/benefit/files_removed"] == 44 and metadata["floe/benefit/files_deleted"] == 3
    assert "floe/compute/unavailable" not in metadata  # measured: no reason to give
    assert figures_from_metadata(metadata) == (COMPUTE, benefit)


def test_spark_connect_records_a_null_with_the_reason():
    connect = Compute(SPARK_CONNECT, 3.0, unavailable=CONNECT_UNAVAILABLE)
    metadata = connect.to_metadata()
    assert metadata["floe/compute/executor_cpu_s"] is None and metadata["floe/compute/bytes_read"] is None
    assert metadata["floe/compute/unavailable"] == CONNECT_UNAVAILABLE
    assert figures_from_metadata(metadata) == (connect, None)
    assert outcome_columns(connect, None)["executor_cpu_s"] is None


def test_metadata_without_figures_has_none():
    assert figures_from_metadata({"changed": True}) == (None, None)
    assert figures_json(None, None) is None and figures_from_json(None) == (None, None)


def test_a_row_written_by_a_newer_version_reads_back_without_its_new_keys():
    data = figures_json(COMPUTE, Benefit(BEFORE, AFTER))
    data["compute"]["driver_cpu_s"] = 1.0
    data["benefit"]["before"]["new_fact"] = 5
    assert figures_from_json(data) == (COMPUTE, Benefit(BEFORE, AFTER))


def _outcome(run: str, at: datetime, ok: bool = True, compute=COMPUTE, benefit=Benefit(BEFORE, AFTER),
             operation: Operation = RDF) -> Outcome:
    return Outcome(run, "demo.t", operation, at, at + timedelta(minutes=1), ok, "interval", None if ok else "error",
                   None, True, 100, 7, compute=compute if ok else None, benefit=benefit if ok else None)


def test_the_history_read_gives_each_successful_runs_figures_newest_first(tmp_path):
    c = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    c.record_outcome(_outcome("r1", T0))
    c.record_outcome(_outcome("r2", T0 + timedelta(hours=1), ok=False))
    cheaper = replace(COMPUTE, executor_cpu_s=0.2)
    c.record_outcome(_outcome("r3", T0 + timedelta(hours=2), compute=cheaper))
    figures = c.run_figures("demo.t", RDF)
    assert [(f.run_id, f.compute_s) for f in figures] == [("r3", 0.2), ("r1", 0.61)]
    assert figures[1].benefit == Benefit(BEFORE, AFTER) and figures[1].finished_at == T0 + timedelta(minutes=1)
    assert c.run_figures("demo.t", Operation.EXPIRE_SNAPSHOTS) == [] and c.run_figures("demo.other", RDF) == []
    assert [f.run_id for f in c.run_figures("demo.t", RDF, limit=1)] == ["r3"]
    c.record_outcome(_outcome("e1", T0 + timedelta(hours=3), operation=Operation.EXPIRE_SNAPSHOTS))
    newest = c.latest_figures("demo.t")  # explain's one read: each operation's newest success with figures
    assert {op: f.run_id for op, f in newest.items()} == {RDF: "r3", Operation.EXPIRE_SNAPSHOTS: "e1"}
    assert c.latest_figures("demo.other") == {}
    row = next(r for r in c.outcomes_for("demo.t") if r["run_id"] == "r1")
    assert (row["executor_cpu_s"], row["bytes_read"], row["files_removed"], row["compute_source"]) == \
        (0.61, 3_072_612, 44, SPARK)
    failed = next(r for r in c.outcomes_for("demo.t") if r["run_id"] == "r2")
    assert failed["figures"] is None and failed["executor_cpu_s"] is None


def test_a_database_from_before_the_figures_gets_their_columns_and_keeps_its_rows(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    c = Coordination(url)
    c.record_outcome(_outcome("old", T0, compute=None, benefit=None))
    with c.engine.begin() as connection:  # as a database created before the figure columns existed
        for column in FIGURE_COLUMNS:
            connection.execute(text(f"ALTER TABLE floe_outcomes DROP COLUMN {column}"))
    reopened = Coordination(url)
    reopened.record_outcome(_outcome("new", T0 + timedelta(hours=1)))
    assert [f.run_id for f in reopened.run_figures("demo.t", RDF)] == ["new"]  # the old row has none
    assert {r["run_id"] for r in reopened.outcomes_for("demo.t")} == {"old", "new"}


def test_explain_text_names_the_last_runs_cost_and_benefit():
    report = {"table": "t", "policyName": "p", "conditionBasedTriggeringEnabled": True, "operationStatuses": {
        "REWRITE_DATA_FILES": {"shouldTrigger": False, "reasons": ["not due"], "nextEligibleTime": None,
                               "debtScore": 0.0, "debtBreakdown": {}, "metConditions": [], "unmetConditions": [],
                               "lastRun": {"figuresRunId": "r1", **figures_json(COMPUTE, Benefit(BEFORE, AFTER))}},
        "EXPIRE_SNAPSHOTS": {"shouldTrigger": False, "reasons": ["not due"], "nextEligibleTime": None,
                             "debtScore": 0.0, "debtBreakdown": {}, "metConditions": [], "unmetConditions": [],
                             "lastRun": {"figuresRunId": "r2", "benefit": None,
                                         "compute": {"executor_cpu_s": None, "wall_s": 3.0,
                                                     "unavailable": CONNECT_UNAVAILABLE}}}}}
    text_ = format_explain_text(report)
    assert ("last run r1: 0.61 executor CPU s, 2.05 task s, 4.20 s wall; 44 live file(s) and 6000 bytes fewer, "
            "0 file(s) deleted") in text_
    assert "last run r2: executor CPU unknown (Spark Connect (3.5) reports no executor CPU" in text_
