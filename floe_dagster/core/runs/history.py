"""What happened before to one (table, operation): each run's outcome, and the planner's view of them
(the fold of the outcomes, which the coordination database stores per (table, operation))."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_figures import Benefit, Compute


@dataclass(frozen=True, slots=True)
class OperationHistory:
    """What the planner needs to know about past runs of one (table, operation). Slots: a tick holds one per
    (table, operation) in the coordination database, 400,000 at 50,000 tables × 8 kinds."""

    last_run_start: datetime | None = None
    last_run_succeeded: bool | None = None
    last_run_trigger: str | None = None
    last_success_start: datetime | None = None
    last_failure_at: datetime | None = None
    consecutive_failures: int = 0
    consecutive_zero_change: int = 0
    last_snapshot_after: int | None = None
    runs: int = 0
    failures: int = 0
    # Lost commit races in a row (core/runs/commit_conflicts.py): never failures, so never backoff; the
    # next attempt waits a short jittered delay after the last one.
    consecutive_conflicts: int = 0
    last_conflict_at: datetime | None = None
    # The snapshot operation of the commit that won the streak's latest race whose winner is known
    # (``overwrite``, ``delete``, ``append``...): what the health issue of a long streak names.
    last_conflict_writer: str | None = None
    # When a shadow policy's newest decision was recorded (its ledger row's admitted_at): for that
    # policy's due rules it stands in for a successful run's start (:meth:`as_shadow_sees_it`).
    last_shadow_at: datetime | None = None

    @property
    def conflicts_back_off(self) -> bool:
        """The conflict streak is long enough that each further lost race counts as a failure too."""
        return self.consecutive_conflicts >= CONFLICT_STREAK

    def as_shadow_sees_it(self) -> "OperationHistory":
        """This history for a shadow decision: the newest shadow row counts as a successful run that
        started when it was recorded, so an interval comes due one interval after it and a cron slot
        is used up. Live decisions never read it: a table switched to live still needs a real run."""
        shadow = self.last_shadow_at
        if shadow is None or (self.last_success_start is not None and self.last_success_start >= shadow):
            return self
        return replace(self, last_success_start=shadow)

    @property
    def failure_rate(self) -> float:
        """Percent of this (table, operation)'s finished runs that failed (Floe's 0..100)."""
        return 100.0 * self.failures / self.runs if self.runs else 0.0


# Failure kinds that are not the table's fault: the run could not take the table lock, or Spark or
# the catalog was down. They neither use a slot nor count toward backoff.
LOCK_HELD = "lock_held"
OUTAGE = "outage"
NOT_THE_TABLES_FAULT = (LOCK_HELD, OUTAGE)
# The commit lost a race with another writer: the run happened and changed nothing, through no
# fault of the table's; it does not use the slot and does not count toward backoff, until the streak
# is long: from the CONFLICT_STREAK-th lost race in a row on, each one also counts as a failure, so
# the retries back off as failures do (docs/security.md, "Blast radius") instead of coming every 5-15 minutes forever.
CONFLICT = "conflict"
CONFLICT_STREAK = 10


@dataclass(frozen=True)
class Outcome:
    run_id: str
    table_name: str
    operation: Operation
    started_at: datetime
    finished_at: datetime
    succeeded: bool
    trigger: str = ""
    failure_kind: str | None = None
    message: str | None = None
    changed: bool | None = None
    bytes_rewritten: int = 0
    snapshot_after: int | None = None
    # A conflict: the snapshot operation of the commit that won (core/runs/commit_conflicts.winning_operation).
    conflict_writer: str | None = None
    # What the run cost and bought (core/runs/run_figures.py): a successful run's, None otherwise.
    compute: Compute | None = None
    benefit: Benefit | None = None


def fold_outcome(state: OperationHistory, outcome: Outcome) -> OperationHistory:
    """History after one more outcome. Failures that are not the table's fault (lock held, outage)
    change nothing: they neither use a slot nor count toward backoff."""
    if not outcome.succeeded and outcome.failure_kind in NOT_THE_TABLES_FAULT:
        return state
    if not outcome.succeeded and outcome.failure_kind == CONFLICT:
        return _fold_conflict(state, outcome)
    started = naive_as_utc(outcome.started_at)
    newer = state.last_run_start is None or started >= state.last_run_start
    common = dict(
        last_run_start=started if newer else state.last_run_start,
        last_run_succeeded=outcome.succeeded if newer else state.last_run_succeeded,
        last_run_trigger=outcome.trigger if newer else state.last_run_trigger,
        runs=state.runs + 1,
    )
    if outcome.succeeded:
        return OperationHistory(
            **common,
            last_success_start=max(filter(None, (state.last_success_start, started))),
            last_failure_at=state.last_failure_at,
            consecutive_failures=0,
            consecutive_zero_change=0 if outcome.changed else state.consecutive_zero_change + 1,
            last_snapshot_after=(outcome.snapshot_after if outcome.snapshot_after is not None
                                 else state.last_snapshot_after),
            failures=state.failures,
            consecutive_conflicts=0,
            last_conflict_at=state.last_conflict_at,
            last_conflict_writer=state.last_conflict_writer,
            last_shadow_at=state.last_shadow_at,
        )
    return OperationHistory(
        **common,
        last_success_start=state.last_success_start,
        last_failure_at=naive_as_utc(outcome.finished_at),
        consecutive_failures=state.consecutive_failures + 1,
        consecutive_zero_change=state.consecutive_zero_change,  # failures are not zero-change runs
        # A run that failed after its commit landed still left that snapshot: ours, not new data.
        last_snapshot_after=outcome.snapshot_after if outcome.snapshot_after is not None else state.last_snapshot_after,
        failures=state.failures + 1,
        consecutive_conflicts=0,
        last_conflict_at=state.last_conflict_at,
        last_conflict_writer=state.last_conflict_writer,
        last_shadow_at=state.last_shadow_at,
    )


def _fold_conflict(state: OperationHistory, outcome: Outcome) -> OperationHistory:
    """A lost race is a run that happened (the execution record shows it) but neither a success nor
    a failure: the failure streak, the zero-change streak and the slot stay as they were. From the
    :data:`CONFLICT_STREAK`-th in a row on, it is a failure as well (the failure streak grows, and
    with it the backoff), and the conflict streak goes on counting."""
    started = naive_as_utc(outcome.started_at)
    newer = state.last_run_start is None or started >= state.last_run_start
    streak = state.consecutive_conflicts + 1
    if streak >= CONFLICT_STREAK:
        state = replace(state, last_failure_at=naive_as_utc(outcome.finished_at),
                        consecutive_failures=state.consecutive_failures + 1, failures=state.failures + 1)
    return replace(
        state,
        last_run_start=started if newer else state.last_run_start,
        last_run_succeeded=False if newer else state.last_run_succeeded,
        last_run_trigger=outcome.trigger if newer else state.last_run_trigger,
        runs=state.runs + 1,
        consecutive_conflicts=streak,
        last_conflict_at=naive_as_utc(outcome.finished_at),
        # A new streak forgets the last one's writer; within a streak an unknown winner keeps the known one.
        last_conflict_writer=outcome.conflict_writer or (
            state.last_conflict_writer if state.consecutive_conflicts else None),
    )
