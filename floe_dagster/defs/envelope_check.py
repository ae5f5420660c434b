"""The safety envelope in a maintenance run's first step, before any engine call (core/policies/envelope.py).

A policy was checked when it was read, but the files can change between that check and the run, and an
absolute location can only be compared with the table's location, which the run reads here from the
table's metadata. For a kind that lists, deletes or moves files, the table's own location (written by its
owner) is checked too, against the lake floe knows (core/storage/table_location.py, iceberg/known_locations.py).
A refusal fails this table's run (:class:`~floe_dagster.errors.EnvelopeViolation`, naming the policy,
the field, the location given and the table's) and nothing is called or listed; otherwise the run goes on
with its locations spelled from the table's own, the form Iceberg then lists.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from floe_dagster.core.policies.envelope import check_operation, named_locations, own_location_check
from floe_dagster.core.operations import Operation
from floe_dagster.core.storage.table_location import KnownLocations
from floe_dagster.errors import EnvelopeViolation
from floe_dagster.iceberg.catalog import TableReads
from floe_dagster.policies import ResolvedOperation


def within_envelope(reads: TableReads, op: Operation, resolved: ResolvedOperation,
                    known: Callable[[], KnownLocations] | None = None) -> ResolvedOperation:
    """``resolved`` with its locations spelled from the table's (and, for an orphan cleanup, the nested
    tables its listing leaves out), or EnvelopeViolation. The table's location is read only when the
    config names a location or the kind lists, deletes or moves files; ``known``: the lake around it,
    read once per run (None: the table's own location is not checked). ``reads``: the run's one read of the
    table, shared with its other steps before the lock."""
    table, config = reads.name, resolved.config
    checks_own = known is not None and op.needs_gc
    location = reads.latest.location() if named_locations(op, config) or checks_own else None
    own = own_location_check(table, op, config, location, known() if checks_own and known else None)
    verdict = check_operation(resolved.policy_name, op, config, location, resolved.allowed_properties,
                              table.qualified, own)
    if not verdict.ok:
        raise EnvelopeViolation(verdict.message())
    return replace(resolved, config=verdict.config, listing_exclusions=own.excluded if own else ())

