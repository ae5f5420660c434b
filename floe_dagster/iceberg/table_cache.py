"""The table list the code location is built from, cached on disk.

Every run process re-imports the code location, so the import must not list the catalog: the list
is read from a cache file, written when it is missing or on request (``floe-dagster tables
--refresh``, the demo, or the sensor when it sees tables that are not assets yet).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import CatalogUnavailable
from floe_dagster.iceberg.catalog import list_tables, open_catalog
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)


def read_cached_tables(settings: Settings) -> list[TableName] | None:
    path = settings.table_cache_path
    if not path.exists():
        return None
    try:
        rows = json.loads(path.read_text())["tables"]
        return [TableName(settings.catalog.name, tuple(ns), name) for ns, name in rows]
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("table cache %s is unreadable (%s); listing the catalog again", path, exc)
        return None


def write_cached_tables(settings: Settings, tables: list[TableName]) -> None:
    path = settings.table_cache_path
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"catalog": settings.catalog.name, "tables": [[list(t.namespace), t.name] for t in tables]})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tables-")
    with os.fdopen(fd, "w") as out:
        out.write(payload)
    os.replace(tmp, path)  # readers never see half a file


def refresh_table_cache(settings: Settings) -> list[TableName]:
    tables = list_tables(open_catalog(settings.catalog))
    write_cached_tables(settings, tables)
    return tables


def tables_for_code_location(settings: Settings) -> list[TableName]:
    """The cached list; listed once from the catalog when there is no cache (or every time with
    ``refresh-tables``, FLOE_REFRESH_TABLES). A catalog that is down
    gives an empty location with a warning rather than a code location that fails to load."""
    cached = read_cached_tables(settings)
    if cached is not None and not settings.refresh_tables:
        return cached
    try:
        return refresh_table_cache(settings)
    except CatalogUnavailable as exc:
        log.warning("%s; the code location starts with the cached tables or none", exc)
        return cached or []
