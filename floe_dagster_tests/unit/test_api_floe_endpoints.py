"""Floe's endpoints that floe-dagster added for Floe's users (issue 23), over real HTTP as in
test_api_http.py (uvicorn in a thread, a real PyIceberg SQLite catalog, a real Dagster instance, real
keys): tables, namespaces, table details and HEAD, latest health, operations by id / running / stats /
per table, the catalog, API keys with Floe's ADMIN role, /api/openapi and Swagger at /api; and Floe's
answers where ours differed: pagination messages, 415, policy patterns checked against the catalog,
the catalog down (policies 400 after the name's 409, trigger 500), the minimum interval of a table on a
cron schedule in its trigger status."""

from __future__ import annotations

import shutil
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus
from sqlalchemy import select

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.coordination.api_keys import api_keys
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.instance import project_file
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_api_http import (
    OPERATOR_KEY,
    POLICIES,
    VIEWER_KEY,
    _lakehouse,
    assert_error,
    call,
    serving,
    start_server,
)

ADMIN_KEY = "floe_adminAdminAdminAdminAdmin0001"
KEYS = (f"root:ADMIN:{hash_key(ADMIN_KEY)}\nops-bot:OPERATOR:{hash_key(OPERATOR_KEY)}\n"
        f"dash:VIEWER:{hash_key(VIEWER_KEY)}\n")
CRON_POLICY = """
- name: cron-orders
  tablePattern: "demo.misc.loose"
  rewriteManifests: {}
  rewriteManifestsSchedule: {cronExpression: "0 0 2 * * ?"}
  triggerConditions: {minIntervalMinutes: 60}
"""


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("floe_api"), POLICIES + CRON_POLICY, KEYS, _lakehouse) as served:
        yield served


def maintenance_run(api, status: DagsterRunStatus, table="demo.sales.orders", **tags) -> DagsterRun:
    run = DagsterRun(job_name="floe_maintenance", run_id=str(uuid.uuid4()), status=status,
                     tags={T.TABLE: table, T.OPERATION: "REWRITE_DATA_FILES", T.TRIGGER: "manual",
                           "dagster/partition": "REWRITE_DATA_FILES", **tags})
    return api["instance"].add_run(run)


# -- tables ----------------------------------------------------------------------------------------------


def test_tables_and_namespaces_come_from_the_cached_table_list(api):
    page = call(api, "GET", "/api/v1/tables", key=VIEWER_KEY).json()
    # sales.late was created after the cache was written: not listed (no catalog listing per request)
    assert [t["qualifiedName"] for t in page["tables"]] == [
        "demo.empty.things", "demo.lake.raw.clicks", "demo.misc.loose", "demo.sales.orders"]
    assert page["tables"][1] == {"catalog": "demo", "namespace": "lake.raw", "name": "clicks",
                                 "qualifiedName": "demo.lake.raw.clicks"}
    assert (page["catalog"], page["total"], page["limit"], page["offset"], page["hasMore"]) == ("demo", 4, 20, 0, False)
    second = call(api, "GET", "/api/v1/tables?limit=2&offset=2").json()
    assert [t["name"] for t in second["tables"]] == ["loose", "orders"] and second["hasMore"] is False
    assert call(api, "GET", "/api/v1/tables?limit=1").json()["hasMore"] is True
    assert_error(call(api, "GET", "/api/v1/tables?limit=101"), 400, "VALIDATION_FAILED", "Limit must be between 1 and 100")
    assert_error(call(api, "GET", "/api/v1/tables?offset=-3"), 400, "VALIDATION_FAILED", "Offset must be non-negative")

    namespaces = call(api, "GET", "/api/v1/tables/namespaces").json()
    assert namespaces == {"catalog": "demo", "namespaces": ["empty", "lake.raw", "misc", "sales"], "total": 4}
    nested = call(api, "GET", "/api/v1/tables/namespaces/lake.raw").json()
    assert (nested["namespace"], [t["name"] for t in nested["tables"]], nested["total"]) == ("lake.raw", ["clicks"], 1)
    unknown = call(api, "GET", "/api/v1/tables/namespaces/nope").json()
    assert (unknown["tables"], unknown["total"]) == ([], 0)
    assert_error(call(api, "GET", "/api/v1/tables/namespaces/sales?limit=0"), 400, "VALIDATION_FAILED", "Limit")
    for path in ("/api/v1/tables", "/api/v1/tables/namespaces", "/api/v1/tables/namespaces/sales"):
        assert_error(call(api, "GET", path, key=None), 401, "UNAUTHORIZED")


