"""The coordination database: the trigger ledger and the per-(table, operation) history.

One database shared by every launcher and every run that maintains the same lakehouse:
``coordination.url`` in floe.yaml (PostgreSQL for several deployments), else a SQLite file beside
the Dagster instance. Reading all history is one query per tick, whatever the number of tables.

:class:`Coordination` admits into the ledger, records outcomes and folds them into the history, and
reads them back; its tables (``floe_ledger``, ``floe_outcomes``, ``floe_history``, ``floe_writers``)
are declared in coordination/schema.py, their rows read as the core's records in coordination/table_rows.py.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import and_, create_engine, func, inspect, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from floe_dagster.coordination.locks import Locks, locks_for
from floe_dagster.coordination.schema import add_missing_columns, create_tables, history, ledger, outcomes, writers
from floe_dagster.coordination.table_rows import (
    history_from_row, history_rows, ledger_row, ledger_rows_where, upstream_json,
)
from floe_dagster.core.plan.circuit import OutageCircuit
from floe_dagster.core.runs.history import OUTAGE, OperationHistory, Outcome, fold_outcome
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_decision import LedgerRow, RunDecision
from floe_dagster.coordination.run_records import by_table_operation, read_outcomes
from floe_dagster.coordination.writer_rows import record_writer_rows, writer_rows
from floe_dagster.core.runs.run_figures import RunFigures, figures_json, outcome_columns
from floe_dagster.core.schedules.writers import Writer
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.instance import default_coordination_url

# An admission whose run was never created (the daemon failed to launch it) expires after this.
ADMISSION_TTL = timedelta(minutes=10)


class Coordination:
    """The coordination database: the ledger, outcomes and history, and its locks (:attr:`locks`:
    advisory locks in PostgreSQL, file locks beside the instance otherwise, unless ``locks`` says).
    Opening it checks its tables: the code location opens it once per process, through its
    resource (coordination/resource.py)."""

    def __init__(self, url: str | None = None, locks: Locks | None = None):
        self.url = url or default_coordination_url()
        kwargs = {"connect_args": {"timeout": 30}} if self.url.startswith("sqlite") else {"pool_pre_ping": True}
        self.engine: Engine = create_engine(self.url, **kwargs)
        create_tables(self.engine)
        add_missing_columns(self.engine)
        self.locks: Locks = locks or locks_for(self.url)

    # -- ledger -------------------------------------------------------------------------------
    def admit(self, items: Iterable[RunDecision], now: datetime, launcher: str = "") -> list[RunDecision]:
        """Insert each admission; the ones another launcher already admitted are left out. A shadow
        decision's row is recorded with its history's ``last_shadow_at``, in one transaction."""
        admitted = []
        for item in items:
            try:
                with self.engine.begin() as connection:
                    connection.execute(ledger.insert().values(
                        table_name=item.table.qualified, operation=item.operation.value, slot=item.slot,
                        attempt=item.attempt, run_key=item.item_key, trigger=item.trigger, reason=item.reason[:2000],
                        debt_score=item.debt_score, estimated_bytes=item.estimated_bytes,
                        admitted_at=naive_as_utc(now), launcher=launcher, batch_key=item.batch_key or item.item_key,
                        scope=json.dumps(item.scope.to_json()) if item.scope is not None else None,
                        shadow=item.shadow, upstream=upstream_json(item.upstream),
                    ))
                    if item.shadow:
                        _record_shadow_in_history(connection, item.table.qualified, item.operation, now)
                admitted.append(item)
            except IntegrityError:
                continue
        return admitted

    def shadow_rows(self, table_name: str | None = None, limit: int = 100, offset: int = 0,
                    operation: Operation | None = None) -> tuple[int, list[LedgerRow]]:
        """The recorded shadow decisions (of one table, and one operation, when given), newest first:
        (how many, a page)."""
        where = ledger.c.shadow.is_(True)
        if table_name:
            where = and_(where, ledger.c.table_name == table_name)
        if operation is not None:
            where = and_(where, ledger.c.operation == operation.value)
        with self.engine.connect() as connection:
            total = connection.execute(select(func.count()).select_from(ledger).where(where)).scalar_one()
            newest_first = (ledger.c.admitted_at.desc(), ledger.c.id.desc())
            rows = connection.execute(select(ledger).where(where).order_by(*newest_first)
                                      .limit(limit).offset(offset)).mappings().all()
        return int(total), [ledger_row(row) for row in rows]

    def shadow_counts_since(self, since: datetime) -> dict[str, tuple[int, datetime]]:
        """Shadow decisions recorded since then by operation: (how many, the newest's admission)."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(ledger.c.operation, func.count(), func.max(ledger.c.admitted_at))
                .where(ledger.c.shadow.is_(True), ledger.c.admitted_at >= naive_as_utc(since))
                .group_by(ledger.c.operation)).all()
        return {operation: (int(n), naive_as_utc(newest)) for operation, n, newest in rows}

    def attach_run(self, batch_key: str, run_id: str) -> None:
        """The run the daemon created for a batch: every item of it (rows of older versions, without a
        batch key, by their own run key)."""
        with self.engine.begin() as connection:
            connection.execute(update(ledger).where(
                or_(ledger.c.batch_key == batch_key, and_(ledger.c.batch_key.is_(None), ledger.c.run_key == batch_key))
            ).values(run_id=run_id))

    def batch_rows(self, batch_key: str) -> dict[str, LedgerRow]:
        """The ledger rows of one batch by table: each table's own decision, for its materialization."""
        rows = self._ledger(or_(ledger.c.batch_key == batch_key,
                                and_(ledger.c.batch_key.is_(None), ledger.c.run_key == batch_key)))
        return {row.table_name: row for row in rows}

    def ledger_rows(self, table_name: str | None = None) -> list[LedgerRow]:
        return self._ledger(ledger.c.table_name == table_name if table_name else None)

    def _ledger(self, where) -> list[LedgerRow]:
        with self.engine.connect() as connection:
            return ledger_rows_where(connection, where)

    # -- outcomes and history -------------------------------------------------------------------
    def record_outcome(self, outcome: Outcome) -> OperationHistory | None:
        """Record one table's outcome of one run and fold it into the history; returns the history after
        it (None: already recorded). Recording the same (run, table) twice is a no-op, so the run and a
        tick that found it dead never count it twice."""
        try:
            with self.engine.begin() as connection:
                connection.execute(outcomes.insert().values(
                    run_id=outcome.run_id, table_name=outcome.table_name, operation=outcome.operation.value,
                    trigger=outcome.trigger, started_at=naive_as_utc(outcome.started_at),
                    finished_at=naive_as_utc(outcome.finished_at), succeeded=outcome.succeeded,
                    failure_kind=outcome.failure_kind, message=(outcome.message or "")[:2000],
                    changed=outcome.changed, bytes_rewritten=outcome.bytes_rewritten,
                    snapshot_after=outcome.snapshot_after, **_figure_values(outcome),
                ))
                key = and_(history.c.table_name == outcome.table_name, history.c.operation == outcome.operation.value)
                row = connection.execute(select(history).where(key)).mappings().first()
                state = fold_outcome(history_from_row(row) if row else OperationHistory(), outcome)
                values = {k: getattr(state, k) for k in OperationHistory.__dataclass_fields__}
                if row:
                    connection.execute(update(history).where(key).values(**values))
                else:
                    connection.execute(history.insert().values(
                        table_name=outcome.table_name, operation=outcome.operation.value, **values))
            return state
        except IntegrityError:
            return None

    def recorded_run_ids(self, run_ids: Iterable[str]) -> set[str]:
        ids = list(run_ids)
        if not ids:
            return set()
        with self.engine.connect() as connection:
            return set(connection.execute(select(outcomes.c.run_id).where(outcomes.c.run_id.in_(ids))).scalars())

    def all_history(self) -> dict[tuple[str, Operation], OperationHistory]:
        with self.engine.connect() as connection:
            return history_rows(connection)


    def outage_circuit(self, now: datetime, pause: timedelta) -> OutageCircuit | None:
        """The launch circuit after an outage (an outcome whose failure kind is ``outage``, by
        errors.failure_kind's rule: something could not be reached): launches resume at the last
        outage failure + ``pause``, as long as no run has succeeded since; with the tables whose runs
        met an outage since the last success (the probe avoids them). None when the circuit is closed."""
        with self.engine.connect() as connection:
            # The last success first (the finished_at index read backwards, to the newest success), then only the
            # outages since it: the tick's check never reads the whole history when no outage was ever recorded.
            last_success = connection.execute(
                select(func.max(outcomes.c.finished_at)).where(outcomes.c.succeeded.is_(True))).scalar()
            since = [] if last_success is None else [outcomes.c.finished_at >= last_success]
            outages = dict(connection.execute(
                select(outcomes.c.table_name, func.max(outcomes.c.finished_at))
                .where(outcomes.c.failure_kind == OUTAGE, *since).group_by(outcomes.c.table_name)).all())
        if not outages:
            return None
        tripped = frozenset(table for table, at in outages.items() if last_success is None or at > last_success)
        return OutageCircuit(naive_as_utc(max(outages.values())) + pause, tripped)

    def prune(self, outcomes_before: datetime, ledger_before: datetime) -> tuple[int, int]:
        """Delete outcome rows finished before ``outcomes_before`` and ledger rows admitted before
        ``ledger_before``; returns how many of each. The history table (the fold the planner reads:
        last success, failure and zero-change streaks) is never pruned."""
        with self.engine.begin() as connection:
            outcome_rows = connection.execute(
                outcomes.delete().where(outcomes.c.finished_at < naive_as_utc(outcomes_before))).rowcount
            ledger_rows = connection.execute(
                ledger.delete().where(ledger.c.admitted_at < naive_as_utc(ledger_before))).rowcount
        return outcome_rows, ledger_rows

    def run_figures(self, table_name: str, operation: Operation, limit: int = 50) -> list[RunFigures]:
        """The (table, operation)'s past successful runs with their compute and benefit, newest first (at
        most ``limit``). Runs recorded before the figures were are left out."""
        return [r.run_figures() for r in read_outcomes(
            self.engine, outcomes, table_name=table_name, operations=[operation], successes_with_figures=True,
            newest_first=True, limit=limit)]

    def latest_figures(self, table_name: str) -> dict[Operation, RunFigures]:
        """Each operation's newest successful run with figures on the table, in one read: ``explain``'s
        ``lastRun`` figures."""
        newest: dict[Operation, RunFigures] = {}
        for record in read_outcomes(self.engine, outcomes, table_name=table_name, successes_with_figures=True,
                                    newest_first=True):
            newest.setdefault(record.operation, record.run_figures())
        return newest

    # -- writers ------------------------------------------------------------------------------

    def writer_rows(self) -> dict[str, tuple[Writer, ...]]:
        """Every persisted writer, by table (one query)."""
        return writer_rows(self.engine, writers)

    def record_writers(self, rows: dict[tuple[str, tuple[str, ...]], Writer]) -> None:
        """Insert or update writer rows; a row never goes back to an older materialization, and a learned
        source (table_name) is kept once seen."""
        record_writer_rows(self.engine, writers, rows)

    def recorded_runs(self, operations: Iterable[Operation] | None = None, since: datetime | None = None
                      ) -> dict[tuple[str, Operation], list[RecordedRun]]:
        """The kept outcome rows of these operations (None: all) finished since then (None: all), oldest
        first per (table, operation): the runs the learned ranking and a kind's own cadence learn from."""
        records = read_outcomes(self.engine, outcomes, operations=operations, since=since)
        return {key: [r.recorded_run() for r in group] for key, group in by_table_operation(records).items()}

    def outcomes_for(self, table_name: str) -> list[dict]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(outcomes).where(outcomes.c.table_name == table_name).order_by(outcomes.c.finished_at)
            ).mappings().all()
        return [dict(row) for row in rows]


