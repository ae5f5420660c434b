"""Lost commit races: recognising them in an engine's error text, and when to try again.

A maintenance operation that loses its commit to another writer (a CDC job's merge-on-read DELETE,
UPDATE or MERGE, an append, another compaction) did nothing wrong and changed nothing: Iceberg
validated the commit against the newer snapshots and refused it, or the catalog's pointer moved under
it until the retries ran out. Such a run ends as ``conflict``, not ``failure``: it never counts toward
the failure backoff, and the next attempt waits a short, jittered delay instead (docs/automation.md,
"Lost commit races").

Pure: the engine passes the error's text (Py4J's includes the Java cause chain, Spark Connect's only
the top message), so the rules read message prefixes that Iceberg 1.10 and 1.11 raise, for every
catalog floe supports. ``CommitStateUnknownException`` is deliberately not a conflict: the commit may
have landed, so the run is a failure that someone must look at.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Mapping

from floe_dagster.core.facts.health_assessment import HealthIssue, IssueType, Severity
from floe_dagster.core.runs.history import CONFLICT, CONFLICT_STREAK, OperationHistory
from floe_dagster.core.operations import Operation

# The rewrite actions wrap the validation error when partial progress is off.
REWRITE_WRAPPER = "Cannot commit rewrite because of a ValidationException or CommitFailedException"

# (what the other writer did, pattern); the first that matches names the race.
_RACES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((what, re.compile(pattern)) for what, pattern in (
    ("a concurrent commit removed or replaced files this rewrite read",
     r"Missing required files to delete:"),
    ("a concurrent row-level DELETE, UPDATE or MERGE added deletes to a file this rewrite replaced",
     r"Cannot commit, found new (?:position )?delete for replaced data file"),
    ("a concurrent commit rewrote the manifests this operation replaced",
     r"Deleted manifest .* could not be found in the latest snapshot"),
    ("a concurrent commit added deletes to a rewritten file",
     r"Found concurrently added DV for|Found new conflicting delete files"),
    ("the table's metadata moved under this commit until the catalog's retries ran out",
     r"CommitFailedException:|Commit failed: |metadata location .* has changed from|stale table metadata"
     r"|has been modified concurrently|Requirement failed: (?:branch|tag) .* has changed"
     r"|detected concurrent update|Version \d+ already exists"),
    ("a concurrent commit conflicted with this rewrite", re.escape(REWRITE_WRAPPER)),
))
_UNKNOWN_OUTCOME = re.compile(r"CommitStateUnknownException|Cannot determine whether the commit was successful")


@dataclass(frozen=True)
class CommitRace:
    """A lost race: what the other writer did (a sentence) and the line of the error that says so."""

    cause: str
    evidence: str

    def describe(self, concurrent: str | None = None) -> str:
        """One sentence for Dagit, ``explain`` and the API; ``concurrent`` names the commit that won
        (for example ``snapshot 123 (overwrite) at 2026-11-24T12:00:00Z``), when it could be read."""
        winner = f"; {WINNER_PREFIX}{concurrent}" if concurrent else ""
        return f"lost a commit race: {self.cause}{winner} ({self.evidence})"


# How a conflict's message names the commit that won (CommitRace.describe, the rewrite's partial
# progress): ``the commit that won: snapshot 123 (overwrite) at ...``.
WINNER_PREFIX = "the commit that won: "
_WINNER = re.compile(re.escape(WINNER_PREFIX) + r"snapshot -?\d+ \(([A-Za-z_-]{1,32})\)")


def winning_operation(message: str | None) -> str | None:
    """The snapshot operation (``overwrite``, ``delete``, ``append``...) of the commit a conflict's
    message names as the winner; None when it names none (the winner could not be read)."""
    match = _WINNER.search(message or "")
    if match is None or match.group(1) == "unknown":
        return None
    return match.group(1).lower()


def commit_race(error_text: str | None) -> CommitRace | None:
    """The lost race an engine's error text reports, or None for any other failure."""
    if not error_text or _UNKNOWN_OUTCOME.search(error_text):
        return None
    for cause, pattern in _RACES:
        match = pattern.search(error_text)
        if match:
            return CommitRace(cause, _line_around(error_text, match.start()))
    return None


