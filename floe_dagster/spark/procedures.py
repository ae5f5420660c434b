"""Iceberg Spark procedure calls: SQL building with safe quoting, and result parsing.

No Spark import here: building and parsing are pure, so they are tested without a JVM. Table names
reach SQL only as back-quoted identifiers inside an escaped string literal, and every string value
(filters, locations, timestamps, option values) only as an escaped literal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
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
    ComputeStatisticsConfig,
    ExpireSnapshotsConfig,
    OperationConfig,
    OrphanCleanupConfig,
    RewriteDataFilesConfig,
    RewriteManifestsConfig,
    RewritePositionDeleteFilesConfig,
    TablePropertiesConfig,
)
from floe_dagster.core.operations import Operation
from floe_dagster.core.partition_scope import MAX_SCOPED_PARTITIONS, RewriteScope
from floe_dagster.core.tables import TableName
from floe_dagster.spark.partition_predicates import partition_predicate
from floe_dagster.errors import ProcedureOptionError
from floe_dagster.spark.sql_literals import quote_identifier, quote_literal, timestamp_literal

# FileIOs of object stores that list a prefix themselves (Iceberg's SupportsPrefixOperations). Iceberg's
# orphan cleanup lists with Hadoop's FileSystem unless told to use the FileIO (``prefix_listing``), and
# Hadoop cannot list s3://, gs:// or abfs:// without connectors floe-dagster does not load.
PREFIX_LISTING_FILE_IOS = frozenset({
    S3_FILE_IO, "org.apache.iceberg.gcp.gcs.GCSFileIO", "org.apache.iceberg.azure.adlsv2.ADLSFileIO",
})


def table_argument(table: TableName) -> str:
    """The procedures' ``table`` argument: a literal holding the quoted multi-part identifier, catalog
    included. Iceberg reads a first part that names a catalog as that catalog, so without it a namespace
    named like a catalog would be taken for one; and on Spark 4, Iceberg logs a warning with a stack
    trace for every first part that is not a catalog."""
    return quote_literal(spark_table_reference(table))


def spark_table_reference(table: TableName) -> str:
    """The table as a Spark SQL identifier, catalog included, for queries such as ``SELECT count(*)``."""
    return ".".join(quote_identifier(p) for p in (table.catalog, *table.identifier))


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


# With ``stream_results``, Iceberg 1.11's remove_orphan_files returns only the first 20,000 paths it
# deleted (DeleteOrphanFilesSparkAction.MAX_ORPHAN_FILE_SAMPLE_SIZE_DEFAULT; the exact count goes to its
# log only): a streamed result of this many rows means "at least this many".
ORPHAN_SAMPLE_LIMIT = 20_000


def supports_streamed_orphans(iceberg_version: str | None) -> bool:
    """Whether remove_orphan_files has ``stream_results`` (Iceberg 1.11 and later; None: the default, 1.11)."""
    release = _release(iceberg_version)
    return release is None or release >= (1, 11)


def _release(version: str | None) -> tuple[int, int] | None:
    """``major.minor`` of a version (None: unset or unreadable)."""
    try:
        major, minor = (int(part) for part in (version or "").split(".")[:2])
    except ValueError:
        return None
    return major, minor


def supports_manifest_sort_by(iceberg_version: str | None, spark_line: str | None) -> bool:
    """Whether rewrite_manifests has ``sort_by``: Iceberg 1.11 added it to the Spark 4.1 runtime only
    (its 3.5 and 4.0 runtimes' RewriteManifestsProcedure take table, use_caching and spec_id). An
    unknown Spark line: no (the procedure refuses a parameter it does not have)."""
    line, iceberg = _release(spark_line), _release(iceberg_version)
    return line is not None and line >= (4, 1) and (iceberg is None or iceberg >= (1, 11))


class _Arguments:
    """A ``CALL``'s named arguments as SQL text, and what was decided (the call's ``arguments``)."""

    def __init__(self, table: TableName, file_io: str | None, scope: RewriteScope | None = None,
                 iceberg_version: str | None = None, spark_line: str | None = None,
                 snapshot_id: int | None = None):
        self.sql: list[tuple[str, str]] = [("table", table_argument(table))]
        self.decided: dict[str, Any] = {}
        self.file_io = file_io  # the catalog's FileIO class in Spark (io-impl); None: Iceberg's default
        self.scope = scope  # rewrite_data_files: the partitions the planner chose (None: the whole table)
        self.iceberg_version = iceberg_version  # the Iceberg Spark runtime's (None: floe-dagster's default)
        self.spark_line = spark_line  # "3.5", "4.1" (None: unknown)
        self.snapshot_id = snapshot_id  # compute_table_stats: the snapshot described (None: the current one)

    def add(self, name: str, value: Any) -> None:
        """A typed value as the argument ``name``, rendered by its type (true/false, a number, a string
        literal, a ``map(...)`` for a mapping or its items, an ``array(...)`` of literals for a list);
        unset (None, or an empty mapping): none."""
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
        elif isinstance(value, list):
            text = "array(" + ", ".join(quote_literal(str(item)) for item in value) + ")"
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
    options, where = {**options, **race_options(options, table_properties)}, config.filter  # core/commit_conflicts.py
    if call.scope is not None:
        options, where = _scoped(call, options, where)
    call.add("options", options)
    call.add("where", where)


def _scoped(call: _Arguments, options: dict[str, Any], where: str | None) -> tuple[dict[str, Any], str | None]:
    """A partition-scoped rewrite (core/partition_scope.py): ``where`` limited to the chosen units (ANDed
    with the policy's ``filter``) and/or ``max-files-to-rewrite`` (the smaller of the planner's and
    the policy's). A scope recorded before its fields were whose where cannot be written exactly
    (a bucket field) is bounded by its file count."""
    scope = call.scope
    call.decided["scoped_partitions"] = len(scope.partitions)
    limit = scope.max_files
    how = []
    if scope.partitions:
        predicate = partition_predicate(scope.fields, scope.partitions) \
            if len(scope.partitions) <= MAX_SCOPED_PARTITIONS else None
        if predicate is not None:
            where = f"({where}) AND ({predicate})" if where else predicate
            how.append("where")
        elif limit is None:
            limit = max(1, scope.files)
    if limit is not None:
        options = {**options, "max-files-to-rewrite": min(limit, options.get("max-files-to-rewrite") or limit)}
        how.append("max-files-to-rewrite")
    call.decided["scope"] = " + ".join(how) or "none"
    return options, where


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
    call.add("max_concurrent_deletes", config.max_concurrent_deletes)
    streamed = config.stream_results
    if streamed is None and supports_streamed_orphans(call.iceberg_version):
        streamed = True  # bounded driver memory by default: at millions of files this is what is needed
    call.add("stream_results", streamed)
    if call.file_io in PREFIX_LISTING_FILE_IOS:
        call.add("prefix_listing", True)


def _rewrite_manifests(call: _Arguments, config: RewriteManifestsConfig, now: datetime,
                       table_properties: Mapping[str, str]) -> None:
    call.add("spec_id", config.effective_spec_id)  # rewriteIf's specId too
    call.add("use_caching", config.use_caching)
    if config.sort_by:
        if supports_manifest_sort_by(call.iceberg_version, call.spark_line):
            call.add("sort_by", list(config.sort_by))
        else:  # the policy's warning says so too; the run's metadata shows it
            call.decided["sort_by_ignored"] = (f"{list(config.sort_by)}: rewrite_manifests has no sort_by on Spark "
                                               f"{call.spark_line or '(unknown)'} (Iceberg 1.11: Spark 4.1 only)")


def _rewrite_position_delete_files(call: _Arguments, config: RewritePositionDeleteFilesConfig, now: datetime,
                                   table_properties: Mapping[str, str]) -> None:
    options = config.iceberg_options()
    call.add("options", {**options, **race_options(options, table_properties)})


def _compute_statistics(call: _Arguments, config: ComputeStatisticsConfig, now: datetime,
                        table_properties: Mapping[str, str]) -> None:
    call.add("snapshot_id", call.snapshot_id)
    call.add("columns", list(config.columns) if config.columns else None)


def partition_statistics_call(table: TableName, snapshot_id: int | None) -> ProcedureCall:
    """``compute_partition_stats`` (Iceberg 1.10 and later) for ``snapshot_id`` (None: the current
    snapshot). Iceberg refuses it on an unpartitioned table ("Table must be partitioned"), so the engine
    makes this call only on partitioned ones; for a snapshot that already has its file, Iceberg returns
    that file and writes nothing."""
    call = _Arguments(table, None, snapshot_id=snapshot_id)
    call.add("snapshot_id", snapshot_id)
    return ProcedureCall(Operation.COMPUTE_STATISTICS, table, _call_sql(table, "compute_partition_stats", call),
                         call.decided)


def _call_sql(table: TableName, procedure: str, call: _Arguments) -> str:
    name = f"{quote_identifier(table.catalog)}.`system`.{procedure}"
    return f"CALL {name}(" + ", ".join(f"{arg} => {value}" for arg, value in call.sql) + ")"


_RENDERERS = {
    Operation.REWRITE_DATA_FILES: _rewrite_data_files,
    Operation.EXPIRE_SNAPSHOTS: _expire_snapshots,
    Operation.ORPHAN_CLEANUP: _orphan_cleanup,
    Operation.REWRITE_MANIFESTS: _rewrite_manifests,
    Operation.REWRITE_POSITION_DELETE_FILES: _rewrite_position_delete_files,
    Operation.COMPUTE_STATISTICS: _compute_statistics,
}


def build_procedure_call(
    op: Operation,
    table: TableName,
    config: OperationConfig,
    now: datetime,
    table_properties: Mapping[str, str] | None = None,
    file_io: str | None = None,
    *,
    scope: RewriteScope | None = None,
    iceberg_version: str | None = None,
    file_list_view: str | None = None,
    spark_line: str | None = None,
    snapshot_id: int | None = None,
) -> ProcedureCall:
    """The ``CALL`` statement for one operation on one table, rendered from the policy's typed config
    (the core validated it when the policy was loaded: nothing is checked again here). ``file_io``:
    the catalog's FileIO class in Spark (``io-impl``), which decides how orphan cleanup lists files;
    ``iceberg_version``: the Iceberg Spark runtime's, which decides orphan cleanup's default streaming;
    ``spark_line``: the engine's Spark (``4.1``), which decides whether rewrite_manifests takes sort_by;
    ``file_list_view``: orphan cleanup compares that view's files instead of listing (capped runs);
    ``snapshot_id``: the snapshot compute_table_stats describes (None: the current one)."""
    if not isinstance(config, CONFIG_TYPES[op]):
        raise TypeError(f"{op.policy_key}: expected a {CONFIG_TYPES[op].__name__}, got {type(config).__name__}")
    if isinstance(config, TablePropertiesConfig):  # not a CALL: the statement setting every declared property
        declared = dict(config.properties)
        return ProcedureCall(op, table, set_properties_sql(table, declared), arguments=declared)
    call = _Arguments(table, file_io, scope if op is Operation.REWRITE_DATA_FILES else None, iceberg_version,
                      spark_line, snapshot_id if op is Operation.COMPUTE_STATISTICS else None)
    _RENDERERS[op](call, config, now, table_properties or {})
    if file_list_view is not None:
        call.add("file_list_view", file_list_view)
    return ProcedureCall(operation=op, table=table, sql=_call_sql(table, op.procedure, call), arguments=call.decided)


def set_properties_sql(table: TableName, properties: Mapping[str, str]) -> str:
    """``ALTER TABLE ... SET TBLPROPERTIES``: one metadata commit (Iceberg's UpdateProperties) setting
    exactly these properties and no other; names and values only as escaped string literals."""
    if not properties:
        raise ProcedureOptionError(f"{Operation.APPLY_TABLE_PROPERTIES.policy_key}: no table properties to set")
    pairs = ", ".join(f"{quote_literal(name)} = {quote_literal(value)}" for name, value in properties.items())
    return f"ALTER TABLE {spark_table_reference(table)} SET TBLPROPERTIES ({pairs})"


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
    if op is Operation.ORPHAN_CLEANUP:  # unstreamed: every path comes back (see summarize_orphan_cleanup)
        return summarize_orphan_cleanup(rows, streamed=False)
    if op is Operation.COMPUTE_STATISTICS:
        return summarize_statistics(rows, [])
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


def summarize_statistics(table_rows: list[Mapping[str, Any]],
                         partition_rows: list[Mapping[str, Any]]) -> ProcedureResult:
    """compute_table_stats' rows (``statistics_file``) and compute_partition_stats' (``partition_statistics_file``),
    each empty when it was not called: a file written is a change (the no-change rule: the engine calls
    neither when the current snapshot's statistics exist, core/statistics.statistics_work)."""
    written = sum(1 for row in table_rows if row.get("statistics_file"))
    partition_written = sum(1 for row in partition_rows if row.get("partition_statistics_file"))
    numbers = {"statistics_files_written": written, "partition_statistics_files_written": partition_written}
    return ProcedureResult(Operation.COMPUTE_STATISTICS, numbers, bool(written or partition_written), 0)


# -- orphan cleanup in rounds: under a per-run cap, or into a quarantine -----------------------------------
# Iceberg's procedure has no cap on deletions and cannot move files. A capped run (``maxFilesToDelete``)
# and a quarantine run (core/quarantine.py) go in rounds: a dry run lists the orphans (streamed, at most
# ORPHAN_SAMPLE_LIMIT paths, so the driver never holds more; a quarantine run without a cap lists them all
# unstreamed, one round); then floe reads each listed file's real size and modification time, and either
# the real call deletes the paths still within the cap, given to Iceberg as a ``file_list_view`` with
# those times instead of a listing, or floe moves them into the quarantine, after Iceberg's own check
# of them (the same call as a dry run) whenever the table changed since the listing began. Iceberg
# checks the view's paths against the table's metadata at that moment, and their times against the
# same ``older_than``: a file that became referenced, or was written again, in between survives.
# Orphans beyond the cap stay on disk: the backlog the next run lists.


@dataclass(frozen=True)
class OrphanCalls:
    """A round's calls: ``listing`` finds orphans (a dry run); ``deletion(paths)`` deletes the listed
    ``paths`` given in ``view`` (file_path string, last_modified timestamp: each file's real time) after
    Iceberg checked them again; ``recheck(paths)`` is that check alone (a dry run over the view)."""

    listing: ProcedureCall
    view: str
    cutoff: datetime  # older_than: a file at least this new is not an orphan
    sample_limit: int | None  # the most paths a listing returns (None: all of them, unstreamed)
    _over_view: Any  # (paths, dry run) → ProcedureCall

    def deletion(self, paths: list[str]) -> ProcedureCall:
        return self._over_view(paths, False)

    def recheck(self, paths: list[str]) -> ProcedureCall:
        return self._over_view(paths, True)


def orphan_cleanup_calls(table: TableName, config: OrphanCleanupConfig, now: datetime,
                         table_properties: Mapping[str, str] | None = None, file_io: str | None = None,
                         iceberg_version: str | None = None, view: str = "floe_orphan_batch",
                         stream: bool = True) -> OrphanCalls:
    """The calls of a round. The listing is a dry run, streamed where Iceberg can unless ``stream`` is
    false or the policy says ``streamResults: false`` (at the price of every orphan path in the driver).

    The calls over the view take ``location``: the paths' common prefix. Iceberg keeps only the view's
    paths that start with ``location`` (the table's by default), and its listing spells paths its own
    way (``file:/wh/t/…`` for a table at ``/wh/t``). It only filters the view, never widens it: the paths
    are the listing's, and what decides whether one is deleted is the check against the table's
    metadata and the cutoff."""
    supported = supports_streamed_orphans(iceberg_version)
    streamed = stream and config.stream_results is not False and supported
    listed_as = True if streamed else False if supported else config.stream_results
    listing_config = replace(config, dry_run=True, stream_results=listed_as,
                             max_concurrent_deletes=None, max_files_to_delete=None)
    listing = build_procedure_call(Operation.ORPHAN_CLEANUP, table, listing_config, now, table_properties,
                                   file_io, iceberg_version=iceberg_version)

    def over_view(paths: list[str], dry_run: bool) -> ProcedureCall:
        # At most a round's paths come back: all of them fit in the driver, so no streaming is needed.
        view_config = replace(config, dry_run=True if dry_run else None, stream_results=False if supported else None,
                              max_files_to_delete=None, location=os.path.commonprefix(paths) or None,
                              max_concurrent_deletes=None if dry_run else config.max_concurrent_deletes)
        return build_procedure_call(Operation.ORPHAN_CLEANUP, table, view_config, now, table_properties,
                                    file_io, iceberg_version=iceberg_version, file_list_view=view)

    cutoff = datetime.fromisoformat(listing.arguments["older_than"])
    return OrphanCalls(listing, view, cutoff, ORPHAN_SAMPLE_LIMIT if streamed else None, over_view)


@dataclass(frozen=True)
class OrphanRound:
    listed: int  # orphan paths the round's listing returned (at most the sample limit)
    deleted: tuple[str, ...]  # the paths the round deleted (or moved into the quarantine)


def summarize_orphan_cleanup(rows: list[Mapping[str, Any]], streamed: bool, dry_run: bool = False) -> ProcedureResult:
    """One uncapped call's rows. Streamed, Iceberg returns at most ORPHAN_SAMPLE_LIMIT paths: a full
    sample means at least that many files (``orphan_files_count_exact`` false)."""
    files = tuple(str(r["orphan_file_location"]) for r in rows)
    exact = not (streamed and len(files) >= ORPHAN_SAMPLE_LIMIT)
    numbers: dict[str, int] = {"orphan_files_count": len(files), "orphan_files_count_exact": exact}
    if dry_run:  # nothing was deleted: every orphan found is still there
        numbers.update(orphan_backlog_files=len(files), orphan_backlog_exact=exact)
    else:
        numbers.update(orphan_backlog_files=0, orphan_backlog_exact=True)
    return ProcedureResult(Operation.ORPHAN_CLEANUP, numbers, bool(files) and not dry_run, 0, files)


def summarize_capped_orphan_cleanup(rounds: list[OrphanRound], cap: int | None,
                                    sample_limit: int | None) -> ProcedureResult:
    """A run in rounds: the files deleted or quarantined (exact: each call returns all its paths, and
    floe counts what it moved), whether the cap (None: no cap) cut the run, and the backlog: the orphans
    listed and not removed, exact unless the last listing returned a full sample (then at least that
    many; more may lie beyond it)."""
    deleted = tuple(path for r in rounds for path in r.deleted)
    last = rounds[-1] if rounds else OrphanRound(0, ())
    full_sample = sample_limit is not None and last.listed >= sample_limit
    backlog = last.listed - len(last.deleted)
    numbers: dict[str, int] = {"orphan_files_count": len(deleted), "orphan_files_count_exact": True}
    if cap is not None:
        numbers.update(orphan_cap=cap, orphan_cap_reached=len(deleted) >= cap and (backlog > 0 or full_sample))
    numbers.update(orphan_backlog_files=backlog, orphan_backlog_exact=not full_sample, orphan_rounds=len(rounds))
    return ProcedureResult(Operation.ORPHAN_CLEANUP, numbers, bool(deleted), 0, deleted)
