"""Shared fixtures: a real embedded lakehouse (SQLite catalog, warehouse folder), a real Dagster
instance in a temporary DAGSTER_HOME, and the real Spark engine with the Iceberg runtime."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import pytest

from floe_dagster.instance import project_file

JARS_CACHE = os.environ.get("FLOE_TEST_JARS_CACHE") or str(Path.home() / ".cache" / "floe-dagster" / "jars")


def _java_home() -> str | None:
    for candidate in [os.environ.get("JAVA_HOME"), *sorted(glob.glob("/usr/lib/jvm/java-17-openjdk-*"))]:
        if candidate and os.path.exists(os.path.join(candidate, "bin", "java")):
            return candidate
    return None


if _java_home():
    os.environ["JAVA_HOME"] = _java_home()


def write_settings(root: Path, policies: str, extra: str = "") -> Path:
    """A floe.yaml for an embedded lakehouse under ``root`` with the given policy YAML."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "policies.yaml").write_text(textwrap.dedent(policies))
    config = root / "floe.yaml"
    config.write_text(
        f"data-dir: {root / 'data'}\n"
        f"policies: [{root / 'policies'}]\n"
        f"spark:\n  jars-cache: {JARS_CACHE}\n"
        + textwrap.dedent(extra)
    )
    return config


def configured(root: Path, monkeypatch, policies: str, extra: str = ""):
    """Settings of an embedded lakehouse under ``root`` (write_settings), also the ones the sensor and
    the runs read (FLOE_CONFIG)."""
    from floe_dagster.settings import load_settings

    config = write_settings(root, policies, extra)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    return load_settings(config, environ={})


@pytest.fixture
def dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@contextmanager
def dagster_daemon(env: Mapping[str, str], workspace: str = "workspace.yaml") -> Iterator[subprocess.Popen]:
    """The real ``dagster-daemon run -w <workspace>`` from the project's root, in its own session, stopped
    (the whole process group: its code servers too) when the block ends."""
    root = Path(__file__).resolve().parents[1]
    daemon = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", workspace],
                              cwd=root, env=dict(env), start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        yield daemon
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()


# The databases ./dev's setup_postgres creates; tests wipe and refill their tables, so each pytest-xdist
# worker (PYTEST_XDIST_WORKER: gw0, gw1, ...) gets copies of its own, created on first use (the floe role
# has CREATEDB); a serial run uses these names as they are.
TEST_DATABASES = ("floe_dagster", "floe_catalog", "floe_coordination")


def worker_database(database: str) -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"{database}_{worker}" if worker and database in TEST_DATABASES else database


def _create_database(base: str, database: str) -> None:
    import sqlalchemy

    admin = sqlalchemy.create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            exists = connection.execute(sqlalchemy.text("SELECT 1 FROM pg_database WHERE datname = :name"),
                                        {"name": database}).first()
            if not exists:
                connection.execute(sqlalchemy.text(f'CREATE DATABASE "{database}"'))
    finally:
        admin.dispose()


def postgres_url(database: str) -> str:
    """A URL for one of the test databases (this worker's copy of it: worker_database); fails (never
    skips) with a clear message when the server on 127.0.0.1:5432 cannot be reached, since ./dev test
    starts it."""
    import sqlalchemy

    base = os.environ.get("FLOE_TEST_PG_URL", "postgresql://floe:floe@127.0.0.1:5432")
    requested, database = database, worker_database(database)
    url = f"{base}/{database}"
    try:
        if database != requested:
            _create_database(base, database)
        engine = sqlalchemy.create_engine(url)
        with engine.connect():
            pass
        engine.dispose()
    except Exception as exc:
        pytest.fail(
            f"PostgreSQL is needed at {base} (database {database}, role floe): {exc}. "
            "Run the tests with ./dev test, which starts it, or start it and create the role and databases.",
            pytrace=False,
        )
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def instance_home(request, tmp_path, monkeypatch):
    """A DAGSTER_HOME with the embedded SQLite instance, or the production one on PostgreSQL
    (deploy/dagster.yaml; its database also holds the coordination tables), emptied first."""
    home = tmp_path / f"dagster_home_{request.param}"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    if request.param == "sqlite":
        shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
        return home
    import sqlalchemy
    from dagster import DagsterInstance

    url = postgres_url("floe_dagster")
    parsed = sqlalchemy.engine.make_url(url)
    for key, value in {"FLOE_PG_USER": parsed.username, "FLOE_PG_PASSWORD": parsed.password,
                       "FLOE_PG_HOST": parsed.host, "FLOE_PG_PORT": str(parsed.port), "FLOE_PG_DB": parsed.database}.items():
        monkeypatch.setenv(key, value)
    shutil.copyfile(project_file("deploy/dagster.yaml"), home / "dagster.yaml")
    with DagsterInstance.get() as instance:
        instance.wipe()
        for schedule_state in instance.all_instigator_state():
            instance.delete_instigator_state(schedule_state.instigator_origin_id, schedule_state.selector_id)
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        for table in ("floe_ledger", "floe_outcomes", "floe_history", "floe_writers"):
            connection.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {table}"))
    engine.dispose()
    return home


# The longest modules by the last measured run (--durations, summed per module), longest first. ./dev test
# hands whole modules to its processes in collection order (--dist loadfile, --no-loadscope-reorder):
# starting the long ones first keeps one of them from being the last thing running while the other
# processes sit idle. Then the other integration and reliability modules, then the quick unit ones.
# From the whole run of session 11 (21 min 17 s, 3 processes, 2 cores; its 30 slowest tests), with session
# 12's changes measured alone (under a load of 30, so as shares): the daemon backfills, which prove the pools
# too now on the same daemon, about 180 + 96 s before, about 210 s expected; the S3 quarantine 180 s; the API's
# module over 180 s (schemathesis 70 s); the writers' race 306 s before, about 60 % of it now (two runs, not
# four); the table-location attacks about 150 s, the owner-storage attacks about 130 s; the API security
# module about 100 s; then the modules whose two or three slowest tests alone took 60-100 s (the CLI's, the
# concurrent writers', the production path's, Spark Connect's, the install ranges', the demo writers', object
# storage's), so that none of them starts late. A name here that no module has is ignored.
LONGEST_MODULES_FIRST = (
    "integration/test_daemon_backfills.py",
    "integration/test_object_storage_quarantine.py",
    "integration/test_api.py",
    "reliability/test_row_level_writers.py",
    "reliability/test_table_location_attacks.py",
    "integration/test_table_owner_storage.py",
    "integration/test_api_security.py",
    "integration/test_cli.py",
    "reliability/test_concurrent_writers.py",
    "integration/test_production.py",
    "integration/test_spark_connect.py",
    "integration/test_install_ranges.py",
    "integration/test_demo_writers.py",
    "integration/test_object_storage.py",
)


def _module_rank(item: pytest.Item) -> tuple[int, int]:
    path = Path(str(item.path)).as_posix()
    for rank, module in enumerate(LONGEST_MODULES_FIRST):
        if path.endswith("/" + module):
            return 0, rank
    return (2, 0) if "/unit/" in path else (1, 0)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a serial run keeps the usual order
        items.sort(key=_module_rank)  # stable: each module's own order stays
