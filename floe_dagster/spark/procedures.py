"""Iceberg Spark procedure calls: SQL building with safe quoting, and result parsing.

No Spark import here: building and parsing are pure, so they are tested without a JVM. Table names
reach SQL only as back-quoted identifiers inside an escaped string literal, and every string value
(filters, locations, timestamps, option values) only as an escaped literal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from floe_dagster.core.commit_conflicts import race_options
from floe_dagster.core.durations import parse_iso_duration
from floe_dagster.core.object_storage import S3_FILE_IO
from floe_dagster.core.operation_config import (
    CONFIG_TYPES,
    DEFAULT_MAX_SNAPSHOT_AGE,
    DEFAULT_ORPHAN_RETENTION_DAYS,
    DEFAULT_PREFIX_MISMATCH_MODE,
    DEFAULT_RETAIN_LAST,
    ExpireSnapshotsConfig,
    OperationConfig,
    OrphanCleanupConfig,
    RewriteDataFilesConfig,
    RewriteManifestsConfig,
    RewritePositionDeleteFilesConfig,
)
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.errors import ProcedureOptionError

# FileIOs of object stores that list a prefix themselves (Iceberg's SupportsPrefixOperations). Iceberg's
# orphan cleanup lists with Hadoop's FileSystem unless told to use the FileIO (``prefix_listing``), and
# Hadoop cannot list s3://, gs:// or abfs:// without connectors floe-dagster does not load.
PREFIX_LISTING_FILE_IOS = frozenset({
    S3_FILE_IO, "org.apache.iceberg.gcp.gcs.GCSFileIO", "org.apache.iceberg.azure.adlsv2.ADLSFileIO",
})


def quote_identifier(part: str) -> str:
    """One identifier part in Spark SQL back quotes; a back quote inside is doubled."""
    if part == "" or "\x00" in part:
        raise ProcedureOptionError(f"identifier part {part!r} is empty or has a NUL character")
    return "`" + part.replace("`", "``") + "`"


def quote_literal(value: str) -> str:
    """A Spark SQL string literal. Spark reads backslash escapes by default, so both the quote and
    the backslash are escaped; nothing inside can end the literal."""
    if "\x00" in value:
        raise ProcedureOptionError("string values must not contain a NUL character")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def table_argument(table: TableName) -> str:
    """The procedures' ``table`` argument: a literal holding the quoted multi-part identifier, catalog
    included. Iceberg reads a first part that names a catalog as that catalog, so without it a namespace
    named like a catalog would be taken for one; and on Spark 4, Iceberg logs a warning with a stack
    trace for every first part that is not a catalog."""
    return quote_literal(spark_table_reference(table))


def spark_table_reference(table: TableName) -> str:
    """The table as a Spark SQL identifier, catalog included, for queries such as ``SELECT count(*)``."""
    return ".".join(quote_identifier(p) for p in (table.catalog, *table.identifier))


def timestamp_literal(moment: datetime) -> str:
    """A timestamp literal with an explicit UTC zone, whatever the session time zone is."""
    if moment.tzinfo is None:
        raise ProcedureOptionError("timestamps must carry a time zone")
    utc = moment.astimezone(timezone.utc)
    return "TIMESTAMP " + quote_literal(utc.strftime("%Y-%m-%d %H:%M:%S.%f") + "Z")


def _options_map(options: Mapping[str, Any]) -> str:
    items = []
    for key, value in options.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        items.append(f"{quote_literal(key)}, {quote_literal(str(value))}")
    return "map(" + ", ".join(items) + ")"


@dataclass(frozen=True)
class ProcedureCall:
    operation: Operation
    table: TableName
    sql: str
    arguments: dict[str, Any] = field(default_factory=dict)  # what was decided, for the run's metadata


class _Arguments:
    """A ``CALL``'s named arguments as SQL text, and what was decided (the call's ``arguments``)."""

    def __init__(self, table: TableName, file_io: str | None):
        self.sql: list[tuple[str, str]] = [("table", table_argument(table))]
        self.decided: dict[str, Any] = {}
        self.file_io = file_io  # the catalog's FileIO class in Spark (io-impl); None: Iceberg's default

    def add(self, name: str, value: Any) -> None:
        """A typed value as the argument ``name``, rendered by its type (true/false, a number, a string
        literal, a ``map(...)`` for a mapping or its items); unset (None, or an empty mapping): none."""
        if isinstance(value, tuple):
            value = dict(value)
        if value is None or (isinstance(value, Mapping) and not value):
            return
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = str(value)
        elif isinstance(value, str):
            text = quote_literal(value)
        else:
            text = _options_map(value)
        self.sql.append((name, text))
        self.decided[name] = value

    def older_than(self, moment: datetime) -> None:
        self.sql.append(("older_than", timestamp_literal(moment)))
        self.decided["older_than"] = moment.isoformat()


def _rewrite_data_files(call: _Arguments, config: RewriteDataFilesConfig, now: datetime,
                        table_properties: Mapping[str, str]) -> None:
    strategy = config.effective_strategy
    call.decided["strategy"] = strategy
    if strategy == "ZORDER":
        call.sql.append(("strategy", quote_literal("sort")))
        call.sql.append(("sort_order", quote_literal("zorder(" + ",".join(config.z_order_columns or ()) + ")")))
        call.decided["zorder"] = list(config.z_order_columns or ())
    else:
        call.sql.append(("strategy", quote_literal(strategy.lower())))
        if strategy == "SORT" and config.sort_order:  # without one, Iceberg sorts by the table's own sort order
            call.sql.append(("sort_order", quote_literal(", ".join(config.sort_order))))
            call.decided["sort_order"] = list(config.sort_order)
    options = config.iceberg_options()
    call.add("options", {**options, **race_options(options, table_properties)})  # core/commit_conflicts.py
    call.add("where", config.filter)


_MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
_MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"


def _expire_snapshots(call: _Arguments, config: ExpireSnapshotsConfig, now: datetime,
                      table_properties: Mapping[str, str]) -> None:
    # Explicit policy value, else the table's history.expire.* property, else Floe's default.
    retain_last = config.retain_last
    if retain_last is None:
        retain_last = int(table_properties.get(_MIN_SNAPSHOTS_TO_KEEP, DEFAULT_RETAIN_LAST))
    if config.max_snapshot_age is not None:
        max_age = parse_iso_duration(config.max_snapshot_age)
    elif _MAX_SNAPSHOT_AGE_MS in table_properties:
        max_age = timedelta(milliseconds=int(table_properties[_MAX_SNAPSHOT_AGE_MS]))
    else:
        max_age = parse_iso_duration(DEFAULT_MAX_SNAPSHOT_AGE)
    call.older_than(now - max_age)
    call.add("retain_last", retain_last)
    call.add("clean_expired_metadata", config.clean_expired_metadata)
    call.add("stream_results", config.stream_results)


def _orphan_cleanup(call: _Arguments, config: OrphanCleanupConfig, now: datetime,
                    table_properties: Mapping[str, str]) -> None:
    days = config.retention_period_in_days
    call.older_than(now - timedelta(days=DEFAULT_ORPHAN_RETENTION_DAYS if days is None else days))
    call.add("location", config.location)
    call.add("prefix_mismatch_mode", config.prefix_mismatch_mode or DEFAULT_PREFIX_MISMATCH_MODE)
    call.add("equal_schemes", config.equal_schemes)
    call.add("equal_authorities", config.equal_authorities)
    call.add("dry_run", config.dry_run)
    if call.file_io in PREFIX_LISTING_FILE_IOS:
        call.add("prefix_listing", True)


def _rewrite_manifests(call: _Arguments, config: RewriteManifestsConfig, now: datetime,
                       table_properties: Mapping[str, str]) -> None:
    call.add("spec_id", config.spec_id)
    call.add("use_caching", config.use_caching)


def _rewrite_position_delete_files(call: _Arguments, config: RewritePositionDeleteFilesConfig, now: datetime,
                                   table_properties: Mapping[str, str]) -> None:
    options = config.iceberg_options()
    call.add("options", {**options, **race_options(options, table_properties)})


_RENDERERS = {
    Operation.REWRITE_DATA_FILES: _rewrite_data_files,
    Operation.EXPIRE_SNAPSHOTS: _expire_snapshots,
    Operation.ORPHAN_CLEANUP: _orphan_cleanup,
    Operation.REWRITE_MANIFESTS: _rewrite_manifests,
    Operation.REWRITE_POSITION_DELETE_FILES: _rewrite_position_delete_files,
}


def build_procedure_call(
    op: Operation,
    table: TableName,
    config: OperationConfig,
    now: datetime,
    table_properties: Mapping[str, str] | None = None,
    file_io: str | None = None,
) -> ProcedureCall:
    """The ``CALL`` statement for one operation on one table, rendered from the policy's typed config
    (the core validated it when the policy was loaded: nothing is checked again here). ``file_io``:
    the catalog's FileIO class in Spark (``io-impl``), which decides how orphan cleanup lists files."""
    if not isinstance(config, CONFIG_TYPES[op]):
        raise TypeError(f"{op.policy_key}: expected a {CONFIG_TYPES[op].__name__}, got {type(config).__name__}")
    call = _Arguments(table, file_io)
    _RENDERERS[op](call, config, now, table_properties or {})
    procedure = f"{quote_identifier(table.catalog)}.`system`.{op.procedure}"
    sql = f"CALL {procedure}(" + ", ".join(f"{name} => {value}" for name, value in call.sql) + ")"
    return ProcedureCall(operation=op, table=table, sql=sql, arguments=call.decided)


