"""APPLY_TABLE_PROPERTIES in a run: not a procedure, so no engine call. Under the table lock, the
table's properties are read again (a fresh PyIceberg load), so the values before are exact and a table
already in line is a run that changes nothing; then the drifted ones, and only those, are set in one
metadata commit that asserts every declared key still has the value read (iceberg/property_commit.py: a
writer that changed one meanwhile ends the run as a conflict), and the table is read once more to check
that they landed. A declared property that another writer changed right after floe's commit is a
conflict too. A property the policy does not name is never written, so it cannot change. The
materialization carries each declared key's value before and after."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Mapping

from floe_dagster.core.operation_kinds.apply_table_properties import TablePropertiesConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.facts.table_properties import PropertyDrift, property_drift, same_value
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import CommitConflict, MaintenanceFailed, ProcedureOptionError
from floe_dagster.iceberg.catalog import load_table
from floe_dagster.iceberg.property_commit import commit_table_properties
from floe_dagster.spark.operation_steps.step import OperationStep, TableWork, as_json, as_markdown, as_text
from floe_dagster.spark.procedures import ProcedureCall, spark_table_reference
from floe_dagster.spark.sql_literals import quote_literal

if TYPE_CHECKING:
    from pyiceberg.table import Table


KIND = "APPLY_TABLE_PROPERTIES"


def set_properties_sql(table: TableName, properties: Mapping[str, str]) -> str:
    """``ALTER TABLE ... SET TBLPROPERTIES``: one metadata commit (Iceberg's UpdateProperties) setting
    exactly these properties and no other; names and values only as escaped string literals."""
    if not properties:
        raise ProcedureOptionError(f"{Operation(KIND).policy_key}: no table properties to set")
    pairs = ", ".join(f"{quote_literal(name)} = {quote_literal(value)}" for name, value in properties.items())
    return f"ALTER TABLE {spark_table_reference(table)} SET TBLPROPERTIES ({pairs})"


@dataclass(frozen=True)
class _Applied:
    before: dict[str, str]  # the table's properties as read under the lock
    drift: tuple[PropertyDrift, ...]  # the declared ones that differed: the ones set
    after_table: Table  # the table read after the commit (before it, without drift)
    ours: dict[str, str]  # the properties floe's commit left
    ours_at: str  # the metadata file floe's commit wrote (or read)
    statement: str


class ApplyTablePropertiesStep(OperationStep):
    kind = KIND
    uses_engine = False

    def render_call(self, op: Operation, table: TableName, config: TablePropertiesConfig, now: datetime,
                    table_properties: Mapping[str, str] | None = None, file_io: str | None = None,
                    **unused: object) -> ProcedureCall:
        """Not a CALL: the statement setting every declared property (what the run sends when every key drifts)."""
        declared = dict(config.properties)
        return ProcedureCall(op, table, set_properties_sql(table, declared), arguments=declared)

    def commit(self, work: TableWork) -> _Applied:
        table, config = work.table, work.config
        before_table = load_table(work.catalog, table)  # read again under the lock: exact before-values
        before = dict(before_table.properties)
        drift = tuple(property_drift(config.properties, before))
        if not drift:
            work.log.info(f"{KIND} on {table.qualified}: the table has every declared property")
            return _Applied(before, drift, before_table, before, before_table.metadata_location, "")
        changes = {d.name: d.declared for d in drift}
        work.log.info(f"{KIND} on {table.qualified} (policy {work.resolved.policy_name}): "
                      + "; ".join(d.describe() for d in drift))
        # Asserting every declared key as read: a writer that changed one first makes it a CommitConflict.
        committed = commit_table_properties(before_table, table, changes,
                                            {name: before.get(name) for name, _ in config.properties})
        statement = ("-- one metadata commit (PyIceberg), asserting the declared properties as read; as SQL:\n"
                     + set_properties_sql(table, changes))
        return _Applied(before, drift, load_table(work.catalog, table), dict(committed.metadata.properties),
                        committed.metadata_location, statement)

    def finish(self, work: TableWork, applied: _Applied) -> tuple[dict[str, object], Table]:
        """Every declared property landed (else a conflict, or a failure), and each one's value before and after."""
        table, declared = work.table, work.config.properties
        after_table, before = applied.after_table, applied.before
        after = dict(after_table.properties)
        missed = [name for name, value in declared if not same_value(name, value, after.get(name))]
        if missed:
            if after_table.metadata_location != applied.ours_at and \
                    all(same_value(name, value, applied.ours.get(name)) for name, value in declared):
                raise CommitConflict(
                    f"{KIND} on '{table.qualified}' lost a race: floe's commit set every declared property, then "
                    f"another writer changed {', '.join(missed)} (now "
                    f"{', '.join(f'{name}={_shown(after.get(name))}' for name in missed)}); a later run reads them "
                    "again")
            raise MaintenanceFailed(f"table '{table.qualified}': after setting the declared properties, "
                                    f"{', '.join(missed)} still differ(s) from the policy in the metadata floe "
                                    "committed")
        changes = {name: {"before": before.get(name), "after": after.get(name)} for name, _ in declared}
        metadata: dict[str, object] = {
            "changed": bool(applied.drift),
            "bytes_rewritten": 0,
            "properties_declared": len(declared),
            "properties_set": len(applied.drift),
            "property_changes": as_json(changes),
            **{f"property {name}": as_text(f"{_shown(before.get(name))} -> {_shown(after.get(name))}")
               for name, _ in declared},
            "statement": as_markdown(f"```sql\n{applied.statement or '-- nothing to set: no drift'}\n```"),
        }
        return metadata, after_table


def _shown(value: str | None) -> str:
    return "unset" if value is None else value


STEP = ApplyTablePropertiesStep()
