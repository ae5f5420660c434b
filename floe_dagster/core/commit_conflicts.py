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
from datetime import timedelta

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
        winner = f"; the commit that won: {concurrent}" if concurrent else ""
        return f"lost a commit race: {self.cause}{winner} ({self.evidence})"


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
# This many conflicts in a row become a health issue: the table needs a quiet period.
CONFLICT_STREAK_ISSUE = 10


def conflict_retry_delay(qualified_table: str, operation: str, streak: int) -> timedelta:
    """The wait after the ``streak``-th conflict in a row: 5 to 15 minutes, spread by a hash of the
    table, operation and streak (deterministic, so every launcher and ``explain`` agree)."""
    digest = hashlib.sha256(f"{qualified_table}\x00{operation}\x00{streak}".encode()).digest()
    fraction = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF
    span = CONFLICT_RETRY_MAX - CONFLICT_RETRY_MIN
    return CONFLICT_RETRY_MIN + timedelta(seconds=round(span.total_seconds() * fraction))
