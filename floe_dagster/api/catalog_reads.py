"""Floe's table browsing and catalog endpoints: the tables, the namespaces, one table's details, whether
it exists, the latest health of every table, the active catalog.

Lists come from the cached table list (iceberg/table_cache.py, the one the code location is built from;
the catalog is listed only when there is no cache yet), never from a catalog listing per request. One
table's details load that table (one catalog call and its manifest list, as Floe's); latest health comes
from the observations the debt-score sensor records (no assessment).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from dagster import DagsterInstance

from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import describe, load_table, open_catalog
from floe_dagster.iceberg.snapshot_summary import (
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_FILE_SIZE,
    TOTAL_RECORDS,
    summary_total,
)
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.table_cache import read_cached_tables, refresh_table_cache
from floe_dagster.reports.health_report import formatted_size, latest_health
from floe_dagster.settings import Settings


def _iso_ms(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def _summary(table: TableName) -> dict[str, str]:
    """Floe's TableSummary."""
    return {"catalog": table.catalog, "namespace": table.namespace_str, "name": table.name,
            "qualifiedName": table.qualified}


def _page(items: list[Any], limit: int, offset: int) -> dict[str, Any]:
    page = items[offset:offset + limit]
    return {"tables": [_summary(t) for t in page], "total": len(items), "limit": limit, "offset": offset,
            "hasMore": offset + len(page) < len(items)}


class CatalogReads:
    def __init__(self, settings: Settings, instance: DagsterInstance):
        self.settings = settings
        self.instance = instance

    def known_tables(self) -> list[TableName]:
        """The cached table list, sorted; listed from the catalog (and cached) only when there is none."""
        cached = read_cached_tables(self.settings)
        tables = cached if cached is not None else refresh_table_cache(self.settings)
        return sorted(tables, key=lambda t: (t.namespace, t.name))

    def tables(self, limit: int, offset: int) -> dict[str, object]:
        return {"catalog": self.settings.catalog.name, **_page(self.known_tables(), limit, offset)}

    def namespaces(self) -> dict[str, object]:
        """Every namespace holding a table, dotted when nested (Floe lists top-level namespaces only,
        empty ones too: the cached list knows only namespaces with tables)."""
        names = sorted({t.namespace_str for t in self.known_tables()})
        return {"catalog": self.settings.catalog.name, "namespaces": names, "total": len(names)}

    def tables_in(self, namespace: str, limit: int, offset: int) -> dict[str, object]:
        """The tables of one namespace (an unknown namespace has none, as in Floe)."""
        tables = [t for t in self.known_tables() if t.namespace_str == namespace]
        return {"catalog": self.settings.catalog.name, "namespace": namespace, **_page(tables, limit, offset)}

    def table(self, name: TableName) -> dict[str, object]:
        """Floe's TableDetailResponse (UnknownTable: 404): the loaded metadata, its snapshot summary and
        manifest list; the delete files by kind from the health cache's full tier, when it has them."""
        loaded = load_table(open_catalog(self.settings.catalog), name)
        metadata = loaded.metadata
        snapshot = loaded.current_snapshot()
        summary = snapshot.summary if snapshot is not None else None
        manifests = snapshot.manifests(loaded.io) if snapshot is not None else []
        data_files = summary_total(summary, TOTAL_DATA_FILES, missing=0) or 0
        data_bytes = summary_total(summary, TOTAL_FILE_SIZE, missing=0) or 0
        with HealthCollector(open_catalog(self.settings.catalog), self.settings) as collector:
            full = collector.cached(name, "full")
        if full is not None and full.current_snapshot_id != (snapshot.snapshot_id if snapshot else None):
            full = None  # collected before the table's last commit
        times = [s.timestamp_ms for s in metadata.snapshots]
        return {
            **_summary(name),
            "location": metadata.location,
            "snapshotCount": len(metadata.snapshots),
            "currentSnapshotId": snapshot.snapshot_id if snapshot is not None else None,
            "currentSnapshotTimestamp": _iso_ms(snapshot.timestamp_ms if snapshot is not None else None),
            "oldestSnapshotTimestamp": _iso_ms(min(times) if times else None),
            "dataFileCount": data_files,
            "totalDataFileSizeBytes": data_bytes,
            "totalDataSizeFormatted": formatted_size(data_bytes),
            "averageFileSizeMb": round(data_bytes / data_files / 1024**2, 6) if data_files else 0.0,
            "deleteFileCount": summary_total(summary, TOTAL_DELETE_FILES, missing=0) or 0,
            "positionDeleteFileCount": full.position_delete_file_count if full is not None else None,
            "equalityDeleteFileCount": full.equality_delete_file_count if full is not None else None,
            "totalRecordCount": summary_total(summary, TOTAL_RECORDS, missing=0) or 0,
            "manifestCount": len(manifests),
            "totalManifestSizeBytes": sum(m.manifest_length for m in manifests),
            "formatVersion": metadata.format_version,
            "partitionSpec": str(loaded.spec()),
            "sortOrder": str(loaded.sort_order()),
            "lastModified": _iso_ms(metadata.last_updated_ms),
        }

    def exists(self, name: TableName) -> None:
        """UnknownTable when the table is not in the catalog (HEAD: 404, no body)."""
        load_table(open_catalog(self.settings.catalog), name)

    def latest_health(self, limit: int) -> dict[str, object]:
        return latest_health(self.settings, self.instance, self.known_tables(), limit)

    def catalog(self) -> dict[str, object]:
        """Floe's CatalogConfigResponse for floe.yaml's catalog section (secrets masked, as Floe never
        shows credentials); the id is derived from the name, stable across restarts."""
        properties = describe(self.settings.catalog)
        return {
            "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"floe-dagster:catalog:{self.settings.catalog.name}")),
            "name": self.settings.catalog.name,
            "type": (properties.get("type") or "sql").upper(),
            "uri": properties.get("uri"),
            "warehouse": properties.get("warehouse"),
            "properties": properties,
            "createdAt": None,
            "updatedAt": None,
            "active": True,
        }
