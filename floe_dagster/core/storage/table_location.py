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
would list the other table's data files. A table holding the warehouse root or a namespace's location
is never counted as the container of another (it is refused itself), so one owner who points a table at
the root cannot refuse the whole fleet with it. A table holding only other tables still counts: floe
cannot tell an owner's table over a fleet from a table two other tables were put inside (at
``<victim>/data`` and ``<victim>/x``, each would list the victim's files), so it refuses them all.

Nested tables (Hive-style layouts) opt in per policy: ``nestedTables`` names the tables (``ns.table``)
this one may nest with, inside it (their folders are then left out of its orphan listing:
:attr:`LocationCheck.excluded`) or around it. Two tables at the same location are never allowed.

Compared as core/storage/locations.py normalises: the table's own location with the strict constructor (a
location that cannot be read is refused), the ones floe knows with the lenient one; component by
component (``/t/orders2`` is not inside ``/t/orders``), ``s3a``/``s3n`` as ``s3``. Pure: no Dagster,
Spark or PyIceberg.
"""

from __future__ import annotations

import posixpath
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator, Mapping

from floe_dagster.core.storage.locations import StorageLocation, parse_location, store_location
from floe_dagster.core.storage.quarantine import QUARANTINE_FOLDER
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import Location, get_str_list

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

    @cached_property
    def index(self) -> "_FolderIndex":
        """The tables' folders, parsed and sorted once (a plan checks every table against them)."""
        return _FolderIndex(self)


def table_folders(location: str | None, metadata_location: str | None) -> tuple[str, ...]:
    """The folders that hold a table's files, from what a catalog or a health record says of it: its
    location, and its metadata file's folder (with the folder above a ``metadata`` folder: Iceberg's
    layout, ``<location>/metadata/<n>.metadata.json``, as a SQL or JDBC catalog lists it). The folder
    above is kept even beside a location: the location may be a health record's from before the table
    moved, while the metadata location is the catalog's current one."""
    found = [location] if location else []
    if metadata_location:
        folder = posixpath.dirname(metadata_location.rstrip("/"))
        if folder and not folder.endswith(":"):
            found.append(folder)
            if posixpath.basename(folder) == "metadata":
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
    found, excluded = _tables_around(own, table.qualified, known.index, allowed)
    opt_in = f"; a policy may name nested tables in orphanCleanup.{NESTED_FIELD}"
    for relation, what, consequence in (
            ("is", "it is the location of", "listing it would remove the files of {}"),
            ("holds", "it holds the location of", "listing it would remove the files of {}" + opt_in),
            ("inside", "it lies inside the location of", "listing it would remove the files {} has there" + opt_in)):
        named = sorted(f"'{name}' ({text})" for name, (seen, text) in found.items() if seen == relation)
        if named:
            whose = "that table" if len(named) == 1 else "those tables"
            refusals.append(f"{what} {_some_tables(named)}: {consequence.format(whose)}")
    return LocationCheck(tuple(refusals), tuple(dict.fromkeys(excluded)))


_RANK = {"is": 0, "holds": 1, "inside": 2}


