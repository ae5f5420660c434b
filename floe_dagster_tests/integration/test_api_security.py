"""Attacks on the HTTP API and on every output, through the real ``floe-dagster serve`` (the console
script on 127.0.0.1, as test_api.py starts it), Iceberg's REST catalog server, the real CLI and a real
Dagster code location read through Dagit's GraphQL. No Spark.

- **Roles × endpoints**, generated from the server's own OpenAPI document (a new endpoint joins the
  matrix by itself; one that writes must be given its role in :func:`required_role`): every path and
  method with an ADMIN, OPERATOR and VIEWER key, no key, a revoked key and an expired key. A refused
  call is 401 (no valid key) or 403 (the role lacks the permission), an allowed one neither.
- **A secret in every settings position** (a unique random marker each: the catalog URI's user info,
  ``header.Authorization``, ``token``, ``credential``, the S3 keys, Spark's catalog properties, Spark conf
  keys holding secrets, the coordination URL's password, the API keys themselves), then searched for in
  every answer of the matrix (bodies and headers, ``/metrics`` included), the servers' logs, the CLI's
  output (a working catalog, a catalog that is down, a coordination database that is down, a settings
  file that is wrong), the log records of this process, and what Dagit shows of the resources (their
  config on the resource page and in the job's snapshot): it must appear nowhere.
- **A secret in the table's own properties**, set by its owner, known to no setting: an
  ``s3.secret-access-key`` and a ``floe.*`` key naming a token (an owner override floe ignores, and
  shows ignored, in every table answer, ``plan`` and ``explain``): masked by the rule's keys alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.auth import hash_key
from floe_dagster.demo import _create, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.instance import project_file
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import JARS_CACHE
from floe_dagster_tests.integration.test_api import BIN, ROOT, free_port, start_serve, stop
from floe_dagster_tests.servers import run_rest_catalog

ROLES = ("ADMIN", "OPERATOR", "VIEWER")
RANK = {"VIEWER": 1, "OPERATOR": 2, "ADMIN": 3}
# Served but left out of the OpenAPI document (Floe's probes and documents, Prometheus): their roles.
OUTSIDE_THE_DOCUMENT = [("GET", "/health/live", None), ("GET", "/health/ready", None), ("GET", "/metrics", None),
                        ("GET", "/api/openapi", None), ("GET", "/api", None), ("GET", "/api/v1/openapi.json", "VIEWER")]
PATH_VALUES = {"namespace": "sales", "table": "orders", "catalog": "demo"}
# Bodies that a permitted caller may send without changing anything (unknown ids, dry runs, refused bodies).
BODIES = {("POST", "/api/v1/maintenance/trigger"): {"catalog": "demo", "namespace": "sales", "table": "orders",
                                                     "dryRun": True},
          ("POST", "/api/v1/policies/validate-pattern"): {"pattern": "demo.sales.*"}}


def required_role(method: str, path: str) -> str | None:
    """The role an endpoint needs (None: none), as docs/http-api.md states it; a new endpoint that
    writes fails the test until it is named here."""
    if path in ("/health",):
        return None
    if path.startswith("/api/v1/auth/keys"):
        return "VIEWER" if path.endswith("/me") else "ADMIN"
    if path == "/api/v1/maintenance/trigger":
        return "OPERATOR"
    if path.startswith("/api/v1/policies") and method in ("POST", "PUT", "PATCH", "DELETE") \
            and not path.endswith("/validate-pattern"):
        return "ADMIN"
    if method in ("GET", "HEAD") or path.endswith("/validate-pattern"):
        return "VIEWER"
    raise AssertionError(f"{method} {path}: a new endpoint that writes; say in required_role which role it needs")


def marker(position: str) -> str:
    return f"Zq{position}{uuid.uuid4().hex[:20]}"


SECRETS = {name: marker(name) for name in (
    "UriPassword", "HeaderAuth", "Token", "Credential", "S3Secret", "S3KeyId", "SparkProperty", "SparkConf",
    "SparkConfKey", "CoordinationPassword", "ConnectToken", "TableS3Secret", "TableOwnerToken")}
# Set on the table by its owner: no setting knows these values, only the rule's keys can mask them.
OWNER_TOKEN = "floe.rewrite-data-files.secret-token"
TABLE_PROPERTIES = {"s3.secret-access-key": SECRETS["TableS3Secret"], OWNER_TOKEN: SECRETS["TableOwnerToken"]}
API_KEYS = {role: f"floe_{role.lower()}{uuid.uuid4().hex}" for role in ROLES}


def settings_text(root: Path, catalog_uri: str, coordination_url: str | None = None, extra_properties: str = "",
                  remote: str | None = None) -> str:
    coordination = f"coordination:\n  url: {json.dumps(coordination_url)}\n" if coordination_url else ""
    return textwrap.dedent(f"""\
        data-dir: {root / 'data'}
        policies: [{root / 'policies'}]
        catalog:
          name: demo
          properties:
            type: rest
            uri: {json.dumps(catalog_uri)}
            warehouse: {json.dumps((root / 'warehouse').as_uri())}
            header.Authorization: "Bearer {SECRETS['HeaderAuth']}"
            token: {SECRETS['Token']}
            s3.secret-access-key: {SECRETS['S3Secret']}
            s3.access-key-id: {SECRETS['S3KeyId']}
        {textwrap.indent(extra_properties, '    ')}
          spark-properties:
            rest.signing-secret: {SECRETS['SparkProperty']}
        spark:
          jars-cache: {JARS_CACHE}
        {f"  remote: {json.dumps(remote)}" if remote else ""}
          conf:
            spark.hadoop.fs.s3a.secret.key: {SECRETS['SparkConf']}
            spark.hadoop.fs.s3a.access.key: {SECRETS['SparkConfKey']}
        api:
          keys-file: {root / 'api-keys'}
          policy-directory: {root / 'api-policies'}
        """) + coordination


def write_config(root: Path, name: str, text: str) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("secured")
    (root / "policies").mkdir()
    (root / "policies" / "p.yaml").write_text('- name: sales\n  tablePattern: "demo.sales.*"\n  rewriteDataFiles: {}\n'
                                              '  rewriteDataFilesSchedule: {interval: P1D}\n')
    (root / "api-policies").mkdir()
    (root / "api-keys").write_text("".join(f"{role.lower()}-key:{role}:{hash_key(key)}\n" for role, key in API_KEYS.items()))
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    with DagsterInstance.from_config(str(home)) as dagster:
        dagster.get_runs_count()  # the storage exists before two servers start on it
    with run_rest_catalog(root / "rest") as rest:
        host = rest.uri.split("://", 1)[1]
        configs = {
            "working": write_config(root, "working", settings_text(root, f"http://floe:{SECRETS['UriPassword']}@{host}")),
            "catalog-down": write_config(root, "catalog-down", settings_text(
                root, f"http://floe:{SECRETS['UriPassword']}@127.0.0.1:{free_port()}",
                extra_properties=f"credential: floe-client:{SECRETS['Credential']}\n")),
            "coordination-down": write_config(root, "coordination-down", settings_text(
                root, f"http://floe:{SECRETS['UriPassword']}@{host}",
                coordination_url=f"postgresql://floe:{SECRETS['CoordinationPassword']}@127.0.0.1:{free_port()}/floe")),
            # What a code location shows: every resource field that could hold a secret holds one.
            "code-location": write_config(root, "code-location", settings_text(
                root, f"http://floe:{SECRETS['UriPassword']}@{host}",
                coordination_url=f"postgresql://floe:{SECRETS['CoordinationPassword']}@127.0.0.1:{free_port()}/floe",
                remote=f"sc://127.0.0.1:{free_port()}/;token={SECRETS['ConnectToken']}")),
        }
        settings = load_settings(configs["working"], environ={})
        catalog = open_catalog(settings.catalog)
        catalog.create_namespace("sales")
        _create(catalog, "sales.orders", properties=TABLE_PROPERTIES).append(rows(0, 10))
        refresh_table_cache(settings)
        env = {**os.environ, "DAGSTER_HOME": str(home), "FLOE_SCHEDULER_ENABLED": "false"}
        env.pop("FLOE_CONFIG", None)
        logs = root / "logs"
        logs.mkdir()
        with ThreadPoolExecutor(2) as pool:  # side by side: each server loads its own code location
            starting = {name: pool.submit(start_serve, configs[name], {**env, "FLOE_CONFIG": str(configs[name])},
                                          logs / f"serve-{name}.log", ready="/health/live")
                        for name in ("working", "catalog-down")}
        servers = {name: future.result() for name, future in starting.items() if future.exception() is None}
        try:
            for future in starting.values():
                future.result()  # a server that did not start fails the fixture (the other one is stopped)
            yield {"root": root, "home": home, "env": env, "configs": configs, "logs": logs, "settings": settings,
                   "urls": {name: url for name, (_, url) in servers.items()}}
        finally:
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(stop, [process for process, _ in servers.values()]))


def call(url: str, method: str, path: str, key: str | None, body=None) -> requests.Response:
    headers = {"X-API-Key": key} if key else {}
    return requests.request(method, url + path, headers=headers, json=body, timeout=120)


def keys_of_every_kind(url: str) -> dict[str, str | None]:
    """ADMIN, OPERATOR and VIEWER keys, none, and an ADMIN key revoked and one expired (created over HTTP)."""
    admin = API_KEYS["ADMIN"]
    revoked = call(url, "POST", "/api/v1/auth/keys", admin, {"name": f"gone-{uuid.uuid4().hex[:6]}", "role": "ADMIN"})
    expired = call(url, "POST", "/api/v1/auth/keys", admin, {"name": f"old-{uuid.uuid4().hex[:6]}", "role": "ADMIN",
                                                            "expiresAt": "2001-01-01T00:00:00Z"})
    assert revoked.status_code == expired.status_code == 201, (revoked.text, expired.text)
    assert call(url, "DELETE", f"/api/v1/auth/keys/{revoked.json()['apiKey']['id']}", admin).status_code == 204
    return {**API_KEYS, "no key": None, "revoked": revoked.json()["key"], "expired": expired.json()["key"]}


def operations(url: str) -> list[tuple[str, str, str | None]]:
    """Every (method, path, required role) of the server's OpenAPI document, and the routes it leaves out."""
    document = call(url, "GET", "/api/v1/openapi.json", API_KEYS["VIEWER"])
    assert document.status_code == 200, document.text
    found = [(method.upper(), path, required_role(method.upper(), path))
             for path, entry in document.json()["paths"].items() for method in entry]
    assert len(found) >= 25, found  # the whole document, not a part of it
    return found + OUTSIDE_THE_DOCUMENT


