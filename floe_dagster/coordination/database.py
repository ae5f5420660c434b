"""The coordination database: the trigger ledger and the per-(table, operation) history.

One database shared by every launcher and every run that maintains the same lakehouse:
``coordination.url`` in floe.yaml (PostgreSQL for several deployments), else a SQLite file beside
the Dagster instance. Reading all history is one query per tick, whatever the number of tables.

- ``floe_ledger``: one row per admitted (table, operation, slot, attempt); the unique key makes a
  double admission impossible across launchers and replicas. A shadow policy's decision has a row of
  its own (``shadow`` true, attempt ``SHADOW_ATTEMPT``), once per (table, operation, slot), never a run.
- ``floe_outcomes``: one row per table a run maintained (a backfill run maintains many), written by
  the run itself as each table finishes, or by the tick that finds the run dead; a success's row
  holds what the run cost and bought (core/runs/run_figures.py).
- ``floe_history``: the fold of the outcomes per (table, operation) that the planner reads.
- ``floe_writers``: the writers of each table learned from the event log, with each writer's newest
  materialization read (core/schedules/writers.py).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    create_engine,
    func,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from floe_dagster.coordination.locks import Locks, locks_for
from floe_dagster.core.plan.circuit import OutageCircuit
from floe_dagster.core.runs.history import OUTAGE, OperationHistory, Outcome, fold_outcome
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.rewrites.partition_scope import PartitionSelection
from floe_dagster.core.runs.run_decision import LedgerRow, RunDecision
from floe_dagster.coordination.run_records import by_table_operation, read_outcomes
from floe_dagster.coordination.writer_rows import record_writer_rows, writer_rows
from floe_dagster.core.runs.run_figures import OUTCOME_COLUMNS, RunFigures, figures_json, outcome_columns
from floe_dagster.core.schedules.writers import Writer
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.instance import default_coordination_url

metadata = MetaData()

ledger = Table(
    "floe_ledger",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_name", String(1024), nullable=False),
    Column("operation", String(64), nullable=False),
    Column("slot", String(64), nullable=False),  # ISO time of the due slot, or "manual:<id>"
    Column("attempt", Integer, nullable=False),
    Column("run_key", String(1200), nullable=False, unique=True),
    Column("trigger", String(32), nullable=False),
    Column("reason", String(2000), nullable=False),
    Column("debt_score", Float, nullable=False, default=0.0),
    Column("estimated_bytes", BigInteger, nullable=False, default=0),
    Column("admitted_at", DateTime(timezone=True), nullable=False, index=True),
    Column("launcher", String(200), nullable=False, default=""),
    Column("run_id", String(64)),
    # Column run_key is the item key (core/runs/run_decision.py). batch_key: the key of the batch (one run
    # over several tables) the item was admitted in; the run carries it as the run tag
    # dagster/floe.run-key. A batch of one has the item's own key.
    Column("batch_key", String(1200)),
    # A partition-scoped rewrite (core/rewrites/partition_scope.py): the partitions chosen and the backlog, as JSON.
    Column("scope", Text),
    # A shadow policy's decision: recorded, never run (no run id, never in flight, no budget of live work).
    Column("shadow", Boolean, nullable=False, default=False),
    # An after-write admission: the write that made it due (its writer's asset key, run and storage id), as JSON.
    Column("upstream", Text),
    UniqueConstraint("table_name", "operation", "slot", "attempt", name="floe_ledger_item"),
)

outcomes = Table(
    "floe_outcomes",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("table_name", String(1024), primary_key=True),
    Column("operation", String(64), nullable=False),
    Column("trigger", String(32), nullable=False, default=""),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False, index=True),
    Column("succeeded", Boolean, nullable=False),
    # "lock_held" or "outage": a failure that is not the table's fault and never counts toward backoff
    Column("failure_kind", String(32)),
    Column("message", String(2000)),
    Column("changed", Boolean),
    Column("bytes_rewritten", BigInteger, nullable=False, default=0),
    Column("snapshot_after", BigInteger),
    # What the run cost and bought (core/runs/run_figures.py): the sums' columns as it declares them, where the
    # compute came from, and all of it as JSON (the history read: Coordination.run_figures).
    *(Column(name, BigInteger if integer else Float) for name, _, integer in OUTCOME_COLUMNS),
    Column("compute_source", String(32)),
    Column("figures", Text),
)
# The outcome columns added since the table was first declared: nullable, added to an older database as
# declared (_add_missing_columns).
FIGURE_COLUMNS = (*(name for name, _, _ in OUTCOME_COLUMNS), "compute_source", "figures")

history = Table(
    "floe_history",
    metadata,
    Column("table_name", String(1024), primary_key=True),
    Column("operation", String(64), primary_key=True),
    Column("last_run_start", DateTime(timezone=True)),
    Column("last_run_succeeded", Boolean),
    Column("last_run_trigger", String(32)),
    Column("last_success_start", DateTime(timezone=True)),
    Column("last_failure_at", DateTime(timezone=True)),
    Column("consecutive_failures", Integer, nullable=False, default=0),
    Column("consecutive_zero_change", Integer, nullable=False, default=0),
    Column("last_snapshot_after", BigInteger),
    Column("runs", Integer, nullable=False, default=0),
    Column("failures", Integer, nullable=False, default=0),
    Column("consecutive_conflicts", Integer, nullable=False, default=0),
    Column("last_conflict_at", DateTime(timezone=True)),
    Column("last_conflict_writer", String(32)),
    # The newest shadow decision's admission: a shadow policy's due rules read it as a success.
    Column("last_shadow_at", DateTime(timezone=True)),
)

# The writers of each table (core/schedules/writers.py) the sensor learned from the event log, and each writer's newest
# materialization it read (for a floe.yaml rule's writer too): every process reads the same.
writers = Table(
    "floe_writers",
    metadata,
    Column("table_name", String(1024), primary_key=True),
    Column("asset_key", String(1024), primary_key=True),  # its parts, as JSON
    Column("source", String(32), nullable=False),  # rule | table_name
    Column("last_storage_id", BigInteger),
    Column("last_run_id", String(64)),
    Column("last_materialized_at", DateTime(timezone=True)),
)

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
        _create_tables(self.engine)
        _add_missing_columns(self.engine)
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
                        shadow=item.shadow, upstream=_upstream_json(item.upstream),
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


def _create_tables(engine: Engine, attempts: int = 3) -> None:
    """Create what is missing. Two processes (or threads) starting on a new database at once may both
    see a table missing; the loser's CREATE fails, and checking again finds it made."""
    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            return
        except DBAPIError:
            if attempt == attempts - 1:
                raise


