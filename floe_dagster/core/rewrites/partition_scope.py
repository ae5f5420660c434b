"""Partition-scoped rewrites: what a ``rewrite_data_files`` run takes when the whole table's rewrite
exceeds what the run may rewrite (docs/automation.md, "Large tables: partition-scoped rewrites"), so
that the bytes it rewrites stay within the cap by construction.

Pure (no PyIceberg, Spark or Dagster). The inputs are the full health tier's files per (spec id,
partition) (:attr:`~floe_dagster.core.facts.measurements.TableMetrics.data_file_groups`), the table's
partition specs, and Iceberg's planner rules (core/rewrites/estimates.py).

*Units.* A scope selects by a ``where`` on partition source columns, which Iceberg evaluates on every
file of every spec (core/rewrites/scope_predicates.py). Only the current spec's fields that every spec with
live files refines can select exactly; the files are grouped into *units* by those fields' values (a
file of an older spec by the value its own fields decide). With no such field (a bucket-only spec, or
files of an older spec without a field on the column, such as an unpartitioned table that gained a
partition field), the whole table is one unit, selected without a ``where``.

*Charges.* A unit's charge is an upper bound of what Iceberg rewrites of it, whatever else is chosen:
a partition of the current spec is a rewrite group of its own, so its files that Iceberg's bin-pack
takes (all of them or none when they make one bin, the usual case; every file the size and delete rules
pick when they make several); files of older specs and of the current all-null partition form one
rewrite group together, so each unit's share of it is charged with every file the size and delete rules
pick (the group may pass the group rules only with the other units' files).

*The choice,* in order: (1) whole units by benefit per byte (data files removed plus delete files
applied, per byte), as many as fit in the cap, at most :data:`MAX_SCOPED_PARTITIONS`; (2a) with no
fields because older specs lack one (a table partitioned after the fact), staged
(core/rewrites/older_specs.py): the current spec's partitions whole, the older specs' files left out by
their size, then the older specs' files alone, by their own where or by Iceberg's file rules, whole or
by a count of their own largest files, so what earlier runs wrote into the current spec never sizes or
joins them; (2) when no unit fits, the best unit (or the whole table) with ``max-files-to-rewrite`` =
the most files whose largest ones fit in the cap, at least two (Iceberg takes the first files of the
groups it keeps, so the bytes are at most the largest); (3) when not even two files fit, the smallest
such step runs alone, over the cap, and says so. A unit is only taken when Iceberg's bin-pack would
rewrite some of it, so every run makes progress and the backlog drains.

Whatever is not chosen is the *backlog* (units and bytes): the next tick plans it as new work of the
same slot (core/plan/gate_chains.py, the backlog turn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.rewrites.older_specs import (  # noqa: F401 (where callers have always found them)
    OlderSpecs as OlderSpecs,
    current_spec_first,
    older_specs_by_count,
    older_specs_selection,
    older_specs_unit as older_specs_unit,
)
from floe_dagster.core.rewrites.scope_units import (  # noqa: F401 (where callers have always found them)
    MAX_SCOPED_PARTITIONS as MAX_SCOPED_PARTITIONS,
    ScopeUnit as ScopeUnit,
    files_within,
    ranked,
    scope_units,
    select_units,
)
from floe_dagster.core.rewrites.scope_values import (  # the values, where callers have always found them
    Backlog as Backlog,
    PartitionField as PartitionField,
    PartitionSelection,
    RewriteScope as RewriteScope,
)

if TYPE_CHECKING:  # pragma: no cover
    from floe_dagster.core.facts.measurements import TableMetrics


def plan_scope(metrics: "TableMetrics", rules: RewriteRules, cap: int,
               limit: int = MAX_SCOPED_PARTITIONS, older_first: bool = False) -> PartitionSelection | None:
    """What a rewrite capped at ``cap`` bytes takes (see the module's doc); None without the full
    tier, when Iceberg would rewrite nothing, or when all it may rewrite fits (no scope needed).
    ``older_first``: the backlog has reached the older specs' files alone, and stays there (compacting a
    partition of the current spec would take what those runs wrote into it again)."""
    if metrics.data_file_groups is None:
        return None
    fields, units, table = scope_units(metrics, rules)
    if not table.useful or (table.bytes <= cap and not older_first):
        return None
    useful = ranked(units)
    leftover = max(0, table.bytes - sum(u.bytes for u in useful))  # work only the whole table's groups reach
    common = {"cap": cap, "fields": fields, "spec_id": metrics.partition_spec_id}
    chosen = select_units(useful, cap, limit)
    if chosen:
        rest = [u for u in useful if u not in chosen]
        return PartitionSelection(
            tuple(u.key for u in chosen), sum(u.bytes for u in chosen), sum(u.files for u in chosen),
            len(rest) + bool(leftover), sum(u.bytes for u in rest) + leftover, **common)
    if not fields:  # (2a, 2b) a table partitioned after the fact: staged (core/rewrites/older_specs.py)
        staged = None if older_first else current_spec_first(metrics, rules, cap, table, limit)
        older = None if staged is not None else older_specs_unit(metrics, rules)
        if older is not None and older.unit.useful:
            staged = older_specs_selection(older, cap, common)
        staged = staged or older_specs_by_count(metrics, rules, cap)
        if staged is not None:
            return staged
    steps = [u for u in useful if u.expressible] + [table]
    for unit in steps:  # (2) one unit, or the whole table, by a file count whose largest files fit
        count = files_within(unit.sizes, cap)
        if count >= 2:
            return _counted(unit, count, useful, table, common)
    smallest = min(steps, key=lambda u: sum(u.sizes[:2]))  # (3) the smallest step that makes progress
    return _counted(smallest, min(2, len(smallest.sizes)), useful, table, common, oversized=True)


def _counted(unit: ScopeUnit, count: int, useful: list[ScopeUnit], table: ScopeUnit, common: dict[str, Any],
             oversized: bool = False) -> PartitionSelection:
    charge = sum(unit.sizes[:count])
    if unit is table:
        partitions, backlog = (), table.bytes - charge
        backlog_units = 1 if backlog > 0 else 0
    else:
        partitions = (unit.key,)
        others = [u for u in useful if u is not unit]
        left = unit.bytes - charge
        backlog = left + sum(u.bytes for u in others) + max(0, table.bytes - sum(u.bytes for u in useful))
        backlog_units = len(others) + (left > 0)
    return PartitionSelection(partitions, charge, count, backlog_units, max(backlog, 0), oversized=oversized,
                              max_files=count, **common)
