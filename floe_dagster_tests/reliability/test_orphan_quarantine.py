"""Recoverable orphan deletion through real Spark, real files and real Dagster runs (issue 26,
deliverables 2 and 7; issue 34, deliverable 3): every orphan cleanup moves its orphans into the
quarantine instead of deleting them unless the policy opts out, no later orphan run (delete mode, a
wide ``location``, a cap, a shrunk grace period) ever deletes them before the date their run promised,
a run after it purges them, ``floe-dagster restore`` puts them back byte for byte; no table's purge or
restore reaches another's quarantine; a symbolic link in a table is never followed; and a file written
again or referenced by a commit between the listing and the removal survives, in delete mode (the
capped run's ``file_list_view`` carries each file's real time) and in quarantine mode."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from unittest.mock import ANY
from dagster import DagsterInstance

from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operations import Operation
from floe_dagster.coordination.quarantine_roots import QuarantineRoots
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.storage.quarantine import QUARANTINE_FOLDER, RUN_MARKER, parse_run_folder, run_folder_name
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.quarantine_store import TableQuarantine
from floe_dagster.iceberg.table_io import table_file_store
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.orphan_runs import orphan_context
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import checksum, referenced_files

pytestmark = pytest.mark.spark

POLICIES = """
- name: orphans                  # quarantine unset: every cleanup quarantines
  tablePattern: "demo.ops.*"
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: P1D}
- name: into-the-quarantine
  tablePattern: "demo.ops.hidden"
  priority: 5
  orphanCleanup: {retentionPeriodInDays: 3, location: "LOCATION", quarantine: false}  # delete mode
  orphanCleanupSchedule: {interval: P1D}
"""
TEN_DAYS_AGO = time.time() - 10 * 86400
ORPHAN = Operation.ORPHAN_CLEANUP


@pytest.fixture
def lake(tmp_path, dagster_home):
    hidden = tmp_path / "lake" / "data" / "warehouse" / "ops" / "hidden" / QUARANTINE_FOLDER
    settings = load_settings(write_settings(tmp_path / "lake", POLICIES.replace("LOCATION", f"file:{hidden}")),
                             environ={})
    open_catalog(settings.catalog).create_namespace("ops")
    with DagsterInstance.get() as instance:
        yield settings, instance


def make_table(settings, name: str):
    """A PyIceberg table of three appends, every file ten days old: only being referenced protects them."""
    table_name = TableName.parse(f"ops.{name}", "demo")
    table = open_catalog(settings.catalog).create_table(table_name.identifier, schema=EVENT_SCHEMA)
    for start in (0, 10, 20):
        table.append(rows(start, 10))
    table = load_table(open_catalog(settings.catalog), table_name)
    for path in local_path(table.location()).rglob("*"):
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    return table_name, table


def plant(table, names: list[str], old: bool = True) -> dict[str, Path]:
    """Unreferenced Parquet files of the table's schema under data/ (old: ten days old), by name."""
    made = {}
    for i, name in enumerate(names):
        path = local_path(table.location()) / "data" / f"{name}.parquet"
        pq.write_table(rows(1000 + i * 10, 5), path)
        if old:
            os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
        made[name] = path
    return made


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def quarantined(table) -> dict[str, Path]:
    """The table's quarantined files by their path relative to the table (markers left out)."""
    root = local_path(table.location()) / QUARANTINE_FOLDER
    found = {}
    for run in (root.iterdir() if root.exists() else ()):
        for path in run.rglob("*"):
            if path.is_file() and path.name != RUN_MARKER:
                found[str(path.relative_to(run))] = path
    return found


def trigger(settings, instance, name: TableName, label: str):
    summary = trigger_table(settings, name.qualified, ["ORPHAN_CLEANUP"], reason="orphans", actor="test",
                            trigger_id=f"orphans-{label}", instance=instance)
    return summary.outcomes[0]


