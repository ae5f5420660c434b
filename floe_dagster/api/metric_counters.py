"""The counters ``/metrics`` serves, counted from the server's first scrape (0 then) and never down, whatever
retention deletes: stored totals as counters (:class:`SinceStart`: the totals minus those seen at the first
scrape, a drop carried), and the outcome counters (:class:`OutcomeTally`: at each scrape, the outcomes finished
since the previous one, one ``GROUP BY`` over that window with :func:`outcome_totals`), what the runs cost and
bought (:data:`FIGURE_COUNTERS`) among them."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any, Mapping

from sqlalchemy import ColumnElement, func, null, select
from sqlalchemy.engine import Engine

from floe_dagster.api.metric_families import Key, operation_label
from floe_dagster.coordination.schema import outcomes
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.runs.history import CONFLICT, LOCK_HELD, OUTAGE

# What the runs cost and bought (the outcome rows' figure columns, core/runs/run_figures.py), summed per operation.
FIGURE_COUNTERS = (
    ("floe_operation_executor_cpu_seconds", "executor_cpu_s", "Executor CPU seconds of the tables' own Spark jobs"),
    ("floe_operation_task_seconds", "task_s", "Task time (slot seconds) of the tables' own Spark jobs"),
    ("floe_operation_compute_wall_seconds", "wall_s", "Wall seconds of the tables' Spark work (the CALL and the "
     "reads after it)"),
    ("floe_operation_bytes_read", "bytes_read", "Bytes the tables' Spark tasks read"),
    ("floe_operation_bytes_written", "bytes_written", "Bytes the tables' Spark tasks wrote (new data files)"),
    ("floe_operation_files_removed", "files_removed", "Live data and delete files fewer after the runs"),
    ("floe_operation_bytes_reclaimed", "bytes_reclaimed", "Live bytes fewer after the runs"),
    ("floe_operation_files_deleted", "files_deleted", "Files the runs deleted from storage (expired, orphans)"),
    ("floe_operation_snapshots_expired", "snapshots_expired", "Snapshots fewer in the tables' metadata after the runs"),
    ("floe_operation_orphan_bytes_reclaimed", "orphan_bytes_reclaimed", "Bytes of the orphan files the runs removed "
     "from the tables (deleted, or moved into the quarantine)"),
)


class SinceStart:
    """Stored totals as counters: 0 at the first read of each source, never down afterwards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, dict[Key, list[float]]] = {}  # source → key → [last total, offset]

    def counted(self, source: str, totals: Mapping[Key, float]) -> dict[Key, float]:
        with self._lock:
            state = self._state.get(source)
            if state is None:  # the first read: what is stored already happened before the server
                self._state[source] = {key: [value, -value] for key, value in totals.items()}
                return {key: 0.0 for key in totals}
            for key in set(state) | set(totals):
                last, offset = state.get(key, (0.0, 0.0))
                value = totals.get(key, 0.0)  # a total whose rows were all deleted is 0
                if value < last:  # rows were deleted (retention): carry what they had counted
                    offset += last - value
                state[key] = [value, offset]
            return {key: value + offset for key, (value, offset) in state.items()}


def _seconds_between(engine: Engine, later: Any, earlier: Any) -> ColumnElement | None:
    if engine.dialect.name == "sqlite":
        return (func.julianday(later) - func.julianday(earlier)) * 86400.0
    if engine.dialect.name == "postgresql":
        return func.extract("epoch", later - earlier)
    return None


