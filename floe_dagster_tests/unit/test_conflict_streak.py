"""A long streak of lost commit races backs off (core/runs/history.py, the planner, ``explain``): from the
CONFLICT_STREAK-th lost race in a row on, each one also counts as a failure, so the retries stop
coming every 5-15 minutes and wait as failures do. Pure: every moment is injected."""

from __future__ import annotations

from datetime import timedelta

from floe_dagster.core.runs.commit_conflicts import conflict_retry_delay
from floe_dagster.core.runs.history import CONFLICT, CONFLICT_STREAK, OperationHistory, Outcome, fold_outcome
from floe_dagster.core.plan.planner import backoff_delay
from floe_dagster.reports.explain import _conflicts
from floe_dagster_tests.unit.test_planner import NOW, RDF, A, code, decision, policies, policy, run


def lost(state: OperationHistory, at, run_id: str = "r") -> OperationHistory:
    return fold_outcome(state, Outcome(run_id, A.qualified, RDF, at - timedelta(minutes=1), at, succeeded=False,
                                       failure_kind=CONFLICT, conflict_writer="delete"))


def streak(n: int, last_at=NOW) -> OperationHistory:
    state = OperationHistory(last_success_start=NOW - timedelta(days=30), runs=1)
    for i in range(n):
        state = lost(state, last_at - timedelta(minutes=20 * (n - 1 - i)))
    return state


def test_conflicts_below_the_streak_are_no_failures():
    state = streak(CONFLICT_STREAK - 1)
    assert (state.consecutive_conflicts, state.consecutive_failures, state.failures) == (CONFLICT_STREAK - 1, 0, 0)
    assert not state.conflicts_back_off and state.last_failure_at is None


def test_from_the_streak_on_each_conflict_is_a_failure_too_and_a_success_ends_both():
    state = streak(CONFLICT_STREAK + 2)
    assert state.conflicts_back_off
    assert (state.consecutive_conflicts, state.consecutive_failures, state.failures) == (CONFLICT_STREAK + 2, 3, 3)
    assert state.last_failure_at == NOW and state.last_conflict_writer == "delete"
    success = fold_outcome(state, Outcome("ok", A.qualified, RDF, NOW, NOW + timedelta(minutes=5), succeeded=True,
                                          changed=True))
    assert (success.consecutive_conflicts, success.consecutive_failures) == (0, 0)


def test_the_planner_backs_off_a_long_streak_as_it_backs_off_failures():
    schedules = {RDF: {"interval": "PT1H"}}
    # Nine in a row: the short jittered retry, as before.
    short = streak(CONFLICT_STREAK - 1, last_at=NOW - timedelta(minutes=1))
    d = decision(run(policies(policy(schedules=schedules)), history={(A.qualified, RDF): short}), A)
    assert code(d) == "conflict_retry"
    assert d.backoff_until - short.last_conflict_at <= timedelta(minutes=15)
    # Twelve in a row: three count as failures, the failure backoff's third step (6 hours by default).
    long = streak(CONFLICT_STREAK + 2, last_at=NOW - timedelta(minutes=30))
    d = decision(run(policies(policy(schedules=schedules)), history={(A.qualified, RDF): long}), A)
    assert code(d) == "failure_backoff"
    assert f"the last {CONFLICT_STREAK + 2} runs lost their commit race" in d.reasons[0]
    assert d.backoff_until == long.last_failure_at + backoff_delay(3, 3, 6) == long.last_failure_at + timedelta(hours=6)
    # And later still it runs again.
    later = NOW + timedelta(hours=6)
    assert decision(run(policies(policy(schedules=schedules)), history={(A.qualified, RDF): long}, now=later),
                    A).decision == "run"


def test_explain_says_a_long_streak_counts_as_failures_and_when_it_may_retry():
    long = streak(CONFLICT_STREAK + 2)
    until = NOW + timedelta(hours=6)
    shown = _conflicts(A, RDF, long, backoff_until=until)
    assert shown["countsAsFailure"] is True and shown["consecutiveConflicts"] == CONFLICT_STREAK + 2
    assert shown["retryAt"] == until.isoformat()  # the backoff, later than the jittered retry
    short = streak(3)
    retry = short.last_conflict_at + conflict_retry_delay(A.qualified, RDF.value, 3)
    assert _conflicts(A, RDF, short, backoff_until=retry)["countsAsFailure"] is False


def test_a_failure_after_its_commit_landed_keeps_that_snapshot_as_ours():
    state = fold_outcome(OperationHistory(last_snapshot_after=5), Outcome(
        "r", A.qualified, RDF, NOW, NOW, succeeded=False, message="committed snapshot(s) 9; then ...", snapshot_after=9))
    assert (state.consecutive_failures, state.last_snapshot_after) == (1, 9)
    kept = fold_outcome(state, Outcome("r2", A.qualified, RDF, NOW, NOW, succeeded=False))
    assert kept.last_snapshot_after == 9
