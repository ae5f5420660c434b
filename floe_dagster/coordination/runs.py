"""What the Dagster instance says about maintenance runs: the ones in flight, and the dead ones.

With the default run launcher, run monitoring cannot see a dead run worker: a killed run stays
STARTED forever. Every maintenance run holds its run lock (``floe-run:<run id>``) for its whole
life, so a STARTED run whose run lock is free has lost its process; the next tick marks it failed
and records the failure, and the table is not stuck.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation

# Waiting in the run queue (``max-queued-runs`` counts these), then in flight until they finish.
QUEUED_STATUSES = (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED)
IN_FLIGHT_STATUSES = [*QUEUED_STATUSES, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
# A run needs a moment between STARTED and taking its run lock (imports, resources).
DEAD_RUN_GRACE = timedelta(minutes=2)


def run_lock_name(run_id: str) -> str:
    return f"floe-run:{run_id}"


@dataclass(frozen=True)
class RunInFlight:
    run_id: str
    table_names: tuple[str, ...]  # the qualified names of the tables it maintains (a batch: several)
    operation: Operation | None
    status: DagsterRunStatus
    start_time: datetime | None
    tags: dict[str, str]


def active_run_records(instance: DagsterInstance) -> list:
    """Every queued or running run of the instance, floe's and the user's: one query."""
    return list(instance.get_run_records(filters=RunsFilter(statuses=IN_FLIGHT_STATUSES)))


def runs_in_flight(instance: DagsterInstance, records: Iterable | None = None) -> list[RunInFlight]:
    """Every queued or running floe run (of ``records`` when the caller read them): one query, whatever the
    number of tables."""
    records = active_run_records(instance) if records is None else records
    found = []
    for record in records:
        run = record.dagster_run
        tags = dict(run.tags)
        if not is_floe_run(run.job_name, tags):
            continue
        operation = tags.get(T.OPERATION) or _partition_of(tags)
        found.append(RunInFlight(
            run_id=run.run_id,
            table_names=_tables_of(run.asset_selection, tags),
            operation=Operation(operation) if operation in Operation._value2member_map_ else None,
            status=run.status,
            start_time=datetime.fromtimestamp(record.start_time, timezone.utc) if record.start_time else None,
            tags=tags,
        ))
    return found


def is_floe_run(job_name: str, tags: Mapping[str, str]) -> bool:
    """A run that maintains tables: it carries floe's tags, or belongs to floe's jobs (a run started
    from Dagit gets the tags only once its step starts)."""
    return T.OPERATION in tags or job_name.startswith("floe")


def _partition_of(tags: dict[str, str]) -> str | None:
    return tags.get("dagster/partition")


def _tables_of(asset_selection: Iterable[AssetKey] | None, tags: dict[str, str]) -> tuple[str, ...]:
    """The tables a run maintains: its asset selection (an asset key is [catalog, *namespace, table],
    so its path joined is the qualified name), else its floe/table tag."""
    if asset_selection:
        return tuple(sorted(".".join(key.path) for key in asset_selection if len(key.path) >= 3))
    return (tags[T.TABLE],) if tags.get(T.TABLE) else ()


def mark_dead_runs(
    instance: DagsterInstance,
    coordination: Coordination,
    in_flight: list[RunInFlight],
    now: datetime,
) -> list[str]:
    """Mark failed each STARTED run whose process is gone (its run lock is free); return their ids."""
    dead = []
    for run in in_flight:
        if run.status != DagsterRunStatus.STARTED or run.start_time is None:
            continue
        if now - run.start_time < DEAD_RUN_GRACE:
            continue
        if not coordination.locks.is_free(run_lock_name(run.run_id)):
            continue
        dagster_run = instance.get_run_by_id(run.run_id)
        if dagster_run is None or dagster_run.status != DagsterRunStatus.STARTED:
            continue
        instance.report_run_failed(
            dagster_run, message="floe-dagster: the run's process is gone (its run lock is free); marked failed"
        )
        # Each table the run had not finished (recording a finished one again is a no-op).
        for table_name in run.table_names if run.operation else ():
            coordination.record_outcome(Outcome(
                run_id=run.run_id, table_name=table_name, operation=run.operation,
                trigger=run.tags.get(T.TRIGGER, ""), started_at=run.start_time, finished_at=now, succeeded=False,
                message="the run's process died",
            ))
        dead.append(run.run_id)
    return dead
