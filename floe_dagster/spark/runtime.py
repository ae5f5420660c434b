"""Which Maven packages Spark loads: the Iceberg Spark runtime built for the installed PySpark's Spark
line and Scala version, the catalog's JDBC driver, Iceberg's AWS bundle for a catalog on S3, and the
user's extra packages.

The runtime is chosen here, from the PySpark that is installed, so a runtime built for another
Spark (``iceberg-spark-runtime-3.5_2.12`` on Spark 4.1, say) cannot be loaded by mistake: such a
mismatch fails inside the JVM with class-loading errors far from the cause. Also here: what a Spark
Connect server started from the installed PySpark needs (the test servers and ``setup --test-servers``).
"""

from __future__ import annotations

import importlib.metadata
import re

from floe_dagster.core.storage.object_storage import uses_s3
from floe_dagster.errors import SettingsError
from floe_dagster.settings import DEFAULT_ICEBERG_VERSION, Settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.jars import SPARK_CONNECT_SERVER_PACKAGE

ICEBERG_GROUP = "org.apache.iceberg"
# Spark line -> the Scala version its PySpark distribution is built with (Spark 4 dropped 2.12).
SCALA_FOR_SPARK_LINE = {"3.5": "2.12", "4.0": "2.13", "4.1": "2.13"}
# The first Iceberg release with a runtime for each Spark line (Maven Central); older releases of
# the floe-supported range simply have none for the newer lines.
FIRST_ICEBERG_FOR_SPARK_LINE = {"3.5": (1, 4, 0), "4.0": (1, 10, 0), "4.1": (1, 11, 0)}
# The last Iceberg release with a runtime for a Spark line Iceberg has since dropped: Maven Central has
# iceberg-spark-runtime-4.0_2.13 up to 1.11.0; 1.12.0 publishes runtimes for Spark 3.5 and 4.1 only.
LAST_ICEBERG_FOR_SPARK_LINE = {"4.0": (1, 11, 0)}
# floe-dagster's procedures and estimates follow Iceberg 1.10 and later.
OLDEST_ICEBERG = (1, 10, 0)
_RUNTIME_ARTIFACT = re.compile(r"^iceberg-spark-runtime-(\d+\.\d+)_(\d+\.\d+)$")
_RUNTIME_JAR = re.compile(r"^iceberg-spark-runtime-(\d+\.\d+)_(\d+\.\d+)-[^/]*\.jar$")


def installed_spark_line() -> str:
    """``major.minor`` of the installed PySpark, which is also the Spark the driver runs."""
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        raise SettingsError("PySpark is not installed: install floe-dagster with its dependencies") from None
    return ".".join(version.split(".")[:2])


def effective_iceberg_version(settings: Settings, spark_line: str | None = None) -> str:
    """The Iceberg release Spark loads: ``spark.iceberg-version`` when set, else floe-dagster's default,
    or, on a Spark line the default publishes no runtime for (4.0), the last release that has one, so
    an unset key never asks Maven Central for a runtime that does not exist."""
    if settings.spark.iceberg_version:
        return settings.spark.iceberg_version
    last = LAST_ICEBERG_FOR_SPARK_LINE.get(spark_line or installed_spark_line())
    if last is not None and last < _release(DEFAULT_ICEBERG_VERSION):
        return ".".join(map(str, last))
    return DEFAULT_ICEBERG_VERSION


