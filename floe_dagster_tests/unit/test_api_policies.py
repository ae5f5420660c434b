"""The policies API over real HTTP (uvicorn in a thread, a real Dagster instance and real API keys, as
in test_api_http.py): Floe's list page and its bounds, get by id and by name, create (201 + Location),
the 400s that name the field and write nothing, 409s, Floe's partial update, delete, 405 without a
policy directory, roles (writes need ADMIN, as in Floe, or OPERATOR with api.operator-may-write-policies),
and concurrent updates of one policy (one wins, the file always parses)."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.core.operations import Operation
from floe_dagster.core.schedules.orphan_cadence import AdaptiveCadence
from floe_dagster.core.policies.policy import validate_policy_paths
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.errors import SettingsError
from floe_dagster.instance import project_file
from floe_dagster.policies import load_policy_set, policy_paths
from floe_dagster.policy_store import POLICY_ID_NAMESPACE, PolicyStore, policy_id
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_api_floe_endpoints import ADMIN_KEY
from floe_dagster_tests.unit.test_api_http import OPERATOR_KEY, VIEWER_KEY, assert_error, start_server

FILE_POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  priority: 5
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
- name: base
  tablePattern: "*"
  enabled: false
  expireSnapshots: {retainLast: 3}
  expireSnapshotsSchedule: {cronExpression: "0 0 2 * * ?"}
"""
COLLECTION = "/api/v1/policies"
FLOE_KEYS = ["id", "name", "description", "tablePattern", "enabled", "priority", "tags", "createdAt", "updatedAt",
             "rewriteDataFiles", "expireSnapshots", "orphanCleanup", "rewriteManifests", "healthThresholds",
             "triggerConditions", "floe"]


