"""``floe-dagster backfill``: queue one run per matching table for the daemon, tagged
``floe/trigger=backfill`` (below scheduled work in priority) and sharing a ``floe/trigger-id``."""

from __future__ import annotations

import uuid

from dagster import DagsterInstance

from floe_dagster.core.operations import Operation
from floe_dagster.core.run_tags import Origin
from floe_dagster.core.tables import TableName
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.instance import get_instance
from floe_dagster.launching.submit import RunToSubmit, submit_runs
from floe_dagster.policies import matching_tables, run_tags_for
from floe_dagster.settings import Settings


def queue_backfill(
    settings: Settings, pattern: str, operation: str, *, dry_run: bool, actor: str, reason: str,
    instance: DagsterInstance | None = None,
) -> list[tuple[TableName, str | None]]:
    op = Operation.parse(operation)
    tables = matching_tables(pattern, list_tables(open_catalog(settings.catalog)))
    if not tables:
        raise LookupError(f"no table matches {pattern!r}")
    if dry_run:
        return [(table, None) for table in tables]
    origin = Origin("backfill", reason, actor, trigger_id=str(uuid.uuid4()))
    runs = [RunToSubmit(asset_key_for(table), op.value, run_tags_for(settings, table, op, origin)) for table in tables]
    run_ids = submit_runs(instance or get_instance(), runs, MAINTENANCE_JOB)
    return list(zip(tables, run_ids))
