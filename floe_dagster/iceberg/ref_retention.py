"""A policy's ``refRetention`` applied to a table: each matching branch's and tag's ``max-ref-age-ms``
set, so that the ``expire_snapshots`` call that follows removes the refs older than that (core/facts/refs.py).

Through PyIceberg's ``ManageSnapshots`` rather than Spark SQL's ``ALTER TABLE ... REPLACE BRANCH b AS
OF VERSION <id> RETAIN n DAYS``, for two reasons. Each ref is set again at the snapshot it points to
now, and the commit asserts that it still does (``AssertRefSnapshotId``): a writer that moves the
branch meanwhile makes this commit fail, where Iceberg's Java transaction would retry and re-apply
``AS OF VERSION <old id>``, moving the branch back. And the age is kept to the millisecond, where
Spark's ``RETAIN`` takes whole minutes, hours or days. ``main`` is never touched, and a ref that
already has the rule's age is left alone (no commit when nothing differs).

Where the table's ``history.expire.max-ref-age-ms`` is below floe's minimum, the refs it would decide
get the minimum as their own age in the same commit (core/facts/expiry_defaults.py). The ages floe set are
recorded in the table property ``floe.ref-retention.set-ages`` in the same commit (one transaction: the
refs' updates, each with its assertion, and the property), and taken back when their rule goes
(core/facts/ref_retention_changes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import ManageSnapshots

from floe_dagster.core.facts.expiry_defaults import ref_age_default
from floe_dagster.core.facts.ref_retention_changes import (
    SET_AGES_PROPERTY, RefRetentionChange, format_set_ages, parse_set_ages, recorded_ages, retention_changes,
)
from floe_dagster.core.facts.refs import MAIN, TAG, RefRetentionRule
from floe_dagster.core.basics.tables import TableName
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

    def changes_json(self) -> list[dict[str, object]]:
        return [change._asdict() for change in self.changes]


def apply_ref_retention(table: Table, name: TableName, rules: Sequence[RefRetentionRule]) -> RefRetentionApplied:
    """Set each matching ref's ``max-ref-age-ms``, and take back the ages floe set whose rule went, in one
    commit with the record of what floe set (``table`` is updated in place). A ref that moved or went
    away meanwhile fails the commit: CommitConflict (retried later, as any lost race)."""
    current = {ref_name: (_ref_type(ref), ref.snapshot_id, ref.max_ref_age_ms)
               for ref_name, ref in table.metadata.refs.items() if ref_name != MAIN}
    set_ages = parse_set_ages(table.properties.get(SET_AGES_PROPERTY))
    # The table's history.expire.max-ref-age-ms, which Iceberg's expiry reads itself, bounded: below floe's
    # minimum the refs it would decide get the minimum as their own age (core/facts/expiry_defaults.py).
    guard = ref_age_default(table.properties).guard_ms
    changes = tuple(retention_changes(current, rules, set_ages, guard))
    record = format_set_ages(recorded_ages(current, set_ages, changes))
    record_changed = record != table.properties.get(SET_AGES_PROPERTY)
    if changes or record_changed:
        transaction = table.transaction()
        if changes:
            manage = ManageSnapshots(transaction)
            for change in changes:
                _set_age(manage, table, change)
            manage.commit()  # staged in the transaction, each ref asserted at the snapshot it points to
        if record_changed:
            if record is not None:
                transaction.set_properties({SET_AGES_PROPERTY: record})
            else:
                transaction.remove_properties(SET_AGES_PROPERTY)
        try:
            transaction.commit_transaction()
        except CommitFailedException as exc:
            refs = ", ".join(c.name for c in changes) or "(none)"
            raise CommitConflict(f"setting the refRetention max-ref-age of {refs} on '{name.qualified}' lost a "
                                 f"commit race (a ref moved meanwhile): {exc}") from exc
    return RefRetentionApplied(changes, {ref_name: kind for ref_name, (kind, _, _) in current.items()})


def _set_age(manage: ManageSnapshots, table: Table, change: RefRetentionChange) -> None:
    """The same ref at the same snapshot with the new age (None: none); a branch keeps its own snapshot retention."""
    ref = table.metadata.refs[change.name]
    if change.type == TAG:
        manage.create_tag(ref.snapshot_id, change.name, max_ref_age_ms=change.max_ref_age_ms)
    else:
        manage.create_branch(ref.snapshot_id, change.name, max_ref_age_ms=change.max_ref_age_ms,
                             max_snapshot_age_ms=ref.max_snapshot_age_ms,
                             min_snapshots_to_keep=ref.min_snapshots_to_keep)

__all__ = ["RefRetentionApplied", "apply_ref_retention"]