def _serve(root: Path, extra: str):
    keys = root / "keys.txt"
    keys.write_text(f"ops-bot:OPERATOR:{hash_key(OPERATOR_KEY)}\ndash:VIEWER:{hash_key(VIEWER_KEY)}\n"
                    f"root:ADMIN:{hash_key(ADMIN_KEY)}\n")
    config = write_settings(root, FILE_POLICIES, extra=f"api:\n  keys-file: {keys}\n{extra}")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    return config, home


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    root = tmp_path_factory.mktemp("policies_api")
    # Not listed in `policies`: the loaders add it (policy_paths).
    config, home = _serve(root, "  policy-directory: api-policies\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        settings = load_settings(config, environ={})
        catalog = open_catalog(settings.catalog)  # an exact pattern must name a table, as in Floe
        catalog.create_namespace("sales")
        _create(catalog, "sales.orders").append(rows(0, 3))
        with DagsterInstance.get() as instance:
            server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
            try:
                yield {"url": url, "settings": settings, "directory": root / "api-policies"}
            finally:
                server.should_exit = True
                thread.join(20)


def call(api, method, path, key=ADMIN_KEY, headers=None, **kwargs):
    headers = {**({"X-API-Key": key} if key else {}), **(headers or {})}
    return requests.request(method, api["url"] + path, headers=headers, timeout=60, **kwargs)


def files(api) -> list[str]:
    """Everything in the policy directory but its lock file (a temporary file would show here)."""
    directory = api["directory"]
    return sorted(p.name for p in directory.iterdir() if p.name != ".floe-api.lock") if directory.exists() else []


def create(api, body, status=201):
    response = call(api, "POST", COLLECTION, json=body)
    assert response.status_code == status, response.text
    return response.json()


def remove(api, name):
    """Delete the policy named ``name`` when a test left it."""
    found = call(api, "GET", f"{COLLECTION}/{name}")
    if found.status_code == 200:
        assert call(api, "DELETE", f"{COLLECTION}/{found.json()['id']}").status_code == 204


# -- reads ----------------------------------------------------------------------------------------------


def test_list_is_floes_page_with_floes_bounds(api):
    page = call(api, "GET", COLLECTION, key=VIEWER_KEY).json()
    assert list(page) == ["policies", "total", "limit", "offset", "hasMore"]
    assert [p["name"] for p in page["policies"]] == ["sales", "base"]  # priority first
    assert (page["total"], page["limit"], page["offset"], page["hasMore"]) == (2, 20, 0, False)
    second = call(api, "GET", f"{COLLECTION}?limit=1&offset=1").json()
    assert [p["name"] for p in second["policies"]] == ["base"] and second["hasMore"] is False
    first = call(api, "GET", f"{COLLECTION}?limit=1").json()
    assert [p["name"] for p in first["policies"]] == ["sales"] and first["hasMore"] is True
    assert [p["name"] for p in call(api, "GET", f"{COLLECTION}?enabled=true").json()["policies"]] == ["sales"]
    # As in Floe, any other value lists them all.
    assert call(api, "GET", f"{COLLECTION}?enabled=false").json()["total"] == 2
    for query in ("limit=0", "limit=101", "limit=-5"):
        assert_error(call(api, "GET", f"{COLLECTION}?{query}"), 400, "VALIDATION_FAILED",
                     "Limit must be between 1 and 100")
    assert_error(call(api, "GET", f"{COLLECTION}?offset=-1"), 400, "VALIDATION_FAILED", "Offset must be non-negative")
    assert_error(call(api, "GET", f"{COLLECTION}?limit=ten"), 400, "VALIDATION_FAILED", "query.limit")
    assert call(api, "GET", f"{COLLECTION}?offset=50").json()["policies"] == []


def test_a_policy_in_floes_shape_by_id_and_by_name(api):
    by_name = call(api, "GET", f"{COLLECTION}/sales", key=VIEWER_KEY)
    assert by_name.status_code == 200, by_name.text
    body = by_name.json()
    assert list(body) == FLOE_KEYS
    assert body["id"] == str(uuid.uuid5(POLICY_ID_NAMESPACE, "sales")) == policy_id("sales")
    assert call(api, "GET", f"{COLLECTION}/{body['id']}").json() == body
    assert body["rewriteDataFiles"] == {"enabled": True, "schedule": "P1D"}
    assert body["expireSnapshots"] is None and body["healthThresholds"] is None and body["triggerConditions"] is None
    assert body["description"] is None and body["tags"] == {} and body["createdAt"] == body["updatedAt"]
    assert body["floe"]["managed"] is False and body["floe"]["source"].endswith("policies.yaml")
    assert body["floe"]["rewriteDataFilesSchedule"]["interval"] == "P1D"
    base = call(api, "GET", f"{COLLECTION}/base").json()
    # Floe's OperationSummary: enabled is the policy's flag, schedule the cron as written.
    assert base["expireSnapshots"] == {"enabled": False, "schedule": "0 0 2 * * ?"}
    error = assert_error(call(api, "GET", f"{COLLECTION}/nope"), 404, "NOT_FOUND", "Policy not found: nope")
    assert error["details"] == {"resourceType": "Policy", "id": "nope"}


# -- writes ----------------------------------------------------------------------------------------------


NEW = {
    "name": "orders-compaction", "description": "compact orders", "tablePattern": "demo.sales.orders",
    "priority": 7, "tags": {"team": "sales"},
    "rewriteDataFiles": {"targetFileSizeBytes": 134217728},
    "rewriteDataFilesSchedule": {"interval": "PT6H"},
    "rewritePositionDeleteFiles": {},
    "rewritePositionDeleteFilesSchedule": {"cronExpression": "0 3 * * *"},
    "triggerConditions": {"smallFileCountAbove": 20, "perOperationMinIntervalMinutes": {"REWRITE_DATA_FILES": 30}},
    "healthThresholds": {"smallFilePercentWarning": 10},
}


def test_create_writes_one_file_that_every_reader_sees(api):
    response = call(api, "POST", COLLECTION, json={**NEW, "id": "ignored", "createdAt": "ignored"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert list(body) == FLOE_KEYS
    assert response.headers["Location"] == f"{COLLECTION}/{body['id']}" and body["id"] == policy_id(NEW["name"])
    assert call(api, "GET", response.headers["Location"]).json() == {**body, "floe": {
        k: v for k, v in body["floe"].items() if k != "warnings"}}
    assert (body["name"], body["description"], body["tablePattern"], body["priority"], body["enabled"]) == (
        "orders-compaction", "compact orders", "demo.sales.orders", 7, True)
    assert body["rewriteDataFiles"] == {"enabled": True, "schedule": "PT6H"}
    assert body["triggerConditions"]["smallFileCountAbove"] == 20
    assert body["triggerConditions"]["perOperationMinIntervalMinutes"] == {"REWRITE_DATA_FILES": 30}
    assert body["triggerConditions"]["deleteFileCountAbove"] is None and len(body["triggerConditions"]) == 17
    assert body["healthThresholds"]["smallFilePercentWarning"] == 10 and len(body["healthThresholds"]) == 26
    assert body["floe"]["rewritePositionDeleteFiles"] == {}  # floe-dagster's fifth operation, under floe
    assert body["floe"]["rewritePositionDeleteFilesSchedule"]["cronExpression"] == "0 3 * * *"
    assert body["floe"]["managed"] is True
    # One file, Floe's camelCase JSON as sent (without the read-only fields).
    assert files(api) == ["orders-compaction.json"]
    assert json.loads((api["directory"] / "orders-compaction.json").read_text()) == NEW
    # The CLI and the sensor read it: the directory is added to the loaded paths.
    settings = api["settings"]
    assert str(api["directory"]) in policy_paths(settings)
    assert validate_policy_paths(policy_paths(settings)).policies.get("orders-compaction") is not None
    assert load_policy_set(settings).get("orders-compaction").priority == 7
    remove(api, "orders-compaction")


@pytest.mark.parametrize("body, status, code, fragments", [
    ({**NEW, "priority": "high"}, 400, "VALIDATION_FAILED", ["body.priority", "whole number"]),
    ({**NEW, "priorty": 1}, 400, "VALIDATION_FAILED", ["body.priorty", "did you mean 'priority'"]),
    ({**NEW, "rewriteDataFilesSchedule": {"cronExpression": "bad"}}, 400, "VALIDATION_FAILED",
     ["body.rewriteDataFilesSchedule.cronExpression"]),
    ({k: v for k, v in NEW.items() if k != "name"}, 400, "VALIDATION_FAILED", ["body.name", "required"]),
    ({k: v for k, v in NEW.items() if k != "tablePattern"}, 400, "VALIDATION_FAILED",
     ["body.tablePattern", "Table pattern is required"]),
    ({**NEW, "tablePattern": "demo.sales." + "x" * 246}, 400, "VALIDATION_FAILED",
     ["Pattern too long (max 256 characters): 257"]),
    ({**NEW, "name": "a/b"}, 400, "VALIDATION_FAILED", ["body.name", "'/'"]),
    ({**NEW, "name": "..\\evil"}, 400, "VALIDATION_FAILED", ["body.name"]),
    ({**NEW, "name": ".hidden"}, 400, "VALIDATION_FAILED", ["body.name", "'.'"]),
    ({**NEW, "name": "line\nbreak"}, 400, "VALIDATION_FAILED", ["body.name", "control"]),
    ({**NEW, "tablePattern": "/(a+)+/"}, 400, "VALIDATION_FAILED", ["body.tablePattern"]),
    ([NEW], 400, "VALIDATION_FAILED", ["body"]),
    ({**NEW, "name": "sales"}, 409, "CONFLICT", ["Policy with name 'sales' already exists"]),
])
def test_a_refused_create_names_the_problem_and_writes_nothing(api, body, status, code, fragments):
    before = files(api)
    error = assert_error(call(api, "POST", COLLECTION, json=body), status, code, *fragments)
    if status == 400:
        assert error["details"]["errors"]
    assert files(api) == before
    assert call(api, "GET", COLLECTION).json()["total"] == 2


def test_malformed_json_is_a_400(api):
    response = call(api, "POST", COLLECTION, data="{not json", headers={"Content-Type": "application/json"})
    assert_error(response, 400, "VALIDATION_FAILED", "body")
    assert files(api) == []


def test_a_duplicate_of_an_api_policy_is_a_409(api):
    create(api, {"name": "dup", "tablePattern": "demo.x.*"})
    assert_error(call(api, "POST", COLLECTION, json={"name": "dup", "tablePattern": "demo.y.*"}), 409, "CONFLICT",
                 "Policy with name 'dup' already exists")
    assert json.loads((api["directory"] / "dup.json").read_text())["tablePattern"] == "demo.x.*"
    remove(api, "dup")


def test_update_is_floes_partial_update(api):
    created = create(api, NEW)
    url = f"{COLLECTION}/{created['id']}"
    response = call(api, "PUT", url, json={"description": "now disabled", "enabled": False, "priority": 99,
                                           "tags": None, "tablePattern": None})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["description"], body["enabled"], body["priority"]) == ("now disabled", False, 99)
    assert body["tags"] == {"team": "sales"} and body["tablePattern"] == "demo.sales.orders"  # null: unchanged
    assert body["rewriteDataFiles"] == {"enabled": False, "schedule": "PT6H"}
    # An object given replaces the stored one whole.
    body = call(api, "PUT", url, json={"rewriteDataFilesSchedule": {"interval": 2}}).json()
    assert body["rewriteDataFiles"]["schedule"] == body["floe"]["rewriteDataFilesSchedule"]["interval"] == "P2D"
    on_disk = json.loads((api["directory"] / "orders-compaction.json").read_text())
    assert on_disk == {**NEW, "description": "now disabled", "enabled": False, "priority": 99,
                       "rewriteDataFilesSchedule": {"interval": 2}}
    assert load_policy_set(api["settings"]).get("orders-compaction").priority == 99
    # A bad change is a 400 and leaves the file alone; so does an unknown id (404).
    assert_error(call(api, "PUT", url, json={"priority": 1.5}), 400, "VALIDATION_FAILED", "body.priority")
    assert_error(call(api, "PUT", url, json={"name": "x/y"}), 400, "VALIDATION_FAILED", "body.name")
    assert_error(call(api, "PUT", url, json={"name": "sales"}), 409, "CONFLICT", "Policy with name 'sales' already")
    assert json.loads((api["directory"] / "orders-compaction.json").read_text()) == on_disk
    error = assert_error(call(api, "PUT", f"{COLLECTION}/{uuid.uuid4()}", json={"priority": 1}), 404, "NOT_FOUND")
    assert error["details"]["resourceType"] == "Policy"
    # A rename moves the file and changes the id.
    renamed = call(api, "PUT", url, json={"name": "orders-renamed"}).json()
    assert renamed["id"] == policy_id("orders-renamed") != created["id"] and renamed["priority"] == 99
    assert files(api) == ["orders-renamed.json"]
    assert_error(call(api, "GET", url), 404, "NOT_FOUND")
    assert call(api, "DELETE", f"{COLLECTION}/{renamed['id']}").status_code == 204


def test_a_policy_created_and_updated_over_http_carries_its_mode(api):
    created = create(api, {**NEW, "name": "orders-onboarding", "mode": "shadow"})
    assert created["floe"]["mode"] == "shadow" and "mode" not in created  # floe-dagster's own, under floe
    assert load_policy_set(api["settings"]).get("orders-onboarding").shadow
    url = f"{COLLECTION}/{created['id']}"
    assert_error(call(api, "PUT", url, json={"mode": "dry-run"}), 400, "VALIDATION_FAILED", "body.mode")
    switched = call(api, "PUT", url, json={"mode": "live"}).json()
    assert switched["floe"]["mode"] == "live" and switched["floe"]["version"] == created["floe"]["version"]
    assert json.loads((api["directory"] / "orders-onboarding.json").read_text())["mode"] == "live"
    assert not load_policy_set(api["settings"]).get("orders-onboarding").shadow
    remove(api, "orders-onboarding")


def test_delete_removes_the_file(api):
    created = create(api, {"name": "short-lived", "tablePattern": "demo.tmp.*"})
    assert files(api) == ["short-lived.json"]
    response = call(api, "DELETE", f"{COLLECTION}/{created['id']}")
    assert response.status_code == 204 and response.content == b""
    assert files(api) == []
    assert_error(call(api, "GET", f"{COLLECTION}/short-lived"), 404, "NOT_FOUND")
    assert_error(call(api, "DELETE", f"{COLLECTION}/{created['id']}"), 404, "NOT_FOUND",
                 f"Policy not found: {created['id']}")
    assert load_policy_set(api["settings"]).get("short-lived") is None


def test_policies_from_other_files_are_read_only(api):
    sales = call(api, "GET", f"{COLLECTION}/sales").json()
    source = Path(sales["floe"]["source"])
    before = source.read_text()
    for method, kwargs in (("PUT", {"json": {"priority": 1}}), ("DELETE", {})):
        error = assert_error(call(api, "PUT" if method == "PUT" else "DELETE", f"{COLLECTION}/{sales['id']}",
                                  **kwargs), 409, "POLICY_NOT_MANAGED", "not managed by the API", str(source))
        assert error["details"] == {"source": str(source)}
    assert source.read_text() == before and files(api) == []
    # Writes address policies by id (Floe's contract); a name is not an id.
    assert_error(call(api, "DELETE", f"{COLLECTION}/sales"), 404, "NOT_FOUND")


def test_roles_viewer_reads_only_admin_writes(api):
    """Floe lets only ADMIN write policies (an OPERATOR's policy could reach any table: issue 26)."""
    created = create(api, {"name": "roles", "tablePattern": "demo.r.*"})
    url = f"{COLLECTION}/{created['id']}"
    for method, path, kwargs in (("POST", COLLECTION, {"json": {"name": "other", "tablePattern": "x"}}),
                                 ("PUT", url, {"json": {"priority": 3}}), ("DELETE", url, {})):
        for key, role in ((VIEWER_KEY, "VIEWER"), (OPERATOR_KEY, "OPERATOR")):
            details = assert_error(call(api, method, path, key=key, **kwargs), 403, "FORBIDDEN",
                                   "Insufficient permissions")["details"]
            assert (details["role"], details["needs"]) == (role, "write-policies")
        assert_error(call(api, method, path, key=None, **kwargs), 401, "UNAUTHORIZED")
    assert_error(call(api, "GET", COLLECTION, key=None), 401, "UNAUTHORIZED")
    assert call(api, "GET", url, key=VIEWER_KEY).json()["priority"] == 0
    assert files(api) == ["roles.json"]
    remove(api, "roles")


def test_concurrent_updates_of_one_policy_one_wins_and_the_file_always_parses(api):
    created = create(api, {"name": "contended", "tablePattern": "demo.c.*", "description": "start", "priority": 0})
    url, path = f"{COLLECTION}/{created['id']}", api["directory"] / "contended.json"
    writers, rounds = 8, 5
    stop, seen, problems = threading.Event(), [], []

    def read_file_constantly():
        while not stop.is_set():
            try:
                document = json.loads(path.read_text())
                seen.append((document["description"], document["priority"]))
            except Exception as exc:  # a half-written file
                problems.append(repr(exc))

    def write(writer: int):
        with requests.Session() as session:
            for round_ in range(rounds):
                number = writer * 100 + round_
                response = session.put(api["url"] + url, headers={"X-API-Key": ADMIN_KEY}, timeout=60,
                                       json={"description": f"writer {number}", "priority": number})
                if response.status_code != 200:
                    problems.append(response.text)

    reader = threading.Thread(target=read_file_constantly)
    reader.start()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    reader.join()
    assert problems == [] and seen
    # Every state any reader saw is one whole request's (its description and priority agree).
    assert all(description in ("start", f"writer {priority}") for description, priority in seen), seen
    final = json.loads(path.read_text())
    assert final["description"] == f"writer {final['priority']}"
    assert call(api, "GET", url).json()["priority"] == final["priority"]
    assert files(api) == ["contended.json"]  # no temporary file left
    remove(api, "contended")


def test_concurrent_writes_never_lose_a_check_or_a_field(api):
    """The lock around check-and-write: of simultaneous creates of one name exactly one succeeds, and
    simultaneous partial updates of different fields all survive."""
    barrier = threading.Barrier(8)

    def create_same(number: int) -> int:
        barrier.wait()
        return call(api, "POST", COLLECTION, json={"name": "raced", "tablePattern": f"demo.t{number}.*"}).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(create_same, range(8)))
    assert statuses == [201] + [409] * 7
    url = f"{COLLECTION}/{policy_id('raced')}"
    fields = {"description": "d", "priority": 4, "tags": {"team": "t"}, "enabled": False,
              "expireSnapshots": {"retainLast": 2}, "orphanCleanup": {}, "rewriteManifests": {},
              "rewriteDataFiles": {}}
    barrier = threading.Barrier(len(fields))

    def update_one(item) -> int:
        barrier.wait()
        return call(api, "PUT", url, json=dict([item])).status_code

    with ThreadPoolExecutor(len(fields)) as pool:
        assert set(pool.map(update_one, fields.items())) == {200}
    on_disk = json.loads((api["directory"] / "raced.json").read_text())
    assert {k: on_disk[k] for k in fields} == fields
    remove(api, "raced")


def test_ids_are_stable_across_servers(api):
    created = create(api, {"name": "stable", "tablePattern": "demo.s.*"})
    # Another server (a restart) on the same settings gives the same ids.
    again = {entry.name: entry.id for entry in PolicyStore(load_settings(api["settings"].source, environ={})).all()}
    assert again["stable"] == created["id"] and again["sales"] == policy_id("sales")
    remove(api, "stable")


def test_without_a_policy_directory_writes_are_405(tmp_path, monkeypatch):
    config, home = _serve(tmp_path, "")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    settings = load_settings(config, environ={})
    with DagsterInstance.get() as instance:
        server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
        try:
            readonly = {"url": url}
            sales = call(readonly, "GET", f"{COLLECTION}/sales").json()
            for method, path, kwargs in (("POST", COLLECTION, {"json": NEW}),
                                         ("PUT", f"{COLLECTION}/{sales['id']}", {"json": {"priority": 1}}),
                                         ("DELETE", f"{COLLECTION}/{sales['id']}", {})):
                response = call(readonly, method, path, **kwargs)
                assert_error(response, 405, "METHOD_NOT_ALLOWED", "api.policy-directory", "floe.yaml")
                assert response.headers["Allow"] == "GET"
            assert call(readonly, "GET", COLLECTION).json()["total"] == 2
        finally:
            server.should_exit = True
            thread.join(20)


def test_a_setting_lets_operator_write_policies(tmp_path):
    config, home = _serve(tmp_path, "  policy-directory: api-policies\n  operator-may-write-policies: true\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        settings = load_settings(config, environ={})
        assert settings.api.operator_may_write_policies
        with DagsterInstance.get() as instance:
            server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
        try:
            served = {"url": url}
            created = call(served, "POST", COLLECTION, key=OPERATOR_KEY, json={"name": "ops", "tablePattern": "demo.o.*"})
            assert created.status_code == 201, created.text
            path = f"{COLLECTION}/{created.json()['id']}"
            assert call(served, "PUT", path, key=OPERATOR_KEY, json={"priority": 2}).json()["priority"] == 2
            assert_error(call(served, "DELETE", path, key=VIEWER_KEY), 403, "FORBIDDEN")
            assert call(served, "DELETE", path, key=OPERATOR_KEY).status_code == 204
            me = call(served, "GET", "/api/v1/auth/keys/me", key=OPERATOR_KEY).json()
            assert {"WRITE_POLICIES", "DELETE_POLICIES", "TRIGGER_MAINTENANCE"} <= set(me["permissions"])
            assert "MANAGE_API_KEYS" not in me["permissions"]
        finally:
            server.should_exit = True
            thread.join(20)


def test_the_openapi_document_has_the_policy_routes(api):
    document = call(api, "GET", "/api/v1/openapi.json", key=VIEWER_KEY).json()
    assert set(document["paths"][COLLECTION]) == {"get", "post"}
    assert set(document["paths"][COLLECTION + "/{id}"]) == {"get", "put", "delete"}
    assert "405" in document["paths"][COLLECTION]["post"]["responses"]
    assert "422" not in json.dumps(document["paths"][COLLECTION])


def test_the_policy_directory_setting(tmp_path):
    config = tmp_path / "floe.yaml"
    config.write_text("policies: [policies]\napi:\n  policy-directory: policies\n")
    (tmp_path / "policies").mkdir()
    settings = load_settings(config, environ={})
    assert settings.api.policy_directory == str(tmp_path / "policies")
    assert policy_paths(settings) == (str(tmp_path / "policies"),)  # listed already: read once
    config.write_text("policies: [policies]\napi:\n  policy-directory: elsewhere\n")
    settings = load_settings(config, environ={})
    assert policy_paths(settings) == (str(tmp_path / "policies"),)  # not there yet: nothing to read
    (tmp_path / "elsewhere").mkdir()
    assert policy_paths(settings) == (str(tmp_path / "policies"), str(tmp_path / "elsewhere"))
    assert load_settings(tmp_path / "floe.yaml", environ={"FLOE_POLICIES": str(tmp_path / "policies")}).api == \
        settings.api
    for value, message in (("[a, b]", "expected a folder path"), ('""', "expected a folder path"),
                           ("floe.yaml", "is not a folder")):
        config.write_text(f"api:\n  policy-directory: {value}\n")
        with pytest.raises(SettingsError, match=f"api.policy-directory: .*{message}"):
            load_settings(config, environ={})
    config.write_text("api:\n  policy-directory: x\n  policy-dir: y\n")
    with pytest.raises(SettingsError, match="did you mean 'policy-directory'"):
        load_settings(config, environ={})


def test_an_adaptive_orphan_cadence_is_written_and_checked_over_http(api):
    body = {"name": "orphans-adaptive", "tablePattern": "demo.sales.*",
            "orphanCleanup": {"retentionPeriodInDays": 3, "adaptive": {"targetBytes": "1GiB", "min": "P1D"}},
            "orphanCleanupSchedule": {"interval": "P1D"}}
    created = create(api, body)
    assert json.loads((api["directory"] / "orphans-adaptive.json").read_text()) == body
    config = load_policy_set(api["settings"]).get("orphans-adaptive").config(Operation.ORPHAN_CLEANUP)
    assert config.adaptive == AdaptiveCadence(1024**3, "P1D", "P90D")
    url = f"{COLLECTION}/{created['id']}"
    bad = {"retentionPeriodInDays": 3, "adaptive": {"targetBytes": "1G", "min": "P9D", "max": "P2D"}}
    error = assert_error(call(api, "PUT", url, json={"orphanCleanup": bad}), 400, "VALIDATION_FAILED",
                         "body.orphanCleanup.adaptive.targetBytes", "unknown unit 'G'")
    assert any("body.orphanCleanup.adaptive.min" in str(e) and "min must be at most max" in str(e)
               for e in error["details"]["errors"]), error
    assert json.loads((api["directory"] / "orphans-adaptive.json").read_text()) == body  # the file is left alone
    remove(api, "orphans-adaptive")
