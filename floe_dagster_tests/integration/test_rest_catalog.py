"""An Iceberg REST catalog for real: Iceberg's own REST catalog server (its test fixture from Maven
Central) on 127.0.0.1; PyIceberg writes through it, floe-dagster lists it, and the Dagster asset
compacts a table with real Spark, whose catalog conf floe-dagster derives for ``type: rest``.

The run is a process of its own (``floe-dagster trigger``), as every Dagster run is: a Spark session
lives as long as its Python process and keeps the jars it started with, and this catalog needs no
JDBC driver, which the other tests' SQLite catalogs need in theirs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dagster import DagsterInstance

from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import rows
from floe_dagster.iceberg.catalog import list_tables, load_table, open_catalog, table_counts
from floe_dagster.iceberg.known_locations import known_locations
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster_tests.conftest import JARS_CACHE
from floe_dagster_tests.servers import rest_catalog  # noqa: F401 (a fixture)

pytestmark = pytest.mark.spark

BIN = Path(sys.executable).parent

POLICIES = """
- name: all
  tablePattern: "*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H}
"""


@pytest.fixture
def rest_lake(tmp_path, rest_catalog, dagster_home):  # noqa: F811
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICIES)
    config = tmp_path / "floe.yaml"
    config.write_text(textwrap.dedent(f"""
        data-dir: {tmp_path / 'data'}
        catalog:
          name: lake
          properties: {{type: rest, uri: "{rest_catalog.uri}"}}
        spark: {{jars-cache: {JARS_CACHE}}}
        policies: [{tmp_path / 'policies'}]
    """))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    # nested: listed through the REST namespace API; its location is one the safety envelope protects
    catalog.create_namespace(("sales", "eu"), {"location": f"{rest_catalog.warehouse.as_uri()}/sales/eu"})
    table = catalog.create_table("sales.orders", schema=rows(0, 1).schema)
    for i in range(12):
        table.append(rows(i * 10, 10))
    catalog.create_table(("sales", "eu", "refunds"), schema=rows(0, 1).schema).append(rows(0, 5))
    return settings, config, rest_catalog


def test_rest_catalog_spark_conf_is_the_documented_mapping(rest_lake):
    settings, _, server = rest_lake
    conf, packages = spark_catalog_conf(settings.catalog)
    assert conf == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.cache-enabled": "false",
        "spark.sql.catalog.lake.type": "rest",
        "spark.sql.catalog.lake.uri": server.uri,
    }
    assert packages == []  # the REST client is inside the Iceberg Spark runtime


def test_maintenance_through_a_rest_catalog(rest_lake):
    settings, config, server = rest_lake
    catalog = open_catalog(settings.catalog)
    assert list_tables(catalog) == [TableName("lake", ("sales",), "orders"), TableName("lake", ("sales", "eu"), "refunds")]
    assert refresh_table_cache(settings) == list_tables(catalog)  # what the code location loads
    # The namespaces' locations, nested ones included, walked as list_tables walks them (a table there is refused).
    assert known_locations(catalog).namespaces.get("sales.eu") == f"{server.warehouse.as_uri()}/sales/eu"

    name = TableName("lake", ("sales",), "orders")
    before = load_table(catalog, name)
    before_rows = before.scan().to_arrow().sort_by("id")
    assert table_counts(before)["data_files"] == 12 and len(before.metadata.snapshots) == 12
    # The table lives in the REST server's warehouse: the server created it, not PyIceberg.
    assert before.location().startswith(server.warehouse.as_uri())

    result = subprocess.run([str(BIN / "floe-dagster"), "trigger", "lake.sales.orders", "--operation", "REWRITE_DATA_FILES"],
                            env={**os.environ, "FLOE_CONFIG": str(config)}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "REWRITE_DATA_FILES: SUCCEEDED" in result.stdout, (
        result.stdout[-3000:] + result.stderr[-3000:])
    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(asset_key_for(name))
    metadata = {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}
    assert event.dagster_event.partition == "REWRITE_DATA_FILES"
    assert metadata["rewritten_data_files_count"] == 12
    assert metadata["data_files_before"] == 12 and metadata["data_files_after"] == 1
    assert metadata["row_check"] == "snapshot-summary" and metadata["rows_checked"] == 120

    # What the REST server now serves: one live data file, one more snapshot (a replace), same rows.
    after = load_table(open_catalog(settings.catalog), name)
    counts = table_counts(after)
    assert counts["data_files"] == 1 and counts["records"] == 120
    assert len(after.metadata.snapshots) == 13
    assert after.current_snapshot().summary.operation.value == "replace"
    assert after.current_snapshot().parent_snapshot_id == before.current_snapshot().snapshot_id
    assert after.scan().to_arrow().sort_by("id").equals(before_rows)
    # And the catalog takes PyIceberg's commits right after Spark's.
    after.append(rows(10_000, 3))
    assert table_counts(load_table(open_catalog(settings.catalog), name))["records"] == 123