def _add_missing_columns(engine: Engine) -> None:
    """Columns and indexes added since a coordination database was created (create_all adds tables, not
    columns or indexes to existing tables). The time indexes serve the tick's reads of recent rows,
    the metrics and retention."""
    for table in (ledger, outcomes):
        for index in table.indexes:
            try:
                index.create(engine, checkfirst=True)
            except DBAPIError:  # another process created it first
                pass
    present: dict[str, set[str]] = {}
    # (table, column, its SQL type): added to databases created before the column existed.
    for table, column, sql_type in ((ledger, "batch_key", "VARCHAR(1200)"),
                                    (ledger, "scope", "TEXT"),
                                    (ledger, "shadow", "BOOLEAN NOT NULL DEFAULT FALSE"),
                                    (ledger, "upstream", "TEXT"),
                                    (history, "last_shadow_at", _timestamp_type(engine)),
                                    (history, "consecutive_conflicts", "INTEGER NOT NULL DEFAULT 0"),
                                    (history, "last_conflict_at", _timestamp_type(engine)),
                                    (history, "last_conflict_writer", "VARCHAR(32)")):
        _add_column(engine, table, column, sql_type, present)
    for column in FIGURE_COLUMNS:  # nullable: added with the type they are declared with
        _add_column(engine, outcomes, column, outcomes.c[column].type.compile(dialect=engine.dialect), present)


def _add_column(engine: Engine, table: Table, column: str, sql_type: str, present: dict[str, set[str]]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` unless ``present`` (the columns read once per table) has it."""
    if table.name not in present:
        present[table.name] = _columns(engine, table)
    if column in present[table.name]:
        return
    try:
        with engine.begin() as connection:
            connection.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column} {sql_type}"))
    except DBAPIError:  # another process added it first
        if column not in _columns(engine, table):
            raise


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


def _columns(engine: Engine, table: Table) -> set[str]:
    return {column["name"] for column in inspect(engine).get_columns(table.name)}


def _timestamp_type(engine: Engine) -> str:
    return "TIMESTAMP WITH TIME ZONE" if engine.dialect.name == "postgresql" else "DATETIME"


def ledger_rows_where(connection: Connection, where) -> list[LedgerRow]:
    """The ledger rows that match ``where`` (None: every row), by id, read on an open connection."""
    query = select(ledger).order_by(ledger.c.id)
    if where is not None:
        query = query.where(where)
    return [ledger_row(row) for row in connection.execute(query).mappings().all()]


def history_rows(connection: Connection) -> dict[tuple[str, Operation], OperationHistory]:
    """Every (table, operation)'s history, read on an open connection (one query)."""
    rows = connection.execute(select(history)).mappings().all()
    return {(row["table_name"], Operation(row["operation"])): history_from_row(row) for row in rows}


def ledger_row(row) -> LedgerRow:
    return LedgerRow(
        id=row["id"], table_name=row["table_name"], operation=Operation(row["operation"]), slot=row["slot"],
        attempt=row["attempt"], item_key=row["run_key"], trigger=row["trigger"], reason=row["reason"],
        debt_score=float(row["debt_score"] or 0.0), estimated_bytes=int(row["estimated_bytes"] or 0),
        admitted_at=naive_as_utc(row["admitted_at"]), launcher=row["launcher"] or "", run_id=row["run_id"],
        batch_key=row["batch_key"] or row["run_key"],
        scope=PartitionSelection.from_json(row.get("scope")),
        shadow=bool(row.get("shadow")),
        upstream=_upstream_from_json(row.get("upstream")),
    )


def _upstream_json(writer: Writer | None) -> str | None:
    if writer is None:
        return None
    return json.dumps({"assetKey": list(writer.asset_key), "runId": writer.last_run_id,
                       "storageId": writer.last_storage_id})


def _upstream_from_json(text: str | None) -> Writer | None:
    if not text:
        return None
    data = json.loads(text)
    return Writer(tuple(data["assetKey"]), "", data["storageId"], data["runId"])


def history_from_row(row) -> OperationHistory:
    # SQLite hands back naive datetimes: everything stored is UTC.
    return OperationHistory(**{
        k: (naive_as_utc(v) if isinstance(v, datetime) else v)
        for k, v in row.items() if k not in ("table_name", "operation")
    })

