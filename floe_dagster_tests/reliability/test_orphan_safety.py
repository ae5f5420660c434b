"""remove_orphan_files never deletes what a reader may need: every file any snapshot references (data,
delete, manifest, manifest list, metadata; also those only older, unexpired snapshots reference)
and files younger than the retention survive, whatever their age on disk; and when the metadata
names files with another scheme or authority than the listing, it stops with a clear error and
deletes nothing."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance

from floe_dagster.core.storage.quarantine import QUARANTINE_FOLDER, RUN_MARKER
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_maintenance_e2e import files_under
from floe_dagster_tests.reliability._support import checksum, referenced_files

pytestmark = pytest.mark.spark

POLICIES = """
- name: orphans
  tablePattern: "demo.ops.*"
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: P1D}
- name: lenient
  tablePattern: "demo.ops.lenient"
  priority: 5
  orphanCleanup: {retentionPeriodInDays: 3, prefixMismatchMode: IGNORE}
  orphanCleanupSchedule: {interval: P1D}
- name: capped
  tablePattern: "demo.ops.capped"
  priority: 5
  orphanCleanup: {retentionPeriodInDays: 3, maxFilesToDelete: 3}
  orphanCleanupSchedule: {interval: P1D}
"""
TEN_DAYS_AGO = time.time() - 10 * 86400


@pytest.fixture
def lake(tmp_path, dagster_home):
    settings = load_settings(write_settings(tmp_path, POLICIES), environ={})
    open_catalog(settings.catalog).create_namespace("ops")
    with DagsterInstance.get() as instance:
        yield settings, instance


def age_everything(table) -> None:
    for path in files_under(table):
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))


def plant_orphans(table, prefix: str, old: int, young: int) -> tuple[set[str], set[str]]:
    """Unreferenced files beside the table's data and metadata: ``old`` ten days old, ``young`` new."""
    made: dict[bool, set[str]] = {True: set(), False: set()}
    root = local_path(table.location())
    for i in range(old + young):
        is_old = i < old
        folder = root / ("data" if i % 2 == 0 else "metadata")
        path = folder / f"{prefix}-{'old' if is_old else 'young'}-{i}.parquet"
        pq.write_table(rows(50_000 + i, 2), path)
        if is_old:
            os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
        made[is_old].add(str(path))
    return made[True], made[False]


def cleanup(settings, instance, name: str):
    summary = trigger_table(settings, name, ["ORPHAN_CLEANUP"], reason="orphans", actor="test",
                            trigger_id=f"orphans-{name}", instance=instance)
    return summary.outcomes[0]


@pytest.mark.spark4_smoke  # deleting a referenced file would corrupt the table: checked on Spark 4 too
def test_every_referenced_file_and_every_young_file_survives(lake):
    settings, instance = lake
    name = TableName.parse("ops.history", "demo")
    reference = spark_table_reference(name)
    # Spark writes what PyIceberg cannot: position delete files; then an overwrite leaves the old data
    # and delete files referenced only by the older snapshots, which are not expired.
    with IcebergSparkEngine.from_settings(settings).unit_of_work() as spark:
        spark.sql(f"CREATE TABLE {reference} (id BIGINT, kind STRING) USING iceberg TBLPROPERTIES "
                  "('format-version'='2', 'write.delete.mode'='merge-on-read')")
        for start in (0, 100, 200):
            spark.sql(f"INSERT INTO {reference} SELECT id, 'k' || id FROM range({start}, {start + 100})")
        spark.sql(f"DELETE FROM {reference} WHERE id % 10 = 0")
        spark.sql(f"INSERT OVERWRITE {reference} SELECT id + 1000, kind FROM {reference} WHERE id < 150")
    table = load_table(open_catalog(settings.catalog), name)
    referenced = referenced_files(table)
    current_data = {str(local_path(t.file.file_path)) for t in table.scan().plan_files()}
    assert referenced["delete"] and referenced["data"] - current_data  # files only older snapshots need
    assert len(referenced["manifest_list"]) == len(table.metadata.snapshots) == 5
    oldest = table.metadata.snapshots[0].snapshot_id
    before = {"current": checksum(table.scan().to_arrow()),
              "oldest": checksum(table.scan(snapshot_id=oldest).to_arrow())}
    age_everything(table)  # only being referenced protects them now
    old_orphans, young_orphans = plant_orphans(table, "orphan", old=4, young=3)

    outcome = cleanup(settings, instance, name.qualified)
    assert outcome.status == "SUCCEEDED", outcome.message
    on_disk = files_under(load_table(open_catalog(settings.catalog), name))
    for kind, files in referenced.items():
        assert files and files <= on_disk, f"referenced {kind} files were deleted: {sorted(files - on_disk)}"
    assert young_orphans <= on_disk  # younger than the retention
    assert not old_orphans & on_disk  # the cleanup did run: old unreferenced files are gone
    assert outcome.metadata["orphan_files_count"] == len(old_orphans)
    after = load_table(open_catalog(settings.catalog), name)
    assert [s.snapshot_id for s in after.metadata.snapshots] == [s.snapshot_id for s in table.metadata.snapshots]
    assert checksum(after.scan().to_arrow()) == before["current"]
    assert checksum(after.scan(snapshot_id=oldest).to_arrow()) == before["oldest"]  # time travel still reads


