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


def on_instance_store(store: str):
    """A test run on one of :func:`instance_home`'s two stores, not both: for a scenario whose subject is not the
    store (a partition-scoped backlog's drain), whose reads and writes of either store the automation's own tests
    and the coordination's check on both; the second run only doubled its minutes."""
    marks = (pytest.mark.postgres,) if store == "postgres" else ()
    return pytest.mark.parametrize("instance_home", [pytest.param(store, marks=marks)], indirect=True)


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


# The longest modules by the last measured run (each module's tests' junit times summed), longest first. ./dev test
# hands whole modules to its processes in collection order (--dist loadfile, --no-loadscope-reorder):
# starting the long ones first keeps one of them from being the last thing running while the other
# processes sit idle. Then the other integration and reliability modules, then the quick unit ones.
# From a fresh machine's whole run (2026-12-03: 19 min 07 s with set-up, main suite 17:29 on 3 processes), the
# modules of 35 s and more, in seconds of one process. A name here that no module has is ignored.
LONGEST_MODULES_FIRST = (
    "integration/test_api.py",  # 247
    "integration/test_cli.py",  # 153
    "integration/test_daemon_backfills.py",  # 128
    "reliability/test_row_level_writers.py",  # 115
    "integration/test_scope_evolved_e2e.py",  # 109 (each drain on one store since)
    "integration/test_automation.py",  # 98
    "integration/test_spark_connect.py",  # 96
    "integration/test_production.py",  # 91
    "integration/test_install_ranges.py",  # 84
    "reliability/test_batches.py",  # 82
    "integration/test_component.py",  # 80
    "reliability/test_table_location_attacks.py",  # 75
    "reliability/test_row_proof.py",  # 73
    "reliability/test_blast_radius.py",  # 70
    "integration/test_object_storage_quarantine.py",  # 68
    "integration/test_demo_writers.py",  # 62
    "reliability/test_orphan_quarantine.py",  # 58
    "integration/test_writers_beside.py",  # 53
    "integration/test_nessie_catalog.py",  # 52
    "reliability/test_concurrent_writers.py",  # 52
    "integration/test_api_security.py",  # 50
    "reliability/test_bad_input.py",  # 48
    "integration/test_object_storage.py",  # 44
    "integration/test_quiet_period.py",  # 41
    "integration/test_value_report_e2e.py",  # 40
    "integration/test_api_shutdown.py",  # 36
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
