"""Tables on S3-compatible object storage, for real: s3proxy on 127.0.0.1 (signature v4, its filesystem
backend in a temporary folder), the README's object-storage example as floe.yaml (its endpoint, keys
and catalog file swapped for the test server's), PyIceberg writing the tables into the bucket, and
floe-dagster listing them, collecting their health, and maintaining them with real Spark over
Iceberg's S3FileIO: compaction, snapshot expiry and orphan cleanup in one ``floe-dagster trigger``.

Orphan cleanup must delete only unreferenced objects older than the retention: the server reports an
object's LastModified from its backing file's modification time, so the test ages objects by setting
that time (and checks through the S3 API that the server reports them old) instead of waiting days.

The run is a process of its own, as every Dagster run is: its Spark session loads Iceberg's AWS bundle,
which the other tests' sessions do not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance

from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import EVENT_SCHEMA, rows
from floe_dagster.errors import TableUnreadable
from floe_dagster.iceberg.catalog import existing_table, list_tables, load_table, open_catalog, table_counts
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import JARS_CACHE
from floe_dagster_tests.reliability._support import checksum, referenced_files
from floe_dagster_tests.servers import s3_server  # noqa: F401 (a fixture)

BIN = Path(sys.executable).parent
README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLE = re.compile(r"<!-- object-storage-example: begin[^>]*-->\s*```yaml\n(.*?)```\s*<!-- object-storage-example: end -->",
                     re.DOTALL)
POLICIES = """
- name: lake-on-s3
  tablePattern: "lake.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
  expireSnapshots: {retainLast: 2, maxSnapshotAge: PT0S}
  expireSnapshotsSchedule: {interval: PT1H}
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {interval: P1D}
"""
TEN_DAYS_AGO = time.time() - 10 * 86400
ORDERS = TableName("lake", ("sales",), "orders")


def readme_example() -> dict:
    """The README's object-storage floe.yaml, parsed."""
    found = EXAMPLE.search(README.read_text())
    assert found, "README.md has no object-storage example between its marker comments"
    return yaml.safe_load(found.group(1))


def floe_yaml_for(server, root: Path, **overrides: str) -> Path:
    """The README's example pointed at the test server: its endpoint and keys, a SQLite catalog file
    under ``root`` instead of the example's PostgreSQL; the bucket, warehouse, region and the rest as
    the README has them. ``overrides``: catalog properties to change (bad input)."""
    config = readme_example()
    properties = config["catalog"]["properties"]
    # The keys the README documents: if it changes them, this test must change with it.
    assert set(properties) == {"type", "uri", "warehouse", "s3.endpoint", "s3.access-key-id", "s3.secret-access-key",
                               "s3.region", "s3.path-style-access"}
    properties.update({
        "uri": f"sqlite:///{root / 'catalog.db'}",
        "s3.endpoint": server.endpoint,
        "s3.access-key-id": server.access_key_id,
        "s3.secret-access-key": server.secret_access_key,
        **overrides,
    })
    config.update({"data-dir": str(root / "data"), "spark": {"jars-cache": JARS_CACHE}})
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "lake.yaml").write_text(POLICIES)
    path = root / "floe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def bucket_of(settings) -> str:
    return settings.catalog.properties["warehouse"].split("://", 1)[1].split("/", 1)[0]


@pytest.fixture
def s3_lake(tmp_path, s3_server, dagster_home):  # noqa: F811
    """The README's example on the test server, with one table written by PyIceberg: six appends of
    ten rows (one small data file each) and a delete, which rewrites the first file."""
    config = floe_yaml_for(s3_server, tmp_path)
    settings = load_settings(config, environ={})
    s3_server.filesystem().create_dir(bucket_of(settings))
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    table = catalog.create_table(ORDERS.identifier, schema=EVENT_SCHEMA)
    for i in range(6):
        table.append(rows(i * 10, 10))
    table.delete("id < 5")
    return settings, config, s3_server


def objects_on_server(server, table) -> set[str]:
    """Every object under the table's location, as the server's backing files."""
    root = server.object_file(table.location())
    return {str(p) for p in root.rglob("*") if p.is_file()}


def put_object(server, uri: str, body: bytes, age_s: float | None = None) -> str:
    """An object written through the S3 API; ``age_s``: then made that old (its backing file's time)."""
    with server.filesystem().open_output_stream(uri.split("://", 1)[1]) as out:
        out.write(body)
    path = server.object_file(uri)
    if age_s is not None:
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    return str(path)


