"""A policy managed over HTTP drives the real scheduler: created with ``POST /api/v1/policies``, the next
plan (in process, as the sensor gathers it, and the installed ``floe-dagster plan`` in another process)
runs its table, the sensor's tick admits the work; each update (schedule disabled, a window that is
closed now, another interval) and the delete show in the next plan. A real PyIceberg SQLite catalog with
a real table and a real Dagster instance; no Spark (nothing is executed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import requests
from dagster import DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import plan
from floe_dagster.core.basics.tables import TableName
from floe_dagster.scheduling.inputs import gather
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import create_fragmented_table
from floe_dagster_tests.unit.test_api_http import start_server

CLI = str(Path(sys.executable).parent / "floe-dagster")
ORDERS = TableName("demo", ("sales",), "orders")
# A hand-written policy file in the same folder: read, but not managed by the API.
FILE_POLICIES = """
- name: elsewhere
  tablePattern: "demo.other.*"
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
"""
POLICY = {"name": "orders-compaction", "tablePattern": "demo.sales.orders", "priority": 3,
          "rewriteDataFiles": {"targetFileSizeBytes": 134217728}, "rewriteDataFilesSchedule": {"interval": "P1D"}}


def test_a_policy_managed_over_http_drives_the_plan_and_the_tick(tmp_path, dagster_home, monkeypatch):
    # The API's directory is the folder `policies` already lists (the other rule, a folder it does not
    # list, is in unit/test_api_policies.py).
    config = write_settings(tmp_path, FILE_POLICIES, extra="api:\n  policy-directory: policies\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    create_fragmented_table(settings, ORDERS, files=6)

    def decisions(now: datetime) -> dict[Operation, object]:
        """The orders decisions of the next plan, gathered as the sensor gathers them."""
        result = plan(gather(settings, instance, Coordination(settings.coordination_url), now, None).plan_input)
        return {d.operation: d for d in result.decisions if d.table == ORDERS}

    def cli_plan() -> dict[str, dict]:
        env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "FLOE_CONFIG": str(config)}
        done = subprocess.run([CLI, "plan", "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return {d["operation"]: d for d in json.loads(done.stdout)["decisions"] if d["table"] == ORDERS.qualified}

    with DagsterInstance.get() as instance:
        server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
        try:
            def api(method: str, path: str, **kwargs) -> requests.Response:
                return requests.request(method, url + path, timeout=60, **kwargs)

            now = datetime.now(timezone.utc)
            assert decisions(now) == {} and cli_plan() == {}  # no policy matches the table yet

            created = api("POST", "/api/v1/policies", json=POLICY)
            assert created.status_code == 201, created.text
            location, policy_id = created.headers["Location"], created.json()["id"]
            assert (tmp_path / "policies" / "orders-compaction.json").is_file()

            # The next plan runs it, in this process and in a new one (the CLI).
            run = decisions(now)[Operation.REWRITE_DATA_FILES]
            assert (run.decision, run.policy, run.trigger, run.policy_priority) == (
                "run", "orders-compaction", "interval", 3)
            from_cli = cli_plan()["REWRITE_DATA_FILES"]
            assert (from_cli["decision"], from_cli["policy"]) == ("run", "orders-compaction")

            # Disable the schedule: the plan skips it.
            disabled = api("PUT", location, json={"rewriteDataFilesSchedule": {"interval": "P1D", "enabled": False}})
            assert disabled.status_code == 200, disabled.text
            skip = decisions(now)[Operation.REWRITE_DATA_FILES]
            assert skip.decision == "skip" and skip.reasons[0].startswith("schedule_disabled"), skip.reasons

            # A window that is closed now: the plan waits for it to open.
            start = (now + timedelta(hours=2)).replace(second=0, microsecond=0)
            window = {"interval": "PT6H", "windowStart": start.strftime("%H:%M"),
                      "windowEnd": (start + timedelta(hours=1)).strftime("%H:%M")}
            assert api("PUT", location, json={"rewriteDataFilesSchedule": window}).status_code == 200
            waiting = decisions(now)[Operation.REWRITE_DATA_FILES]
            assert waiting.decision == "skip" and waiting.reasons[0].startswith("window_closed"), waiting.reasons
            assert waiting.next_eligible == start

            # Another interval, no window, and one more operation: both due; the rewrite runs, expire
            # waits for it (one operation per table at a time).
            changed = api("PUT", location, json={"rewriteDataFilesSchedule": {"interval": "PT6H"},
                                                 "expireSnapshots": {"retainLast": 2},
                                                 "expireSnapshotsSchedule": {"interval": "P1D"}})
            assert changed.status_code == 200, changed.text
            assert changed.json()["id"] == policy_id and changed.json()["rewriteDataFiles"]["schedule"] == "PT6H"
            planned = decisions(now)
            assert {op: d.decision for op, d in planned.items()} == {
                Operation.REWRITE_DATA_FILES: "run", Operation.EXPIRE_SNAPSHOTS: "skip"}
            assert planned[Operation.EXPIRE_SNAPSHOTS].reasons[0] == (
                "in_flight: REWRITE_DATA_FILES of this table was admitted this tick (one operation per table at a time)")

            # The sensor's tick admits the policy's work into the ledger.
            tick = run_tick(settings, instance, Coordination(settings.coordination_url), now, "sensor:test", None)
            admitted = [d for d in tick.admitted if d.table == ORDERS]
            assert admitted and {d.policy for d in admitted} == {"orders-compaction"}
            assert {d.operation for d in admitted} <= {Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS}

            # Deleted: the table has no policy any more.
            assert api("DELETE", f"/api/v1/policies/{policy_id}").status_code == 204
            assert not (tmp_path / "policies" / "orders-compaction.json").exists()
            assert decisions(now) == {} and cli_plan() == {}
            # The hand-written file is untouched and still read.
            assert api("GET", "/api/v1/policies/elsewhere").json()["floe"]["managed"] is False
        finally:
            server.should_exit = True
            thread.join(20)
