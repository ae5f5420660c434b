"""``floe-dagster serve`` end to end: the real server (the console script, on 127.0.0.1 and a free
port) with API keys, the real Dagster daemon executing the runs a trigger queues, real Spark
maintaining a real table. Runs the README's curl examples with real curl (one of them a trigger that
compacts a table), checks a failed run (200, reported in the body) and the 409 of a busy table,
compares trigger status with ``floe-dagster explain``, and lets schemathesis loose on the server's
own OpenAPI document (triggers forced to dry runs). The rest of the API's behaviour (every error,
every role) is covered without Spark in ``unit/test_api_http.py``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from floe_dagster.api.auth import hash_key
from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.coordination.agent_proposals import ProposalTable
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.plan.agent_proposals import Proposal, TableState, new_token, token_hash
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, DemoSizes, build_demo_lakehouse, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._mcp_client import (
    READ_TOOLS,
    answer,
    over_http,
    over_stdio,
    refusal,
    start_mcp_http,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
  expireSnapshots: {retainLast: 1, maxSnapshotAge: PT0S}
  expireSnapshotsSchedule: {interval: P1D}
  triggerConditions: {smallFileCountAbove: 5}
- name: broken-filter
  tablePattern: "demo.sales.customers"
  rewriteDataFiles: {filter: "no_such_column > 1"}
  rewriteDataFilesSchedule: {interval: P1D}
- name: ops
  tablePattern: "demo.ops.*"
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
"""
OPERATOR_KEY, VIEWER_KEY = "floe_IntegrationOperatorKey000000001", "floe_IntegrationViewerKey00000000001"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """Stop a process started in its own session (with its children), by its id."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def start_serve(config: Path, env: dict, log: Path, host: str = "127.0.0.1",
                ready: str = "/health") -> tuple[subprocess.Popen, str]:
    """``floe-dagster serve`` on a free port, once ``ready`` answers 200 (``/health/live`` for a server
    whose catalog is down)."""
    port = free_port()
    with open(log, "ab") as out:
        process = subprocess.Popen([str(BIN / "floe-dagster"), "--config", str(config), "serve", "--host", host,
                                    "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(url + ready, timeout=5).status_code == 200:
                return process, url
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise AssertionError(f"floe-dagster serve did not start:\n{log.read_text()}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    keys = root / "api-keys"
    keys.write_text(f"ops-bot:OPERATOR:{hash_key(OPERATOR_KEY)}\ndash:VIEWER:{hash_key(VIEWER_KEY)}\n")
    config = write_settings(root, POLICIES, extra=f"api:\n  keys-file: {keys}\n")
    settings = load_settings(config, environ={})
    # sales.customers written by PyIceberg beforehand: the demo would start a Spark session in this process
    # (about a minute of the module's set-up on 2 busy cores) only for its position deletes, which no test
    # here reads (its runs fail on the policy's filter, whatever the files).
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    catalog.create_table("sales.customers", schema=EVENT_SCHEMA).append(rows(0, 5))
    build_demo_lakehouse(settings, DemoSizes(small_files=8, snapshots=4, position_delete_commits=1, old_orphans=1,
                                            young_orphans=0, skewed_files=2, other_partition_files=1))
    refresh_table_cache(settings)
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    # The scheduler is off so that only the API's runs run.
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLOE_CONFIG": str(config), "FLOE_SCHEDULER_ENABLED": "false"}
    logs = root / "logs"
    logs.mkdir()
    with DagsterInstance.from_config(str(home)) as dagster:  # create the storage first: the daemon and
        dagster.get_runs_count()  # the server would race to create it (alembic_version already exists)
    with open(logs / "daemon.log", "wb") as out:
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        process, url = start_serve(config, env, logs / "serve.log")
        with DagsterInstance.from_config(str(home)) as dagster:  # ?wait=true waits only with a live daemon
            deadline = time.monotonic() + 120
            while "QUEUED_RUN_COORDINATOR" not in dagster.get_daemon_heartbeats():
                assert time.monotonic() < deadline and daemon.poll() is None, (logs / "daemon.log").read_text()
                time.sleep(0.5)
        try:
            yield {"url": url, "settings": settings, "config": config, "home": home, "env": env, "logs": logs}
        finally:
            stop(process)
    finally:
        stop(daemon)


def get(server, path, key=VIEWER_KEY, **kwargs):
    return requests.get(server["url"] + path, headers={"X-API-Key": key}, timeout=60, **kwargs)


def post(server, path, body, key=OPERATOR_KEY, **kwargs):
    return requests.post(server["url"] + path, json=body, headers={"X-API-Key": key}, timeout=900, **kwargs)


def counts(server, name):
    return table_counts(load_table(open_catalog(server["settings"].catalog), TableName.parse(name, "demo")))


def instance(server):
    return DagsterInstance.from_config(str(server["home"]))


def readme_curl_commands() -> list[str]:
    """The curl commands of the README's "HTTP API" section (``\\``-continued lines joined)."""
    text = (ROOT / "docs" / "http-api.md").read_text()
    assert "\n## HTTP API\n" in text, "docs/http-api.md has no '## HTTP API' section"
    # The examples before the subsections (policies over HTTP needs a policy directory: its own tests).
    section = text.split("\n## HTTP API\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for command in re.sub(r"\\\n\s*", " ", block).splitlines():
            if command.strip().startswith("curl "):
                commands.append(command.strip())
    return commands


def test_serve_refuses_a_public_address_without_keys_and_needs_no_key_on_loopback(server, tmp_path):
    config = tmp_path / "floe.yaml"
    config.write_text(server["config"].read_text().split("api:")[0])  # the same lakehouse, without API keys
    refused = subprocess.run([str(BIN / "floe-dagster"), "--config", str(config), "serve", "--host", "0.0.0.0",
                              "--port", str(free_port())], cwd=ROOT, env=server["env"], capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0: no API keys are configured" in refused.stderr
    process, url = start_serve(config, server["env"], tmp_path / "serve.log")
    try:
        status = requests.get(url + "/api/v1/tables/sales/orders/trigger-status", timeout=60)
        assert status.status_code == 200 and status.json()["policyName"] == "sales"
    finally:
        stop(process)
    assert "no API keys (loopback only" in (tmp_path / "serve.log").read_text()


def test_the_readme_curl_examples_and_a_trigger_that_maintains_the_table(server):
    commands = readme_curl_commands()
    paths = [re.search(r'"\$FLOE_API(/[^"?]*)', c).group(1) for c in commands]
    assert set(paths) == {"/health", "/api/v1/tables/sales/orders/trigger-status", "/api/v1/maintenance/trigger",
                          "/api/v1/operations", "/api/v1/tables/sales/orders/health",
                          "/api/v1/policies/validate-pattern"}
    before = counts(server, "sales.orders")
    assert before["data_files"] == 8
    env = {**os.environ, "FLOE_API": server["url"], "FLOE_API_KEY": OPERATOR_KEY}
    answers = {}
    for command in commands:
        result = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        answers[command] = json.loads(result.stdout)

    def answer(fragment):
        [found] = [a for c, a in answers.items() if fragment in c]
        return found

    assert answer('/health"')["status"] == "UP"
    assert answer("trigger-status")["operationStatuses"]["REWRITE_DATA_FILES"]["shouldTrigger"] is True
    dry = answer('"dryRun": true')
    assert dry["status"] == "DRY_RUN" and [r["status"] for r in dry["operationResults"]] == ["WOULD_RUN"] * 2
    triggered = answer("wait=true")
    assert triggered["status"] == "SUCCESS", triggered
    assert triggered["table"] == "demo.sales.orders" and triggered["policyName"] == "sales"
    [result] = triggered["operationResults"]
    assert result["operationType"] == "REWRITE_DATA_FILES" and result["status"] == "SUCCEEDED"
    assert result["metrics"]["rewritten_data_files_count"] == 8 and result["metrics"]["added_data_files_count"] == 1
    after = counts(server, "sales.orders")
    assert after["data_files"] == 1 and after["snapshots"] == before["snapshots"] + 1
    assert after["records"] == before["records"]
    with instance(server) as dagster:
        [run] = dagster.get_runs(RunsFilter(tags={T.TRIGGER_ID: triggered["orchestrationId"]}))
    assert run.run_id == result["runId"] and run.status == DagsterRunStatus.SUCCESS
    assert run.tags["floe/trigger"] == "manual" and run.tags[T.ACTOR] == "ops-bot"
    assert run.tags["floe/reason"] == "compact before the report" and run.tags["floe/table"] == "demo.sales.orders"
    assert int(run.tags["dagster/priority"]) >= 300
    recent = answer("/api/v1/operations")
    assert recent["operations"][0]["runId"] == run.run_id
    assert recent["operations"][0]["metrics"]["rewritten_data_files_count"] == 8
    assert answer("/health?tier=summary")["qualifiedName"] == "demo.sales.orders"
    assert answer("validate-pattern")["matchCount"] == 3


def test_a_failed_run_is_reported_in_the_body_and_a_busy_table_is_a_409(server):
    body = {"catalog": "demo", "namespace": "sales", "table": "customers"}
    answer: dict = {}

    def trigger_and_wait():
        answer["response"] = post(server, "/api/v1/maintenance/trigger?wait=true&timeout=600", body)

    waiting = threading.Thread(target=trigger_and_wait)
    waiting.start()
    deadline = time.monotonic() + 120
    runs: list = []
    while not runs:
        assert time.monotonic() < deadline and waiting.is_alive(), answer
        runs = get(server, "/api/v1/operations", params={"table": "demo.sales.customers"}).json()["operations"]
        time.sleep(0.2)
    busy = post(server, "/api/v1/maintenance/trigger", body)
    assert busy.status_code == 409, busy.text
    error = busy.json()
    assert error["code"] == "TABLE_BUSY" and error["details"]["runId"] == runs[0]["runId"]
    assert runs[0]["runId"] in error["error"] and set(error) == {"error", "code", "details", "timestamp"}
    waiting.join(900)
    response = answer["response"]
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "FAILED" and result["policyName"] == "broken-filter"
    [operation] = result["operationResults"]
    assert operation["status"] == "FAILED" and operation["runId"] == runs[0]["runId"]
    assert "no_such_column" in operation["errorMessage"], operation
    failed = get(server, "/api/v1/operations", params={"table": "demo.sales.customers", "status": "FAILED"}).json()
    assert [o["runId"] for o in failed["operations"]] == [operation["runId"]]
    assert failed["operations"][0]["errorMessage"] == operation["errorMessage"]


def test_trigger_status_is_floe_dagster_explain(server, monkeypatch, capsys):
    at = "2026-11-23T08:30:00+00:00"
    reports = {}
    for key in ("DAGSTER_HOME", "FLOE_CONFIG", "FLOE_SCHEDULER_ENABLED"):
        monkeypatch.setenv(key, server["env"][key])

    def explained(name: str, as_process: bool) -> dict:
        """``floe-dagster explain NAME --json``: as a user runs it, or through the same command's main() in this
        process, with the server's environment (a process start and its imports cost about 15 s)."""
        command = ["explain", name, "--at", at, "--json"]
        if as_process:
            done = subprocess.run([str(BIN / "floe-dagster"), *command], cwd=ROOT, env=server["env"],
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)
        capsys.readouterr()
        assert floe_dagster_cli(command) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    # The first table through the installed command, the others in this process.
    for name, path, as_process in [("sales.orders", "sales/orders", True),
                                   ("demo.sales.customers", "sales/customers", False),
                                   ("ops.metrics", "ops/metrics", False)]:
        status = get(server, f"/api/v1/tables/{path}/trigger-status", params={"at": at})
        assert status.status_code == 200, status.text
        assert status.json() == explained(name, as_process)
        reports[name] = status.json()
    rewrite = reports["sales.orders"]["operationStatuses"]["REWRITE_DATA_FILES"]
    # Compacted by the README's trigger an hour earlier (manual runs count), so not due for a day.
    assert rewrite["shouldTrigger"] is False and rewrite["reasons"][0].startswith("not_due")
    assert rewrite["lastRun"]["trigger"] == "manual" and rewrite["lastRun"]["succeeded"] is True
    failed = reports["demo.sales.customers"]["operationStatuses"]["REWRITE_DATA_FILES"]
    assert failed["backoff"]["consecutiveFailures"] == 1 and failed["lastRun"]["succeeded"] is False
    assert reports["ops.metrics"]["policyName"] == "ops"
    # The expiry's arguments with their sources, the same over HTTP as in the CLI (one explain_table).
    expiry = reports["sales.orders"]["operationStatuses"]["EXPIRE_SNAPSHOTS"]["expiryArguments"]
    assert (expiry["retainLast"], expiry["retainLastFrom"], expiry["maxSnapshotAge"], expiry["olderThanFrom"]) == (
        1, "policy", "PT0S", "policy")
    assert expiry["olderThan"] == at and (expiry["maxRefAgeMs"], expiry["maxRefAgeFrom"]) == (None, "default")


def test_schemathesis_finds_no_server_error_and_no_schema_violation(server, tmp_path):
    hooks = tmp_path / "floe_hooks.py"
    hooks.write_text(
        "import schemathesis\n\n\n"
        "@schemathesis.hook\n"
        "def before_call(context, case, kwargs):\n"
        "    # Every trigger is a dry run: a missing or false dryRun (both valid) becomes true, so a\n"
        "    # valid body stays valid and an invalid one stays invalid.\n"
        "    if case.path == '/api/v1/maintenance/trigger' and isinstance(case.body, dict):\n"
        "        if case.body.get('dryRun', False) is False:\n"
        "            case.body['dryRun'] = True\n"
    )
    with instance(server) as dagster:
        runs_before = dagster.get_runs_count()
    checks = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
              "response_schema_conformance,negative_data_rejection,missing_required_header,ignored_auth")
    # 20 examples an operation in the fuzzing phase, seeded: the suite's cases are the same every run (the
    # coverage phase's edge cases and the stateful phase's scenarios do not depend on it). At 40 the fuzzing
    # took 100 of the test's 150 s on 2 busy cores; a deeper search by hand: FLOE_API_FUZZ_EXAMPLES=200.
    examples = os.environ.get("FLOE_API_FUZZ_EXAMPLES", "20")
    result = subprocess.run(
        [str(BIN / "schemathesis"), "run", server["url"] + "/api/v1/openapi.json", "-H", f"X-API-Key: {OPERATOR_KEY}",
         "--checks", checks, "--max-examples", examples, "--seed", "8", "--workers", "1", "--request-timeout", "60",
         "--no-color"],
        cwd=tmp_path, env={**os.environ, "SCHEMATHESIS_HOOKS": str(hooks)}, capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    # No failure of any check; schemathesis may still warn that an operation rejects most generated
    # bodies (the policy writes answer 405 here: this server has no policy directory).
    assert "Failures:" not in result.stdout, result.stdout[-3000:]
    counted = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert counted and counted.group(1) == counted.group(2), result.stdout[-3000:]
    generated = int(re.search(r"(\d+) generated", result.stdout).group(1))
    assert generated >= 300, result.stdout[-3000:]
    with instance(server) as dagster:
        assert dagster.get_runs_count() == runs_before  # every trigger was a dry run


def test_keys_never_appear_in_logs_or_run_tags(server):
    secrets = [OPERATOR_KEY, VIEWER_KEY, hash_key(OPERATOR_KEY), hash_key(VIEWER_KEY)]
    logs = "".join(path.read_text(errors="replace") for path in server["logs"].iterdir())
    assert "POST /api/v1/maintenance/trigger" in logs  # the access log is there
    with instance(server) as dagster:
        runs = dagster.get_runs()
        events = "".join(str(entry) for run in runs for entry in dagster.all_logs(run.run_id))
    tags = json.dumps([dict(run.tags) for run in runs])
    assert len(runs) == 2 and "ops-bot" in tags
    for secret in secrets:
        assert secret not in logs and secret not in tags and secret not in events


# -- floe-dagster mcp: the MCP SDK's real client on the same lakehouse, keys and daemon (docs/mcp.md) --------------

@pytest.fixture(scope="module")
def mcp_http(server):
    process, url = start_mcp_http(BIN, ROOT, server["config"], server["env"], server["logs"] / "mcp.log", free_port())
    try:
        yield url
    finally:
        stop(process)


def test_mcp_a_viewer_over_stdio_reads_everything_and_changes_nothing(server):
    with instance(server) as dagster:
        runs_before = dagster.get_runs_count()
    tables_before = {name: counts(server, name) for name in ("sales.orders", "sales.customers", "ops.metrics")}

    async def session():
        with open(server["logs"] / "mcp-stdio.log", "w") as errlog:
            async with over_stdio(BIN, ROOT, server["config"], server["env"], VIEWER_KEY, errlog) as client:
                assert {t.name for t in (await client.list_tools()).tools} == {*READ_TOOLS, "propose", "approve"}
                read = {
                    "tables": await answer(client, "tables", {}),
                    "health": await answer(client, "health", {"table": "sales.orders"}),
                    "explain": await answer(client, "explain", {"table": "sales.orders"}),
                    "plan": await answer(client, "plan", {"table": "sales.orders"}),
                    "runs": await answer(client, "runs", {"table": "sales.orders"}),
                    "trigger_status": await answer(client, "trigger_status", {"trigger_id": "no-such-trigger"}),
                    "value_report": await answer(client, "value_report", {"since": "P30D"}),
                }
                proposed = await answer(client, "propose", {"table": "sales.orders"})
                forbidden = await refusal(client, "approve", {"token": proposed["approvalToken"],
                                                              "table": "sales.orders"})
                return read, proposed, forbidden

    read, proposed, forbidden = asyncio.run(session())
    assert "demo.sales.orders" in {t["qualifiedName"] for t in read["tables"]["tables"]}
    assert read["health"]["qualifiedName"] == "demo.sales.orders"
    assert read["explain"]["policyName"] == "sales" and "REWRITE_DATA_FILES" in read["explain"]["operationStatuses"]
    assert {d["table"] for d in read["plan"]["decisions"]} == {"demo.sales.orders"}
    assert isinstance(read["runs"]["operations"], list) and read["trigger_status"]["operations"] == []
    assert read["value_report"]["total"]["runs"] == len(read["runs"]["operations"]) or read["value_report"]["groups"]
    assert proposed["operations"] == ["REWRITE_DATA_FILES", "EXPIRE_SNAPSHOTS"] and proposed["proposedBy"] == "dash"
    assert forbidden.startswith("Error executing tool approve: FORBIDDEN: key 'dash' (VIEWER) lacks the trigger")
    with instance(server) as dagster:
        assert dagster.get_runs_count() == runs_before
    assert {name: counts(server, name) for name in tables_before} == tables_before


def test_mcp_a_proposal_approved_with_an_operator_key_maintains_exactly_that_table_and_operation(server, mcp_http):
    table = load_table(open_catalog(server["settings"].catalog), TableName.parse("sales.orders", "demo"))
    for start in (60_000, 60_100):  # two writes: snapshots for the expiry to remove
        table.append(rows(start, 5))
    orders, customers = counts(server, "sales.orders"), counts(server, "sales.customers")
    assert orders["snapshots"] >= 3

    async def conversation():
        async with over_http(mcp_http, VIEWER_KEY) as agent:
            why = await answer(agent, "explain", {"table": "sales.orders"})
            proposed = await answer(agent, "propose", {"table": "sales.orders", "operations": ["expire_snapshots"],
                                                       "reason": "old snapshots after the compaction"})
            viewer = await refusal(agent, "approve", {"token": proposed["approvalToken"], "table": "sales.orders"})
        async with over_http(mcp_http, OPERATOR_KEY) as person:
            token = proposed["approvalToken"]
            elsewhere = await refusal(person, "approve", {"token": token, "table": "sales.customers"})
            approved = await answer(person, "approve", {"token": token, "table": "sales.orders", "wait_seconds": 600})
            replayed = await refusal(person, "approve", {"token": token, "table": "sales.orders"})
            status = await answer(person, "trigger_status", {"trigger_id": approved["orchestrationId"]})
        return why, proposed, viewer, elsewhere, approved, replayed, status

    why, proposed, viewer, elsewhere, approved, replayed, status = asyncio.run(conversation())
    assert why["operationStatuses"]["EXPIRE_SNAPSHOTS"]["operationType"] == "EXPIRE_SNAPSHOTS"
    assert proposed["operations"] == ["EXPIRE_SNAPSHOTS"] and proposed["snapshotId"] is not None
    assert [d["operationType"] for d in proposed["decision"]] == ["EXPIRE_SNAPSHOTS"]
    assert "FORBIDDEN: key 'dash' (VIEWER)" in viewer
    assert "is for demo.sales.orders, not demo.sales.customers" in elsewhere
    assert approved["status"] == "SUCCESS" and approved["approvedBy"] == "ops-bot", approved
    [result] = approved["operationResults"]
    assert (result["operationType"], result["status"]) == ("EXPIRE_SNAPSHOTS", "SUCCEEDED")
    assert "already used" in replayed
    assert [o["runId"] for o in status["operations"]] == [approved["operationResults"][0]["runId"]]
    after = counts(server, "sales.orders")
    assert after["snapshots"] == 1 and after["data_files"] == orders["data_files"]
    assert after["records"] == orders["records"] and counts(server, "sales.customers") == customers
    with instance(server) as dagster:
        [run] = dagster.get_runs(RunsFilter(tags={T.TRIGGER_ID: approved["orchestrationId"]}))
        events = "".join(str(entry) for entry in dagster.all_logs(run.run_id))
    assert run.status == DagsterRunStatus.SUCCESS and run.tags["floe/trigger"] == "agent"
    assert run.tags[T.APPROVED_BY] == "ops-bot" and run.tags[T.PROPOSED_BY] == "dash" and run.tags[T.ACTOR] == "ops-bot"
    assert run.tags[T.PROPOSAL] == proposed["proposalId"] and run.tags[T.OPERATION] == "EXPIRE_SNAPSHOTS"
    assert run.tags[T.TABLE] == "demo.sales.orders" and "approved by ops-bot" in run.tags[T.REASON]
    logs = "".join(path.read_text(errors="replace") for path in server["logs"].iterdir())
    for secret in (proposed["approvalToken"], OPERATOR_KEY, VIEWER_KEY):
        assert secret not in logs and secret not in json.dumps(dict(run.tags)) and secret not in events


def test_mcp_refuses_an_expired_or_stale_token_and_a_malformed_argument(server, mcp_http, monkeypatch):
    settings = server["settings"]
    monkeypatch.setenv("DAGSTER_HOME", str(server["home"]))  # the servers' coordination database, beside it
    store = ProposalTable(Coordination(settings.coordination_url).engine)
    expired_token = new_token()
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    store.insert(Proposal("expired-1", "demo.ops.metrics", TableState(None, "-", "ops", "-", ("REWRITE_MANIFESTS",)),
                          "dash", "why", long_ago, long_ago + timedelta(minutes=15)), token_hash(expired_token))
    with instance(server) as dagster:
        runs_before = dagster.get_runs_count()

    async def attempts():
        async with over_http(mcp_http, VIEWER_KEY) as agent:  # a person approves what another key proposed
            proposed = await answer(agent, "propose", {"table": "ops.metrics"})
        async with over_http(mcp_http, OPERATOR_KEY) as person:
            expired = await refusal(person, "approve", {"token": expired_token, "table": "ops.metrics"})
            metrics = load_table(open_catalog(settings.catalog), TableName.parse("ops.metrics", "demo"))
            metrics.append(rows(50_000, 3, "eu"))  # a writer commits meanwhile
            stale = await refusal(person, "approve", {"token": proposed["approvalToken"], "table": "ops.metrics"})
            malformed = await refusal(person, "approve", {"token": proposed["approvalToken"], "table": "ops.metrics",
                                                          "wait_seconds": "soon"})
            unknown = await refusal(person, "propose", {"table": "ops.metrics", "operations": ["COMPACT"]})
        return expired, stale, malformed, unknown

    expired, stale, malformed, unknown = asyncio.run(attempts())
    assert "proposal expired-1 expired at" in expired
    assert "PROPOSAL_STALE" in stale and "the table changed since the proposal" in stale
    assert "wait_seconds" in malformed and "valid integer" in malformed
    assert "argument 'operations': unknown operation 'COMPACT'" in unknown
    with instance(server) as dagster:
        assert dagster.get_runs_count() == runs_before  # nothing ran
