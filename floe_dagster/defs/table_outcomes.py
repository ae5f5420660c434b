"""What each table of a maintenance run ended as: its outcome row, its events, the run's tags and
whether the run fails ("Blast radius" in docs/security.md: one table's trouble stays its own).

Every error inside a table's step, before or after its commit, is that table's outcome, classified
by the one rule (``errors.failure_kind``): ``lock_held`` (skipped), ``conflict`` (a lost race;
from the CONFLICT_STREAK-th in a row on it counts as a failure too), ``outage`` (nobody's fault; the
run stops there, since the other tables would fail the same way) or the table's own failure (backoff;
Spark's process dying during the table's work is one, once a fresh Spark answers, and the run's
``spark-restarted`` tag names the table: spark/driver_restart.py).
The run goes on with its next table and fails at the end, naming only the tables that failed. A
table whose commit landed before something failed says so on its asset: an observation on the
operation's partition names the snapshots that landed (and a rollback, when the row check failed).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator

from dagster import AssetExecutionContext, AssetObservation, Failure, MaterializeResult, MetadataValue

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.commit_conflicts import winning_operation
from floe_dagster.core.runs.history import CONFLICT_STREAK, Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.runs.run_figures import figures_from_metadata
from floe_dagster.defs.names import asset_key_for
from floe_dagster.errors import (
    CONFLICT,
    LOCK_HELD,
    OUTAGE,
    FailedAfterCommit,
    FloeError,
    RowCountMismatch,
    SparkProcessDied,
    failure_kind,
)
from floe_dagster.redaction import mask_text

MESSAGE_CHARS = 1000  # of an error floe-dagster did not raise itself (a Java error's text can be long)


class BatchOutcomes:
    """The outcomes of one run's tables, recorded as each finishes, and the run's verdict at the end."""

    def __init__(self, context: AssetExecutionContext, coordination: Coordination, op: Operation):
        self.context, self.coordination, self.op = context, coordination, op
        self.failures: list[str] = []
        self.skipped: list[str] = []
        self.skipped_tables: list[str] = []
        self.conflicts: list[str] = []
        self.spark_restarted: list[str] = []

    def succeeded(self, decision: RunDecision, started: datetime, result: MaterializeResult) -> None:
        numbers = result.metadata or {}
        compute, benefit = figures_from_metadata(numbers)
        self._record(decision, started, succeeded=True, changed=bool(numbers.get("changed")),
                     bytes_rewritten=int(numbers.get("bytes_rewritten", 0)),
                     snapshot_after=_snapshot_id(numbers.get("snapshot_id")), compute=compute, benefit=benefit)

    def failed(self, decision: RunDecision, started: datetime, exc: Exception) -> Iterator[AssetObservation]:
        """Record the table's failed outcome, say it in the run's log and tags, and yield what its
        asset shows (a lost race, or a commit that landed before the failure)."""
        table, run_id = decision.table, self.context.run.run_id
        kind = failure_kind(exc)
        message = _message(table.qualified, exc)
        if kind and kind not in (CONFLICT, LOCK_HELD):
            self.context.instance.add_run_tags(run_id, {T.FAILURE_KIND: kind})
        state = self._record(decision, started, succeeded=False, failure_kind=kind, message=message,
                             conflict_writer=winning_operation(message) if kind == CONFLICT else None,
                             snapshot_after=_landed_snapshot(exc))
        if kind == LOCK_HELD:  # another run maintains it: skipped, not a failure of this run
            self.context.log.warning(f"skipped {message}")
            self.skipped.append(message)
            self.skipped_tables.append(table.qualified)
            self.context.instance.add_run_tags(run_id, {T.SKIPPED: ",".join(self.skipped_tables)[:T.MAX_TABLES_CHARS]})
            return
        if kind == CONFLICT:
            self.conflicts.append(table.qualified)
            self.context.instance.add_run_tags(run_id, {T.CONFLICTS: ",".join(self.conflicts)[:T.MAX_TABLES_CHARS]})
            yield _conflict_observation(decision, message)
            if state is None or not state.conflicts_back_off:
                self.context.log.warning(f"conflict: {message}; a later tick retries it (no backoff)")
                return
            message += (f" ({state.consecutive_conflicts} lost races in a row: from the {CONFLICT_STREAK}th on, each "
                        "counts as a failure, with backoff)")
        if kind == OUTAGE:
            message += " (an outage: no backoff; launches pause until it recovers)"
        if isinstance(exc.after if isinstance(exc, FailedAfterCommit) else exc, SparkProcessDied):
            self.spark_restarted.append(table.qualified)
            self.context.instance.add_run_tags(run_id, {
                T.SPARK_RESTARTED: ",".join(self.spark_restarted)[:T.MAX_TABLES_CHARS]})
        self.context.log.error(message)
        self.failures.append(message)
        if isinstance(exc, (FailedAfterCommit, RowCountMismatch)):
            yield _landed_observation(decision, exc, message, kind)

    def finish(self, tables: int) -> None:
        """Fail the run when a table failed, or when no table could take its lock; the others'
        materializations have landed already."""
        if not self.failures and not (self.skipped and len(self.skipped) == tables):
            return
        if not self.failures:  # a run of tables all locked fails fast, as a run of one does: not their fault
            self.context.instance.add_run_tags(self.context.run.run_id, {T.FAILURE_KIND: LOCK_HELD})
        op = self.op.value
        what = f"{op} failed on {len(self.failures)} of {tables} table(s): " + " | ".join(self.failures) \
            if self.failures else f"{op}: every table's lock is held"
        if self.skipped:
            what += "; skipped (lock held): " + " | ".join(self.skipped)
        raise Failure(description=what)

    def _record(self, decision: RunDecision, started: datetime, **fields: Any):
        return self.coordination.record_outcome(Outcome(
            run_id=self.context.run.run_id, table_name=decision.table.qualified, operation=self.op,
            trigger=decision.trigger, started_at=started, finished_at=datetime.now(timezone.utc), **fields))


def _message(qualified: str, exc: Exception) -> str:
    """The failure as the outcome, the log and the run's failure say it, naming the table; masked, since
    a library's error may quote a secret (a catalog's password, a signed URL's token)."""
    text = str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {mask_text(str(exc))[:MESSAGE_CHARS]}"
    return text if qualified in text else f"{qualified}: {text}"