# At most this long to reach the database when a code location loads (learned_writers): a database that is
# down must not stall Dagster's load of the code location (it falls back to floe.yaml's writers rules).
LOAD_CONNECT_TIMEOUT_S = 5


def learned_writers(url: str | None = None) -> dict[str, tuple[Writer, ...]]:
    """The persisted writers, by table, as a code location's load reads them for lineage: one query, with a
    short connect timeout, and without creating or migrating any table (a load, and every run process's
    load of the same definitions, must not write; a database not made yet has no writers)."""
    url = url or default_coordination_url()
    timeout = {"timeout": LOAD_CONNECT_TIMEOUT_S} if url.startswith("sqlite") else (
        {"connect_timeout": LOAD_CONNECT_TIMEOUT_S} if url.startswith("postgresql") else {})
    engine = create_engine(url, connect_args=timeout)
    try:
        return writer_rows(engine, writers) if inspect(engine).has_table(writers.name) else {}
    finally:
        engine.dispose()


def _figure_values(outcome: Outcome) -> dict:
    """An outcome's figure columns (all None for a run without figures: a failure)."""
    figures = figures_json(outcome.compute, outcome.benefit)
    return {**outcome_columns(outcome.compute, outcome.benefit),
            "compute_source": outcome.compute.source if outcome.compute else None,
            "figures": json.dumps(figures) if figures is not None else None}


def _record_shadow_in_history(connection, table_name: str, operation: Operation, at: datetime) -> None:
    """The history's ``last_shadow_at`` (never pruned, unlike the ledger, so a long interval still
    counts from it), created with the row when the table has no history yet."""
    key = and_(history.c.table_name == table_name, history.c.operation == operation.value)
    if connection.execute(update(history).where(key).values(last_shadow_at=naive_as_utc(at))).rowcount == 0:
        connection.execute(history.insert().values(table_name=table_name, operation=operation.value,
                                                   last_shadow_at=naive_as_utc(at)))
