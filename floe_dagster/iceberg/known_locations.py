"""What floe knows of the lake around a table, for the safety envelope's check of the table's own location
(core/storage/table_location.py): the catalog's warehouse root, the namespaces' locations, and the tables' folders.

The tables are those floe already knows without loading any table's metadata (a fleet of 50,000 tables
must not cost 50,000 loads per run): the SQL catalog's one listing query (every table's metadata location,
so every table of a SQL or JDBC catalog, new ones included), the health collector's records (each
collected table's location and metadata location, one SQLite query; every catalog), and the health the
plan already holds (``plan``, ``explain``). A table created since the last health collection in a
non-SQL catalog is not known yet; the warehouse root and the namespaces' locations are read each time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import text

from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.envelope import own_location_check
from floe_dagster.core.storage.table_location import KnownLocations, table_folders
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import list_table_metadata_locations, open_catalog, walk_namespaces
from floe_dagster.iceberg.metrics_cache import CACHE_FILE, MetricsCache
from floe_dagster.policies import resolve_operation
from floe_dagster.settings import Settings


def known_locations(catalog: Catalog, settings: Settings | None = None,
                    metrics: Mapping[TableName, object] | None = None) -> KnownLocations:
    """The lake around every table of ``catalog``: read once per run (or plan), shared by its tables.
    ``settings``: floe's (its health cache and ``maintenance.quarantine-location``); ``metrics``: the health
    a plan already holds, by table."""
    found: dict[str, tuple[str | None, set[str]]] = {}  # qualified → (its location, its metadata locations)

    def add(qualified: str, location: str | None, metadata_location: str | None) -> None:
        known, metadata = found.get(qualified, (None, set()))
        found[qualified] = (known or location, metadata | ({metadata_location} if metadata_location else set()))

    if isinstance(catalog, SqlCatalog):
        for table, metadata_location in list_table_metadata_locations(catalog).items():
            add(table.qualified, None, metadata_location)
    if settings is not None:
        for qualified, (location, metadata_location) in _health_records(settings).items():
            add(qualified, location, metadata_location)
    for table, facts in (metrics or {}).items():
        add(table.qualified, getattr(facts, "location", None), getattr(facts, "metadata_location", None))
    # A table's folders: its location when a record gives it (else the folder above its metadata folder),
    # and each metadata file's folder.
    tables = {name: tuple(dict.fromkeys(folder for metadata in sorted(metadata_locations) or [None]
                                        for folder in table_folders(location, metadata)))
              for name, (location, metadata_locations) in found.items()}
    quarantine = settings.maintenance.quarantine_location if settings is not None else None
    return KnownLocations(_warehouse(catalog, settings), _namespace_locations(catalog), tables, quarantine)


def _warehouse(catalog: Catalog, settings: Settings | None) -> str | None:
    found = catalog.properties.get("warehouse")
    if not found and settings is not None:
        found = settings.catalog.properties.get("warehouse")
    return found or None


def _health_records(settings: Settings) -> dict[str, tuple[str | None, str]]:
    path = Path(settings.data_dir) / "cache" / "health" / CACHE_FILE
    if not path.exists():
        return {}
    cache = MetricsCache(path)
    try:
        return cache.table_locations()
    finally:
        cache.close()


def _namespace_locations(catalog: Catalog) -> dict[str, str]:
    """Every namespace's ``location`` property, by dotted name: one query for a SQL catalog, else one
    listing and one properties read per namespace."""
    if isinstance(catalog, SqlCatalog):
        query = text("SELECT namespace, property_value FROM iceberg_namespace_properties "
                     "WHERE catalog_name = :name AND property_key = 'location'")
        with catalog.engine.connect() as connection:
            return {namespace: value for namespace, value in connection.execute(query, {"name": catalog.name}).all()
                    if value}
    found = {".".join(namespace): catalog.load_namespace_properties(namespace).get("location")
             for namespace in walk_namespaces(catalog)}
    return {namespace: location for namespace, location in found.items() if location}


def restore_refusals(settings: Settings, table: TableName, location: str) -> tuple[str, ...]:
    """Why ``floe-dagster restore`` may not move a table's quarantined files back (empty: it may): the
    envelope's check of the table's own location, as an orphan cleanup of it would be checked."""
    op = Operation.ORPHAN_CLEANUP
    known = known_locations(open_catalog(settings.catalog), settings)
    check = own_location_check(table, op, resolve_operation(settings, table, op).config, location, known)
    return check.refusals if check is not None else ()


__all__ = ["known_locations", "restore_refusals"]
