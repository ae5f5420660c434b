"""The safety envelope through the real stack (issue 26): two real tables in one warehouse, ``demo.hr.orders``
and ``demo.sales.orders``, every file ten days old. The issue's attack is a policy for hr.orders whose
``orphanCleanup.location`` is the warehouse root: Iceberg's remove_orphan_files would then delete every
file of sales.orders (hr.orders references none of them), its metadata included.

- Over real HTTP (uvicorn, real API keys): refused with 400 naming ``body.orphanCleanup.location`` and both
  locations, on create and on an update that changes only the location; nothing is written. The issue's
  four table properties are refused the same way.
- ``floe-dagster validate`` with the deployment's floe.yaml: exit 2 naming the field, in both formats.
- A policy that reaches a run anyway (written into the policy folder after validation): the orphan cleanup
  of hr.orders fails before any CALL, naming the field and both locations; every file of both tables is
  still on disk (an old orphan planted in hr.orders too: nothing was called), hr.orders has no new
  snapshot, and real Spark still reads every row of sales.orders. ``plan`` and ``explain`` show the verdict.
- APPLY_TABLE_PROPERTIES with the policy check bypassed: a refused key never reaches ALTER TABLE; with
  floe.yaml's ``envelope.allowed-table-properties`` naming it, the same key is set.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.cli import main
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import _create, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.reports.explain import explain_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_api_http import start_server

pytestmark = pytest.mark.spark

ADMIN_KEY = "floe_adminAdminAdminAdminAdmin0001"
HR, SALES = TableName("demo", ("hr",), "orders"), TableName("demo", ("sales",), "orders")
SALES_ROWS = 30
TEN_DAYS_AGO = time.time() - 10 * 86400
COLLECTION = "/api/v1/policies"
ISSUE_KEYS = {"write.location-provider.impl": "com.example.Evil", "write.data.path": "file:/tmp/elsewhere",
              "write.metadata.path": "file:/tmp/elsewhere-meta", "encryption.key-id": "stolen-key"}


def files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """Two tables in one warehouse, every file ten days old; an API with an ADMIN key and a policy folder."""
    root = tmp_path_factory.mktemp("envelope")
    keys = root / "keys.txt"
    keys.write_text(f"admin:ADMIN:{hash_key(ADMIN_KEY)}\n")
    config = write_settings(root, "[]\n", extra=f"api:\n  keys-file: {keys}\n  policy-directory: api-policies\n")
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    for table, count in ((HR, 12), (SALES, SALES_ROWS)):
        catalog.create_namespace(table.namespace)
        created = _create(catalog, ".".join(table.identifier))
        for start in range(0, count, 6):
            created.append(rows(start, 6))
    for path in files(Path(settings.data_dir) / "warehouse"):
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))  # so that only being referenced by their table protects them
    refresh_table_cache(settings)
    return settings, config


def locations(settings) -> tuple[str, str, str]:
    """The warehouse root and both tables' locations, as the catalog spells them."""
    catalog = open_catalog(settings.catalog)
    return (settings.catalog.properties["warehouse"], load_table(catalog, HR).location(),
            load_table(catalog, SALES).location())


def attack(location: str, name: str = "hr-orphans", pattern: str = HR.qualified) -> dict:
    return {"name": name, "tablePattern": pattern,
            "orphanCleanup": {"location": location, "retentionPeriodInDays": 1},
            "orphanCleanupSchedule": {"interval": "P1D"}}


