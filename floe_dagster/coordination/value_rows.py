"""The outcome rows the value report sums (core/value_report.py): every table's result of every run that
finished in a window, failures and conflicts included, with the figure columns the run recorded. One query,
as ``Coordination.all_run_figures`` reads the history; the sums are the report's, in Python, so a grouping by
namespace needs no SQL string functions that SQLite and PostgreSQL spell differently."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from floe_dagster.coordination.database import Coordination, outcomes
from floe_dagster.core.localtime import naive_as_utc
from floe_dagster.core.value_report import OutcomeRow

# The figure columns it reads, each with its type (None stays None: a run that did not measure it).
_FIGURES = (("executor_cpu_s", float), ("wall_s", float), ("files_removed", int), ("bytes_reclaimed", int),
            ("files_deleted", int), ("snapshots_expired", int), ("orphan_bytes_reclaimed", int))


def outcome_rows(coordination: Coordination, since: datetime, until: datetime) -> list[OutcomeRow]:
    """The outcomes finished in [since, until], oldest first."""
    c = outcomes.c
    query = (select(c.table_name, c.operation, c.finished_at, c.succeeded, c.failure_kind, c.bytes_rewritten,
                    *(c[name] for name, _ in _FIGURES))
             .where(c.finished_at >= naive_as_utc(since), c.finished_at <= naive_as_utc(until))
             .order_by(c.finished_at, c.run_id, c.table_name))
    with coordination.engine.connect() as connection:
        return [OutcomeRow(table, operation, naive_as_utc(finished), bool(ok), kind, int(size or 0),
                           *(None if value is None else kind(value) for (_, kind), value in zip(_FIGURES, figures)))
                for table, operation, finished, ok, kind, size, *figures in connection.execute(query)]
