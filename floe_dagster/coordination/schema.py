"""The coordination database's tables, declared once, and how a database is made and kept up to date.

- ``floe_ledger``: one row per admitted (table, operation, slot, attempt); the unique key makes a
  double admission impossible across launchers and replicas. A shadow policy's decision has a row of
  its own (``shadow`` true, attempt ``SHADOW_ATTEMPT``), once per (table, operation, slot), never a run.
- ``floe_outcomes``: one row per table a run maintained (a backfill run maintains many), written by
  the run itself as each table finishes, or by the tick that finds the run dead; a success's row
  holds what the run cost and bought (core/runs/run_figures.py).
- ``floe_history``: the fold of the outcomes per (table, operation) that the planner reads.
- ``floe_writers``: the writers of each table learned from the event log, with each writer's newest
  materialization read (core/schedules/writers.py).

Opening a database creates what is missing (:func:`create_tables`) and adds the columns and indexes
declared since it was made (:func:`add_missing_columns`). The API keys and the agents' proposals declare
their tables on the same :data:`metadata` (coordination/api_keys.py, coordination/agent_proposals.py).
"""

from __future__ import annotations

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
    inspect,
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from floe_dagster.core.runs.run_figures import OUTCOME_COLUMNS

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
# declared (add_missing_columns).
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


def create_tables(engine: Engine, attempts: int = 3) -> None:
    """Create what is missing. Two processes (or threads) starting on a new database at once may both
    see a table missing; the loser's CREATE fails, and checking again finds it made."""
    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            return
        except DBAPIError:
            if attempt == attempts - 1:
                raise


def add_missing_columns(engine: Engine) -> None:
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


def _columns(engine: Engine, table: Table) -> set[str]:
    return {column["name"] for column in inspect(engine).get_columns(table.name)}


def _timestamp_type(engine: Engine) -> str:
    return "TIMESTAMP WITH TIME ZONE" if engine.dialect.name == "postgresql" else "DATETIME"
