"""The row check after a rewrite: each snapshot the run committed must hold the same logical rows as its
parent (docs/operations.md, "Operations"), counted from Iceberg's snapshot summaries where they can
decide, else by Spark (``count``); a mismatch is RowCountMismatch naming the bad snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from floe_dagster.core.tables import TableName
from floe_dagster.errors import RowCountMismatch
from floe_dagster.iceberg.snapshot_summary import commit_rows, exact_live_rows


@dataclass(frozen=True)
class RowCheck:
    # "spark-count", "snapshot-summary", "snapshot-summary+spark-count", "not-applicable"; where the
    # metadata keeps no parent (Nessie): "commit-summary", or "parent-not-kept" (could not be checked)
    method: str
    checked_snapshots: tuple[int, ...] = ()
    rows_before: int | None = None
    rows_after: int | None = None


def check_rows(table: TableName, new: list[dict], snapshots: list[dict], table_bytes: int, max_bytes: int,
               count: Callable[[int], int]) -> RowCheck:
    """Only our ``replace`` commits are compared with their own parents, so a concurrent append (its
    own snapshot) and deletes applied during the rewrite (same logical rows) do not confuse it.
    A catalog that keeps only the current snapshot in the metadata (Nessie) leaves no parent to
    compare with: such a commit is checked against its own summary (rows removed = rows added),
    when that can decide; when it cannot (delete files), nothing is left to count and the check
    says so ("parent-not-kept") instead of passing silently. ``count(snapshot_id)``: Spark's count of
    the rows at a snapshot; tables up to ``max_bytes`` are always counted."""
    by_id = {s["snapshot_id"]: s for s in snapshots}
    replaces = [s for s in new if s["operation"] == "replace"]
    if replaces and all(s["parent_id"] not in by_id for s in replaces):
        return _check_without_parents(table, replaces)
    ours = [s for s in replaces if s["parent_id"] is not None]
    if not ours:
        return RowCheck("not-applicable")
    # Iceberg's snapshot summaries count the rows exactly when neither snapshot has delete files:
    # Spark counts wherever they cannot decide (delete files, missing or disagreeing totals), and
    # for tables up to row_count_check_max_bytes.
    method = "snapshot-summary" if table_bytes > max_bytes else "spark-count"
    first_before = last_after = None
    counted: dict[int, int] = {}  # partial progress commits a chain: each snapshot is counted once

    def counted_once(snapshot_id: int) -> int:
        if snapshot_id not in counted:
            counted[snapshot_id] = count(snapshot_id)
        return counted[snapshot_id]

    for snapshot in ours:
        parent = snapshot["parent_id"]
        after = before = None
        if method == "snapshot-summary" and parent in by_id:
            after = exact_live_rows(snapshot.get("summary"))
            before = exact_live_rows(by_id[parent].get("summary"))
        if after is None or before is None or after != before:
            # The summary cannot tell (or disagrees): count for real rather than fail on a guess.
            after, before = counted_once(snapshot["snapshot_id"]), counted_once(parent)
            if method == "snapshot-summary":
                method = "snapshot-summary+spark-count"
        if after != before:
            raise RowCountMismatch(
                f"table '{table.qualified}': snapshot {snapshot['snapshot_id']} written by this run has {after} "
                f"rows but its parent {parent} has {before}; the rewrite changed the table's contents",
                snapshot["snapshot_id"], [s["snapshot_id"] for s in ours])
        first_before = before if first_before is None else first_before
        last_after = after
    return RowCheck(method, tuple(s["snapshot_id"] for s in ours), first_before, last_after)


def _check_without_parents(table: TableName, ours: list[dict]) -> RowCheck:
    """The row check of rewrite commits whose parents the metadata does not hold (Nessie keeps only the
    current snapshot): each commit's own summary, rows removed against rows added (the rows checked are
    the sums over the commits: the rows the rewrite moved)."""
    removed_total = added_total = 0
    for snapshot in ours:
        rows = commit_rows(snapshot.get("summary"))
        if rows is None:  # delete files: only a count could tell, and the parent is gone
            return RowCheck("parent-not-kept", tuple(s["snapshot_id"] for s in ours))
        before, after = rows
        if after != before:
            raise RowCountMismatch(
                f"table '{table.qualified}': snapshot {snapshot['snapshot_id']} written by this run removed {before} "
                f"rows and added {after}; the rewrite changed the table's contents",
                snapshot["snapshot_id"], [s["snapshot_id"] for s in ours])
        removed_total, added_total = removed_total + before, added_total + after
    return RowCheck("commit-summary", tuple(s["snapshot_id"] for s in ours), removed_total, added_total)


__all__ = ["RowCheck", "check_rows"]
