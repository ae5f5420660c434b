"""Spark's side of the catalog: the ``spark.sql.catalog.<name>.*`` conf for Iceberg's SparkCatalog over
the same catalog PyIceberg reads (floe.yaml's ``catalog`` section), and the JDBC driver it needs.

Mapped: ``sql`` (as Iceberg's JDBC catalog, SQLite or PostgreSQL), ``rest`` and ``hive``; other types
need ``catalog.spark-properties``.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from floe_dagster.errors import CatalogUnavailable
from floe_dagster.settings import DEFAULT_POSTGRES_JDBC, DEFAULT_SQLITE_JDBC, CatalogSettings

SQLITE_BUSY_TIMEOUT_MS = 120_000


def spark_catalog_conf(settings: CatalogSettings) -> tuple[dict[str, str], list[str]]:
    """Spark conf for Iceberg's SparkCatalog over the same catalog, and the driver packages it needs.

    Mapped: ``sql`` (as Iceberg's JDBC catalog, SQLite or PostgreSQL), ``rest`` and ``hive``. Other
    types need ``catalog.spark-properties`` in floe.yaml.
    """
    props = settings.properties
    prefix = f"spark.sql.catalog.{settings.name}"
    conf: dict[str, str] = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.cache-enabled": "false"}
    packages: list[str] = []
    catalog_type = (props.get("type") or "").lower()
    if not catalog_type and props.get("uri", "").startswith(("http://", "https://")):
        catalog_type = "rest"
    if catalog_type == "sql":
        jdbc_uri, user, password, driver = _jdbc_from_sqlalchemy(props.get("uri", ""), settings.name)
        conf.update({
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": jdbc_uri,
            f"{prefix}.jdbc.schema-version": "V1",
        })
        if user:
            conf[f"{prefix}.jdbc.user"] = user
        if password:
            conf[f"{prefix}.jdbc.password"] = password
        packages.append(driver)
        if props.get("warehouse"):
            conf[f"{prefix}.warehouse"] = props["warehouse"]
    elif catalog_type == "rest":
        conf[f"{prefix}.type"] = "rest"
        for key in ("uri", "warehouse", "credential", "token", "prefix", "oauth2-server-uri", "scope"):
            if props.get(key):
                conf[f"{prefix}.{key}"] = props[key]
        for key, value in props.items():
            if key.startswith(("header.", "s3.", "rest.")):
                conf[f"{prefix}.{key}"] = value
        if any(key.startswith("s3.") for key in props):
            conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
            if props.get("s3.region"):
                conf[f"{prefix}.client.region"] = props["s3.region"]
    elif catalog_type == "hive":
        conf[f"{prefix}.type"] = "hive"
        for key in ("uri", "warehouse"):
            if props.get(key):
                conf[f"{prefix}.{key}"] = props[key]
    elif not settings.spark_properties:
        raise CatalogUnavailable(
            f"catalog '{settings.name}' has type {catalog_type or '(unset)'!r}, which floe-dagster cannot map "
            f"to Spark by itself: set catalog.spark-properties in floe.yaml to the Iceberg SparkCatalog "
            f"properties (for example type, uri, warehouse, io-impl), without the '{prefix}.' prefix"
        )
    for key, value in settings.spark_properties.items():
        conf[f"{prefix}.{key}"] = value
    return conf, packages


def _jdbc_from_sqlalchemy(uri: str, catalog_name: str) -> tuple[str, str | None, str | None, str]:
    """SQLAlchemy URL (PyIceberg's) to a JDBC URL (Iceberg's JdbcCatalog), user, password, driver."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0]
    if scheme == "sqlite":
        path = uri.split(":///", 1)[1].split("?", 1)[0] if ":///" in uri else ""
        if not path or path == ":memory:":
            raise CatalogUnavailable(
                f"catalog '{catalog_name}': an in-memory SQLite catalog cannot be shared with Spark; use a file"
            )
        # Two runs on one SQLite catalog: a commit waits for the other's read lock instead of failing.
        return f"jdbc:sqlite:{os.path.abspath(path)}?busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", None, None, DEFAULT_SQLITE_JDBC
    if scheme in ("postgresql", "postgres"):
        host = parsed.hostname or "localhost"
        port = f":{parsed.port}" if parsed.port else ""
        query = f"?{parsed.query}" if parsed.query else ""
        return (
            f"jdbc:postgresql://{host}{port}{parsed.path}{query}",
            unquote(parsed.username) if parsed.username else None,
            unquote(parsed.password) if parsed.password else None,
            DEFAULT_POSTGRES_JDBC,
        )
    raise CatalogUnavailable(
        f"catalog '{catalog_name}': SQL catalog URI scheme {parsed.scheme!r} has no JDBC mapping; "
        "use SQLite or PostgreSQL, or set catalog.spark-properties"
    )