@pytest.mark.spark
def test_maintenance_on_object_storage_runs_the_readme_example(s3_lake):
    settings, config, server = s3_lake
    catalog = open_catalog(settings.catalog)
    table = load_table(catalog, ORDERS)
    # The table and every file of it are objects in the bucket the README names, not local files.
    assert table.location() == f"{settings.catalog.properties['warehouse']}/sales/orders"
    assert list(Path(settings.data_dir).rglob("*.parquet")) == []
    assert list_tables(catalog) == [ORDERS]

    # Health, from the metadata and manifests in the bucket (PyIceberg's FileIO on the S3 server).
    health = HealthCollector(catalog, settings).collect([ORDERS], tier="full")
    assert health.errors == {}
    before_health = health.metrics[ORDERS]
    counts = table_counts(table)
    assert before_health.data_file_count == counts["data_files"] == 6
    assert before_health.record_count == counts["records"] == 55
    assert before_health.snapshot_count == len(table.metadata.snapshots) >= 7
    assert before_health.location.startswith("s3://")
    before_rows = checksum(table.scan().to_arrow())

    # Only being referenced protects the table's own objects now: every one is ten days old.
    for path in objects_on_server(server, table):
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    base = table.location()
    old_orphans = {put_object(server, f"{base}/data/orphan-old.parquet", b"unreferenced", age_s=10 * 86400),
                   put_object(server, f"{base}/metadata/orphan-old.avro", b"unreferenced", age_s=10 * 86400)}
    young_orphans = {put_object(server, f"{base}/data/orphan-young.parquet", b"being written"),
                     put_object(server, f"{base}/metadata/orphan-young.avro", b"being written")}
    listed = server.filesystem().get_file_info(f"{base.split('://', 1)[1]}/data/orphan-old.parquet")
    assert listed.mtime < datetime.now(timezone.utc) - timedelta(days=9)  # the server reports it old

    result = subprocess.run(
        [str(BIN / "floe-dagster"), "trigger", ORDERS.qualified, "--operation", "REWRITE_DATA_FILES",
         "--operation", "EXPIRE_SNAPSHOTS", "--operation", "ORPHAN_CLEANUP"],
        env={**os.environ, "FLOE_CONFIG": str(config)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for op in ("REWRITE_DATA_FILES", "EXPIRE_SNAPSHOTS", "ORPHAN_CLEANUP"):
        assert f"{op}: SUCCEEDED" in result.stdout, result.stdout

    after = load_table(open_catalog(settings.catalog), ORDERS)
    # Compaction: one data file, same rows; expiry: the replace and its parent are all that is left.
    assert table_counts(after)["data_files"] == 1
    assert [s.summary.operation.value for s in after.metadata.snapshots][-1] == "replace"
    assert len(after.metadata.snapshots) == 2
    assert checksum(after.scan().to_arrow()) == before_rows
    parent = after.metadata.snapshots[0].snapshot_id
    assert checksum(after.scan(snapshot_id=parent).to_arrow()) == before_rows  # time travel still reads

    # Orphan cleanup: the old unreferenced objects are gone; the young ones and every object the
    # metadata references (the parent's ten-day-old data files and manifests included) are there.
    on_server = objects_on_server(server, after)
    referenced = referenced_files(after, server.object_file)
    for kind, files in referenced.items():
        assert files <= on_server, f"referenced {kind} objects were deleted: {sorted(files - on_server)}"
    assert len(referenced["data"]) == 7  # the compacted file and the parent's six
    assert not old_orphans & on_server
    assert young_orphans <= on_server
    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(asset_key_for(ORDERS))
    metadata = {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}
    assert event.dagster_event.partition == "ORPHAN_CLEANUP"
    assert metadata["orphan_files_count"] == 2
    assert metadata["arguments"]["prefix_listing"] is True  # listed by S3FileIO, not Hadoop's FileSystem
    assert sorted(metadata["orphan_files_sample"]) == sorted([f"{base}/data/orphan-old.parquet",
                                                               f"{base}/metadata/orphan-old.avro"])

    # Health after the run, from the bucket again.
    health = HealthCollector(open_catalog(settings.catalog), settings).collect([ORDERS], tier="full")
    assert health.metrics[ORDERS].data_file_count == 1 and health.metrics[ORDERS].snapshot_count == 2


def test_wrong_keys_or_a_missing_bucket_name_the_catalog_and_the_endpoint(s3_lake, tmp_path, capsys, monkeypatch):
    """Bad object storage settings fail at the first read, before Spark starts, with a message naming the
    catalog, the table, the endpoint, the bucket and what to check."""
    settings, _, server = s3_lake
    context = f"its tables are in object storage at {server.endpoint} (s3.endpoint): check that the bucket exists"
    for name, change in (("wrong-secret", {"s3.secret-access-key": "not-the-secret"}),
                         ("unknown-key", {"s3.access-key-id": "nobody"})):
        # The same catalog file: the table is listed, but its metadata in the bucket cannot be read.
        config = floe_yaml_for(server, tmp_path / name, uri=settings.catalog.properties["uri"], **change)
        bad = load_settings(config, environ={})
        with pytest.raises(TableUnreadable) as raised:  # refused, not unreachable: the table's failure
            existing_table(bad.catalog, ORDERS.qualified)
        message = str(raised.value)
        assert message.startswith("catalog 'lake' could not load 'lake.sales.orders'") and context in message
        assert "ACCESS_DENIED" in message and "in bucket 'lakehouse'" in message, message
        # The command line says the same and exits non-zero.
        monkeypatch.setenv("FLOE_CONFIG", str(config))  # the CLI sets it for its runs: restored after the test
        assert floe_dagster_cli(["--config", str(config), "trigger", ORDERS.qualified, "--operation", "ORPHAN_CLEANUP"]) != 0
        assert context in capsys.readouterr().err
        # Health collection leaves the table out, and says why.
        health = HealthCollector(open_catalog(bad.catalog), bad).collect([ORDERS])
        assert ORDERS not in health.metrics and context in health.errors[ORDERS]

    bucket = server.storage / bucket_of(settings)
    bucket.rename(bucket.with_name("elsewhere"))  # the bucket is gone (s3proxy's buckets are its folders)
    with pytest.raises(TableUnreadable) as raised:
        existing_table(settings.catalog, ORDERS.qualified)
    assert "Path does not exist 'lakehouse/warehouse/sales/orders/metadata/" in str(raised.value)
    assert context in str(raised.value)
