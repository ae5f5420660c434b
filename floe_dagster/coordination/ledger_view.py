"""The coordination database as one tick's gathering reads it (scheduling/inputs.py), read once, on one
connection, in two statements: the state (the writers, the ledger rows of the lookback window and the
history, one ``UNION ALL`` of the three tables' rows side by side, each row with its own table's columns and
NULL in the others'), and the outcome rows every reader of the tick needs (the hour's rewritten bytes, and the
recorded runs the learned ranking, the compute budget and a kind's own cadence learn from), sliced here the
way each reader read them on its own before. Read-only: the writes of a tick (dead runs, created runs,
admissions) stay where they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping

from sqlalchemy import CompoundSelect, Connection, Select, Table, cast, literal, null, or_, select, union_all

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.schema import history, ledger, outcomes, writers
from floe_dagster.coordination.table_rows import history_from_row, ledger_row
from floe_dagster.coordination.run_records import OutcomeRecord, by_table_operation, outcome_query, outcome_records
from floe_dagster.coordination.writer_rows import writers_by_table
from floe_dagster.core.runs.history import OperationHistory
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_decision import LedgerRow
from floe_dagster.core.value.run_history import RecordedRun
from floe_dagster.core.schedules.writers import Writer


@dataclass(frozen=True)
class OutcomeWindow:
    """Which outcome rows a tick reads: those finished since ``bytes_since`` (the byte budget's hour), those
    of the ``cadenced`` kinds (every kept row), and, when ``learned`` is set, those finished since
    ``learned_since`` (None: every row)."""

    bytes_since: datetime
    cadenced: tuple[Operation, ...] = ()
    learned: bool = False
    learned_since: datetime | None = None


@dataclass(frozen=True)
class LedgerView:
    """What one tick read of the coordination database."""

    writers: Mapping[str, tuple[Writer, ...]]
    admitted: list[LedgerRow]  # the ledger rows admitted since the lookback, oldest first (by id)
    history: Mapping[tuple[str, Operation], OperationHistory]
    bytes_rewritten_by_table: Mapping[str, int]  # since the window's ``bytes_since``
    recorded_runs: Mapping[tuple[str, Operation], list[RecordedRun]]  # the cadenced kinds' over the learned ones


def read_ledger_view(coordination: Coordination, admitted_since: datetime, window: OutcomeWindow) -> LedgerView:
    """Read the view: two statements on one connection (the state, then the outcomes)."""
    with coordination.engine.connect() as connection:
        found_writers, admitted, found_history = _read_state(connection, admitted_since)
        rows = connection.execute(_outcomes_in(window)).all()
    return LedgerView(found_writers, admitted, found_history, _bytes_by_table(rows, window.bytes_since),
                      _recorded_runs(outcome_records(rows), window))


# The state's parts: each table's rows with its columns named ``<part>_<column>`` in the union.
_PARTS: tuple[tuple[str, Table], ...] = (("writer", writers), ("ledger", ledger), ("history", history))
_PART = "part"


def _state_union(admitted_since: datetime) -> CompoundSelect:
    """Every writer row, the ledger rows admitted since then and every history row, in one statement: a row
    holds its own table's columns, and a NULL of the same type in each other table's."""
    branches = []
    for part, table in _PARTS:
        columns = [literal(part).label(_PART)]
        for other, other_table in _PARTS:
            columns += [(column if other == part else cast(null(), column.type)).label(f"{other}_{column.name}")
                        for column in other_table.columns]
        branch = select(*columns).select_from(table)
        branches.append(branch.where(ledger.c.admitted_at >= naive_as_utc(admitted_since)) if table is ledger
                        else branch)
    return union_all(*branches)


def _read_state(connection: Connection, admitted_since: datetime) -> tuple[
        Mapping[str, tuple[Writer, ...]], list[LedgerRow], dict[tuple[str, Operation], OperationHistory]]:
    """The writers (by table, each table's by asset key), the ledger window (by id) and the history, read by
    one statement (:func:`_state_union`) and parsed as each table's own read parses its rows."""
    names = {part: [(f"{part}_{column.name}", column.name) for column in table.columns] for part, table in _PARTS}
    found: dict[str, list[dict]] = {part: [] for part, _ in _PARTS}
    for row in connection.execute(_state_union(admitted_since)).mappings():
        part = row[_PART]
        found[part].append({name: row[label] for label, name in names[part]})
    admitted = sorted((ledger_row(row) for row in found["ledger"]), key=lambda row: row.id)
    return (writers_by_table(found["writer"]), admitted,
            {(row["table_name"], Operation(row["operation"])): history_from_row(row) for row in found["history"]})


def read_recorded_runs(coordination: Coordination, window: OutcomeWindow
                       ) -> dict[tuple[str, Operation], list[RecordedRun]]:
    """The recorded runs of a window on their own, as the view reads them (``explain``'s, for a window the
    tick did not read): one statement."""
    with coordination.engine.connect() as connection:
        rows = connection.execute(_outcomes_in(window)).all()
    return _recorded_runs(outcome_records(rows), window)


def _outcomes_in(window: OutcomeWindow) -> Select:
    """The outcome rows of the window, oldest first."""
    c = outcomes.c
    query = outcome_query(outcomes)
    if not window.learned or window.learned_since is not None:  # else every row is read
        wanted = [c.finished_at >= naive_as_utc(window.bytes_since)]
        if window.cadenced:
            wanted.append(c.operation.in_([op.value for op in window.cadenced]))
        if window.learned:
            wanted.append(c.finished_at >= naive_as_utc(window.learned_since))
        query = query.where(or_(*wanted))
    return query.order_by(c.finished_at, c.run_id, c.table_name)


def _bytes_by_table(rows: Iterable, since: datetime) -> dict[str, int]:
    """Bytes each table's runs rewrote since then, every operation's (one this version does not know too)."""
    totals: dict[str, int] = {}
    for table, _, _, _, finished, _, _, size, _ in rows:
        if naive_as_utc(finished) >= since:
            totals[table] = totals.get(table, 0) + int(size or 0)
    return totals


def _recorded_runs(records: list[OutcomeRecord], window: OutcomeWindow
                   ) -> dict[tuple[str, Operation], list[RecordedRun]]:
    """The learned ranking's runs (finished since ``learned_since``), with the cadenced kinds' (every row) over
    them: what two reads of the recorded runs returned, merged the same way."""
    def grouped(chosen: list[OutcomeRecord]) -> dict[tuple[str, Operation], list[RecordedRun]]:
        return {key: [r.recorded_run() for r in group] for key, group in by_table_operation(chosen).items()}

    cadenced = set(window.cadenced)
    found = grouped([r for r in records if r.operation in cadenced]) if cadenced else {}
    if window.learned:
        since = window.learned_since
        found = {**grouped([r for r in records if since is None or r.finished_at >= since]), **found}
    return found


__all__ = ["LedgerView", "OutcomeWindow", "read_ledger_view", "read_recorded_runs"]