def test_one_tables_details_and_whether_it_exists(api):
    detail = call(api, "GET", "/api/v1/tables/sales/orders", key=VIEWER_KEY)
    assert detail.status_code == 200, detail.text
    body = detail.json()
    assert (body["qualifiedName"], body["namespace"], body["name"]) == ("demo.sales.orders", "sales", "orders")
    assert body["dataFileCount"] == 5 and body["totalRecordCount"] == 50 and body["snapshotCount"] == 5
    assert body["manifestCount"] >= 1 and body["totalManifestSizeBytes"] > 0 and body["formatVersion"] in (1, 2, 3)
    assert body["totalDataSizeFormatted"].endswith((" B", " KB")) and body["location"]
    assert body["currentSnapshotTimestamp"] >= body["oldestSnapshotTimestamp"]
    assert call(api, "GET", "/api/v1/tables/lake.raw/clicks").json()["qualifiedName"] == "demo.lake.raw.clicks"
    assert call(api, "GET", "/api/v1/tables/sales/late").status_code == 200  # in the catalog, not an asset yet

    assert_error(call(api, "GET", "/api/v1/tables/sales/nope"), 404, "TABLE_NOT_FOUND", "Table not found: sales.nope")
    assert_error(call(api, "GET", "/api/v1/tables/sales/or.ders"), 400, "VALIDATION_FAILED", "path.table")
    exists = call(api, "HEAD", "/api/v1/tables/sales/orders", key=VIEWER_KEY)
    assert exists.status_code == 200 and exists.content == b""
    missing = call(api, "HEAD", "/api/v1/tables/sales/nope", key=VIEWER_KEY)
    assert missing.status_code == 404 and missing.content == b""
    assert call(api, "HEAD", "/api/v1/tables/sales/orders", key=None).status_code == 401


def test_latest_health_of_every_table_from_the_recorded_observations(api):
    from floe_dagster.defs.health_reporting import report_health_events
    from floe_dagster.iceberg.catalog import open_catalog
    from floe_dagster.iceberg.health_collector import HealthCollector
    from floe_dagster.policies import load_policy_set

    settings = api["settings"]
    before = call(api, "GET", "/api/v1/tables/health/latest").json()
    assert before["catalog"] == "demo" and "demo.misc.loose" not in [r["qualifiedName"] for r in before["reports"]]
    tables = [TableName("demo", ("misc",), "loose"), TableName("demo", ("lake", "raw"), "clicks")]
    with HealthCollector(open_catalog(settings.catalog), settings) as collector:
        snapshot = collector.collect(tables, tier="full")
    assert report_health_events(api["instance"], snapshot, load_policy_set(settings), datetime.now(timezone.utc)) == 2
    latest = call(api, "GET", "/api/v1/tables/health/latest", key=VIEWER_KEY).json()
    names = [r["qualifiedName"] for r in latest["reports"]]
    assert {"demo.misc.loose", "demo.lake.raw.clicks"} <= set(names) and latest["total"] == len(names)
    loose = next(r for r in latest["reports"] if r["qualifiedName"] == "demo.misc.loose")
    assert loose["dataFileCount"] == 1 and loose["healthStatus"] in ("healthy", "warning", "critical")
    assert [r["assessedAt"] for r in latest["reports"]] == sorted((r["assessedAt"] for r in latest["reports"]),
                                                                   reverse=True)
    assert len(call(api, "GET", "/api/v1/tables/health/latest?limit=1").json()["reports"]) == 1
    assert_error(call(api, "GET", "/api/v1/tables/health/latest?limit=0"), 400, "VALIDATION_FAILED")

    # A newer observation of an operation partition (a shadow decision, a lost race) is no health report.
    from dagster import AssetObservation

    from floe_dagster.defs.names import asset_key_for
    api["instance"].report_runless_asset_event(AssetObservation(
        asset_key=asset_key_for(tables[0]), partition="REWRITE_DATA_FILES", metadata={"shadow": True}))
    again = call(api, "GET", "/api/v1/tables/health/latest", key=VIEWER_KEY).json()
    assert next(r for r in again["reports"] if r["qualifiedName"] == "demo.misc.loose") == loose
    history = call(api, "GET", "/api/v1/tables/misc/loose/health/history", key=VIEWER_KEY).json()["history"]
    assert len(history) == 1 and history[0]["healthStatus"] == loose["healthStatus"]


