"""The quiet period (a schedule's ``quietFor`` and ``maxQuietWait``): run an operation only once the
table has had no commit from another writer for ``quietFor``, and anyway once it has waited
``maxQuietWait`` past the moment it first became due, so a table that is never quiet is still
maintained (docs/automation.md, "Quiet period").

- **Another writer's commit**: a snapshot whose operation is not ``replace``: ``append``,
  ``overwrite``, ``delete`` (or a snapshot without a summary). floe's own commits are all ``replace``
  (rewrite data files, rewrite manifests, rewrite position delete files; expire snapshots and orphan
  cleanup commit no snapshot), and a ``replace`` leaves the table's rows as they were, whoever wrote
  it. The health collector keeps the newest one's time and operation
  (``TableMetrics.newest_foreign_commit_ms``, from the metadata file: the summary tier).
- **When it first became due** (:func:`due_since`): a cron rule's slot; an interval rule's last
  successful start + interval; a condition-only rule's last successful start (what Floe's
  critical-pipeline delay measures from too). Never succeeded: the table's oldest snapshot, since the
  table has wanted maintenance since it had data. Time spent behind other gates (a closed window,
  backoff) counts: the wait is from when the rule made it due, not from when the quiet gate first
  held it.
- **Without health** (no metrics): whether a writer is active is unknown, so the table counts as not
  quiet until it is forced; never succeeded and without health, how long it has waited cannot be told
  and it is admitted (forced), so the gate never holds a table forever.

Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from floe_dagster.core.basics.durations import format_iso_duration, format_wait
from floe_dagster.core.basics.localtime import UTC, as_utc
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.schedules.schedule_due import Due

DEFAULT_MAX_QUIET_WAIT = timedelta(days=1)
# The snapshot operation of floe's own commits; every other operation is another writer's.
OWN_OPERATION = "replace"


@dataclass(frozen=True)
class QuietPeriod:
    quiet_for: timedelta
    max_wait: timedelta = DEFAULT_MAX_QUIET_WAIT

    def to_json(self) -> dict[str, str]:
        return {"quietFor": format_iso_duration(self.quiet_for), "maxQuietWait": format_iso_duration(self.max_wait)}


@dataclass(frozen=True)
class QuietVerdict:
    """The quiet gate's verdict for one (table, operation) at ``now``: ``passed`` (quiet, or ``forced``
    after ``maxQuietWait``), else held until ``next_eligible`` (the earlier of ``quiet_at`` and
    ``forced_at``)."""

    passed: bool
    forced: bool
    detail: str
    period: QuietPeriod
    now: datetime
    last_foreign_commit: datetime | None  # None: no other writer's snapshot in the metadata (or no health)
    last_foreign_operation: str | None
    health_known: bool
    quiet_at: datetime | None  # when the table is (was) quiet; None: unknown (no health)
    due_since: datetime | None  # when it first became due; None: unknown
    forced_at: datetime | None  # due_since + maxQuietWait

    @property
    def next_eligible(self) -> datetime | None:
        if self.passed:
            return self.now
        return min(t for t in (self.quiet_at, self.forced_at) if t is not None)

    def to_json(self) -> dict[str, object]:
        """For ``explain`` and the trigger status: the period, the last foreign commit, and how long until
        quiet and until forced (seconds; 0 once reached, null when unknown)."""
        def iso(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        def wait(moment: datetime | None) -> float | None:
            return max(0.0, (moment - self.now).total_seconds()) if moment is not None else None

        return {
            **self.period.to_json(),
            "quiet": self.passed and not self.forced,
            "forced": self.forced,
            "lastForeignCommit": iso(self.last_foreign_commit),
            "lastForeignOperation": self.last_foreign_operation,
            "healthKnown": self.health_known,
            "quietAt": iso(self.quiet_at),
            "secondsUntilQuiet": wait(self.quiet_at),
            "dueSince": iso(self.due_since),
            "forcedAt": iso(self.forced_at),
            "secondsUntilForced": wait(self.forced_at),
            "detail": self.detail,
        }


def _from_ms(moment_ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(moment_ms / 1000, tz=UTC) if moment_ms is not None else None


def due_since(due: Due, metrics: TableMetrics | None) -> datetime | None:
    """When the work first became due (the module's rules); None when that cannot be told."""
    # cron: the slot; interval: last success + interval; condition-only (no slot): the last success.
    since = due.slot if due.slot is not None else due.last_success_start
    if since is None and metrics is not None:
        since = _from_ms(metrics.oldest_snapshot_ms)
    return since


def quiet_verdict(period: QuietPeriod, metrics: TableMetrics | None, since: datetime | None,
                  now: datetime) -> QuietVerdict:
    """Whether the table is quiet at ``now``, else whether it has waited long enough to be forced."""
    now = as_utc(now)
    rule = f"quietFor {format_iso_duration(period.quiet_for)}"
    limit = format_iso_duration(period.max_wait)
    last = _from_ms(metrics.newest_foreign_commit_ms) if metrics is not None else None
    operation = metrics.newest_foreign_commit_operation if metrics is not None else None
    quiet_at = (last + period.quiet_for if last is not None else now) if metrics is not None else None
    forced_at = since + period.max_wait if since is not None else None
    verdict = dict(period=period, now=now, last_foreign_commit=last, last_foreign_operation=operation,
                   health_known=metrics is not None, quiet_at=quiet_at, due_since=since, forced_at=forced_at)
    if last is not None:
        commit = f"last commit by another writer ({operation}) at {last.isoformat()}"
    elif metrics is not None:
        commit = "no commit by another writer among the table's snapshots"
    else:
        commit = "no health collected yet, so the last commit by another writer is unknown"

    if quiet_at is not None and now >= quiet_at:
        ago = f", {format_wait(now - last)} ago" if last is not None else ""
        return QuietVerdict(True, False, f"quiet: {commit}{ago} ({rule})", **verdict)
    if forced_at is None:  # never succeeded and no health: how long it has waited cannot be told
        return QuietVerdict(True, True, f"forced after {limit}: never quiet; {commit}, and it never ran, so how long "
                                        f"it has waited cannot be told ({rule})", **verdict)
    due = f"due since {since.isoformat()}"
    if now >= forced_at:
        return QuietVerdict(True, True, f"forced after {limit}: never quiet; {due}, {commit} ({rule})", **verdict)
    head = f"quiet in {format_wait(quiet_at - now)}: " if quiet_at is not None else "quiet unknown: "
    return QuietVerdict(False, False, f"{head}{commit} ({rule}); forced in {format_wait(forced_at - now)} at "
                                      f"{forced_at.isoformat()} (maxQuietWait {limit}, {due})", **verdict)


__all__ = ["QuietPeriod", "QuietVerdict", "quiet_verdict", "due_since", "DEFAULT_MAX_QUIET_WAIT", "OWN_OPERATION"]