def outcome_totals(engine: Engine, after: datetime, until: datetime
                   ) -> list[tuple[str, bool, str | None, int, float | None, int, tuple[float, ...]]]:
    """(operation, succeeded, failure kind, rows, seconds, bytes rewritten, the FIGURE_COUNTERS' sums) of the
    outcomes finished in (``after``, ``until``]: one GROUP BY."""
    seconds = _seconds_between(engine, outcomes.c.finished_at, outcomes.c.started_at)
    query = (select(
        outcomes.c.operation, outcomes.c.succeeded, outcomes.c.failure_kind, func.count(),
        func.sum(seconds) if seconds is not None else null(),
        func.coalesce(func.sum(outcomes.c.bytes_rewritten), 0),
        *(func.coalesce(func.sum(outcomes.c[column]), 0) for _, column, _ in FIGURE_COUNTERS),
    ).where(outcomes.c.finished_at > naive_as_utc(after), outcomes.c.finished_at <= naive_as_utc(until))
        .group_by(outcomes.c.operation, outcomes.c.succeeded, outcomes.c.failure_kind))
    with engine.connect() as connection:
        return [(op, bool(ok), kind, int(n), None if secs is None else float(secs), int(size or 0),
                 tuple(float(v or 0) for v in sums))
                for op, ok, kind, n, secs, size, *sums in connection.execute(query)]


class OutcomeTally:
    """The outcome counters: each read adds the outcomes finished since the previous read, up to
    ``LAG`` ago (a run records each table's outcome as it finishes; the lag covers the commit and the
    clocks of other hosts). Each outcome is counted once, and retention deleting old rows changes
    nothing. The first read only sets the start."""

    LAG = timedelta(seconds=60)

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one window at a time: concurrent scrapes never count one twice
        self._after: datetime | None = None
        self.timed = True  # False on a database whose durations this cannot compute in SQL
        self.totals: dict[Key, float] = {}
        for op in ALL_OPERATIONS:  # every series from the start, so increase() sees the first one
            name = operation_label(op.value)
            for status in ("succeeded", "failed", CONFLICT):
                self.totals[("floe_operation_executions_total", (name, status))] = 0.0
            self.totals[("floe_operation_conflicts_total", (name,))] = 0.0
            for sample in ("floe_operation_duration_seconds_count", "floe_operation_duration_seconds_sum",
                           "floe_bytes_rewritten_total", *(name + "_total" for name, _, _ in FIGURE_COUNTERS)):
                self.totals[(sample, (name,))] = 0.0
            for kind in ("error", LOCK_HELD, OUTAGE):
                self.totals[("floe_operation_failures_total", (name, kind))] = 0.0

    def read(self, engine: Engine, now: datetime) -> dict[Key, float]:
        until = now - self.LAG
        with self._lock:
            if self._after is None:  # the first read: the table can be read (no row is)
                with engine.connect() as connection:
                    connection.execute(select(outcomes.c.run_id).limit(0)).all()
            elif until > self._after:
                for op, succeeded, kind, n, seconds, size, sums in outcome_totals(engine, self._after, until):
                    self._add(operation_label(op), succeeded, kind, n, seconds, size)
                    for (name, _, _), amount in zip(FIGURE_COUNTERS, sums):
                        key = (name + "_total", (operation_label(op),))
                        self.totals[key] = self.totals.get(key, 0.0) + amount
            if self._after is None or until > self._after:
                self._after = until
            return dict(self.totals)

    def _add(self, operation: str, succeeded: bool, kind: str | None, n: int, seconds: float | None,
             size: int) -> None:
        totals = self.totals
        conflict = not succeeded and kind == CONFLICT  # a lost commit race: no failure (no backoff)
        status = "succeeded" if succeeded else CONFLICT if conflict else "failed"
        for key, amount in (
            (("floe_operation_executions_total", (operation, status)), n),
            (("floe_operation_duration_seconds_count", (operation,)), n),
            (("floe_operation_duration_seconds_sum", (operation,)), seconds or 0.0),
            (("floe_bytes_rewritten_total", (operation,)), size),
        ):
            totals[key] = totals.get(key, 0.0) + amount
        if conflict:
            key = ("floe_operation_conflicts_total", (operation,))
            totals[key] = totals.get(key, 0.0) + n
        elif not succeeded:
            key = ("floe_operation_failures_total", (operation, kind or "error"))
            totals[key] = totals.get(key, 0.0) + n
        self.timed = self.timed and (seconds is not None or n == 0)
