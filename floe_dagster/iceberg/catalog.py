"""Catalog access through PyIceberg: load the catalog, list and load tables, read a table's schema and
the counts a maintenance run reports (Spark's catalog conf is spark/catalog_conf.py's).

The catalog section of ``floe.yaml`` is passed unchanged to PyIceberg's ``load_catalog``, so every
PyIceberg catalog type works and ``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__...`` still apply.
"""

from __future__ import annotations

from datetime import datetime, timezone

import os
from typing import Iterator, Mapping

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IcebergType, ListType, MapType, StructType
from sqlalchemy import text

from floe_dagster.core.facts.measurements import ColumnFacts
from floe_dagster.core.rewrites.partition_scope import PartitionField
from floe_dagster.core.runs.run_figures import TableShape
from floe_dagster.core.storage.object_storage import (
    FORCE_VIRTUAL_ADDRESSING, s3_path_style, storage_description, uses_s3,
)
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import OUTAGE, CatalogUnavailable, TableUnreadable, UnknownTable, failure_kind, masked_cause
from floe_dagster.iceberg.snapshot_summary import (
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_FILE_SIZE,
    TOTAL_POSITION_DELETES,
    TOTAL_RECORDS,
    summary_total,
)
from floe_dagster.iceberg.table_io import guard_catalog
from floe_dagster.redaction import mask
from floe_dagster.settings import CatalogSettings


def open_catalog(settings: CatalogSettings) -> Catalog:
    uri = settings.properties.get("uri", "")
    if settings.properties.get("type") == "sql" and uri.startswith("sqlite:///"):
        # A SQLite catalog is a local file: create its folder, as the embedded default expects.
        os.makedirs(os.path.dirname(os.path.abspath(uri.split(":///", 1)[1].split("?", 1)[0])) or ".", exist_ok=True)
    try:
        # Guarded: no table property reaches the FileIO of a table it loads (iceberg/table_io.py).
        return guard_catalog(load_catalog(settings.name, **pyiceberg_properties(settings.properties)))
    except Exception as exc:  # PyIceberg raises many kinds; all mean the same to the caller
        raise CatalogUnavailable(f"catalog '{settings.name}' could not be loaded: {exc}") from masked_cause(exc)


def pyiceberg_properties(properties: dict[str, str]) -> dict[str, str]:
    """floe.yaml's catalog properties as PyIceberg takes them: unchanged, but for bucket addressing,
    which Iceberg's ``s3.path-style-access`` may set and PyIceberg reads as the opposite,
    ``s3.force-virtual-addressing`` (so both sides address the bucket alike)."""
    path_style = s3_path_style(properties)
    if path_style is None or FORCE_VIRTUAL_ADDRESSING in properties:
        return dict(properties)
    return {**properties, FORCE_VIRTUAL_ADDRESSING: "false" if path_style else "true"}


def storage_context(catalog: Catalog) -> str:
    """For a message about a failed read or write: where a catalog on S3 keeps its objects, and what
    to check; empty for other catalogs."""
    if not uses_s3(catalog.properties):
        return ""
    return (f" (its tables are in {storage_description(catalog.properties)}: check that the bucket exists and "
            "that s3.access-key-id and s3.secret-access-key may read it)")


def list_tables(catalog: Catalog) -> list[TableName]:
    """Every table in the catalog, nested namespaces included, sorted by qualified name."""
    try:
        if isinstance(catalog, SqlCatalog):
            return sorted(list_table_metadata_locations(catalog))
        found = {TableName(catalog.name, tuple(identifier[:-1]), identifier[-1])
                 for namespace in walk_namespaces(catalog) for identifier in catalog.list_tables(namespace)}
        return sorted(found)
    except CatalogUnavailable:
        raise
    except Exception as exc:
        raise CatalogUnavailable(f"catalog '{catalog.name}' could not list tables: {exc}") from exc


def walk_namespaces(catalog: Catalog) -> Iterator[tuple[str, ...]]:
    """Every namespace of the catalog, nested ones included, each once (a catalog without nested
    namespaces raises NotImplementedError when asked for a namespace's children)."""
    pending = [tuple(ns) for ns in catalog.list_namespaces()]
    seen: set[tuple[str, ...]] = set()
    while pending:
        namespace = pending.pop()
        if namespace in seen:
            continue
        seen.add(namespace)
        yield namespace
        try:
            pending.extend(tuple(ns) for ns in catalog.list_namespaces(namespace))
        except NotImplementedError:
            pass


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
    """The table, freshly loaded. UnknownTable when the catalog does not have it; CatalogUnavailable
    only when the catalog or the storage cannot be reached (errors.failure_kind's rule); any other
    error (corrupt or missing metadata, a refused read, an error answer about this table) is
    TableUnreadable: this table's failure alone."""
    try:
        return catalog.load_table(table.identifier)
    except NoSuchTableError:
        raise UnknownTable(f"table '{table.qualified}' does not exist in catalog '{catalog.name}'", table) from None
    except Exception as exc:
        message = f"catalog '{catalog.name}' could not load '{table.qualified}': {exc}{storage_context(catalog)}"
        if failure_kind(exc) == OUTAGE:
            raise CatalogUnavailable(message) from masked_cause(exc)
        raise TableUnreadable(message) from masked_cause(exc)


