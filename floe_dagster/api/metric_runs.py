"""The runs ``/metrics`` reads over the last day (:data:`WINDOW`): each run's first admission in the ledger
(:class:`AdmissionWindow`, for the trigger-to-run latency) and, from the Dagster instance's run storage in SQL,
the floe runs in flight, the manual-trigger runs and the runs created in the window (:func:`run_totals`)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from dagster import DagsterInstance
from dagster._core.storage.runs.schema import RunsTable, RunTagsTable
from dagster._core.storage.runs.sql_run_storage import SqlRunStorage
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.engine import Engine

from floe_dagster.coordination.runs import IN_FLIGHT_STATUSES
from floe_dagster.coordination.schema import ledger
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.runs import run_tags as T

WINDOW = timedelta(days=1)  # latency and queue wait: the runs created in the last day
IN_FLIGHT = tuple(status.value for status in IN_FLIGHT_STATUSES)


def first_admissions(engine: Engine, since: datetime, from_id: int = 0) -> dict[str, datetime]:
    """Each run's earliest admission (a batch run has one row per table), admitted since then, among
    the ledger rows from ``from_id`` on (the primary key: a range, not the whole ledger)."""
    query = (select(ledger.c.run_id, func.min(ledger.c.admitted_at))
             .where(ledger.c.id >= from_id, ledger.c.run_id.is_not(None), ledger.c.admitted_at >= naive_as_utc(since))
             .group_by(ledger.c.run_id))
    with engine.connect() as connection:
        return {run_id: naive_as_utc(admitted) for run_id, admitted in connection.execute(query)}


class AdmissionWindow:
    """:func:`first_admissions` of the last day, read from the first ledger row admitted in it: rows
    are numbered as they are admitted, so that row's id bounds the day, and moves up as the day does.
    Only the first read scans the ledger (a month of rows under retention) to find it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._from_id: int | None = None

    def read(self, engine: Engine, since: datetime) -> dict[str, datetime]:
        with self._lock:
            with engine.connect() as connection:
                first = connection.execute(select(func.min(ledger.c.id)).where(
                    ledger.c.id >= (self._from_id or 0), ledger.c.admitted_at >= naive_as_utc(since))).scalar()
                if first is None:  # nothing admitted since: later rows come after the last one
                    first = (connection.execute(select(func.max(ledger.c.id))).scalar() or 0) + 1
            self._from_id = max(self._from_id or 0, int(first))
            return first_admissions(engine, since, self._from_id)


def sql_run_storage(instance: DagsterInstance) -> SqlRunStorage:
    storage = instance.run_storage
    for _ in range(3):
        if isinstance(storage, SqlRunStorage):
            return storage
        storage = getattr(getattr(storage, "_storage", None), "run_storage", None)  # LegacyRunStorage
    raise TypeError(f"the instance's run storage is not SQL ({type(instance.run_storage).__name__})")


def _floe_runs() -> ColumnElement:
    """Runs that maintain tables (coordination.runs.is_floe_run, in SQL): floe's jobs, or floe's tags."""
    tagged = select(RunTagsTable.c.id).where(RunTagsTable.c.run_id == RunsTable.c.run_id,
                                             RunTagsTable.c.key == T.OPERATION).exists()
    return RunsTable.c.pipeline_name.like("floe%") | tagged


def run_totals(instance: DagsterInstance, since: datetime) -> dict[str, object]:
    """From the run storage, three queries: floe runs in flight by status, manual-trigger runs by
    status, and the floe runs created since then (id, created, started)."""
    storage = sql_run_storage(instance)
    in_flight = (select(RunsTable.c.status, func.count()).where(RunsTable.c.status.in_(IN_FLIGHT), _floe_runs())
                 .group_by(RunsTable.c.status))
    manual = (select(RunsTable.c.status, func.count())
              .select_from(RunsTable.join(RunTagsTable, RunTagsTable.c.run_id == RunsTable.c.run_id))
              .where(RunTagsTable.c.key == T.TRIGGER, RunTagsTable.c.value == "manual")
              .group_by(RunsTable.c.status))
    recent = select(RunsTable.c.run_id, RunsTable.c.create_timestamp, RunsTable.c.start_time).where(
        RunsTable.c.create_timestamp >= since.astimezone(timezone.utc).replace(tzinfo=None), _floe_runs())
    with storage.connect() as connection:
        return {
            "in_flight": {status: int(n) for status, n in connection.execute(in_flight)},
            "manual": {status: int(n) for status, n in connection.execute(manual)},
            "recent": [(run_id, naive_as_utc(created).timestamp(), start)
                       for run_id, created, start in connection.execute(recent) if created is not None],
        }
