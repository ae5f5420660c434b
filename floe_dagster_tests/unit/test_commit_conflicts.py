"""Lost commit races told apart from the table's own failures, from the error texts Iceberg raises."""

from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.runs.commit_conflicts import (
    CONFLICT_RETRY_MAX, CONFLICT_RETRY_MIN, REWRITE_WRAPPER, commit_race, conflict_retry_delay,
)

PY4J_REWRITE = (
    "An error occurred while calling o61.sql.\n"
    f": java.lang.RuntimeException: {REWRITE_WRAPPER} All completed work will be cleaned up.\n"
    "\tat org.apache.iceberg.spark.actions.RewriteDataFilesSparkAction.doExecute(...)\n"
    "Caused by: org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new position delete "
    "for replaced data file: GenericDataFile{content=data, file_path=s3://b/t/data/00001.parquet}\n"
)


@pytest.mark.parametrize("text, cause_word", [
    (PY4J_REWRITE, "row-level"),
    # Spark Connect passes only the top message: the wrapper alone still says it was a race.
    (f"java.lang.RuntimeException: {REWRITE_WRAPPER} All completed work will be cleaned up.", "conflicted"),
    ("org.apache.iceberg.exceptions.ValidationException: Missing required files to delete: s3://b/t/1.parquet",
     "removed or replaced"),
    ("ValidationException: Deleted manifest file:/w/t/metadata/a-m0.avro could not be found in the latest "
     "snapshot 123", "manifests"),
    ("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit db.t: metadata location "
     "file:/a.json has changed from file:/b.json", "metadata moved"),
    ("CommitFailedException: Commit failed: Requirement failed: branch main has changed: expected id 1 != 2",
     "metadata moved"),
])
def test_lost_races_are_recognised_with_their_cause(text, cause_word):
    race = commit_race(text)
    assert race is not None
    assert cause_word in race.cause
    assert "\n" not in race.evidence and race.evidence
    assert race.describe("snapshot 7 (overwrite)").startswith("lost a commit race: ")
    assert "the commit that won: snapshot 7 (overwrite)" in race.describe("snapshot 7 (overwrite)")


@pytest.mark.parametrize("text", [
    None, "",
    "org.apache.spark.SparkException: Job aborted due to stage failure: FileNotFoundException: s3://b/t/1.parquet",
    "AnalysisException: Table or view not found: demo.db.t",
    # The commit may have landed: not a race to retry quietly, a failure to look at.
    "org.apache.iceberg.exceptions.CommitStateUnknownException: Commit failed: timeout\nCannot determine whether "
    "the commit was successful or not, the underlying data files may or may not be needed.",
])
def test_other_failures_are_not_races(text):
    assert commit_race(text) is None


def test_the_evidence_is_the_matching_line_and_is_bounded():
    race = commit_race("first line\nMissing required files to delete: " + "x" * 1000 + "\nlast line")
    assert race.evidence.startswith("Missing required files to delete: ")
    assert len(race.evidence) <= 300


def test_the_retry_delay_is_jittered_within_bounds_and_deterministic():
    delays = {conflict_retry_delay("c.ns.t", "rewrite_data_files", streak) for streak in range(1, 200)}
    assert all(CONFLICT_RETRY_MIN <= d <= CONFLICT_RETRY_MAX for d in delays)
    assert len(delays) > 100  # spread, not one fixed delay a periodic writer could always beat
    assert max(delays) - min(delays) > timedelta(minutes=8)
    assert conflict_retry_delay("c.ns.t", "rewrite_data_files", 3) == conflict_retry_delay("c.ns.t", "rewrite_data_files", 3)
    assert conflict_retry_delay("c.ns.t", "rewrite_data_files", 3) != conflict_retry_delay("c.ns.u", "rewrite_data_files", 3)


def _outcome(minute: int, succeeded: bool, kind: str | None = None):
    from floe_dagster.core.runs.history import Outcome
    from floe_dagster.core.operations import Operation

    at = datetime(2026, 11, 24, 12, minute, tzinfo=timezone.utc)
    return Outcome(run_id=f"r{minute}", table_name="c.ns.t", operation=Operation.REWRITE_DATA_FILES, started_at=at,
                   finished_at=at + timedelta(seconds=30), succeeded=succeeded, trigger="interval",
                   failure_kind=kind, changed=succeeded)