def test_every_cleanup_quarantines_and_restore_puts_a_runs_files_back(lake, capsys):
    settings, instance = lake
    name, table = make_table(settings, "events")
    referenced = referenced_files(table)
    before = checksum(table.scan().to_arrow())
    old = plant(table, ["a", "b", "c"])
    young = plant(table, ["young"], old=False)
    digests = {key: digest(path) for key, path in old.items()}

    first = trigger(settings, instance, name, "first")
    assert first.status == "SUCCEEDED", first.message
    meta = first.metadata
    assert meta["quarantine"] is True and "quarantined by default" in meta["quarantine_reason"]
    assert meta["quarantined_files"] == meta["orphan_files_count"] == 3
    assert meta["quarantined_bytes"] == sum(p.stat().st_size for p in quarantined(table).values())
    assert meta["quarantine_location"] == f"file:{local_path(table.location())}/{QUARANTINE_FOLDER}"
    assert meta["quarantine_grace_period"] == "P7D" and meta["quarantine_rechecks"] == 0  # the table did not change
    assert not any(path.exists() for path in old.values())  # gone from where they were
    held = quarantined(table)
    assert {key: digest(held[f"data/{key}.parquet"]) for key in old} == digests  # the same bytes, in quarantine
    assert young["young"].exists()
    for kind, files in referenced.items():
        assert all(Path(f).exists() for f in files), f"a referenced {kind} file moved"
    assert checksum(load_table(open_catalog(settings.catalog), name).scan().to_arrow()) == before

    # The second cleanup quarantines too (before, only a table's first did and later ones deleted), into a
    # run folder of its own, and leaves the first run's alone (its files are ten days old too: only the
    # hidden folder keeps them out of Iceberg's listing).
    later = plant(table, ["d"])
    second = trigger(settings, instance, name, "second")
    assert second.status == "SUCCEEDED", second.message
    assert second.metadata["quarantine"] is True and second.metadata["quarantined_files"] == 1
    assert second.metadata["quarantine_run"] != meta["quarantine_run"]
    assert not later["d"].exists() and quarantined(table) == {**held, "data/d.parquet": ANY}

    # restore: without --run it lists the run; with one, the files come back byte for byte.
    assert floe_dagster_cli(["--config", settings.source, "restore", name.qualified]) == 0
    listing = capsys.readouterr().out
    assert f"{name.qualified}: 2 quarantined run(s)" in listing and "3 file(s)" in listing
    assert f"purged from {meta['quarantine_purge_due']}" in listing  # the date the run promised
    assert "restore one with: floe-dagster restore demo.ops.events --run RUN" in listing
    assert floe_dagster_cli(["--config", settings.source, "restore", name.qualified, "--run", first.run_id]) == 0
    assert f"restored 3 file(s), {meta['quarantined_bytes']} bytes, of run {first.run_id}" in capsys.readouterr().out
    assert {key: digest(path) for key, path in old.items()} == digests
    assert [p.name for p in (local_path(table.location()) / QUARANTINE_FOLDER).iterdir()] == [
        second.metadata["quarantine_run"]]  # the first run's folder went too
    assert checksum(load_table(open_catalog(settings.catalog), name).scan().to_arrow()) == before


def test_restore_never_overwrites_and_names_what_it_cannot_find(lake, capsys):
    settings, instance = lake
    name, table = make_table(settings, "kept")
    old = plant(table, ["a", "b"])
    assert trigger(settings, instance, name, "kept").status == "SUCCEEDED"
    old["a"].write_bytes(b"a writer's new file at the same path")
    config = ["--config", settings.source]

    assert floe_dagster_cli([*config, "restore", name.qualified, "--run", "latest"]) == 1
    out = capsys.readouterr().out
    assert "restored 1 file(s)" in out and f"not restored: file:{old['a']} exists: not overwritten" in out
    assert old["a"].read_bytes() == b"a writer's new file at the same path" and old["b"].exists()
    assert list(quarantined(table)) == ["data/a.parquet"]  # still there to look at

    assert floe_dagster_cli([*config, "restore", "ops.nowhere", "--run", "latest"]) == 2
    assert "ops.nowhere" in capsys.readouterr().err
    assert floe_dagster_cli([*config, "restore", name.qualified, "--run", "not-a-run"]) == 2
    assert f"table '{name.qualified}': no quarantined run 'not-a-run'; the quarantine holds: " in capsys.readouterr().err