def test_a_capped_run_leaves_a_backlog_that_the_next_run_finishes(lake):
    """maxFilesToDelete: the first run deletes 3 of 5 old orphans and says the cap cut it, with 2 left;
    the next run deletes those 2. Referenced and young files survive both."""
    settings, instance = lake
    name = TableName.parse("ops.capped", "demo")
    reference = spark_table_reference(name)
    with IcebergSparkEngine.from_settings(settings).unit_of_work() as spark:
        spark.sql(f"CREATE TABLE {reference} (id BIGINT, kind STRING) USING iceberg")
        for start in (0, 100):
            spark.sql(f"INSERT INTO {reference} SELECT id, 'k' || id FROM range({start}, {start + 100})")
    table = load_table(open_catalog(settings.catalog), name)
    referenced = referenced_files(table)
    before = checksum(table.scan().to_arrow())
    age_everything(table)
    old_orphans, young_orphans = plant_orphans(table, "orphan", old=5, young=2)

    first = cleanup(settings, instance, name.qualified)
    assert first.status == "SUCCEEDED", first.message
    on_disk = files_under(load_table(open_catalog(settings.catalog), name))
    assert len(old_orphans - on_disk) == 3 and (old_orphans - on_disk) == set(
        str(local_path(p)) for p in first.metadata["orphan_files_sample"])
    assert first.metadata["orphan_files_count"] == 3 and first.metadata["orphan_files_count_exact"] is True
    assert first.metadata["orphan_cap_reached"] is True
    assert first.metadata["orphan_backlog_files"] == 2 and first.metadata["orphan_backlog_exact"] is True
    assert "file_list_view" in first.metadata["procedure_call"] and "dry_run => true" in first.metadata["procedure_call"]

    summary = trigger_table(settings, name.qualified, ["ORPHAN_CLEANUP"], reason="orphans", actor="test",
                            trigger_id="orphans-capped-2", instance=instance)
    second = summary.outcomes[0]
    assert second.status == "SUCCEEDED", second.message
    assert second.metadata["orphan_files_count"] == 2 and second.metadata["orphan_cap_reached"] is False
    assert second.metadata["orphan_backlog_files"] == 0
    after = load_table(open_catalog(settings.catalog), name)
    on_disk = files_under(after)
    assert not old_orphans & on_disk  # the backlog is done
    assert young_orphans <= on_disk
    assert referenced["data"] and referenced["manifest"] and referenced["metadata"]
    for kind, files in referenced.items():
        assert files <= on_disk, f"referenced {kind} files were deleted: {sorted(files - on_disk)}"
    assert checksum(after.scan().to_arrow()) == before


def referenced_with_other_authority(settings, name: TableName, cwd: Path, monkeypatch) -> str:
    """A table one of whose data files the metadata names as ``file://otherhost/<path>`` while the
    file system lists it as ``file:/<path>`` (a table registered through another host name)."""
    catalog = open_catalog(settings.catalog)
    table = catalog.create_table(name.identifier, schema=EVENT_SCHEMA)
    table.append(rows(0, 10))
    real = local_path(table.location()) / "data" / "registered-elsewhere.parquet"
    pq.write_table(rows(100, 5), real)
    # PyIceberg reads file://otherhost/<path> as the relative path otherhost/<path>: give it a copy there.
    copy = cwd / f"otherhost{real}"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(real, copy)
    with monkeypatch.context() as here:  # undo only the chdir (monkeypatch.undo() also dropped DAGSTER_HOME)
        here.chdir(cwd)
        load_table(catalog, name).add_files([f"file://otherhost{real}"])
    shutil.rmtree(cwd / "otherhost")
    return str(real)


def test_prefix_mismatch_stops_with_a_clear_error_and_deletes_nothing(lake, tmp_path, monkeypatch):
    settings, instance = lake
    strict, lenient = TableName.parse("ops.foreign", "demo"), TableName.parse("ops.lenient", "demo")
    planted = {}
    for name in (strict, lenient):
        foreign = referenced_with_other_authority(settings, name, tmp_path / f"cwd-{name.name}", monkeypatch)
        table = load_table(open_catalog(settings.catalog), name)
        age_everything(table)
        old_orphans, _ = plant_orphans(table, "orphan", old=2, young=0)
        planted[name] = (foreign, old_orphans, files_under(table))

    # prefixMismatchMode ERROR (the default): the whole action stops before deleting anything.
    outcome = cleanup(settings, instance, strict.qualified)
    assert outcome.status == "FAILED"
    assert "remove_orphan_files on 'demo.ops.foreign' failed" in outcome.message
    assert "Unable to determine whether certain files are orphan" in outcome.message
    assert "Conflicting authorities/schemes: [(otherhost, null)]" in outcome.message
    foreign, old_orphans, before = planted[strict]
    assert files_under(load_table(open_catalog(settings.catalog), strict)) == before  # not even the real orphans

    # IGNORE (the policy's choice) reaches Iceberg: real orphans go (into the quarantine, as every cleanup's
    # do by default), the conflicting file stays.
    outcome = cleanup(settings, instance, lenient.qualified)
    assert outcome.status == "SUCCEEDED", outcome.message
    foreign, old_orphans, before = planted[lenient]
    after = files_under(load_table(open_catalog(settings.catalog), lenient))
    assert {f for f in after if f"/{QUARANTINE_FOLDER}/" not in f} == before - old_orphans
    assert {Path(f).name for f in after - before} == {Path(f).name for f in old_orphans} | {RUN_MARKER}
    assert foreign in before - old_orphans
