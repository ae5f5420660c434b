"""Table health collection: :class:`TableMetrics` from Iceberg metadata, with PyIceberg only.

No Spark, and no data file is ever read. Two tiers:

``summary``
    The table's metadata file alone (snapshots, their times, the current snapshot's summary totals):
    one small read per table. The summary counts delete files together, and its ``total-files-size``
    includes the delete files' bytes.
``full``
    Also the current snapshot's manifest list and manifests: every live file's size, partitions,
    position and equality delete files apart, manifest count and bytes, and the inputs of the byte
    estimates (``core/estimates.py``).

Caching (on disk, SQLite, under the cache dir; survives restarts): one record per (table, tier), hit
when the table's current metadata location equals the record's, so an unchanged table costs no read.
Manifests are immutable, so each manifest's reduced content is cached by its path too: after an
append, the full tier reads the metadata file, the manifest list and the new manifest only, and a huge
table's first full read can spread over several ticks. Only raw numbers are cached, never counts
that depend on a policy's thresholds.

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

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from datetime import time as dt_time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping
from uuid import UUID

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO, InputFile, OutputFile, load_file_io
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from floe_dagster.core.estimates import (
    EstimateOptionError,
    estimate_rewrite_data_files,
    estimate_rewrite_position_delete_files,
)
from floe_dagster.core.measurements import TableMetrics
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.errors import CatalogUnavailable, HealthError, UnknownTable
from floe_dagster.iceberg.catalog import (
    list_table_metadata_locations,
    list_tables,
    load_table,
    schema_columns,
    storage_context,
)

log = logging.getLogger(__name__)

# Bump when the way metrics or manifest summaries are computed changes: older cache rows are ignored.
ALGORITHM_VERSION = 1
# Bump when a metrics record gains or changes a field: older records are collected again (their
# metadata file and manifest list), while the manifest summaries (ALGORITHM_VERSION) stay valid.
# 2: the table's location and columns.
RECORD_VERSION = ALGORITHM_VERSION * 1000 + 2
CACHE_SCHEMA_VERSION = 1
CACHE_FILE = "health.sqlite3"
PATH_FIELD_ID = 2147483546  # the file_path column of position delete files

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


# -- file reads, counted ------------------------------------------------------------------------------------


class CountingFileIO(FileIO):
    """Wraps a FileIO and counts every file opened for reading through it."""

    def __init__(self, inner: FileIO, on_read: Callable[[str], None]):
        super().__init__(inner.properties)
        self._inner = inner
        self._on_read = on_read

    def new_input(self, location: str) -> InputFile:
        self._on_read(location)
        return self._inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:  # pragma: no cover - health never writes
        return self._inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:  # pragma: no cover
        self._inner.delete(location)


# -- the on-disk cache -----------------------------------------------------------------------------------------


class HealthCache:
    """SQLite file with the latest record per (table, tier) and the reduced content of manifests.

    Safe to share between processes (WAL, busy timeout); each write is its own short transaction.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._ensure_schema()

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _ensure_schema(self) -> None:
        with self._write() as db:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is not None and row[0] != str(CACHE_SCHEMA_VERSION):
                for name in ("metrics", "manifests", "table_manifests"):
                    db.execute(f"DROP TABLE IF EXISTS {name}")
            db.execute(
                "CREATE TABLE IF NOT EXISTS metrics (qualified TEXT NOT NULL, tier TEXT NOT NULL, "
                "metadata_location TEXT NOT NULL, version INTEGER NOT NULL, collected_at_ms INTEGER NOT NULL, "
                "checked_at_ms INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (qualified, tier))"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS manifests (path TEXT PRIMARY KEY, version INTEGER NOT NULL, "
                "summary TEXT NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS table_manifests (qualified TEXT NOT NULL, path TEXT NOT NULL, "
                "PRIMARY KEY (qualified, path))"
            )
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(CACHE_SCHEMA_VERSION),))

    # metrics records
    def index(self) -> dict[str, dict[str, tuple[str, int]]]:
        """qualified name → tier → (metadata location, checked at ms), for records of this version."""
        rows = self._conn.execute(
            "SELECT qualified, tier, metadata_location, checked_at_ms FROM metrics WHERE version = ?",
            (RECORD_VERSION,),
        ).fetchall()
        found: dict[str, dict[str, tuple[str, int]]] = {}
        for qualified, tier, location, checked in rows:
            found.setdefault(qualified, {})[tier] = (location, checked)
        return found

    def record(self, qualified: str, tier: str) -> tuple[str, TableMetrics] | None:
        row = self._conn.execute(
            "SELECT metadata_location, record FROM metrics WHERE qualified = ? AND tier = ? AND version = ?",
            (qualified, tier, RECORD_VERSION),
        ).fetchone()
        if row is None:
            return None
        try:
            return row[0], TableMetrics.from_json(json.loads(row[1]))
        except (ValueError, TypeError) as exc:
            log.warning("health cache: unreadable record for %s (%s); it will be collected again", qualified, exc)
            return None

    def put(self, metrics: TableMetrics, manifest_paths: Iterable[str] | None = None) -> None:
        assert metrics.metadata_location is not None
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    metrics.qualified_name, metrics.tier, metrics.metadata_location, RECORD_VERSION,
                    metrics.collected_at_ms, metrics.collected_at_ms, json.dumps(metrics.to_json(), separators=(",", ":")),
                ),
            )
            if manifest_paths is not None:  # the table's current manifests: the others may be collected
                db.execute("DELETE FROM table_manifests WHERE qualified = ?", (metrics.qualified_name,))
                db.executemany(
                    "INSERT OR IGNORE INTO table_manifests VALUES (?, ?)",
                    [(metrics.qualified_name, path) for path in manifest_paths],
                )

    def touch(self, records: list[tuple[str, str]], checked_at_ms: int) -> None:
        """Mark (table, tier) records as verified current (orders the next call's work)."""
        with self._write() as db:
            db.executemany(
                "UPDATE metrics SET checked_at_ms = ? WHERE qualified = ? AND tier = ?",
                [(checked_at_ms, qualified, tier) for qualified, tier in records],
            )

    def prune_tables(self, keep: set[str]) -> int:
        """Forget tables that are no longer in the catalog."""
        known = {row[0] for row in self._conn.execute("SELECT DISTINCT qualified FROM metrics")}
        known |= {row[0] for row in self._conn.execute("SELECT DISTINCT qualified FROM table_manifests")}
        gone = sorted(known - keep)
        if gone:
            with self._write() as db:
                db.executemany("DELETE FROM metrics WHERE qualified = ?", [(q,) for q in gone])
                db.executemany("DELETE FROM table_manifests WHERE qualified = ?", [(q,) for q in gone])
        return len(gone)

    # manifests
    def manifests(self, paths: list[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(paths), 500):
            chunk = paths[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for path, summary in self._conn.execute(
                f"SELECT path, summary FROM manifests WHERE version = ? AND path IN ({marks})",
                (ALGORITHM_VERSION, *chunk),
            ):
                found[path] = json.loads(summary)
        return found

    def put_manifest(self, qualified: str, path: str, summary: dict[str, Any]) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO manifests VALUES (?, ?, ?)",
                (path, ALGORITHM_VERSION, json.dumps(summary, separators=(",", ":"))),
            )
            db.execute("INSERT OR IGNORE INTO table_manifests VALUES (?, ?)", (qualified, path))

    def collect_garbage(self) -> int:
        """Drop manifest summaries no table refers to any more (expired or rewritten manifests)."""
        with self._write() as db:
            cursor = db.execute("DELETE FROM manifests WHERE path NOT IN (SELECT path FROM table_manifests)")
            return cursor.rowcount


# -- reducing metadata to numbers -------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, (date, datetime, dt_time)):
        return value.isoformat()
    return str(value)


def partition_key(values: Iterable[Any]) -> str:
    """A partition value as a compact JSON list (the key estimates and partition counts use)."""
    return json.dumps([_jsonable(v) for v in values], separators=(",", ":"))


def path_hash(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "big") >> 1


def _file_scoped_path(data_file: Any) -> str | None:
    """The one data file a position delete file refers to (Iceberg's ``ContentFileUtil.isFileScoped``):
    ``referenced_data_file`` (v3), or equal lower and upper bounds on its ``file_path`` column."""
    referenced = None
    with contextlib.suppress(AttributeError, IndexError, KeyError):
        referenced = data_file.referenced_data_file
    if referenced:
        return referenced
    lower, upper = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    low, high = lower.get(PATH_FIELD_ID), upper.get(PATH_FIELD_ID)
    if low is not None and low == high:
        try:
            return bytes(low).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def summarize_manifest(manifest: ManifestFile, entries: list[ManifestEntry]) -> dict[str, Any]:
    """A manifest's live entries reduced to the numbers health and estimates need.

    ``{"content": 0|1, "spec": spec id, "partitions": [partition key, ...], "files": [...]}`` where
    a data file is ``[partition index, size, records, data sequence number, path hash]`` and a delete
    file is ``[content (1 position, 2 equality), partition index, size, records, data sequence number,
    hash of the data file it is scoped to or null]``.
    """
    partitions: dict[str, int] = {}
    files: list[list[Any]] = []
    for entry in entries:
        data_file = entry.data_file
        values = data_file.partition
        key = partition_key(values[i] for i in range(len(values))) if values is not None else "[]"
        index = partitions.setdefault(key, len(partitions))
        seq = entry.sequence_number or 0
        content = int(data_file.content) if data_file.content is not None else 0
        if content == DataFileContent.DATA:
            files.append([index, data_file.file_size_in_bytes, data_file.record_count, seq, path_hash(data_file.file_path)])
        else:
            scoped = _file_scoped_path(data_file) if content == DataFileContent.POSITION_DELETES else None
            files.append([
                content, index, data_file.file_size_in_bytes, data_file.record_count, seq,
                path_hash(scoped) if scoped else None,
            ])
    return {
        "content": int(manifest.content),
        "spec": manifest.partition_spec_id,
        "partitions": list(partitions),
        "files": files,
    }


def _summary_total(summary: Mapping[str, Any] | None, key: str) -> int | None:
    value = summary.get(key) if summary is not None else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _base_fields(metadata: TableMetadata) -> dict[str, Any]:
    snapshots = metadata.snapshots
    current = metadata.current_snapshot()
    return {
        "snapshot_count": len(snapshots),
        "oldest_snapshot_ms": min((s.timestamp_ms for s in snapshots), default=None),
        "newest_snapshot_ms": max((s.timestamp_ms for s in snapshots), default=None),
        "current_snapshot_id": current.snapshot_id if current else None,
        "properties": dict(metadata.properties),
        "location": metadata.location,
        "columns": schema_columns(metadata.schema()),
    }


def summary_metrics(
    table: TableName,
    metadata_location: str,
    metadata: TableMetadata,
    collected_at_ms: int,
    io: FileIO | None = None,
) -> TableMetrics:
    """The summary tier: the metadata file and the current snapshot's summary. When the summary lacks
    totals (some writers omit them) and ``io`` is given, counts come from the manifest list instead."""
    current = metadata.current_snapshot()
    summary = current.summary if current is not None else None
    totals = {
        key: _summary_total(summary, key)
        for key in ("total-data-files", "total-delete-files", "total-records", "total-files-size")
    }
    if current is not None and io is not None and any(v is None for k, v in totals.items() if k != "total-files-size"):
        data_files = delete_files = records = 0
        for manifest in current.manifests(io):
            live = (manifest.added_files_count or 0) + (manifest.existing_files_count or 0)
            if manifest.content == ManifestContent.DATA:
                data_files += live
                records += (manifest.added_rows_count or 0) + (manifest.existing_rows_count or 0)
            else:
                delete_files += live
        totals["total-data-files"] = data_files
        totals["total-delete-files"] = delete_files
        totals["total-records"] = records
    return TableMetrics(
        qualified_name=table.qualified,
        metadata_location=metadata_location,
        tier="summary",
        collected_at_ms=collected_at_ms,
        data_file_count=totals["total-data-files"] or 0,
        total_data_bytes=totals["total-files-size"] or 0,
        record_count=totals["total-records"] or 0,
        delete_file_count=totals["total-delete-files"] or 0,
        **_base_fields(metadata),
    )


def full_metrics(
    table: TableName,
    metadata_location: str,
    metadata: TableMetadata,
    manifests: list[ManifestFile],
    summaries: Mapping[str, Mapping[str, Any]],
    collected_at_ms: int,
) -> TableMetrics:
    """The full tier, from the current snapshot's manifests (reduced by :func:`summarize_manifest`)."""
    specs = metadata.specs()
    current_spec = metadata.default_spec_id
    other_spec_key = partition_key([None] * len(metadata.spec().fields))
    spec_field_ids = {spec_id: [f.field_id for f in spec.fields] for spec_id, spec in specs.items()}
    unified_ids = sorted({fid for ids in spec_field_ids.values() for fid in ids})
    unpartitioned = {spec_id for spec_id, spec in specs.items() if spec.is_unpartitioned()}

    def coerced(spec_id: int, key: str) -> str:
        """A partition in the union of all specs' fields (Iceberg's ``Partitioning.partitionType``)."""
        values = dict(zip(spec_field_ids.get(spec_id, []), json.loads(key)))
        return json.dumps([values.get(fid) for fid in unified_ids], separators=(",", ":"))

    data: list[tuple[int, str, int, int, int, int]] = []  # spec, partition, size, records, seq, path hash
    scoped_pos: dict[int, list[tuple[int, int]]] = {}  # data file hash → [(seq, records)]
    partition_pos: dict[tuple[int, str], list[int]] = {}  # (spec, partition) → seqs
    partition_eq: dict[tuple[int, str], list[int]] = {}
    global_eq: list[int] = []
    position_delete_sizes: dict[str, list[int]] = {}
    position_count = equality_count = 0
    manifest_bytes = 0

    for manifest in manifests:
        manifest_bytes += manifest.manifest_length
        reduced = summaries[manifest.manifest_path]
        spec_id = reduced["spec"]
        keys = reduced["partitions"]
        if reduced["content"] == int(ManifestContent.DATA):
            for index, size, records, seq, hashed in reduced["files"]:
                data.append((spec_id, keys[index], size, records, seq, hashed))
            continue
        for content, index, size, records, seq, scoped in reduced["files"]:
            key = keys[index]
            if content == int(DataFileContent.POSITION_DELETES):
                position_count += 1
                position_delete_sizes.setdefault(coerced(spec_id, key), []).append(size)
                if scoped is not None:
                    scoped_pos.setdefault(scoped, []).append((seq, records))
                else:
                    partition_pos.setdefault((spec_id, key), []).append(seq)
            elif content == int(DataFileContent.EQUALITY_DELETES):
                equality_count += 1
                if spec_id in unpartitioned:
                    global_eq.append(seq)
                else:
                    partition_eq.setdefault((spec_id, key), []).append(seq)
    for seqs in (*partition_pos.values(), *partition_eq.values(), global_eq):
        seqs.sort()

    per_partition: dict[tuple[int, str], int] = {}
    groups: dict[str, tuple[list[int], list[tuple[int, int, int, int]]]] = {}
    sizes: list[int] = []
    records_total = 0
    for spec_id, key, size, records, seq, hashed in data:
        sizes.append(size)
        records_total += records
        per_partition[(spec_id, key)] = per_partition.get((spec_id, key), 0) + 1
        # Delete files that apply (Iceberg's DeleteFileIndex): position deletes with a sequence number
        # at or after the data file's, equality deletes strictly after it.
        deletes = scoped_rows = 0
        for delete_seq, delete_records in scoped_pos.get(hashed, ()):
            if delete_seq >= seq:
                deletes += 1
                scoped_rows += delete_records
        seqs = partition_pos.get((spec_id, key))
        if seqs:
            deletes += len(seqs) - bisect_left(seqs, seq)
        seqs = partition_eq.get((spec_id, key))
        if seqs:
            deletes += len(seqs) - bisect_right(seqs, seq)
        if global_eq:
            deletes += len(global_eq) - bisect_right(global_eq, seq)
        group_key = key if spec_id == current_spec else other_spec_key
        group_sizes, group_deletes = groups.setdefault(group_key, ([], []))
        if deletes:
            group_deletes.append((len(group_sizes), deletes, scoped_rows, records))
        group_sizes.append(size)

    return TableMetrics(
        qualified_name=table.qualified,
        metadata_location=metadata_location,
        tier="full",
        collected_at_ms=collected_at_ms,
        data_file_count=len(sizes),
        total_data_bytes=sum(sizes),
        record_count=records_total,
        data_file_sizes=tuple(sizes),
        delete_file_count=position_count + equality_count,
        position_delete_file_count=position_count,
        equality_delete_file_count=equality_count,
        manifest_count=len(manifests),
        manifest_total_bytes=manifest_bytes,
        partition_count=len(per_partition),
        max_files_per_partition=max(per_partition.values(), default=0),
        data_file_groups=tuple((k, tuple(s), tuple(d)) for k, (s, d) in groups.items()),
        position_delete_groups=tuple((k, tuple(v)) for k, v in position_delete_sizes.items()),
        **_base_fields(metadata),
    )


# -- the collector -------------------------------------------------------------------------------------------


class _OutOfTime(Exception):
    pass


# Parsed cache records, shared by every collector of this process (a sensor makes one per tick):
# (cache file, table, tier) → (metadata location, metrics). One entry per table and tier.
_PARSED: dict[tuple[str, str, str], tuple[str, TableMetrics]] = {}


def forget_parsed_records() -> None:
    """Drop the in-memory copies (as a new process would start); the on-disk cache stays."""
    _PARSED.clear()


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
        self.cache = HealthCache(self.cache_dir / CACHE_FILE)
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
        catalog cannot be listed, or when every catalog call of this collect failed.
        """
        if tier not in ("summary", "full"):
            raise ValueError(f"tier must be 'summary' or 'full', got {tier!r}")
        started = self._timer()
        deadline = None if time_budget_s is None else started + max(0.0, time_budget_s)
        reads_before, calls_before = self.files_read, self.catalog_calls
        self.read_log = []

        locations: dict[TableName, str | None] | None = None
        if self._listing:
            locations = self._list_locations()
        if tables is None:
            wanted = sorted(locations) if locations is not None else self._list_tables()
            self.cache.prune_tables({t.qualified for t in wanted})
        else:
            wanted = list(dict.fromkeys(tables))

        index = self.cache.index()
        metrics: dict[TableName, TableMetrics] = {}
        errors: dict[TableName, str] = {}
        unknown: list[TableName] = []
        computed: list[TableName] = []
        pending: list[TableName] = []
        for table in wanted:
            if locations is None:
                pending.append(table)
                continue
            if table not in locations:
                errors[table] = f"table '{table.qualified}' does not exist in catalog '{self.catalog.name}'"
                unknown.append(table)
                continue
            location = locations[table]
            if not location:
                errors[table] = f"table '{table.qualified}' has no metadata location yet"
                continue
            hit = self._cached(table, tier, location, index)
            if hit is not None:
                metrics[table] = hit
            else:
                pending.append(table)

        def priority(table: TableName) -> tuple[int, int]:
            rows = index.get(table.qualified, {})
            row = rows.get(tier) or (rows.get("full") if tier == "summary" else None)
            return (1, row[1]) if row else (0, 0)  # never collected first, then least recently checked

        pending.sort(key=priority)
        attempts = outages = 0
        wrote_full = False
        for table in pending:
            if deadline is not None and self._timer() >= deadline:
                break
            attempts += 1
            try:
                result = self._collect_one(table, tier, locations, index, deadline)
            except _OutOfTime:
                continue
            except UnknownTable as exc:
                errors[table] = str(exc)
                unknown.append(table)
                continue
            except CatalogUnavailable as exc:
                outages += 1
                errors[table] = str(exc)
                continue
            except Exception as exc:  # a broken table must not stop the others
                log.warning("health of %s could not be collected: %s", table.qualified, exc, exc_info=True)
                where = storage_context(self.catalog) if isinstance(exc, OSError) else ""  # a read from storage failed
                errors[table] = f"{type(exc).__name__}: {exc}{where}"
                continue
            metrics[table] = result[0]
            if result[1]:
                computed.append(table)
                wrote_full |= result[0].tier == "full"
        if attempts and outages == attempts and locations is None:
            raise CatalogUnavailable(next(iter(errors.values())))
        if self._touched:
            self.cache.touch(self._touched, self._now_ms())
            self._touched = []
        if wrote_full:
            self.cache.collect_garbage()
        return HealthSnapshot(
            metrics=metrics,
            missing=[t for t in wanted if t not in metrics],
            files_read=self.files_read - reads_before,
            catalog_calls=self.catalog_calls - calls_before,
            computed=computed,
            errors=errors,
            unknown=unknown,
            elapsed_s=self._timer() - started,
        )

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
                meta_io = CountingFileIO(load_file_io(properties=self.catalog.properties, location=location),
                                         self._count_read)
                metadata = FromInputFile.table_metadata(meta_io.new_input(location))
                if len(self._metadata) < _METADATA_KEPT:
                    self._metadata[location] = metadata
            io = CountingFileIO(
                load_file_io({**self.catalog.properties, **metadata.properties}, location), self._count_read
            )
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
        paths = [m.manifest_path for m in manifests]
        summaries = self.cache.manifests(paths)
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
        metrics = full_metrics(table, location, metadata, manifests, summaries, now_ms)
        self.cache.put(metrics, manifest_paths=paths)
        return metrics


# -- byte estimates for the planner ------------------------------------------------------------------------


def estimate_operation_bytes(
    table: TableName, op: Operation, metrics: TableMetrics | None, config: OperationConfig | None
) -> int:
    """Bytes a rewriting operation would rewrite, for the bytes-per-hour budget.

    Full tier: Iceberg's own file selection (``core/estimates.py``) with the policy's options and the
    table's properties. Summary tier: the table's total bytes (data and delete files), an upper bound.
    No metrics: 0. Operations that rewrite no data: 0.
    """
    if metrics is None or not op.rewrites_data:
        return 0
    # Metadata files are immutable: the same table state and options give the same estimate, so a
    # sensor tick re-estimates only the tables that changed since the last one (the estimate was
    # ~35 % of a 10,000-table tick). The key also carries the numbers the estimate depends on.
    key = None
    if metrics.metadata_location is not None:
        key = (metrics.metadata_location, metrics.tier, metrics.current_snapshot_id, metrics.data_file_count,
               metrics.delete_file_count, metrics.total_data_bytes, op, repr(config), repr(metrics.properties))
        cached = _ESTIMATES.get(key)
        if cached is not None:
            return cached
    estimated = _estimate_operation_bytes(table, op, metrics, config)
    if key is not None:
        if len(_ESTIMATES) >= _ESTIMATES_MAX:
            _ESTIMATES.clear()
        _ESTIMATES[key] = estimated
    return estimated


_ESTIMATES: dict[tuple, int] = {}
_ESTIMATES_MAX = 200_000


def _estimate_operation_bytes(
    table: TableName, op: Operation, metrics: TableMetrics, config: OperationConfig | None
) -> int:
    try:
        if op is Operation.REWRITE_DATA_FILES:
            estimate = estimate_rewrite_data_files(metrics, config)
        else:
            estimate = estimate_rewrite_position_delete_files(metrics, config)
    except EstimateOptionError as exc:
        log.warning("%s %s: cannot estimate bytes (%s); using the table's size", table.qualified, op.value, exc)
        return metrics.total_data_bytes
    return estimate.bytes if estimate is not None else metrics.total_data_bytes
