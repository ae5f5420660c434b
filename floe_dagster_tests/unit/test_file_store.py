"""The quarantine's file work on local files (iceberg/file_store.py, iceberg/quarantine_store.py), in a
temporary folder: moves never replace a file, facts are the files' own, a clean local path is read
without a parse and anything else takes the long way, and only files inside the table are moved."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from pyarrow import fs as pafs

from floe_dagster.core.storage.locations import store_location
from floe_dagster.core.storage.quarantine import parse_run_folder, run_folder_name
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import MaintenanceFailed
from floe_dagster.iceberg.file_store import FileStore, _facts, local_path
from floe_dagster.iceberg.quarantine_store import TableQuarantine

T = TableName("demo", ("sales",), "orders")


def test_local_paths_are_read_only_when_clean():
    assert local_path("file:/wh/t/a") == "/wh/t/a" and local_path("file:///wh/t/a") == "/wh/t/a"
    assert local_path("/wh/t/a") == "/wh/t/a"
    for other in ("file://host/wh/t/a", "s3://b/k", "/wh/t/../a", "/wh//t/a", "relative/a", "file:/wh/t/.."):
        assert local_path(other) is None, other


def test_a_move_never_replaces_a_file_and_facts_are_the_files_own(tmp_path):
    files = FileStore()
    source, target = tmp_path / "a", tmp_path / "deep" / "er" / "a"
    source.write_bytes(b"abc")
    os.utime(source, (1_000_000, 1_000_000))
    facts = files.facts([f"file:{source}", f"file:{tmp_path / 'missing'}", f"file://{tmp_path}"])
    assert list(facts) == [f"file:{source}"]  # the missing file and the folder are left out
    assert facts[f"file:{source}"].size == 3
    assert facts[f"file:{source}"].modified == datetime.fromtimestamp(1_000_000, timezone.utc)
    assert files.move_many([(f"file:{source}", f"file:{target}")]) == [None]
    assert target.read_bytes() == b"abc" and not source.exists()
    source.write_bytes(b"new")
    assert files.move_many([(f"file:{source}", f"file:{target}")]) == [f"file:{target} exists: not overwritten"]
    assert target.read_bytes() == b"abc" and source.read_bytes() == b"new"
    assert files.move_many([(f"file:{tmp_path / 'gone'}", f"file:{tmp_path / 'x'}")]) == [
        f"file:{tmp_path / 'gone'} is gone"]


def test_only_files_inside_the_table_go_into_its_quarantine_and_a_purge_keeps_the_grace(tmp_path):
    table = tmp_path / "orders"
    (table / "data").mkdir(parents=True)
    inside, outside = table / "data" / "a.parquet", tmp_path / "orders_archive.parquet"
    inside.write_bytes(b"1234")
    outside.write_bytes(b"x")
    quarantine = TableQuarantine(FileStore(), T, f"file://{table}")
    now = datetime(2026, 11, 24, tzinfo=timezone.utc)
    run = parse_run_folder(run_folder_name(now, "r1"))
    listed = [f"file:{inside}", f"file:{outside}", f"file:{table}/../orders_archive.parquet"]
    report = quarantine.move_in(run, listed, quarantine.files.facts(listed))
    assert report.moved == (f"file:{inside}",) and report.bytes == 4
    assert [why.split(" lies ")[0] for why in report.not_moved] == listed[1:]
    assert outside.exists() and (table / "_floe_quarantine" / run.name / "data" / "a.parquet").read_bytes() == b"1234"
    assert quarantine.holds(f"file:{table}/_floe_quarantine/{run.name}/data/a.parquet")
    assert not quarantine.holds(f"file:{inside}")
    assert quarantine.runs()[0].marker["files"] == 1
    assert quarantine.purge(now + timedelta(days=7) - timedelta(seconds=1), timedelta(days=7)).files == 0
    purged = quarantine.purge(now + timedelta(days=7), timedelta(days=7))
    assert (purged.runs, purged.files, purged.bytes) == ((run.name,), 1, 4) and quarantine.runs() == []


def test_a_run_folder_renamed_to_a_past_date_is_kept_until_its_markers_promise(tmp_path):
    """Renaming ``<time>-<purge date>_<run>`` to dates long past (by hand, or by anyone who may write
    the table's folder) does not make the next run purge it early: the marker's promise still holds."""
    table = tmp_path / "orders"
    (table / "data").mkdir(parents=True)
    (table / "data" / "a.parquet").write_bytes(b"1234")
    quarantine = TableQuarantine(FileStore(), T, f"file://{table}")
    now, grace = datetime(2026, 11, 24, tzinfo=timezone.utc), timedelta(days=7)
    run = parse_run_folder(run_folder_name(now, "r1", grace))
    quarantine.move_in(run, [f"file:{table}/data/a.parquet"], quarantine.files.facts([f"file:{table}/data/a.parquet"]))
    past = run_folder_name(now - timedelta(days=365), "r1", timedelta(hours=1))
    os.rename(table / "_floe_quarantine" / run.name, table / "_floe_quarantine" / past)
    assert quarantine.purge(now + timedelta(days=1), timedelta(hours=1)).runs == ()
    assert (table / "_floe_quarantine" / past / "data" / "a.parquet").read_bytes() == b"1234"
    assert quarantine.runs()[0].due(timedelta(hours=1)) == now + grace
    assert quarantine.purge(now + grace, timedelta(hours=1)).runs == (past,)


def test_a_root_is_recorded_once_before_its_first_move_never_again(tmp_path):
    """``on_use`` (the coordination database's write) runs before the first move into a root the table's
    remembered roots lack, and not for each later round or run: a root already remembered is not written."""
    table = tmp_path / "orders"
    (table / "data").mkdir(parents=True)
    paths = []
    for name in ("a", "b"):
        (table / "data" / name).write_bytes(b"x")
        paths.append(f"file:{table}/data/{name}")
    recorded: list = []
    quarantine = TableQuarantine(FileStore(), T, f"file://{table}", on_use=recorded.append)
    run = parse_run_folder(run_folder_name(datetime(2026, 11, 24, tzinfo=timezone.utc), "r1", timedelta(days=7)))
    for path in paths:  # two rounds of one run
        quarantine.move_in(run, [path], quarantine.files.facts([path]))
    assert recorded == [quarantine.root]
    again = TableQuarantine(FileStore(), T, f"file://{table}", remembered=[quarantine.root.uri], on_use=recorded.append)
    (table / "data" / "c").write_bytes(b"x")
    assert again.move_in(run, [f"file:{table}/data/c"], again.files.facts([f"file:{table}/data/c"])).moved
    assert recorded == [quarantine.root]


def test_a_time_the_store_does_not_give_is_no_time_at_all():
    """pyarrow leaves ``mtime`` unset when a store does not say; it was read as 1970, the oldest file."""
    unknown = pafs.FileInfo("bucket/t/data/a.parquet", pafs.FileType.File, size=3)
    assert _facts("s3://bucket/t/data/a.parquet", unknown).modified is None


def test_symbolic_links_are_never_followed_listed_or_deleted(tmp_path):
    """A link inside a table's folder (to a folder or a file outside it): listings skip it, a purge
    leaves it and what it points at, and a path through it is known to leave the table."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.parquet").write_bytes(b"keep")
    run = tmp_path / "t" / "_floe_quarantine" / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "a.parquet").write_bytes(b"1")
    (run / "data" / "linked").symlink_to(outside)
    (run / "data" / "one.parquet").symlink_to(outside / "precious.parquet")
    (tmp_path / "t" / "_floe_quarantine" / "linked-run").symlink_to(outside)
    files = FileStore()
    assert [f.location for f in files.files_under(f"file:{run}")] == [f"file:{run}/data/a.parquet"]
    assert files.folders_in(f"file:{tmp_path / 't' / '_floe_quarantine'}") == ["run"]
    assert files.facts([f"file:{run}/data/one.parquet"]) == {}
    table = store_location(f"file:{tmp_path / 't'}")
    assert files.through_link(f"file:{run}/data/linked/precious.parquet", table)
    assert files.through_link(f"file:{run}/data/one.parquet", table)
    assert not files.through_link(f"file:{run}/data/a.parquet", table)
    files.delete_folder(f"file:{run}")
    assert not (run / "data" / "a.parquet").exists()
    assert (run / "data" / "linked").is_symlink() and (run / "data" / "one.parquet").is_symlink()
    assert (outside / "precious.parquet").read_bytes() == b"keep"