def _line_around(text: str, position: int, limit: int = 300) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    line = text[start:end if end >= 0 else len(text)].strip()
    return line if len(line) <= limit else line[:limit - 1] + "…"


# A conflict's retry: soon, but not in lockstep with the writer that won (a CDC job commits on a
# fixed cadence, so a fixed delay could lose every time).
CONFLICT_RETRY_MIN = timedelta(minutes=5)
CONFLICT_RETRY_MAX = timedelta(minutes=15)
# This many conflicts in a row become a health issue (the table needs a quiet period), and from then
# on each conflict counts as a failure too, so the retries back off (core/runs/history.py).
CONFLICT_STREAK_ISSUE = CONFLICT_STREAK


def conflict_issues(qualified_table: str, history: Mapping[tuple[str, Operation], OperationHistory] | None
                    ) -> tuple[HealthIssue, ...]:
    """A WARNING ``COMMIT_CONFLICTS`` issue for each operation of the table that lost at least
    :data:`CONFLICT_STREAK_ISSUE` commit races in a row, naming the operation, the streak and the
    snapshot operation of the writer that won, so that a quiet period can be configured for it."""
    issues = []
    for (table, op), past in sorted((history or {}).items(), key=lambda item: (item[0][0], item[0][1].order)):
        if table != qualified_table or past.consecutive_conflicts < CONFLICT_STREAK_ISSUE:
            continue
        writer = past.last_conflict_writer
        by = f"another writer's {writer} commits" if writer else "another writer (its operation was not read)"
        last = f", the last at {_iso(past.last_conflict_at)}" if past.last_conflict_at else ""
        issues.append(HealthIssue(
            IssueType.COMMIT_CONFLICTS, Severity.WARNING,
            f"{op.value} lost {past.consecutive_conflicts} commit races in a row to {by}{last}: give its "
            f"schedule a quiet period (quietFor) so it runs between that writer's commits",
            past.consecutive_conflicts, CONFLICT_STREAK_ISSUE,
            details={"operation": op.value, "consecutive_conflicts": past.consecutive_conflicts,
                     "writer_operation": writer, "last_conflict_at": _iso(past.last_conflict_at)},
        ))
    return tuple(issues)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def conflict_retry_delay(qualified_table: str, operation: str, streak: int) -> timedelta:
    """The wait after the ``streak``-th conflict in a row: 5 to 15 minutes, spread by a hash of the
    table, operation and streak (deterministic, so every launcher and ``explain`` agree)."""
    digest = hashlib.sha256(f"{qualified_table}\x00{operation}\x00{streak}".encode()).digest()
    fraction = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF
    span = CONFLICT_RETRY_MAX - CONFLICT_RETRY_MIN
    return CONFLICT_RETRY_MIN + timedelta(seconds=round(span.total_seconds() * fraction))


# -- losing fewer races: partial progress -----------------------------------------------------------------

# Table properties that make a table's DELETE, UPDATE and MERGE write delete files (position deletes
# in format 2, deletion vectors in format 3): each such commit races every rewrite of the files it hits.
ROW_LEVEL_MODE_PROPERTIES = ("write.delete.mode", "write.update.mode", "write.merge.mode")
PARTIAL_PROGRESS = "partial-progress.enabled"


def has_row_level_writers(properties: Mapping[str, str]) -> bool:
    """Whether the table's row-level writers run merge-on-read (any of the three modes)."""
    return any(str(properties.get(name, "")).strip().lower() == "merge-on-read" for name in ROW_LEVEL_MODE_PROPERTIES)


def race_options(options: Mapping[str, object], properties: Mapping[str, str]) -> dict[str, object]:
    """Options a rewrite gets by default so it loses fewer races: ``partial-progress.enabled`` on
    tables with merge-on-read writers, unless the policy says otherwise. Each file group (a partition's
    files) then commits on its own (up to ``partial-progress.max-commits``, default 10, commits), so a
    DELETE that hits one partition costs that partition's group, not the whole run."""
    if PARTIAL_PROGRESS in options or not has_row_level_writers(properties):
        return {}
    return {PARTIAL_PROGRESS: True}


