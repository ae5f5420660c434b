"""``floe-dagster restore``'s listings: a table's quarantined runs, and without a table, the quarantines no
policy will ever purge. A quarantine is purged by its table's own orphan cleanup, so it stays for good
when the table was dropped or no policy gives it orphan cleanup any more. The tables looked at: every
table the coordination database remembers a quarantine root for (coordination/quarantine_roots.py), and
every table folder under the configured ``maintenance.quarantine-location`` (core/storage/quarantine.table_folder's
naming)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

from floe_dagster.coordination.quarantine_roots import QuarantineRoots
from floe_dagster.core.basics.durations import format_iso_duration
from floe_dagster.core.storage.locations import StorageLocation, store_location
from floe_dagster.core.operations import Operation
from floe_dagster.core.storage.quarantine import QUARANTINE_FOLDER, escape_component
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import UnknownTable
from floe_dagster.iceberg.catalog import load_table, open_catalog, pyiceberg_properties
from floe_dagster.iceberg.file_store import FileStore
from floe_dagster.iceberg.quarantine_store import QuarantinedRun, runs_in
from floe_dagster.policies import load_policy_set, resolve_operation


@dataclass(frozen=True)
class OrphanedQuarantine:
    table: str
    why: str  # why no policy will purge it
    runs: tuple[QuarantinedRun, ...]


def configured_tables(files: FileStore, configured: str | None, catalog: str) -> dict[str, list[StorageLocation]]:
    """The tables that have a folder under the configured quarantine location, with that folder."""
    if not configured:
        return {}
    under = store_location(configured).child(QUARANTINE_FOLDER, escape_component(catalog))
    found: dict[str, list[StorageLocation]] = {}
    for folder in files.folders_in(under):
        *namespace, name = [unquote(part) for part in folder.split(".")]
        if namespace:
            found[TableName(catalog, tuple(namespace), name).qualified] = [under.child(folder)]
        # a folder without a dot is none of floe's tables (an older release's nested layout): left alone
    return found


def never_purged(settings, roots: QuarantineRoots) -> list[OrphanedQuarantine]:
    """The quarantines, with their runs, whose table no policy will ever clean up again."""
    files = FileStore(pyiceberg_properties(settings.catalog.properties))
    candidates = configured_tables(files, settings.maintenance.quarantine_location, settings.catalog.name)
    for table, remembered in roots.all().items():
        candidates.setdefault(table, [])
        candidates[table] += [store_location(uri) for uri in remembered if store_location(uri) not in candidates[table]]
    catalog, policies = open_catalog(settings.catalog), load_policy_set(settings)  # read once, not per table
    found = []
    for text, where in sorted(candidates.items()):
        why = _why_never_purged(settings, catalog, policies, TableName.parse(text, settings.catalog.name))
        if why is None:
            continue
        held = tuple(run for root in where for run in runs_in(files, root, text))
        if held:
            found.append(OrphanedQuarantine(text, why, held))
    return found


def _why_never_purged(settings, catalog, policies, table: TableName) -> str | None:
    """One catalog read of the table (whether it was dropped), then its policy from the set read once."""
    try:
        load_table(catalog, table)
    except UnknownTable:
        return "the table no longer exists in the catalog"
    resolved = resolve_operation(settings, table, Operation.ORPHAN_CLEANUP, policies)
    if resolved.config is None:
        return f"no policy gives it orphan cleanup ({resolved.why_not})"
    return None


def print_never_purged(found: list[OrphanedQuarantine]) -> None:
    if not found:
        print("no quarantine is left without a policy to purge it")
        return
    print(f"{len(found)} table(s) hold quarantined runs that no policy will ever purge:")
    for orphaned in found:
        print(f"  {orphaned.table}: {orphaned.why}")
        for held in orphaned.runs:
            print(f"    {_run_line(held)}  in {held.folder.uri}")
    print("delete a folder by hand once sure, or give the table a policy with orphanCleanup again")


def print_quarantined_runs(quarantine: Any, grace: timedelta) -> None:
    """``floe-dagster restore TABLE``: the table's quarantined runs, oldest first, each with its purge date."""
    runs = quarantine.runs()
    name = quarantine.table.qualified
    if not runs:
        print(f"{name}: nothing is quarantined (looked in {', '.join(root.uri for root in quarantine.roots)})")
        return
    print(f"{name}: {len(runs)} quarantined run(s), oldest first (grace period {format_iso_duration(grace)}):")
    for found in runs:
        print(f"  {_run_line(found)}  purged from {found.due(grace).isoformat()}  in {found.folder.uri}")
    print(f"restore one with: floe-dagster restore {name} --run RUN (its run id, a unique prefix of it, or latest)")


def _run_line(found: QuarantinedRun) -> str:
    """A run as both listings show it: its id, time, and the files and bytes its marker counted."""
    return (f"run {found.run.run_id}  quarantined {found.run.at.isoformat()}  {found.marker.get('files', '?')} "
            f"file(s), {found.marker.get('bytes', '?')} bytes")
