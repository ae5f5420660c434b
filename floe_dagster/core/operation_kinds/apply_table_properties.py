"""APPLY_TABLE_PROPERTIES: the Iceberg table properties a policy declares (``tableProperties``: property
name → value, core/facts/table_properties.py checks both) set in one metadata commit; not a procedure. Its
due condition is its own: the table's drift from the declaration, in place of the policy's thresholds
(without drift it is skipped ``no_drift``). The safety envelope refuses the properties that reach beyond
maintenance (core/policies/envelope.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operation_kinds.spec import DueVerdict, ExplainView, OperationSpec
from floe_dagster.core.facts.table_properties import parse_table_properties, property_drift
from floe_dagster.core.basics.validation import Location

if TYPE_CHECKING:
    from floe_dagster.core.facts.measurements import TableMetrics

NO_DRIFT = "No table property drift"  # Floe's style of unmet condition, for the trigger status


@dataclass(frozen=True)
class TablePropertiesConfig(OperationConfig):
    """``tableProperties``: Iceberg table property names → values; the properties the table should have,
    and the only ones the operation ever sets."""

    properties: tuple[tuple[str, str], ...] = ()  # (name, value as Iceberg stores it), the policy's order

    def to_json(self) -> dict[str, object]:
        return dict(self.properties)

    def properties_to_set(self) -> tuple[tuple[str, str], ...]:
        return self.properties


def _parse(at: Location, raw: object) -> TablePropertiesConfig | None:
    declared = parse_table_properties(at, raw)
    return TablePropertiesConfig(declared) if declared is not None else None


def _drift(config: TablePropertiesConfig, metrics: TableMetrics | None) -> DueVerdict:
    """Due while the table's properties differ from the declared ones (read with the table's health)."""
    if metrics is None:
        return DueVerdict(False, "no_health", "the table's properties have not been read yet (no health collected)")
    drift = property_drift(config.properties, metrics.properties)
    if not drift:
        return DueVerdict(False, "no_drift", f"the table has the {len(config.properties)} declared table properties",
                          floe_unmet=(NO_DRIFT,))
    return DueVerdict(True, detail=f"table property drift: {'; '.join(d.describe() for d in drift)}",
                      floe_met=tuple(f"Table property drift: {d.describe()}" for d in drift), facts=tuple(drift))


def _explain(view: ExplainView) -> dict[str, object]:
    """``propertyDrift``: the declared properties whose table value differs (declared against current),
    from the health the plan used; None when the table's health (its properties) has not been collected."""
    if view.metrics is None or view.config is None:
        return {"propertyDrift": None}
    return {"propertyDrift": [d.to_json() for d in property_drift(view.config.properties, view.metrics.properties)]}


class ApplyTableProperties(OperationSpec):
    name = "APPLY_TABLE_PROPERTIES"
    policy_key = "tableProperties"
    procedure = "alter_table_set_tblproperties"
    order = 70
    config_type = TablePropertiesConfig
    no_change = "`APPLY_TABLE_PROPERTIES` changed nothing when the table already had every declared property."
    docs_row = (
        "| `APPLY_TABLE_PROPERTIES` | none: one metadata commit (PyIceberg), as `ALTER TABLE … SET TBLPROPERTIES` "
        "would | `tableProperties`: Iceberg table property → value (see below and [Policies](policies.md), \"Table "
        "properties\") |")

    def parse(self, at: Location, raw: object) -> TablePropertiesConfig | None:
        return _parse(at, raw)

    def due(self, config: TablePropertiesConfig, metrics: TableMetrics | None) -> DueVerdict:
        return _drift(config, metrics)

    def due_rule(self) -> str:
        return "when the table drifts from the declared properties"

    def explain(self, view: ExplainView) -> dict[str, object]:
        return _explain(view)


SPEC = ApplyTableProperties()
