"""Dagster's standard table metadata, on every materialization and health observation of a table
asset, so that Dagit shows them where it shows any table's:

* ``dagster/row_count``: the current snapshot's total records (Iceberg metadata, no data read);
  the asset's overview shows the latest materialization's, else the latest observation's;
* ``dagster/column_schema``: the current schema's columns (name, type as Iceberg prints it,
  nullability, doc as the description); the overview's *Columns* come from the latest
  materialization;
* ``dagster/table_name``: the qualified name (``catalog.namespace.table``);
* ``dagster/uri``: the table's location (``file:/...``, ``s3://...``).

The events list shows all four on each event. The overview's *Storage* reads the table name from
the asset's definition, which carries it too (defs/assets.py); the location is not known without
reading the table's metadata, so only the events carry it.
"""

from __future__ import annotations

from typing import Any, Sequence

from dagster import TableColumn, TableColumnConstraints, TableSchema

# Dagster's own sets of these keys. 1.13 exports them from here, not from ``dagster``.
from dagster._core.definitions.metadata import TableMetadataSet
from dagster._core.definitions.metadata.metadata_set import UriMetadataSet

from floe_dagster.core.facts.measurements import ColumnFacts

TABLE_NAME_KEY = "dagster/table_name"
ROW_COUNT_KEY = "dagster/row_count"
COLUMN_SCHEMA_KEY = "dagster/column_schema"
URI_KEY = "dagster/uri"


def column_schema(columns: Sequence[ColumnFacts]) -> TableSchema:
    """The columns as Dagster's TableSchema: a required column is not nullable."""
    return TableSchema(columns=[
        TableColumn(name=column.name, type=column.type, description=column.doc or None,
                    constraints=TableColumnConstraints(nullable=not column.required))
        for column in columns
    ])


def table_metadata(qualified: str, location: str | None, row_count: int | None,
                   columns: Sequence[ColumnFacts] | None) -> dict[str, Any]:
    """The standard keys for one table; what is not known (None) is left out."""
    metadata: dict[str, object] = dict(TableMetadataSet(
        table_name=qualified, row_count=row_count,
        column_schema=column_schema(columns) if columns is not None else None,
    ))
    if location:
        metadata.update(UriMetadataSet(uri=location))
    return metadata


def definition_metadata(qualified: str) -> dict[str, object]:
    """What the asset definition carries: the table name only (the rest needs the table's metadata)."""
    return {TABLE_NAME_KEY: qualified}