def engine_run(settings, name, raw: dict, *, clock=None, hook=None, run_id="run-1", roots=None, where=None):
    """One orphan cleanup through the engine as the asset runs it, with a clock and a seam of the test's
    (``roots``: the remembered quarantine roots; ``where``: a maintenance.quarantine-location)."""
    catalog = open_catalog(settings.catalog)
    table = load_table(catalog, name)
    context = replace(orphan_context(catalog, table, name, run_id, roots), clock=clock)
    if where is not None:
        settings = replace(settings, maintenance=replace(settings.maintenance, quarantine_location=where))
    engine = IcebergSparkEngine.from_settings(settings)
    engine.on_orphans_listed(hook)
    return engine.maintain(name, ORPHAN, OrphanCleanupConfig.from_mapping(raw), datetime.now(timezone.utc),
                           table_properties=table.properties, orphans=context)


def test_no_other_orphan_run_deletes_quarantined_files_and_a_run_after_the_grace_period_purges_them(lake):
    settings, instance = lake
    name, table = make_table(settings, "graced")
    plant(table, ["a", "b"])
    start = datetime.now(timezone.utc)
    moved = engine_run(settings, name, {"retentionPeriodInDays": 3, "quarantine": {"gracePeriod": "P2D"}},
                       clock=lambda: start)
    assert moved.metadata["quarantined_files"] == 2
    held = quarantined(table)
    assert len(held) == 2 and all(p.stat().st_mtime < time.time() - 9 * 86400 for p in held.values())  # old files

    # Delete mode lists the whole table (its location, quarantine folder included: only the hidden-path rule
    # keeps those files out), unstreamed and capped (streamed rounds).
    for raw in ({"retentionPeriodInDays": 3, "quarantine": False},
                {"retentionPeriodInDays": 3, "quarantine": False, "maxFilesToDelete": 10}):
        outcome = engine_run(settings, name, raw, clock=lambda: start + timedelta(days=1))
        assert outcome.result.numbers["orphan_files_count"] == 0 and outcome.metadata["quarantine_purged_files"] == 0
        assert quarantined(table) == held, raw

    # A day later the grace period is not over; two days and a second later it is.
    purged = engine_run(settings, name, {"retentionPeriodInDays": 3, "quarantine": {"gracePeriod": "P2D"}},
                        clock=lambda: start + timedelta(days=2, seconds=1))
    assert purged.metadata["quarantine_purged_runs"] == 1 and purged.metadata["quarantine_purged_files"] == 2
    assert purged.metadata["quarantine_purged_bytes"] == moved.metadata["quarantined_bytes"] > 0
    assert purged.result.changed and quarantined(table) == {}
    assert not any((local_path(table.location()) / QUARANTINE_FOLDER).iterdir())


def test_a_listing_inside_the_quarantine_is_refused_before_anything_is_deleted(lake):
    settings, instance = lake
    name, table = make_table(settings, "hidden")
    plant(table, ["a"])
    engine_run(settings, name, {"retentionPeriodInDays": 3})
    held = quarantined(table)
    outcome = trigger(settings, instance, name, "hidden")  # the policy's location is the quarantine itself
    assert outcome.status == "FAILED"
    assert "orphanCleanup.location" in outcome.message and "lies inside the quarantine" in outcome.message
    assert quarantined(table) == held


@pytest.mark.parametrize("mode", ["delete", "quarantine"])
def test_a_file_written_again_or_referenced_between_listing_and_removal_survives(lake, mode):
    """The seam between the listing and the removal: a writer rewrites one listed orphan (a new
    modification time) and commits another with add_files. Delete mode fails without the real times
    (every listed path had the invented age 'cutoff - 1 s', so the rewritten file was deleted)."""
    settings, instance = lake
    name, table = make_table(settings, f"race_{mode}")
    old = plant(table, ["gone", "rewritten", "committed"])
    before_rows = table.scan().to_arrow().num_rows

    def writer(listed: list[str]) -> None:
        assert {Path(p.removeprefix("file:")).name for p in listed} >= {"rewritten.parquet", "committed.parquet"}
        pq.write_table(rows(5000, 5), old["rewritten"])  # written again: a new file at the same path
        load_table(open_catalog(settings.catalog), name).add_files([f"file://{old['committed']}"])

    raw = {"retentionPeriodInDays": 3, "maxFilesToDelete": 10, "quarantine": mode == "quarantine"}
    outcome = engine_run(settings, name, raw, hook=writer)
    assert not old["gone"].exists()
    assert old["rewritten"].exists() and old["committed"].exists()
    assert outcome.result.numbers["orphan_files_count"] == 1
    assert outcome.metadata["orphans_changed_since_listing"] == 1
    assert outcome.metadata["orphans_referenced_since_listing"] == 1
    if mode == "quarantine":
        assert list(quarantined(table)) == ["data/gone.parquet"] and outcome.metadata["quarantine_rechecks"] == 1
    after = load_table(open_catalog(settings.catalog), name)
    assert after.scan().to_arrow().num_rows == before_rows + 5  # the committed file is read, whole