def _landed_snapshot(exc: Exception) -> int | None:
    """The table's snapshot after a failure whose commit had landed (for the history: ours, not new data)."""
    if isinstance(exc, FailedAfterCommit):
        return exc.snapshot_id
    if isinstance(exc, RowCountMismatch):
        return exc.current_snapshot_id
    return None


def _conflict_observation(decision: RunDecision, message: str) -> AssetObservation:
    """A lost commit race on the table's operation partition: the asset's page shows it beside the
    materializations, and no materialization claims the table was maintained."""
    return AssetObservation(asset_key=asset_key_for(decision.table), partition=decision.operation.value, metadata={
        "outcome": "conflict", "conflict": message, "writer_operation": winning_operation(message) or "",
        **decision.metadata(),
    })


def _landed_observation(decision: RunDecision, exc: FailedAfterCommit | RowCountMismatch, message: str,
                        kind: str | None) -> AssetObservation:
    """A failure after the operation's commit landed: no materialization (the run failed), but the
    asset's page says which snapshots landed, and for a row-count mismatch whether it was rolled back."""
    metadata: dict[str, Any] = {"outcome": "failed", "failure": message, "failure_kind": kind or "table",
                                **decision.metadata()}
    if isinstance(exc, FailedAfterCommit):
        metadata["committed_snapshots"] = MetadataValue.json([str(s) for s in exc.snapshot_ids])
        metadata["commit_landed"] = True
    else:
        metadata.update(outcome="rolled_back" if exc.rolled_back else "failed", rolled_back=exc.rolled_back,
                        committed_snapshots=MetadataValue.json([str(s) for s in exc.ours]),
                        bad_snapshot=MetadataValue.text(str(exc.snapshot_id or "")))
        if exc.current_snapshot_id is not None:
            metadata["snapshot_id"] = MetadataValue.text(str(exc.current_snapshot_id))
    return AssetObservation(asset_key=asset_key_for(decision.table), partition=decision.operation.value,
                            metadata=metadata)


def _snapshot_id(value: Any) -> int | None:
    text = getattr(value, "value", value)
    return int(text) if text not in (None, "") else None


__all__ = ["BatchOutcomes"]
