"""A policy's ``refRetention`` applied to a table: each matching branch's and tag's ``max-ref-age-ms``
set, so that the ``expire_snapshots`` call that follows removes the refs older than that (core/refs.py).

Through PyIceberg's ``ManageSnapshots`` rather than Spark SQL's ``ALTER TABLE ... REPLACE BRANCH b AS
OF VERSION <id> RETAIN n DAYS``, for two reasons. Each ref is set again at the snapshot it points to
now, and the commit asserts that it still does (``AssertRefSnapshotId``): a writer that moves the
branch meanwhile makes this commit fail, where Iceberg's Java transaction would retry and re-apply
``AS OF VERSION <old id>``, moving the branch back. And the age is kept to the millisecond, where
Spark's ``RETAIN`` takes whole minutes, hours or days. ``main`` is never touched, and a ref that
already has the rule's age is left alone (no commit when nothing differs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from floe_dagster.core.refs import MAIN, TAG, RefRetentionChange, RefRetentionRule, retention_changes
from floe_dagster.core.tables import TableName
from floe_dagster.errors import CommitConflict


def _ref_type(ref: Any) -> str:
    return getattr(ref.snapshot_ref_type, "value", str(ref.snapshot_ref_type))


@dataclass(frozen=True)
class RefRetentionApplied:
    """What was set, and the refs (main aside) the table had just before the expiry: name → type."""

    changes: tuple[RefRetentionChange, ...]
    refs: dict[str, str]

    def removed(self, after: Table) -> list[dict[str, str]]:
        """The refs gone from the table after the expiry (the ones it found older than their max-ref-age)."""
        return [{"name": name, "type": kind} for name, kind in sorted(self.refs.items())
                if name not in after.metadata.refs]

    def changes_json(self) -> list[dict[str, Any]]:
        return [change._asdict() for change in self.changes]


def apply_ref_retention(table: Table, name: TableName, rules: Sequence[RefRetentionRule]) -> RefRetentionApplied:
    """Set each matching ref's ``max-ref-age-ms`` in one commit (``table`` is updated in place). A ref that
    moved or went away meanwhile fails the commit: CommitConflict (retried later, as any lost race)."""
    current = {ref_name: (_ref_type(ref), ref.snapshot_id, ref.max_ref_age_ms)
               for ref_name, ref in table.metadata.refs.items() if ref_name != MAIN}
    changes = tuple(retention_changes(current, rules))
    if changes:
        manage = table.manage_snapshots()
        for change in changes:  # the same ref at the same snapshot, with the rule's age
            ref = table.metadata.refs[change.name]
            if change.type == TAG:
                manage.create_tag(ref.snapshot_id, change.name, max_ref_age_ms=change.max_ref_age_ms)
            else:  # a branch keeps its own snapshot retention
                manage.create_branch(ref.snapshot_id, change.name, max_ref_age_ms=change.max_ref_age_ms,
                                     max_snapshot_age_ms=ref.max_snapshot_age_ms,
                                     min_snapshots_to_keep=ref.min_snapshots_to_keep)
        try:
            manage.commit()
        except CommitFailedException as exc:
            raise CommitConflict(f"setting the refRetention max-ref-age of {', '.join(c.name for c in changes)} on "
                                 f"'{name.qualified}' lost a commit race (a ref moved meanwhile): {exc}") from exc
    return RefRetentionApplied(changes, {ref_name: kind for ref_name, (kind, _, _) in current.items()})


__all__ = ["RefRetentionApplied", "apply_ref_retention"]
