"""Retention: Dagster OSS keeps every run forever, and the ledger and outcome tables grow with every
run. After ``maintenance.retention-days`` the debt-score sensor deletes floe's own finished runs
(with their event logs) and their ledger and outcome rows, at most once a day per scope.

Never deleted: what the planner still needs. The planner reads the history table (the fold of every
outcome: last run, last success, failure and zero-change streaks), which is never pruned; the ledger's
last 8 days (the attempt numbers of recent slots) and the last hour's outcomes (the byte budget) are
kept whatever the setting.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.runs import is_floe_run
from floe_dagster.scheduling.inputs import LEDGER_LOOKBACK

log = logging.getLogger(__name__)

PRUNE_EVERY = timedelta(days=1)
MIN_OUTCOME_AGE = timedelta(hours=1)  # the byte budget's rolling hour
FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
RUNS_PER_PRUNE = 1000  # a tick deletes at most this many runs; the rest go at the next prune
LAST_PRUNE_KEY = "floe/retention-last-prune/"


@dataclass(frozen=True)
class Pruned:
    runs: int
    outcome_rows: int
    ledger_rows: int

    def summary(self) -> str:
        return (f"retention: deleted {self.runs} run(s), {self.outcome_rows} outcome and {self.ledger_rows} "
                "ledger row(s)")


def prune(instance: DagsterInstance, coordination: Coordination, now: datetime, days: int,
          time_budget_s: float = 20.0) -> Pruned:
    """Delete floe's finished runs that ended more than ``days`` ago, then the outcome and ledger rows
    older than that (the ledger's last 8 days and the last hour's outcomes are kept whatever ``days``)."""
    cutoff = now - timedelta(days=days)
    started = time.monotonic()
    deleted = 0
    records = instance.get_run_records(
        filters=RunsFilter(statuses=FINISHED, updated_before=cutoff), limit=RUNS_PER_PRUNE, ascending=True)
    for record in records:
        run = record.dagster_run
        if not is_floe_run(run.job_name, run.tags):
            continue
        if record.end_time is not None and datetime.fromtimestamp(record.end_time, timezone.utc) >= cutoff:
            continue
        instance.delete_run(run.run_id)
        deleted += 1
        if time.monotonic() - started > time_budget_s:
            break
    outcome_rows, ledger_rows = coordination.prune(min(cutoff, now - MIN_OUTCOME_AGE),
                                                   min(cutoff, now - LEDGER_LOOKBACK))
    return Pruned(deleted, outcome_rows, ledger_rows)


def prune_if_due(instance: DagsterInstance, coordination: Coordination, now: datetime,
                 days: int, shard: str) -> Pruned | None:
    """:func:`prune` at most once a day per shard (the last prune is kept in the instance); None when
    retention is off (0 days) or not due yet."""
    if days <= 0:
        return None
    key = LAST_PRUNE_KEY + shard
    last = instance.run_storage.get_cursor_values({key}).get(key)
    if last and now - datetime.fromisoformat(last) < PRUNE_EVERY:
        return None
    instance.run_storage.set_cursor_values({key: now.isoformat()})
    pruned = prune(instance, coordination, now, days)
    log.info(pruned.summary())
    return pruned
