"""Iceberg Spark procedure calls: SQL building with safe quoting, and result parsing.

No Spark import here: building and parsing are pure, so they are tested without a JVM. Table names
reach SQL only as back-quoted identifiers inside an escaped string literal, and every string value
(filters, locations, timestamps, option values) only as an escaped literal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from floe_dagster.core.durations import parse_iso_duration as core_parse_iso_duration
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.errors import ProcedureOptionError


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
    """The procedures' ``table`` argument: a literal holding the quoted multi-part identifier."""
    return quote_literal(".".join(quote_identifier(p) for p in table.identifier))


def spark_table_reference(table: TableName) -> str:
    """The table as a Spark SQL identifier, catalog included, for queries such as ``SELECT count(*)``."""
    return ".".join(quote_identifier(p) for p in (table.catalog, *table.identifier))


def timestamp_literal(moment: datetime) -> str:
    """A timestamp literal with an explicit UTC zone, whatever the session time zone is."""
    if moment.tzinfo is None:
        raise ProcedureOptionError("timestamps must carry a time zone")
    utc = moment.astimezone(timezone.utc)
    return "TIMESTAMP " + quote_literal(utc.strftime("%Y-%m-%d %H:%M:%S.%f") + "Z")


def parse_iso_duration(text: str) -> timedelta:
    """The policy core's ISO-8601 rule (days and time only), as an option error."""
    try:
        return core_parse_iso_duration(text)
    except ValueError as exc:
        raise ProcedureOptionError(str(exc)) from None


def _options_map(options: Mapping[str, Any]) -> str:
    items = []
    for key, value in options.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        items.append(f"{quote_literal(key)}, {quote_literal(str(value))}")
    return "map(" + ", ".join(items) + ")"


def _bool(value: Any) -> str:
    return "true" if value else "false"


