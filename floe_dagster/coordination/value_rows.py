"""The outcome rows the value report sums (core/value/value_report.py): every table's result of every run that
finished in a window, failures and conflicts included, with the figures the run recorded. Read through the
one outcome read (coordination/run_records.py); the sums are the report's, in Python, so a grouping by
namespace needs no SQL string functions that SQLite and PostgreSQL spell differently."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.schema import outcomes
from floe_dagster.coordination.run_records import read_outcomes
from floe_dagster.core.runs.run_figures import outcome_columns
from floe_dagster.core.value.value_report import OutcomeRow

# The figures an OutcomeRow carries: its fields named like the outcome columns (core/runs/run_figures.py).
_FIGURES = tuple(f.name for f in fields(OutcomeRow) if f.name in outcome_columns(None, None))


def outcome_rows(coordination: Coordination, since: datetime, until: datetime) -> list[OutcomeRow]:
    """The outcomes finished in [since, until], oldest first."""
    rows = []
    for record in read_outcomes(coordination.engine, outcomes, since=since, until=until):
        columns = outcome_columns(record.compute, record.benefit)
        rows.append(OutcomeRow(record.table_name, record.operation.value, record.finished_at, record.succeeded,
                               record.failure_kind, record.bytes_rewritten, **{n: columns[n] for n in _FIGURES}))
    return rows
