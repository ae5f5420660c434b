"""APPLY_TABLE_PROPERTIES on one table: what a maintenance run does for the policy's ``tableProperties``.

Under the table lock, the table's properties are read again (a fresh PyIceberg load), so the values
before are exact and a table already in line is a run that changes nothing; then the drifted ones,
and only those, are set in one metadata commit that asserts every declared key still has the value
read (iceberg/property_commit.py: a writer that changed one meanwhile ends the run as a conflict),
and the table is read once more to check that they landed. A declared property that another writer
changed right after floe's commit is a conflict too. A property the policy does not name is never
written, so it cannot change. The materialization carries each declared key's value before and after.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue
from pyiceberg.catalog import Catalog

from floe_dagster.coordination.locks import Locks, table_lock_name
from floe_dagster.core.operation_config import TablePropertiesConfig
from floe_dagster.core.run_decision import RunDecision
from floe_dagster.core.table_properties import property_drift, same_value
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.table_metadata import table_metadata
from floe_dagster.errors import CommitConflict, MaintenanceFailed
from floe_dagster.iceberg.catalog import load_table, row_count, schema_columns
from floe_dagster.iceberg.property_commit import commit_table_properties
from floe_dagster.policies import ResolvedOperation
from floe_dagster.spark.procedures import set_properties_sql


def apply_table_properties(context: AssetExecutionContext, decision: RunDecision, resolved: ResolvedOperation,
                           locks: Locks, catalog: Catalog) -> MaterializeResult:
    table = decision.table
    config = resolved.config
    assert isinstance(config, TablePropertiesConfig)
    started = datetime.now(timezone.utc)
    statement = ""
    with locks.hold(table_lock_name(table)):
        before_table = load_table(catalog, table)  # read again under the lock: exact before-values
        before = dict(before_table.properties)
        drift = property_drift(config.properties, before)
        if drift:
            changes = {d.name: d.declared for d in drift}
            context.log.info(f"APPLY_TABLE_PROPERTIES on {table.qualified} (policy {resolved.policy_name}): "
                             + "; ".join(d.describe() for d in drift))
            # Asserting every declared key as read: a writer that changed one first makes it a CommitConflict.
            committed = commit_table_properties(before_table, table, changes,
                                                {name: before.get(name) for name, _ in config.properties})
            ours, ours_at = dict(committed.metadata.properties), committed.metadata_location
            statement = ("-- one metadata commit (PyIceberg), asserting the declared properties as read; as SQL:\n"
                         + set_properties_sql(table, changes))
            after_table = load_table(catalog, table)
        else:
            context.log.info(f"APPLY_TABLE_PROPERTIES on {table.qualified}: the table has every declared property")
            after_table = before_table
            ours, ours_at = before, before_table.metadata_location
    after = dict(after_table.properties)
    missed = [name for name, value in config.properties if not same_value(name, value, after.get(name))]
    if missed:
        if after_table.metadata_location != ours_at and \
                all(same_value(name, value, ours.get(name)) for name, value in config.properties):
            raise CommitConflict(
                f"APPLY_TABLE_PROPERTIES on '{table.qualified}' lost a race: floe's commit set every declared property, "
                f"then another writer changed {', '.join(missed)} (now "
                f"{', '.join(f'{name}={_shown(after.get(name))}' for name in missed)}); a later run reads them again")
        raise MaintenanceFailed(f"table '{table.qualified}': after setting the declared properties, {', '.join(missed)} "
                                "still differ(s) from the policy in the metadata floe committed")
    changes_json = {name: {"before": before.get(name), "after": after.get(name)} for name, _ in config.properties}
    current = after_table.current_snapshot()
    metadata: dict[str, Any] = {
        "changed": bool(drift),
        "bytes_rewritten": 0,
        "properties_declared": len(config.properties),
        "properties_set": len(drift),
        "property_changes": MetadataValue.json(changes_json),
        **{f"property {name}": MetadataValue.text(f"{_shown(before.get(name))} -> {_shown(after.get(name))}")
           for name, _ in config.properties},
        "duration_s": round((datetime.now(timezone.utc) - started).total_seconds(), 3),
        "snapshot_id": MetadataValue.text(str(current.snapshot_id) if current else ""),
        "policy": resolved.policy_name or "",
        "policy_version": resolved.policy_version,
        **decision.metadata(),
        "statement": MetadataValue.md(f"```sql\n{statement or '-- nothing to set: no drift'}\n```"),
    }
    metadata.update(table_metadata(table.qualified, after_table.location(), row_count(current),
                                   schema_columns(after_table.schema())))
    return MaterializeResult(asset_key=asset_key_for(table), metadata=metadata)


def _shown(value: str | None) -> str:
    return "unset" if value is None else value