# -- issue 34: the window is a promise, and nothing a table holds reaches past it ------------------------


def test_a_shrunk_grace_period_never_purges_a_run_before_the_date_it_promised(lake):
    """The table's owner, or a second policy matching the table, shortens the grace period after a run
    quarantined with P7D: no later run purges that run before its recorded date. Before, the purge used
    the grace period in force, and PT1H purged the files two hours later."""
    settings, _ = lake
    name, table = make_table(settings, "shrunk")
    plant(table, ["a", "b"])
    start = datetime.now(timezone.utc).replace(microsecond=0)
    moved = engine_run(settings, name, {"retentionPeriodInDays": 3, "quarantine": {"gracePeriod": "P7D"}},
                       clock=lambda: start)
    held = quarantined(table)
    assert len(held) == 2 and moved.metadata["quarantine_purge_due"] == (start + timedelta(days=7)).isoformat()
    shrunk = ({"retentionPeriodInDays": 3, "quarantine": {"gracePeriod": "PT1H"}},
              {"retentionPeriodInDays": 3, "quarantine": {"enabled": False, "gracePeriod": "PT1H"}})
    for step, (raw, later) in enumerate(zip(shrunk, (timedelta(hours=2), timedelta(days=6, hours=23)))):
        outcome = engine_run(settings, name, raw, clock=lambda: start + later, run_id=f"run-{step + 2}")
        assert outcome.metadata["quarantine_purged_files"] == 0, raw
        assert quarantined(table) == held
    purged = engine_run(settings, name, shrunk[0], clock=lambda: start + timedelta(days=7, seconds=1), run_id="run-9")
    assert purged.metadata["quarantine_purged_files"] == 2 and quarantined(table) == {}


def test_a_nested_namespace_named_like_a_run_folder_is_never_another_tables_quarantine(lake, tmp_path, capsys):
    """With a configured quarantine location, table ``ops.parent``'s quarantine held the quarantine of
    ``ops.parent.<name>`` in a subfolder; a nested table named like a run folder (an old one) was purged
    by ``ops.parent``'s next cleanup and listed by its ``restore``. Each table's folder is now a sibling."""
    settings, _ = lake
    where = f"file:{tmp_path / 'quarantine'}"
    config = Path(settings.source)
    config.write_text(config.read_text() + f"maintenance:\n  quarantine-location: {where}\n")
    name, _ = make_table(settings, "parent")
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace(("ops", "parent"))
    nested = TableName("demo", ("ops", "parent"), "20200101T000000Z_x")  # the name of a run folder of 2020
    nested_table = catalog.create_table(nested.identifier, schema=EVENT_SCHEMA)
    nested_table.append(rows(0, 5))
    orphan = plant(nested_table, ["lost"])["lost"]
    kept = digest(orphan)
    # The nested table's own cleanup quarantines its orphan, as its run does.
    own = TableQuarantine(table_file_store(nested_table), nested, nested_table.location(), where)
    now = datetime.now(timezone.utc)
    run = parse_run_folder(run_folder_name(now, "nested-run", timedelta(days=7)))
    assert own.move_in(run, [f"file:{orphan}"], own.files.facts([f"file:{orphan}"])).moved == (f"file:{orphan}",)
    # An older release's layout of the same (ops/parent/<table>/<run>) is no run of ops.parent either.
    legacy = tmp_path / "quarantine" / QUARANTINE_FOLDER / "demo" / "ops" / "parent" / "20200101T000000Z_y"
    (legacy / "data").mkdir(parents=True)
    (legacy / "data" / "old.parquet").write_bytes(b"another table's")

    parent = engine_run(settings, name, {"retentionPeriodInDays": 3}, where=where,
                        clock=lambda: now + timedelta(days=1))
    assert parent.metadata["quarantine_purged_runs"] == 0
    assert [digest(p) for p in (tmp_path / "quarantine").rglob("lost.parquet")] == [kept]
    assert (legacy / "data" / "old.parquet").exists()
    assert floe_dagster_cli(["--config", str(config), "restore", name.qualified]) == 0
    assert f"{name.qualified}: nothing is quarantined" in capsys.readouterr().out
    assert own.runs()[0].run == run  # the nested table's restore still finds its own run


