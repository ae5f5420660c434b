"""The table a path or a trigger body names, refused with Floe's INVALID_TABLE_NAME when malformed."""

from __future__ import annotations

from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import ApiError
from floe_dagster.settings import Settings


def table_name(settings: Settings, namespace: str, table: str) -> TableName:
    """The table a path (or a trigger body) names: the namespace dotted for nested namespaces."""
    parts = tuple(namespace.split("."))
    if any(not part.strip() for part in parts):
        raise ApiError(400, "INVALID_TABLE_NAME", f"namespace {namespace!r} has an empty (or blank) part",
                       {"namespace": namespace})
    if not table.strip() or "." in table:
        raise ApiError(400, "INVALID_TABLE_NAME",
                       f"table {table!r}: a table name must not be blank and cannot contain '.'", {"table": table})
    # The name reaches explain as text (``catalog.ns.table``, whose ends are stripped when parsed):
    # "orders " would be answered for "orders". A part with blanks at its ends is refused.
    for part_name, value in [*(("namespace", part) for part in parts), ("table", table)]:
        if value != value.strip():
            raise ApiError(400, "INVALID_TABLE_NAME",
                           f"{part_name} {value!r}: a name part cannot start or end with blanks",
                           {part_name: namespace if part_name == "namespace" else table})
    return TableName(settings.catalog.name, parts, table)
