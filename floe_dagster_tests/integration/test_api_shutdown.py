"""``floe-dagster serve`` stopping and starting, with the real dagster-daemon: a ``?wait=true`` trigger
waits while the daemon holds its run in the queue, a stopping server answers it at once (202, the run
stays queued for the daemon) instead of holding the shutdown for up to the request's timeout, and a
port already in use is a clear failure. No Spark: the queue is paused (``max_concurrent_runs: 0``),
so no run starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.core.runs import run_tags as T
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(process: subprocess.Popen, timeout: float = 40) -> float:
    """SIGTERM a process started in its own session (with its children), by its id; the seconds it took."""
    started = time.monotonic()
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return time.monotonic() - started


@pytest.fixture
def lake(tmp_path):
    config = write_settings(tmp_path, POLICIES)
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    for name in ("orders", "events"):
        _create(catalog, f"sales.{name}").append(rows(0, 10))
    refresh_table_cache(settings)
    home = tmp_path / "dagster_home"
    home.mkdir()
    # The run queue is paused: the daemon runs (and heartbeats) but starts no run.
    text = (ROOT / "dagster.yaml").read_text()
    assert "max_concurrent_runs: 2" in text
    (home / "dagster.yaml").write_text(text.replace("max_concurrent_runs: 2", "max_concurrent_runs: 0"))
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLOE_CONFIG": str(config), "FLOE_SCHEDULER_ENABLED": "false"}
    with DagsterInstance.from_config(str(home)) as instance:  # the storage exists before two processes share it
        instance.get_runs_count()
    return tmp_path, home, env


def serve(env: dict, log: Path, port: int) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([str(BIN / "floe-dagster"), "serve", "--port", str(port)], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_until_up(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if requests.get(url + "/health", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"floe-dagster serve did not start:\n{log.read_text()}")


def test_a_stopping_server_answers_waiting_triggers_at_once_and_the_runs_stay_queued(lake):
    root, home, env = lake
    with open(root / "daemon.log", "wb") as out:
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    port, log = free_port(), root / "serve.log"
    url = f"http://127.0.0.1:{port}"
    server = serve(env, log, port)
    try:
        wait_until_up(server, url, log)
        with DagsterInstance.from_config(str(home)) as instance:
            deadline = time.monotonic() + 120
            while "QUEUED_RUN_COORDINATOR" not in instance.get_daemon_heartbeats():
                assert time.monotonic() < deadline and daemon.poll() is None, (root / "daemon.log").read_text()
                time.sleep(0.5)

        # With a live daemon, ?wait=true waits (here until its timeout: the queue is paused).
        body = {"catalog": "demo", "namespace": "sales", "table": "orders"}
        started = time.monotonic()
        waited = requests.post(f"{url}/api/v1/maintenance/trigger?wait=true&timeout=3", json=body, timeout=60)
        assert time.monotonic() - started >= 3
        assert waited.status_code == 202, waited.text
        assert waited.json()["status"] == "PENDING" and "still pending after 3 s" in waited.json()["message"]

        # A trigger waiting up to ten minutes when the server is told to stop.
        answer: dict = {}

        def trigger_and_wait():
            answer["response"] = requests.post(
                f"{url}/api/v1/maintenance/trigger?wait=true&timeout=600",
                json={"catalog": "demo", "namespace": "sales", "table": "events"}, timeout=700)

        client = threading.Thread(target=trigger_and_wait)
        client.start()
        with DagsterInstance.from_config(str(home)) as instance:
            deadline = time.monotonic() + 60
            while not instance.get_runs(RunsFilter(tags={"floe/table": "demo.sales.events"})):
                assert time.monotonic() < deadline and client.is_alive(), answer
                time.sleep(0.1)
        time.sleep(1.5)  # the request is now waiting for its run
        assert client.is_alive()
        took = stop(server)
        client.join(30)
        assert took < 15, f"the server took {took:.0f} s to stop:\n{log.read_text()}"
        response = answer["response"]
        assert response.status_code == 202, response.text
        result = response.json()
        assert result["status"] == "PENDING" and result["message"].startswith("the API server is stopping")
        assert response.headers["location"] == f"/api/v1/operations?triggerId={result['orchestrationId']}"
        with DagsterInstance.from_config(str(home)) as instance:
            [run] = instance.get_runs(RunsFilter(tags={T.TRIGGER_ID: result["orchestrationId"]}))
            assert run.status == DagsterRunStatus.QUEUED  # the daemon runs it once the queue moves
            for queued in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
                instance.report_run_canceled(queued, message="test: clean up")
    finally:
        stop(server)
        stop(daemon)


def test_a_port_in_use_is_a_clear_failure(lake):
    root, home, env = lake
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([str(BIN / "floe-dagster"), "serve", "--port", str(port)], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr  # uvicorn's startup failure
    assert f"error while attempting to bind on address ('127.0.0.1', {port}): address already in use" in (
        result.stdout + result.stderr)