# -- operations ------------------------------------------------------------------------------------------


def test_an_operation_by_id_with_floes_keys(api):
    run = maintenance_run(api, DagsterRunStatus.SUCCESS)
    try:
        body = call(api, "GET", f"/api/v1/operations/{run.run_id}", key=VIEWER_KEY).json()
        assert (body["id"], body["runId"], body["qualifiedTableName"], body["catalog"], body["namespace"],
                body["tableName"]) == (run.run_id, run.run_id, "demo.sales.orders", "demo", "sales", "orders")
        assert (body["status"], body["runStatus"]) == ("SUCCESS", "SUCCESS") and body["results"]["operations"][0]["operationType"] == "REWRITE_DATA_FILES"
        assert {"startedAt", "completedAt", "normalizedMetrics", "statusDescription", "createdAt"} <= set(body)
    finally:
        api["instance"].delete_run(run.run_id)
    assert_error(call(api, "GET", "/api/v1/operations/not-a-uuid"), 400, "VALIDATION_FAILED", "Invalid UUID: not-a-uuid")
    unknown = str(uuid.uuid4())
    error = assert_error(call(api, "GET", f"/api/v1/operations/{unknown}"), 404, "NOT_FOUND",
                         f"Operation not found: {unknown}")
    assert error["details"] == {"resourceType": "Operation", "id": unknown}
    other = api["instance"].add_run(DagsterRun(job_name="someone_elses_job", run_id=str(uuid.uuid4()),
                                               status=DagsterRunStatus.SUCCESS))
    try:  # a run that is no maintenance run is no operation
        assert_error(call(api, "GET", f"/api/v1/operations/{other.run_id}"), 404, "NOT_FOUND")
    finally:
        api["instance"].delete_run(other.run_id)