# -- what a rewrite with partial progress did -------------------------------------------------------------

SUCCEEDED = "succeeded"
PARTIAL = "partial"  # some commits landed, some were lost to other writers: a success that says so
FAILED = "failed"  # file groups failed to rewrite and nothing landed: the table's failure, with backoff


@dataclass(frozen=True)
class RewriteProgress:
    """What landed of one ``rewrite_data_files`` run. With partial progress Iceberg drops a commit that
    lost its race without a word (its groups are neither in the result nor in
    ``failed_data_files_count``), so what was lost is read from the table: the groups Iceberg's planner
    would have taken at the run's start (core/rewrites/estimates.py's rules) whose files are all still live
    (``groups_left``)."""

    partial_progress: bool
    commits: int  # our ``replace`` snapshots
    concurrent_commits: int  # other writers' snapshots that landed while the run ran
    failed_data_files: int  # the procedure's failed_data_files_count (groups whose rewrite failed)
    groups_planned: int | None = None  # None: not measured
    groups_left: int | None = None
    files_left: int | None = None
    max_commits: int = 10  # partial-progress.max-commits

    @property
    def commits_lost(self) -> int:
        """Commits that lost their race: Iceberg batches ``ceil(groups / max-commits)`` groups per
        commit, so the groups left over that size, rounded up. 0 without a concurrent writer (then a
        left group is an estimate's miss, not a race), and 0 when the files left are no more than the
        files whose rewrite failed (``failed_data_files``): those groups failed for their own reason,
        and Iceberg's result gives none, so a writer committing meanwhile is no evidence of a race."""
        if not self.concurrent_commits or not self.groups_left or not self.groups_planned:
            return 0
        if self.failed_data_files and (self.files_left is None or self.files_left <= self.failed_data_files):
            return 0
        per_commit = -(-self.groups_planned // max(1, min(self.groups_planned, self.max_commits)))
        return -(-self.groups_left // per_commit)

    @property
    def lost_something(self) -> bool:
        return self.commits_lost > 0

    @property
    def outcome(self) -> str:
        """``conflict`` when nothing of ours landed and a race took it; ``partial`` when some commits
        landed and others were lost: the run is a success (the landed groups are real progress, and the
        slot is used so the next attempt does not race the same writer at once) whose materialization
        says what was lost; ``failed`` when groups failed to rewrite (``failed_data_files_count``) and
        nothing landed: a failed group counts as a lost race only with evidence in an error's text
        (:func:`commit_race`), which Iceberg's result does not carry, so it is the table's failure;
        else ``succeeded`` (groups that failed beside ones that landed are reported, and left for the
        next run)."""
        if self.lost_something:
            return PARTIAL if self.commits > 0 else CONFLICT
        if self.failed_data_files and not self.commits:
            return FAILED
        return SUCCEEDED

    def metadata(self) -> dict[str, object]:
        found: dict[str, object] = {
            "outcome": self.outcome, "partial_progress": self.partial_progress, "commits": self.commits,
            "commits_lost": self.commits_lost, "concurrent_commits": self.concurrent_commits,
            "failed_data_files_count": self.failed_data_files,
        }
        if self.groups_planned is not None:
            found.update(file_groups_planned=self.groups_planned, file_groups_left=self.groups_left or 0,
                         file_groups_rewritten=max(0, self.groups_planned - (self.groups_left or 0)),
                         data_files_left=self.files_left or 0)
        return found

    def describe(self) -> str:
        lost = f"{self.commits_lost} commit(s) lost to concurrent writers" if self.commits_lost else \
            (f"{self.failed_data_files} data file(s) failed to rewrite (Iceberg's result gives no reason: the "
             "Spark driver's log has it, under 'Failure during rewrite group')")
        left = f" ({self.groups_left} of {self.groups_planned} file group(s) left)" if self.groups_planned else ""
        return f"{lost}{left}; {self.commits} commit(s) landed"

