"""Derived Dagster names and the Spark catalog conf derived from PyIceberg properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe_dagster.core.tables import TableName
from floe_dagster.defs.names import (
    asset_key_for,
    group_name_for,
    namespace_for_group,
    table_for_asset_key,
    unmappable_reason,
)
from floe_dagster.errors import CatalogUnavailable
from floe_dagster.settings import DEFAULT_POSTGRES_JDBC, DEFAULT_SQLITE_JDBC, CatalogSettings
from floe_dagster.spark.catalog_conf import spark_catalog_conf


def test_group_names_are_valid_and_readable():
    assert group_name_for(("sales",)) == "sales"
    assert group_name_for(("a", "b")) == "a_x2e_b"
    assert group_name_for(("a_b",)) == "a__b"
    assert group_name_for(("a.b",)) == group_name_for(("a", "b"))  # the same dotted namespace


@given(st.lists(st.text(min_size=1, max_size=8).filter(lambda s: "." not in s), min_size=1, max_size=3))
def test_group_names_are_reversible_and_valid(namespace):
    group = group_name_for(tuple(namespace))
    assert group and all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in group)
    assert namespace_for_group(group) == tuple(namespace)


def test_asset_keys_keep_real_names():
    table = TableName("demo", ("a", "b"), "it's; odd")
    assert asset_key_for(table).path == ["demo", "a", "b", "it's; odd"]
    assert table_for_asset_key(asset_key_for(table)) == table
    assert unmappable_reason(table) is None
    assert "control character" in unmappable_reason(TableName("demo", ("a",), "bad\nname"))
    assert "'/'" in unmappable_reason(TableName("demo", ("a",), "x/y"))


def test_table_name_parse():
    assert TableName.parse("demo.sales.orders", "demo") == TableName("demo", ("sales",), "orders")
    assert TableName.parse("sales.orders", "demo") == TableName("demo", ("sales",), "orders")
    assert TableName.parse("demo.a.b.t", "demo") == TableName("demo", ("a", "b"), "t")
    for bad in ("orders", "a..b", ""):
        with pytest.raises(ValueError):
            TableName.parse(bad, "demo")


def test_sql_catalog_on_sqlite_and_postgres():
    conf, packages = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "sqlite:////d/c.db",
                                                                  "warehouse": "file:///d/wh"}))
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.type"] == "jdbc"
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:sqlite:/d/c.db?busy_timeout=120000"
    assert conf["spark.sql.catalog.lake.warehouse"] == "file:///d/wh"
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert packages == [DEFAULT_SQLITE_JDBC]
    conf, packages = spark_catalog_conf(CatalogSettings("lake", {
        "type": "sql", "uri": "postgresql+psycopg2://floe:p%40ss@127.0.0.1:5432/lake"}))
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://127.0.0.1:5432/lake"
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "floe"
    assert conf["spark.sql.catalog.lake.jdbc.password"] == "p@ss"
    assert packages == [DEFAULT_POSTGRES_JDBC]


def test_rest_hive_and_unmapped_types():
    conf, _ = spark_catalog_conf(CatalogSettings("r", {"type": "rest", "uri": "http://127.0.0.1:8181",
                                                       "warehouse": "wh", "s3.endpoint": "http://x"}))
    assert conf["spark.sql.catalog.r.type"] == "rest" and conf["spark.sql.catalog.r.uri"] == "http://127.0.0.1:8181"
    assert conf["spark.sql.catalog.r.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    conf, _ = spark_catalog_conf(CatalogSettings("h", {"type": "hive", "uri": "thrift://h:9083"}))
    assert conf["spark.sql.catalog.h.type"] == "hive"
    with pytest.raises(CatalogUnavailable, match="catalog.spark-properties"):
        spark_catalog_conf(CatalogSettings("g", {"type": "glue"}))
    conf, _ = spark_catalog_conf(CatalogSettings("g", {"type": "glue"}, {"type": "glue", "warehouse": "s3://b"}))
    assert conf["spark.sql.catalog.g.warehouse"] == "s3://b"


def test_tables_with_spaces_and_unicode_become_assets():
    from dagster import Definitions

    from floe_dagster.defs.assets import build_table_assets
    from floe_dagster.defs.names import output_name_for
    from floe_dagster.settings import load_settings

    odd = [TableName("demo", ("sales",), "my table"), TableName("demo", ("naïve", "x"), "t+1"),
           TableName("demo", ("a.b",), "c"), TableName("demo", ("a", "b"), "c")]
    assert len({output_name_for(t) for t in odd}) == len(odd)
    assert all(output_name_for(t).isidentifier() for t in odd)
    assets = build_table_assets(odd, load_settings(environ={}))
    keys = Definitions(assets=[assets], resources={"engine": object()}).resolve_asset_graph().get_all_asset_keys()
    assert {tuple(k.path) for k in keys} == {("demo", *t.namespace, t.name) for t in odd}


def _settings(tmp_path, text, environ=None):
    from floe_dagster.settings import load_settings

    path = tmp_path / "floe.yaml"
    path.write_text(text)
    return load_settings(path, environ=environ or {})


REST_WITH_CONNECT = """
catalog: {name: lake, properties: {type: rest, uri: "http://127.0.0.1:8181"}}
spark: {remote: "sc://spark:15002", conf: {spark.sql.shuffle.partitions: "8", spark.executor.memory: 2g}}
"""


def test_spark_connect_conf_is_session_conf_only(tmp_path):
    from floe_dagster.spark.engine import IcebergSparkEngine, connect_session_conf, spark_conf_for

    settings = _settings(tmp_path, REST_WITH_CONNECT)
    # The client sends only the URL at start-up: jars, extensions and memory are the server's.
    assert spark_conf_for(settings) == {"spark.remote": "sc://spark:15002"}
    session = connect_session_conf(settings)
    assert session["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert session["spark.sql.catalog.lake.type"] == "rest"
    assert session["spark.sql.catalog.lake.uri"] == "http://127.0.0.1:8181"
    assert session["spark.sql.shuffle.partitions"] == "8"  # floe.yaml's spark.conf wins
    assert session["spark.sql.session.timeZone"] == "UTC"
    assert not any(key in session for key in ("spark.sql.extensions", "spark.jars", "spark.master", "spark.driver.memory"))
    engine = IcebergSparkEngine.from_settings(settings)
    assert engine.remote == "sc://spark:15002" and engine.session_conf == session and engine.catalog_lock is None
    # FLOE_SPARK_REMOTE overrides; without a remote nothing is set per session.
    assert spark_conf_for(_settings(tmp_path, REST_WITH_CONNECT, {"FLOE_SPARK_REMOTE": "sc://other:1"})) == {
        "spark.remote": "sc://other:1"}
    classic = _settings(tmp_path, "catalog: {name: lake, properties: {type: rest, uri: 'http://h:1'}}\n")
    assert connect_session_conf(classic) == {}
    assert spark_conf_for(classic)["spark.sql.extensions"].endswith("IcebergSparkSessionExtensions")


def test_spark_connect_refuses_a_sqlite_catalog_and_a_bad_url(tmp_path):
    from floe_dagster.errors import SettingsError

    # The embedded default catalog is SQLite: the Connect server would keep its read lock.
    with pytest.raises(SettingsError, match="cannot be used with a SQLite catalog"):
        _settings(tmp_path, "data-dir: d\n", {"FLOE_SPARK_REMOTE": "sc://127.0.0.1:15002"})
    with pytest.raises(SettingsError, match="not a Spark Connect URL"):
        _settings(tmp_path, "catalog: {name: lake, properties: {type: rest, uri: 'http://h:1'}}\nspark: {remote: 'h:15002'}\n")
    pg = "catalog: {name: lake, properties: {type: sql, uri: 'postgresql+psycopg2://u:p@db/lake'}}\nspark: {remote: 'sc://s:1'}\n"
    assert _settings(tmp_path, pg).spark.remote == "sc://s:1"