def _tables_around(own: StorageLocation, me: str, index: "_FolderIndex", allowed: set[str]
                   ) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Each other table that stands in the way, with how (``is``, ``holds``, ``inside``) and the folder
    that shows it; and the folders of the nested tables the policy names (left out of the listing)."""
    found: dict[str, tuple[str, str]] = {}
    excluded: list[str] = []

    def note(name: str, relation: str, text: str) -> None:
        if name != me and (name not in found or _RANK[relation] < _RANK[found[name][0]]):
            found[name] = (relation, text)

    for name, text in index.at(own):
        note(name, "is", text)
    for name, text, folder in index.below(own):
        if name in allowed and name != me:
            excluded.append(folder.uri)
        else:
            note(name, "holds", text)
    for container in own.ancestors():
        for name, text in index.at(container):
            if name not in allowed and not index.holds_lake(container):
                note(name, "inside", text)
    return found, excluded


def _some_tables(named: list[str], shown: int = 3) -> str:
    """``table 'a' (folder)``, or ``5 other tables: 'a' (…), 'b' (…), 'c' (…) and 2 more``: a fleet of
    50,000 tables under the warehouse root must not make a message of 50,000 names."""
    if len(named) == 1:
        return f"table {named[0]}"
    more = f" and {len(named) - shown} more" if len(named) > shown else ""
    return f"{len(named)} other tables: {', '.join(named[:shown])}{more}"


def _quarantine_refusals(own: StorageLocation, location: str, known: KnownLocations) -> list[str]:
    if QUARANTINE_FOLDER in own.segments:
        return [f"{location!r} lies inside a quarantine (a {QUARANTINE_FOLDER} folder): listing it would remove "
                "quarantined files before their grace period"]
    configured = known.index.quarantine
    if configured is not None and (configured.contains(own) or own.contains(configured)):
        return [f"{location!r} overlaps floe's quarantine location {known.quarantine_location!r}: listing it would "
                "remove quarantined files before their grace period"]
    return []


def _lake_refusals(own: StorageLocation, location: str, known: KnownLocations) -> list[str]:
    refusals = []
    warehouse = known.index.warehouse
    if warehouse is not None and own.contains(warehouse):
        what = "is" if own == warehouse else "holds"
        refusals.append(f"{location!r} {what} the catalog's warehouse root {known.warehouse!r}: listing it would "
                        "remove every other table's files")
    for namespace, text, folder in known.index.namespaces:
        if own.contains(folder):
            what = "is" if own == folder else "holds"
            refusals.append(f"{location!r} {what} the location of namespace '{namespace}' ({text}): listing it "
                            "would remove the files of the namespace's tables")
    return refusals


class _FolderIndex:
    """Every known table's folders, sorted, so that a check costs a few look-ups and a range, not a pass
    over the fleet (``plan`` checks each of 50,000 tables against the other 49,999); and the lake's own
    folders (warehouse, namespaces, quarantine), parsed once too."""

    def __init__(self, known: KnownLocations):
        rows = sorted((folder.scheme, folder.authority, folder.path, name, text)
                      for name, texts in known.tables.items() for text in texts
                      if (folder := _lenient(text)) is not None)
        self._keys = [row[:3] for row in rows]
        self._rows = rows
        self.warehouse = _lenient(known.warehouse)
        self.namespaces = [(name, text, folder) for name, text in sorted(known.namespaces.items())
                           if (folder := _lenient(text)) is not None]
        self.quarantine = _lenient(known.quarantine_location)
        self._lake = [folder for folder in (self.warehouse, *(row[2] for row in self.namespaces)) if folder is not None]

    def at(self, where: StorageLocation) -> list[tuple[str, str]]:
        """(table, folder as written) of every folder that is ``where``."""
        key = (where.scheme, where.authority, where.path)
        first = bisect_left(self._keys, key)
        return [(row[3], row[4]) for row in self._rows[first:bisect_right(self._keys, key)]]

    def below(self, where: StorageLocation) -> Iterator[tuple[str, str, StorageLocation]]:
        """(table, folder as written, folder) of every folder strictly below ``where``, in path order."""
        prefix = where.path.rstrip("/") + "/"
        first = bisect_left(self._keys, (where.scheme, where.authority, prefix))
        for scheme, authority, path, name, text in self._rows[first:]:
            if (scheme, authority) != (where.scheme, where.authority) or not path.startswith(prefix):
                return
            yield name, text, StorageLocation(scheme, authority, path)

    def holds_lake(self, container: StorageLocation) -> bool:
        """Whether ``container`` holds the warehouse root or a namespace's location: then it is refused
        itself, and counts as no table's container. Never decided by the tables under it: their owners
        choose where they are (two tables inside another would make it look like a container of many)."""
        return any(container.contains(folder) for folder in self._lake)


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


def nested_tables(at: Location, raw: Mapping[str, object], key: str) -> tuple[str, ...] | None:
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
