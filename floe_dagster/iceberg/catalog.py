"""Catalog access through PyIceberg: load the catalog, list tables, derive Spark's catalog conf.

The catalog section of ``floe.yaml`` is passed unchanged to PyIceberg's ``load_catalog``, so every
PyIceberg catalog type works and ``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__...`` still apply.
"""

from __future__ import annotations

import os
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy import text

from floe_dagster.core.tables import TableName
from floe_dagster.errors import CatalogUnavailable, UnknownTable
from floe_dagster.settings import CatalogSettings


def open_catalog(settings: CatalogSettings) -> Catalog:
    uri = settings.properties.get("uri", "")
    if settings.properties.get("type") == "sql" and uri.startswith("sqlite:///"):
        # A SQLite catalog is a local file: create its folder, as the embedded default expects.
        os.makedirs(os.path.dirname(os.path.abspath(uri.split(":///", 1)[1].split("?", 1)[0])) or ".", exist_ok=True)
    try:
        return load_catalog(settings.name, **settings.properties)
    except Exception as exc:  # PyIceberg raises many kinds; all mean the same to the caller
        raise CatalogUnavailable(f"catalog '{settings.name}' could not be loaded: {exc}") from exc


def list_tables(catalog: Catalog) -> list[TableName]:
    """Every table in the catalog, nested namespaces included, sorted by qualified name."""
    try:
        if isinstance(catalog, SqlCatalog):
            return sorted(list_table_metadata_locations(catalog))
        found: list[TableName] = []
        pending = [tuple(ns) for ns in catalog.list_namespaces()]
        seen: set[tuple[str, ...]] = set()
        while pending:
            namespace = pending.pop()
            if namespace in seen:
                continue
            seen.add(namespace)
            for identifier in catalog.list_tables(namespace):
                found.append(TableName(catalog.name, tuple(identifier[:-1]), identifier[-1]))
            try:
                pending.extend(tuple(ns) for ns in catalog.list_namespaces(namespace))
            except NotImplementedError:
                pass
        return sorted(set(found))
    except CatalogUnavailable:
        raise
    except Exception as exc:
        raise CatalogUnavailable(f"catalog '{catalog.name}' could not list tables: {exc}") from exc


def list_table_metadata_locations(catalog: SqlCatalog) -> dict[TableName, str | None]:
    """For the SQL catalog: every table with its current metadata location, in one query."""
    query = text(
        "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :name"
    )
    with catalog.engine.connect() as connection:
        rows = connection.execute(query, {"name": catalog.name}).all()
    return {
        TableName(catalog.name, tuple(namespace.split(".")), name): location for namespace, name, location in rows
    }


def load_table(catalog: Catalog, table: TableName) -> Table:
    try:
        return catalog.load_table(table.identifier)
    except NoSuchTableError:
        raise UnknownTable(f"table '{table.qualified}' does not exist in catalog '{catalog.name}'") from None
    except Exception as exc:
        raise CatalogUnavailable(f"catalog '{catalog.name}' could not load '{table.qualified}': {exc}") from exc


def existing_table(settings: CatalogSettings, text: str) -> TableName:
    """``catalog.ns.table`` or ``ns.table`` as a table of this catalog, checked to exist (UnknownTable)."""
    table = TableName.parse(text, settings.name)
    load_table(open_catalog(settings), table)
    return table


def snapshot_facts(table: Table) -> list[dict[str, Any]]:
    """The table's snapshots as the engine's row check reads them (from the metadata already loaded)."""
    return [
        {"snapshot_id": s.snapshot_id, "parent_id": s.parent_snapshot_id,
         "operation": s.summary.operation.value if s.summary else None,
         "summary": dict(s.summary.additional_properties) if s.summary else {}}
        for s in table.metadata.snapshots
    ]


class TableReads:
    """PyIceberg reads of one table while it is maintained: the table as loaded first, then a fresh
    load for each later read, so the metadata read after the procedure serves both the row check and
    the counts after."""

    def __init__(self, catalog: Catalog, table: TableName):
        self.catalog, self.name = catalog, table
        self.latest = load_table(catalog, table)
        self._fresh = True

    def snapshots(self) -> list[dict[str, Any]]:
        if not self._fresh:
            self.latest = load_table(self.catalog, self.name)
        self._fresh = False
        return snapshot_facts(self.latest)


def table_counts(table: Table) -> dict[str, int]:
    """The numbers a maintenance run reports before and after: from the snapshot summary and the
    current manifest list (one small read), never from data files."""
    metadata = table.metadata
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot and snapshot.summary else None

    def total(key: str) -> int:
        value = summary.get(key) if summary is not None else None
        return int(value) if value is not None else 0

    manifests = len(snapshot.manifests(table.io)) if snapshot else 0
    return {
        "data_files": total("total-data-files"),
        "delete_files": total("total-delete-files"),
        "position_deletes": total("total-position-deletes"),
        "records": total("total-records"),
        "total_bytes": total("total-files-size"),
        "snapshots": len(metadata.snapshots),
        "manifests": manifests,
    }


def describe(settings: CatalogSettings) -> dict[str, Any]:
    """Catalog settings for display, with secrets masked."""
    hidden = ("password", "secret", "token", "credential")
    return {k: ("***" if any(h in k.lower() for h in hidden) else v) for k, v in settings.properties.items()}
