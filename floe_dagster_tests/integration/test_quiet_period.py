"""The quiet period through the real stack (issue 21, deliver 2): real tables written by PyIceberg
appends, policies in Floe's PolicyLoader format (kebab-case), the installed ``floe-dagster plan`` and
``explain`` and the HTTP API's trigger status, the clock moved with ``--at``/``?at=``. A recent append
holds a compaction ``not_quiet``; later it is admitted; a table that is never quiet is forced after
``max-quiet-wait``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.instance import project_file
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_api_http import start_server

CLI = str(Path(sys.executable).parent / "floe-dagster")
KEY = "quiet-test-key-0123456789"
POLICIES = """
policies:
  - name: patient
    pattern: "demo.sales.orders"
    rewrite-data-files: {}
    rewrite-data-files-schedule: {interval-days: 1, quiet-for: PT10M, max-quiet-wait: PT6H}
    expire-snapshots: {retain-last: 1}
    expire-snapshots-schedule: {interval-days: 1}
  - name: impatient
    pattern: "demo.sales.events"
    rewrite-data-files: {}
    rewrite-data-files-schedule: {interval-days: 1, quiet-for: PT1H, max-quiet-wait: PT2S}
"""


def millis(moment_ms: int) -> datetime:
    return datetime.fromtimestamp(moment_ms / 1000, tz=timezone.utc)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    keys = root / "keys.txt"
    keys.write_text(f"dash:VIEWER:{hash_key(KEY)}\n")
    config = write_settings(root, POLICIES, extra=f"api:\n  keys-file: {keys}\n")
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    events = _create(catalog, "sales.events")
    events.append(rows(0, 10))
    orders = _create(catalog, "sales.orders")
    for i in range(3):  # three writers' appends
        orders.append(rows(i * 10, 10))
    events.append(rows(10, 10))
    refresh_table_cache(settings)
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    stamps = {
        name: sorted(s.timestamp_ms for s in catalog.load_table(f"sales.{name}").metadata.snapshots)
        for name in ("orders", "events")
    }
    return {"config": config, "home": home, "settings": settings, "stamps": stamps}


def floe(lake, *args) -> str:
    env = {**os.environ, "DAGSTER_HOME": str(lake["home"]), "FLOE_CONFIG": str(lake["config"])}
    result = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"floe-dagster {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def plan_at(lake, at: datetime) -> dict[tuple[str, str], dict]:
    payload = json.loads(floe(lake, "plan", "--json", "--at", at.isoformat()))
    return {(d["table"], d["operation"]): d for d in payload["decisions"]}


def test_a_recent_append_keeps_compaction_waiting_until_quiet(lake):
    last_append = millis(lake["stamps"]["orders"][-1])
    first_append = millis(lake["stamps"]["orders"][0])
    at = last_append + timedelta(minutes=5, seconds=50)
    decisions = plan_at(lake, at)
    rewrite = decisions[("demo.sales.orders", "REWRITE_DATA_FILES")]
    assert rewrite["decision"] == "skip"
    forced_at = first_append + timedelta(hours=6)  # never run: due since the table's oldest snapshot
    assert rewrite["reasons"] == [
        f"not_quiet: quiet in 4m 10s: last commit by another writer (append) at {last_append.isoformat()} "
        f"(quietFor PT10M); forced in {_wait(forced_at - at)} at {forced_at.isoformat()} (maxQuietWait PT6H, "
        f"due since {first_append.isoformat()})"]
    assert rewrite["next_eligible"] == (last_append + timedelta(minutes=10)).isoformat()
    # The quiet period is the rewrite's schedule's: expire on the same table is not held.
    assert decisions[("demo.sales.orders", "EXPIRE_SNAPSHOTS")]["decision"] == "run"

    report = json.loads(floe(lake, "explain", "sales.orders", "--json", "--at", at.isoformat()))
    status = report["operationStatuses"]["REWRITE_DATA_FILES"]
    assert status["shouldTrigger"] is False and status["reasons"] == rewrite["reasons"]
    quiet = status["quiet"]
    assert (quiet["evaluated"], quiet["quiet"], quiet["forced"], quiet["quietFor"], quiet["maxQuietWait"]) == (
        True, False, False, "PT10M", "PT6H")
    assert (quiet["lastForeignOperation"], quiet["lastForeignCommit"]) == ("append", last_append.isoformat())
    assert quiet["secondsUntilQuiet"] == 250.0
    assert quiet["secondsUntilForced"] == (forced_at - at).total_seconds()
    assert report["operationStatuses"]["EXPIRE_SNAPSHOTS"]["quiet"] is None
    text = floe(lake, "explain", "sales.orders", "--at", at.isoformat())
    assert "REWRITE_DATA_FILES: wait - not_quiet: quiet in 4m 10s" in text
    assert "quiet period PT10M (forced after PT6H): quiet in 4m 10s: last commit by another writer (append)" in text

    # Ten minutes after the last append the table is quiet: admitted, and it says why.
    later = last_append + timedelta(minutes=10)
    rewrite = plan_at(lake, later)[("demo.sales.orders", "REWRITE_DATA_FILES")]
    assert rewrite["decision"] == "run" and rewrite["trigger"] == "interval"
    assert rewrite["reasons"][1] == (f"quiet: last commit by another writer (append) at {last_append.isoformat()}, "
                                     f"10m ago (quietFor PT10M)")
    status = json.loads(floe(lake, "explain", "sales.orders", "--json", "--at", later.isoformat()))
    assert status["operationStatuses"]["REWRITE_DATA_FILES"]["shouldTrigger"] is True
    assert status["operationStatuses"]["REWRITE_DATA_FILES"]["quiet"]["quiet"] is True


def test_a_table_never_quiet_is_forced_after_max_quiet_wait(lake):
    first, last = (millis(t) for t in (lake["stamps"]["events"][0], lake["stamps"]["events"][-1]))
    assert last - first < timedelta(minutes=5)
    if last < first + timedelta(seconds=2):  # right after the last append: held until forced
        held = plan_at(lake, last)[("demo.sales.events", "REWRITE_DATA_FILES")]
        assert held["decision"] == "skip" and held["reasons"][0].startswith("not_quiet: quiet in 1h: ")
        assert held["next_eligible"] == (first + timedelta(seconds=2)).isoformat()
    at = last + timedelta(minutes=1)
    forced = plan_at(lake, at)[("demo.sales.events", "REWRITE_DATA_FILES")]
    assert forced["decision"] == "run" and forced["trigger"] == "interval"
    assert forced["reasons"][1] == (
        f"forced after PT2S: never quiet; due since {first.isoformat()}, last commit by another writer (append) at "
        f"{last.isoformat()} (quietFor PT1H)")


def test_the_http_trigger_status_says_how_long_until_quiet_and_forced(lake, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(lake["home"]))
    last_append = millis(lake["stamps"]["orders"][-1])
    at = last_append + timedelta(minutes=1)
    with DagsterInstance.get() as instance:
        server, thread, url = start_server(create_app(lake["settings"], KeyStore(lake["settings"].api), instance))
        try:
            response = requests.get(f"{url}/api/v1/tables/sales/orders/trigger-status",
                                    params={"at": at.isoformat()}, headers={"X-API-Key": KEY}, timeout=120)
        finally:
            server.should_exit = True
            thread.join(20)
    assert response.status_code == 200, response.text
    status = response.json()["operationStatuses"]["REWRITE_DATA_FILES"]
    assert status["shouldTrigger"] is False and status["reasons"][0].startswith("not_quiet: quiet in 9m: ")
    assert status["quiet"]["secondsUntilQuiet"] == 540.0 and status["quiet"]["secondsUntilForced"] > 0
    assert status["nextEligibleTime"] == (last_append + timedelta(minutes=10)).isoformat()


def _wait(delta: timedelta) -> str:
    from floe_dagster.core.basics.durations import format_wait

    return format_wait(delta)
