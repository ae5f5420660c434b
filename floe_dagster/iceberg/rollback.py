"""Taking back a rewrite that changed the table's rows (PyIceberg), under the table lock.

The table is loaded fresh, core/rewrites/rollback.py decides from its snapshots whether only the run's own
commits lie on top of the snapshot it started from, and PyIceberg's ``ManageSnapshots`` makes that
snapshot current again. Its commit asserts that ``main`` still points where it was read
(``AssertRefSnapshotId``), so a writer that commits between the read and the rollback makes the
rollback fail rather than be dropped: Iceberg's Java ``rollback_to_snapshot`` procedure would retry
on a refreshed table and could not tell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException

from floe_dagster.core.rewrites.rollback import rollback_target
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import load_table


@dataclass(frozen=True)
class Rollback:
    """What became of the rollback: done or not, a sentence for the outcome, the current snapshot after."""

    rolled_back: bool
    detail: str
    current_snapshot_id: int | None


def roll_back_run(catalog: Catalog, table: TableName, ours: Sequence[int]) -> Rollback:
    """Make the snapshot the run started from current again, when only ``ours`` lie on top of it."""
    try:
        loaded = load_table(catalog, table)
    except Exception as exc:  # the table is left as it is; the message says so
        return Rollback(False, f"NOT rolled back: the table could not be read again ({exc})", None)
    metadata = loaded.metadata
    current = loaded.current_snapshot()
    current_id = current.snapshot_id if current is not None else None
    verdict = rollback_target(
        current_id, {s.snapshot_id: s.parent_snapshot_id for s in metadata.snapshots}, ours,
        {s.snapshot_id: s.summary.operation.value if s.summary is not None else None for s in metadata.snapshots})
    if verdict.target is None:
        return Rollback(False, f"NOT rolled back: {verdict.reason}; the table is left as it is for someone to "
                               f"check (current snapshot {current_id})", current_id)
    try:
        loaded.manage_snapshots().rollback_to_snapshot(verdict.target).commit()
    except CommitFailedException as exc:
        return Rollback(False, f"NOT rolled back: another writer committed while the rollback was made ({exc}); "
                               "the table is left as it is for someone to check", current_id)
    except Exception as exc:
        return Rollback(False, f"NOT rolled back: the rollback failed ({type(exc).__name__}: {exc}); the table is "
                               f"left as it is for someone to check (current snapshot {current_id})", current_id)
    return Rollback(True, f"rolled back: snapshot {verdict.target} is current again ({verdict.reason}; this run's "
                          f"snapshot(s) {', '.join(map(str, ours))} stay in the history until they expire)",
                    verdict.target)


__all__ = ["Rollback", "roll_back_run"]
