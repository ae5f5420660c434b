"""The maintenance operations, in Floe's order, with the names each layer uses for them.

``Operation`` is built from the operation registry (``core/operation_kinds/``): one member per kind,
whose value is Floe's name (also the Dagster partition key), in the kinds' order. What a kind is, its
names and flags, comes from its spec (``op.spec``); the properties below are the ones every layer asks.
"""

from __future__ import annotations

from enum import Enum
from functools import cached_property
from typing import Mapping

from floe_dagster.core.operation_kinds import SPECS, OperationSpec, spec_of


class _OperationKind(str, Enum):
    """The members' behaviour (an enum without members, so it can be extended: ``Operation``).

    The spec and the flags read from it are kept on each member once read (``cached_property``: a
    planner tick asks them ~250,000 times), and a member hashes as its value does, in C (Enum's own
    ``__hash__`` is a Python call, on every dict lookup keyed by an operation; name and value are equal
    here, so the hash is the same number)."""

    __hash__ = str.__hash__

    @cached_property
    def spec(self) -> OperationSpec:
        """The kind's declaration (core/operation_kinds/<kind>.py)."""
        return spec_of(self.value)

    @cached_property
    def order(self) -> int:
        """Its place in Floe's order within a table (0 for the first): compaction first, manifests and
        deletes last; statistics after them, so they describe the files the other operations left. The
        kinds sort by their spec's ``order``, which leaves room for new kinds between them."""
        return _PLACES[self.value]

    @cached_property
    def policy_key(self) -> str:
        """The policy field holding this operation's config, e.g. ``rewriteDataFiles``."""
        return self.spec.policy_key

    @cached_property
    def schedule_key(self) -> str:
        """The policy field holding this operation's schedule, e.g. ``rewriteDataFilesSchedule``."""
        return self.spec.schedule_key

    @cached_property
    def procedure(self) -> str:
        """Iceberg's Spark procedure that performs it (for APPLY_TABLE_PROPERTIES, the statement)."""
        return self.spec.procedure

    @cached_property
    def rewrites_data(self) -> bool:
        """Whether it rewrites table data, so that it counts against the bytes-per-hour budget."""
        return self.spec.rewrites_data()

    @cached_property
    def holds_for_writers(self) -> bool:
        return self.spec.holds_for_writers()

    @cached_property
    def needs_gc(self) -> bool:
        """Whether it deletes files, so that a table's ``gc.enabled=false`` forbids it."""
        return self.spec.needs_gc()

    @cached_property
    def scopes_partitions(self) -> bool:
        """Whether the planner may scope a run of it to partitions (core/rewrites/partition_scope.py)."""
        return self.spec.scopes_partitions()

    @classmethod
    def parse(cls, text: str) -> object:
        """Accept Floe's name, the policy key or the procedure name, in any case."""
        wanted = text.strip().replace("-", "_").lower()
        for op in cls:
            spec = op.spec
            if wanted in (op.value.lower(), spec.policy_key.lower(), spec.procedure, spec.snake_key):
                return op
        names = ", ".join(op.value for op in cls)
        raise ValueError(f"unknown operation {text!r}; expected one of {names}")


Operation = _OperationKind("Operation", [(spec.name, spec.name) for spec in SPECS], module=__name__,
                           qualname="Operation")
Operation.__doc__ = "A maintenance operation. The value is Floe's name, also the Dagster partition key."

ALL_OPERATIONS: tuple[_OperationKind, ...] = tuple(Operation)  # its members
_PLACES = {op.value: place for place, op in enumerate(ALL_OPERATIONS)}

# Each kind's config, as the registry declares it (by operation).
CONFIG_TYPES: dict[_OperationKind, type] = {op: op.spec.config_type for op in ALL_OPERATIONS}
# The config fields as the policy writes them.
FIELDS: dict[_OperationKind, tuple[str, ...]] = {op: op.spec.fields for op in ALL_OPERATIONS}
IGNORED: dict[_OperationKind, Mapping[str, str]] = {op: op.spec.ignored() for op in ALL_OPERATIONS if op.spec.ignored()}
# What an unset field means, for display.
DEFAULTS: dict[_OperationKind, Mapping[str, object]] = {op: op.spec.defaults() for op in ALL_OPERATIONS}


def gc_disabled(table_properties: Mapping[str, str]) -> bool:
    """Whether Iceberg sees ``gc.enabled`` as false. Iceberg reads it with Java's
    ``Boolean.parseBoolean``: anything but "true" (any case, nothing around it) turns GC off."""
    value = table_properties.get("gc.enabled")
    return value is not None and str(value).lower() != "true"


def gc_disabled_reason(op: _OperationKind) -> str:
    """Why an operation that deletes files never runs on a table with ``gc.enabled=false``: the words the
    planner (plan, explain), manual triggers and the run itself give. Catalogs that keep table history
    themselves set it on every table (Nessie does: its commits, not Iceberg's snapshots, are the history,
    and its own garbage collector deletes the files no commit references)."""
    return (f"the table sets gc.enabled=false: its catalog (e.g. Nessie) manages garbage collection, and "
            f"gc.enabled=false forbids table maintenance to delete files, so {op.value} never runs on it")


__all__ = ["Operation", "ALL_OPERATIONS", "CONFIG_TYPES", "FIELDS", "IGNORED", "DEFAULTS", "gc_disabled",
           "gc_disabled_reason"]