@pytest.fixture(scope="module")
def api(lake, tmp_path_factory):
    settings, _ = lake
    home = tmp_path_factory.mktemp("dagster_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with DagsterInstance.ephemeral() as instance:
            server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
            try:
                yield url, Path(settings.policies[0]).parent / "api-policies"
            finally:
                server.should_exit = True
                thread.join(20)


def call(url: str, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, url + path, headers={"X-API-Key": ADMIN_KEY}, timeout=60, **kwargs)


def refused(response: requests.Response, field: str) -> str:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "VALIDATION_FAILED"
    (problem,) = body["details"]["errors"]
    assert problem["location"] == f"body.{field}"
    return problem["message"]


# -- validation: HTTP and validate ------------------------------------------------------------------------


def test_the_warehouse_root_location_is_refused_over_http_naming_the_field_and_both_locations(lake, api):
    settings, _ = lake
    url, directory = api
    warehouse, hr, sales = locations(settings)
    warehouse_path = str(local_path(warehouse))
    for location in (warehouse, warehouse_path, "file:" + warehouse_path, sales, hr + "/../../sales.db/orders",
                     hr + "2"):
        message = refused(call(url, "POST", COLLECTION, json=attack(location)), "orphanCleanup.location")
        assert f"{location!r} lies outside the location of table '{HR.qualified}', {hr!r}" in message, message
        assert "delete every file under it that this table does not reference" in message
    # A pattern matching both tables: no absolute location can lie inside both.
    message = refused(call(url, "POST", COLLECTION, json=attack(warehouse, pattern="demo.*.orders")),
                      "orphanCleanup.location")
    assert "is absolute, and tablePattern 'demo.*.orders' may match several tables" in message
    assert not directory.exists() or not [p for p in directory.iterdir() if p.suffix == ".json"]

    # Inside: relative (any pattern) or absolute under the table's location.
    for name, body in (("relative", attack("data", "relative", "demo.*.orders")),
                       ("absolute", attack(hr + "/data", "absolute"))):
        created = call(url, "POST", COLLECTION, json=body)
        assert created.status_code == 201, created.text
        written = json.loads((directory / f"{name}.json").read_text())
        assert written["orphanCleanup"]["location"] == body["orphanCleanup"]["location"]
    # An update that changes only the location is checked too, and leaves the file as it was.
    stored = directory / "absolute.json"
    before = stored.read_bytes()
    policy_id = call(url, "GET", f"{COLLECTION}/absolute").json()["id"]
    message = refused(call(url, "PUT", f"{COLLECTION}/{policy_id}",
                           json={"orphanCleanup": {"location": warehouse, "retentionPeriodInDays": 1}}),
                      "orphanCleanup.location")
    assert repr(warehouse) in message and repr(hr) in message
    assert stored.read_bytes() == before
    for name in ("relative", "absolute"):
        found = call(url, "GET", f"{COLLECTION}/{name}").json()
        assert call(url, "DELETE", f"{COLLECTION}/{found['id']}").status_code == 204


@pytest.mark.parametrize("key", ISSUE_KEYS)
def test_the_issues_table_properties_are_refused_over_http(lake, api, key):
    url, directory = api
    body = {"name": "props", "tablePattern": HR.qualified, "tableProperties": {key: ISSUE_KEYS[key]}}
    message = refused(call(url, "POST", COLLECTION, json=body), f"tableProperties.{key}")
    assert message.startswith(f"'{key}' is refused by the safety envelope: it ")
    assert not (directory / "props.json").exists()


LOADER_ATTACK = """
policies:
  - name: hr-orphans
    pattern: demo.hr.orders
    orphan-cleanup: {{location: '{location}', retention-period-days: 1}}
"""


def test_validate_refuses_the_warehouse_root_in_both_formats(lake, tmp_path, capsys, monkeypatch):
    settings, config = lake
    monkeypatch.setenv("FLOE_CONFIG", str(config))  # main() sets it for the commands it runs: restored after
    warehouse, hr, _ = locations(settings)
    (tmp_path / "api.json").write_text(json.dumps(attack(warehouse)))
    (tmp_path / "loader.yaml").write_text(LOADER_ATTACK.format(location=warehouse))
    for name, field in (("api.json", "orphanCleanup.location"), ("loader.yaml", "orphan-cleanup.location")):
        assert main(["--config", str(config), "validate", str(tmp_path / name)]) == 2
        out, _ = capsys.readouterr()
        assert f"{tmp_path / name}: policy 'hr-orphans': {field}: {warehouse!r} lies outside the location of " \
               f"table '{HR.qualified}', {hr!r}" in out, out
    # The same file is fine when the location is the table's own folder.
    (tmp_path / "api.json").write_text(json.dumps(attack(hr + "/data")))
    assert main(["--config", str(config), "validate", str(tmp_path / "api.json")]) == 0
    capsys.readouterr()


# -- run time -----------------------------------------------------------------------------------------------


def test_a_policy_that_reaches_a_run_fails_before_the_call_and_the_other_table_keeps_every_file(
        lake, dagster_home, capsys, monkeypatch):
    settings, config = lake
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    warehouse, hr, sales = locations(settings)
    # Planted in hr.orders and ten days old: any remove_orphan_files call on hr.orders would delete it.
    orphan = local_path(hr) / "data" / "planted-orphan.parquet"
    pq.write_table(rows(900, 2), orphan)
    os.utime(orphan, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    everything = files(local_path(warehouse))
    hr_snapshots = [s.snapshot_id for s in load_table(open_catalog(settings.catalog), HR).metadata.snapshots]
    # Written after validation, straight into the policy folder: the parser accepts an absolute location
    # for a one-table pattern; only the table's real location can refuse it.
    policy_file = Path(settings.policies[0]) / "policies.yaml"
    policy_file.write_text(json.dumps(attack(warehouse)))
    try:
        with DagsterInstance.get() as instance:
            summary = trigger_table(settings, HR.qualified, ["ORPHAN_CLEANUP"], reason="attack", actor="test",
                                    trigger_id="envelope-attack", instance=instance)
            (outcome,) = summary.outcomes
            assert outcome.status == "FAILED", summary.lines()
            assert (f"policy 'hr-orphans': ORPHAN_CLEANUP on table '{HR.qualified}' refused by the safety envelope "
                    f"before any engine call: orphanCleanup.location: {warehouse!r} lies outside the location of "
                    f"table '{HR.qualified}', {hr!r}") in outcome.message, outcome.message

            # Nothing was called: every file of both tables (the planted orphan too) is still there.
            assert files(local_path(warehouse)) == everything
            assert orphan.exists()
            catalog = open_catalog(settings.catalog)
            assert [s.snapshot_id for s in load_table(catalog, HR).metadata.snapshots] == hr_snapshots
            assert load_table(catalog, SALES).scan().to_arrow().num_rows == SALES_ROWS
            with IcebergSparkEngine.from_settings(settings).unit_of_work() as spark:
                assert spark.sql(f"SELECT count(*) AS n FROM {SALES.qualified}").collect()[0]["n"] == SALES_ROWS

            # The dry run (plan) and explain show the verdict before any run.
            now = datetime.now(timezone.utc)
            report = explain_table(settings, Coordination(settings.coordination_url), HR.qualified, now, instance)
            verdict = report["operationStatuses"]["ORPHAN_CLEANUP"]["envelope"]
            assert verdict["status"] == "refused" and verdict["refusals"][0]["field"] == "orphanCleanup.location"
            assert report["operationStatuses"]["EXPIRE_SNAPSHOTS"]["envelope"] is None  # not configured
            assert main(["--config", str(config), "plan", "--json"]) == 0
            planned = [d for d in json.loads(capsys.readouterr().out)["decisions"] if d["table"] == HR.qualified]
            assert [d["envelope"]["status"] for d in planned] == ["refused"]
            assert main(["--config", str(config), "plan"]) == 0
            assert f"{HR.qualified} ORPHAN_CLEANUP" in (text := capsys.readouterr().out)
            assert "| envelope: refused: orphanCleanup.location: " in text
    finally:
        policy_file.write_text("[]\n")
        orphan.unlink(missing_ok=True)


def test_a_refused_property_never_reaches_alter_table_even_when_the_policy_check_is_bypassed(
        lake, dagster_home, monkeypatch):
    settings, _ = lake
    # As if the files had changed between a check and the run, or a parser let it through.
    monkeypatch.setattr("floe_dagster.core.policies.policy.check_envelope", lambda *args: None)
    policy_file = Path(settings.policies[0]) / "policies.yaml"
    policy_file.write_text(json.dumps({"name": "props", "tablePattern": HR.qualified,
                                       "tableProperties": {"write.data.path": "file:/tmp/elsewhere", "comment": "x"}}))
    before = dict(load_table(open_catalog(settings.catalog), HR).properties)
    try:
        with DagsterInstance.get() as instance:
            summary = trigger_table(settings, HR.qualified, ["APPLY_TABLE_PROPERTIES"], reason="bypass",
                                    actor="test", trigger_id="envelope-props", instance=instance)
        (outcome,) = summary.outcomes
        assert outcome.status == "FAILED", summary.lines()
        assert "tableProperties.write.data.path: 'write.data.path' is refused by the safety envelope" in outcome.message
        assert dict(load_table(open_catalog(settings.catalog), HR).properties) == before  # not even 'comment'
    finally:
        policy_file.write_text("[]\n")


def test_a_key_floe_yaml_allows_is_set(lake, dagster_home, tmp_path, capsys, monkeypatch):
    settings, config = lake
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    _, hr, _ = locations(settings)
    allowed = tmp_path / "floe.yaml"
    allowed.write_text(config.read_text() + "envelope:\n  allowed-table-properties: [write.data.path]\n")
    target = hr + "/data"
    policy_file = Path(settings.policies[0]) / "policies.yaml"
    policy_file.write_text(json.dumps({"name": "props", "tablePattern": HR.qualified,
                                       "tableProperties": {"write.data.path": target}}))
    try:
        assert main(["--config", str(config), "validate", str(policy_file)]) == 2  # the deployment's own floe.yaml
        assert "'write.data.path' is refused by the safety envelope" in capsys.readouterr().out
        assert main(["--config", str(allowed), "validate", str(policy_file)]) == 0
        capsys.readouterr()
        with DagsterInstance.get() as instance:
            summary = trigger_table(load_settings(allowed, environ={}), HR.qualified, ["APPLY_TABLE_PROPERTIES"],
                                    reason="allowed", actor="test", trigger_id="envelope-allowed", instance=instance)
        assert summary.succeeded, summary.lines()
        assert load_table(open_catalog(settings.catalog), HR).properties["write.data.path"] == target
    finally:
        policy_file.write_text("[]\n")
