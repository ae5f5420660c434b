"""The production path with real servers on 127.0.0.1: the Iceberg catalog on PostgreSQL (PyIceberg's
SqlCatalog and Iceberg's JDBC catalog in Spark on one database), several replicas sharing one
PostgreSQL coordination database (real processes), and Spark on a standalone cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from dagster import DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import JARS_CACHE, postgres_url

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

BIN = Path(sys.executable).parent
POLICIES = """
- name: all
  tablePattern: "*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
"""


@pytest.fixture
def pg_lake(tmp_path, dagster_home):
    """A lakehouse whose catalog is PostgreSQL (a fresh catalog name, so runs never collide), with
    a coordination database on PostgreSQL too."""
    catalog_url = postgres_url("floe_catalog").replace("postgresql://", "postgresql+psycopg2://")
    coordination_url = postgres_url("floe_coordination")
    name = f"pg{uuid.uuid4().hex[:8]}"
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICIES)
    config = tmp_path / "floe.yaml"
    config.write_text(textwrap.dedent(f"""
        data-dir: {tmp_path / 'data'}
        catalog:
          name: {name}
          properties: {{type: sql, uri: "{catalog_url}", warehouse: "file://{tmp_path / 'warehouse'}"}}
        spark: {{jars-cache: {JARS_CACHE}}}
        policies: [{tmp_path / 'policies'}]
        coordination: {{url: "{coordination_url}"}}
    """))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", schema=rows(0, 1).schema)
    for i in range(12):
        table.append(rows(i * 10, 10))
    refresh_table_cache(settings)
    with DagsterInstance.get():  # create the instance's storage once, before processes share it
        pass
    yield settings, config
    for identifier in catalog.list_tables("sales"):
        catalog.purge_table(identifier)
    catalog.drop_namespace("sales")


def test_postgres_catalog_shared_by_pyiceberg_and_spark(pg_lake):
    settings, config = pg_lake
    table = TableName.parse("sales.orders", settings.catalog.name)
    before = load_table(open_catalog(settings.catalog), table).scan().to_arrow().sort_by("id")
    # A process of its own, as every run has: its Spark starts with the PostgreSQL JDBC driver.
    result = subprocess.run([str(BIN / "floe-dagster"), "trigger", table.qualified, "--operation", "REWRITE_DATA_FILES"],
                            env={**os.environ, "FLOE_CONFIG": str(config)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "REWRITE_DATA_FILES: SUCCEEDED" in result.stdout, result.stdout[-3000:]
    after = load_table(open_catalog(settings.catalog), table)
    assert table_counts(after)["data_files"] == 1
    assert after.scan().to_arrow().sort_by("id").equals(before)
    # PyIceberg commits right after the Spark run (no lock left behind on PostgreSQL either).
    after.append(rows(10_000, 3))
    history = Coordination(settings.coordination_url).all_history()[(table.qualified, Operation.REWRITE_DATA_FILES)]
    assert history.last_success_start is not None


TICK = """
import json, sys, time
from datetime import datetime, timezone
from dagster import DagsterInstance
from floe_dagster.settings import load_settings
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.scheduling.tick import run_tick
settings = load_settings(sys.argv[1])
start_at = float(sys.argv[2])
with DagsterInstance.get() as instance:
    time.sleep(max(0.0, start_at - time.time()))
    coordination = CoordinationResource.from_settings(settings).coordination
    result = run_tick(settings, instance, coordination, datetime.now(timezone.utc), sys.argv[3], None)
print(json.dumps({"admitted": [d.item_key for d in result.admitted], "skipped": result.skipped_tick}))
"""


def test_two_replicas_ticking_at_once_never_admit_the_same_item(pg_lake):
    settings, config = pg_lake
    env = {**os.environ}
    start_at = time.time() + 8  # both processes have imported everything by then
    processes = [
        subprocess.Popen([sys.executable, "-c", TICK, str(config), str(start_at), f"replica-{i}"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    admitted = [key for output in outputs for key in output["admitted"]]
    assert admitted == [f"{settings.catalog.name}.sales.orders|REWRITE_DATA_FILES|interval:first|attempt-0"]
    # The loser either found the scheduler lock held or planned after the winner (in flight).
    loser = next(output for output in outputs if not output["admitted"])
    assert loser["skipped"] is None or loser["skipped"].startswith("lock_held")
    ledger = Coordination(settings.coordination_url).ledger_rows(f"{settings.catalog.name}.sales.orders")
    assert len(ledger) == 1


def test_two_runs_on_one_table_never_overlap(pg_lake, dagster_home):
    settings, config = pg_lake
    table = f"{settings.catalog.name}.sales.orders"
    env = {**os.environ, "FLOE_CONFIG": str(config)}
    processes = [
        subprocess.Popen([str(BIN / "floe-dagster"), "trigger", table, "--operation", "REWRITE_DATA_FILES"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    codes = sorted(p.returncode for p in processes)
    assert codes == [0, 1], outputs
    loser = outputs[[p.returncode for p in processes].index(1)]
    assert f"lock floe-table:{table} is held" in loser
    history = Coordination(settings.coordination_url).all_history()[(table, Operation.REWRITE_DATA_FILES)]
    assert history.consecutive_failures == 0 and history.runs == 1  # the loser did not count


def test_maintenance_on_a_spark_standalone_cluster(pg_lake, tmp_path):
    settings, config = pg_lake
    spark_home = Path(__import__("pyspark").__file__).parent
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(tmp_path / "work"), "SPARK_LOG_DIR": str(tmp_path / "logs")}
    port = 17000 + os.getpid() % 1000
    master = subprocess.Popen(
        [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(port + 1)], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    worker = subprocess.Popen(
        [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
         f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
         "--webui-port", str(port + 2), "--work-dir", str(tmp_path / "work")], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        table = f"{settings.catalog.name}.sales.orders"
        result = subprocess.run(
            [str(BIN / "floe-dagster"), "trigger", table, "--operation", "REWRITE_DATA_FILES"],
            env={**os.environ, "FLOE_CONFIG": str(config), "FLOE_SPARK_MASTER": f"spark://127.0.0.1:{port}",
                 "SPARK_LOCAL_IP": "127.0.0.1"},
            capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "REWRITE_DATA_FILES: SUCCEEDED" in result.stdout
        # The work ran on the cluster: the worker started an executor for the floe-dagster app.
        assert list((tmp_path / "work").glob("app-*/*/stderr")), "no executor ran on the worker"
        counts = table_counts(load_table(open_catalog(settings.catalog), TableName.parse("sales.orders",
                                                                                          settings.catalog.name)))
        assert counts["data_files"] == 1 and counts["records"] == 120
    finally:
        for process in (worker, master):
            os.killpg(process.pid, 9)
            process.wait()