def test_running_operations_stats_and_a_tables_operations(api):
    runs = [maintenance_run(api, DagsterRunStatus.STARTED), maintenance_run(api, DagsterRunStatus.SUCCESS),
            maintenance_run(api, DagsterRunStatus.FAILURE), maintenance_run(api, DagsterRunStatus.SUCCESS,
                                                                            table="demo.misc.loose")]
    try:
        running = call(api, "GET", "/api/v1/operations/running", key=VIEWER_KEY).json()
        assert [o["runId"] for o in running["operations"]] == [runs[0].run_id]
        assert (running["total"], running["limit"], running["hasMore"]) == (1, 50, False)
        assert_error(call(api, "GET", "/api/v1/operations/running?limit=500"), 400, "VALIDATION_FAILED", "Limit")

        stats = call(api, "GET", "/api/v1/operations/stats?window=30m").json()
        assert (stats["totalOperations"], stats["successCount"], stats["failedCount"], stats["runningCount"],
                stats["completedCount"], stats["withFailuresCount"]) == (4, 2, 1, 1, 3, 1)
        assert stats["successRate"] == pytest.approx(200 / 3) and stats["windowDuration"] == "30m"
        start, end = (datetime.fromisoformat(stats[k]) for k in ("windowStart", "windowEnd"))
        assert end - start == timedelta(minutes=30)
        assert call(api, "GET", "/api/v1/operations/stats").json()["windowDuration"] == "1d"  # Floe's default 24h
        assert call(api, "GET", "/api/v1/operations/stats?window=7d").json()["windowDuration"] == "7d"
        assert call(api, "GET", "/api/v1/operations/stats?window=2").json()["windowDuration"] == "2h"
        for bad in ("soon", "5w", "-1h", "99999d"):
            assert_error(call(api, "GET", f"/api/v1/operations/stats?window={bad}"), 400, "VALIDATION_FAILED",
                         f"Invalid window format: {bad}. Use format like '24h', '7d', '1h'")

        table = call(api, "GET", "/api/v1/operations/table/demo/sales/orders").json()
        assert sorted(o["runId"] for o in table["operations"]) == sorted(r.run_id for r in runs[:3])
        assert table["total"] == 3 and table["table"] == {"catalog": "demo", "namespace": "sales", "name": "orders",
                                                          "qualified": "demo.sales.orders"}
        assert call(api, "GET", "/api/v1/operations/table/demo/sales/orders?limit=1").json()["total"] == 1
        other = call(api, "GET", "/api/v1/operations/table/prod/sales/orders").json()
        assert (other["operations"], other["total"]) == ([], 0)  # a catalog not served here has none
        assert call(api, "GET", "/api/v1/operations/table/demo/sales/never").json()["total"] == 0
        assert_error(call(api, "GET", "/api/v1/operations/table/demo/sales/or.ders"), 400, "VALIDATION_FAILED")
    finally:
        for run in runs:
            api["instance"].delete_run(run.run_id)


def test_the_catalog_with_its_secrets_masked(api):
    body = call(api, "GET", "/api/v1/catalog", key=VIEWER_KEY).json()
    assert (body["name"], body["active"]) == ("demo", True) and uuid.UUID(body["id"])
    assert set(body) == {"id", "name", "type", "uri", "warehouse", "properties", "createdAt", "updatedAt", "active"}
    assert_error(call(api, "GET", "/api/v1/catalog", key=None), 401, "UNAUTHORIZED")


# -- API keys --------------------------------------------------------------------------------------------