def concrete(method: str, path: str) -> str:
    for name, value in PATH_VALUES.items():
        path = path.replace("{" + name + "}", value)
    if "{id}" in path:
        unknown = "00000000-0000-4000-8000-000000000000" if "/operations/" in path else "no-such-" + uuid.uuid4().hex[:6]
        path = path.replace("{id}", unknown)
    return path


def run_matrix(url: str, keys: dict[str, str | None]) -> list[tuple[str, str, str, requests.Response]]:
    answers = []
    for method, path, role in operations(url):
        body = BODIES.get((method, path), {}) if method in ("POST", "PUT", "PATCH") else None
        for who, key in keys.items():
            answers.append((f"{method} {path}", who, role, call(url, method, concrete(method, path), key, body)))
    return answers


def error_of(response: requests.Response) -> str | None:
    return response.json()["error"] if response.content else None  # HEAD answers have no body


def assert_roles(answers) -> None:
    wrong = []
    for operation, who, role, response in answers:
        status = response.status_code
        if role is None or (who in ROLES and RANK[who] >= RANK[role]):
            ok = status not in (401, 403)
        elif who in ROLES:  # Floe's words
            ok = status == 403 and error_of(response) in ("Insufficient permissions", None)
        else:  # no key, a revoked key, an expired key
            ok = status == 401
        if not ok:
            wrong.append(f"{operation} as {who} (needs {role}): {status} {response.text[:200]}")
    assert not wrong, "\n".join(wrong)


