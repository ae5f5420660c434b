"""An orphan cleanup's ``remove_orphan_files`` calls: the plain call, the calls of a run in rounds (a
listing, then the deletion or Iceberg's check of the listed paths over a ``file_list_view``), and their
results as numbers. Pure: no Spark import (spark/orphan_runs.py runs them).

Iceberg's procedure has no cap on deletions and cannot move files. A capped run (``maxFilesToDelete``)
and a quarantine run (core/storage/quarantine.py) go in rounds: a dry run lists the orphans (streamed, at most
ORPHAN_SAMPLE_LIMIT paths, so the driver never holds more; a quarantine run without a cap lists them all
unstreamed, one round); then floe reads each listed file's real size and modification time, and either
the real call deletes the paths still within the cap, given to Iceberg as a ``file_list_view`` with
those times instead of a listing, or floe moves them into the quarantine, after Iceberg's own check
of them (the same call as a dry run) whenever the table changed since the listing began. Iceberg
checks the view's paths against the table's metadata at that moment, and their times against the
same ``older_than``: a file that became referenced, or was written again, in between survives.
Orphans beyond the cap stay on disk: the backlog the next run lists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

from floe_dagster.core.storage.object_storage import S3_FILE_IO
from floe_dagster.core.operation_kinds.orphan_cleanup import (
    DEFAULT_ORPHAN_RETENTION_DAYS,
    DEFAULT_PREFIX_MISMATCH_MODE,
    OrphanCleanupConfig,
)
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.procedures import CallArguments, ProcedureCall, ProcedureResult, call_sql, release

KIND = "ORPHAN_CLEANUP"
# FileIOs of object stores that list a prefix themselves (Iceberg's SupportsPrefixOperations). Iceberg's
# orphan cleanup lists with Hadoop's FileSystem unless told to use the FileIO (``prefix_listing``), and
# Hadoop cannot list s3://, gs:// or abfs:// without connectors floe-dagster does not load.
PREFIX_LISTING_FILE_IOS = frozenset({
    S3_FILE_IO, "org.apache.iceberg.gcp.gcs.GCSFileIO", "org.apache.iceberg.azure.adlsv2.ADLSFileIO",
})
# With ``stream_results``, Iceberg 1.11's remove_orphan_files returns only the first 20,000 paths it
# deleted (DeleteOrphanFilesSparkAction.MAX_ORPHAN_FILE_SAMPLE_SIZE_DEFAULT; the exact count goes to its
# log only): a streamed result of this many rows means "at least this many".
ORPHAN_SAMPLE_LIMIT = 20_000


def supports_streamed_orphans(iceberg_version: str | None) -> bool:
    """Whether remove_orphan_files has ``stream_results`` (Iceberg 1.11 and later; None: the default, 1.11)."""
    version = release(iceberg_version)
    return version is None or version >= (1, 11)


def orphan_arguments(call: CallArguments, config: OrphanCleanupConfig, now: datetime,
                     table_properties: Mapping[str, str]) -> None:
    """remove_orphan_files' named arguments."""
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


def orphan_call(table: TableName, config: OrphanCleanupConfig, now: datetime,
                table_properties: Mapping[str, str] | None = None, file_io: str | None = None,
                iceberg_version: str | None = None, file_list_view: str | None = None) -> ProcedureCall:
    """One remove_orphan_files call (``file_list_view``: over that view's files instead of a listing)."""
    op = Operation(KIND)
    call = CallArguments(table, file_io, iceberg_version=iceberg_version)
    orphan_arguments(call, config, now, table_properties or {})
    if file_list_view is not None:
        call.add("file_list_view", file_list_view)
    return ProcedureCall(op, table, call_sql(table, op.procedure, call), call.decided)


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
    listing = orphan_call(table, listing_config, now, table_properties, file_io, iceberg_version)

    def over_view(paths: list[str], dry_run: bool) -> ProcedureCall:
        # At most a round's paths come back: all of them fit in the driver, so no streaming is needed.
        view_config = replace(config, dry_run=True if dry_run else None, stream_results=False if supported else None,
                              max_files_to_delete=None, location=os.path.commonprefix(paths) or None,
                              max_concurrent_deletes=None if dry_run else config.max_concurrent_deletes)
        return orphan_call(table, view_config, now, table_properties, file_io, iceberg_version, view)

    cutoff = datetime.fromisoformat(listing.arguments["older_than"])
    return OrphanCalls(listing, view, cutoff, ORPHAN_SAMPLE_LIMIT if streamed else None, over_view)


@dataclass(frozen=True)
class OrphanRound:
    listed: int  # orphan paths the round's listing returned (at most the sample limit)
    deleted: tuple[str, ...]  # the paths the round deleted (or moved into the quarantine)


def summarize_orphan_cleanup(rows: Sequence[Mapping[str, Any]], streamed: bool,
                             dry_run: bool = False) -> ProcedureResult:
    """One uncapped call's rows. Streamed, Iceberg returns at most ORPHAN_SAMPLE_LIMIT paths: a full
    sample means at least that many files (``orphan_files_count_exact`` false)."""
    files = tuple(str(r["orphan_file_location"]) for r in rows)
    exact = not (streamed and len(files) >= ORPHAN_SAMPLE_LIMIT)
    numbers: dict[str, int] = {"orphan_files_count": len(files), "orphan_files_count_exact": exact}
    if dry_run:  # nothing was deleted: every orphan found is still there
        numbers.update(orphan_backlog_files=len(files), orphan_backlog_exact=exact)
    else:
        numbers.update(orphan_backlog_files=0, orphan_backlog_exact=True)
    return ProcedureResult(Operation(KIND), numbers, bool(files) and not dry_run, 0, files)


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
    return ProcedureResult(Operation(KIND), numbers, bool(deleted), 0, deleted)


__all__ = ["PREFIX_LISTING_FILE_IOS", "ORPHAN_SAMPLE_LIMIT", "supports_streamed_orphans", "orphan_arguments",
           "orphan_call", "OrphanCalls", "orphan_cleanup_calls", "OrphanRound", "summarize_orphan_cleanup",
           "summarize_capped_orphan_cleanup"]
