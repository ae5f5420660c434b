"""Tables on S3: which catalogs are, and what each side gets from the same catalog properties (Spark's
S3FileIO conf and the AWS bundle, PyIceberg's addressing, orphan cleanup's prefix listing)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from floe_dagster.core.storage.object_storage import s3_path_style, storage_description, uses_s3
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import JarResolutionError
from floe_dagster.iceberg.catalog import pyiceberg_properties
from floe_dagster.settings import DEFAULT_SQLITE_JDBC, CatalogSettings, load_settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.jars import jar_file_name
from floe_dagster.spark.operation_steps import build_procedure_call
from floe_dagster.spark.runtime import iceberg_aws_bundle, iceberg_spark_runtime, spark_packages

S3_LAKE = {
    "type": "sql", "uri": "sqlite:////d/c.db", "warehouse": "s3://lakehouse/warehouse",
    "s3.endpoint": "http://minio:9000", "s3.access-key-id": "floe", "s3.secret-access-key": "change-me",
    "s3.region": "us-east-1",
}
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("properties, spark_properties, expected", [
    ({"warehouse": "s3://b/w"}, {}, True),
    ({"warehouse": "S3A://b/w"}, {}, True),
    ({"type": "rest", "uri": "http://r", "s3.endpoint": "http://m"}, {}, True),
    ({"type": "glue"}, {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}, True),
    ({"warehouse": "/data/lake"}, {}, False),
    ({"warehouse": "file:///data/lake", "uri": "sqlite:////d/c.db"}, {}, False),
    ({"type": "rest", "uri": "http://r", "warehouse": "prod"}, {}, False),
])
def test_which_catalogs_use_s3(properties, spark_properties, expected):
    assert uses_s3(properties, spark_properties) is expected


@pytest.mark.parametrize("properties, expected", [
    ({"s3.endpoint": "http://m"}, True),  # PyArrow's default for a custom endpoint, and so Spark's here
    ({"s3.endpoint": "http://m", "s3.path-style-access": "false"}, False),
    ({"s3.endpoint": "http://m", "s3.force-virtual-addressing": "true"}, False),
    ({"s3.force-virtual-addressing": "false"}, True),
    ({"s3.path-style-access": "TRUE", "s3.force-virtual-addressing": "true"}, True),  # Iceberg's name wins
    ({"s3.region": "eu-west-1"}, None),  # AWS S3 itself: each side's default
])
def test_both_sides_address_the_bucket_alike(properties, expected):
    assert s3_path_style(properties) is expected
    forced = pyiceberg_properties(properties).get("s3.force-virtual-addressing")
    if expected is None:
        assert forced is None
    else:
        assert forced == properties.get("s3.force-virtual-addressing", "false" if expected else "true")


def test_sql_catalog_on_s3_gets_s3_file_io_with_the_same_endpoint_and_keys():
    conf, packages = spark_catalog_conf(CatalogSettings("lake", dict(S3_LAKE)))
    prefix = "spark.sql.catalog.lake"
    assert {k: v for k, v in conf.items() if k.startswith(prefix + ".")} == {
        f"{prefix}.cache-enabled": "false",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": "jdbc:sqlite:/d/c.db?busy_timeout=120000",
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.warehouse": "s3://lakehouse/warehouse",
        f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{prefix}.s3.endpoint": "http://minio:9000",
        f"{prefix}.s3.access-key-id": "floe",
        f"{prefix}.s3.secret-access-key": "change-me",
        f"{prefix}.s3.region": "us-east-1",
        f"{prefix}.client.region": "us-east-1",
        f"{prefix}.s3.path-style-access": "true",
    }
    assert packages == [DEFAULT_SQLITE_JDBC]
    # catalog.spark-properties still have the last word.
    conf, _ = spark_catalog_conf(CatalogSettings("lake", dict(S3_LAKE), {"s3.path-style-access": "false"}))
    assert conf[f"{prefix}.s3.path-style-access"] == "false"
    # A warehouse on S3 without s3.* keys (credentials from the environment): S3FileIO all the same.
    conf, _ = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "sqlite:////d/c.db",
                                                          "warehouse": "s3://lakehouse/w"}))
    assert conf[f"{prefix}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert f"{prefix}.s3.path-style-access" not in conf


def test_a_local_catalog_gets_no_s3_conf():
    conf, _ = spark_catalog_conf(CatalogSettings("lake", {"type": "sql", "uri": "sqlite:////d/c.db",
                                                          "warehouse": "/data/lake"}))
    assert not any(".io-impl" in k or ".s3." in k or ".client.region" in k for k in conf)


def test_spark_loads_the_aws_bundle_of_the_runtimes_iceberg_version_for_a_catalog_on_s3(tmp_path):
    def packages(catalog: str, spark: str = "") -> list[str]:
        path = tmp_path / "floe.yaml"
        path.write_text(f"catalog:\n  name: lake\n  properties: {catalog}\n" + spark)
        return spark_packages(load_settings(path, environ={}), "3.5")

    on_s3 = packages("{type: sql, uri: 'sqlite:////d/c.db', warehouse: 's3://b/w'}",
                     "spark:\n  iceberg-version: 1.10.2\n")
    assert on_s3 == [iceberg_spark_runtime("1.10.2", "3.5"), iceberg_aws_bundle("1.10.2"), DEFAULT_SQLITE_JDBC]
    assert iceberg_aws_bundle("1.10.2") == "org.apache.iceberg:iceberg-aws-bundle:1.10.2"
    assert not any("aws" in p for p in packages("{type: sql, uri: 'sqlite:////d/c.db', warehouse: /d/w}"))
    # One the user pins in spark.packages is kept, not doubled.
    pinned = packages("{type: rest, uri: 'http://r', s3.endpoint: 'http://m'}",
                      "spark:\n  packages: ['org.apache.iceberg:iceberg-aws-bundle:1.11.0']\n")
    assert [p for p in pinned if "aws-bundle" in p] == ["org.apache.iceberg:iceberg-aws-bundle:1.11.0"]


def test_orphan_cleanup_lists_by_prefix_with_an_object_store_file_io():
    table = TableName("lake", ("sales",), "orders")
    on_s3 = build_procedure_call(Operation.ORPHAN_CLEANUP, table, OrphanCleanupConfig(), NOW,
                                 file_io="org.apache.iceberg.aws.s3.S3FileIO")
    assert on_s3.sql.endswith(", prefix_listing => true)") and on_s3.arguments["prefix_listing"] is True
    # Hadoop's FileSystem lists local and HDFS tables, as before.
    for file_io in (None, "org.apache.iceberg.hadoop.HadoopFileIO"):
        call = build_procedure_call(Operation.ORPHAN_CLEANUP, table, OrphanCleanupConfig(), NOW, file_io=file_io)
        assert "prefix_listing" not in call.sql and "prefix_listing" not in call.arguments
    # Only orphan cleanup lists files.
    expire = build_procedure_call(Operation.EXPIRE_SNAPSHOTS, table, ExpireSnapshotsConfig(), NOW,
                                  file_io="org.apache.iceberg.aws.s3.S3FileIO")
    assert "prefix_listing" not in expire.sql


def test_storage_is_described_for_messages():
    assert storage_description(S3_LAKE) == "object storage at http://minio:9000 (s3.endpoint)"
    assert storage_description({"s3.region": "eu-west-1"}) == "AWS S3 (region eu-west-1)"


def test_maven_coordinates_with_a_classifier():
    assert jar_file_name("org.gaul:s3proxy:4.1.0:jar-with-dependencies") == "s3proxy-4.1.0-jar-with-dependencies.jar"
    assert jar_file_name("org.xerial:sqlite-jdbc:3.47.1.0") == "sqlite-jdbc-3.47.1.0.jar"
    for bad in ("org.gaul:s3proxy", "a:b:c:d:e", "a::c"):
        with pytest.raises(JarResolutionError, match="group:artifact:version:classifier"):
            jar_file_name(bad)
