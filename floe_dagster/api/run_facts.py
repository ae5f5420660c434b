"""One run as the HTTP API reports it: Floe's status, times, each table's numbers and the error,
read from the run's record and its events (launching/trigger_runs.py reads the outcome)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from dagster import DagsterInstance, DagsterRunStatus

from floe_dagster.launching.trigger_runs import RESULT_EVENTS, run_outcome

FLOE_STATUS = {
    DagsterRunStatus.QUEUED: "PENDING",
    DagsterRunStatus.NOT_STARTED: "PENDING",
    DagsterRunStatus.MANAGED: "PENDING",
    DagsterRunStatus.STARTING: "RUNNING",
    DagsterRunStatus.STARTED: "RUNNING",
    DagsterRunStatus.CANCELING: "RUNNING",
    DagsterRunStatus.SUCCESS: "SUCCEEDED",
    DagsterRunStatus.FAILURE: "FAILED",
    DagsterRunStatus.CANCELED: "CANCELLED",
}
# The Dagster statuses of each of Floe's (the inverse of FLOE_STATUS).
DAGSTER_STATUSES = {
    floe: [dagster for dagster, ours in FLOE_STATUS.items() if ours == floe]
    for floe in dict.fromkeys(FLOE_STATUS.values())
}


def numbers(metadata: dict[str, object]) -> dict[str, float | int | bool]:
    """A materialization's numbers (int, float, bool), the values Dagit plots."""
    out: dict[str, float | int | bool] = {}
    for name, value in metadata.items():
        if isinstance(value, bool) or isinstance(value, int):
            out[name] = value
        elif isinstance(value, float) and math.isfinite(value):
            out[name] = value
    return out


@dataclass
class RunFacts:
    """One run as the API reports it."""

    run_id: str
    job_name: str
    tags: dict[str, str]
    dagster_status: DagsterRunStatus
    created: datetime | None
    start: float | None
    end: float | None
    tables: dict[str, dict[str, float | int | bool]] = field(default_factory=dict)
    error: str | None = None
    # Tables whose commit lost a race with another writer (outcome ``conflict``), with the message
    # naming the commit that won; neither maintained (no materialization) nor failed.
    conflicts: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return FLOE_STATUS.get(self.dagster_status, "PENDING")

    @property
    def duration_ms(self) -> int | None:
        return int(round((self.end - self.start) * 1000)) if self.start is not None and self.end is not None else None


def run_facts(instance: DagsterInstance, record) -> RunFacts:
    run = record.dagster_run
    facts = RunFacts(run.run_id, run.job_name, dict(run.tags), run.status, record.create_timestamp,
                     record.start_time, record.end_time)
    if run.status in (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED):
        return facts
    entries = instance.all_logs(run.run_id, of_type=set(RESULT_EVENTS))
    outcome = run_outcome(entry.dagster_event for entry in entries if entry.dagster_event is not None)
    facts.tables = {name: numbers(metadata) for name, metadata in outcome.tables.items()}
    facts.conflicts = dict(outcome.conflicts)
    if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
        facts.error = outcome.error or ("the run failed" if run.status == DagsterRunStatus.FAILURE
                                        else "the run was cancelled")
    return facts