def test_an_admin_manages_api_keys_over_http_stored_hashed(api):
    keys = "/api/v1/auth/keys"
    created = call(api, "POST", keys, key=ADMIN_KEY, json={"name": "ci-bot", "role": "OPERATOR"})
    assert created.status_code == 201, created.text
    body = created.json()
    new, info = body["key"], body["apiKey"]
    assert new.startswith("floe_") and len(new) == 37
    assert created.headers["Location"] == f"{keys}/{info['id']}"
    assert (info["name"], info["role"], info["enabled"], info["createdBy"], info["source"]) == (
        "ci-bot", "OPERATOR", True, "file:root", "database")
    assert "TRIGGER_MAINTENANCE" in info["permissions"] and "MANAGE_API_KEYS" not in info["permissions"]
    # Stored as its SHA-256, never the key itself
    engine = Coordination(api["settings"].coordination_url).engine
    with engine.connect() as connection:
        [row] = connection.execute(select(api_keys).where(api_keys.c.name == "ci-bot")).mappings().all()
    assert row["key_hash"] == hash_key(new) and new not in str(dict(row))

    # The new key works at once, as an OPERATOR; /me shows it, with its last use
    me = call(api, "GET", f"{keys}/me", key=new).json()
    assert (me["id"], me["name"], me["role"]) == (info["id"], "ci-bot", "OPERATOR") and me["lastUsedAt"]
    assert call(api, "POST", "/api/v1/maintenance/trigger", key=new,
                json={"catalog": "demo", "namespace": "sales", "table": "orders", "dryRun": True}).status_code == 200
    listed = call(api, "GET", keys, key=ADMIN_KEY).json()
    assert {(k["id"], k["source"]) for k in listed["keys"]} >= {("file:root", "file"), ("file:dash", "file"),
                                                               (info["id"], "database")}
    assert listed["total"] == len(listed["keys"]) == 4
    assert call(api, "GET", f"{keys}/{info['id']}", key=ADMIN_KEY).json()["name"] == "ci-bot"
    assert call(api, "GET", f"{keys}/file:dash", key=ADMIN_KEY).json()["role"] == "VIEWER"

    # Floe's refusals
    assert_error(call(api, "POST", keys, key=ADMIN_KEY, json={"name": "ci-bot"}), 409, "CONFLICT",
                 "API key with name 'ci-bot' already exists")
    assert_error(call(api, "POST", keys, key=ADMIN_KEY, json={"name": "dash"}), 409, "CONFLICT", "'dash'")
    assert_error(call(api, "POST", keys, key=ADMIN_KEY, json={"name": ""}), 400, "VALIDATION_FAILED", "body.name")
    assert_error(call(api, "POST", keys, key=ADMIN_KEY, json={"name": "x", "role": "ROOT"}), 400,
                 "VALIDATION_FAILED", "body.role")
    assert_error(call(api, "GET", f"{keys}/nope", key=ADMIN_KEY), 404, "NOT_FOUND", "API key not found: nope")
    assert_error(call(api, "PUT", f"{keys}/nope", key=ADMIN_KEY, json={"enabled": False}), 404, "NOT_FOUND")
    assert_error(call(api, "DELETE", f"{keys}/nope", key=ADMIN_KEY), 404, "NOT_FOUND")
    assert_error(call(api, "PUT", f"{keys}/file:dash", key=ADMIN_KEY, json={"enabled": False}), 409, "KEY_NOT_MANAGED")
    assert_error(call(api, "PUT", f"{keys}/{info['id']}", key=ADMIN_KEY, json={"name": "dash"}), 409, "CONFLICT")
    assert_error(call(api, "DELETE", f"{keys}/file:root", key=ADMIN_KEY), 400, "VALIDATION_FAILED",
                 "Cannot delete your own API key")

    # Update: a VIEWER cannot trigger; disabled, the key stops working; revoked, it is gone
    changed = call(api, "PUT", f"{keys}/{info['id']}", key=ADMIN_KEY, json={"role": "VIEWER", "name": "ci-viewer"})
    assert (changed.json()["role"], changed.json()["name"]) == ("VIEWER", "ci-viewer")
    assert_error(call(api, "POST", "/api/v1/maintenance/trigger", key=new,
                      json={"catalog": "demo", "namespace": "sales", "table": "orders", "dryRun": True}),
                 403, "FORBIDDEN", "Insufficient permissions")
    assert call(api, "PUT", f"{keys}/{info['id']}", key=ADMIN_KEY, json={"enabled": False}).json()["enabled"] is False
    assert_error(call(api, "GET", "/api/v1/operations", key=new), 401, "UNAUTHORIZED")
    assert call(api, "GET", keys + "?enabled=true", key=ADMIN_KEY).json()["total"] == 3
    assert call(api, "DELETE", f"{keys}/{info['id']}", key=ADMIN_KEY).status_code == 204
    assert_error(call(api, "GET", f"{keys}/{info['id']}", key=ADMIN_KEY), 404, "NOT_FOUND")


def test_an_expired_key_is_refused(api):
    created = call(api, "POST", "/api/v1/auth/keys", key=ADMIN_KEY,
                   json={"name": "short-lived", "expiresAt": "2020-01-01T00:00:00Z"}).json()
    assert created["apiKey"]["role"] == "VIEWER" and created["apiKey"]["expiresAt"].startswith("2020-01-01")
    try:
        assert_error(call(api, "GET", "/api/v1/operations", key=created["key"]), 401, "UNAUTHORIZED")
    finally:
        call(api, "DELETE", f"/api/v1/auth/keys/{created['apiKey']['id']}", key=ADMIN_KEY)


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/api/v1/auth/keys", {"name": "x"}), ("GET", "/api/v1/auth/keys", None),
    ("GET", "/api/v1/auth/keys/file:dash", None), ("PUT", "/api/v1/auth/keys/file:dash", {"enabled": False}),
    ("DELETE", "/api/v1/auth/keys/file:dash", None),
])
def test_key_management_needs_admin(api, method, path, body):
    for key in (VIEWER_KEY, OPERATOR_KEY):
        error = assert_error(call(api, method, path, key=key, json=body), 403, "FORBIDDEN")
        assert error["error"] == "Insufficient permissions" and error["details"]["needs"] == "manage-keys"
    assert_error(call(api, method, path, key=None, json=body), 401, "UNAUTHORIZED")


