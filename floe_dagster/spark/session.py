"""The Spark session the engine uses: its conf from the settings (the Iceberg runtime's jars and SQL
extensions, the catalog's mapping, floe.yaml's own ``spark.conf``; with Spark Connect, only the session
conf a client may set), dagster-pyspark's lazy session with its secrets held back from the resources'
config (shown masked; their real values reach the session through one ``EnvVar``, a JSON object in a
variable floe-dagster sets in its own process, redaction.secret_variable), and what a SQLite catalog
needs: a file lock serializing Spark's units of work, the catalog closed after each, its read locks
freed (see ``free_sqlite_read_locks``)."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from urllib.parse import urlparse

from dagster import EnvVar
from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config

from floe_dagster.core.basics.secrets import spark_redaction_regex, split_secret_entries
from floe_dagster.redaction import secret_variable
from floe_dagster.settings import Settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.jars import jar_file_name
from floe_dagster.spark.runtime import spark_packages

log = logging.getLogger(__name__)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Session-level SQL conf: the only kind a Spark Connect client may set on its server session.
SESSION_CONF = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}
REDACTION_REGEX = "spark.redaction.regex"


def spark_conf_for(settings: Settings) -> dict[str, str]:
    """The whole Spark conf: defaults, the catalog's mapping, jars from the cache, then user conf.

    With Spark Connect (``spark.remote``) only ``spark.remote`` itself: the server was started with
    its jars, extensions and memory, which a client cannot change (Spark refuses to modify static and
    core conf at runtime); the engine sets the catalog per session (``connect_session_conf``).
    """
    if settings.spark.remote:
        return {"spark.remote": settings.spark.remote}
    catalog_conf = spark_catalog_conf(settings.catalog)[0]
    conf = {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.app.name": "floe-dagster",
        **SESSION_CONF,
        "spark.master": settings.spark.master,
    }
    conf.update(catalog_conf)
    packages = spark_packages(settings)
    # Paths only: the download happens when a session starts, so loading the code location stays cheap.
    jars = [str(Path(settings.spark.jars_cache) / jar_file_name(p)) for p in packages] + list(settings.spark.jars)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(settings.spark.conf)
    # Spark hides what the one masking rule calls a secret (its default misses credential and header.*).
    conf[REDACTION_REGEX] = spark_redaction_regex(settings.spark.conf.get(REDACTION_REGEX))
    return conf


def connect_session_conf(settings: Settings) -> dict[str, str]:
    """What a Spark Connect client sets on its server session: ``spark.sql.catalog.<name>.*`` is
    session conf (Spark reads it when the session first uses the catalog), so the server needs no
    catalog of its own, only the Iceberg runtime (and the catalog's JDBC driver) and extensions."""
    if not settings.spark.remote:
        return {}
    return {**SESSION_CONF, **spark_catalog_conf(settings.catalog)[0], **settings.spark.conf}


def secret_entries(secret_conf: str | None) -> dict[str, str]:
    """The conf entries held back from the resources' config (an EnvVar until Dagster resolves it)."""
    if not secret_conf:
        return {}
    return json.loads(secret_conf.get_value() if isinstance(secret_conf, EnvVar) else secret_conf)


class FloeSparkSession(LazyPySparkResource):
    """dagster-pyspark's lazy session, whose ``spark_config`` is shown with its secrets masked: the
    session starts with those entries from ``secret_conf`` (an EnvVar, see the module's doc)."""

    secret_conf: str | None = None

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = spark_session_from_config({**self.spark_config, **secret_entries(self.secret_conf)})


def held_back(settings: Settings) -> tuple[dict[str, str], dict[str, str], str | None]:
    """The Spark conf and the Connect session conf as shown, and the EnvVar holding what they mask."""
    shown_conf, secret_conf = split_secret_entries(spark_conf_for(settings))
    shown_session, secret_session = split_secret_entries(connect_session_conf(settings))
    secrets = {**secret_conf, **secret_session}
    if not secrets:
        return shown_conf, shown_session, None
    name = secret_variable("SPARK_CONF", f"{settings.source}\0{settings.catalog.name}",
                           json.dumps(secrets, sort_keys=True))
    return shown_conf, shown_session, EnvVar(name)


SQLITE_CATALOG_WAIT_S = 3600.0


def sqlite_catalog_lock(settings: Settings) -> str | None:
    """The file lock serializing Spark's units of work on a SQLite catalog (None: another catalog)."""
    uri = spark_catalog_conf(settings.catalog)[0].get(f"spark.sql.catalog.{settings.catalog.name}.uri", "")
    return f"floe-sqlite-catalog:{uri.split('?', 1)[0]}" if uri.startswith("jdbc:sqlite:") else None


def free_sqlite_read_locks(spark_session: object, catalog_name: str) -> None:
    """Iceberg 1.10's JdbcCatalog.initialize() leaves two metadata result sets open on a pooled SQLite
    connection: a read lock for the whole unit of work. A PyIceberg writer's commit then waits for
    the unit to end, and Spark's own commit, finding that writer waiting, fails at once with
    SQLITE_BUSY (SQLite's deadlock rule skips the busy timeout). Resetting the catalog
    connection's statements right after initialization ends that read transaction. (1.11 closes
    them itself; resetting a finished statement is harmless.)"""
    jvm_session = getattr(spark_session, "_jsparkSession", None)
    if jvm_session is None:  # Spark Connect: the server owns the catalog
        return
    try:
        iceberg_catalog = jvm_session.sessionState().catalogManager().catalog(catalog_name).icebergCatalog()
        pool_field = iceberg_catalog.getClass().getDeclaredField("connections")
        pool_field.setAccessible(True)
        pool = pool_field.get(iceberg_catalog)
        clients_field = pool.getClass().getSuperclass().getDeclaredField("clients")  # ClientPoolImpl
        clients_field.setAccessible(True)
        for connection in clients_field.get(pool).toArray():
            database = connection.getDatabase()  # org.sqlite.core.DB
            statements_field = database.getClass().getSuperclass().getDeclaredField("stmts")
            statements_field.setAccessible(True)
            for statement in statements_field.get(database).toArray():
                pointer_field = statement.getClass().getDeclaredField("ptr")
                pointer_field.setAccessible(True)
                database.reset(pointer_field.getLong(statement))
    except Exception as exc:  # another Iceberg or driver version: PyIceberg writers wait, as before
        log.warning("could not free the SQLite catalog's read lock inside Spark: %s", exc)


def close_spark_catalog(spark_session: object, catalog_name: str) -> None:
    """Close the Iceberg catalog inside a classic Spark session and reset Spark's catalog manager, so it
    holds no connection (and no SQLite lock); the next use opens a fresh catalog."""
    jvm_session = getattr(spark_session, "_jsparkSession", None)
    if jvm_session is None:  # a Connect session all the same (SPARK_REMOTE set outside floe.yaml)
        return
    try:
        manager = jvm_session.sessionState().catalogManager()
        if manager.isCatalogRegistered(catalog_name):
            spark_catalog = manager.catalog(catalog_name)
            iceberg_catalog = spark_catalog.icebergCatalog()
            if hasattr(iceberg_catalog, "close"):
                iceberg_catalog.close()
            manager.reset()
    except Exception as exc:  # never hide the error of the work itself behind a cleanup error
        log.warning("could not close the Iceberg catalog %s inside Spark: %s", catalog_name, exc)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_reachable(remote: str, timeout_s: float = 10.0) -> None:
    """Open (and close) a TCP connection to a Spark Connect URL's host and port (sc://host:port/;...)."""
    parsed = urlparse("http://" + remote.split("://", 1)[-1].split("/", 1)[0])
    with socket.create_connection((parsed.hostname or "localhost", parsed.port or 15002), timeout=timeout_s):
        pass