def test_a_quarantine_folder_that_is_a_link_is_never_moved_into_purged_or_listed(tmp_path):
    """The owner replaces the table's ``_floe_quarantine`` with a link to another table's folder: no move
    goes through it, and no purge deletes what lies behind it (a folder there named like an old run)."""
    table, other = tmp_path / "t", tmp_path / "other"
    (table / "data").mkdir(parents=True)
    (table / "data" / "a.parquet").write_bytes(b"1")
    behind = other / run_folder_name(datetime(2020, 1, 1, tzinfo=timezone.utc), "x")
    behind.mkdir(parents=True)
    (behind / "theirs.parquet").write_bytes(b"theirs")
    (table / "_floe_quarantine").symlink_to(other)
    quarantine = TableQuarantine(FileStore(), T, f"file:{table}")
    assert quarantine.runs() == []
    assert quarantine.purge(datetime(2026, 12, 1, tzinfo=timezone.utc), timedelta(days=7)).runs == ()
    assert (behind / "theirs.parquet").exists()
    run = parse_run_folder(run_folder_name(datetime(2026, 12, 1, tzinfo=timezone.utc), "r", timedelta(days=7)))
    listed = [f"file:{table}/data/a.parquet"]
    with pytest.raises(MaintenanceFailed, match="symbolic link"):
        quarantine.move_in(run, listed, quarantine.files.facts(listed))
    assert (table / "data" / "a.parquet").exists() and not (other / run.name).exists()


def test_restore_never_writes_through_a_link_put_in_the_table_after_the_quarantine(tmp_path):
    """The owner lets a file of theirs be quarantined, then turns its folder into a link to another
    folder (another table's, or any folder floe may write): restore leaves that file in the quarantine,
    named in the report, and writes nothing behind the link. Before, it was written there."""
    table, other = tmp_path / "t", tmp_path / "other"
    (table / "data").mkdir(parents=True)
    other.mkdir()
    (table / "data" / "planted.parquet").write_bytes(b"mine")
    (table / "kept.parquet").write_bytes(b"k")
    quarantine = TableQuarantine(FileStore(), T, f"file:{table}")
    run = parse_run_folder(run_folder_name(datetime(2026, 12, 1, tzinfo=timezone.utc), "r", timedelta(days=7)))
    listed = [f"file:{table}/data/planted.parquet", f"file:{table}/kept.parquet"]
    assert len(quarantine.move_in(run, listed, quarantine.files.facts(listed)).moved) == 2
    (table / "data").rmdir()
    (table / "data").symlink_to(other)
    report = quarantine.restore(quarantine.find("latest"))
    assert list(other.iterdir()) == [] and (table / "kept.parquet").read_bytes() == b"k"
    assert report.restored == 1 and report.left_in_quarantine == 1 and "symbolic link" in report.kept[0]
    assert (table / "_floe_quarantine" / run.name / "data" / "planted.parquet").read_bytes() == b"mine"
