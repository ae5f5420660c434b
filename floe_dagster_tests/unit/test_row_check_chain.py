"""Which method decides each commit of a rewrite (core/rewrites/row_check.py): the summaries, the metadata proof,
Spark's count; and what the check records. Fakes stand for the proof and the count."""

from __future__ import annotations

import pytest

from floe_dagster.core.basics.phase_timer import PhaseTimer
from floe_dagster.core.rewrites.row_check import RowsChanged, check_commits
from floe_dagster.core.rewrites.row_proof import CannotProve, CommitProof

WITH_DELETES = {"total-records": "31", "total-delete-files": "1", "total-position-deletes": "1"}


def exact_rows(summary):  # the arithmetic of iceberg.snapshot_summary.exact_live_rows, for these summaries
    if summary is None or summary.get("total-delete-files", "0") != "0":
        return None
    return int(summary["total-records"])


def chain(*summaries):
    """Snapshot 1 (the start), then one replace commit per further summary, each the parent of the next."""
    snapshots = [{"snapshot_id": i + 1, "parent_id": i or None, "operation": "replace" if i else "append",
                  "summary": summary} for i, summary in enumerate(summaries)]
    return snapshots[1:], {s["snapshot_id"]: s for s in snapshots}


class Fakes:
    def __init__(self, rows: dict[int, int], proofs: dict[int, tuple[int, int]] | None = None,
                 cannot: str | None = None):
        self.rows, self.proofs, self.cannot = rows, proofs or {}, cannot
        self.counted: list[int] = []
        self.proved: list[int] = []

    def count(self, snapshot_id):
        self.counted.append(snapshot_id)
        return self.rows[snapshot_id]

    def prove(self, parent_id, snapshot_id):
        self.proved.append(snapshot_id)
        if self.cannot:
            raise CannotProve(self.cannot)
        before, after = self.proofs[snapshot_id]
        return CommitProof(snapshot_id, parent_id, 3, 0, before, after)


def run(ours, by_id, fakes, **options):
    return check_commits(ours, by_id, exact_rows=exact_rows, count=fakes.count, prove=fakes.prove, **options)


def test_summaries_that_decide_need_neither_proof_nor_count():
    plain = {"total-records": "30"}
    fakes = Fakes({})
    check = run(*chain(plain, plain, plain), fakes)
    assert (check.method, check.checked_snapshots, check.rows_before, check.rows_after) == (
        "snapshot-summary", (2, 3), 30, 30)
    assert fakes.proved == fakes.counted == []


def test_with_delete_files_the_proof_decides_without_spark():
    fakes = Fakes({}, proofs={2: (10, 10), 3: (12, 12)})
    check = run(*chain(WITH_DELETES, WITH_DELETES, WITH_DELETES), fakes)
    assert (check.method, check.rows_before, check.rows_after, check.fallback) == (
        "snapshot-summary+metadata-proof", 22, 22, None)  # the touched files' rows, summed over the commits
    assert fakes.proved == [2, 3] and fakes.counted == []


def test_a_proof_that_cannot_decide_hands_the_chain_to_spark_counting_each_snapshot_once():
    fakes = Fakes({1: 30, 2: 30, 3: 30, 4: 30}, cannot="equality delete files (eq.parquet): ...")
    check = run(*chain(WITH_DELETES, WITH_DELETES, WITH_DELETES, WITH_DELETES), fakes)
    assert (check.method, check.rows_before, check.rows_after) == ("snapshot-summary+spark-count", 30, 30)
    assert check.fallback.startswith("equality delete files")
    assert fakes.proved == [2]  # not tried again on the next commits
    assert sorted(fakes.counted) == [1, 2, 3, 4]


def test_a_proof_that_fails_to_read_leaves_the_check_to_spark():
    fakes = Fakes({1: 30, 2: 30})
    fakes.proofs = None  # the fake's lookup fails as a read would
    check = run(*chain(WITH_DELETES, WITH_DELETES), fakes)
    assert check.method == "snapshot-summary+spark-count" and check.fallback.startswith("the metadata proof failed")


def test_a_change_the_proof_finds_is_confirmed_by_spark_with_whole_table_figures():
    fakes = Fakes({1: 29, 2: 30}, proofs={2: (9, 10)})
    with pytest.raises(RowsChanged) as failed:
        run(*chain(WITH_DELETES, WITH_DELETES), fakes)
    changed = failed.value
    assert (changed.snapshot_id, changed.parent_id, changed.rows_before, changed.rows_after, changed.ours) == (
        2, 1, 29, 30, (2,))
    assert changed.message("demo.sales.orders").startswith(
        "table 'demo.sales.orders': snapshot 2 written by this run has 30 rows but its parent 1 has 29; ")
    assert "the 3 data file(s) snapshot 2 touched hold 10 live rows, 9 in its parent 1" in changed.message("t")


def test_where_the_proof_and_spark_disagree_spark_decides_and_the_check_says_so():
    fakes = Fakes({1: 30, 2: 30}, proofs={2: (9, 10)})
    check = run(*chain(WITH_DELETES, WITH_DELETES), fakes)
    assert check.method == "snapshot-summary+metadata-proof+spark-count"
    assert check.fallback == "the metadata proof disagreed with Spark's count on snapshot 2"


def test_a_small_table_is_always_counted_as_configured():
    plain = {"total-records": "30"}
    fakes = Fakes({1: 30, 2: 30})
    check = run(*chain(plain, plain), fakes, count_always=True)
    assert (check.method, fakes.proved, sorted(fakes.counted)) == ("spark-count", [], [1, 2])


def test_without_a_proof_spark_counts_as_before():
    fakes = Fakes({1: 30, 2: 30})
    check = check_commits(*chain(WITH_DELETES, WITH_DELETES), exact_rows=exact_rows, count=fakes.count)
    assert check.method == "snapshot-summary+spark-count" and check.fallback is None


def test_exact_summaries_that_disagree_are_proved_and_counted_before_failing():
    """Summaries that disagree (30 -> 20) fail the run only once Spark's count agrees with the proof."""
    fakes = Fakes({1: 30, 2: 20}, proofs={2: (10, 0)})
    with pytest.raises(RowsChanged) as failed:
        run(*chain({"total-records": "30"}, {"total-records": "20"}), fakes)
    assert "has 20 rows but its parent 1 has 30" in failed.value.message("t")
    assert fakes.proved == [2] and sorted(fakes.counted) == [1, 2]


def test_the_phase_timer_adds_each_lap_to_its_phase():
    ticks = iter([0.0, 1.0, 4.0, 4.5, 6.0])
    timer = PhaseTimer(lambda: next(ticks))
    assert timer.lap("session") == 1.0
    timer.lap("call")
    timer.lap("row_check")
    timer.lap("call")
    assert timer.seconds == {"session": 1.0, "call": 4.5, "row_check": 0.5} and timer.total == 6.0