def test_me_answers_every_role(api):
    assert call(api, "GET", "/api/v1/auth/keys/me", key=VIEWER_KEY).json()["id"] == "file:dash"
    admin = call(api, "GET", "/api/v1/auth/keys/me", key=ADMIN_KEY).json()
    assert admin["role"] == "ADMIN" and "MANAGE_API_KEYS" in admin["permissions"]


# -- OpenAPI and Swagger at Floe's paths -------------------------------------------------------------------


def test_floes_openapi_and_swagger_paths_need_no_key(api):
    document = call(api, "GET", "/api/openapi", key=None)
    assert document.status_code == 200 and document.headers["content-type"].startswith("application/yaml")
    parsed = yaml.safe_load(document.text)
    assert parsed == call(api, "GET", "/api/v1/openapi.json", key=VIEWER_KEY).json()
    assert {"/api/v1/tables", "/api/v1/tables/{namespace}/{table}", "/api/v1/operations/{id}", "/api/v1/catalog",
            "/api/v1/auth/keys", "/api/v1/auth/keys/me", "/api/v1/operations/stats"} <= set(parsed["paths"])
    assert "head" in parsed["paths"]["/api/v1/tables/{namespace}/{table}"]
    assert call(api, "GET", "/api/openapi?format=json", key=None).json() == parsed
    page = call(api, "GET", "/api", key=None)
    assert page.status_code == 200 and "swagger-ui" in page.text and "/api/openapi?format=json" in page.text


# -- Floe's answers where ours differed ------------------------------------------------------------------


def test_a_body_that_is_not_json_is_floes_415(api):
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        error = assert_error(call(api, "POST", "/api/v1/maintenance/trigger", data="catalog=demo",
                                  headers={"Content-Type": content_type}), 415, "UNSUPPORTED_MEDIA_TYPE", content_type)
        assert "application/json" in error["error"]
    assert_error(call(api, "POST", "/api/v1/maintenance/trigger", data="{not json",
                      headers={"Content-Type": "application/json"}), 400, "VALIDATION_FAILED")


def test_trigger_status_lists_the_minimum_interval_of_a_table_on_a_cron_schedule(api):
    coordination = Coordination(api["settings"].coordination_url)
    now = datetime.now(timezone.utc)
    coordination.record_outcome(Outcome(str(uuid.uuid4()), "demo.misc.loose", Operation.REWRITE_MANIFESTS,
                                        now - timedelta(minutes=30), now - timedelta(minutes=29), True, "cron"))
    status = call(api, "GET", "/api/v1/tables/misc/loose/trigger-status").json()
    assert status["policyName"] == "cron-orders"
    manifests = status["operationStatuses"]["REWRITE_MANIFESTS"]
    assert manifests["shouldTrigger"] is False  # the cron slot is not due: the planner's decision stays
    [unmet] = manifests["unmetConditions"]
    assert unmet.startswith("Min interval: ") and unmet.endswith(" minutes remaining")
    assert 28 <= int(unmet.split()[2]) <= 30


@pytest.fixture(scope="module")
def catalog_down(tmp_path_factory):
    """The API on a REST catalog nobody answers, with a policy directory."""
    root = tmp_path_factory.mktemp("catalog_down")
    with serving(root, POLICIES, KEYS, lambda settings: None,
                 extra="  policy-directory: api-policies\ncatalog:\n  name: demo\n  properties:\n"
                       "    type: rest\n    uri: http://127.0.0.1:9\n") as served:
        yield served


