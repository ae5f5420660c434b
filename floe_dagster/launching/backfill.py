"""``floe-dagster backfill``: one operation on every table matching a pattern (a namespace is
``catalog.namespace.*``), tagged ``floe/trigger=backfill`` (below scheduled work in priority) with a
shared trigger id (run tag ``dagster/floe.trigger-id``), in one of two shapes:

- :func:`queue_backfill`: one queued run per table, each with the tags of a run of one table;
- :func:`launch_dagster_backfill`: one Dagster backfill of the maintenance job restricted to the
  tables' assets, which the daemon turns into one run maintaining them all (each under its own
  lock), much as Dagit's *Materialize* of an asset group does. It replaces the per-namespace jobs,
  which cost every load of the code location more than they saved (benchmarks/README.md, section
  6). A backfill of the job rather than a pure asset backfill: the job leaves out the health
  checks, which Dagster would otherwise add to the runs of the selected assets.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from dagster import DagsterInstance

from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_tags import Origin, tables_run_tags
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.instance import get_instance
from floe_dagster.launching.submit import (
    LOCATION_NAME,
    REPOSITORY_NAME,
    RunToSubmit,
    code_location_context,
    run_mutation,
    submit_runs,
)
from floe_dagster.policies import matching_tables, resolve_operation, run_tags_for
from floe_dagster.settings import Settings

# Dagster's name for the partition set of a partitioned job (RemotePartitionSet of ``<job>``).
MAINTENANCE_PARTITION_SET = f"{MAINTENANCE_JOB}_partition_set"

LAUNCH_BACKFILL = """
mutation($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on Error { message }
  }
}
"""


def backfill_tables(settings: Settings, pattern: str) -> list[TableName]:
    """The catalog's tables matching the pattern; a LookupError when none does."""
    tables = matching_tables(pattern, list_tables(open_catalog(settings.catalog)))
    if not tables:
        raise LookupError(f"no table matches {pattern!r}")
    return tables


def queue_backfill(
    settings: Settings, pattern: str, operation: str, *, dry_run: bool, actor: str, reason: str,
    instance: DagsterInstance | None = None,
) -> list[tuple[TableName, str | None]]:
    op = Operation.parse(operation)
    tables = backfill_tables(settings, pattern)
    if dry_run:
        return [(table, None) for table in tables]
    origin = Origin("backfill", reason, actor, trigger_id=str(uuid.uuid4()))
    runs = [RunToSubmit(asset_key_for(table), op.value, run_tags_for(settings, table, op, origin)) for table in tables]
    run_ids = submit_runs(instance or get_instance(), runs, MAINTENANCE_JOB)
    return list(zip(tables, run_ids))


@dataclass(frozen=True)
class DagsterBackfill:
    backfill_id: str | None  # None for a dry run
    operation: Operation
    tables: list[TableName]


def launch_dagster_backfill(
    settings: Settings, pattern: str, operation: str, *, dry_run: bool, actor: str, reason: str,
    instance: DagsterInstance | None = None,
) -> DagsterBackfill:
    """One Dagster backfill of the operation's partition of ``floe_maintenance`` over the matching
    tables' assets, launched as Dagit launches one (GraphQL ``launchPartitionBackfill`` against the
    loaded code location); the daemon creates its run."""
    op = Operation.parse(operation)
    tables = backfill_tables(settings, pattern)
    if dry_run:
        return DagsterBackfill(None, op, tables)
    origin = Origin("backfill", reason, actor, trigger_id=str(uuid.uuid4()))
    # The run's tags, as a run over these tables gets them (defs/assets.py adds any missing at start).
    tags = tables_run_tags(tables, op, origin, lambda table: resolve_operation(settings, table, op).policy)
    params = {
        "selector": {
            "partitionSetName": MAINTENANCE_PARTITION_SET,
            "repositorySelector": {"repositoryLocationName": LOCATION_NAME, "repositoryName": REPOSITORY_NAME},
        },
        "partitionNames": [op.value],
        "assetSelection": [{"path": list(asset_key_for(t).path)} for t in tables],
        "tags": [{"key": k, "value": v} for k, v in tags.items()],
        "title": f"floe {op.value} backfill",  # Dagster allows 100 characters
        "description": f"{op.value} on {len(tables)} table(s) matching {pattern!r}: {reason}",
    }
    with code_location_context(instance or get_instance()) as context:
        missing = [t.qualified for t in tables if not context.asset_graph.has(asset_key_for(t))]
        if missing:
            raise LookupError(
                f"{len(missing)} matching table(s) are not in the code location's table list: "
                f"{', '.join(missing[:10])}{' …' if len(missing) > 10 else ''}; "
                "run `floe-dagster tables --refresh` and reload the code location")
        payload = asyncio.run(run_mutation(context, LAUNCH_BACKFILL, {"backfillParams": params},
                                           "launchPartitionBackfill", "LaunchBackfillSuccess"))
    return DagsterBackfill(payload["backfillId"], op, tables)