def iceberg_spark_runtime(iceberg_version: str, spark_line: str) -> str:
    """The Maven coordinate of Iceberg's Spark runtime for this Spark line, or a SettingsError
    naming what to change."""
    scala = SCALA_FOR_SPARK_LINE.get(spark_line)
    if scala is None:
        raise SettingsError(
            f"PySpark {spark_line} is not supported: Iceberg publishes Spark runtimes for Spark "
            f"{', '.join(SCALA_FOR_SPARK_LINE)} only; install one of those PySpark lines (pip install 'pyspark<4.2')"
        )
    release = _release(iceberg_version)
    if release < OLDEST_ICEBERG:
        raise SettingsError(
            f"spark.iceberg-version {iceberg_version} is older than floe-dagster supports "
            f"({'.'.join(map(str, OLDEST_ICEBERG))} or later)"
        )
    if release < FIRST_ICEBERG_FOR_SPARK_LINE[spark_line]:
        first = ".".join(map(str, FIRST_ICEBERG_FOR_SPARK_LINE[spark_line]))
        raise SettingsError(
            f"spark.iceberg-version {iceberg_version} has no Spark runtime for Spark {spark_line} (the installed "
            f"PySpark): Iceberg publishes one from {first}; set spark.iceberg-version to {first} or later"
        )
    last = LAST_ICEBERG_FOR_SPARK_LINE.get(spark_line)
    if last is not None and release > last:
        newest = ".".join(map(str, last))
        raise SettingsError(
            f"spark.iceberg-version {iceberg_version} has no Spark runtime for Spark {spark_line} (the installed "
            f"PySpark): Iceberg's last one for it is {newest}; set spark.iceberg-version to {newest} (or leave it "
            f"unset), or install PySpark 4.1 for Iceberg {iceberg_version}"
        )
    return f"{ICEBERG_GROUP}:iceberg-spark-runtime-{spark_line}_{scala}:{iceberg_version}"


def spark_packages(settings: Settings, spark_line: str | None = None) -> list[str]:
    """Every Maven package Spark loads, in order: the Iceberg runtime, the user's packages, the
    catalog's drivers. A runtime listed in ``spark.packages`` (how 1.10.x was pinned before
    ``spark.iceberg-version``) or ``spark.jars`` replaces floe-dagster's when it matches the
    installed PySpark, and is refused otherwise."""
    spark_line = spark_line or installed_spark_line()
    iceberg_version = effective_iceberg_version(settings, spark_line)
    listed_runtime = [
        *(("spark.packages", p, _runtime_line(p)) for p in settings.spark.packages),
        *(("spark.jars", j, _runtime_jar_line(j)) for j in settings.spark.jars),
    ]
    listed_runtime = [(key, entry, line) for key, entry, line in listed_runtime if line is not None]
    for key, entry, (line, scala) in listed_runtime:
        if (line, scala) != (spark_line, SCALA_FOR_SPARK_LINE.get(spark_line)):
            raise SettingsError(
                f"{key} lists {entry}, built for Spark {line} (Scala {scala}), but the installed "
                f"PySpark is {spark_line}: remove it from {key} and set spark.iceberg-version instead; "
                f"floe-dagster then loads {iceberg_spark_runtime(iceberg_version, spark_line)}"
            )
    runtime = [] if listed_runtime else [iceberg_spark_runtime(iceberg_version, spark_line)]
    drivers = spark_catalog_conf(settings.catalog)[1]
    has_aws_bundle = any(":iceberg-aws-bundle:" in p for p in settings.spark.packages)
    if uses_s3(settings.catalog.properties, settings.catalog.spark_properties) and not has_aws_bundle:
        # S3FileIO is inside the runtime; the AWS SDK it calls is not.
        drivers = [iceberg_aws_bundle(iceberg_version), *drivers]
    return [*runtime, *settings.spark.packages, *(d for d in drivers if d not in settings.spark.packages)]


def iceberg_aws_bundle(iceberg_version: str) -> str:
    """Iceberg's AWS bundle (the AWS SDK that S3FileIO calls), of the runtime's Iceberg version."""
    return f"{ICEBERG_GROUP}:iceberg-aws-bundle:{iceberg_version}"


def spark_connect_server_packages(spark_line: str | None = None) -> list[str]:
    """What a Spark Connect server started from the installed PySpark needs besides the Iceberg
    runtime: PySpark 3.5 from pip ships no Connect server, so its jar comes from Maven Central;
    PySpark 4 ships its own (``pyspark/jars/spark-connect_2.13-<version>.jar``), and a 3.5 jar would
    be the wrong Scala."""
    return [SPARK_CONNECT_SERVER_PACKAGE] if (spark_line or installed_spark_line()) == "3.5" else []


def _runtime_jar_line(path: str) -> tuple[str, str] | None:
    match = _RUNTIME_JAR.match(path.replace("\\", "/").rsplit("/", 1)[-1])
    return (match.group(1), match.group(2)) if match else None


def _runtime_line(coordinate: str) -> tuple[str, str] | None:
    parts = coordinate.split(":")
    match = _RUNTIME_ARTIFACT.match(parts[1]) if len(parts) >= 3 and parts[0] == ICEBERG_GROUP else None
    return (match.group(1), match.group(2)) if match else None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])
