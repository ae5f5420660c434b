"""Batches: the planner's admitted decisions of one operation, grouped into runs over several tables.

Every run pays a Python process and a JVM (about 11-14 s) before its first ``CALL`` (about 0.15 s
on a tiny table), so one run maintains up to ``max-tables`` tables of one operation, Dagster's own
shape (one run materializes several table assets for one operation partition). Each table still
runs under its own lock, with its own outcome, ledger row and materialization.

A batch is filled in rank order: a decision joins the open batch of its kind (operation, and with
``group-by`` its timeout and window) while the batch has room, in tables and in estimated bytes; else
it opens a new one. So the rank order holds within a batch and across batches (a batch's first
decision ranks before the next batch's first). ``max-tables: 1`` is one table per run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from floe_dagster.core.basics.validation import setting

GROUP_BY_CHOICES = ("timeout", "window")
GIB = 1024**3


@dataclass(frozen=True)
class BatchSettings:
    """floe.yaml's ``batching`` section."""

    max_tables: int = setting(20, "tables per run (1: one table per run)", minimum=1)
    max_bytes: int = setting(10 * GIB, "the tables' estimated bytes per run (0: unlimited)")
    # ``timeout`` is the schedule's timeout, ``window`` its window, allowed days, time zone and
    # enforceWindowEnd, so a run's maximum runtime and its window are those of every table in it.
    group_by: tuple[str, ...] = setting(
        GROUP_BY_CHOICES, f"never batch tables whose schedules differ in these ({', '.join(GROUP_BY_CHOICES)})")

    def __post_init__(self) -> None:
        if self.max_tables < 1:
            raise ValueError(f"max-tables: expected a whole number ≥ 1, got {self.max_tables!r}")
        if self.max_bytes < 0:
            raise ValueError(f"max-bytes: expected a whole number ≥ 0, got {self.max_bytes!r}")
        unknown = [g for g in self.group_by if g not in GROUP_BY_CHOICES]
        if unknown:
            raise ValueError(f"group-by: {', '.join(map(repr, unknown))} is not one of {', '.join(GROUP_BY_CHOICES)}")


ONE_TABLE_PER_RUN = BatchSettings(max_tables=1)


@dataclass(frozen=True)
class RunClass:
    """What a decision's run must share with the other tables of its batch."""

    timeout: str = ""
    window: str = ""

    def key(self, group_by: tuple[str, ...]) -> tuple[str, ...]:
        # Kept on the (immutable) record by ``group_by``: one run class per schedule is offered for every
        # candidate of a tick.
        keys = self.__dict__.setdefault("_keys", {})
        found = keys.get(group_by)
        if found is None:
            found = keys[group_by] = tuple(getattr(self, name) for name in group_by)
        return found

    def batch_kind(self, operation: object, group_by: tuple[str, ...]) -> tuple:
        """The kind of batch a decision of ``operation`` with this run class joins: the operation and :meth:`key`
        (kept on the record as the key is: a tick offers up to 200,000 candidates)."""
        kept = self.__dict__
        kinds = kept.get("_kinds")
        if kinds is None:
            kinds = kept["_kinds"] = {}
        found = kinds.get((operation, group_by))
        if found is None:
            found = kinds[(operation, group_by)] = (operation, *self.key(group_by))
        return found


@dataclass
class _OpenBatch:
    number: int
    tables: int = 0
    bytes: int = 0


@dataclass
class BatchPacker:
    """Places the planner's admitted decisions, in rank order, into numbered batches (1, 2, …)."""

    settings: BatchSettings
    batches: int = 0
    _open: dict[tuple, _OpenBatch] = field(default_factory=dict)

    def _fits(self, batch: _OpenBatch | None, estimated_bytes: int) -> bool:
        if batch is None or batch.tables >= self.settings.max_tables:
            return False
        limit = self.settings.max_bytes
        return not limit or batch.bytes + estimated_bytes <= limit

    def opens_new(self, kind: tuple, estimated_bytes: int) -> bool:
        """Whether this decision would open a new batch (a new run request)."""
        return not self._fits(self._open.get(kind), estimated_bytes)

    def full(self, kind: tuple) -> bool:
        """Whether every decision of ``kind`` would open a new batch, whatever its bytes (no open batch of the
        kind has a table's room): :meth:`opens_new` without the estimate."""
        batch = self._open.get(kind)
        return batch is None or batch.tables >= self.settings.max_tables

    def all_full(self) -> bool:
        """Whether no open batch has a table's room: any further decision would open a new batch."""
        most = self.settings.max_tables
        return all(batch.tables >= most for batch in self._open.values())

    def place(self, kind: tuple, estimated_bytes: int) -> int:
        """The batch number the decision joins (opening one when the open batch is full)."""
        batch = self._open.get(kind)
        if not self._fits(batch, estimated_bytes):
            self.batches += 1
            batch = self._open[kind] = _OpenBatch(self.batches)
        batch.tables += 1
        batch.bytes += estimated_bytes
        return batch.number


def batch_key(item_keys: list[str]) -> str:
    """The key of a batch: a single item's own key, else a digest of its items' keys (the run's
    Dagster run key and the ledger's ``batch_key`` column; unique as the items' are)."""
    if len(item_keys) == 1:
        return item_keys[0]
    digest = hashlib.sha256("\n".join(sorted(item_keys)).encode()).hexdigest()[:40]
    return f"batch:{digest}"
