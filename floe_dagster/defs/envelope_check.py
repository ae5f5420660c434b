"""The safety envelope in a maintenance run's first step, before any engine call (core/envelope.py).

A policy was checked when it was read, but the files can change between that check and the run, and an
absolute location can only be compared with the table's location, which the run reads here from the
table's metadata. A refusal fails this table's run (:class:`~floe_dagster.errors.EnvelopeViolation`,
naming the policy, the field, the location given and the table's) and nothing is called; otherwise the
run goes on with its locations spelled from the table's own, the form Iceberg then lists.
"""

from __future__ import annotations

from dataclasses import replace

from pyiceberg.catalog import Catalog

from floe_dagster.core.envelope import check_operation, named_locations
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.errors import EnvelopeViolation
from floe_dagster.iceberg.catalog import load_table
from floe_dagster.policies import ResolvedOperation


def within_envelope(catalog: Catalog, table: TableName, op: Operation, resolved: ResolvedOperation
                    ) -> ResolvedOperation:
    """``resolved`` with its locations spelled from the table's, or EnvelopeViolation. The table's location
    is read only when the config names a location (most runs cost nothing here)."""
    config = resolved.config
    location = load_table(catalog, table).location() if named_locations(op, config) else None
    verdict = check_operation(resolved.policy_name, op, config, location, resolved.allowed_properties,
                              table.qualified)
    if not verdict.ok:
        raise EnvelopeViolation(verdict.message())
    return replace(resolved, config=verdict.config)
