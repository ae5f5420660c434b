"""Maintenance through Spark Connect for real: a Spark Connect server started from the installed
pyspark on 127.0.0.1 (with the Iceberg runtime and extensions, nothing about the catalog), an Iceberg
REST catalog server, and ``spark.remote`` in floe.yaml. The run's process has no JVM at all: the
engine sets the catalog on its server session and the server does the work.

The runs are separate processes (``floe-dagster trigger``), as every Dagster run is: a Connect
session marks the whole Python process as Connect mode (pyspark sets SPARK_CONNECT_MODE_ENABLED), so
it must not share the test process with the other tests' local Spark sessions."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.storage.quarantine import QUARANTINE_FOLDER
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import JARS_CACHE
from floe_dagster_tests.servers import free_port, run_rest_catalog, run_spark_connect

pytestmark = pytest.mark.spark

BIN = Path(sys.executable).parent
POLICIES = """
- name: all
  tablePattern: "*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
  orphanCleanup: {retentionPeriodInDays: 3, maxFilesToDelete: 100}
  orphanCleanupSchedule: {interval: P1D}
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("connect")
    with run_rest_catalog(root / "rest") as rest, run_spark_connect(root / "spark") as connect:
        yield rest, connect


@pytest.fixture
def connect_lake(tmp_path, servers, dagster_home):
    rest, connect = servers
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICIES)
    config = tmp_path / "floe.yaml"
    name = f"lake{os.urandom(3).hex()}"  # the module's tests share the REST server: one namespace each
    config.write_text(textwrap.dedent(f"""
        data-dir: {tmp_path / 'data'}
        catalog:
          name: lake
          properties: {{type: rest, uri: "{rest.uri}"}}
        spark:
          remote: "{connect.remote}"
          jars-cache: {JARS_CACHE}
        policies: [{tmp_path / 'policies'}]
    """))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace(name)
    table = catalog.create_table(f"{name}.orders", schema=rows(0, 1).schema)
    for i in range(10):
        table.append(rows(i * 10, 10))
    refresh_table_cache(settings)
    return settings, config, TableName("lake", (name,), "orders"), connect


def trigger(config: Path, table: TableName, operation: str = "REWRITE_DATA_FILES",
            **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "FLOE_CONFIG": str(config),
                   # No JVM on the client side: a local Spark session could not start with this.
                   "JAVA_HOME": "/nonexistent-java-home", **env}
    for key in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "FLOE_SPARK_MASTER", "FLOE_JAVA_HOME"):
        environment.pop(key, None)
    return subprocess.run([str(BIN / "floe-dagster"), "trigger", table.qualified, "--operation", operation],
                          env=environment, capture_output=True, text=True, timeout=300)


def test_maintenance_through_spark_connect(connect_lake):
    settings, config, table, connect = connect_lake
    before = load_table(open_catalog(settings.catalog), table)
    before_rows = before.scan().to_arrow().sort_by("id")
    assert table_counts(before)["data_files"] == 10

    result = trigger(config, table)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "REWRITE_DATA_FILES: SUCCEEDED" in result.stdout, result.stdout[-3000:]

    after = load_table(open_catalog(settings.catalog), table)
    counts = table_counts(after)
    assert counts["data_files"] == 1 and counts["records"] == 100
    assert len(after.metadata.snapshots) == 11
    assert after.current_snapshot().summary.operation.value == "replace"
    assert after.scan().to_arrow().sort_by("id").equals(before_rows)
    # The run is recorded like any other: the asset's materialization with the procedure's numbers
    # and the row check, which counted rows through Connect.
    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(asset_key_for(table))
    metadata = {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}
    assert event.dagster_event.partition == "REWRITE_DATA_FILES"
    assert metadata["rewritten_data_files_count"] == 10
    assert metadata["row_check"] == "snapshot-summary" and metadata["rows_checked"] == 100
    # Its compute: the wall time, and a null with the reason where a Connect server reports nothing (CPU, bytes).
    assert metadata["floe/compute/source"] == "spark-connect" and metadata["floe/compute/wall_s"] > 0
    assert metadata["floe/compute/executor_cpu_s"] is None and metadata["floe/compute/bytes_read"] is None
    assert metadata["floe/compute/unavailable"].startswith("Spark Connect (3.5) reports no executor CPU")
    assert metadata["floe/benefit/data_files_before"] == 10 and metadata["floe/benefit/files_removed"] == 9
    # The server did the work: it ran the Connect session's jobs, and it loaded a REST catalog that
    # only the session's conf (set by the engine) describes.
    server_log = connect.log.read_text(errors="replace")
    assert "Starting job: Spark Connect - session_id" in server_log
    assert "org.apache.iceberg.rest.auth.NoopAuthManager" in server_log


def test_an_unreachable_connect_server_is_an_outage(connect_lake):
    settings, config, table, _ = connect_lake
    result = trigger(config, table, FLOE_SPARK_REMOTE=f"sc://127.0.0.1:{free_port()}")
    assert result.returncode != 0
    assert "REWRITE_DATA_FILES: FAILED" in result.stdout, result.stdout[-3000:]
    assert "Spark Connect server at sc://127.0.0.1:" in result.stdout + result.stderr
    with DagsterInstance.get() as instance:
        [run] = instance.get_runs(limit=1)
    assert run.tags.get(T.FAILURE_KIND) == "outage"  # not the table's failure: no backoff
    assert table_counts(load_table(open_catalog(settings.catalog), table))["data_files"] == 10


def test_orphan_quarantine_through_spark_connect(connect_lake):
    """No JVM in the run's process: the server lists the orphans, floe moves them from the client with
    PyIceberg's file system; then a capped deletion gives the server each file's real time in a view
    the client sends (``createDataFrame`` over Connect)."""
    settings, config, table, _ = connect_lake
    loaded = load_table(open_catalog(settings.catalog), table)
    root = local_path(loaded.location())
    old = time.time() - 10 * 86400
    for path in root.rglob("*"):
        os.utime(path, (old, old))
    planted = [root / "data" / f"orphan-{i}.parquet" for i in range(3)]
    for path in planted:
        path.write_bytes(path.name.encode())
        os.utime(path, (old, old))

    first = trigger(config, table, "ORPHAN_CLEANUP")
    assert first.returncode == 0 and "ORPHAN_CLEANUP: SUCCEEDED" in first.stdout, first.stdout[-3000:] + first.stderr[-3000:]
    [run] = list((root / QUARANTINE_FOLDER).iterdir())
    assert sorted(p.name for p in (run / "data").iterdir()) == [p.name for p in planted]
    assert not any(path.exists() for path in planted)

    later = root / "data" / "orphan-later.parquet"
    later.write_bytes(b"later")
    os.utime(later, (old, old))
    policies = config.parent / "policies" / "p.yaml"  # every cleanup quarantines unless the policy opts out
    policies.write_text(POLICIES.replace("maxFilesToDelete: 100}", "maxFilesToDelete: 100, quarantine: false}"))
    second = trigger(config, table, "ORPHAN_CLEANUP")
    assert second.returncode == 0 and "ORPHAN_CLEANUP: SUCCEEDED" in second.stdout, second.stdout[-3000:]
    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(asset_key_for(table))
    metadata = {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}
    assert metadata["quarantine"] is False and metadata["orphan_files_count"] == 1
    assert "file_list_view" in metadata["procedure_call"]
    assert not later.exists() and sorted(p.name for p in (run / "data").iterdir()) == [p.name for p in planted]
    assert load_table(open_catalog(settings.catalog), table).scan().to_arrow().num_rows == 100
