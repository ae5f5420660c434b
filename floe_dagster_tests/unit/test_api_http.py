"""The HTTP API over real HTTP, without Spark: the FastAPI application on uvicorn (in a thread, on
127.0.0.1 and a free port), a real PyIceberg SQLite catalog, a real Dagster instance and real API
keys. Covers the error shape, authentication and roles on every route, validation (400 naming the
field), 404s, the 409 of a held table lock, dry-run triggers, nested namespaces, pattern validation
and the OpenAPI document. The runs themselves (Spark) are in ``integration/test_api.py``."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from datetime import datetime

import pytest
import requests
import uvicorn
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import hold_lock, table_lock_name
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.instance import project_file
from floe_dagster.reports.explain import explain_table
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
  expireSnapshots: {retainLast: 1}
  expireSnapshotsSchedule: {interval: P1D}
  triggerConditions: {smallFileCountAbove: 3}
- name: nested
  tablePattern: "demo.lake.raw.*"
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D}
- name: nothing-configured
  tablePattern: "demo.empty.*"
"""
OPERATOR_KEY, VIEWER_KEY = "floe_operatorOperatorOperator0001", "floe_viewerViewerViewerViewer00001"


def start_server(app) -> tuple[uvicorn.Server, threading.Thread, str]:
    """uvicorn serving ``app`` on 127.0.0.1 and a free port (the socket is bound before it starts)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API server did not start"
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def serving(root, policies: str, keys: str, build_catalog, extra: str = ""):
    """The API on a lakehouse under ``root``: ``keys`` is the keys file's text, ``build_catalog(settings)``
    makes the tables, ``extra`` follows the keys file in floe.yaml (more ``api`` keys, other sections);
    yields what the tests need (url, settings, instance, root)."""
    keys_file = root / "keys.txt"
    keys_file.write_text(keys)
    config = write_settings(root, policies, extra=f"api:\n  keys-file: {keys_file}\n{extra}")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        patch.setenv("FLOE_CONFIG", str(config))
        settings = load_settings(config, environ={})
        build_catalog(settings)
        with DagsterInstance.get() as instance:
            app = create_app(settings, KeyStore(settings.api), instance)
            server, thread, url = start_server(app)
            try:
                yield {"url": url, "settings": settings, "instance": instance, "root": root}
            finally:
                server.should_exit = True
                thread.join(20)


def _lakehouse(settings) -> None:
    catalog = open_catalog(settings.catalog)
    for namespace in ("sales", "lake", ("lake", "raw"), "misc", "empty"):
        catalog.create_namespace(namespace)
    orders = _create(catalog, "sales.orders")
    for i in range(5):
        orders.append(rows(i * 10, 10))
    _create(catalog, ("lake", "raw", "clicks")).append(rows(0, 10))
    _create(catalog, "misc.loose").append(rows(0, 10))
    _create(catalog, "empty.things").append(rows(0, 10))
    refresh_table_cache(settings)
    _create(catalog, "sales.late").append(rows(0, 10))  # in the catalog, not an asset yet


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    keys = f"ops-bot:OPERATOR:{hash_key(OPERATOR_KEY)}\ndash:VIEWER:{hash_key(VIEWER_KEY)}\n"
    with serving(tmp_path_factory.mktemp("api"), POLICIES, keys, _lakehouse) as served:
        yield served


def call(api, method, path, key=OPERATOR_KEY, **kwargs):
    headers = kwargs.pop("headers", {})
    if key:
        headers["X-API-Key"] = key
    return requests.request(method, api["url"] + path, headers=headers, timeout=60, **kwargs)


def no_runs(api) -> bool:
    """No run but the queued one of the last test (which runs without a daemon)."""
    return api["instance"].get_runs_count(RunsFilter(tags={"floe/table": "demo.sales.orders"})) == 0


def assert_error(response, status, code, *fragments):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "code", "details", "timestamp"}, body
    assert body["code"] == code, body
    datetime.fromisoformat(body["timestamp"])
    for fragment in fragments:
        assert fragment in body["error"], body
    return body


READS = [
    ("GET", "/api/v1/tables/sales/orders/trigger-status"),
    ("GET", "/api/v1/tables/sales/orders/health?tier=summary"),
    ("GET", "/api/v1/operations"),
    ("POST", "/api/v1/policies/validate-pattern"),
    ("GET", "/api/v1/openapi.json"),
]
TRIGGER_BODY = {"catalog": "demo", "namespace": "sales", "table": "orders", "dryRun": True}


@pytest.mark.parametrize("method, path", [*READS, ("POST", "/api/v1/maintenance/trigger")])
def test_every_endpoint_but_health_needs_a_valid_key(api, method, path):
    body = {"pattern": "*"} if "validate" in path else TRIGGER_BODY
    assert_error(call(api, method, path, key=None, json=body), 401, "UNAUTHORIZED", "X-API-Key")
    assert_error(call(api, method, path, key="floe_wrongwrongwrongwrongwrongwrong1", json=body), 401,
                 "UNAUTHORIZED", "not valid")
    assert call(api, method, path, key=OPERATOR_KEY, json=body).status_code == 200
    viewer = call(api, method, path, key=VIEWER_KEY, json=body)
    if "trigger" in path and method == "POST":
        details = assert_error(viewer, 403, "FORBIDDEN", "Insufficient permissions")["details"]  # Floe's words
        assert details == {"key": "dash", "role": "VIEWER", "needs": "trigger"}
    else:
        assert viewer.status_code == 200, viewer.text


def test_health_needs_no_key_and_unknown_routes_and_methods_use_the_error_shape(api):
    health = call(api, "GET", "/health", key=None)
    assert health.status_code == 200
    assert health.json()["status"] == "UP" and {c["name"] for c in health.json()["checks"]} == {
        "dagster-instance", "catalog"}
    assert_error(call(api, "GET", "/api/v1/nope"), 404, "NOT_FOUND")
    assert_error(call(api, "GET", "/api/v1/nope", key=None), 404, "NOT_FOUND")
    assert_error(call(api, "DELETE", "/health"), 405, "METHOD_NOT_ALLOWED")
    assert_error(call(api, "GET", "/api/v1/maintenance/trigger"), 405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize("body, field", [
    ({"namespace": "sales", "table": "orders"}, "body.catalog: Field required"),
    ({**TRIGGER_BODY, "dryRun": "yes"}, "body.dryRun"),
    ({**TRIGGER_BODY, "dryrun": True}, "body.dryrun: Extra inputs are not permitted"),
    ({**TRIGGER_BODY, "operations": ["COMPACT"]}, "body.operations.0"),
    ({**TRIGGER_BODY, "operations": []}, "body.operations"),
    ({**TRIGGER_BODY, "table": ""}, "body.table"),
    ([1, 2], "body"),
])
def test_a_bad_trigger_body_is_a_400_naming_the_field(api, body, field):
    error = assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json=body), 400, "VALIDATION_FAILED", field)
    assert error["details"]["errors"]


def test_malformed_json_and_bad_query_values_are_400s(api):
    response = call(api, "POST", "/api/v1/maintenance/trigger", data="{not json",
                    headers={"Content-Type": "application/json"})
    assert_error(response, 400, "VALIDATION_FAILED", "body")
    # Floe's pagination messages, not pydantic's
    for query, message in (("limit=0", "Limit must be between 1 and 100"), ("limit=101", "Limit must be between 1 and 100"),
                           ("offset=-1", "Offset must be non-negative")):
        error = assert_error(call(api, "GET", f"/api/v1/operations?{query}"), 400, "VALIDATION_FAILED", message)
        assert error["error"] == message
    assert_error(call(api, "GET", "/api/v1/operations?status=DONE"), 400, "VALIDATION_FAILED",
                 "Invalid status: DONE. Valid values: [PENDING, RUNNING, SUCCESS, PARTIAL_FAILURE, FAILED, NO_POLICY")
    for floe_status in ("SUCCESS", "partial_failure", "NO_POLICY", "No_Operations", "succeeded"):  # Floe's, any case
        page = call(api, "GET", f"/api/v1/operations?status={floe_status}")
        assert page.status_code == 200 and page.json()["total"] == 0, page.text
    assert_error(call(api, "GET", "/api/v1/tables/sales/orders/trigger-status?at=yesterday"), 400,
                 "VALIDATION_FAILED", "at: expected an RFC 3339 date-time")
    assert_error(call(api, "GET", "/api/v1/tables/sales..x/orders/trigger-status"), 400, "VALIDATION_FAILED",
                 "path.namespace")
    assert_error(call(api, "GET", "/api/v1/tables/sales/or.ders/health"), 400, "VALIDATION_FAILED", "path.table")
    # A blank part (PyIceberg refuses such identifiers) is a bad request, not a catalog outage.
    assert_error(call(api, "GET", "/api/v1/tables/sales.%09/orders/trigger-status"), 400, "VALIDATION_FAILED",
                 "path.namespace")
    assert_error(call(api, "GET", "/api/v1/tables/sales/%20/health"), 400, "VALIDATION_FAILED", "path.table")
    assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json={**TRIGGER_BODY, "namespace": "sales. "}),
                 400, "INVALID_TABLE_NAME", "blank")
    assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json={**TRIGGER_BODY, "table": "\t"}), 400,
                 "INVALID_TABLE_NAME", "blank")
    assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json={**TRIGGER_BODY, "namespace": "a..b"}), 400,
                 "INVALID_TABLE_NAME", "namespace 'a..b' has an empty (or blank) part")


def test_dry_run_says_what_would_be_queued_and_launches_nothing(api):
    response = call(api, "POST", "/api/v1/maintenance/trigger", json=TRIGGER_BODY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "DRY_RUN" and body["dryRun"] is True and body["policyName"] == "sales"
    assert body["table"] == "demo.sales.orders" and body["orchestrationId"]
    assert [(r["operationType"], r["status"], r["runId"]) for r in body["operationResults"]] == [
        ("REWRITE_DATA_FILES", "WOULD_RUN", None), ("EXPIRE_SNAPSHOTS", "WOULD_RUN", None)]
    only = call(api, "POST", "/api/v1/maintenance/trigger",
                json={**TRIGGER_BODY, "operations": ["EXPIRE_SNAPSHOTS"], "policyName": "sales"}).json()
    assert [r["operationType"] for r in only["operationResults"]] == ["EXPIRE_SNAPSHOTS"]
    assert no_runs(api)


def test_nested_namespaces_are_dotted_in_paths_and_bodies(api):
    body = {"catalog": "demo", "namespace": "lake.raw", "table": "clicks", "dryRun": True}
    response = call(api, "POST", "/api/v1/maintenance/trigger", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["table"] == "demo.lake.raw.clicks" and response.json()["policyName"] == "nested"
    status = call(api, "GET", "/api/v1/tables/lake.raw/clicks/trigger-status").json()
    assert (status["namespace"], status["table"], status["policyName"]) == ("lake.raw", "clicks", "nested")
    assert list(status["operationStatuses"]) == [op.value for op in ALL_OPERATIONS]  # every operation, as Floe
    assert status["operationStatuses"]["REWRITE_MANIFESTS"]["enabled"] is True
    disabled = status["operationStatuses"]["EXPIRE_SNAPSHOTS"]
    assert (disabled["enabled"], disabled["shouldTrigger"], disabled["unmetConditions"]) == (
        False, False, ["Operation disabled in policy"])
    health = call(api, "GET", "/api/v1/tables/lake.raw/clicks/health")
    assert health.status_code == 200 and health.json()["qualifiedName"] == "demo.lake.raw.clicks"


def test_unknown_tables_catalogs_and_policies_are_404s(api):
    trigger = "/api/v1/maintenance/trigger"
    missing = assert_error(call(api, "POST", trigger, json={**TRIGGER_BODY, "table": "nope"}), 404,
                           "TABLE_NOT_FOUND", "Table not found: sales.nope")
    assert missing["details"]["table"] == "demo.sales.nope"
    assert_error(call(api, "POST", trigger, json={**TRIGGER_BODY, "catalog": "prod"}), 404, "TABLE_NOT_FOUND",
                 "catalog 'prod'")
    assert_error(call(api, "POST", trigger, json={**TRIGGER_BODY, "namespace": "misc", "table": "loose"}), 404,
                 "NO_POLICY", "No matching policy found for table demo.misc.loose")
    assert_error(call(api, "POST", trigger, json={**TRIGGER_BODY, "policyName": "ghost"}), 404,
                 "POLICY_NOT_FOUND", "ghost")
    assert_error(call(api, "POST", trigger, json={**TRIGGER_BODY, "policyName": "nested"}), 400,
                 "POLICY_NOT_EFFECTIVE", "not the policy in effect")
    assert_error(call(api, "POST", trigger, json={**TRIGGER_BODY, "operations": ["ORPHAN_CLEANUP"]}), 404,
                 "OPERATION_NOT_CONFIGURED", "ORPHAN_CLEANUP")
    for path in ("/api/v1/tables/sales/nope/trigger-status", "/api/v1/tables/nope.deeper/orders/health"):
        assert_error(call(api, "GET", path), 404, "TABLE_NOT_FOUND")
    assert call(api, "GET", "/api/v1/tables/misc/loose/trigger-status").json()["policyName"] is None
    for blank in ("", "   "):  # Floe: a blank policyName is no specific policy
        answer = call(api, "POST", trigger, json={**TRIGGER_BODY, "policyName": blank, "dryRun": True})
        assert answer.status_code == 200 and answer.json()["policyName"] == "sales", answer.text


def test_a_policy_without_operations_and_a_table_that_is_not_an_asset_yet(api):
    nothing = call(api, "POST", "/api/v1/maintenance/trigger",
                   json={**TRIGGER_BODY, "namespace": "empty", "table": "things", "dryRun": False})
    assert nothing.status_code == 200 and nothing.json()["status"] == "NO_OPERATIONS"
    late = call(api, "POST", "/api/v1/maintenance/trigger", json={**TRIGGER_BODY, "table": "late", "dryRun": False})
    assert_error(late, 409, "TABLE_NOT_LOADED", "tables --refresh")
    assert no_runs(api)


def test_a_held_table_lock_is_a_409_naming_the_lock(api):
    table = TableName("demo", ("sales",), "orders")
    with hold_lock(table_lock_name(table), api["settings"].coordination_url):
        error = assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json={**TRIGGER_BODY, "dryRun": False}),
                             409, "TABLE_BUSY", "demo.sales.orders is being maintained")
    assert error["details"] == {"table": "demo.sales.orders", "runId": None, "lock": table_lock_name(table)}
    assert no_runs(api)


def test_trigger_status_is_explain_for_the_same_moment(api):
    at = "2026-11-22T10:00:00+00:00"
    body = call(api, "GET", "/api/v1/tables/sales/orders/trigger-status", params={"at": at}).json()
    coordination = Coordination(api["settings"].coordination_url)
    expected = json.loads(json.dumps(explain_table(api["settings"], coordination, "sales.orders",
                                                   datetime.fromisoformat(at), api["instance"]), default=str))
    assert body == expected
    status = body["operationStatuses"]["REWRITE_DATA_FILES"]
    assert set(status) >= {"operationType", "shouldTrigger", "metConditions", "unmetConditions", "nextEligibleTime",
                           "forcedByCriticalPipeline", "enabled"}
    assert status["shouldTrigger"] is True  # five small files, more than the policy's 3
    assert status["metConditions"] == ["Small file count: 5 >= 3"]  # Floe's words
    assert status["metConditionDetails"] == [{"name": "smallFileCountAbove", "measured": 5.0, "threshold": 3}]
    loose = call(api, "GET", "/api/v1/tables/misc/loose/trigger-status").json()  # no policy matches
    assert list(loose["operationStatuses"]) == [op.value for op in ALL_OPERATIONS]
    for entry in loose["operationStatuses"].values():
        assert (entry["enabled"], entry["shouldTrigger"], entry["unmetConditions"], entry["metConditions"]) == (
            False, False, ["No matching policy"], [])


def test_trigger_status_gives_each_due_operation_its_own_verdict_and_the_wait_beside_it(api):
    """Both of orders' operations are due (never run, five small files): Floe's trigger status answers
    true for each, as its trigger runs them all in order. The planner admits one operation per table a
    tick, and the status shows that wait beside the verdict, without changing what the planner admits."""
    from floe_dagster.core.plan.planner import plan
    from floe_dagster.scheduling.inputs import gather

    at = "2026-11-22T10:00:00+00:00"
    body = call(api, "GET", "/api/v1/tables/sales/orders/trigger-status", params={"at": at}, key=VIEWER_KEY).json()
    rewrite, expire = (body["operationStatuses"][op] for op in ("REWRITE_DATA_FILES", "EXPIRE_SNAPSHOTS"))
    assert (rewrite["shouldTrigger"], expire["shouldTrigger"]) == (True, True)
    assert (rewrite["waitsThisTick"], rewrite["trigger"], expire["trigger"]) == (None, "interval", "interval")
    assert expire["reasons"] == ["interval: never run (interval P1D)"]
    assert expire["waitsThisTick"] == ("in_flight: REWRITE_DATA_FILES of this table was admitted this tick "
                                       "(one operation per table at a time)")
    assert expire["nextEligibleTime"] == at and expire["metConditions"] == ["Small file count: 5 >= 3"]
    # An operation a gate holds answers false, with the gate's reason and no wait.
    late = call(api, "GET", "/api/v1/tables/sales/late/trigger-status", params={"at": at}).json()
    for status in late["operationStatuses"].values():
        assert status["shouldTrigger"] is False and status["waitsThisTick"] is None
    # What the planner admits is unchanged: the rewrite runs, expiry waits for the next tick.
    settings, instance = api["settings"], api["instance"]
    planned = plan(gather(settings, instance, Coordination(settings.coordination_url), datetime.fromisoformat(at),
                          None).plan_input)
    decided = {d.operation.value: d for d in planned.decisions if d.table.qualified == "demo.sales.orders"}
    assert decided["REWRITE_DATA_FILES"].decision == "run" and decided["EXPIRE_SNAPSHOTS"].decision == "skip"
    assert decided["EXPIRE_SNAPSHOTS"].reasons == (expire["waitsThisTick"], *expire["reasons"])


def test_a_ticks_gathering_reads_the_coordination_database_once(api):
    """One connection, four statements (issue 35): the writers, the ledger, the history and the outcomes."""
    from sqlalchemy import event

    from floe_dagster.scheduling.inputs import gather

    settings, instance = api["settings"], api["instance"]
    coordination = Coordination(settings.coordination_url)
    statements: list[str] = []
    connections: list[object] = []
    event.listen(coordination.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    event.listen(coordination.engine, "checkout", lambda *args: connections.append(args[1]))
    gather(settings, instance, coordination, datetime.fromisoformat("2026-11-22T10:00:00+00:00"), None)
    assert len(statements) <= 4 and len(connections) == 1, statements


def test_validate_pattern(api):
    path = "/api/v1/policies/validate-pattern"
    body = call(api, "POST", path, json={"pattern": "demo.sales.*"}, key=VIEWER_KEY).json()
    assert body == {"valid": True, "message": "Pattern matches 2 table(s)",
                    "matchedTables": ["demo.sales.late", "demo.sales.orders"], "matchCount": 2}
    nested = call(api, "POST", path, json={"pattern": "demo.lake.raw.*"}).json()
    assert nested["matchedTables"] == ["demo.lake.raw.clicks"]
    missing = call(api, "POST", path, json={"pattern": "sales.nope"}).json()
    assert missing == {"valid": False, "message": "Table not found: sales.nope", "matchedTables": [], "matchCount": 0}
    none = call(api, "POST", path, json={"pattern": "other.*"}).json()
    assert none["valid"] is True and none["matchCount"] == 0 and none["message"].startswith("Warning")
    assert_error(call(api, "POST", path, json={"pattern": "/[/"}), 400, "INVALID_PATTERN", "Invalid pattern")
    assert_error(call(api, "POST", path, json={}), 400, "VALIDATION_FAILED", "body.pattern")


def test_the_openapi_document_describes_every_endpoint_without_422s(api):
    document = call(api, "GET", "/api/v1/openapi.json", key=VIEWER_KEY).json()
    assert set(document["paths"]) >= {
        "/api/v1/maintenance/trigger", "/api/v1/tables/{namespace}/{table}/trigger-status",
        "/api/v1/tables/{namespace}/{table}/health", "/api/v1/tables/{namespace}/{table}/health/history",
        "/api/v1/policies/validate-pattern", "/api/v1/operations", "/health"}
    assert {path for path in document["paths"] if not path.startswith(("/api/v1/", "/health"))} <= {"/metrics"}
    responses = {code for item in document["paths"].values() for op in item.values() for code in op["responses"]}
    assert "422" not in responses and "400" in responses
    assert document["components"]["securitySchemes"]["ApiKey"] == {
        "type": "apiKey", "in": "header", "name": "X-API-Key", "description": "An API key; the server stores only "
        "its SHA-256"}
    assert "ValidationError" not in json.dumps(document)


def test_runs_made_before_the_audit_tags_moved_are_still_found_by_trigger_id(api):
    """Runs stored before issue 16 carry ``floe/trigger-id`` and ``floe/actor`` (now under
    ``dagster/floe.``): the operations endpoint still finds them and reports their actor."""
    old = DagsterRun(job_name="floe_maintenance", run_id="0" * 8 + "-0000-0000-0000-000000000016",
                     status=DagsterRunStatus.SUCCESS,
                     tags={"floe/table": "demo.misc.loose", "floe/operation": "REWRITE_MANIFESTS",
                           "floe/trigger": "manual", "floe/trigger-id": "old-trigger", "floe/actor": "ana",
                           "floe/reason": "before the upgrade", "dagster/partition": "REWRITE_MANIFESTS"})
    api["instance"].add_run(old)
    try:
        listed = call(api, "GET", "/api/v1/operations?triggerId=old-trigger", key=VIEWER_KEY).json()
        assert [(o["runId"], o["triggerId"], o["actor"], o["table"]) for o in listed["operations"]] == [
            (old.run_id, "old-trigger", "ana", "demo.misc.loose")]
    finally:
        api["instance"].delete_run(old.run_id)


def test_a_trigger_queues_its_runs_and_without_a_daemon_does_not_wait(api):
    """Runs last: it leaves one queued run (no daemon runs in this module). The queued run makes
    the table busy: a second trigger is a 409 naming it."""
    body = {"catalog": "demo", "namespace": "lake.raw", "table": "clicks", "reason": "after the backfill"}
    started = time.monotonic()
    response = call(api, "POST", "/api/v1/maintenance/trigger?wait=true&timeout=600", json=body)
    assert response.status_code == 202, response.text
    assert time.monotonic() - started < 120  # did not wait for a daemon that is not there
    queued = response.json()
    assert queued["status"] == "PENDING" and "no dagster-daemon is running" in queued["message"]
    assert response.headers["Location"] == f"/api/v1/operations?triggerId={queued['orchestrationId']}"
    [result] = queued["operationResults"]
    assert result["operationType"] == "REWRITE_MANIFESTS" and result["status"] == "PENDING"
    run = api["instance"].get_run_by_id(result["runId"])
    assert run.status == DagsterRunStatus.QUEUED and run.job_name == "floe_maintenance"
    assert {k: run.tags[k] for k in ("floe/trigger", T.TRIGGER_ID, T.ACTOR, "floe/reason", "floe/table",
                                     "dagster/partition")} == {
        "floe/trigger": "manual", T.TRIGGER_ID: queued["orchestrationId"], T.ACTOR: "ops-bot",
        "floe/reason": "after the backfill", "floe/table": "demo.lake.raw.clicks", "dagster/partition": "REWRITE_MANIFESTS"}
    assert OPERATOR_KEY not in json.dumps(dict(run.tags)) and hash_key(OPERATOR_KEY) not in json.dumps(dict(run.tags))
    listed = call(api, "GET", response.headers["Location"], key=VIEWER_KEY).json()
    assert [(o["runId"], o["status"], o["actor"]) for o in listed["operations"]] == [(run.run_id, "PENDING", "ops-bot")]
    busy = assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json=body), 409, "TABLE_BUSY", run.run_id)
    assert busy["details"]["runId"] == run.run_id and busy["details"]["runStatus"] == "QUEUED"
    assert busy["details"]["triggerId"] == queued["orchestrationId"]


@pytest.mark.parametrize("path, field", [("/api/v1/tables/sales/orders%20/trigger-status", "path.table"),
                                         ("/api/v1/tables/%20sales/orders/health", "path.namespace"),
                                         ("/api/v1/tables/sales.%20eu/orders/trigger-status", "path.namespace")])
def test_names_with_blanks_at_their_ends_are_refused_not_read_as_another_table(api, path, field):
    # "orders " used to be parsed back (stripped) as "orders": the answer was about another table.
    assert_error(call(api, "GET", path), 400, "VALIDATION_FAILED", field)
    body = {"catalog": "demo", "namespace": "sales", "table": "orders ", "dryRun": True}
    assert_error(call(api, "POST", "/api/v1/maintenance/trigger", json=body), 400, "INVALID_TABLE_NAME", "'orders '")


@pytest.mark.parametrize("at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
def test_a_time_far_out_of_range_is_a_400_not_an_overflow(api, at):
    assert_error(call(api, "GET", "/api/v1/tables/sales/orders/trigger-status", params={"at": at}), 400,
                 "VALIDATION_FAILED", "at: expected a time between")


def test_a_catastrophic_regex_is_refused_without_freezing_the_server(api):
    catalog = open_catalog(api["settings"].catalog)
    name = ("misc", "a_table_name_long_enough_for_exponential_backtracking")
    _create(catalog, name).append(rows(0, 1))
    try:
        answers = {}
        slow = threading.Thread(target=lambda: answers.update(regex=call(
            api, "POST", "/api/v1/policies/validate-pattern", json={"pattern": "/(.|.)*X/"})))
        started = time.monotonic()
        slow.start()
        time.sleep(0.5)
        assert call(api, "GET", "/health", key=None).status_code == 200  # the server still answers meanwhile
        slow.join(60)
        assert time.monotonic() - started < 30
        assert_error(answers["regex"], 400, "INVALID_PATTERN", "takes longer than")
        fine = call(api, "POST", "/api/v1/policies/validate-pattern", json={"pattern": r"/demo\.misc\..*/"}).json()
        assert fine["matchedTables"] == ["demo.misc.a_table_name_long_enough_for_exponential_backtracking",
                                         "demo.misc.loose"]
    finally:
        catalog.drop_table(name)


def test_health_and_its_history_in_floes_shape(api):
    from datetime import timezone

    from floe_dagster.defs.health_reporting import report_health_events
    from floe_dagster.iceberg.health_collector import HealthCollector
    from floe_dagster.policies import load_policy_set

    settings, instance = api["settings"], api["instance"]
    health = call(api, "GET", "/api/v1/tables/sales/orders/health").json()
    assert list(health)[:3] == ["qualifiedName", "assessedAt", "healthStatus"]
    assert health["qualifiedName"] == "demo.sales.orders" and health["healthStatus"] in ("healthy", "warning", "critical")
    assert health["dataFileCount"] == 5 and health["totalDataSizeFormatted"].endswith((" B", " KB"))
    assert all(set(i) == {"type", "severity", "message"} for i in health["issues"])
    assert health["thresholds"]["smallFileSizeBytes"] > 0 and "debt" in health  # Floe's keys, ours beside

    # No observation yet: an empty history (the table exists); an unknown table is Floe's 404.
    empty = call(api, "GET", "/api/v1/tables/sales/orders/health/history").json()
    assert (empty["catalog"], empty["namespace"], empty["table"], empty["history"], empty["total"]) == (
        "demo", "sales", "orders", [], 0)
    assert_error(call(api, "GET", "/api/v1/tables/sales/nope/health/history"), 404, "TABLE_NOT_FOUND",
                 "Table not found: sales.nope")
    assert_error(call(api, "GET", "/api/v1/tables/sales/orders/health/history?limit=0"), 400, "VALIDATION_FAILED")

    # The sensor records an observation when health changes; the history serves it.
    table = TableName("demo", ("sales",), "orders")
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        snapshot = collector.collect([table], tier="full")
    assert report_health_events(instance, snapshot, load_policy_set(settings), datetime.now(timezone.utc)) == 1
    history = call(api, "GET", "/api/v1/tables/sales/orders/health/history?limit=5").json()
    assert history["total"] == 1
    [report] = history["history"]
    assert report["qualifiedName"] == "demo.sales.orders" and report["dataFileCount"] == 5
    assert report["healthStatus"] == health["healthStatus"] and report["issues"] == health["issues"]
    assert report["thresholds"] == health["thresholds"]
