"""The row check after a rewrite: each snapshot the run committed must hold the same logical rows as its
parent (docs/operations.md, "Operations"). Which commits are checked, and against what, is decided here;
each commit is then decided by the cheapest exact method (core/rewrites/row_check.py): Iceberg's snapshot
summaries, else the proof from metadata (``prove``: iceberg/row_proof.py), else Spark's ``count``. A
mismatch is RowCountMismatch naming the bad snapshot."""

from __future__ import annotations

from typing import Callable

from floe_dagster.core.rewrites.row_check import Prove, RowCheck, RowsChanged, check_commits
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import RowCountMismatch
from floe_dagster.iceberg.snapshot_summary import commit_rows, exact_live_rows


def check_rows(table: TableName, new: list[dict], snapshots: list[dict], table_bytes: int, max_bytes: int,
               count: Callable[[int], int], prove: Prove | None = None) -> RowCheck:
    """Only our ``replace`` commits are compared with their own parents, so a concurrent append (its
    own snapshot) and deletes applied during the rewrite (same logical rows) do not confuse it.
    A catalog that keeps only the current snapshot in the metadata (Nessie) leaves no parent to
    compare with: such a commit is checked against its own summary (rows removed = rows added),
    when that can decide; when it cannot (delete files), nothing is left to count and the check
    says so ("parent-not-kept") instead of passing silently. ``count(snapshot_id)``: Spark's count of
    the rows at a snapshot; ``prove(parent_id, snapshot_id)``: the proof from metadata (None: Spark
    counts where the summaries cannot decide); tables up to ``max_bytes`` are always counted."""
    by_id = {s["snapshot_id"]: s for s in snapshots}
    replaces = [s for s in new if s["operation"] == "replace"]
    if replaces and all(s["parent_id"] not in by_id for s in replaces):
        return _check_without_parents(table, replaces)
    ours = [s for s in replaces if s["parent_id"] is not None]
    if not ours:
        return RowCheck("not-applicable")
    try:
        return check_commits(ours, by_id, exact_rows=exact_live_rows, count=count, prove=prove,
                             count_always=table_bytes <= max_bytes)
    except RowsChanged as changed:
        raise RowCountMismatch(changed.message(table.qualified), changed.snapshot_id, changed.ours) from None


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
