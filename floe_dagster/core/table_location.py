"""The safety envelope's check of a table's *own* location: the table's owner writes it, so it is untrusted.

Iceberg's ``remove_orphan_files`` lists everything under the table's location and deletes (or floe
quarantines) every file this table does not reference. A table created at the warehouse root (``CREATE
TABLE … LOCATION '<warehouse>'``), at a namespace's folder or at another table's folder would list, and
then remove, every other table's files. So before any kind that lists, deletes or moves files
(``needs_gc``: orphan cleanup with its quarantine purge, snapshot expiry; and ``floe-dagster restore``),
the table's location must not be or contain:

- the catalog's warehouse root;
- a namespace's location;
- another table's location or metadata folder that floe knows (:class:`KnownLocations`);

and it must not lie inside a quarantine (a ``_floe_quarantine`` folder anywhere, or floe.yaml's
``maintenance.quarantine-location``), nor inside another table's location: a table at ``<other>/data``
would list the other table's data files. A table holding the warehouse root, a namespace or a third
table is never counted as the container of another (it is refused itself), so one owner who points a
table at the root cannot refuse the whole fleet with it.

Nested tables (Hive-style layouts) opt in per policy: ``nestedTables`` names the tables (``ns.table``)
this one may nest with, inside it (their folders are then left out of its orphan listing:
:attr:`LocationCheck.excluded`) or around it. Two tables at the same location are never allowed.

Compared as core/locations.py normalises: the table's own location with the strict constructor (a
location that cannot be read is refused), the ones floe knows with the lenient one; component by
component (``/t/orders2`` is not inside ``/t/orders``), ``s3a``/``s3n`` as ``s3``. Pure: no Dagster,
Spark or PyIceberg.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from floe_dagster.core.locations import StorageLocation, parse_location, store_location
from floe_dagster.core.quarantine import QUARANTINE_FOLDER
from floe_dagster.core.tables import TableName
from floe_dagster.core.validation import Location, get_str_list

NESTED_FIELD = "nestedTables"


@dataclass(frozen=True)
class KnownLocations:
    """What floe knows of the lake around one table, gathered by iceberg/known_locations.py: the
    warehouse root, each namespace's ``location`` property (by dotted name), each table's folders (by
    qualified name: its location, its metadata folder) and the configured quarantine location."""

    warehouse: str | None = None
    namespaces: Mapping[str, str] = field(default_factory=dict)
    tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    quarantine_location: str | None = None


def table_folders(location: str | None, metadata_location: str | None) -> tuple[str, ...]:
    """The folders that hold a table's files, from what a catalog or a health record says of it: its
    location, and its metadata file's folder (with the folder above a ``metadata`` folder: Iceberg's
    layout, ``<location>/metadata/<n>.metadata.json``, as a SQL or JDBC catalog lists it)."""
    found = [location] if location else []
    if metadata_location:
        folder = posixpath.dirname(metadata_location.rstrip("/"))
        if folder and not folder.endswith(":"):
            found.append(folder)
            if location is None and posixpath.basename(folder) == "metadata":
                found.append(posixpath.dirname(folder))
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class LocationCheck:
    """The verdict on a table's own location: each reason it is refused (empty: ok), and the nested
    tables' folders its orphan listing leaves out (the policy's ``nestedTables``)."""

    refusals: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals


def check_table_location(table: TableName, location: str | None, known: KnownLocations,
                         nested: Iterable[str] = ()) -> LocationCheck:
    """Whether a kind that lists, deletes or moves files may run on ``table`` at ``location`` (see the
    module); ``nested``: the policy's ``nestedTables``, as written (``ns.table`` or ``catalog.ns.table``)."""
    if location is None:
        return LocationCheck()
    try:
        own = parse_location(location)
    except ValueError as exc:
        return LocationCheck((f"the table's location {location!r} cannot be read, so it cannot be checked: {exc}",))
    allowed = {_qualified(name, table.catalog) for name in nested}
    refusals = [*_quarantine_refusals(own, location, known), *_lake_refusals(own, location, known)]
    others = _other_tables(table, known)
    excluded: list[str] = []
    for name, folders in others.items():
        for text, folder in folders:
            if folder == own:
                refusals.append(f"it is the location of table '{name}' ({text}): listing it would remove that "
                                "table's files")
            elif own.contains(folder):
                if name in allowed:
                    excluded.append(folder.uri)
                else:
                    refusals.append(f"it holds table '{name}' ({text}): listing it would remove that table's files; "
                                    f"a policy may name nested tables in orphanCleanup.{NESTED_FIELD}")
            elif folder.contains(own) and name not in allowed and not _holds_more(folder, own, name, others, known):
                refusals.append(f"it lies inside table '{name}' ({text}): listing it would remove that table's "
                                f"files there; a policy may name nested tables in orphanCleanup.{NESTED_FIELD}")
    return LocationCheck(tuple(dict.fromkeys(refusals)), tuple(dict.fromkeys(excluded)))


