"""Operation configs (``rewriteDataFiles``, ``expireSnapshots``, ``orphanCleanup``, ``rewriteManifests``,
``rewritePositionDeleteFiles``): validated here, kept as a JSON-able dict with Floe's camelCase keys.

The normalized dict holds only the fields the policy sets (enumerations upper-cased, text trimmed):
an unset expire option must stay unset so that the Spark engine falls back to the table's
``history.expire.*`` properties, and then to Floe's defaults (:data:`DEFAULTS`). An empty config
``{}`` is valid and means "all defaults".
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from floe_dagster.core.durations import parse_iso_duration
from floe_dagster.core.operations import Operation
from floe_dagster.core.validation import (
    Location,
    check_mapping,
    check_unknown,
    get_bool,
    get_enum,
    get_int,
    get_number,
    get_str,
    get_str_list,
    get_str_map,
)

STRATEGIES = ("BINPACK", "SORT", "ZORDER")
REWRITE_JOB_ORDERS = ("NONE", "BYTES_ASC", "BYTES_DESC", "FILES_ASC", "FILES_DESC")
PREFIX_MISMATCH_MODES = ("ERROR", "IGNORE", "DELETE")
# "col", "col DESC", "col ASC NULLS LAST", "`odd name` DESC": one column (back-quoted when it has
# spaces), then the optional direction and null order. Stricter than the procedure builder's check.
_SORT_TERM = re.compile(r"^\s*(`[^`]+`|[^\s,()`]+)(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?\s*$", re.IGNORECASE)

# Floe's defaults, for display; the engine applies them when a field is unset.
DEFAULTS: dict[Operation, dict[str, Any]] = {
    Operation.REWRITE_DATA_FILES: {"strategy": "BINPACK"},
    Operation.EXPIRE_SNAPSHOTS: {"retainLast": 5, "maxSnapshotAge": "P7D"},
    Operation.ORPHAN_CLEANUP: {"retentionPeriodInDays": 3, "prefixMismatchMode": "ERROR"},
    Operation.REWRITE_MANIFESTS: {},
    Operation.REWRITE_POSITION_DELETE_FILES: {},
}

# (field, kind, minimum) for the plain fields; kind: int, bool, text, job-order.
_RDF_FIELDS: tuple[tuple[str, str, int | None], ...] = (
    ("targetFileSizeBytes", "int", 1),
    ("maxFileGroupSizeBytes", "int", 1),
    ("maxConcurrentFileGroupRewrites", "int", 1),
    ("partialProgressEnabled", "bool", None),
    ("partialProgressMaxCommits", "int", 1),
    ("partialProgressMaxFailedCommits", "int", 0),
    ("filter", "text", None),
    ("rewriteJobOrder", "job-order", None),
    ("useStartingSequenceNumber", "bool", None),
    ("removeDanglingDeletes", "bool", None),
    ("outputSpecId", "int", 0),
    ("minInputFiles", "int", 1),
    ("deleteFileThreshold", "int", 0),
    ("rewriteAll", "bool", None),
)
_POSITION_DELETE_FIELDS: tuple[tuple[str, str, int | None], ...] = (
    ("targetFileSizeBytes", "int", 1),
    ("partialProgressEnabled", "bool", None),
    ("partialProgressMaxCommits", "int", 1),
    ("rewriteJobOrder", "job-order", None),
    ("minInputFiles", "int", 1),
    ("rewriteAll", "bool", None),
)

FIELDS: dict[Operation, tuple[str, ...]] = {
    Operation.REWRITE_DATA_FILES: ("strategy", "sortOrder", "zOrderColumns") + tuple(f for f, _, _ in _RDF_FIELDS),
    Operation.EXPIRE_SNAPSHOTS: ("retainLast", "maxSnapshotAge", "cleanExpiredMetadata", "streamResults"),
    Operation.ORPHAN_CLEANUP: ("retentionPeriodInDays", "location", "prefixMismatchMode", "equalSchemes",
                               "equalAuthorities", "dryRun"),
    Operation.REWRITE_MANIFESTS: ("specId", "useCaching"),
    Operation.REWRITE_POSITION_DELETE_FILES: tuple(f for f, _, _ in _POSITION_DELETE_FIELDS),
}

_JAVA_ONLY = ("exists only on Iceberg's Java RewriteManifests action, not on the rewrite_manifests Spark "
              "procedure this engine calls; remove it")
REFUSED: dict[Operation, dict[str, str]] = {
    Operation.EXPIRE_SNAPSHOTS: {
        "expireSnapshotId": "is not supported: Floe stored it but never sent it to the engine, and Iceberg's "
                            "expire_snapshots procedure targets snapshots by a snapshot_ids list; remove it and "
                            "use retainLast and maxSnapshotAge",
    },
    Operation.REWRITE_MANIFESTS: {"stagingLocation": _JAVA_ONLY, "sortBy": _JAVA_ONLY, "rewriteIf": _JAVA_ONLY},
}


def parse_operation_config(at: Location, operation: Operation, raw: Any) -> dict[str, Any] | None:
    """The normalized config, or None when it is not a mapping (the error is recorded)."""
    mapping = check_mapping(at, raw)
    if mapping is None:
        return None
    check_unknown(at, mapping, FIELDS[operation], REFUSED.get(operation))
    parser = {
        Operation.REWRITE_DATA_FILES: _rewrite_data_files,
        Operation.EXPIRE_SNAPSHOTS: _expire_snapshots,
        Operation.ORPHAN_CLEANUP: _orphan_cleanup,
        Operation.REWRITE_MANIFESTS: _rewrite_manifests,
        Operation.REWRITE_POSITION_DELETE_FILES: _rewrite_position_delete_files,
    }[operation]
    return parser(at, mapping)


def _plain(at: Location, raw: Mapping[str, Any], specs: tuple[tuple[str, str, int | None], ...]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name, kind, minimum in specs:
        if kind == "int":
            value = get_int(at, raw, name, None, minimum=minimum)
        elif kind == "bool":
            value = get_bool(at, raw, name, None)
        elif kind == "text":
            value = get_str(at, raw, name, None)
            value = value.strip() if value is not None else None
        else:
            value = get_enum(at, raw, name, REWRITE_JOB_ORDERS, None)
        if value is not None:
            config[name] = value
    return config


def _rewrite_data_files(at: Location, raw: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    strategy = get_enum(at, raw, "strategy", STRATEGIES, None)
    if strategy is not None:
        config["strategy"] = strategy
    effective = strategy or "BINPACK"
    sort_order = get_str_list(at, raw, "sortOrder", None)
    if sort_order is not None:
        if effective != "SORT":
            at.child("sortOrder").error(f"only applies with strategy SORT (the strategy is {effective})")
        for index, term in enumerate(sort_order):
            if not _SORT_TERM.match(term):
                at.child("sortOrder").child(index).error(
                    f"{term!r} is not 'column [ASC|DESC] [NULLS FIRST|NULLS LAST]'")
        config["sortOrder"] = sort_order
    columns = get_str_list(at, raw, "zOrderColumns", None)
    if columns is not None:
        if effective != "ZORDER":
            at.child("zOrderColumns").error(f"only applies with strategy ZORDER (the strategy is {effective})")
        for index, column in enumerate(columns):
            if any(ch in column for ch in ",()"):
                at.child("zOrderColumns").child(index).error(f"{column!r} is not a column name")
        config["zOrderColumns"] = columns
    # (a zOrderColumns of the wrong type already has its own error)
    if effective == "ZORDER" and not columns and (columns == [] or raw.get("zOrderColumns") is None):
        at.child("zOrderColumns").error("strategy ZORDER needs a non-empty list of columns")
    config.update(_plain(at, raw, _RDF_FIELDS))
    return config


def _expire_snapshots(at: Location, raw: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    retain = get_int(at, raw, "retainLast", None, minimum=1)
    if retain is not None:
        config["retainLast"] = retain
    age = get_str(at, raw, "maxSnapshotAge", None)
    if age is not None:
        try:
            parse_iso_duration(age)
            config["maxSnapshotAge"] = age.strip().upper()
        except ValueError as exc:
            at.child("maxSnapshotAge").error(str(exc))
    for name in ("cleanExpiredMetadata", "streamResults"):
        value = get_bool(at, raw, name, None)
        if value is not None:
            config[name] = value
    return config


def _orphan_cleanup(at: Location, raw: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    days = raw.get("retentionPeriodInDays")
    if days is not None:
        if isinstance(days, (int, float)) and not isinstance(days, bool) and days == days and days < 1:
            at.child("retentionPeriodInDays").error(
                f"must be at least 1 day, got {days:g}: Iceberg refuses to remove files younger than 24 hours, "
                "which may belong to commits still in progress")
        else:
            value = get_number(at, raw, "retentionPeriodInDays", None, minimum=1)
            if value is not None:
                config["retentionPeriodInDays"] = value
    location = get_str(at, raw, "location", None)
    if location is not None:
        config["location"] = location.strip()
    mode = get_enum(at, raw, "prefixMismatchMode", PREFIX_MISMATCH_MODES, None)
    if mode is not None:
        config["prefixMismatchMode"] = mode
    for name in ("equalSchemes", "equalAuthorities"):
        value = get_str_map(at, raw, name, None)
        if value is not None:
            config[name] = value
    dry_run = get_bool(at, raw, "dryRun", None)
    if dry_run is not None:
        config["dryRun"] = dry_run
    return config


def _rewrite_manifests(at: Location, raw: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    spec_id = get_int(at, raw, "specId", None, minimum=0)
    if spec_id is not None:
        config["specId"] = spec_id
    caching = get_bool(at, raw, "useCaching", None)
    if caching is not None:
        config["useCaching"] = caching
    return config


def _rewrite_position_delete_files(at: Location, raw: Mapping[str, Any]) -> dict[str, Any]:
    return _plain(at, raw, _POSITION_DELETE_FIELDS)


__all__ = ["parse_operation_config", "FIELDS", "REFUSED", "DEFAULTS", "STRATEGIES", "REWRITE_JOB_ORDERS",
           "PREFIX_MISMATCH_MODES"]