def leaks(texts: dict[str, str], secrets=None) -> list[str]:
    secrets = {**SECRETS, **{f"api key {r}": k for r, k in API_KEYS.items()}} if secrets is None else secrets
    return [f"{where}: {name}" for where, text in texts.items() for name, secret in secrets.items() if secret in text]


def answer_texts(answers) -> dict[str, str]:
    return {f"{operation} as {who} ({response.status_code})": response.text + json.dumps(dict(response.headers))
            for operation, who, _, response in answers}


@pytest.fixture(scope="module")
def working_answers(secured):
    """The working server's answers to the whole matrix (asked once: the logs test reads what it logged)."""
    url = secured["urls"]["working"]
    return run_matrix(url, keys_of_every_kind(url))


@pytest.fixture(scope="module")
def catalog_down_answers(secured):
    """The answers of the server whose catalog is down, for ADMIN, VIEWER and no key."""
    url = secured["urls"]["catalog-down"]
    return run_matrix(url, {"ADMIN": API_KEYS["ADMIN"], "VIEWER": API_KEYS["VIEWER"], "no key": None})


def test_every_endpoint_for_every_role_no_key_a_revoked_and_an_expired_key(working_answers):
    answers = working_answers
    assert_roles(answers)
    served = [response.status_code for operation, who, role, response in answers if who == "ADMIN"]
    assert all(status < 500 for status in served), served  # the working server answers every call
    assert not leaks(answer_texts(answers))
    catalog = next(r for op, who, _, r in answers if op == "GET /api/v1/catalog" and who == "VIEWER").json()
    assert catalog["uri"].startswith("http://floe:***@127.0.0.1:")  # shown, with its password masked
    assert catalog["properties"]["header.Authorization"] == catalog["properties"]["s3.secret-access-key"] == "***"
    status = next(r for op, who, _, r in answers if op.endswith("/trigger-status") and who == "VIEWER").json()
    ignored = status["operationStatuses"]["REWRITE_DATA_FILES"]["ownerOverrides"]["ignored"]
    # Both shown, masked: the storage key (never used for floe's FileIO) first, then the owner's floe.* key.
    shown = {entry["property"]: entry["value"] for entry in ignored}
    assert shown == {"s3.secret-access-key": "***", OWNER_TOKEN: "***"}, ignored


