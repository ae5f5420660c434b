"""Orphan quarantine on S3 for real (issue 26): s3proxy, the README's object-storage floe.yaml, real Spark
over Iceberg's S3FileIO with prefix listing. Every orphan cleanup copies each old orphan into
``<table>/_floe_quarantine/<run folder>/`` and deletes the original (S3 has no rename; floe moves from
the Dagster process with PyIceberg's pyarrow S3 file system, as it would under Spark Connect); the next
cleanup quarantines into a run folder of its own and leaves the first run's objects alone even when they
are old; the grace period is kept, ``floe-dagster restore`` puts the objects back byte for byte, and a purge past the
grace period deletes what is left. The runs are processes of their own (see test_object_storage.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import DagsterInstance

from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.core.storage.quarantine import QUARANTINE_FOLDER, RUN_MARKER, parse_run_folder
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.quarantine_store import open_table_quarantine
from floe_dagster_tests.integration.test_object_storage import ORDERS, objects_on_server, put_object, s3_lake  # noqa: F401
from floe_dagster_tests.reliability._support import checksum, referenced_files
from floe_dagster_tests.servers import s3_server  # noqa: F401 (a fixture)

TEN_DAYS = 10 * 86400


class OrphanCleanups:
    """``floe-dagster trigger TABLE --operation ORPHAN_CLEANUP`` twice in one process of its own (this module
    run as a script; a process of its own as in test_object_storage.py): the second waits for the test's
    go, so the test sets the next orphans up in between while that process keeps its Spark session."""

    def __init__(self, config, folder: Path):
        folder.mkdir()
        self.folder = folder
        self.log = folder / "cleanups.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "floe_dagster_tests.integration.test_object_storage_quarantine", str(folder)],
            cwd=Path(__file__).resolve().parents[2], env={**os.environ, "FLOE_CONFIG": str(config)},
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def metadata(self, number: int) -> dict:
        """Waits for cleanup ``number`` to end; its run's metadata."""
        done, deadline = self.folder / f"done-{number}", time.monotonic() + 600
        while not done.exists():
            ended = self.process.poll() is not None and not done.exists()
            assert not ended and time.monotonic() < deadline, self.log.read_text()[-4000:]
            time.sleep(0.5)
        assert done.read_text() == "0", self.log.read_text()[-4000:]
        with DagsterInstance.get() as instance:
            event = instance.get_latest_materialization_event(asset_key_for(ORDERS))
        return {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}

    def go_on(self) -> None:
        (self.folder / "go").touch()

    def close(self) -> None:
        self.go_on()
        try:
            self.process.wait(timeout=600)
        finally:
            self.process.kill()


def run_two_cleanups(folder: Path) -> None:
    """The script's side: cleanup 1, then cleanup 2 once ``folder/go`` exists; each writes its exit status."""
    for number in (1, 2):
        while number == 2 and not (folder / "go").exists():
            time.sleep(0.2)
        status = floe_dagster_cli(["trigger", ORDERS.qualified, "--operation", "ORPHAN_CLEANUP"])
        (folder / "status.tmp").write_text(str(status))
        (folder / "status.tmp").rename(folder / f"done-{number}")  # whole, never half written
        if status:
            return


def assert_table_untouched(settings, server, rows) -> None:
    """Every object the table references is still on the server, and its rows are as they were."""
    after = load_table(open_catalog(settings.catalog), ORDERS)
    on_server = objects_on_server(server, after)
    for kind, names in referenced_files(after, server.object_file).items():
        assert names <= on_server, f"referenced {kind} objects were touched"
    assert checksum(after.scan().to_arrow()) == rows


@pytest.mark.spark
def test_quarantine_on_object_storage_moves_keeps_restores_and_purges(s3_lake, capsys, tmp_path):  # noqa: F811
    settings, config, server = s3_lake
    table = load_table(open_catalog(settings.catalog), ORDERS)
    rows = checksum(table.scan().to_arrow())
    for path in objects_on_server(server, table):
        os.utime(path, (time.time() - TEN_DAYS, time.time() - TEN_DAYS))
    base = table.location()
    bodies = {f"{base}/data/orphan-a.parquet": b"orphan a", f"{base}/metadata/orphan-b.avro": b"orphan b, longer"}
    for uri, body in bodies.items():
        put_object(server, uri, body, age_s=TEN_DAYS)

    cleanups = OrphanCleanups(config, tmp_path / "cleanups")
    try:
        first = cleanups.metadata(1)
        assert first["quarantine"] is True and first["quarantined_files"] == 2
        assert first["quarantined_bytes"] == sum(len(b) for b in bodies.values())
        assert first["quarantine_location"] == f"{base}/{QUARANTINE_FOLDER}"
        assert first["arguments"]["prefix_listing"] is True  # listed by S3FileIO, hidden folders skipped
        folder = first["quarantine_run"]
        held = {uri: server.object_file(uri.replace(base, f"{base}/{QUARANTINE_FOLDER}/{folder}")) for uri in bodies}
        assert {uri: path.read_bytes() for uri, path in held.items()} == bodies  # copied byte for byte
        assert not any(server.object_file(uri).exists() for uri in bodies)  # and the originals deleted
        assert server.object_file(f"{base}/{QUARANTINE_FOLDER}/{folder}/{RUN_MARKER}").exists()

        # The next cleanup quarantines too, into its own run folder, and leaves the first run's objects where they
        # are, though they are old too.
        for path in held.values():
            os.utime(path, (time.time() - TEN_DAYS, time.time() - TEN_DAYS))
        later = put_object(server, f"{base}/data/orphan-c.parquet", b"orphan c", age_s=TEN_DAYS)
        cleanups.go_on()
        second = cleanups.metadata(2)
        assert second["quarantine"] is True and second["quarantined_files"] == 1
        assert second["quarantine_purged_files"] == 0
        assert second["quarantine_run"] != folder
        assert not os.path.exists(later) and all(path.exists() for path in held.values())
    finally:
        cleanups.close()

    # Within its grace period a purge keeps the run; restore puts the objects back where they were.
    quarantine, grace = open_table_quarantine(settings, ORDERS.qualified)
    quarantined_at = parse_run_folder(folder).at
    assert quarantine.purge(quarantined_at + grace - timedelta(seconds=1), grace).files == 0
    assert floe_dagster_cli(["--config", str(config), "restore", ORDERS.qualified, "--run", first["quarantine_run"]
                             .split("_", 1)[1][:8]]) == 0
    assert "restored 2 file(s)" in capsys.readouterr().out
    assert {uri: server.object_file(uri).read_bytes() for uri in bodies} == bodies
    assert [found.run.name for found in quarantine.runs()] == [second["quarantine_run"]]

    # Past the grace period a purge deletes a run folder: its objects, its marker.
    run = parse_run_folder(f"20261101T000000Z_{'0' * 8}")
    files = quarantine.files.facts(list(bodies))
    moved = quarantine.move_in(run, list(bodies), files)
    assert sorted(moved.moved) == sorted(bodies) and moved.bytes == first["quarantined_bytes"]
    purged = quarantine.purge(run.at + grace, grace)
    assert purged.runs == (run.name,) and purged.files == 2 and purged.bytes == moved.bytes
    assert not server.object_file(f"{base}/{QUARANTINE_FOLDER}/{run.name}/{RUN_MARKER}").exists()
    assert not any(server.object_file(uri).exists() for uri in bodies)

    assert_table_untouched(settings, server, rows)


if __name__ == "__main__":
    run_two_cleanups(Path(sys.argv[1]))