def _quarantine_refusals(own: StorageLocation, location: str, known: KnownLocations) -> list[str]:
    if QUARANTINE_FOLDER in own.segments:
        return [f"{location!r} lies inside a quarantine (a {QUARANTINE_FOLDER} folder): listing it would remove "
                "quarantined files before their grace period"]
    configured = _lenient(known.quarantine_location)
    if configured is not None and (configured.contains(own) or own.contains(configured)):
        return [f"{location!r} overlaps floe's quarantine location {known.quarantine_location!r}: listing it would "
                "remove quarantined files before their grace period"]
    return []


def _lake_refusals(own: StorageLocation, location: str, known: KnownLocations) -> list[str]:
    refusals = []
    warehouse = _lenient(known.warehouse)
    if warehouse is not None and own.contains(warehouse):
        what = "is" if own == warehouse else "holds"
        refusals.append(f"{location!r} {what} the catalog's warehouse root {known.warehouse!r}: listing it would "
                        "remove every other table's files")
    for namespace, text in sorted(known.namespaces.items()):
        folder = _lenient(text)
        if folder is not None and own.contains(folder):
            what = "is" if own == folder else "holds"
            refusals.append(f"{location!r} {what} the location of namespace '{namespace}' ({text}): listing it "
                            "would remove the files of the namespace's tables")
    return refusals


def _other_tables(table: TableName, known: KnownLocations) -> dict[str, list[tuple[str, StorageLocation]]]:
    """Every other table's folders, parsed (a folder that cannot be read is left out)."""
    found: dict[str, list[tuple[str, StorageLocation]]] = {}
    for name, texts in known.tables.items():
        if name == table.qualified:
            continue
        parsed = [(text, folder) for text in texts if (folder := _lenient(text)) is not None]
        if parsed:
            found[name] = parsed
    return found


def _holds_more(container: StorageLocation, own: StorageLocation, name: str,
                others: Mapping[str, list[tuple[str, StorageLocation]]], known: KnownLocations) -> bool:
    """Whether a table whose folder holds ``own`` also holds the warehouse root, a namespace or a third
    table: then it is refused itself, and does not count as this table's container."""
    lake = [_lenient(known.warehouse), *(_lenient(text) for text in known.namespaces.values())]
    if any(folder is not None and container.contains(folder) for folder in lake):
        return True
    return any(container.contains(folder) and not folder.contains(own) and other != name
               for other, folders in others.items() for _, folder in folders)


def _lenient(text: str | None) -> StorageLocation | None:
    """A location floe knows, normalised as the table's own is when it can be (else as Iceberg wrote it)."""
    if not text:
        return None
    for parse in (parse_location, store_location):
        try:
            return parse(text)
        except ValueError:
            continue
    return None


def _qualified(name: str, catalog: str) -> str:
    try:
        return TableName.parse(name, catalog).qualified
    except ValueError:
        return name


# -- the policy's opt-in --------------------------------------------------------------------------------------


def nested_tables(at: Location, raw: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    """``nestedTables``: the tables (``ns.table``, each named exactly) a table may nest with."""
    names = get_str_list(at, raw, key, None)
    if names is None:
        return None
    here = at.child(key)
    if not names:
        here.error("must not be empty (leave it out instead)")
        return None
    bad = [name for name in names if "." not in name.strip() or any(ch in name for ch in "*?/ ")]
    if bad:
        here.error(f"{', '.join(map(repr, bad))}: name each nested table exactly as namespace.table (no wildcard, "
                   "no folder): a nested table's folder is left out of this table's orphan listing")
        return None
    return tuple(name.strip() for name in names)


__all__ = ["KnownLocations", "LocationCheck", "NESTED_FIELD", "check_table_location", "nested_tables",
           "table_folders"]
