"""Helpers for the health tests: a real embedded lakehouse, and what is really on disk.

Expected values come from the file system (parquet and avro files, sizes by ``os.path.getsize``) and
from the metadata JSON read with the ``json`` module, never from PyIceberg itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import local_path
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.settings import Settings, load_settings
from floe_dagster_tests.conftest import write_settings

ARROW_SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("region", pa.string()),
    pa.field("payload", pa.string()),
])


def lakehouse(root: Path) -> tuple[Settings, Catalog]:
    """An embedded lakehouse (SQLite catalog file, file:// warehouse) under ``root``."""
    settings = load_settings(write_settings(root, "[]\n"), environ={})
    return settings, open_catalog(settings.catalog)


def name(catalog: Catalog, identifier: str) -> TableName:
    return TableName.parse(identifier, catalog.name)


def rows(start: int, count: int, region: str = "eu", width: int = 8) -> pa.Table:
    return pa.table(
        {
            "id": list(range(start, start + count)),
            "region": [region] * count,
            "payload": [f"{i:0{width}d}" for i in range(start, start + count)],
        },
        schema=ARROW_SCHEMA,
    )


def table_dir(table: Table) -> Path:
    return local_path(table.location())


def data_files_on_disk(table: Table, *, deletes: bool = False) -> dict[str, int]:
    """Parquet files under the table's data folder with their sizes: data files, or (``deletes``)
    the delete files (Spark names position delete files ``...-deletes.parquet``; the tests name their
    equality delete files ``eqdel-...parquet``)."""
    found = {}
    for path in (table_dir(table) / "data").rglob("*.parquet"):
        is_delete = path.name.endswith("-deletes.parquet") or path.name.startswith("eqdel-")
        if is_delete == deletes:
            found[str(path)] = os.path.getsize(path)
    return found


def files_in_partition(files: dict[str, int], column: str, value: str) -> dict[str, int]:
    return {p: s for p, s in files.items() if f"/{column}={value}/" in p}


def manifests_on_disk(table: Table) -> dict[str, int]:
    """Manifest files (not manifest lists) in the metadata folder."""
    return {
        str(p): os.path.getsize(p)
        for p in (table_dir(table) / "metadata").glob("*.avro")
        if not p.name.startswith("snap-")
    }


def metadata_json(table: Table) -> dict:
    return json.loads(local_path(table.metadata_location).read_text())
