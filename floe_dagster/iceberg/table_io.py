"""The one place floe's FileIO for a table is built: from the catalog's properties (floe.yaml) and, for a
REST catalog, the config and storage credentials its load-table answer vends, never from the table's own
properties.

PyIceberg merges a table's properties over the catalog's for that table's FileIO (``Catalog._load_file_io``,
and the REST catalog's ``_response_to_table``): a table's owner could set ``py-io-impl`` (a class PyIceberg
imports and calls with the catalog's credentials) or ``s3.endpoint`` / ``s3.proxy-uri`` / ``s3.signer.uri``
(where floe's reads, quarantine moves and purges go). :func:`guard_catalog`, applied to every catalog
:func:`~floe_dagster.iceberg.catalog.open_catalog` opens, makes each table the catalog loads get its FileIO
without the table's properties, before any class is imported; the table's metadata (and its properties, which
plan and explain show as ignored: core/policies/owner_overrides.py) stays as the catalog returned it.
:func:`table_file_store` and :func:`catalog_file_io` hand that FileIO to floe's own file work (quarantine
moves, purges, restores, file times and sizes, the health collector's reads).

Iceberg Java needs no such guard: its catalogs build a table's FileIO from the catalog's properties (``io-impl``
included) and a REST catalog's load-table config, never from table properties.
"""

from __future__ import annotations

from typing import Any, Callable

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.typedef import EMPTY_DICT, Properties

from floe_dagster.iceberg.file_store import FileStore

_GUARDED = "_floe_catalog_file_io"  # set on a guarded catalog: its FileIO builder without table properties


def guard_catalog(catalog: Catalog) -> Catalog:
    """``catalog``, changed in place (once) so that no table property reaches a FileIO it builds."""
    if getattr(catalog, _GUARDED, None) is not None:
        return catalog
    merged = catalog._load_file_io  # {**catalog properties, **given} (+ a REST catalog's auth manager)
    if isinstance(catalog, RestCatalog):
        # Its FileIO takes {table properties, vended config, vended credentials}: the answer's metadata goes
        # in without its properties, so what the server vends stays and what the table says does not.
        catalog._response_to_table = _without_table_properties(catalog._response_to_table)  # type: ignore[method-assign]
        catalog._response_to_staged_table = _without_table_properties(  # type: ignore[method-assign]
            catalog._response_to_staged_table)
    else:
        # Every other catalog hands _load_file_io the table's properties alone: drop them.
        def catalog_only(properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
            return merged(EMPTY_DICT, location)

        catalog._load_file_io = catalog_only  # type: ignore[method-assign]
    setattr(catalog, _GUARDED, merged)
    return catalog


def _without_table_properties(build: Callable[[Any, Any], Table]) -> Callable[[Any, Any], Table]:
    def built(identifier: Any, response: Any) -> Table:
        bare = response.model_copy(update={"metadata": response.metadata.model_copy(update={"properties": {}})})
        table = build(identifier, bare)
        table.metadata = response.metadata  # the table as the catalog described it; only its FileIO is bare
        return table

    return built


def catalog_file_io(catalog: Catalog, location: str) -> FileIO:
    """A FileIO for files at ``location`` from the catalog's properties alone (the health collector's reads of
    metadata it found without loading the table)."""
    return getattr(guard_catalog(catalog), _GUARDED)(EMPTY_DICT, location)


def table_file_store(table: Table) -> FileStore:
    """floe's own file work on ``table`` (quarantine moves, purges, restores, file times): through the FileIO
    settings of a guarded catalog's load (the catalog's, plus what a REST catalog vended), never the table's.
    A table loaded through an unguarded catalog is loaded again through the guarded one."""
    if getattr(table.catalog, _GUARDED, None) is None:
        table = guard_catalog(table.catalog).load_table(table.name())
    return FileStore(table.io.properties)


__all__ = ["guard_catalog", "catalog_file_io", "table_file_store"]
