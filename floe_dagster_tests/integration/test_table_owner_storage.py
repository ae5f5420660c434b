"""The table's owner as an attacker: properties set on a table cannot steer floe's storage (issue 34,
deliverable 2). PyIceberg merges a table's properties over the catalog's for that table's FileIO, so
``py-io-impl`` would make floe import and run the owner's class with the catalog's credentials, and
``s3.endpoint`` / ``s3.proxy-uri`` would send floe's reads, quarantine moves, restores and purges to the
owner's server. floe builds every table's FileIO from the catalog's settings alone (iceberg/table_io.py).

The owner sets the properties as Spark's ``ALTER TABLE … SET TBLPROPERTIES`` would: Iceberg Java writes the
new metadata through the catalog's FileIO and never builds one from table properties (``owner_sets``)."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance
from pyiceberg.catalog import load_catalog
from pyiceberg.io import load_file_io
from pyiceberg.typedef import EMPTY_DICT

from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.core.storage.quarantine import parse_run_folder
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, pyiceberg_properties
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.quarantine_store import TableQuarantine, open_table_quarantine
from floe_dagster.iceberg.table_io import table_file_store
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.orphan_runs import orphan_context
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_object_storage import ORDERS, put_object, s3_lake  # noqa: F401
from floe_dagster_tests.integration.test_rest_catalog import rest_lake  # noqa: F401
from floe_dagster_tests.reliability._support import checksum
from floe_dagster_tests.servers import rest_catalog, s3_server  # noqa: F401 (fixtures)

TEN_DAYS = 10 * 86400
POLICIES = """
- name: orphans
  tablePattern: "demo.ops.*"
  orphanCleanup: {retentionPeriodInDays: 3, quarantine: {enabled: true}}
  orphanCleanupSchedule: {interval: P1D}