def test_with_the_catalog_down_errors_name_it_without_its_secrets(catalog_down_answers):
    answers = catalog_down_answers
    assert_roles(answers)
    down = [response for operation, who, _, response in answers if who == "ADMIN" and response.status_code >= 500]
    assert len(down) >= 3, [r.text for r in down]  # health, table details, trigger… answer that the catalog is down
    assert not leaks(answer_texts(answers))


def test_the_servers_logs_hold_no_secret(secured, working_answers, catalog_down_answers):
    # Once both servers have answered the whole matrix (the fixtures): every log line, errors included.
    texts = {path.name: path.read_text(errors="replace") for path in secured["logs"].glob("serve-*.log")}
    assert "catalog" in texts["serve-catalog-down.log"].lower()  # the outage was logged
    assert not leaks(texts)


def cli(secured, config: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {**secured["env"], "FLOE_CONFIG": str(config)}
    return subprocess.run([str(BIN / "floe-dagster"), "--config", str(config), *arguments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_clis_output_holds_no_secret(secured):
    configs, root = secured["configs"], secured["root"]
    wrong = write_config(root, "wrong", settings_text(root, "http://127.0.0.1:1") + "coordination:\n  url: "
                         f"[\"postgresql://floe:{SECRETS['CoordinationPassword']}@127.0.0.1/floe\"]\n")
    runs = [(configs["working"], ("tables", "--refresh")), (configs["working"], ("plan",)),
            (configs["working"], ("explain", "sales.orders")),
            (configs["working"], ("health", "sales.orders", "--json")),  # the table's properties among its facts
            (configs["catalog-down"], ("tables", "--refresh")), (configs["catalog-down"], ("health", "sales.orders")),
            (configs["coordination-down"], ("plan",)), (wrong, ("tables",))]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda run: (run, cli(secured, run[0], *run[1])), runs))
    texts = {f"{config.stem}: floe-dagster {' '.join(args)} ({result.returncode})": result.stdout + result.stderr
             for (config, args), result in done}
    outcomes = {" ".join(args) + f" [{config.stem}]": result.returncode for (config, args), result in done}
    assert outcomes["tables --refresh [working]"] == 0 and outcomes["plan [working]"] == 0, texts
    assert outcomes["tables --refresh [catalog-down]"] != 0 and outcomes["plan [coordination-down]"] != 0, texts
    assert "could not" in texts["catalog-down: floe-dagster tables --refresh (2)"], texts  # the error is shown
    assert outcomes["tables [wrong]"] == 2 and "coordination.url" in texts[f"wrong: floe-dagster tables (2)"], texts
    health = texts["working: floe-dagster health sales.orders --json (0)"]
    assert '"s3.secret-access-key": "***"' in health, health  # the table's own property: shown, masked
    assert not leaks(texts)


def test_a_server_whose_coordination_database_is_down_says_so_without_its_password(secured):
    config = secured["configs"]["coordination-down"]
    log = secured["logs"] / "coordination-down.log"
    with pytest.raises(AssertionError, match="did not start"):
        process, _ = start_serve(config, {**secured["env"], "FLOE_CONFIG": str(config)}, log)
        stop(process)
    text = log.read_text(errors="replace")
    assert "127.0.0.1" in text and not leaks({"serve": text})


RESOURCES = """
query Resources($selector: RepositorySelector!) {
  allTopLevelResourceDetailsOrError(repositorySelector: $selector) {
    __typename
    ... on ResourceDetailsList { results {
      name configuredValues { key value type } configFields { name defaultValueAsJson isSecret }
      nestedResources { name type resource { name configuredValues { key value type }
                                             configFields { name defaultValueAsJson } } } } }
  }
  pipelineOrError(params: {repositoryLocationName: $location, repositoryName: $repository,
                           pipelineName: "floe_maintenance"}) {
    __typename
    ... on Pipeline { modes { resources { name configField { defaultValueAsJson
        configType { key ... on CompositeConfigType { fields { name defaultValueAsJson } } } } } } }
  }
}
"""


def test_dagit_shows_the_resources_without_their_secrets(secured, monkeypatch, tmp_path, caplog):
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    monkeypatch.setenv("DAGSTER_HOME", str(secured["home"]))
    monkeypatch.setenv("FLOE_CONFIG", str(secured["configs"]["code-location"]))
    module = tmp_path / "code_location.py"
    module.write_text("from floe_dagster.definitions import defs\n")
    with DagsterInstance.get() as instance, define_out_of_process_context(str(module), "defs", instance) as context:
        [location] = context.code_location_names
        [repository] = context.get_code_location(location).get_repositories()
        selector = {"repositoryLocationName": location, "repositoryName": repository}
        result = execute_dagster_graphql(context, RESOURCES.replace("$location", json.dumps(location))
                                         .replace("$repository", json.dumps(repository)), {"selector": selector})
    assert not result.errors, result.errors
    resources = {r["name"]: r for r in result.data["allTopLevelResourceDetailsOrError"]["results"]}
    assert {"floe_engine", "floe_coordination"} <= set(resources)
    engine = {v["key"]: v for v in resources["floe_engine"]["configuredValues"]}
    coordination = {v["key"]: v for v in resources["floe_coordination"]["configuredValues"]}
    for value in (engine["secret_conf"], coordination["url"]):  # Dagit shows the variable's name
        assert value["type"] == "ENV_VAR" and value["value"].startswith("FLOE_SECRET_"), value
    assert json.loads(engine["remote"]["value"]).endswith("/;token=***")  # shown, masked
    session = json.loads(engine["session_conf"]["value"])
    assert session["spark.sql.catalog.demo.uri"].startswith("http://floe:***@127.0.0.1:")
    assert session["spark.sql.catalog.demo.header.Authorization"] == "***"
    assert session["spark.hadoop.fs.s3a.access.key"] == "***" and session["spark.sql.catalog.demo.type"] == "rest"
    assert result.data["pipelineOrError"]["__typename"] == "Pipeline"
    assert not leaks({"Dagit GraphQL": json.dumps(result.data)})
    assert not leaks({"this process's log records": caplog.text})
