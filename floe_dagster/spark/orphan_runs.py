"""An orphan cleanup run in the engine: one plain ``CALL``, rounds under a cap, or rounds into a
quarantine (spark/orphan_calls.py); and first, the purge of what stayed
quarantined past its grace period (core/storage/quarantine.py, iceberg/quarantine_store.py).

Iceberg's ``remove_orphan_files`` deletes and cannot move, so a quarantine run lists with Iceberg (a
dry run), reads each listed file's real size and modification time from the driver (PyIceberg's
pyarrow file systems: they work in every deployment, Spark Connect included, where the driver has no
JVM), drops what was written since the cutoff, asks Iceberg to check the rest again when the table
changed since the listing began (the same call over a ``file_list_view``, as a dry run), and moves
what is still an orphan. A capped delete run uses the same real times in the view Iceberg deletes from.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping

from floe_dagster.core.basics.durations import format_iso_duration
from floe_dagster.core.storage.locations import StorageLocation, store_location
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.storage.quarantine import (
    QuarantineChoice,
    QuarantinePolicy,
    is_old,
    listing_location_problem,
    parse_run_folder,
    quarantine_choice,
    run_folder_name,
)
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import MaintenanceFailed
from floe_dagster.iceberg.file_store import FileFacts, FileStore
from floe_dagster.iceberg.quarantine_store import PurgeReport, TableQuarantine
from floe_dagster.iceberg.table_io import table_file_store
from floe_dagster.spark.orphan_calls import (
    OrphanCalls,
    OrphanRound,
    orphan_cleanup_calls,
    summarize_capped_orphan_cleanup,
    summarize_orphan_cleanup,
)
from floe_dagster.spark.procedures import ProcedureCall, ProcedureResult

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from floe_dagster.coordination.quarantine_roots import QuarantineRoots

ListedHook = Callable[[list[str]], None]


@dataclass(frozen=True)
class OrphanContext:
    """What an orphan cleanup needs besides its policy, from the run (defs/assets.py): the table's
    location and store, the run's id (the quarantine's run folder), the table's version (its metadata
    location, read afresh: every commit changes it; None: Iceberg always checks again before a move),
    the quarantine's clock (its run folder's time and the grace periods; None: the run's ``now``), and
    the quarantine roots the coordination database remembers for the table, with the way to record
    one (coordination/quarantine_roots.py; none without the database)."""

    table_location: str
    files: FileStore
    run_id: str
    table_version: Callable[[], str] | None = None
    clock: Callable[[], datetime] | None = None
    remembered_roots: tuple[str, ...] = ()
    remember: Callable[[StorageLocation], None] | None = None
    # The nested tables' folders the listing leaves out (the policy's nestedTables: core/storage/table_location.py).
    excluded: tuple[str, ...] = ()


@dataclass
class _Tally:
    changed: int = 0  # listed, then written again or gone before the move or deletion
    referenced: int = 0  # listed, then referenced by a commit (Iceberg's check before a move said so)
    rechecks: int = 0
    moved_bytes: int = 0
    deleted_bytes: int = 0  # the deleted orphans' sizes, as the listing's facts read them
    not_moved: list[str] = field(default_factory=list)


class OrphanCleanup:
    """One orphan cleanup of one table, inside the engine's unit of work (``spark``)."""

    def __init__(self, spark: SparkSession, table: TableName, config: OrphanCleanupConfig, now: datetime,
                 table_properties: Mapping[str, str] | None, file_io: str | None, iceberg_version: str | None,
                 context: OrphanContext | None, quarantine_location: str | None = None,
                 listed_hook: ListedHook | None = None):
        self.spark, self.table, self.config, self.now = spark, table, config, now
        self.table_properties, self.file_io, self.iceberg_version = table_properties, file_io, iceberg_version
        self.context, self.listed_hook = context, listed_hook
        self.files = context.files if context is not None else FileStore()  # local files only without a context
        self.quarantine = None if context is None else TableQuarantine(
            context.files, table, context.table_location, quarantine_location, context.remembered_roots,
            context.remember)
        self.table_location = None if context is None else store_location(context.table_location)
        self.tally = _Tally()
        clock = context.clock if context is not None else None
        self.quarantine_now = clock() if clock is not None else now

    def run(self, plain: ProcedureCall) -> tuple[ProcedureResult, str, dict[str, object]]:
        """The run's result, the SQL it ran (``plain``'s, or a description of its rounds), its metadata."""
        roots = self.quarantine.roots if self.quarantine is not None else []
        problem = listing_location_problem(self.config.location, roots)
        if problem:
            raise MaintenanceFailed(f"table '{self.table.qualified}': {problem}")
        policy = self.config.quarantine or QuarantinePolicy()
        choice = quarantine_choice(policy, bool(self.config.dry_run))
        if self.quarantine is None:
            choice = QuarantineChoice(False, "no quarantine: the engine was called without the table's store")
        purge = PurgeReport()
        if self.quarantine is not None and not self.config.dry_run:
            purge = self.quarantine.purge(self.quarantine_now, policy.grace)
        # The bytes of the orphans removed from the table: the sizes the rounds' listing read (moved or
        # deleted); a dry run removes none; the plain CALL's are unknown (Iceberg names files, not sizes).
        reclaimed: int | None
        if choice.enabled:
            result, sql, folder = self._rounds(quarantine=True)
            reclaimed = self.tally.moved_bytes
        elif (self.config.max_files_to_delete is not None or self._local() or self._excluded) \
                and not self.config.dry_run:
            # A local table is deleted from in rounds too: floe checks each listed path for a symbolic link
            # before Iceberg deletes (Hadoop's local listing follows links out of the table).
            (result, sql, _), folder = self._rounds(quarantine=False), None
            reclaimed = self.tally.deleted_bytes
        else:
            rows = [row.asDict() for row in self.spark.sql(plain.sql).collect()]
            streamed = plain.arguments.get("stream_results") is True
            result, sql, folder = summarize_orphan_cleanup(rows, streamed, bool(self.config.dry_run)), plain.sql, None
            reclaimed = 0 if self.config.dry_run else None
        metadata = self._metadata(choice, policy, purge, folder)
        if reclaimed is not None:
            metadata["orphan_bytes_reclaimed"] = reclaimed
        if folder is not None:
            metadata["quarantined_files"] = result.numbers["orphan_files_count"]
        if purge.files or purge.runs:
            result = replace(result, changed=True)
        return result, sql, metadata

    # -- rounds -----------------------------------------------------------------------------------
    def _rounds(self, quarantine: bool) -> tuple[ProcedureResult, str, str | None]:
        """Rounds of listing and then deleting or quarantining, while the cap has room and the last
        listing was a full sample (more orphans may lie beyond it)."""
        cap = self.config.max_files_to_delete
        view = f"floe_orphans_{uuid.uuid4().hex[:12]}"
        # Unstreamed without a cap: one round lists every orphan (a local table's uncapped delete mode too).
        stream = cap is not None or self.config.stream_results is True
        calls = orphan_cleanup_calls(self.table, self.config, self.now, self.table_properties, self.file_io,
                                     self.iceberg_version, view, stream=stream)
        run_id = self.context.run_id if self.context is not None else uuid.uuid4().hex
        grace = (self.config.quarantine or QuarantinePolicy()).grace
        folder = parse_run_folder(run_folder_name(self.quarantine_now, run_id, grace)) if quarantine else None
        rounds: list[OrphanRound] = []
        while True:
            version = self._version()
            listed = self._outside_nested([str(row["orphan_file_location"])
                                           for row in self.spark.sql(calls.listing.sql).collect()])
            self._refuse_quarantined(listed)
            if self.listed_hook is not None:  # tests: what happens between the listing and the removal
                self.listed_hook(listed)
            room = None if cap is None else cap - sum(len(r.deleted) for r in rounds)
            batch = listed if room is None else listed[:room]
            if not batch:
                rounds.append(OrphanRound(len(listed), ()))
                break
            removed = self._move(calls, batch, version, folder) if folder else self._delete(calls, batch)
            rounds.append(OrphanRound(len(listed), removed))
            full_sample = calls.sample_limit is not None and len(listed) >= calls.sample_limit
            if not full_sample or not removed or (room is not None and len(removed) >= room):
                break
        return (summarize_capped_orphan_cleanup(rounds, cap, calls.sample_limit),
                self._described(calls, len(rounds), folder.name if folder else None),
                folder.name if folder else None)

    def _local(self) -> bool:
        return self.table_location is not None and self.table_location.scheme == "file"

    @property
    def _excluded(self) -> list[StorageLocation]:
        return [store_location(folder) for folder in (self.context.excluded if self.context is not None else ())]

    def _outside_nested(self, listed: list[str]) -> list[str]:
        """The listed files outside every nested table's folder (those belong to the nested tables)."""
        nested = self._excluded
        return [path for path in listed if not any(folder.relative_text(path) is not None for folder in nested)]

    def _version(self) -> str | None:
        read = self.context.table_version if self.context is not None else None
        return read() if read is not None else None

    def _refuse_quarantined(self, listed: list[str]) -> None:
        """Iceberg's listing never holds quarantined files (hidden folders); if a release ever lists
        them, stop before anything is moved or deleted."""
        if self.quarantine is None:
            return
        inside = [p for p in listed if self.quarantine.holds(p)]
        if inside:
            raise MaintenanceFailed(
                f"table '{self.table.qualified}': Iceberg listed {len(inside)} quarantined file(s) as orphans (e.g. "
                f"{inside[0]}), though its listing skips hidden folders; nothing was moved or deleted")

    def _aged(self, calls: OrphanCalls, batch: list[str]) -> tuple[dict[str, FileFacts], list[str]]:
        """Each listed file's real facts, and the listed files still older than the cutoff (a file whose
        time could not be read is young), never one reached through a symbolic link: that file is
        outside the table, and the link itself is left where it is."""
        if self._local():
            assert self.table_location is not None
            checked: dict[str, bool] = {}
            linked = [p for p in batch if self.files.through_link(p, self.table_location, checked)]
            self.tally.not_moved += [f"{p} is, or lies under, a symbolic link: left alone" for p in linked]
            batch = [p for p in batch if p not in set(linked)]
        facts = self.files.facts(batch)
        cutoff = calls.cutoff if calls.cutoff.tzinfo else calls.cutoff.replace(tzinfo=timezone.utc)
        old = [p for p in batch if p in facts and is_old(facts[p].modified, cutoff)]
        self.tally.changed += len(batch) - len(old)
        return facts, old

    def _over_view(self, calls: OrphanCalls, paths: list[str], facts: dict[str, FileFacts], dry_run: bool) -> set[str]:
        """Iceberg's check (and, unless ``dry_run``, deletion) of ``paths`` with their real times."""
        frame = self.spark.createDataFrame([(p, facts[p].modified) for p in paths],
                                           "file_path string, last_modified timestamp")
        frame.createOrReplaceTempView(calls.view)
        call = calls.recheck(paths) if dry_run else calls.deletion(paths)
        try:
            return {str(row["orphan_file_location"]) for row in self.spark.sql(call.sql).collect()}
        finally:
            self.spark.catalog.dropTempView(calls.view)

    def _delete(self, calls: OrphanCalls, batch: list[str]) -> tuple[str, ...]:
        facts, old = self._aged(calls, batch)
        if not old:
            return ()
        deleted = self._over_view(calls, old, facts, dry_run=False)
        self.tally.referenced += len(old) - len(deleted)
        removed = tuple(p for p in old if p in deleted)
        self.tally.deleted_bytes += sum(facts[p].size for p in removed)
        return removed

    def _move(self, calls: OrphanCalls, batch: list[str], version: str | None, folder) -> tuple[str, ...]:
        facts, old = self._aged(calls, batch)
        if old and (version is None or self._version() != version):  # a commit landed since the listing began
            still = self._over_view(calls, old, facts, dry_run=True)
            self.tally.rechecks += 1
            self.tally.referenced += len(old) - len([p for p in old if p in still])
            old = [p for p in old if p in still]
        assert self.quarantine is not None
        report = self.quarantine.move_in(folder, old, facts)
        self.tally.moved_bytes += report.bytes
        self.tally.not_moved += report.not_moved
        return report.moved

    # -- what the run reports ---------------------------------------------------------------------
    def _described(self, calls: OrphanCalls, rounds: int, folder: str | None) -> str:
        listing = f"-- {rounds} round(s) of:\n{calls.listing.sql};\n"
        if folder is None:
            return listing + calls.deletion(["<the listed paths>"]).sql
        assert self.quarantine is not None
        return (listing + "-- then each listed file's real time read; when the table changed since the listing began, "
                "Iceberg checked the files again:\n" + calls.recheck(["<the listed paths>"]).sql
                + f";\n-- and floe moved the orphans to {self.quarantine.root.child(folder).uri}")

    def _metadata(self, choice: QuarantineChoice, policy: QuarantinePolicy, purge: PurgeReport,
                  folder: str | None) -> dict[str, object]:
        tally = self.tally
        data: dict[str, object] = {"quarantine": choice.enabled, "quarantine_reason": choice.reason,
                                "orphans_changed_since_listing": tally.changed,
                                "orphans_referenced_since_listing": tally.referenced}
        if self.quarantine is None:
            return data
        data.update(quarantine_location=self.quarantine.root.uri,
                    quarantine_grace_period=format_iso_duration(policy.grace),
                    quarantine_purged_runs=len(purge.runs), quarantine_purged_files=purge.files,
                    quarantine_purged_bytes=purge.bytes)
        if folder is not None:
            run = parse_run_folder(folder)
            data.update(quarantine_run=folder, quarantined_bytes=tally.moved_bytes, quarantine_rechecks=tally.rechecks,
                        quarantine_purge_due=run.due(policy.grace).isoformat() if run else "",
                        quarantine_promise="the later of this date and the grace period in force when it is "
                                           "purged: no later rule brings it forward",
                        orphans_not_moved=len(tally.not_moved), orphans_not_moved_sample=tally.not_moved[:20])
        return data


def orphan_context(catalog: Catalog, iceberg_table: Any, table: TableName, run_id: str,
                   roots: QuarantineRoots | None = None, excluded: tuple[str, ...] = ()) -> OrphanContext:
    """The context of a run from the PyIceberg table it loaded: its location, its store (the catalog's FileIO
    settings, never the table's: iceberg/table_io.py), its version read afresh from the catalog, the
    quarantine roots ``roots`` (the coordination database's QuarantineRoots; None: none remembered) holds
    for it, and ``excluded``: the nested tables' folders its listing leaves out."""
    from floe_dagster.iceberg.catalog import load_table

    remembered = tuple(roots.roots_of(table.qualified)) if roots is not None else ()
    remember = (lambda root: roots.remember(table.qualified, root.uri)) if roots is not None else None
    return OrphanContext(iceberg_table.location(), table_file_store(iceberg_table), run_id,
                         lambda: load_table(catalog, table).metadata_location, remembered_roots=remembered,
                         remember=remember, excluded=excluded)
