"""One table's orphan quarantine on its store: move files in, purge run folders past their grace
period, restore a run's files to their original paths (core/storage/quarantine.py decides where and when;
iceberg/file_store.py does the file work).

Every method is called under the table lock: by an orphan cleanup run (the asset holds it) or by
``floe-dagster restore``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

from floe_dagster.core.storage.locations import StorageLocation, store_location
from floe_dagster.core.storage.quarantine import (
    QUARANTINE_FOLDER,
    RUN_MARKER,
    QuarantinePolicy,
    QuarantineRun,
    nested_root,
    parse_run_folder,
    placement_problem,
    quarantine_root,
    quarantine_roots,
    select_run,
)
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import MaintenanceFailed
from floe_dagster.iceberg.file_store import FileFacts, FileStore
from floe_dagster.iceberg.table_io import table_file_store


@dataclass(frozen=True)
class MoveReport:
    moved: tuple[str, ...]  # original locations, now in the quarantine
    bytes: int
    not_moved: tuple[str, ...] = ()  # why each file that should have moved did not


@dataclass(frozen=True)
class PurgeReport:
    runs: tuple[str, ...] = ()  # the run folders deleted
    files: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class RestoreReport:
    run: str
    restored: int = 0
    bytes: int = 0
    kept: tuple[str, ...] = ()  # left in the quarantine: why (a file exists at the original path)
    left_in_quarantine: int = 0


@dataclass(frozen=True)
class QuarantinedRun:
    """A run folder found in one of the table's quarantine roots."""

    root: StorageLocation
    run: QuarantineRun
    marker: dict = field(default_factory=dict, compare=False)

    @property
    def folder(self) -> StorageLocation:
        return self.root.child(self.run.name)

    def recorded(self, key: str) -> datetime | None:
        """A time the marker recorded (``purgeAfter``, ``quarantinedAt``; one without a zone is UTC)."""
        try:
            found = datetime.fromisoformat(str(self.marker[key]))
        except (KeyError, ValueError):
            return None
        return found if found.tzinfo is not None else found.replace(tzinfo=timezone.utc)

    def due(self, grace: timedelta) -> datetime:
        """The later of what the name and the marker promise (a renamed folder shortens neither)."""
        return self.run.due(grace, self.recorded("purgeAfter"), self.recorded("quarantinedAt"))


