"""Whether a rewrite whose row check failed may be rolled back, and to which snapshot.

A rewrite that changed the table's rows (core's row check, spark/engine.py ``verify_rows``) has
already committed: its snapshot is current. The run takes it back by making the snapshot it started
from current again, but only when nothing but this run's own commits lies on top of that snapshot:
rolling back over another writer's commit would silently drop that writer's data. Then the run says
so and leaves the table for someone to look at.

Pure: the caller passes the table's snapshots as parent links (read from the metadata under the
table lock) and the snapshots the run committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping


@dataclass(frozen=True)
class RollbackVerdict:
    """``target``: the snapshot to make current again (None: no rollback, ``reason`` says why)."""

    target: int | None
    reason: str


def rollback_target(current: int | None, parents: Mapping[int, int | None], ours: Collection[int],
                    operations: Mapping[int, str | None] | None = None) -> RollbackVerdict:
    """Walk from the current snapshot down its parents while they are the run's own (``ours``): the
    first snapshot that is not is the one the run started from. A rollback is allowed only when the
    walk passed every one of the run's snapshots and that snapshot is still in the metadata.

    ``parents``: snapshot id -> parent id for every snapshot the metadata holds; ``operations``: each
    snapshot's operation (``append``, ``overwrite``...), for the message."""
    ours = set(ours)

    def named(snapshot: int) -> str:
        operation = (operations or {}).get(snapshot)
        return f"snapshot {snapshot}" + (f" ({operation})" if operation else "")

    if not ours:
        return RollbackVerdict(None, "the run committed no snapshot to take back")
    if current is None:
        return RollbackVerdict(None, "the table has no current snapshot")
    if current not in ours:
        return RollbackVerdict(None, f"another writer committed {named(current)} on top of this run's commits")
    passed: set[int] = set()
    snapshot: int | None = current
    while snapshot is not None and snapshot in ours and snapshot not in passed:
        passed.add(snapshot)
        if snapshot not in parents:
            return RollbackVerdict(None, f"{named(snapshot)} is not in the table's metadata (the catalog keeps only "
                                         "the current snapshot, or it was expired), so its parent cannot be made "
                                         "current")
        snapshot = parents[snapshot]
    if snapshot is None:
        return RollbackVerdict(None, "this run's first commit has no parent to go back to")
    if ours - passed:
        return RollbackVerdict(None, f"another writer's {named(snapshot)} lies between this run's commits")
    if snapshot not in parents:
        return RollbackVerdict(None, f"the snapshot before this run's commits ({snapshot}) is no longer in the "
                                     "table's metadata")
    return RollbackVerdict(snapshot, f"only this run's snapshot(s) lie on top of {named(snapshot)}")


__all__ = ["RollbackVerdict", "rollback_target"]
