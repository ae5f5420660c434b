"""Spark's side of the catalog: the ``spark.sql.catalog.<name>.*`` conf for Iceberg's SparkCatalog over
the same catalog PyIceberg reads (floe.yaml's ``catalog`` section), and the JDBC driver it needs.

Mapped: ``sql`` (as Iceberg's JDBC catalog, SQLite or PostgreSQL), ``rest`` and ``hive``; other types
need ``catalog.spark-properties``. Tables on S3-compatible object storage are read and
written with Iceberg's ``S3FileIO`` under any catalog type (``core/storage/object_storage.py`` decides which
catalogs are), from the same ``s3.*`` properties PyIceberg uses; no Hadoop ``s3a`` is involved.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from floe_dagster.core.storage.object_storage import PATH_STYLE_ACCESS, S3_FILE_IO, s3_path_style, uses_s3
from floe_dagster.errors import CatalogUnavailable
from floe_dagster.settings import DEFAULT_POSTGRES_JDBC, DEFAULT_SQLITE_JDBC, CatalogSettings

SQLITE_BUSY_TIMEOUT_MS = 120_000


def _s3_file_io_conf(props: dict[str, str]) -> dict[str, str]:
    """The catalog's ``s3.*`` properties for Iceberg's S3FileIO, which shares PyIceberg's names for
    the endpoint and credentials (``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``,
    ``s3.session-token``) and ignores the ones it does not know; the region is ``client.region``."""
    conf = {"io-impl": S3_FILE_IO}
    conf.update({key: value for key, value in props.items() if key.startswith("s3.")})
    if props.get("s3.region"):
        conf["client.region"] = props["s3.region"]
    path_style = s3_path_style(props)
    if path_style is not None:
        conf[PATH_STYLE_ACCESS] = "true" if path_style else "false"
    return conf


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
            if key.startswith(("header.", "rest.")):
                conf[f"{prefix}.{key}"] = value
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
    if uses_s3(props, settings.spark_properties):
        conf.update({f"{prefix}.{key}": value for key, value in _s3_file_io_conf(props).items()})
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
        url = f"jdbc:sqlite:{os.path.abspath(path)}?busy_timeout={SQLITE_BUSY_TIMEOUT_MS}"
        return url, None, None, DEFAULT_SQLITE_JDBC
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
