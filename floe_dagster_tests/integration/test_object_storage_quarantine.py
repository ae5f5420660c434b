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
import time
from datetime import timedelta

import pytest
from dagster import DagsterInstance

from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.core.quarantine import QUARANTINE_FOLDER, RUN_MARKER, parse_run_folder
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.quarantine_store import open_table_quarantine
from floe_dagster_tests.integration.test_object_storage import BIN, ORDERS, objects_on_server, put_object, s3_lake  # noqa: F401
from floe_dagster_tests.reliability._support import checksum, referenced_files
from floe_dagster_tests.servers import s3_server  # noqa: F401 (a fixture)

TEN_DAYS = 10 * 86400


def orphan_cleanup(config) -> dict:
    """``floe-dagster trigger TABLE --operation ORPHAN_CLEANUP`` in its own process; the run's metadata."""
    result = subprocess.run([str(BIN / "floe-dagster"), "trigger", ORDERS.qualified, "--operation", "ORPHAN_CLEANUP"],
                            env={**os.environ, "FLOE_CONFIG": str(config)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(asset_key_for(ORDERS))
    return {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}


@pytest.mark.spark
def test_quarantine_on_object_storage_moves_keeps_restores_and_purges(s3_lake, capsys):  # noqa: F811
    settings, config, server = s3_lake
    table = load_table(open_catalog(settings.catalog), ORDERS)
    rows = checksum(table.scan().to_arrow())
    for path in objects_on_server(server, table):
        os.utime(path, (time.time() - TEN_DAYS, time.time() - TEN_DAYS))
    base = table.location()
    bodies = {f"{base}/data/orphan-a.parquet": b"orphan a", f"{base}/metadata/orphan-b.avro": b"orphan b, longer"}
    for uri, body in bodies.items():
        put_object(server, uri, body, age_s=TEN_DAYS)

    first = orphan_cleanup(config)
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
    second = orphan_cleanup(config)
    assert second["quarantine"] is True and second["quarantined_files"] == 1 and second["quarantine_purged_files"] == 0
    assert second["quarantine_run"] != folder
    assert not os.path.exists(later) and all(path.exists() for path in held.values())

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

    after = load_table(open_catalog(settings.catalog), ORDERS)
    on_server = objects_on_server(server, after)
    for kind, names in referenced_files(after, server.object_file).items():
        assert names <= on_server, f"referenced {kind} objects were touched"
    assert checksum(after.scan().to_arrow()) == rows