def test_conflicts_fold_apart_from_failures():
    from floe_dagster.core.runs.history import CONFLICT, OperationHistory, fold_outcome

    state = OperationHistory()
    state = fold_outcome(state, _outcome(0, False))  # a real failure
    for minute in (10, 20, 30):
        state = fold_outcome(state, _outcome(minute, False, CONFLICT))
    assert state.consecutive_failures == 1 and state.failures == 1  # conflicts never count as failures
    assert state.consecutive_conflicts == 3 and state.runs == 4
    assert state.last_conflict_at == datetime(2026, 11, 24, 12, 30, 30, tzinfo=timezone.utc)
    assert state.last_run_succeeded is False and state.last_success_start is None  # the slot is not used
    state = fold_outcome(state, _outcome(40, True))
    assert state.consecutive_conflicts == 0 and state.consecutive_failures == 0
    assert state.last_success_start == datetime(2026, 11, 24, 12, 40, tzinfo=timezone.utc)
    state = fold_outcome(state, _outcome(50, False, CONFLICT))
    state = fold_outcome(state, _outcome(55, False))
    assert state.consecutive_conflicts == 0 and state.consecutive_failures == 1  # "in a row" means in a row


# -- losing fewer races, and what a partial-progress rewrite landed -----------------------------------------

from floe_dagster.core.runs.commit_conflicts import RewriteProgress, race_options  # noqa: E402

MOR = {"write.delete.mode": "merge-on-read"}


def test_partial_progress_by_default_only_for_merge_on_read_writers_and_never_against_the_policy():
    assert race_options({}, MOR) == {"partial-progress.enabled": True}
    assert race_options({}, {"write.merge.mode": "MERGE-ON-READ"}) == {"partial-progress.enabled": True}
    assert race_options({}, {"write.delete.mode": "copy-on-write"}) == {}
    assert race_options({}, {}) == {}
    assert race_options({"partial-progress.enabled": False}, MOR) == {}


def test_a_rewrite_whose_every_commit_lost_is_a_conflict():
    progress = RewriteProgress(True, commits=0, concurrent_commits=3, failed_data_files=0, groups_planned=4,
                               groups_left=4, files_left=20)
    assert progress.outcome == "conflict" and progress.commits_lost == 4
    assert "4 commit(s) lost" in progress.describe()


def test_some_commits_landed_is_a_partial_success_that_says_what_was_lost():
    progress = RewriteProgress(True, commits=3, concurrent_commits=2, failed_data_files=0, groups_planned=4,
                               groups_left=1, files_left=5)
    assert progress.outcome == "partial"
    assert progress.metadata() | {} == {
        "outcome": "partial", "partial_progress": True, "commits": 3, "commits_lost": 1, "concurrent_commits": 2,
        "failed_data_files_count": 0, "file_groups_planned": 4, "file_groups_left": 1, "file_groups_rewritten": 3,
        "data_files_left": 5}


def test_commits_batch_groups_beyond_max_commits():
    # 30 groups over 10 commits: 3 groups a commit, so 4 groups left are 2 lost commits.
    progress = RewriteProgress(True, commits=8, concurrent_commits=1, failed_data_files=0, groups_planned=30,
                               groups_left=4)
    assert progress.commits_lost == 2


def test_groups_left_without_another_writer_are_no_race():
    # Nothing else committed: a group left is the estimate's miss, not a lost race.
    progress = RewriteProgress(True, commits=0, concurrent_commits=0, failed_data_files=0, groups_planned=2,
                               groups_left=2)
    assert progress.outcome == "succeeded" and progress.commits_lost == 0


def test_a_group_that_failed_for_its_own_reason_is_no_race_because_a_writer_committed_meanwhile():
    # Iceberg's result gives no reason for a failed group: without evidence in an error's text, a
    # writer committing meanwhile does not make it a lost race.
    progress = RewriteProgress(True, commits=0, concurrent_commits=1, failed_data_files=6, groups_planned=2,
                               groups_left=2, files_left=6)
    assert progress.outcome == "failed" and progress.commits_lost == 0
    assert "6 data file(s) failed to rewrite" in progress.describe() and "Failure during rewrite group" in \
        progress.describe()
    # Beside groups that landed, the failed ones are reported and left for the next run.
    assert RewriteProgress(True, commits=1, concurrent_commits=1, failed_data_files=6, groups_planned=3,
                           groups_left=2, files_left=6).outcome == "succeeded"
    # Without a concurrent writer too.
    assert RewriteProgress(True, commits=0, concurrent_commits=0, failed_data_files=6).outcome == "failed"


def test_groups_left_beyond_the_failed_ones_are_still_lost_races():
    # 12 files left, 6 of them in the failed group: the other group's commit was lost to the writer.
    progress = RewriteProgress(True, commits=1, concurrent_commits=1, failed_data_files=6, groups_planned=4,
                               groups_left=2, files_left=12)
    assert progress.outcome == "partial" and progress.commits_lost == 2


