"""Recoverable orphan deletion, the pure half: where quarantined files go, when they are purged, and
whether a run quarantines at all.

Orphan cleanup in quarantine mode moves each orphan to
``<quarantine root>/<run folder>/<its path relative to the table location>`` instead of deleting it;
a later run deletes a run folder once its grace period is over, and ``floe-dagster restore`` moves a
run folder's files back. The quarantine root is the reserved folder :data:`QUARANTINE_FOLDER` inside
the table location, or, with ``maintenance.quarantine-location`` in floe.yaml,
``<that location>/_floe_quarantine/<catalog>/<namespace.….table>``: always two folders deep, each
name escaped (a dot inside a name too), so no table's quarantine ever lies inside another's (before,
``<catalog>/<namespace…>/<table>`` put table ``a.b.x``'s quarantine inside table ``a.b``'s).

The folder's leading ``_`` is what keeps it out of every orphan listing: Iceberg's
``remove_orphan_files`` skips hidden path components (``_`` or ``.``, except ``<partition field>=``
folders) whether it lists with Hadoop or with the FileIO's prefix listing, so no orphan run, in
quarantine or in delete mode, ever sees a quarantined file. The one way around it is a listing that
starts inside the folder (the policy's ``location``): :func:`listing_location_problem` refuses it.

A run folder is named ``<UTC time>-<purge date>_<run id>`` (``20261124T101500Z-20261201T101500Z_6f1c…``):
the quarantine is self-describing. The purge date is the run's promise: written in the name when the
files go in, it is purged at the later of that date and the run's time plus the grace period in force
then (a shorter grace period, or another policy, never brings it forward). The times come from the
name, not from a file's time (a local rename keeps the file's old modification time, an S3 copy gets
a new one). Folders of older releases, ``<UTC time>_<run id>``, carry no date in their name: their
marker's ``purgeAfter`` when it has one, else the grace period in force.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping
from urllib.parse import quote

from floe_dagster.core.basics.durations import format_iso_duration, parse_iso_duration
from floe_dagster.core.storage.locations import StorageLocation, store_location
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import Location, check_mapping, check_unknown, get_bool, get_str

QUARANTINE_FOLDER = "_floe_quarantine"
DEFAULT_GRACE_PERIOD = "P7D"
MIN_GRACE_PERIOD = timedelta(hours=1)
QUARANTINE_FIELDS = ("enabled", "gracePeriod")
RUN_MARKER = "_floe_run.json"  # in each run folder: what was quarantined, from where (never an orphan's name)
_STAMP = "%Y%m%dT%H%M%SZ"
_RUN_FOLDER = re.compile(r"^(?P<at>\d{8}T\d{6}Z)(?:-(?P<due>\d{8}T\d{6}Z))?_(?P<run>[A-Za-z0-9-]{1,64})$")


# -- the policy's orphanCleanup.quarantine ---------------------------------------------------------------


@dataclass(frozen=True)
class QuarantinePolicy:
    """``orphanCleanup.quarantine``: ``enabled`` (unset: every cleanup quarantines; ``false`` is the
    explicit opt-out) and ``gracePeriod`` (ISO-8601, default :data:`DEFAULT_GRACE_PERIOD`; upper-cased)."""

    enabled: bool | None = None
    grace_period: str | None = None

    @property
    def grace(self) -> timedelta:
        return parse_iso_duration(self.grace_period or DEFAULT_GRACE_PERIOD)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {}
        if self.enabled is not None:
            data["enabled"] = self.enabled
        if self.grace_period is not None:
            data["gracePeriod"] = self.grace_period
        return data


def parse_quarantine(at: Location, raw: Mapping[str, object], key: str) -> QuarantinePolicy | None:
    """``quarantine: {enabled: true, gracePeriod: P7D}`` (``true``/``false`` alone: ``enabled``)."""
    value = raw.get(key)
    if value is None:
        return None
    here = at.child(key)
    if isinstance(value, bool):
        return QuarantinePolicy(enabled=value)
    mapping = check_mapping(here, value, "a mapping {enabled, gracePeriod} or true/false")
    if mapping is None:
        return None
    check_unknown(here, mapping, QUARANTINE_FIELDS)
    enabled = get_bool(here, mapping, "enabled", None)
    grace = get_str(here, mapping, "gracePeriod", None)
    if grace is not None:
        try:
            length = parse_iso_duration(grace)
        except ValueError as exc:
            here.child("gracePeriod").error(str(exc))
            grace = None
        else:
            if length < MIN_GRACE_PERIOD:
                here.child("gracePeriod").error(
                    f"must be at least {format_iso_duration(MIN_GRACE_PERIOD)}, got {grace!r}: a shorter grace period "
                    "leaves no time to notice a wrong deletion and restore the files")
                grace = None
            else:
                grace = grace.strip().upper()
    return QuarantinePolicy(enabled, grace)


@dataclass(frozen=True)
class QuarantineChoice:
    """Whether a run quarantines its orphans instead of deleting them, and why (the run's metadata)."""

    enabled: bool
    reason: str


def quarantine_choice(policy: QuarantinePolicy | None, dry_run: bool) -> QuarantineChoice:
    """Every orphan cleanup quarantines unless the policy opts out (``quarantine: false``): a wrong
    deletion stays recoverable for the grace period. A dry run moves nothing."""
    enabled = policy.enabled if policy is not None else None
    if dry_run:
        return QuarantineChoice(False, "dry run: nothing is moved or deleted")
    if enabled is False:
        return QuarantineChoice(False, "orphanCleanup.quarantine is false: the policy opts out, orphans are deleted "
                                       "at once")
    grace = (policy or QuarantinePolicy()).grace_period or DEFAULT_GRACE_PERIOD
    if enabled is True:
        return QuarantineChoice(True, f"orphanCleanup.quarantine.enabled is true: orphans are kept {grace}")
    return QuarantineChoice(True, f"quarantined by default: orphans are kept {grace} before they are deleted "
                                  "(orphanCleanup.quarantine: false opts out)")


# -- the quarantine's locations (core/storage/locations.py normalises them) ---------------------------------------


def escape_component(name: str) -> str:
    """One folder name from a table, namespace or catalog name that no name can turn into a path
    (``/``, ``..``, control characters): percent-encoded, dots alone encoded too."""
    escaped = quote(name, safe="")
    return escaped.replace(".", "%2E") if set(name) <= {"."} else escaped


def table_folder(table: TableName) -> str:
    """The one folder of a table under its catalog's: its namespace and name, each escaped with every
    dot encoded, joined by dots. One component for every table, so ``a.b``'s folder is a sibling of
    ``a.b.x``'s, never its parent, and ``a%2Eb`` (a name with a dot) differs from ``a.b``."""
    return ".".join(quote(part, safe="").replace(".", "%2E") for part in (*table.namespace, table.name))


def quarantine_root(table_location: str, table: TableName, configured: str | None = None) -> StorageLocation:
    """Where a table's quarantine lives: its reserved folder, or its folder under ``configured``."""
    if configured is None:
        return store_location(table_location).child(QUARANTINE_FOLDER)
    return store_location(configured).child(QUARANTINE_FOLDER, escape_component(table.catalog), table_folder(table))


def nested_root(table: TableName, configured: str) -> StorageLocation:
    """Where releases before the one-folder naming put a table's configured quarantine
    (``<catalog>/<namespace…>/<table>``): looked in for runs whose marker names this very table."""
    parts = [escape_component(p) for p in (table.catalog, *table.namespace, table.name)]
    return store_location(configured).child(QUARANTINE_FOLDER, *parts)


def quarantine_roots(table_location: str, table: TableName, configured: str | None) -> list[StorageLocation]:
    """Every place a table's quarantine may be (purge and restore look in each): the configured one
    first, then the reserved folder (where runs went before the setting, or without it)."""
    roots = [quarantine_root(table_location, table, configured)] if configured else []
    return roots + [quarantine_root(table_location, table)]


def listing_location_problem(location: str | None, roots: Iterable[StorageLocation]) -> str | None:
    """Why an orphan listing may not start at the policy's ``location``: at or inside a quarantine,
    Iceberg's hidden-path rule no longer hides the quarantined files, and they would be orphans."""
    if not location:
        return None
    listed = store_location(location)
    for root in roots:
        if root.contains(listed):
            return (f"orphanCleanup.location {location!r} lies inside the quarantine {root.uri}: every quarantined "
                    "file would be listed as an orphan and deleted before its grace period; list the table's "
                    "location (leave location out) instead")
    return None


def quarantine_location_problem(configured: str, warehouse: str | None) -> str | None:
    """floe.yaml's ``maintenance.quarantine-location`` must not lie inside the catalog's warehouse (where
    the tables are) nor hold it: quarantined files must never lie inside another table."""
    try:
        where = store_location(configured)
    except ValueError as exc:
        return str(exc)
    if where.path == "/" and where.scheme == "file":
        return f"{configured!r} is the file system's root: name a folder of its own"
    if warehouse:
        try:
            tables = store_location(warehouse)
        except ValueError:
            return None
        if tables.contains(where) or where.contains(tables):
            return (f"{configured!r} overlaps the catalog's warehouse {warehouse!r}, where the tables live: "
                    "quarantined files must never lie inside another table; name a bucket or prefix of its own")
    return None


def placement_problem(root: StorageLocation, table_location: str) -> str | None:
    """A configured quarantine must neither lie inside the table (outside its reserved folder) nor
    hold the table (it would be listed with it, and a purge could reach the table's files)."""
    table = store_location(table_location)
    reserved = table.child(QUARANTINE_FOLDER)
    if reserved.contains(root):
        return None
    if table.contains(root) or root.contains(table):
        return (f"the quarantine {root.uri} overlaps the table's location {table.uri}: set "
                "maintenance.quarantine-location to a bucket or prefix outside every table")
    return None


# -- run folders and the grace period -----------------------------------------------------------------


@dataclass(frozen=True)
class QuarantineRun:
    """One run's folder in a quarantine root: when the files went in, by which run, and the purge date
    it promised (None: a folder of an older release, whose name carries none)."""

    name: str
    at: datetime
    run_id: str
    promised: datetime | None = None

    def due(self, grace: timedelta, recorded: datetime | None = None, recorded_at: datetime | None = None) -> datetime:
        """When the run may be purged: the latest of its promises and its time plus the grace period in
        force. The name and the marker (``recorded``, ``recorded_at``: its purge date and time) each
        record both; the later of each counts, so renaming the folder to earlier dates never brings the
        marker's promise forward, and no rule brings a promise forward."""
        start = max(self.at, recorded_at) if recorded_at is not None else self.at
        return max(d for d in (self.promised, recorded, start + grace) if d is not None)


def run_folder_name(at: datetime, run_id: str, grace: timedelta | None = None) -> str:
    """``20261124T101500Z-20261201T101500Z_<run id>``: UTC to the second, then the purge date the
    run promises (``at`` + ``grace``; without a grace, the older name with none); the run id's
    letters, digits and dashes only."""
    safe = re.sub(r"[^A-Za-z0-9-]", "-", run_id)[:64] or "run"
    stamp = f"{at.astimezone(timezone.utc):{_STAMP}}"
    if grace is not None:
        stamp += f"-{(at + grace).astimezone(timezone.utc):{_STAMP}}"
    return f"{stamp}_{safe}"


def parse_run_folder(name: str) -> QuarantineRun | None:
    """A run folder's time, run id and promised purge date; None for anything else in the root (left
    alone)."""
    found = _RUN_FOLDER.match(name)
    if not found:
        return None
    at = datetime.strptime(found.group("at"), _STAMP).replace(tzinfo=timezone.utc)
    due = found.group("due")
    promised = datetime.strptime(due, _STAMP).replace(tzinfo=timezone.utc) if due else None
    return QuarantineRun(name, at, found.group("run"), promised)


def is_old(modified: datetime | None, cutoff: datetime) -> bool:
    """Whether a listed file is old enough to remove: its modification time is known and before the
    cutoff. A time that could not be read is young: an unknown fact never makes a file deletable."""
    return modified is not None and modified < cutoff


def select_run(runs: list[QuarantineRun], wanted: str) -> QuarantineRun:
    """``--run``: a run id, a run folder's name, a unique prefix of either, or ``latest``; LookupError
    naming the runs there are."""
    ordered = sorted(runs, key=lambda r: r.at)
    if not ordered:
        raise LookupError("the quarantine holds no run")
    if wanted == "latest":
        return ordered[-1]
    exact = [r for r in ordered if wanted in (r.run_id, r.name)]
    found = exact or [r for r in ordered if r.run_id.startswith(wanted) or r.name.startswith(wanted)]
    if len(found) == 1:
        return found[0]
    names = ", ".join(r.run_id for r in ordered)
    if not found:
        raise LookupError(f"no quarantined run {wanted!r}; the quarantine holds: {names}")
    raise LookupError(f"{wanted!r} matches {len(found)} runs ({', '.join(r.run_id for r in found)}): give more of it")