@pytest.mark.parametrize("mode", ["quarantine", "delete"])
def test_a_symbolic_link_in_a_local_table_is_never_followed_moved_or_deleted(lake, tmp_path, mode):
    """The table's owner links a folder and a file outside the table into it. Hadoop's local listing
    follows links, so the files outside were listed as orphans: moved into the quarantine or deleted."""
    settings, _ = lake
    name, table = make_table(settings, f"linked_{mode}")
    outside = tmp_path / f"outside_{mode}"
    outside.mkdir()
    precious = outside / "precious.parquet"
    pq.write_table(rows(0, 5), precious)
    os.utime(precious, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    kept = digest(precious)
    data = local_path(table.location()) / "data"
    (data / "linked").symlink_to(outside)
    (data / "one.parquet").symlink_to(precious)
    for link in (data / "linked", data / "one.parquet"):
        os.utime(link, (TEN_DAYS_AGO, TEN_DAYS_AGO), follow_symlinks=False)
    orphan = plant(table, ["a"])["a"]

    outcome = engine_run(settings, name, {"retentionPeriodInDays": 3, "quarantine": mode == "quarantine"})
    assert not orphan.exists() and outcome.result.numbers["orphan_files_count"] == 1  # the table's own orphan
    assert [p.name for p in outside.iterdir()] == ["precious.parquet"] and digest(precious) == kept
    assert (data / "linked").is_symlink() and (data / "one.parquet").is_symlink()
    assert list(quarantined(table)) == (["data/a.parquet"] if mode == "quarantine" else [])


def test_an_old_quarantine_location_is_remembered_purged_restorable_and_listed_when_nothing_purges_it(
        lake, tmp_path, capsys):
    """After ``maintenance.quarantine-location`` changes, the old folders were never purged and
    ``restore`` could not see them; a dropped table's quarantine stayed for good, unlisted."""
    settings, _ = lake
    roots = QuarantineRoots(CoordinationResource.from_settings(settings).coordination.engine)
    old_where, new_where = f"file:{tmp_path / 'q-old'}", f"file:{tmp_path / 'q-new'}"
    name, table = make_table(settings, "relocated")
    plant(table, ["a"])
    start = datetime.now(timezone.utc).replace(microsecond=0)
    moved = engine_run(settings, name, {"retentionPeriodInDays": 3}, clock=lambda: start, roots=roots,
                       where=old_where)
    assert moved.metadata["quarantine_location"].startswith(old_where)
    assert roots.roots_of(name.qualified) == [moved.metadata["quarantine_location"]]
    dropped, gone = make_table(settings, "dropped")
    plant(gone, ["b"])
    engine_run(settings, dropped, {"retentionPeriodInDays": 3}, roots=roots, where=new_where, run_id="run-d")
    open_catalog(settings.catalog).drop_table(dropped.identifier)

    config = Path(settings.source)
    config.write_text(config.read_text() + f"maintenance:\n  quarantine-location: {new_where}\n")
    assert floe_dagster_cli(["--config", str(config), "restore", name.qualified]) == 0
    listing = capsys.readouterr().out
    assert f"{name.qualified}: 1 quarantined run(s)" in listing and old_where in listing
    assert floe_dagster_cli(["--config", str(config), "restore"]) == 0
    orphaned = capsys.readouterr().out
    assert f"{dropped.qualified}: the table no longer exists in the catalog" in orphaned and "run run-d" in orphaned
    assert name.qualified not in orphaned  # its policy's cleanup still purges it

    purged = engine_run(settings, name, {"retentionPeriodInDays": 3}, roots=roots, where=new_where, run_id="run-2",
                        clock=lambda: start + timedelta(days=7, seconds=1))
    assert purged.metadata["quarantine_purged_files"] == 1
    assert not list((tmp_path / "q-old").rglob("a.parquet"))
