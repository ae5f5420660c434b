"""Operation configs (``rewriteDataFiles``, ``expireSnapshots``, ``orphanCleanup``, ``rewriteManifests``,
``rewritePositionDeleteFiles``, ``computeStatistics``, ``tableProperties``): validated here into one frozen
dataclass per operation, the only form the rest of Floe reads. The Spark procedures render it to SQL (``spark/procedures.py``) and the byte
estimates read its rewrite options (``core/estimates.py``); nothing parses a policy's options again.

A field is None when the policy leaves it unset (enumerations are upper-cased, text trimmed, lists and
mappings kept as tuples): an unset expire option must stay unset so that the Spark engine falls back
to the table's ``history.expire.*`` properties, and then to Floe's defaults (:data:`DEFAULTS`). An
empty config ``{}`` is valid and means "all defaults".

A field's name is its policy key in snake case (``targetFileSizeBytes`` is ``target_file_size_bytes``),
which is also the name of the procedure's argument (``retain_last``) or of the planner option Iceberg
spells in kebab case (``target-file-size-bytes``, see :data:`ICEBERG_OPTIONS`). ``to_json()`` gives the
policy's view back: camelCase keys, only the fields set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Mapping

from floe_dagster.core.durations import parse_iso_duration
from floe_dagster.core.operations import Operation
from floe_dagster.core.orphan_cadence import AdaptiveCadence, parse_adaptive
from floe_dagster.core.quarantine import QuarantinePolicy, parse_quarantine
from floe_dagster.core.table_properties import parse_table_properties
from floe_dagster.core.validation import (
    Location,
    check_mapping,
    check_unknown,
    describe,
    get_bool,
    get_enum,
    get_int,
    get_number,
    get_str,
    get_str_list,
    get_str_map,
    mapping_items,
    raise_if_errors,
    standalone,
)

STRATEGIES = ("BINPACK", "SORT", "ZORDER")
REWRITE_JOB_ORDERS = ("NONE", "BYTES_ASC", "BYTES_DESC", "FILES_ASC", "FILES_DESC")
PREFIX_MISMATCH_MODES = ("ERROR", "IGNORE", "DELETE")
# "col", "col DESC", "col ASC NULLS LAST", "`odd name` DESC": one column (back-quoted when it has
# spaces), then the optional direction and null order.
_SORT_TERM = re.compile(r"^\s*(`[^`]+`|[^\s,()`]+)(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?\s*$", re.IGNORECASE)

# Floe's defaults, applied by the engine when a field is unset (for expire, after the table's
# history.expire.* properties).
DEFAULT_STRATEGY = "BINPACK"
DEFAULT_RETAIN_LAST = 5
DEFAULT_MAX_SNAPSHOT_AGE = "P7D"
DEFAULT_ORPHAN_RETENTION_DAYS = 3
DEFAULT_PREFIX_MISMATCH_MODE = "ERROR"
DEFAULTS: dict[Operation, dict[str, Any]] = {  # for display
    Operation.REWRITE_DATA_FILES: {"strategy": DEFAULT_STRATEGY},
    Operation.EXPIRE_SNAPSHOTS: {"retainLast": DEFAULT_RETAIN_LAST, "maxSnapshotAge": DEFAULT_MAX_SNAPSHOT_AGE},
    Operation.ORPHAN_CLEANUP: {"retentionPeriodInDays": DEFAULT_ORPHAN_RETENTION_DAYS,
                               "prefixMismatchMode": DEFAULT_PREFIX_MISMATCH_MODE},
    Operation.REWRITE_MANIFESTS: {},
    Operation.REWRITE_POSITION_DELETE_FILES: {},
    Operation.COMPUTE_STATISTICS: {"partitionStats": True},
    Operation.APPLY_TABLE_PROPERTIES: {},
}

# The rewriting procedures' ``options`` map: each field's name there, as Iceberg spells it.
ICEBERG_OPTIONS = {
    "target_file_size_bytes": "target-file-size-bytes",
    "max_file_group_size_bytes": "max-file-group-size-bytes",
    "max_concurrent_file_group_rewrites": "max-concurrent-file-group-rewrites",
    "partial_progress_enabled": "partial-progress.enabled",
    "partial_progress_max_commits": "partial-progress.max-commits",
    "partial_progress_max_failed_commits": "partial-progress.max-failed-commits",
    "rewrite_job_order": "rewrite-job-order",
    "use_starting_sequence_number": "use-starting-sequence-number",
    "remove_dangling_deletes": "remove-dangling-deletes",
    "output_spec_id": "output-spec-id",
    "min_input_files": "min-input-files",
    "delete_file_threshold": "delete-file-threshold",
    "rewrite_all": "rewrite-all",
    "max_files_to_rewrite": "max-files-to-rewrite",
}


def _policy_key(field_name: str) -> str:
    """A field's key in the policy: ``z_order_columns`` → ``zOrderColumns``."""
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