# -- a long streak: the writer that won, and the health issue ---------------------------------------------


def test_the_winning_writers_operation_is_read_from_the_conflicts_message():
    from floe_dagster.core.runs.commit_conflicts import winning_operation

    race = commit_race(PY4J_REWRITE)
    assert winning_operation(race.describe("snapshot 7 (delete) at 2026-11-24T12:00:00+00:00, and 2 more")) == "delete"
    assert winning_operation("lost a commit race: 1 commit(s) lost; the commit that won: snapshot -3 (overwrite)") \
        == "overwrite"
    assert winning_operation(race.describe(None)) is None  # the winner could not be read
    assert winning_operation("the commit that won: snapshot 7 (unknown operation) at now") is None
    assert winning_operation(None) is None


def test_the_streaks_writer_is_the_last_known_one_and_a_new_streak_forgets_it():
    from dataclasses import replace

    from floe_dagster.core.runs.history import CONFLICT, OperationHistory, fold_outcome

    state = OperationHistory()
    for minute, writer in ((0, "delete"), (10, "overwrite"), (20, None)):
        state = fold_outcome(state, replace(_outcome(minute, False, CONFLICT), conflict_writer=writer))
    assert state.consecutive_conflicts == 3 and state.last_conflict_writer == "overwrite"
    state = fold_outcome(state, _outcome(30, True))
    assert state.consecutive_conflicts == 0 and state.last_conflict_writer == "overwrite"
    state = fold_outcome(state, _outcome(40, False, CONFLICT))  # the winner unknown: not the old streak's
    assert state.consecutive_conflicts == 1 and state.last_conflict_writer is None


def test_ten_in_a_row_are_a_warning_naming_the_operation_the_streak_and_the_writer():
    from floe_dagster.core.runs.commit_conflicts import CONFLICT_STREAK_ISSUE, conflict_issues
    from floe_dagster.core.facts.health_assessment import HealthAssessment, IssueType, Severity, assess_health
    from floe_dagster.core.policies.health_record import health_record, with_history_issues
    from floe_dagster.core.runs.history import OperationHistory
    from floe_dagster.core.operations import Operation
    from floe_dagster_tests.unit.test_health import NOW, healthy

    last = datetime(2026, 6, 10, 11, tzinfo=timezone.utc)
    history = {
        ("demo.sales.orders", Operation.REWRITE_DATA_FILES): OperationHistory(
            consecutive_conflicts=CONFLICT_STREAK_ISSUE, last_conflict_at=last, last_conflict_writer="delete"),
        ("demo.sales.orders", Operation.REWRITE_MANIFESTS): OperationHistory(
            consecutive_conflicts=CONFLICT_STREAK_ISSUE - 1, last_conflict_at=last, last_conflict_writer="append"),
        ("demo.sales.other", Operation.REWRITE_DATA_FILES): OperationHistory(consecutive_conflicts=50),
    }
    [issue] = conflict_issues("demo.sales.orders", history)
    assert (issue.type, issue.severity) == (IssueType.COMMIT_CONFLICTS, Severity.WARNING)
    assert (issue.measured, issue.threshold) == (CONFLICT_STREAK_ISSUE, CONFLICT_STREAK_ISSUE)
    assert issue.message.startswith(f"REWRITE_DATA_FILES lost {CONFLICT_STREAK_ISSUE} commit races in a row "
                                    "to another writer's delete commits, the last at 2026-06-10T11:00:00+00:00")
    assert issue.to_json()["writer_operation"] == "delete" and issue.to_json()["operation"] == "REWRITE_DATA_FILES"
    [unknown] = conflict_issues("demo.sales.other", history)
    assert "another writer (its operation was not read)" in unknown.message

    # A healthy table turns warning; its debt owes nothing for it (the planner's score).
    plain = assess_health(healthy(), None, NOW)
    assert plain.status == "healthy"
    assessed = with_history_issues(plain, history)
    assert isinstance(assessed, HealthAssessment) and assessed.status == "warning"
    assert [i.type for i in assessed.issues] == [IssueType.COMMIT_CONFLICTS]
    assert with_history_issues(plain, {}) is plain
    record = health_record(assessed, None, history, NOW)
    assert record["status"] == "warning" and record["issues"][0]["type"] == "COMMIT_CONFLICTS"
    assert record["debt"] == health_record(plain, None, history, NOW)["debt"]
