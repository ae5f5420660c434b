"""Dagster names derived from table names: asset keys keep the real names; group names, which must
match ``[A-Za-z0-9_]+``, use a reversible, collision-free escape."""

from __future__ import annotations

import re

from dagster import AssetKey

from floe_dagster.core.tables import TableName

# The job every maintenance run belongs to (the operation is its partition).
MAINTENANCE_JOB = "floe_maintenance"

_ESCAPE = re.compile(r"_x([0-9a-f]+)_|__")


def group_name_for(namespace: tuple[str, ...]) -> str:
    """``sales`` stays ``sales``; ``_`` becomes ``__`` and any other character ``_x<hex>_`` (``.`` is
    ``_x2e_``), so two namespaces never share a group and the mapping can be reversed."""
    return _escape(".".join(namespace))


def _escape(text: str) -> str:
    out = []
    for ch in text:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        elif ch == "_":
            out.append("__")
        else:
            out.append(f"_x{ord(ch):x}_")
    return "".join(out)


def output_name_for(table: TableName) -> str:
    """A Python identifier for the table's output in the multi-asset, unique per table."""
    # Parts joined by '/', which no mappable name contains (unmappable_reason), so it stays unique.
    return "t_" + _escape("/".join((table.catalog, *table.namespace, table.name)))


def namespace_for_group(group: str) -> tuple[str, ...]:
    text = _ESCAPE.sub(lambda m: "_" if m.group(0) == "__" else chr(int(m.group(1), 16)), group)
    return tuple(text.split("."))


def asset_key_for(table: TableName) -> AssetKey:
    return AssetKey([table.catalog, *table.namespace, table.name])


def table_for_asset_key(key: AssetKey) -> TableName:
    catalog, *namespace, name = key.path
    return TableName(catalog, tuple(namespace), name)


def unmappable_reason(table: TableName) -> str | None:
    """Why a table cannot become an asset, or None. Control characters and ``/`` would break
    Dagit's asset URLs and log lines; everything else is kept as it is."""
    for part in (table.catalog, *table.namespace, table.name):
        if any(ord(ch) < 32 or ch == "\x7f" for ch in part):
            return f"table {table.qualified!r} has a control character in its name"
        if "/" in part:
            return f"table {table.qualified!r} has '/' in its name, which Dagit cannot show in an asset path"
    return None
