"""The one read of the outcome rows (``floe_outcomes``) with their figures (core/runs/run_figures.py), for
coordination/database.py's :class:`Coordination` and the value report (coordination/value_rows.py): filtered
by table, operations and a finish window, optionally only the successful runs that recorded figures. Each
reader shapes the same :class:`OutcomeRecord` its own way: the learned ranking and a kind's own cadence as
:class:`~floe_dagster.core.value.run_history.RecordedRun`, ``explain`` and the history as
:class:`~floe_dagster.core.runs.run_figures.RunFigures`, the value report as its ``OutcomeRow``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from sqlalchemy import Engine, Row, Select, Table, select

from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_figures import Benefit, Compute, RunFigures, figures_from_json
from floe_dagster.core.value.run_history import RecordedRun


@dataclass(frozen=True)
class OutcomeRecord:
    """One outcome row: one table's result of one run, with what it cost and bought (None: a failure, or a
    row recorded before runs recorded figures, or one whose figures cannot be read)."""

    table_name: str
    operation: Operation
    run_id: str
    started_at: datetime
    finished_at: datetime
    succeeded: bool
    failure_kind: str | None
    bytes_rewritten: int
    compute: Compute | None
    benefit: Benefit | None

    def recorded_run(self) -> RecordedRun:
        return RecordedRun(self.started_at, self.finished_at, self.succeeded, self.failure_kind,
                           self.bytes_rewritten, self.compute, self.benefit)

    def run_figures(self) -> RunFigures:
        return RunFigures(self.run_id, self.finished_at, self.compute, self.benefit)


def read_outcomes(engine: Engine, outcomes: Table, *, table_name: str | None = None,
                  operations: Iterable[Operation] | None = None, since: datetime | None = None,
                  until: datetime | None = None, successes_with_figures: bool = False,
                  newest_first: bool = False, limit: int | None = None) -> list[OutcomeRecord]:
    """The outcome rows that match every filter given (None: no filter on it), finished in [since, until],
    oldest first (or newest first), at most ``limit`` (:func:`outcome_records`)."""
    c = outcomes.c
    query = outcome_query(outcomes)
    if table_name is not None:
        query = query.where(c.table_name == table_name)
    if operations is not None:
        query = query.where(c.operation.in_([op.value for op in operations]))
    if since is not None:
        query = query.where(c.finished_at >= naive_as_utc(since))
    if until is not None:
        query = query.where(c.finished_at <= naive_as_utc(until))
    if successes_with_figures:
        query = query.where(c.succeeded.is_(True), c.figures.is_not(None))
    order = (c.finished_at.desc(), c.run_id, c.table_name) if newest_first else (c.finished_at, c.run_id, c.table_name)
    with engine.connect() as connection:
        rows = connection.execute(query.order_by(*order).limit(limit)).all()
    return outcome_records(rows)


def outcome_query(outcomes: Table) -> Select:
    """The outcome rows' columns an :class:`OutcomeRecord` is made of, in its order (no filter yet)."""
    c = outcomes.c
    return select(c.table_name, c.operation, c.run_id, c.started_at, c.finished_at, c.succeeded, c.failure_kind,
                  c.bytes_rewritten, c.figures)


def outcome_records(rows: Iterable[Row]) -> list[OutcomeRecord]:
    """The rows of :func:`outcome_query` as records, in their order. Rows of an operation this version does not
    know are skipped: a newer floe's rows in a shared database never stop a tick or a report."""
    known = {op.value: op for op in Operation}
    return [OutcomeRecord(table, known[operation], run_id, naive_as_utc(started), naive_as_utc(finished),
                          bool(succeeded), failure_kind, int(size or 0), *_readable(figures))
            for table, operation, run_id, started, finished, succeeded, failure_kind, size, figures in rows
            if operation in known]


def by_table_operation(records: Iterable[OutcomeRecord]) -> dict[tuple[str, Operation], list[OutcomeRecord]]:
    """The records grouped per (table, operation), each group in the order read."""
    found: dict[tuple[str, Operation], list[OutcomeRecord]] = {}
    for record in records:
        found.setdefault((record.table_name, record.operation), []).append(record)
    return found


def _readable(text_value: str | None) -> tuple[Compute | None, Benefit | None]:
    """An outcome's figures as stored; a row that cannot be read counts as none (it never stops a tick)."""
    try:
        return figures_from_json(json.loads(text_value)) if text_value else (None, None)
    except (ValueError, TypeError, AttributeError, KeyError):
        return None, None


__all__ = ["OutcomeRecord", "by_table_operation", "outcome_query", "outcome_records", "read_outcomes"]