class TableQuarantine:
    """The quarantine of one table: new runs go to :attr:`root`; purge and restore look in every root:
    the current ones, where an older release put a configured quarantine, and every root the
    coordination database remembers the table used (``remembered``; ``on_use`` records a root not yet
    among them before the first file moves into it)."""

    def __init__(self, files: FileStore, table: TableName, table_location: str, configured: str | None = None,
                 remembered: Iterable[str] = (), on_use: Callable[[StorageLocation], None] | None = None):
        self.files, self.table, self.on_use = files, table, on_use
        self.location = store_location(table_location)
        self.root = quarantine_root(table_location, table, configured)
        self.roots = quarantine_roots(table_location, table, configured)
        # Roots that are not this table's own folder today: a run there counts only when its marker
        # names this table (an older nested layout may hold another table's runs below this one's).
        self.shared = [nested_root(table, configured)] if configured else []
        self.remembered = [store_location(uri) for uri in remembered]
        for where in self.remembered:
            if where not in self.roots and where not in self.shared:
                self.shared.append(where)
        problem = placement_problem(self.root, table_location)
        if problem:
            raise MaintenanceFailed(f"table '{table.qualified}': {problem}")

    def linked(self, root: StorageLocation) -> bool:
        """Whether a reserved quarantine folder inside the table is a symbolic link (or lies under one):
        it would reach outside the table, so it is never moved into, purged or restored from."""
        return self.location.contains(root) and self.files.through_link(root.uri, self.location)

    def holds(self, location: str) -> bool:
        """Whether ``location`` lies in one of the table's quarantines (a path under the table's
        location is decided by its first folder: a configured quarantine never overlaps the table)."""
        relative = self.location.relative_text(location)
        if relative is not None:
            return relative.split("/", 1)[0] == QUARANTINE_FOLDER
        where = store_location(location)
        return any(root.contains(where) for root in self.roots)

    def runs(self) -> list[QuarantinedRun]:
        """Every run folder of this table in its quarantine roots, oldest first, with its marker (other
        folders, and runs whose marker names another table, are left alone)."""
        found = []
        for root in [*self.roots, *self.shared]:
            if not self.linked(root):
                found += [r for r in runs_in(self.files, root, None) if self._ours(r)]
        return sorted(found, key=lambda r: r.run.at)

    def _ours(self, found: QuarantinedRun) -> bool:
        named = found.marker.get("table")
        return named == self.table.qualified or (named is None and found.root not in self.shared)

    # -- moving in ----------------------------------------------------------------------------------
    def move_in(self, run: QuarantineRun, originals: Iterable[str], facts: dict[str, FileFacts]) -> MoveReport:
        """Move each original (a path inside the table's location) to ``<root>/<run folder>/<its path
        relative to the table>``; a path outside the location is never moved. Records the run in the
        folder's marker (counts added to what an earlier round of the same run wrote)."""
        folder = self.root.child(run.name)
        into = folder.uri + "/"
        pairs, refused = [], []
        for original in originals:
            relative = self.location.relative_text(original)
            if relative is None:
                refused.append(f"{original} lies outside the table's location {self.location.uri}: not moved")
            else:
                pairs.append((original, into + relative))
        if not pairs:
            return MoveReport((), 0, tuple(refused))
        if self.linked(self.root):
            raise MaintenanceFailed(f"table '{self.table.qualified}': its quarantine folder {self.root.uri} is, or "
                                    "lies under, a symbolic link, which could reach another table's files; nothing "
                                    "was moved: remove the link")
        if self.on_use is not None and self.root not in self.remembered:
            self.on_use(self.root)  # remembered before anything moves: a later setting cannot lose it
            self.remembered.append(self.root)  # once: not a write per round, nor per run
        self._record(folder, run, 0, 0)  # the marker first: the table and the promise go in with the files
        outcomes = self.files.move_many(pairs)
        moved = tuple(source for (source, _), why in zip(pairs, outcomes) if why is None)
        refused += [why for why in outcomes if why is not None]
        size = sum(facts[path].size for path in moved if path in facts)
        if moved:
            self._record(folder, run, len(moved), size)
        return MoveReport(moved, size, tuple(refused))

    def _record(self, folder: StorageLocation, run: QuarantineRun, files: int, size: int) -> None:
        marker = folder.child(RUN_MARKER)
        before = _marker(self.files.read_text(marker))
        self.files.write_text(marker, json.dumps({
            "table": self.table.qualified, "tableLocation": self.location.uri, "runId": run.run_id,
            "quarantinedAt": run.at.isoformat(), "purgeAfter": run.promised.isoformat() if run.promised else None,
            "files": int(before.get("files", 0)) + files, "bytes": int(before.get("bytes", 0)) + size,
        }, indent=2))

    # -- purging ------------------------------------------------------------------------------------
    def purge(self, now: datetime, grace: timedelta) -> PurgeReport:
        """Delete every run folder whose promise and grace period are both over at ``now`` (the later of
        the purge date it recorded and its time plus ``grace``, the rule in force)."""
        names, files, size = [], 0, 0
        for found in self.runs():
            if now < found.due(grace):
                continue
            folder = found.folder
            held = [f for f in self.files.files_under(folder) if store_location(f.location) != folder.child(RUN_MARKER)]
            self.files.delete_folder(folder)
            names.append(found.run.name)
            files, size = files + len(held), size + sum(f.size for f in held)
        return PurgeReport(tuple(names), files, size)

    # -- restoring ----------------------------------------------------------------------------------
    def find(self, wanted: str) -> QuarantinedRun:
        """``--run``'s run (see core/storage/quarantine.select_run); LookupError naming the table and its runs."""
        runs = self.runs()
        try:
            run = select_run([r.run for r in runs], wanted)
        except LookupError as exc:
            raise LookupError(f"table '{self.table.qualified}': {exc}") from None
        return next(r for r in runs if r.run == run)

    def restore(self, run: QuarantinedRun) -> RestoreReport:
        """Move a run's files back to their original paths, never over an existing file nor through a
        symbolic link put in the table since (it could reach another table, or any folder floe may write):
        such a file stays in the quarantine, named in the report; the run folder goes once it is empty."""
        folder, marker_at = run.folder, run.folder.child(RUN_MARKER)
        recorded = run.marker.get("tableLocation")  # read with the run (find, under the lock)
        if recorded and store_location(recorded) != self.location:
            raise MaintenanceFailed(
                f"table '{self.table.qualified}': run {run.run.run_id} was quarantined from {recorded}, but the "
                f"table's location is now {self.location.uri}; move its files from {folder.uri} by hand")
        held, pairs, linked, checked = [], [], [], {}
        for found in self.files.files_under(folder):
            relative = folder.relative(store_location(found.location))
            if relative is None or store_location(found.location) == marker_at:
                continue
            target = self.location.child(relative).uri
            if self.files.through_link(target, self.location, checked):
                linked.append(f"{target} is, or lies under, a symbolic link: not restored (remove the link)")
            else:
                held.append(found)
                pairs.append((found.location, target))
        outcomes = self.files.move_many(pairs)
        restored = [f for f, why in zip(held, outcomes) if why is None]
        kept = tuple(linked) + tuple(why for why in outcomes if why is not None)
        if not kept:
            self.files.delete_folder(folder)
        else:
            self.files.remove_empty_folders(folder)
        return RestoreReport(run.run.name, len(restored), sum(f.size for f in restored), kept, len(kept))


def _marker(text: str | None) -> dict:
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def open_table_quarantine(settings: Any, text: str, roots: Any = None) -> tuple[TableQuarantine, timedelta]:
    """The quarantine of a table named as the command line names it (UnknownTable when the catalog has
    no such table), with the roots ``roots`` (coordination/quarantine_roots.py) remembers for it, and the
    grace period its orphan cleanup policy gives (the default without one)."""
    from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
    from floe_dagster.core.operations import Operation
    from floe_dagster.iceberg.catalog import load_table, open_catalog
    from floe_dagster.policies import resolve_operation

    table = TableName.parse(text, settings.catalog.name)
    loaded = load_table(open_catalog(settings.catalog), table)
    config = resolve_operation(settings, table, Operation.ORPHAN_CLEANUP).config
    policy = config.quarantine if isinstance(config, OrphanCleanupConfig) else None
    quarantine = TableQuarantine(table_file_store(loaded), table, loaded.location(),
                                 settings.maintenance.quarantine_location,
                                 roots.roots_of(table.qualified) if roots is not None else ())
    return quarantine, (policy or QuarantinePolicy()).grace


def runs_in(files: FileStore, root: StorageLocation, table: str | None) -> list[QuarantinedRun]:
    """The run folders in one root, with their markers; ``table``: only those whose marker names it."""
    found = []
    for name in files.folders_in(root):
        run = parse_run_folder(name)
        if run is not None:
            marker = _marker(files.read_text(root.child(name, RUN_MARKER)))
            if table is None or marker.get("table") == table:
                found.append(QuarantinedRun(root, run, marker))
    return sorted(found, key=lambda r: r.run.at)