def _check_keys(op: Operation, config: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise ProcedureOptionError(
            f"{op.policy_key}: option(s) {', '.join(unknown)} not supported by Iceberg's "
            f"{op.procedure} procedure; supported: {', '.join(sorted(allowed))}"
        )


def _positive_int(op: Operation, key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProcedureOptionError(f"{op.policy_key}.{key}: expected a whole number ≥ {minimum}, got {value!r}")
    return value


_RDF_OPTIONS = {
    "targetFileSizeBytes": "target-file-size-bytes",
    "maxFileGroupSizeBytes": "max-file-group-size-bytes",
    "maxConcurrentFileGroupRewrites": "max-concurrent-file-group-rewrites",
    "partialProgressEnabled": "partial-progress.enabled",
    "partialProgressMaxCommits": "partial-progress.max-commits",
    "partialProgressMaxFailedCommits": "partial-progress.max-failed-commits",
    "rewriteJobOrder": "rewrite-job-order",
    "useStartingSequenceNumber": "use-starting-sequence-number",
    "removeDanglingDeletes": "remove-dangling-deletes",
    "outputSpecId": "output-spec-id",
    "minInputFiles": "min-input-files",
    "deleteFileThreshold": "delete-file-threshold",
    "rewriteAll": "rewrite-all",
}
_POSITION_DELETE_OPTIONS = {
    "targetFileSizeBytes": "target-file-size-bytes",
    "partialProgressEnabled": "partial-progress.enabled",
    "partialProgressMaxCommits": "partial-progress.max-commits",
    "rewriteJobOrder": "rewrite-job-order",
    "minInputFiles": "min-input-files",
    "rewriteAll": "rewrite-all",
}
_JOB_ORDERS = {"NONE", "BYTES_ASC", "BYTES_DESC", "FILES_ASC", "FILES_DESC"}
_SORT_TERM = re.compile(r"^\s*[^,()]+?(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?\s*$", re.IGNORECASE)

# Floe's defaults for expire_snapshots, used when neither the policy nor the table says otherwise.
DEFAULT_RETAIN_LAST = 5
DEFAULT_MAX_SNAPSHOT_AGE = "P7D"
DEFAULT_ORPHAN_RETENTION_DAYS = 3


def _engine_options(op: Operation, config: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, option in names.items():
        if key not in config or config[key] is None:
            continue
        value = config[key]
        if key == "rewriteJobOrder":
            if str(value).upper() not in _JOB_ORDERS:
                raise ProcedureOptionError(
                    f"{op.policy_key}.rewriteJobOrder: must be one of {', '.join(sorted(_JOB_ORDERS))}, got {value!r}"
                )
            value = str(value).lower().replace("_", "-")
        elif isinstance(value, bool):
            pass
        elif isinstance(value, int):
            _positive_int(op, key, value, minimum=0)
        else:
            raise ProcedureOptionError(f"{op.policy_key}.{key}: expected a number or true/false, got {value!r}")
        options[option] = value
    return options


@dataclass(frozen=True)
class ProcedureCall:
    operation: Operation
    table: TableName
    sql: str
    arguments: dict[str, Any] = field(default_factory=dict)  # what was decided, for the run's metadata


def build_procedure_call(
    op: Operation,
    table: TableName,
    config: Mapping[str, Any],
    now: datetime,
    table_properties: Mapping[str, str] | None = None,
) -> ProcedureCall:
    """The ``CALL`` statement for one operation on one table, from the policy's operation config."""
    config = dict(config or {})
    table_properties = table_properties or {}
    args: list[tuple[str, str]] = [("table", table_argument(table))]
    decided: dict[str, Any] = {}

    if op is Operation.REWRITE_DATA_FILES:
        _check_keys(op, config, set(_RDF_OPTIONS) | {"strategy", "sortOrder", "zOrderColumns", "filter"})
        strategy = str(config.get("strategy") or "BINPACK").upper()
        if strategy not in ("BINPACK", "SORT", "ZORDER"):
            raise ProcedureOptionError(f"{op.policy_key}.strategy: must be BINPACK, SORT or ZORDER, got {strategy!r}")
        decided["strategy"] = strategy
        if strategy == "BINPACK":
            if config.get("sortOrder") or config.get("zOrderColumns"):
                raise ProcedureOptionError(f"{op.policy_key}: sortOrder and zOrderColumns need strategy SORT or ZORDER")
            args.append(("strategy", quote_literal("binpack")))
        elif strategy == "SORT":
            args.append(("strategy", quote_literal("sort")))
            terms = list(config.get("sortOrder") or [])
            for term in terms:
                if not isinstance(term, str) or not _SORT_TERM.match(term):
                    raise ProcedureOptionError(
                        f"{op.policy_key}.sortOrder: {term!r} is not 'column [ASC|DESC] [NULLS FIRST|LAST]'"
                    )
            if terms:  # without one, Iceberg sorts by the table's own sort order
                args.append(("sort_order", quote_literal(", ".join(t.strip() for t in terms))))
                decided["sort_order"] = terms
        else:
            columns = list(config.get("zOrderColumns") or [])
            if not columns or not all(isinstance(c, str) and c.strip() for c in columns):
                raise ProcedureOptionError(f"{op.policy_key}.zOrderColumns: ZORDER needs a list of column names")
            for column in columns:
                if any(ch in column for ch in ",()"):
                    raise ProcedureOptionError(f"{op.policy_key}.zOrderColumns: {column!r} is not a column name")
            args.append(("strategy", quote_literal("sort")))
            args.append(("sort_order", quote_literal("zorder(" + ",".join(c.strip() for c in columns) + ")")))
            decided["zorder"] = columns
        options = _engine_options(op, config, _RDF_OPTIONS)
        if options:
            args.append(("options", _options_map(options)))
            decided["options"] = options
        if config.get("filter"):
            if not isinstance(config["filter"], str):
                raise ProcedureOptionError(f"{op.policy_key}.filter: expected a Spark SQL predicate string")
            args.append(("where", quote_literal(config["filter"])))
            decided["where"] = config["filter"]

    elif op is Operation.EXPIRE_SNAPSHOTS:
        _check_keys(op, config, {"retainLast", "maxSnapshotAge", "cleanExpiredMetadata", "streamResults"})
        # Explicit policy value, else the table's history.expire.* property, else Floe's default.
        if config.get("retainLast") is not None:
            retain_last = _positive_int(op, "retainLast", config["retainLast"])
        elif "history.expire.min-snapshots-to-keep" in table_properties:
            retain_last = int(table_properties["history.expire.min-snapshots-to-keep"])
        else:
            retain_last = DEFAULT_RETAIN_LAST
        if config.get("maxSnapshotAge") is not None:
            max_age = parse_iso_duration(config["maxSnapshotAge"])
        elif "history.expire.max-snapshot-age-ms" in table_properties:
            max_age = timedelta(milliseconds=int(table_properties["history.expire.max-snapshot-age-ms"]))
        else:
            max_age = parse_iso_duration(DEFAULT_MAX_SNAPSHOT_AGE)
        older_than = now - max_age
        args.append(("older_than", timestamp_literal(older_than)))
        args.append(("retain_last", str(retain_last)))
        decided.update(retain_last=retain_last, older_than=older_than.isoformat())
        for key, name in (("cleanExpiredMetadata", "clean_expired_metadata"), ("streamResults", "stream_results")):
            if config.get(key) is not None:
                args.append((name, _bool(config[key])))
                decided[name] = bool(config[key])

    elif op is Operation.ORPHAN_CLEANUP:
        _check_keys(
            op, config,
            {"retentionPeriodInDays", "location", "prefixMismatchMode", "equalSchemes", "equalAuthorities", "dryRun"},
        )
        days = config.get("retentionPeriodInDays", DEFAULT_ORPHAN_RETENTION_DAYS)
        if isinstance(days, bool) or not isinstance(days, (int, float)) or days < 1:
            raise ProcedureOptionError(
                f"{op.policy_key}.retentionPeriodInDays: must be at least 1 day (Iceberg refuses to remove "
                f"files younger than 24 hours, which may belong to commits in progress), got {days!r}"
            )
        older_than = now - timedelta(days=days)
        args.append(("older_than", timestamp_literal(older_than)))
        decided["older_than"] = older_than.isoformat()
        if config.get("location"):
            args.append(("location", quote_literal(str(config["location"]))))
            decided["location"] = config["location"]
        mode = str(config.get("prefixMismatchMode") or "ERROR").upper()
        if mode not in ("ERROR", "IGNORE", "DELETE"):
            raise ProcedureOptionError(f"{op.policy_key}.prefixMismatchMode: must be ERROR, IGNORE or DELETE")
        args.append(("prefix_mismatch_mode", quote_literal(mode)))
        decided["prefix_mismatch_mode"] = mode
        for key, name in (("equalSchemes", "equal_schemes"), ("equalAuthorities", "equal_authorities")):
            value = config.get(key)
            if value:
                if not isinstance(value, Mapping):
                    raise ProcedureOptionError(f"{op.policy_key}.{key}: expected a mapping of strings")
                args.append((name, _options_map({str(k): str(v) for k, v in value.items()})))
                decided[name] = dict(value)
        if config.get("dryRun") is not None:
            args.append(("dry_run", _bool(config["dryRun"])))
            decided["dry_run"] = bool(config["dryRun"])

    elif op is Operation.REWRITE_MANIFESTS:
        java_only = {"stagingLocation", "sortBy", "rewriteIf"} & set(config)
        if java_only:
            raise ProcedureOptionError(
                f"{op.policy_key}: {', '.join(sorted(java_only))} exist only on Iceberg's Java RewriteManifests "
                "action, not on the rewrite_manifests Spark procedure; remove them"
            )
        _check_keys(op, config, {"specId", "useCaching"})
        if config.get("specId") is not None:
            args.append(("spec_id", str(_positive_int(op, "specId", config["specId"], minimum=0))))
            decided["spec_id"] = config["specId"]
        if config.get("useCaching") is not None:
            args.append(("use_caching", _bool(config["useCaching"])))
            decided["use_caching"] = bool(config["useCaching"])

    elif op is Operation.REWRITE_POSITION_DELETE_FILES:
        _check_keys(op, config, set(_POSITION_DELETE_OPTIONS))
        options = _engine_options(op, config, _POSITION_DELETE_OPTIONS)
        if options:
            args.append(("options", _options_map(options)))
            decided["options"] = options

    procedure = f"{quote_identifier(table.catalog)}.`system`.{op.procedure}"
    sql = f"CALL {procedure}(" + ", ".join(f"{name} => {value}" for name, value in args) + ")"
    return ProcedureCall(operation=op, table=table, sql=sql, arguments=decided)


@dataclass(frozen=True)
class ProcedureResult:
    operation: Operation
    numbers: dict[str, int]  # the procedure's output columns, as numbers
    changed: bool  # False is a "zero-change" run in DESIGN.md section 4's sense
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
