"""The health collector's cache on disk (SQLite, under the cache dir; survives restarts): the latest
metrics record per (table, tier), hit while the table's metadata location is unchanged, and the reduced
content of each manifest by path (manifests are immutable). Only raw numbers are cached, never counts
that depend on a policy's thresholds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Iterable, Iterator

from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.iceberg.fact_reducers import manifest_version, record_version

log = logging.getLogger(__name__)

# The versions of what the cache keeps, derived from the declarations, never set by hand
# (iceberg/fact_reducers/): a record of other facts, or of facts measured another way, is collected again
# (its metadata file and manifest list), while the reduced manifests stay valid unless their reduction changed.
# These are this process's; a cache reads and writes the versions current when it was opened.
RECORD_VERSION = record_version()
MANIFEST_VERSION = manifest_version()
CACHE_SCHEMA_VERSION = 1
CACHE_FILE = "health.sqlite3"


class MetricsCache:
    """SQLite file with the latest record per (table, tier) and the reduced content of manifests.

    Safe to share between processes (WAL, busy timeout); each write is its own short transaction.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self.record_version, self.manifest_version = record_version(), manifest_version()
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
            (self.record_version,),
        ).fetchall()
        found: dict[str, dict[str, tuple[str, int]]] = {}
        for qualified, tier, location, checked in rows:
            found.setdefault(qualified, {})[tier] = (location, checked)
        return found

    def table_locations(self) -> dict[str, tuple[str | None, str]]:
        """qualified name → (the table's location, its metadata location), for every table with a record: one
        query (the location is read inside SQLite from the summary record only), for the safety envelope's
        check of a table's own location (core/storage/table_location.py)."""
        rows = self._conn.execute(
            "SELECT qualified, metadata_location, CASE WHEN tier = 'summary' THEN json_extract(record, '$.location') "
            "END FROM metrics").fetchall()
        found: dict[str, tuple[str | None, str]] = {}
        for qualified, metadata_location, location in rows:
            known = found.get(qualified)
            if known is None or (location and not known[0]):
                found[qualified] = (location if isinstance(location, str) else None, metadata_location)
        return found

    def record(self, qualified: str, tier: str) -> tuple[str, TableMetrics] | None:
        row = self._conn.execute(
            "SELECT metadata_location, record FROM metrics WHERE qualified = ? AND tier = ? AND version = ?",
            (qualified, tier, self.record_version),
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
                    metrics.qualified_name, metrics.tier, metrics.metadata_location, self.record_version,
                    metrics.collected_at_ms, metrics.collected_at_ms,
                    json.dumps(metrics.to_json(), separators=(",", ":")),
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
    def manifests(self, paths: list[str]) -> dict[str, dict[str, object]]:
        found: dict[str, dict[str, object]] = {}
        for start in range(0, len(paths), 500):
            chunk = paths[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for path, summary in self._conn.execute(
                f"SELECT path, summary FROM manifests WHERE version = ? AND path IN ({marks})",
                (self.manifest_version, *chunk),
            ):
                found[path] = json.loads(summary)
        return found

    def put_manifest(self, qualified: str, path: str, summary: dict[str, object]) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO manifests VALUES (?, ?, ?)",
                (path, self.manifest_version, json.dumps(summary, separators=(",", ":"))),
            )
            db.execute("INSERT OR IGNORE INTO table_manifests VALUES (?, ?)", (qualified, path))

    def collect_garbage(self) -> int:
        """Drop manifest summaries no table refers to any more (expired or rewritten manifests)."""
        with self._write() as db:
            cursor = db.execute("DELETE FROM manifests WHERE path NOT IN (SELECT path FROM table_manifests)")
            return cursor.rowcount