def test_with_the_catalog_down_policies_get_floes_400_after_the_name_check_and_a_trigger_floes_500(catalog_down):
    policy = {"name": "sales", "tablePattern": "demo.sales.orders", "rewriteDataFiles": {},
              "rewriteDataFilesSchedule": {"interval": "P1D"}}
    assert_error(call(catalog_down, "POST", "/api/v1/policies", key=ADMIN_KEY, json=policy), 409, "CONFLICT",
                 "Policy with name 'sales' already exists")  # Floe: the name first
    error = assert_error(call(catalog_down, "POST", "/api/v1/policies", key=ADMIN_KEY, json={**policy, "name": "fresh"}), 400,
                         "VALIDATION_FAILED", "Catalog unavailable - cannot validate table pattern")
    assert error["details"] == {"error": "Catalog connection failed. Check catalog configuration."}
    assert not (catalog_down["root"] / "api-policies" / "fresh.json").exists()
    trigger = {"catalog": "demo", "namespace": "sales", "table": "orders", "dryRun": True}
    assert_error(call(catalog_down, "POST", "/api/v1/maintenance/trigger", json=trigger), 500, "CATALOG_UNAVAILABLE")


def test_a_policy_whose_exact_pattern_names_no_table_is_floes_400(tmp_path):
    with serving(tmp_path, POLICIES, KEYS, _lakehouse, extra="  policy-directory: api-policies\n") as api:
        policy = {"name": "ghost", "tablePattern": "demo.sales.ghost", "expireSnapshots": {},
                  "expireSnapshotsSchedule": {"interval": "P1D"}}
        error = assert_error(call(api, "POST", "/api/v1/policies", key=ADMIN_KEY, json=policy), 400, "VALIDATION_FAILED",
                             "Table not found: demo.sales.ghost")
        assert error["details"]["suggestion"] == "Verify the table exists in the catalog"
        wildcard = call(api, "POST", "/api/v1/policies", key=ADMIN_KEY, json={**policy, "tablePattern": "demo.nothing.*"})
        assert wildcard.status_code == 201, wildcard.text  # a wildcard matching nothing is allowed, as in Floe
        renamed = call(api, "PUT", f"/api/v1/policies/{wildcard.json()['id']}", key=ADMIN_KEY, json={"tablePattern": "demo.x.y"})
        assert_error(renamed, 400, "VALIDATION_FAILED", "Table not found: demo.x.y")
        assert call(api, "PUT", f"/api/v1/policies/{wildcard.json()['id']}", key=ADMIN_KEY, json={"priority": 3}).status_code == 200


def test_without_keys_the_first_key_created_over_http_closes_the_api(tmp_path, monkeypatch):
    """Bootstrap: a loopback server without keys lets anyone in (as before); an ADMIN key created over
    HTTP then makes every call need a key, and the new key manages keys."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    settings = load_settings(write_settings(tmp_path, POLICIES), environ={})
    with DagsterInstance.get() as instance:
        keys = KeyStore(settings.api)
        server, thread, url = start_server(create_app(settings, keys, instance))
        api = {"url": url}
        try:
            assert call(api, "GET", "/api/v1/operations", key=None).status_code == 200
            assert call(api, "GET", "/api/v1/auth/keys/me", key=None).json()["authMethod"] == "NONE"
            created = call(api, "POST", "/api/v1/auth/keys", key=None, json={"name": "first-admin", "role": "ADMIN"})
            assert created.status_code == 201, created.text
            assert created.json()["apiKey"]["createdBy"] is None and keys.configured
            assert_error(call(api, "GET", "/api/v1/operations", key=None), 401, "UNAUTHORIZED")
            admin = created.json()["key"]
            assert call(api, "GET", "/api/v1/auth/keys", key=admin).json()["total"] == 1
            assert "1 created over HTTP" in keys.describe()
        finally:
            server.should_exit = True
            thread.join(20)
