"""``floe-dagster mcp``'s tools in process, without Spark: the SDK's client on the real server object
(mcp_server/server.py's ``build_server``), a real PyIceberg SQLite catalog, a real Dagster instance (approved runs
are queued, no daemon runs them) and real API keys; the proposal service with an injected clock for the expiry.
The attacks each refuse and queue nothing. Through the real stack, with Spark, the daemon and both transports:
``integration/test_api.py``'s ``test_mcp_*``."""

from __future__ import annotations

import asyncio
import shutil
from datetime import timedelta

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from mcp import Client

from floe_dagster.api.auth import hash_key
from floe_dagster.api.services import ApiServices
from floe_dagster.api.timestamps import utc_now
from floe_dagster.core.runs import run_tags as T
from floe_dagster.demo import _create, rows
from floe_dagster.errors import ApiError
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.instance import project_file
from floe_dagster.mcp_server.proposals import Proposals
from floe_dagster.mcp_server.server import build_server
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  expireSnapshots: {retainLast: 1}
  expireSnapshotsSchedule: {interval: P1D}
"""
OPERATOR_KEY, VIEWER_KEY = "floe_mcpOperatorOperatorOperator01", "floe_mcpViewerViewerViewerViewer01"
TABLES = ("approved", "elsewhere", "stale", "expired")


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp")
    keys = root / "keys.txt"
    keys.write_text(f"ops-bot:OPERATOR:{hash_key(OPERATOR_KEY)}\ndash:VIEWER:{hash_key(VIEWER_KEY)}\n")
    config = write_settings(root, POLICIES, extra=f"api:\n  keys-file: {keys}\n")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        patch.setenv("FLOE_CONFIG", str(config))
        settings = load_settings(config, environ={})
        catalog = open_catalog(settings.catalog)
        catalog.create_namespace("sales")
        for name in TABLES:
            table = _create(catalog, f"sales.{name}")
            table.append(rows(0, 5))
            table.append(rows(5, 5))
        refresh_table_cache(settings)
        servers = {key: build_server(settings, {}, process_key=key)[0] for key in (OPERATOR_KEY, VIEWER_KEY)}
        with DagsterInstance.get() as instance:
            yield {"settings": settings, "servers": servers, "instance": instance}


def calls(server, steps: list[tuple[str, dict]]) -> list:
    async def session():
        async with Client(server) as client:
            return [await client.call_tool(tool, arguments) for tool, arguments in steps]

    return asyncio.run(session())


def text(result) -> str:
    return "".join(part.text for part in result.content)


def agent_runs(lake, table: str) -> list:
    return lake["instance"].get_runs(RunsFilter(tags={T.TABLE: f"demo.sales.{table}"}))


def propose(lake, table: str) -> dict:
    [result] = calls(lake["servers"][VIEWER_KEY], [("propose", {"table": f"sales.{table}"})])
    assert not result.is_error, text(result)
    return result.structured_content


def test_an_approved_proposal_is_queued_once_tagged_with_its_approver(lake):
    proposed = propose(lake, "approved")
    assert proposed["operations"] == ["EXPIRE_SNAPSHOTS"] and proposed["proposedBy"] == "dash"
    token = proposed["approvalToken"]
    by_viewer, = calls(lake["servers"][VIEWER_KEY], [("approve", {"token": token, "table": "sales.approved"})])
    assert by_viewer.is_error and "FORBIDDEN: key 'dash' (VIEWER) lacks the trigger permission" in text(by_viewer)
    assert agent_runs(lake, "approved") == []
    approved, replayed = calls(lake["servers"][OPERATOR_KEY], [("approve", {"token": token, "table": "sales.approved"}),
                                                              ("approve", {"token": token, "table": "sales.approved"})])
    assert not approved.is_error, text(approved)
    assert replayed.is_error and "already used" in text(replayed) and token not in text(replayed)
    [run] = agent_runs(lake, "approved")
    assert run.status == DagsterRunStatus.QUEUED and run.tags["dagster/partition"] == "EXPIRE_SNAPSHOTS"
    assert (run.tags[T.TRIGGER], run.tags[T.APPROVED_BY], run.tags[T.PROPOSED_BY]) == ("agent", "ops-bot", "dash")
    assert run.tags[T.PROPOSAL] == proposed["proposalId"] and token not in str(dict(run.tags))


def test_a_token_for_one_table_does_not_run_another(lake):
    token = propose(lake, "elsewhere")["approvalToken"]
    refused, = calls(lake["servers"][OPERATOR_KEY], [("approve", {"token": token, "table": "sales.stale"})])
    assert refused.is_error and "is for demo.sales.elsewhere, not demo.sales.stale" in text(refused)
    assert agent_runs(lake, "elsewhere") == [] and agent_runs(lake, "stale") == []


def test_a_write_after_the_proposal_makes_its_token_stale(lake):
    token = propose(lake, "stale")["approvalToken"]
    open_catalog(lake["settings"].catalog).load_table("sales.stale").append(rows(10, 5))
    refused, = calls(lake["servers"][OPERATOR_KEY], [("approve", {"token": token, "table": "sales.stale"})])
    assert refused.is_error and "PROPOSAL_STALE" in text(refused) and "the table changed" in text(refused)
    assert agent_runs(lake, "stale") == []


def test_a_proposal_expires_by_the_injected_clock(lake):
    services = ApiServices(lake["settings"], lake["instance"])
    now = [utc_now()]
    proposals = Proposals(services, clock=lambda: now[0])
    token = proposals.propose("dash", "sales", "expired", None, None)["approvalToken"]
    now[0] += timedelta(minutes=15)  # api.proposal-expiry-minutes' default
    with pytest.raises(ApiError, match="expired at"):
        proposals.approve("ops-bot", token, "sales", "expired", 0)
    assert agent_runs(lake, "expired") == []


def test_a_malformed_argument_is_refused_naming_it(lake):
    results = calls(lake["servers"][OPERATOR_KEY], [
        ("approve", {"token": "x", "table": "sales.approved", "wait_seconds": "soon"}),
        ("explain", {}),
        ("propose", {"table": "sales.approved", "operations": ["COMPACT"]}),
        ("health", {"table": "sales.approved", "tier": "deep"}),
        ("value_report", {"since": "a week"}),
    ])
    assert all(result.is_error for result in results)
    wait, explain, operations, tier, since = map(text, results)
    assert "wait_seconds" in wait and "table" in explain and "Field required" in explain
    assert "argument 'operations': unknown operation 'COMPACT'" in operations
    assert "tier" in tier and "summary|full" in tier and "argument since:" in since
