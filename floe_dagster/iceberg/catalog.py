"""Catalog access through PyIceberg: load the catalog, list tables, derive Spark's catalog conf.

The catalog section of ``floe.yaml`` is passed unchanged to PyIceberg's ``load_catalog``, so every
PyIceberg catalog type works and ``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__...`` still apply.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy import text

from floe_dagster.core.tables import TableName
from floe_dagster.settings import DEFAULT_POSTGRES_JDBC, DEFAULT_SQLITE_JDBC, CatalogSettings
from floe_dagster.errors import CatalogUnavailable, UnknownTable


SQLITE_BUSY_TIMEOUT_MS = 120_000


def open_catalog(settings: CatalogSettings) -> Catalog:
    uri = settings.properties.get("uri", "")
    if settings.properties.get("type") == "sql" and uri.startswith("sqlite:///"):
        # A SQLite catalog is a local file: create its folder, as the embedded default expects.
        os.makedirs(os.path.dirname(os.path.abspath(uri.split(":///", 1)[1].split("?", 1)[0])) or ".", exist_ok=True)
    try:
        return load_catalog(settings.name, **settings.properties)
    except Exception as exc:  # PyIceberg raises many kinds; all mean the same to the caller
        raise CatalogUnavailable(f"catalog '{settings.name}' could not be loaded: {exc}") from exc


def list_tables(catalog: Catalog) -> list[TableName]:
    """Every table in the catalog, nested namespaces included, sorted by qualified name."""
    try:
        if isinstance(catalog, SqlCatalog):
            return sorted(list_table_metadata_locations(catalog))
        found: list[TableName] = []
        pending = [tuple(ns) for ns in catalog.list_namespaces()]
        seen: set[tuple[str, ...]] = set()
        while pending:
            namespace = pending.pop()
            if namespace in seen:
                continue
            seen.add(namespace)
            for identifier in catalog.list_tables(namespace):
                found.append(TableName(catalog.name, tuple(identifier[:-1]), identifier[-1]))
            try:
                pending.extend(tuple(ns) for ns in catalog.list_namespaces(namespace))
            except NotImplementedError:
                pass
        return sorted(set(found))
    except CatalogUnavailable:
        raise
    except Exception as exc:
        raise CatalogUnavailable(f"catalog '{catalog.name}' could not list tables: {exc}") from exc


def list_table_metadata_locations(catalog: SqlCatalog) -> dict[TableName, str | None]:
    """For the SQL catalog: every table with its current metadata location, in one query."""
    query = text(
        "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :name"
    )
    with catalog.engine.connect() as connection:
        rows = connection.execute(query, {"name": catalog.name}).all()
    return {
        TableName(catalog.name, tuple(namespace.split(".")), name): location for namespace, name, location in rows
    }


def load_table(catalog: Catalog, table: TableName) -> Table:
    try:
        return catalog.load_table(table.identifier)
    except NoSuchTableError:
        raise UnknownTable(f"table '{table.qualified}' does not exist in catalog '{catalog.name}'") from None
    except Exception as exc:
        raise CatalogUnavailable(f"catalog '{catalog.name}' could not load '{table.qualified}': {exc}") from exc


def table_counts(table: Table) -> dict[str, int]:
    """The numbers a maintenance run reports before and after: from the snapshot summary and the
    current manifest list (one small read), never from data files."""
    metadata = table.metadata
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot and snapshot.summary else None

    def total(key: str) -> int:
        value = summary.get(key) if summary is not None else None
        return int(value) if value is not None else 0

    manifests = len(snapshot.manifests(table.io)) if snapshot else 0
    return {
        "data_files": total("total-data-files"),
        "delete_files": total("total-delete-files"),
        "position_deletes": total("total-position-deletes"),
        "records": total("total-records"),
        "total_bytes": total("total-files-size"),
        "snapshots": len(metadata.snapshots),
        "manifests": manifests,
    }


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


def describe(settings: CatalogSettings) -> dict[str, Any]:
    """Catalog settings for display, with secrets masked."""
    hidden = ("password", "secret", "token", "credential")
    return {k: ("***" if any(h in k.lower() for h in hidden) else v) for k, v in settings.properties.items()}