@dataclass(frozen=True)
class ProcedureResult:
    operation: Operation
    numbers: dict[str, int]  # the procedure's output columns, as numbers
    changed: bool  # False is a "zero-change" run (docs/automation.md, "Zero-change throttling")
    bytes_rewritten: int
    orphan_files: tuple[str, ...] = ()


_RESULT_COLUMNS = {
    Operation.REWRITE_DATA_FILES: (
        "rewritten_data_files_count", "added_data_files_count", "rewritten_bytes_count",
        "failed_data_files_count", "removed_delete_files_count",
    ),
    Operation.EXPIRE_SNAPSHOTS: (
        "deleted_data_files_count", "deleted_position_delete_files_count", "deleted_equality_delete_files_count",
        "deleted_manifest_files_count", "deleted_manifest_lists_count", "deleted_statistics_files_count",
    ),
    Operation.REWRITE_MANIFESTS: ("rewritten_manifests_count", "added_manifests_count"),
    Operation.REWRITE_POSITION_DELETE_FILES: (
        "rewritten_delete_files_count", "added_delete_files_count", "rewritten_bytes_count", "added_bytes_count",
    ),
}


def summarize_result(op: Operation, rows: list[Mapping[str, Any]]) -> ProcedureResult:
    """Turn the procedure's output rows into numbers, and say whether the run changed anything."""
    if op is Operation.ORPHAN_CLEANUP:
        files = tuple(str(r["orphan_file_location"]) for r in rows)
        return ProcedureResult(op, {"orphan_files_count": len(files)}, bool(files), 0, files)
    numbers = {column: 0 for column in _RESULT_COLUMNS[op]}
    for row in rows:
        for column in numbers:
            value = row.get(column)
            numbers[column] += int(value) if value is not None else 0
    if op is Operation.REWRITE_DATA_FILES:
        changed = numbers["rewritten_data_files_count"] > 0
    elif op is Operation.EXPIRE_SNAPSHOTS:
        changed = any(numbers.values())
    elif op is Operation.REWRITE_MANIFESTS:
        changed = numbers["rewritten_manifests_count"] > 0
    else:
        changed = numbers["rewritten_delete_files_count"] > 0
    return ProcedureResult(op, numbers, changed, numbers.get("rewritten_bytes_count", 0))
