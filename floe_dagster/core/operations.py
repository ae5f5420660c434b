"""The maintenance operations, in Floe's order, with the names each layer uses for them."""

from __future__ import annotations

from enum import Enum
from typing import Mapping


class Operation(str, Enum):
    """A maintenance operation. The value is Floe's name, also the Dagster partition key."""

    REWRITE_DATA_FILES = "REWRITE_DATA_FILES"
    EXPIRE_SNAPSHOTS = "EXPIRE_SNAPSHOTS"
    ORPHAN_CLEANUP = "ORPHAN_CLEANUP"
    REWRITE_MANIFESTS = "REWRITE_MANIFESTS"
    REWRITE_POSITION_DELETE_FILES = "REWRITE_POSITION_DELETE_FILES"
    # Not one of Floe's: NDV sketches (a Puffin file) and partition statistics for the current snapshot.
    COMPUTE_STATISTICS = "COMPUTE_STATISTICS"
    # Not a procedure: one metadata commit setting the properties the policy declares (tableProperties).
    APPLY_TABLE_PROPERTIES = "APPLY_TABLE_PROPERTIES"

    @property
    def order(self) -> int:
        """Floe's order within a table: compaction first, manifests and deletes last; statistics after
        them, so they describe the files the other operations left."""
        return _ORDER[self]

    @property
    def policy_key(self) -> str:
        """The policy field holding this operation's config, e.g. ``rewriteDataFiles``."""
        return _POLICY_KEYS[self]

    @property
    def schedule_key(self) -> str:
        """The policy field holding this operation's schedule, e.g. ``rewriteDataFilesSchedule``."""
        return _POLICY_KEYS[self] + "Schedule"

    @property
    def procedure(self) -> str:
        """Iceberg's Spark procedure that performs it (for APPLY_TABLE_PROPERTIES, the statement)."""
        return _PROCEDURES[self]

    @property
    def rewrites_data(self) -> bool:
        """Whether it rewrites table data, so that it counts against the bytes-per-hour budget."""
        return self in (Operation.REWRITE_DATA_FILES, Operation.REWRITE_POSITION_DELETE_FILES)

    @property
    def needs_gc(self) -> bool:
        """Whether it deletes files, so that a table's ``gc.enabled=false`` forbids it."""
        return self in (Operation.EXPIRE_SNAPSHOTS, Operation.ORPHAN_CLEANUP)

    @classmethod
    def parse(cls, text: str) -> "Operation":
        """Accept Floe's name, the policy key or the procedure name, in any case."""
        wanted = text.strip().replace("-", "_").lower()
        for op in cls:
            if wanted in (op.value.lower(), op.policy_key.lower(), op.procedure, _SNAKE_POLICY_KEYS[op]):
                return op
        names = ", ".join(op.value for op in cls)
        raise ValueError(f"unknown operation {text!r}; expected one of {names}")


ALL_OPERATIONS: tuple[Operation, ...] = tuple(Operation)


def gc_disabled(table_properties: Mapping[str, str]) -> bool:
    """Whether Iceberg sees ``gc.enabled`` as false. Iceberg reads it with Java's
    ``Boolean.parseBoolean``: anything but "true" (any case, nothing around it) turns GC off."""
    value = table_properties.get("gc.enabled")
    return value is not None and str(value).lower() != "true"


def gc_disabled_reason(op: Operation) -> str:
    """Why an operation that deletes files never runs on a table with ``gc.enabled=false``: the words the
    planner (plan, explain), manual triggers and the run itself give. Catalogs that keep table history
    themselves set it on every table (Nessie does: its commits, not Iceberg's snapshots, are the history,
    and its own garbage collector deletes the files no commit references)."""
    return (f"the table sets gc.enabled=false: its catalog (e.g. Nessie) manages garbage collection, and "
            f"gc.enabled=false forbids table maintenance to delete files, so {op.value} never runs on it")

_ORDER = {op: i for i, op in enumerate(Operation)}
_POLICY_KEYS = {
    Operation.REWRITE_DATA_FILES: "rewriteDataFiles",
    Operation.EXPIRE_SNAPSHOTS: "expireSnapshots",
    Operation.ORPHAN_CLEANUP: "orphanCleanup",
    Operation.REWRITE_MANIFESTS: "rewriteManifests",
    Operation.REWRITE_POSITION_DELETE_FILES: "rewritePositionDeleteFiles",
    Operation.COMPUTE_STATISTICS: "computeStatistics",
    Operation.APPLY_TABLE_PROPERTIES: "tableProperties",
}
_SNAKE_POLICY_KEYS = {
    Operation.REWRITE_DATA_FILES: "rewrite_data_files",
    Operation.EXPIRE_SNAPSHOTS: "expire_snapshots",
    Operation.ORPHAN_CLEANUP: "orphan_cleanup",
    Operation.REWRITE_MANIFESTS: "rewrite_manifests",
    Operation.REWRITE_POSITION_DELETE_FILES: "rewrite_position_delete_files",
    Operation.COMPUTE_STATISTICS: "compute_statistics",
    Operation.APPLY_TABLE_PROPERTIES: "table_properties",
}
_PROCEDURES = {
    Operation.REWRITE_DATA_FILES: "rewrite_data_files",
    Operation.EXPIRE_SNAPSHOTS: "expire_snapshots",
    Operation.ORPHAN_CLEANUP: "remove_orphan_files",
    Operation.REWRITE_MANIFESTS: "rewrite_manifests",
    Operation.REWRITE_POSITION_DELETE_FILES: "rewrite_position_delete_files",
    # and, on a partitioned table, compute_partition_stats (spark/procedures.py)
    Operation.COMPUTE_STATISTICS: "compute_table_stats",
    Operation.APPLY_TABLE_PROPERTIES: "alter_table_set_tblproperties",
}
