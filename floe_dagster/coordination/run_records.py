"""The reads of the outcome rows' figures (core/run_figures.py) that the planner learns from, for
coordination/database.py's :class:`Coordination`: a (table, operation)'s successful runs with their compute
and benefit (:class:`~floe_dagster.core.run_figures.RunFigures`, newest first), and every kept row as the
learned ranking and a kind's own cadence read it (:class:`~floe_dagster.core.run_history.RecordedRun`,
oldest first, failures included)."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import Engine, Table, select

from floe_dagster.core.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.run_figures import Benefit, Compute, RunFigures, figures_from_json
from floe_dagster.core.run_history import RecordedRun


def run_figures_where(engine: Engine, outcomes: Table, where: Any,
                      limit: int | None) -> defaultdict[tuple[str, Operation], list[RunFigures]]:
    """The successful runs with figures that match ``where``, newest first (at most ``limit``)."""
    query = (select(outcomes.c.table_name, outcomes.c.operation, outcomes.c.run_id, outcomes.c.finished_at,
                    outcomes.c.figures)
             .where(where, outcomes.c.succeeded.is_(True), outcomes.c.figures.is_not(None))
             .order_by(outcomes.c.finished_at.desc(), outcomes.c.run_id).limit(limit))
    found: defaultdict[tuple[str, Operation], list[RunFigures]] = defaultdict(list)
    with engine.connect() as connection:
        for table_name, operation, run_id, finished, figures in connection.execute(query):
            found[(table_name, Operation(operation))].append(
                RunFigures(run_id, naive_as_utc(finished), *_readable(figures)))
    return found


def recorded_runs(engine: Engine, outcomes: Table, operations: Iterable[Operation] | None,
                  since: datetime | None) -> dict[tuple[str, Operation], list[RecordedRun]]:
    """The kept outcome rows of these operations (None: all) finished since then (None: all), oldest first
    per (table, operation)."""
    query = select(outcomes.c.table_name, outcomes.c.operation, outcomes.c.started_at, outcomes.c.finished_at,
                   outcomes.c.succeeded, outcomes.c.failure_kind, outcomes.c.bytes_rewritten, outcomes.c.figures)
    if operations is not None:
        query = query.where(outcomes.c.operation.in_([op.value for op in operations]))
    if since is not None:
        query = query.where(outcomes.c.finished_at >= naive_as_utc(since))
    found: dict[tuple[str, Operation], list[RecordedRun]] = {}
    with engine.connect() as connection:
        for row in connection.execute(query.order_by(outcomes.c.finished_at)).mappings():
            found.setdefault((row["table_name"], Operation(row["operation"])), []).append(RecordedRun(
                naive_as_utc(row["started_at"]), naive_as_utc(row["finished_at"]), bool(row["succeeded"]),
                row["failure_kind"], int(row["bytes_rewritten"] or 0), *_readable(row["figures"])))
    return found


def _readable(text_value: str | None) -> tuple[Compute | None, Benefit | None]:
    """An outcome's figures as stored; a row that cannot be read counts as none (it never stops a tick)."""
    try:
        return figures_from_json(json.loads(text_value)) if text_value else (None, None)
    except (ValueError, TypeError, AttributeError, KeyError):
        return None, None


__all__ = ["run_figures_where", "recorded_runs"]
