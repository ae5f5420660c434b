"""The demo's second code location, ``demo-pipelines``: the pipelines that write the demo tables, as a user's
own Dagster assets beside floe's (docs/beside-pipelines.md).

Each asset writes one demo table with PyIceberg (a few rows: the demo stays light) and names it the Dagster
way, ``dagster/table_name`` on its definition and on every materialization; floe's sensor learns the writer
from the materializations, so Dagit shows writer -> table maintenance and ``afterWrite`` schedules follow the
writes (examples/policies/sales.yaml). The job runs every three minutes, its schedule running by default while
the automation is on (``scheduler.enabled``). A writer retries a commit that lost its race with a maintenance
run, as a real pipeline would, and records the attempts in its materialization.

Importing this module opens no catalog: every run process imports it again.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

import pyarrow as pa
from dagster import (AssetKey, AssetSelection, DagsterInstance, DagsterRunStatus, DefaultScheduleStatus, Definitions,
                     MaterializeResult, RunRequest, RunsFilter, SkipReason, asset,
                     define_asset_job, in_process_executor, schedule)
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
from pyiceberg.table import Table

from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.demo import WRITERS_LOCATION, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.scheduling.writer_facts import learn_writers
from floe_dagster.settings import Settings, load_settings

log = logging.getLogger(__name__)

LOCATION_NAME = WRITERS_LOCATION
JOB_NAME = "demo_writes"
SCHEDULE_NAME = "demo_writes_every_3_minutes"
CRON = "*/3 * * * *"
GROUP = "demo_pipelines"
# The writers' own rows: ids far above the ones build_demo_lakehouse seeds, so a delete prunes by file stats.
LIVE_IDS = 10**12
EVENTS_KEPT = timedelta(minutes=15)
COMMIT_ATTEMPTS = 5
TABLE_NAME = "dagster/table_name"
WRITER_PRIORITY = "400"
IN_FLIGHT = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
             DagsterRunStatus.STARTED]


@dataclass(frozen=True)
class DemoWriter:
    key: tuple[str, ...]
    table: str  # in the demo catalog, without the catalog's name
    does: str
    write: Callable[[Table, int], dict]  # the table and a fresh id -> what it wrote (materialization metadata)


def _append(table: Table, start: int, region: str | None = None) -> dict:
    table.append(rows(start, 5, region))
    return {"appended_rows": 5}


def _append_and_delete(table: Table, start: int) -> dict:
    """Append a few events, then delete the writer's own events older than EVENTS_KEPT (copy-on-write: PyIceberg
    rewrites the few files the delete reaches)."""
    table.append(rows(start, 5))
    cutoff = datetime.now(timezone.utc) - EVENTS_KEPT
    with warnings.catch_warnings():  # nothing old enough yet: no commit, and no warning in every run's log
        warnings.filterwarnings("ignore", "Delete operation did not match any records")
        table.delete(And(GreaterThanOrEqual("id", LIVE_IDS), LessThan("at", cutoff.isoformat())))
    return {"appended_rows": 5, "deleted_before": cutoff.isoformat()}


def _upsert(table: Table, start: int) -> dict:
    """Two audit rows the demo seeded (ids 0..49) changed, one new row: an upsert on ``id``."""
    changed = rows(start, 3)
    ids = [start % 50, (start + 25) % 50, start]
    changed = changed.set_column(0, "id", pa.array(ids, pa.int64()))
    result = table.upsert(changed, join_cols=["id"])
    return {"updated_rows": result.rows_updated, "inserted_rows": result.rows_inserted}


WRITERS = (
    DemoWriter(("pipelines", "sales", "orders"), "sales.orders", "appends new orders", _append),
    DemoWriter(("pipelines", "sales", "events"), "sales.events", "appends events, deletes its own older than 15 min",
               _append_and_delete),
    DemoWriter(("pipelines", "ops", "audit_log"), "ops.audit_log", "upserts audit rows by id", _upsert),
    DemoWriter(("pipelines", "ops", "metrics"), "ops.metrics", "appends metrics to the 'eu' partition",
               lambda table, start: _append(table, start, "eu")),
)


def write_with_retries(settings: Settings, writer: DemoWriter, attempts: int = COMMIT_ATTEMPTS) -> dict:
    """One write of ``writer``, its commit retried (the table loaded again) when it lost a race with another
    commit, as a maintenance run's; the metadata says how many commits were refused."""
    catalog = open_catalog(settings.catalog)
    for attempt in range(attempts):
        try:
            written = writer.write(catalog.load_table(writer.table), LIVE_IDS + time.time_ns() // 1000)
            return {**written, "commit_races_lost": attempt}
        except CommitFailedException as exc:
            if attempt == attempts - 1:
                raise
            log.warning("%s: the commit to %s lost a race (%s); retrying", "/".join(writer.key), writer.table, exc)
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def table_name(settings: Settings, writer: DemoWriter) -> str:
    return f"{settings.catalog.name}.{writer.table}"


def _writer_asset(writer: DemoWriter, settings: Settings):
    name = table_name(settings, writer)

    @asset(key=AssetKey(list(writer.key)), group_name=GROUP, metadata={TABLE_NAME: name},
           description=f"The demo's pipeline that writes {name}: {writer.does} (PyIceberg).")
    def write_table(context) -> MaterializeResult:
        written = write_with_retries(load_settings(), writer)
        context.log.info("%s: %s", name, written)
        # On the materialization too: floe's sensor reads it there (it cannot see this location's definitions).
        return MaterializeResult(metadata={TABLE_NAME: name, **written})

    return write_table


def build_demo_writers(settings: Settings) -> Definitions:
    assets = [_writer_asset(writer, settings) for writer in WRITERS]
    # dagster/priority: when a run slot frees, the writers go before every floe run (its bands reach 390, manual
    # triggers: core/runs/run_tags.py): a queued writer run holds its tables' rewrites and expiries (writer_running).
    job = define_asset_job(JOB_NAME, selection=AssetSelection.groups(GROUP), executor_def=in_process_executor,
                           tags={"dagster/priority": WRITER_PRIORITY},
                           description="The demo's pipelines: a few rows appended, deleted and upserted.")
    status = DefaultScheduleStatus.RUNNING if settings.scheduler.enabled else DefaultScheduleStatus.STOPPED

    @schedule(name=SCHEDULE_NAME, job=job, cron_schedule=CRON, default_status=status,
              description="Writes the demo tables every three minutes (on with the automation), unless its last run "
                          "is still queued or running.")
    def every_three_minutes(context):
        # One write at a time: runs piling up in a busy queue would hold floe's maintenance of these tables
        # (writer_running) for as long as any of them waits.
        if context.instance.get_runs(RunsFilter(job_name=JOB_NAME, statuses=IN_FLIGHT), limit=1):
            return SkipReason(f"a {JOB_NAME} run is still queued or running")
        return RunRequest()

    return Definitions(assets=assets, jobs=[job], schedules=[every_three_minutes])


def first_writes(settings: Settings, instance: DagsterInstance) -> str | None:
    """At the demo's start, before Dagit loads floe's code location: when floe does not know every demo writer
    yet, run the writers once and let floe learn them from their materializations, as its sensor does, so the
    lineage shows from the first load. Returns the run id, or None when nothing was needed."""
    coordination = CoordinationResource.from_settings(settings).coordination
    known = coordination.writer_rows()
    if all(any(w.asset_key == writer.key for w in known.get(table_name(settings, writer), ()))
           for writer in WRITERS):
        return None
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the run's events are in Dagit
    result = build_demo_writers(settings).resolve_job_def(JOB_NAME).execute_in_process(run_config=quiet,
                                                                                       instance=instance)
    learn_writers(instance, coordination, read_cached_tables(settings) or [], settings.writers,
                  settings.catalog.name, None)
    return result.run_id


def start_demo_writers(settings: Settings) -> list[str]:
    """``floe-dagster demo``'s step before Dagit starts: the first writes when needed; what it says about them."""
    with DagsterInstance.get() as instance:
        run_id = first_writes(settings, instance)
    state = "on" if settings.scheduler.enabled else "off (scheduler.enabled is false)"
    return ([f"Demo pipelines: first writes in run {run_id}; floe learned their tables"] if run_id else []) + [
        f"Demo pipelines ({LOCATION_NAME}): schedule {SCHEDULE_NAME} ({CRON}) {state}"]


defs = build_demo_writers(load_settings())
