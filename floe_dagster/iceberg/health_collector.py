"""Table health collection: :class:`TableMetrics` for many tables, incrementally, within a time budget.

The metrics come from Iceberg metadata with PyIceberg only (iceberg/metadata_reduction.py: the
``summary`` and ``full`` tiers), cached on disk (iceberg/metrics_cache.py): one record per (table,
tier), hit when the table's current metadata location equals the record's, so an unchanged table
costs no read. Manifests are immutable, so each manifest's reduced content is cached by its path too:
after an append, the full tier reads the metadata file, the manifest list and the new manifest only,
and a huge table's first full read can spread over several ticks.

Cost per tick (per collect call):

* SQL catalog: one query lists every table's metadata location; an unchanged table costs nothing
  more (no ``load_table``, no file read); a changed one costs its metadata file (summary tier), plus
  its manifest list and any manifest not seen before (full tier).
* Other catalogs: one ``load_table`` per table (the catalog reads the metadata file or answers over
  REST); an unchanged table costs nothing more; a changed one costs the manifest list and new manifests
  (full tier).

Work is done within a time budget: ``collect`` returns what it has (cached or computed in time) and
lists the tables still missing, never-collected and least-recently-collected tables first, so a cold
start never blows the sensor's 60 s limit. Parsed records also stay in memory for the process (shared by
collectors on the same cache file), so a sensor that makes a collector per tick does not re-parse them.
A collector is not thread-safe.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.facts.ref_pins import data_file_hashes, pinned_file_bytes
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import OUTAGE, CatalogUnavailable, FloeError, HealthError, UnknownTable, failure_kind
from floe_dagster.iceberg.catalog import list_table_metadata_locations, list_tables, load_table, storage_context
from floe_dagster.iceberg.counting_file_io import CountingFileIO
from floe_dagster.iceberg.metadata_reduction import full_metrics, pinned_by_ref, summarize_manifest, summary_metrics
from floe_dagster.iceberg.metrics_cache import CACHE_FILE, MetricsCache
from floe_dagster.iceberg.table_io import catalog_file_io

log = logging.getLogger(__name__)

TierName = Literal["summary", "full"]


# -- results --------------------------------------------------------------------------------------------


@dataclass
class HealthSnapshot:
    """What one ``collect`` call has: metrics at (at least) the asked tier, and what is still missing."""

    metrics: dict[TableName, TableMetrics]
    missing: list[TableName]  # no health at this tier yet (out of time, failed, or not in the catalog)
    files_read: int = 0  # metadata, manifest-list and manifest files this call read itself
    catalog_calls: int = 0  # listing queries and load_table calls
    computed: list[TableName] = field(default_factory=list)  # freshly computed (not from the cache)
    errors: dict[TableName, str] = field(default_factory=dict)  # why a table has no health
    unknown: list[TableName] = field(default_factory=list)  # asked for, but not in the catalog
    elapsed_s: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.missing


# -- the collector -------------------------------------------------------------------------------------------


_UNLISTED = object()  # a table the catalog's listing does not have


@dataclass
class _Collection:
    """What one collect found so far."""

    metrics: dict[TableName, TableMetrics] = field(default_factory=dict)
    errors: dict[TableName, str] = field(default_factory=dict)
    unknown: list[TableName] = field(default_factory=list)
    computed: list[TableName] = field(default_factory=list)


class _OutOfTime(Exception):
    pass


# Parsed cache records, shared by every collector of this process (a sensor makes one per tick):
# (cache file, table, tier) → (metadata location, metrics). One entry per table and tier.
_PARSED: dict[tuple[str, str, str], tuple[str, TableMetrics]] = {}


def forget_parsed_records() -> None:
    """Drop the in-memory copies (as a new process would start); the on-disk cache stays."""
    _PARSED.clear()


# A ref pinning more snapshots than this has its snapshots counted but its files not measured (each
# snapshot costs a manifest-list read): an active branch, not a forgotten one.
MAX_PINNED_SNAPSHOTS_READ = 20

_METADATA_KEPT = 5_000  # parsed metadata files a collector keeps (a cold tick of a large shard reads more)


class HealthCollector:
    """Collects :class:`TableMetrics` incrementally, cached on disk by metadata location.

    ``cache_dir``: a folder, or a :class:`~floe_dagster.settings.Settings` (then
    ``<data_dir>/cache/health``). ``clock`` gives ``collected_at`` (aware datetime); ``timer`` measures
    the time budget. ``use_location_listing``: None means "when the catalog is a SqlCatalog".
    """

    def __init__(
        self,
        catalog: Catalog,
        cache_dir: Any,
        clock: Callable[[], datetime] | None = None,
        *,
        timer: Callable[[], float] = time.monotonic,
        use_location_listing: bool | None = None,
    ):
        if hasattr(cache_dir, "data_dir"):  # Settings
            cache_dir = Path(cache_dir.data_dir) / "cache" / "health"
        self.catalog = catalog
        self.cache_dir = Path(cache_dir)
        self.cache = MetricsCache(self.cache_dir / CACHE_FILE)
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._timer = timer
        self._listing = isinstance(catalog, SqlCatalog) if use_location_listing is None else use_location_listing
        self.files_read = 0  # since this collector was made
        self.catalog_calls = 0
        self.read_log: list[str] = []  # the last collect call's file reads, in order
        self._touched: list[tuple[str, str]] = []
        # Metadata read by this collector, by metadata location (the file never changes): a tick asks for
        # the summary tier and then the full tier, and a changed table's file is read once, not twice.
        self._metadata: dict[str, TableMetadata] = {}

    # public API ----------------------------------------------------------------------------------------
    def collect(
        self,
        tables: Iterable[TableName] | None = None,
        *,
        tier: TierName = "summary",
        time_budget_s: float | None = None,
    ) -> HealthSnapshot:
        """Metrics for ``tables`` (all of the catalog's when None) at ``tier`` or better.

        Cached records whose metadata location is current are returned at no cost; the others are
        computed until ``time_budget_s`` is used up (None: no limit; 0: cache only). The budget is
        checked before each table and between manifests, and each started table reads at least one
        new manifest, so every call makes progress. Raises :class:`CatalogUnavailable` when the
        catalog cannot be listed, or when it could not be reached for any table this collect tried
        (errors.failure_kind's rule); a table that is corrupt, missing or refused is only left out,
        with its error.
        """
        if tier not in ("summary", "full"):
            raise ValueError(f"tier must be 'summary' or 'full', got {tier!r}")
        started = self._timer()
        deadline = None if time_budget_s is None else started + max(0.0, time_budget_s)
        reads_before, calls_before = self.files_read, self.catalog_calls
        self.read_log = []
        locations = self._list_locations() if self._listing else None
        if tables is None:
            wanted = sorted(locations) if locations is not None else self._list_tables()
            self.cache.prune_tables({t.qualified for t in wanted})
        else:
            wanted = list(dict.fromkeys(tables))
        index = self.cache.index()
        result = _Collection()
        pending = self._from_cache(wanted, tier, locations, index, result)
        self._compute(pending, tier, locations, index, deadline, result)
        return HealthSnapshot(
            metrics=result.metrics,
            missing=[t for t in wanted if t not in result.metrics],
            files_read=self.files_read - reads_before,
            catalog_calls=self.catalog_calls - calls_before,
            computed=result.computed,
            errors=result.errors,
            unknown=result.unknown,
            elapsed_s=self._timer() - started,
        )

    def _from_cache(self, wanted: list[TableName], tier: TierName, locations: dict[TableName, str | None] | None,
                    index: Mapping[str, Any], result: "_Collection") -> list[TableName]:
        """Fill ``result`` with the cached records whose metadata location is current (and the tables
        the listing shows missing or without metadata); the tables left to compute, in the order to
        compute them: never collected first, then least recently checked."""
        pending: list[TableName] = []
        for table in wanted:
            location = None if locations is None else locations.get(table, _UNLISTED)
            if locations is None:
                pending.append(table)
            elif location is _UNLISTED:
                result.errors[table] = f"table '{table.qualified}' does not exist in catalog '{self.catalog.name}'"
                result.unknown.append(table)
            elif not location:
                result.errors[table] = f"table '{table.qualified}' has no metadata location yet"
            elif (hit := self._cached(table, tier, location, index)) is not None:
                result.metrics[table] = hit
            else:
                pending.append(table)

        def priority(table: TableName) -> tuple[int, int]:
            rows = index.get(table.qualified, {})
            row = rows.get(tier) or (rows.get("full") if tier == "summary" else None)
            return (1, row[1]) if row else (0, 0)

        return sorted(pending, key=priority)

    def _compute(self, pending: list[TableName], tier: TierName, locations: dict[TableName, str | None] | None,
                 index: Mapping[str, Any], deadline: float | None, result: "_Collection") -> None:
        """Compute the pending tables until the deadline; a broken table never stops the others."""
        attempts = outages = 0
        wrote_full = False
        for table in pending:
            if deadline is not None and self._timer() >= deadline:
                break
            attempts += 1
            try:
                metrics, fresh = self._collect_one(table, tier, locations, index, deadline)
            except _OutOfTime:
                continue
            except UnknownTable as exc:
                result.errors[table] = str(exc)
                result.unknown.append(table)
                continue
            except Exception as exc:  # a broken table must not stop the others
                # Only what cannot be reached is an outage (errors.failure_kind); a corrupt, missing or
                # refused table is that table's error alone.
                if failure_kind(exc) == OUTAGE:
                    outages += 1
                if isinstance(exc, FloeError):
                    result.errors[table] = str(exc)
                    continue
                log.warning("health of %s could not be collected: %s", table.qualified, exc, exc_info=True)
                where = storage_context(self.catalog) if isinstance(exc, OSError) else ""  # a read from storage failed
                result.errors[table] = f"{type(exc).__name__}: {exc}{where}"
                continue
            result.metrics[table] = metrics
            if fresh:
                result.computed.append(table)
                wrote_full |= metrics.tier == "full"
        if attempts and outages == attempts and locations is None:
            raise CatalogUnavailable(next(iter(result.errors.values())))
        if self._touched:
            self.cache.touch(self._touched, self._now_ms())
            self._touched = []
        if wrote_full:
            self.cache.collect_garbage()

    def metrics_for(self, table: TableName, tier: TierName = "summary") -> TableMetrics:
        """One table's metrics, collected now if needed (no time budget). Raises UnknownTable when the
        table is not in the catalog, CatalogUnavailable when the catalog cannot be reached, HealthError
        when its metadata cannot be read."""
        snapshot = self.collect([table], tier=tier)
        if table in snapshot.metrics:
            return snapshot.metrics[table]
        message = snapshot.errors.get(table, f"no health for '{table.qualified}'")
        if table in snapshot.unknown:
            raise UnknownTable(message, table)
        raise HealthError(message)

    def cached(self, table: TableName, tier: TierName = "summary") -> TableMetrics | None:
        """The latest cached record, without any catalog call or read; it may be out of date."""
        tiers = (tier,) if tier == "full" else ("summary", "full")
        found = [r for r in (self.cache.record(table.qualified, t) for t in tiers) if r is not None]
        return max((m for _, m in found), key=lambda m: m.collected_at_ms, default=None)

    def close(self) -> None:
        self._metadata.clear()
        self.cache.close()

    def __enter__(self) -> "HealthCollector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals -------------------------------------------------------------------------------------------
    def _count_read(self, location: str) -> None:
        self.files_read += 1
        self.read_log.append(location)

    def _now_ms(self) -> int:
        return int(self._clock().timestamp() * 1000)

    def _list_locations(self) -> dict[TableName, str | None]:
        self.catalog_calls += 1
        try:
            return list_table_metadata_locations(self.catalog)  # type: ignore[arg-type]
        except Exception as exc:
            raise CatalogUnavailable(f"catalog '{self.catalog.name}' could not list tables: {exc}") from exc

    def _list_tables(self) -> list[TableName]:
        self.catalog_calls += 1
        return list_tables(self.catalog)

    def _cached(
        self, table: TableName, tier: str, location: str, index: Mapping[str, Mapping[str, tuple[str, int]]]
    ) -> TableMetrics | None:
        rows = index.get(table.qualified, {})
        for candidate in ("full",) if tier == "full" else ("summary", "full"):
            row = rows.get(candidate)
            if row is None or row[0] != location:
                continue
            key = (str(self.cache.path), table.qualified, candidate)
            memo = _PARSED.get(key)
            if memo is None or memo[0] != location:
                record = self.cache.record(table.qualified, candidate)
                if record is None or record[0] != location:
                    continue
                memo = _PARSED[key] = record
            return memo[1]
        return None

    def _collect_one(
        self,
        table: TableName,
        tier: str,
        locations: Mapping[TableName, str | None] | None,
        index: Mapping[str, Mapping[str, tuple[str, int]]],
        deadline: float | None,
    ) -> tuple[TableMetrics, bool]:
        """(metrics, freshly computed?)"""
        loaded: Table | None = None
        if locations is None:
            self.catalog_calls += 1
            loaded = load_table(self.catalog, table)
            location = loaded.metadata_location
            hit = self._cached(table, tier, location, index)
            if hit is not None:
                self._touched.append((table.qualified, hit.tier))
                return hit, False
            metadata = loaded.metadata
            io: FileIO = CountingFileIO(loaded.io, self._count_read)
        else:
            location = locations[table]  # type: ignore[assignment]
            metadata = self._metadata.get(location)
            if metadata is None:
                meta_io = CountingFileIO(catalog_file_io(self.catalog, location), self._count_read)
                metadata = FromInputFile.table_metadata(meta_io.new_input(location))
                if len(self._metadata) < _METADATA_KEPT:
                    self._metadata[location] = metadata
            io = CountingFileIO(catalog_file_io(self.catalog, location), self._count_read)  # never the table's
        now_ms = self._now_ms()
        if tier == "summary":
            metrics = summary_metrics(table, location, metadata, now_ms, io)
            self.cache.put(metrics)
        else:
            metrics = self._full(table, location, metadata, io, now_ms, deadline)
        _PARSED[(str(self.cache.path), table.qualified, metrics.tier)] = (location, metrics)
        return metrics, True

    def _full(
        self, table: TableName, location: str, metadata: TableMetadata, io: FileIO, now_ms: int, deadline: float | None
    ) -> TableMetrics:
        current = metadata.current_snapshot()
        manifests = current.manifests(io) if current is not None else []
        summaries = self._summaries(table, io, manifests, deadline)
        pinned_files, ref_paths = self._pinned_files(table, metadata, io, manifests, summaries, now_ms, deadline)
        metrics = full_metrics(table, location, metadata, manifests, summaries, now_ms, pinned_files)
        self.cache.put(metrics, manifest_paths=[*(m.manifest_path for m in manifests), *ref_paths])
        return metrics

    def _summaries(self, table: TableName, io: FileIO, manifests: list[ManifestFile], deadline: float | None
                   ) -> dict[str, dict[str, Any]]:
        """Each manifest reduced (core/facts/manifest_reduction.py), from the cache or read and cached now."""
        summaries = self.cache.manifests([m.manifest_path for m in manifests])
        read_here = 0
        for manifest in manifests:
            if manifest.manifest_path in summaries:
                continue
            if read_here and deadline is not None and self._timer() >= deadline:
                raise _OutOfTime(table)  # what was read is cached: the next call goes on from there
            entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
            reduced = summarize_manifest(manifest, entries)
            self.cache.put_manifest(table.qualified, manifest.manifest_path, reduced)
            summaries[manifest.manifest_path] = reduced
            read_here += 1
        return summaries

    def _pinned_files(self, table: TableName, metadata: TableMetadata, io: FileIO, main_manifests: list[ManifestFile],
                      main_summaries: Mapping[str, Mapping[str, object]], now_ms: int, deadline: float | None
                      ) -> tuple[dict[str, tuple[int, int]], list[str]]:
        """Each non-main ref that pins snapshots → (files, bytes) only they reference (core/facts/ref_pins.py), and
        the manifests read for it (kept in the cache with the table's). No read for a table without such
        refs; a ref pinning more than ``MAX_PINNED_SNAPSHOTS_READ`` snapshots is not measured."""
        by_ref = pinned_by_ref(metadata, now_ms)
        found: dict[str, tuple[int, int]] = {name: (0, 0) for name, ids in by_ref.items() if not ids}
        pinned = {name: ids for name, ids in by_ref.items() if ids and len(ids) <= MAX_PINNED_SNAPSHOTS_READ}
        if not pinned:
            return found, []
        main_paths = {m.manifest_path for m in main_manifests}
        main_data = data_file_hashes(main_summaries.values())
        paths: dict[str, None] = {}
        for name, ids in sorted(pinned.items()):
            own: dict[str, ManifestFile] = {}
            for snapshot_id in sorted(ids):
                snapshot = metadata.snapshot_by_id(snapshot_id)
                for manifest in snapshot.manifests(io) if snapshot is not None else []:
                    if manifest.manifest_path not in main_paths:
                        own.setdefault(manifest.manifest_path, manifest)
            summaries = self._summaries(table, io, list(own.values()), deadline)
            found[name] = pinned_file_bytes(summaries.values(), main_data)
            paths.update(dict.fromkeys(own))
        return found, list(paths)