def existing_table(settings: CatalogSettings, text: str) -> TableName:
    """``catalog.ns.table`` or ``ns.table`` as a table of this catalog, checked to exist (UnknownTable)."""
    table = TableName.parse(text, settings.name)
    load_table(open_catalog(settings), table)
    return table


def snapshot_facts(table: Table) -> list[dict[str, object]]:
    """The table's snapshots as the engine's row check reads them (from the metadata already loaded)."""
    return [
        {"snapshot_id": s.snapshot_id, "parent_id": s.parent_snapshot_id,
         "operation": s.summary.operation.value if s.summary else None,
         "committed_at": datetime.fromtimestamp(s.timestamp_ms / 1000, timezone.utc),
         "summary": dict(s.summary.additional_properties) if s.summary else {}}
        for s in table.metadata.snapshots
    ]


class TableReads:
    """PyIceberg reads of one table while it is maintained: the table as loaded by its first reader, then a
    fresh load for each later read, so the metadata read after the procedure serves both the row check and
    the counts after. Nothing is loaded until a reader asks (a run makes one of these at its start and hands
    it to each step before the lock, which may not need the table at all)."""

    def __init__(self, catalog: Catalog, table: TableName):
        self.catalog, self.name = catalog, table
        self._latest: Table | None = None
        self._fresh = True

    @property
    def latest(self) -> Table:
        """The table as last read (loaded now if nothing read it yet)."""
        if self._latest is None:
            self._latest = load_table(self.catalog, self.name)
        return self._latest

    def snapshots(self) -> list[dict[str, object]]:
        if not self._fresh:
            self._latest = load_table(self.catalog, self.name)
        self._fresh = False
        return snapshot_facts(self.latest)


def table_counts(table: Table) -> dict[str, int]:
    """The numbers a maintenance run reports before and after: from the snapshot summary and the
    current manifest list (one small read), never from data files. A total the summary lacks is 0."""
    metadata = table.metadata
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot and snapshot.summary else None

    def total(key: str) -> int:
        return summary_total(summary, key, missing=0) or 0

    manifests = len(snapshot.manifests(table.io)) if snapshot else 0
    return {
        "data_files": total(TOTAL_DATA_FILES),
        "delete_files": total(TOTAL_DELETE_FILES),
        "position_deletes": total(TOTAL_POSITION_DELETES),
        "records": total(TOTAL_RECORDS),
        "total_bytes": total(TOTAL_FILE_SIZE),
        "snapshots": len(metadata.snapshots),
        "manifests": manifests,
    }


def table_shape(table: Table, counts: Mapping[str, int] | None = None) -> TableShape:
    """The table's current snapshot as the benefit of a run compares it (core/runs/run_figures.py): the counts
    (:func:`table_counts`, when not given) and the metadata file's size (one stat, no read)."""
    counts = counts if counts is not None else table_counts(table)
    return TableShape(counts["data_files"], counts["delete_files"], counts["total_bytes"], counts["manifests"],
                      counts["snapshots"], metadata_file_bytes(table))


def metadata_file_bytes(table: Table) -> int | None:
    """The size of the table's current metadata file (None when the store cannot say)."""
    try:
        return len(table.io.new_input(table.metadata_location))
    except Exception:  # a figure, never the run's failure
        return None


def row_count(snapshot: Snapshot | None) -> int | None:
    """The current snapshot's total records, from its summary (Iceberg metadata, no data read); 0
    for a table without a snapshot, None when the writer left the total out of the summary."""
    if snapshot is None:
        return 0
    return summary_total(snapshot.summary, TOTAL_RECORDS)


def partition_fields(table: Table) -> tuple[PartitionField, ...]:
    """The table's current partition spec as the engine's partition predicates need it (source column
    path, transform, the source column's Iceberg type), in the order of the health collector's keys."""
    schema = table.schema()
    return tuple(PartitionField(schema.find_column_name(f.source_id) or "", str(f.transform),
                                str(schema.find_field(f.source_id).field_type), f.source_id)
                 for f in table.spec().fields)


def schema_columns(schema: Schema) -> tuple[ColumnFacts, ...]:
    """The schema's top-level columns: name, type as Iceberg prints it, whether required, doc."""
    return tuple(ColumnFacts(f.name, type_text(f.field_type), f.required, f.doc or None) for f in schema.fields)


def type_text(field_type: IcebergType) -> str:
    """A type as Iceberg prints it, without the field ids Iceberg puts inside nested types:
    ``struct<street: optional string, zip: required int>``, ``list<string>``, ``map<string, long>``."""
    if isinstance(field_type, StructType):
        fields = ", ".join(f"{f.name}: {'required' if f.required else 'optional'} {type_text(f.field_type)}"
                           for f in field_type.fields)
        return f"struct<{fields}>"
    if isinstance(field_type, ListType):
        return f"list<{type_text(field_type.element_type)}>"
    if isinstance(field_type, MapType):
        return f"map<{type_text(field_type.key_type)}, {type_text(field_type.value_type)}>"
    return str(field_type)


def describe(settings: CatalogSettings) -> dict[str, object]:
    """Catalog settings for display, with secrets masked (the one rule: core/basics/secrets.py)."""
    return mask(dict(settings.properties))
