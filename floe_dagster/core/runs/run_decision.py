"""Why a run maintains a table: one record from admission to materialization.

The planner's :class:`~floe_dagster.core.plan.planner.Decision` says everything it weighed; once a
launcher admits it, what the run needs of it is a :class:`RunDecision`. The tick writes it to the
trigger ledger, the ledger reads back as :class:`LedgerRow`\\ s, the run finds each table's row again
(or, for a manual trigger, a backfill or Dagit, reads the same record from its tags), and both the
run's tags (core/runs/run_tags.py) and the table's materialization metadata are built from it.

Keys: an *item key* names one admitted (table, operation, slot, attempt), the ledger's unique key;
a *batch key* names the batch (one run over several tables) and is the run's Dagster run key. A
batch of one has its item's key as its batch key.

A shadow policy's decision (``mode: shadow``) is recorded too, once per (table, operation, slot): its
row has ``shadow`` set, the attempt :data:`SHADOW_ATTEMPT` and an item key ending in ``|shadow``, and
no run ever carries its keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.partition_scope import PartitionSelection
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import Writer, key_text


class AdmittedDecision(Protocol):
    """What a :class:`RunDecision` keeps of the planner's ``Decision`` (core/plan/decisions.py, which imports
    :func:`item_key` from here, so this module names what it reads instead of importing it back)."""

    table: TableName
    operation: Operation
    trigger: str | None
    debt_score: float
    slot: str | None
    attempt: int
    max_runtime_s: float | None
    scope: PartitionSelection | None
    shadow: bool
    upstream: Writer | None

    @property
    def reasons(self) -> tuple[str, ...]: ...

    @property
    def estimated_bytes(self) -> int: ...


# A shadow row's attempt: never a live attempt number (0, 1, …), so the ledger's unique (table,
# operation, slot, attempt) holds one shadow row per slot, and a live admission of the same slot
# (the policy switched to live) is never refused as its duplicate.
SHADOW_ATTEMPT = -1
SHADOW_PREFIX = "would run: "  # how a shadow decision's reason begins


def shadow_summary(reason: str, at: datetime) -> str:
    """A shadow decision as ``plan``, ``explain`` and Dagit say it: ``shadow: would run at <time>
    because <reason>``."""
    return f"shadow: would run at {at.isoformat()} because {reason.removeprefix(SHADOW_PREFIX)}"


def item_key(table_qualified: str, operation: Operation, slot: str | None, attempt: int) -> str:
    """The key of one admitted (table, operation, slot, attempt): the ledger's unique key, and the
    run key of a batch of one, so Dagster never creates the same run twice either. A shadow
    decision's (attempt :data:`SHADOW_ATTEMPT`) ends in ``|shadow``."""
    if attempt == SHADOW_ATTEMPT:
        return f"{table_qualified}|{operation.value}|{slot}|shadow"
    return f"{table_qualified}|{operation.value}|{slot}|attempt-{attempt}"


@dataclass(frozen=True)
class LedgerRow:
    """One row of the trigger ledger, as read back (times in UTC)."""

    id: int
    table_name: str
    operation: Operation
    slot: str
    attempt: int
    item_key: str  # column run_key
    trigger: str
    reason: str
    debt_score: float
    estimated_bytes: int
    admitted_at: datetime
    launcher: str
    run_id: str | None
    batch_key: str  # rows written before batches existed have none: their item key
    scope: PartitionSelection | None = None  # a partition-scoped rewrite: its partitions and backlog
    shadow: bool = False  # a shadow policy's decision: recorded, never run
    upstream: Writer | None = None  # after_write: the writer's materialization that made it due


@dataclass(frozen=True)
class RunDecision:
    """Why a run maintains one table: the planner's decision as admitted (and as the ledger keeps it),
    or what a manual trigger, a backfill or Dagit said."""

    table: TableName
    operation: Operation
    trigger: str
    reason: str
    debt_score: float = 0.0
    slot: str = ""
    attempt: int = 0
    estimated_bytes: int = 0
    max_runtime_s: float | None = None  # the planner's (the timeout, cut to the window's end)
    batch_key: str | None = None  # the batch it was admitted in; None: a batch of its own
    ledger_row: int | None = None  # its ledger row, once read back
    scope: PartitionSelection | None = None  # a partition-scoped rewrite: its partitions and backlog
    shadow: bool = False  # a shadow policy's decision (attempt SHADOW_ATTEMPT): the ledger records it, nothing runs
    upstream: Writer | None = None  # after_write: the writer's materialization that made it due

    @property
    def item_key(self) -> str:
        return item_key(self.table.qualified, self.operation, self.slot, self.attempt)

    @classmethod
    def admitted(cls, decision: AdmittedDecision, batch_key: str | None = None) -> "RunDecision":
        """What the ledger and the run's tags keep of an admitted planner decision."""
        return cls(decision.table, decision.operation, decision.trigger or "", "; ".join(decision.reasons),
                   decision.debt_score, decision.slot or "", decision.attempt, decision.estimated_bytes,
                   decision.max_runtime_s, batch_key, scope=decision.scope, shadow=decision.shadow,
                   upstream=decision.upstream)

    @classmethod
    def from_ledger(cls, table: TableName, row: LedgerRow) -> "RunDecision":
        return cls(table, row.operation, row.trigger, row.reason, row.debt_score, row.slot, row.attempt,
                   row.estimated_bytes, batch_key=row.batch_key, ledger_row=row.id, scope=row.scope,
                   upstream=row.upstream)

    def metadata(self) -> dict[str, object]:
        """The materialization metadata of why the table ran (numbers as numbers; no row: null)."""
        data = {"trigger": self.trigger, "reason": self.reason, "debt_score": self.debt_score, "slot": self.slot,
                "attempt": self.attempt, "estimated_bytes": self.estimated_bytes, "ledger_row": self.ledger_row}
        if self.upstream is not None:  # the write that made it due: the audit trail's link to it
            data.update(upstream_asset=key_text(self.upstream.asset_key), upstream_run=self.upstream.last_run_id,
                        upstream_storage_id=self.upstream.last_storage_id)
        if self.scope is not None:
            data.update(scoped_partitions=len(self.scope.partitions), backlog_partitions=self.scope.backlog_partitions,
                        backlog_bytes=self.scope.backlog_bytes, scope_cap_bytes=self.scope.cap,
                        scope_oversized=self.scope.oversized)
        return data
