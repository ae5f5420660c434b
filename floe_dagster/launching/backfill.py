"""``floe-dagster backfill``: queue one run per matching table for the daemon, tagged
``floe/trigger=backfill`` and below scheduled work in priority."""

from __future__ import annotations

import uuid

from dagster import DagsterInstance

from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.core import run_tags as T
from floe_dagster.policies import matching_tables, resolve_operation
from floe_dagster.settings import Settings


def queue_backfill(
    settings: Settings, pattern: str, operation: str, *, dry_run: bool, actor: str, reason: str,
    instance: DagsterInstance | None = None,
) -> list[tuple[TableName, str | None]]:
    from floe_dagster.defs.build import MAINTENANCE_JOB
    from floe_dagster.launching.submit import RunToSubmit, submit_runs
    from floe_dagster.instance import get_instance
    from floe_dagster.defs.names import asset_key_for

    op = Operation.parse(operation)
    tables = matching_tables(pattern, list_tables(open_catalog(settings.catalog)))
    if not tables:
        raise LookupError(f"no table matches {pattern!r}")
    if dry_run:
        return [(table, None) for table in tables]
    instance = instance or get_instance()
    backfill_id = str(uuid.uuid4())
    runs = []
    for table in tables:
        resolved = resolve_operation(settings, table, op)
        tags = T.operator_run_tags(table, op, resolved.policy_name, resolved.policy_version, "backfill", reason, actor,
                                   backfill_id)
        runs.append(RunToSubmit(asset_key_for(table), op.value, tags))
    run_ids = submit_runs(instance, runs, MAINTENANCE_JOB)
    return list(zip(tables, run_ids))