# -- the typed configs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperationConfig:
    """What every operation's config offers: its policy view, and (for the rewrites) its options map."""

    operation: ClassVar[Operation]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> "OperationConfig":
        """Parse one operation's config on its own, as a policy writes it (``{"strategy": "sort"}``);
        raises ValueError listing every problem. ``RewriteDataFilesConfig.from_mapping({})``: defaults."""
        at = standalone()
        config = parse_operation_config(at, cls.operation, raw)
        raise_if_errors(at, f"{cls.operation.policy_key} config")
        assert config is not None
        return config

    def to_json(self) -> dict[str, Any]:
        """The policy's view: camelCase keys, only the fields set, lists and mappings as JSON has them."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, (QuarantinePolicy, AdaptiveCadence)):
                value = value.to_json()
            elif _READERS.get(f.name) is _str_map:
                value = dict(value)
            elif _READERS.get(f.name) is _manifest_filter:
                value = {k: [dict(s) for s in v] if k == "partitionSummaries" else v for k, v in value}
            elif isinstance(value, tuple):
                value = list(value)
            data[_policy_key(f.name)] = value
        return data

    def iceberg_options(self) -> dict[str, Any]:
        """The fields set that the procedure takes in its ``options`` map, under Iceberg's names, typed
        (a job order as Iceberg spells it: ``BYTES_DESC`` → ``bytes-desc``)."""
        options: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and f.name in ICEBERG_OPTIONS:
                options[ICEBERG_OPTIONS[f.name]] = value.lower().replace("_", "-") if isinstance(value, str) else value
        return options


@dataclass(frozen=True)
class RewriteDataFilesConfig(OperationConfig):
    operation: ClassVar[Operation] = Operation.REWRITE_DATA_FILES

    strategy: str | None = None  # BINPACK, SORT or ZORDER; see effective_strategy
    sort_order: tuple[str, ...] | None = None  # strategy SORT: "column [ASC|DESC] [NULLS FIRST|LAST]" terms
    z_order_columns: tuple[str, ...] | None = None  # strategy ZORDER: non-empty; with SORT or BINPACK: kept, unused
    target_file_size_bytes: int | None = None
    max_file_group_size_bytes: int | None = None
    max_concurrent_file_group_rewrites: int | None = None
    partial_progress_enabled: bool | None = None
    partial_progress_max_commits: int | None = None
    partial_progress_max_failed_commits: int | None = None
    filter: str | None = None  # a Spark SQL predicate: the procedure's ``where``
    rewrite_job_order: str | None = None
    use_starting_sequence_number: bool | None = None
    remove_dangling_deletes: bool | None = None
    output_spec_id: int | None = None
    min_input_files: int | None = None
    delete_file_threshold: int | None = None
    rewrite_all: bool | None = None
    max_files_to_rewrite: int | None = None  # Iceberg's max-files-to-rewrite (1.10+): first files in planning order
    # Floe's own cap on the estimated bytes one run rewrites (never sent to Iceberg): above it, the
    # planner scopes the run to the partitions with the most benefit per byte (core/partition_scope.py).
    max_bytes_per_run: int | None = None

    @property
    def effective_strategy(self) -> str:
        return self.strategy or DEFAULT_STRATEGY


@dataclass(frozen=True)
class ExpireSnapshotsConfig(OperationConfig):
    operation: ClassVar[Operation] = Operation.EXPIRE_SNAPSHOTS

    retain_last: int | None = None
    max_snapshot_age: str | None = None  # an ISO-8601 duration, upper-cased (``PT0S``)
    clean_expired_metadata: bool | None = None
    stream_results: bool | None = None
    expire_snapshot_id: int | None = None  # Floe's: kept, never sent (IGNORED)


@dataclass(frozen=True)
class OrphanCleanupConfig(OperationConfig):
    operation: ClassVar[Operation] = Operation.ORPHAN_CLEANUP

    retention_period_in_days: int | float | None = None  # at least 1
    location: str | None = None
    prefix_mismatch_mode: str | None = None  # ERROR, IGNORE or DELETE
    equal_schemes: tuple[tuple[str, str], ...] | None = None  # a mapping's items, in the policy's order
    equal_authorities: tuple[tuple[str, str], ...] | None = None
    dry_run: bool | None = None
    # Unset: on with Iceberg 1.11 and later (the driver holds at most a sample of 20,000 paths, not every
    # orphan's); Iceberg 1.10's procedure has no such argument.
    stream_results: bool | None = None
    max_concurrent_deletes: int | None = None  # ignored by FileIOs that bulk-delete (S3, Hadoop, Resolving)
    # A per-run cap: the run deletes at most this many files, the rest stays as backlog for later runs
    # (docs/operations.md, "Orphan cleanup at millions of files"). Unset: no cap.
    max_files_to_delete: int | None = None
    # Move orphans into a quarantine instead of deleting them; purged after the grace period
    # (core/quarantine.py). Unset: only the table's first orphan cleanup quarantines.
    quarantine: QuarantinePolicy | None = None
    # Time each cleanup from the orphan rate its past cleanups found (core/orphan_cadence.py), within
    # [min, max]. Unset: the schedule alone decides.
    adaptive: AdaptiveCadence | None = None


@dataclass(frozen=True)
class RewriteManifestsConfig(OperationConfig):
    operation: ClassVar[Operation] = Operation.REWRITE_MANIFESTS

    spec_id: int | None = None
    use_caching: bool | None = None
    # Floe's fields of Iceberg's Java action (IGNORED says what becomes of each): ``sort_by`` is the
    # procedure's sort_by where it has one (Iceberg 1.11 on Spark 4.1, spark/procedures.py);
    # ``rewrite_if`` (Floe's manifest filter, its fields in their policy's order) reaches the procedure
    # only through its specId; ``staging_location`` is kept and ignored.
    sort_by: tuple[str, ...] | None = None
    staging_location: str | None = None
    rewrite_if: tuple[tuple[str, Any], ...] | None = None

    @property
    def effective_spec_id(self) -> int | None:
        """``specId``, else ``rewriteIf.specId`` (a filter on one spec is the procedure's spec_id)."""
        return self.spec_id if self.spec_id is not None else dict(self.rewrite_if or ()).get("specId")


@dataclass(frozen=True)
class RewritePositionDeleteFilesConfig(OperationConfig):
    operation: ClassVar[Operation] = Operation.REWRITE_POSITION_DELETE_FILES

    target_file_size_bytes: int | None = None
    partial_progress_enabled: bool | None = None
    partial_progress_max_commits: int | None = None
    rewrite_job_order: str | None = None
    min_input_files: int | None = None
    rewrite_all: bool | None = None


@dataclass(frozen=True)
class ComputeStatisticsConfig(OperationConfig):
    operation: ClassVar[Operation] = Operation.COMPUTE_STATISTICS

    columns: tuple[str, ...] | None = None  # compute_table_stats' columns (unset: every column)
    # compute_partition_stats too (unset: yes); only ever on partitioned tables, where Iceberg refuses
    # nothing (on an unpartitioned table it fails, so the engine never calls it there).
    partition_stats: bool | None = None

    @property
    def wants_partition_stats(self) -> bool:
        return self.partition_stats is not False


@dataclass(frozen=True)
class TablePropertiesConfig(OperationConfig):
    """``tableProperties``: Iceberg table property names → values (core/table_properties.py checks both);
    the properties the table should have, and the only ones the operation ever sets."""

    operation: ClassVar[Operation] = Operation.APPLY_TABLE_PROPERTIES

    properties: tuple[tuple[str, str], ...] = ()  # (name, value as Iceberg stores it), the policy's order

    def to_json(self) -> dict[str, Any]:
        return dict(self.properties)


CONFIG_TYPES: dict[Operation, type[OperationConfig]] = {
    cls.operation: cls for cls in (RewriteDataFilesConfig, ExpireSnapshotsConfig, OrphanCleanupConfig,
                                   RewriteManifestsConfig, RewritePositionDeleteFilesConfig,
                                   ComputeStatisticsConfig, TablePropertiesConfig)
}
FIELDS: dict[Operation, tuple[str, ...]] = {
    op: tuple(_policy_key(f.name) for f in fields(cls)) for op, cls in CONFIG_TYPES.items()
}

# Floe's fields that floe-dagster accepts and cannot (fully) pass on: each is kept (the policy's JSON shows
# it) and loading warns once with what becomes of it. ``rewriteIf``'s warning names its ignored fields.
IGNORED: dict[Operation, dict[str, str]] = {
    Operation.EXPIRE_SNAPSHOTS: {
        "expireSnapshotId": "ignored: Floe stored it and never sent it to the engine (Iceberg's expire_snapshots "
                            "procedure takes a snapshot_ids list); retainLast and maxSnapshotAge decide",
    },
    Operation.REWRITE_MANIFESTS: {
        "stagingLocation": "ignored: it only says where Iceberg's Java action stages the new manifests; the "
                           "rewrite_manifests procedure writes them to the table's metadata location, and the safety "
                           "envelope never hands it to an engine",
        "sortBy": "passed as the procedure's sort_by on Spark 4.1 (Iceberg 1.11 has it there only); ignored on "
                  "Spark 3.5 and 4.0, whose rewrite_manifests has no sort_by",
    },
}
REFUSED: dict[Operation, dict[str, str]] = {}  # Floe's fields refused with a reason (none at present)
MANIFEST_FILTER_FIELDS = (  # Floe's rewriteIf: one per ManifestFile field, compared for equality (AND)
    "path", "length", "specId", "content", "sequenceNumber", "minSequenceNumber", "snapshotId", "addedFilesCount",
    "existingFilesCount", "deletedFilesCount", "addedRowsCount", "existingRowsCount", "deletedRowsCount",
    "firstRowId", "keyMetadata", "partitionSummaries",
)
PARTITION_SUMMARY_FIELDS = ("containsNull", "containsNan", "lowerBound", "upperBound")


# -- parsing ---------------------------------------------------------------------------------------------


def parse_operation_config(at: Location, operation: Operation, raw: Any) -> OperationConfig | None:
    """The typed config, or None when it is not a mapping (every problem is recorded at ``at``)."""
    if operation is Operation.APPLY_TABLE_PROPERTIES:  # its keys are property names, not fields
        declared = parse_table_properties(at, raw)
        return TablePropertiesConfig(declared) if declared is not None else None
    mapping = check_mapping(at, raw)
    if mapping is None:
        return None
    check_unknown(at, mapping, FIELDS[operation], REFUSED.get(operation))
    cls = CONFIG_TYPES[operation]
    values = _strategy_fields(at, mapping) if cls is RewriteDataFilesConfig else {}
    for f in fields(cls):  # in the fields' order, so the errors come in the policy's order
        read = _READERS.get(f.name)
        value = read(at, mapping, _policy_key(f.name)) if read is not None else None
        if value is not None:
            values[f.name] = value
    for key, why in IGNORED.get(operation, {}).items():
        if mapping.get(key) is not None:
            at.child(key).warn(why)
    config = cls(**values)
    if isinstance(config, RewriteManifestsConfig) and config.rewrite_if is not None:
        _warn_manifest_filter(at.child("rewriteIf"), config)
    return config


def _warn_manifest_filter(at: Location, config: RewriteManifestsConfig) -> None:
    """What becomes of Floe's rewriteIf: the procedure takes no manifest filter, so only a specId
    reaches it (as spec_id); every other field is named as ignored."""
    given = dict(config.rewrite_if or ())
    ignored = [key for key in given if key != "specId"]
    spec = given.get("specId")
    if spec is not None and config.spec_id is not None and spec != config.spec_id:
        at.child("specId").warn(f"{spec} differs from specId {config.spec_id}: specId {config.spec_id} is used "
                                "(Floe's Java action would have matched no manifest)")
    elif spec is not None:
        at.warn(f"the rewrite_manifests procedure takes no manifest filter: specId {spec} is passed as its spec_id"
                + (f"; ignored: {', '.join(ignored)}" if ignored else ""))
        return
    if ignored:
        at.warn(f"ignored: {', '.join(ignored)} (the rewrite_manifests procedure takes no manifest filter; it "
                "rewrites every manifest of the spec)")


Reader = Callable[[Location, Mapping[str, Any], str], Any]


def _int(minimum: int) -> Reader:
    return lambda at, raw, key: get_int(at, raw, key, None, minimum=minimum)


def _bool(at: Location, raw: Mapping[str, Any], key: str) -> bool | None:
    return get_bool(at, raw, key, None)


def _enum(choices: tuple[str, ...]) -> Reader:
    return lambda at, raw, key: get_enum(at, raw, key, choices, None)


def _job_order(at: Location, raw: Mapping[str, Any], key: str) -> str | None:
    """``BYTES_DESC``, or as Iceberg (and Floe's PolicyLoader tests) spell it, ``bytes-desc``."""
    value = raw.get(key)
    if isinstance(value, str):
        raw = {key: value.replace("-", "_")}
    return get_enum(at, raw, key, REWRITE_JOB_ORDERS, None)


def _text(at: Location, raw: Mapping[str, Any], key: str) -> str | None:
    value = get_str(at, raw, key, None)
    return value.strip() if value is not None else None


def _str_map(at: Location, raw: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...] | None:
    value = get_str_map(at, raw, key, None)
    return tuple(value.items()) if value is not None else None


def _texts(at: Location, raw: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    value = get_str_list(at, raw, key, None)
    if value == []:
        at.child(key).error("must not be empty (leave it out instead)")
        return None
    return tuple(value) if value is not None else None


def _manifest_filter(at: Location, raw: Mapping[str, Any], key: str) -> tuple[tuple[str, Any], ...] | None:
    """Floe's ``rewriteIf``: its fields checked by type, kept in the policy's order (the partition
    summaries as tuples of their fields)."""
    here = at.child(key)
    mapping = check_mapping(here, raw.get(key)) if raw.get(key) is not None else None
    if not mapping:
        return None
    check_unknown(here, mapping, MANIFEST_FILTER_FIELDS)
    kept: list[tuple[str, Any]] = []
    for name, value in mapping.items():
        if name not in MANIFEST_FILTER_FIELDS or value is None:
            continue
        if name == "partitionSummaries":
            value = _partition_summaries(here.child(name), value)
        elif name in ("path", "keyMetadata"):
            value = get_str(here, mapping, name, None, non_empty=False)
        elif name == "content":
            value = get_enum(here, mapping, name, ("DATA", "DELETES"), None)
        else:
            value = get_int(here, mapping, name, None)
        if value is not None:
            kept.append((name, value))
    return tuple(kept) or None


def _partition_summaries(at: Location, raw: Any) -> tuple[tuple[tuple[str, Any], ...], ...] | None:
    if not isinstance(raw, (list, tuple)):
        at.error(f"expected a list of partition summaries, got {describe(raw)}")
        return None
    summaries = []
    for here, mapping in mapping_items(at, raw, PARTITION_SUMMARY_FIELDS, "a partition summary (a mapping)"):
        read = {name: get_bool(here, mapping, name, None) if name.startswith("contains")
                else get_str(here, mapping, name, None, non_empty=False) for name in PARTITION_SUMMARY_FIELDS}
        summaries.append(tuple((name, value) for name, value in read.items() if value is not None))
    return tuple(summaries)


def _duration(at: Location, raw: Mapping[str, Any], key: str) -> str | None:
    age = get_str(at, raw, key, None)
    if age is None:
        return None
    try:
        parse_iso_duration(age)
    except ValueError as exc:
        at.child(key).error(str(exc))
        return None
    return age.strip().upper()


def _retention_days(at: Location, raw: Mapping[str, Any], key: str) -> int | float | None:
    days = raw.get(key)
    if isinstance(days, (int, float)) and not isinstance(days, bool) and days == days and days < 1:
        at.child(key).error(
            f"must be at least 1 day, got {days:g}: Iceberg refuses to remove files younger than 24 hours, "
            "which may belong to commits still in progress")
        return None
    return get_number(at, raw, key, None, minimum=1)


def _columns(at: Location, raw: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    """A non-empty list of column names (``a``, ``nested.field``), each once."""
    columns = get_str_list(at, raw, key, None)
    if columns is None:
        return None
    if not columns:
        at.child(key).error("must name at least one column; leave it out to compute statistics of every column")
    seen: set[str] = set()
    for index, column in enumerate(columns):
        name = column.strip()
        if any(ch in name for ch in ",()`'\""):
            at.child(key).child(index).error(f"{column!r} is not a column name")
        elif name in seen:
            at.child(key).child(index).error(f"{column!r} is listed twice")
        seen.add(name)
    return tuple(c.strip() for c in columns)


# How each field is read and checked, by field name (the same name means the same option in every
# operation). The strategy fields are read together (_strategy_fields).
_READERS: dict[str, Reader] = {
    "target_file_size_bytes": _int(1),
    "max_file_group_size_bytes": _int(1),
    "max_concurrent_file_group_rewrites": _int(1),
    "partial_progress_enabled": _bool,
    "partial_progress_max_commits": _int(1),
    "partial_progress_max_failed_commits": _int(0),
    "filter": _text,
    "rewrite_job_order": _job_order,
    "use_starting_sequence_number": _bool,
    "remove_dangling_deletes": _bool,
    "output_spec_id": _int(0),
    "min_input_files": _int(1),
    "delete_file_threshold": _int(0),
    "rewrite_all": _bool,
    "max_files_to_rewrite": _int(1),
    "max_bytes_per_run": _int(1),
    "retain_last": _int(1),
    "max_snapshot_age": _duration,
    "clean_expired_metadata": _bool,
    "stream_results": _bool,
    "retention_period_in_days": _retention_days,
    "location": _text,
    "prefix_mismatch_mode": _enum(PREFIX_MISMATCH_MODES),
    "equal_schemes": _str_map,
    "equal_authorities": _str_map,
    "dry_run": _bool,
    "max_concurrent_deletes": _int(1),
    "max_files_to_delete": _int(1),
    "quarantine": parse_quarantine,
    "adaptive": parse_adaptive,
    "spec_id": _int(0),
    "use_caching": _bool,
    "expire_snapshot_id": lambda at, raw, key: get_int(at, raw, key, None),
    "sort_by": _texts,
    "staging_location": _text,
    "rewrite_if": _manifest_filter,
    "columns": _columns,
    "partition_stats": _bool,
}


def _strategy_fields(at: Location, raw: Mapping[str, Any]) -> dict[str, Any]:
    """``strategy``, ``sortOrder`` and ``zOrderColumns``: ZORDER needs its columns; a sort order with
    another strategy than SORT, or columns with another than ZORDER, are kept but ignored, with a warning
    (Floe stores them and its Spark job ignores them: its e2e test sends SORT with zOrderColumns, its
    comprehensive example BINPACK with both)."""
    values: dict[str, Any] = {}
    strategy = get_enum(at, raw, "strategy", STRATEGIES, None)
    if strategy is not None:
        values["strategy"] = strategy
    effective = strategy or DEFAULT_STRATEGY
    sort_order = get_str_list(at, raw, "sortOrder", None)
    if sort_order is not None:
        if effective != "SORT":  # kept, never rendered (Floe's comprehensive example sends it with BINPACK)
            at.child("sortOrder").warn(f"ignored with strategy {effective} (Floe stores and ignores it too; only SORT "
                                       "uses it)")
        for index, term in enumerate(sort_order):
            if not _SORT_TERM.match(term):
                at.child("sortOrder").child(index).error(
                    f"{term!r} is not 'column [ASC|DESC] [NULLS FIRST|NULLS LAST]'")
        values["sort_order"] = tuple(sort_order)
    columns = get_str_list(at, raw, "zOrderColumns", None)
    if columns is not None:
        if effective != "ZORDER":  # kept (to_json shows them), never rendered: as Floe's Spark job does
            at.child("zOrderColumns").warn(f"ignored with strategy {effective} (Floe stores and ignores them too; "
                                           "only ZORDER uses them)")
        for index, column in enumerate(columns):
            if any(ch in column for ch in ",()"):
                at.child("zOrderColumns").child(index).error(f"{column!r} is not a column name")
        values["z_order_columns"] = tuple(columns)
    # (a zOrderColumns of the wrong type already has its own error)
    if effective == "ZORDER" and not columns and (columns == [] or raw.get("zOrderColumns") is None):
        at.child("zOrderColumns").error("strategy ZORDER needs a non-empty list of columns")
    return values


__all__ = [
    "OperationConfig", "RewriteDataFilesConfig", "ExpireSnapshotsConfig", "OrphanCleanupConfig",
    "RewriteManifestsConfig", "RewritePositionDeleteFilesConfig", "ComputeStatisticsConfig", "CONFIG_TYPES",
    "parse_operation_config", "FIELDS", "REFUSED", "IGNORED", "MANIFEST_FILTER_FIELDS", "PARTITION_SUMMARY_FIELDS",
    "DEFAULTS", "ICEBERG_OPTIONS", "STRATEGIES", "REWRITE_JOB_ORDERS",
    "PREFIX_MISMATCH_MODES", "DEFAULT_STRATEGY", "DEFAULT_RETAIN_LAST", "DEFAULT_MAX_SNAPSHOT_AGE",
    "DEFAULT_ORPHAN_RETENTION_DAYS", "DEFAULT_PREFIX_MISMATCH_MODE",
]