"""
OWNER_MODULE = "floe_owner_file_io"
OWNER_CODE = '''
"""The table owner's FileIO: records that floe loaded it (a marker file), then behaves as PyArrow's."""
import pathlib

from pyiceberg.io.pyarrow import PyArrowFileIO

MARKER = pathlib.Path({marker!r})
with MARKER.open("a") as out:
    out.write("imported\\n")


class RecordingFileIO(PyArrowFileIO):
    def __init__(self, properties):
        with MARKER.open("a") as out:
            out.write("instantiated with " + ", ".join(sorted(properties)) + "\\n")
        super().__init__(properties)
'''


def owner_sets(settings, table: TableName, properties: dict[str, str]) -> None:
    """The owner's ``ALTER TABLE … SET TBLPROPERTIES``, committed as Iceberg Java commits it: the new metadata
    written through a FileIO of the catalog's properties (Java never builds one from a table's)."""
    owner = load_catalog(settings.catalog.name, **pyiceberg_properties(settings.catalog.properties))
    owner._load_file_io = lambda properties=EMPTY_DICT, location=None: load_file_io(owner.properties, location)
    owner.load_table(table.identifier).transaction().set_properties(properties).commit_transaction()


@pytest.mark.spark
def test_py_io_impl_on_a_table_is_never_loaded_while_floe_maintains_it(tmp_path, dagster_home, monkeypatch, capsys):
    """A table whose owner names their own FileIO class: floe's orphan cleanup (quarantine on), its
    restore, plan and health never import it; plan shows the property as ignored, with the reason."""
    config = write_settings(tmp_path / "lake", POLICIES)
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("ops")
    name = TableName.parse("ops.owned", "demo")
    created = catalog.create_table(name.identifier, schema=EVENT_SCHEMA)
    for start in (0, 10):
        created.append(rows(start, 10))
    marker = owner_module(tmp_path, monkeypatch)
    owner_sets(settings, name, {"py-io-impl": f"{OWNER_MODULE}.RecordingFileIO"})
    assert not marker.exists()

    table = load_table(open_catalog(settings.catalog), name)
    assert table.properties["py-io-impl"] == f"{OWNER_MODULE}.RecordingFileIO"  # the table says it
    before = checksum(table.scan().to_arrow())
    for path in local_path(table.location()).rglob("*"):
        os.utime(path, (time.time() - TEN_DAYS, time.time() - TEN_DAYS))
    orphans = [local_path(table.location()) / "data" / f"orphan-{i}.parquet" for i in range(2)]
    for i, path in enumerate(orphans):
        pq.write_table(rows(1000 + i, 3), path)
        os.utime(path, (time.time() - TEN_DAYS, time.time() - TEN_DAYS))

    with DagsterInstance.get() as instance:
        outcome = trigger_table(settings, name.qualified, ["ORPHAN_CLEANUP"], reason="attack", actor="owner",
                                trigger_id="py-io-impl", instance=instance).outcomes[0]
    assert outcome.status == "SUCCEEDED", outcome.message
    assert outcome.metadata["quarantine"] is True and outcome.metadata["quarantined_files"] == 2
    assert not any(path.exists() for path in orphans)  # moved, by floe's own file work
    assert floe_dagster_cli(["--config", str(config), "restore", name.qualified, "--run", "latest"]) == 0
    assert "restored 2 file(s)" in capsys.readouterr().out and all(path.exists() for path in orphans)
    assert floe_dagster_cli(["--config", str(config), "plan"]) == 0
    assert (f"ignored py-io-impl={OWNER_MODULE}.RecordingFileIO (a table property never steers floe's storage"
            in capsys.readouterr().out)
    assert checksum(load_table(open_catalog(settings.catalog), name).scan().to_arrow()) == before
    assert not marker.exists(), marker.read_text()  # the owner's class was never imported nor instantiated


def owner_module(tmp_path, monkeypatch):
    """The owner's FileIO module on sys.path, and the marker file it writes when imported or instantiated."""
    marker = tmp_path / "owner-code-ran"
    code = tmp_path / "owner_code"
    code.mkdir()
    (code / f"{OWNER_MODULE}.py").write_text(OWNER_CODE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(sys.modules, OWNER_MODULE, raising=False)
    return marker


def test_a_rest_catalogs_table_loads_without_its_own_file_io_properties(rest_lake, tmp_path, monkeypatch):  # noqa: F811
    """On a REST catalog the FileIO takes the server's answer (its vended config and credentials), never the
    table's properties in it; the table's metadata, properties included, stays as the server sent it."""
    settings, _, _ = rest_lake
    marker = owner_module(tmp_path, monkeypatch)
    refunds = TableName("lake", ("sales", "eu"), "refunds")
    owner = load_catalog(settings.catalog.name, **pyiceberg_properties(settings.catalog.properties))
    owner.load_table(refunds.identifier).transaction().set_properties(
        {"py-io-impl": f"{OWNER_MODULE}.RecordingFileIO", "s3.endpoint": "http://127.0.0.1:1"}).commit_transaction()

    table = load_table(open_catalog(settings.catalog), refunds)
    assert table.properties["py-io-impl"] == f"{OWNER_MODULE}.RecordingFileIO"
    assert "py-io-impl" not in table.io.properties and "s3.endpoint" not in table.io.properties
    assert table.scan().to_arrow().num_rows == 5
    assert table_file_store(table).facts([table.metadata_location])  # floe's own file work reads it
    assert not marker.exists()


@contextmanager
def recording_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that refuses every request (403, as S3 refuses an unknown key) and
    records it: the endpoint or proxy a table's owner would send floe's requests to."""
    seen: list[str] = []

    class Refusing(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            seen.append(f"{self.command} {self.path}")
            body = b"<Error><Code>AccessDenied</Code><Message>the table owner's server</Message></Error>"
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_CONNECT = _refuse

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_s3_endpoint_on_a_table_never_takes_floes_file_work_to_another_server(s3_lake, capsys):  # noqa: F811
    """A table on S3 whose owner points ``s3.endpoint`` and ``s3.proxy-uri`` at their own server: floe's
    reads (health, the row check's scan), the orphan cleanup's file times and quarantine moves (its store
    built as a run builds it), ``floe-dagster restore`` and a purge all go to the catalog's endpoint, and
    nothing reaches the other server."""
    settings, config, server = s3_lake
    with recording_server() as (elsewhere, seen):
        owner_sets(settings, ORDERS, {"s3.endpoint": elsewhere, "s3.proxy-uri": elsewhere})
        catalog = open_catalog(settings.catalog)
        table = load_table(catalog, ORDERS)
        assert table.properties["s3.endpoint"] == elsewhere
        before = checksum(table.scan().to_arrow())
        health = HealthCollector(catalog, settings).collect([ORDERS], tier="full")
        assert health.errors == {} and health.metrics[ORDERS].data_file_count == 6

        base = table.location()
        bodies = {f"{base}/data/orphan-a.parquet": b"orphan a", f"{base}/metadata/orphan-b.avro": b"orphan b"}
        for uri, body in bodies.items():
            put_object(server, uri, body, age_s=TEN_DAYS)
        context = orphan_context(catalog, table, ORDERS, "owner-attack")
        quarantine = TableQuarantine(context.files, ORDERS, context.table_location)
        facts = context.files.facts(list(bodies))  # the file times a cleanup checks
        assert {uri: found.size for uri, found in facts.items()} == {uri: len(b) for uri, b in bodies.items()}
        run = parse_run_folder(f"20261101T000000Z_{'0' * 8}")
        assert sorted(quarantine.move_in(run, list(bodies), facts).moved) == sorted(bodies)
        assert not any(server.object_file(uri).exists() for uri in bodies)

        assert floe_dagster_cli(["--config", str(config), "restore", ORDERS.qualified, "--run", "latest"]) == 0
        assert "restored 2 file(s)" in capsys.readouterr().out
        assert {uri: server.object_file(uri).read_bytes() for uri in bodies} == bodies

        again, grace = open_table_quarantine(settings, ORDERS.qualified)  # restore's and purge's store
        again.move_in(run, list(bodies), again.files.facts(list(bodies)))
        assert again.purge(run.at + grace + timedelta(seconds=1), grace).files == 2
        assert checksum(load_table(open_catalog(settings.catalog), ORDERS).scan().to_arrow()) == before
    assert seen == []  # not one request reached the owner's server
