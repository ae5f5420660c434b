"""Owner overrides through the real stack (issue 28, deliver 6): Iceberg tables Spark created, their owners'
``floe.*`` properties set with ``ALTER TABLE … SET TBLPROPERTIES``, a policy allowing the pause and a
bounded target file size. A paused table is not maintained (the sensor requests nothing for it; plan,
explain and a hand-triggered run say why); a tuned table's run hands Iceberg the owner's target file size
(the procedure call in its materialization), and the properties the policy refuses (one naming a location
of another table) are ignored, each with its reason, in plan, the HTTP trigger status and the run.

Secrets (issue 34, deliver 6): the tuned table's owner also sets an ``s3.secret-access-key`` and a ``floe.*``
key naming a token (random markers no setting knows), and floe.yaml holds a Spark secret (a known value):
plan, the HTTP answer, the run's metadata and its whole event log show neither; and a library's error
quoting both, raised inside a table's step or out of the step itself, reaches the run's failure and event
log masked, with its type and its outage classification."""

from __future__ import annotations

import json
import os
import uuid
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from dagster._serdes import serialize_value

from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.storage.storage_keys import TABLE_STORAGE_IGNORED
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.reports.explain import explain_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_table_properties import sensor_requests
from floe_dagster_tests.unit.test_api_http import start_server
from floe_dagster_tests.unit.test_secrets_by_key import REST_CATALOG

pytestmark = pytest.mark.spark

CLI = str(Path(sys.executable).parent / "floe-dagster")
KEY = "owner-test-key-0123456789"
OP = "REWRITE_DATA_FILES"
PAUSED, TUNED = TableName("demo", ("db",), "paused"), TableName("demo", ("db",), "tuned")
# Random markers: on the tuned table by its owner (known to no setting), and in floe.yaml (a known secret).
SECRETS = {name: f"Zo{name}{uuid.uuid4().hex[:18]}" for name in ("TableS3", "TableToken", "SparkConf", "ByKey")}
# floe's Spark conf for a REST catalog with a marker in every secret position, as Spark logs it (the lake's JVM).
REST_SECRETS = {name: f"Zr{name}{uuid.uuid4().hex[:16]}" for name in (
    "password", "credential", "token", "header", "key_id", "s3_secret", "session", "signing", "s3a", "env_key")}
SPARK_LOGGED: dict[str, str] = {}
OWNER_TOKEN = "floe.rewrite-data-files.secret-token"
OWN_SIZE = 2 * 2**20  # the owner's target file size: inside the policy's bounds, far from the policy's own
POLICIES = """
- name: owned
  tablePattern: "demo.db.*"
  rewriteDataFiles: {targetFileSizeBytes: 536870912, minInputFiles: 2}
  rewriteDataFilesSchedule: {interval: P1D}
  ownerOverrides:
    allow:
      maintenance.enabled: {}
      rewrite-data-files.target-file-size-bytes: {min: 1048576, max: 1073741824}
"""
PROPERTIES = {
    PAUSED: {"floe.maintenance.enabled": "false", "floe.rewrite-data-files.target-file-size-bytes": "1024"},
    TUNED: {"floe.rewrite-data-files.target-file-size-bytes": str(OWN_SIZE),
            "floe.rewrite-data-files.min-input-files": "1",  # not in the policy's allow list
            "floe.orphan-cleanup.location": "s3://other-table/data",  # never: the safety envelope
            "s3.secret-access-key": SECRETS["TableS3"], OWNER_TOKEN: SECRETS["TableToken"]},
}
IGNORED_ON_TUNED = [
    # A key that would steer floe's FileIO comes first, whatever the policy allows, its secret value masked.
    {"property": "s3.secret-access-key", "value": "***", "reason": TABLE_STORAGE_IGNORED},
    {"property": "floe.orphan-cleanup.location", "value": "s3://other-table/data",
     "reason": "never overridable: it names a location, and a run lists, writes and deletes only under its own "
               "table (the safety envelope)"},
    {"property": "floe.rewrite-data-files.min-input-files", "value": "1",
     "reason": "policy 'owned' does not allow owners to set it (ownerOverrides.allow)"},
    {"property": OWNER_TOKEN, "value": "***",
     "reason": "not a key owners may set (floe.maintenance.enabled or floe.<operation>.<option>: docs/policies.md)"},
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("owners")
    keys = root / "keys.txt"
    keys.write_text(f"dash:VIEWER:{hash_key(KEY)}\n")
    extra = f"  conf: {{spark.hadoop.fs.s3a.secret.key: {SECRETS['SparkConf']}}}\napi:\n  keys-file: {keys}\n"
    settings = load_settings(write_settings(root, POLICIES, extra=extra), environ={})
    open_catalog(settings.catalog).create_namespace("db")
    engine = IcebergSparkEngine.from_settings(settings)
    try:
        with engine.unit_of_work() as spark:
            for table, owned in PROPERTIES.items():
                name = f"demo.db.{table.name}"
                spark.sql(f"CREATE TABLE {name} (id BIGINT, kind STRING) USING iceberg")
                for start in (0, 10, 20):  # three small files: something to compact
                    spark.sql(f"INSERT INTO {name} SELECT id, 'k' FROM range({start}, {start + 10})")
                pairs = ", ".join(f"'{k}'='{v}'" for k, v in owned.items())
                spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({pairs})")  # what an owner does
            SPARK_LOGGED["rest"] = conf_as_spark_logs_it(spark, root)
    finally:
        engine.stop()
    refresh_table_cache(settings)
    return settings



def conf_as_spark_logs_it(spark, root: Path) -> str:
    """The conf floe builds for a REST catalog (REST_SECRETS in every secret position) as Spark logs it:
    ``SparkConf.toDebugString``, what a SparkContext logs with ``spark.logConf``, redacted by the conf's own
    ``spark.redaction.regex``."""
    from floe_dagster.spark.session import spark_conf_for

    (root / "rest.yaml").write_text(REST_CATALOG.format(**REST_SECRETS))
    conf = spark._jvm.org.apache.spark.SparkConf(False)
    for key, value in spark_conf_for(load_settings(root / "rest.yaml", environ={})).items():
        conf.set(key, value)
    return conf.toDebugString()


def test_spark_logs_floes_conf_with_every_secret_redacted(lake):
    logged = SPARK_LOGGED["rest"]
    assert [name for name, secret in REST_SECRETS.items() if secret in logged] == [], logged
    for key in ("spark.sql.catalog.lake.credential", "spark.sql.catalog.lake.header.Authorization",
                "spark.sql.catalog.lake.uri", "spark.sql.catalog.lake.s3.access-key-id"):
        assert f"{key}=*********(redacted)" in logged, logged  # Spark's own default hides none of these
    assert "spark.sql.catalog.lake.type=rest" in logged


def test_plan_and_explain_show_the_pause_and_each_override_with_its_reason(lake, instance):
    env = {**os.environ, "DAGSTER_HOME": os.environ["DAGSTER_HOME"], "FLOE_CONFIG": os.environ["FLOE_CONFIG"]}
    result = subprocess.run([CLI, "plan", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    decisions = {(d["table"], d["operation"]): d for d in json.loads(result.stdout)["decisions"]}
    paused, tuned = decisions[(PAUSED.qualified, OP)], decisions[(TUNED.qualified, OP)]
    assert paused["decision"] == "skip" and paused["reasons"] == [
        "owner_paused: the table's owner paused its maintenance: property floe.maintenance.enabled=false (allowed "
        "by policy 'owned')"]
    assert paused["ownerOverrides"]["ignored"] == [{
        "property": "floe.rewrite-data-files.target-file-size-bytes", "value": "1024",
        "reason": "1024 is below the minimum 1048576 policy 'owned' allows"}]
    assert tuned["decision"] == "run"
    assert tuned["ownerOverrides"] == {"paused": False, "applied": {"rewriteDataFiles.targetFileSizeBytes": OWN_SIZE},
                                       "ignored": IGNORED_ON_TUNED}
    text = subprocess.run([CLI, "plan"], capture_output=True, text=True, env=env, timeout=600).stdout
    assert (f"| owner: rewriteDataFiles.targetFileSizeBytes={OWN_SIZE}; ignored s3.secret-access-key=*** (a table "
            "property never steers floe's storage") in text
    assert "; ignored floe.orphan-cleanup.location=s3://other-table/data (never overridable" in text
    assert not leaks(result.stdout + result.stderr + text)

    status = explain_table(lake, Coordination(lake.coordination_url), PAUSED.qualified, datetime.now(timezone.utc),
                           instance=instance)["operationStatuses"][OP]
    assert status["shouldTrigger"] is False and status["reasons"][0].startswith("owner_paused: ")
    assert status["ownerOverrides"]["paused"] is True


def test_the_http_trigger_status_shows_the_ignored_overrides(lake, instance):
    server, thread, url = start_server(create_app(lake, KeyStore(lake.api), instance))
    try:
        response = requests.get(f"{url}/api/v1/tables/db/tuned/trigger-status", headers={"X-API-Key": KEY},
                                timeout=120)
    finally:
        server.should_exit = True
        thread.join(20)
    assert response.status_code == 200, response.text
    status = response.json()["operationStatuses"][OP]
    assert status["shouldTrigger"] is True
    assert status["ownerOverrides"]["applied"] == {"rewriteDataFiles.targetFileSizeBytes": OWN_SIZE}
    assert status["ownerOverrides"]["ignored"] == IGNORED_ON_TUNED
    assert not leaks(response.text)


def test_the_tuned_table_runs_with_the_owners_size_and_the_paused_one_is_not_maintained(lake, instance,
                                                                                          monkeypatch):
    defs, requests_ = sensor_requests(lake, instance)
    assert [(r.tags["floe/table"], r.partition_key) for r in requests_] == [(TUNED.qualified, OP)]  # not PAUSED
    request = requests_[0]
    steps = record_loads_and_the_engine_call(monkeypatch, type(open_catalog(lake.catalog)))
    result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key=OP, asset_selection=request.asset_selection, tags=request.tags,
        raise_on_error=False)
    assert result.success
    # One read of the table before the lock (issue 35): the owner overrides and the run's counts share it.
    assert steps[:steps.index("engine call")] == ["load"], steps
    metadata = instance.get_latest_materialization_event(asset_key_for(TUNED)).asset_materialization.metadata
    call = metadata["procedure_call"].value
    assert f"'target-file-size-bytes', '{OWN_SIZE}'" in call and "536870912" not in call, call
    assert "min-input-files', '2'" in call  # the policy's own option: the owner may not lower it
    assert metadata["owner_overrides"].value == {
        "paused": False, "applied": {"rewriteDataFiles.targetFileSizeBytes": OWN_SIZE}, "ignored": IGNORED_ON_TUNED}
    assert not leaks(event_log(instance, result.run_id))

    # A run triggered by hand on the paused table fails before any engine call, naming the property.
    paused = trigger_table(lake, PAUSED.qualified, [OP], reason="by hand", actor="tester", trigger_id="t-owner",
                           instance=instance)
    assert not paused.succeeded
    assert "property floe.maintenance.enabled=false" in " ".join(paused.lines())
    assert instance.get_latest_materialization_event(asset_key_for(PAUSED)) is None


def record_loads_and_the_engine_call(monkeypatch, catalog_type: type) -> list[str]:
    """What the catalog's ``load_table`` and the engine's call did, in order: "load", "engine call"."""
    steps: list[str] = []
    load, maintain = catalog_type.load_table, IcebergSparkEngine.maintain

    def counted_load(self, *args, **kwargs):
        steps.append("load")
        return load(self, *args, **kwargs)

    def recorded_call(self, *args, **kwargs):
        steps.append("engine call")
        return maintain(self, *args, **kwargs)

    monkeypatch.setattr(catalog_type, "load_table", counted_load)
    monkeypatch.setattr(IcebergSparkEngine, "maintain", recorded_call)
    return steps


def leaks(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


def event_log(instance, run_id: str) -> str:
    """Everything the instance keeps of a run as Dagit reads it: its events, serialized, and its tags."""
    return serialize_value(instance.all_logs(run_id)) + json.dumps(instance.get_run_by_id(run_id).tags)


def _library_error(*_, **__):
    """A PyIceberg error quoting a secret by key, caused by a refused connection quoting a known one."""
    from pyiceberg.exceptions import RESTError

    try:
        raise ConnectionRefusedError(111, f"Connection refused: http://floe:{SECRETS['SparkConf']}@127.0.0.1:1/v1")
    except ConnectionRefusedError as refused:
        raise RESTError(f"catalog said: s3.secret-access-key={SECRETS['ByKey']} refused") from refused


@pytest.mark.parametrize("where", ["inside the table's step", "out of the step"])
def test_a_librarys_error_reaches_dagit_masked_with_its_type_and_kind(lake, instance, monkeypatch, where):
    from floe_dagster.defs import assets

    monkeypatch.setattr(assets, "maintain_table" if where == "inside the table's step" else "_run_decisions",
                        _library_error)
    result = build_definitions(lake).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key=OP, asset_selection=[asset_key_for(TUNED)], raise_on_error=False)
    assert not result.success
    log = event_log(instance, result.run_id)
    assert not leaks(log), leaks(log)
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error
    shown = failure.step_failure_data.user_failure_data.description if error is None else error.to_string()
    assert "RESTError: catalog said: s3.secret-access-key=*** refused" in shown, shown
    if where == "inside the table's step":  # classified by the one rule, masked or not: an outage
        assert instance.get_run_by_id(result.run_id).tags[T.FAILURE_KIND] == "outage"
    else:  # Dagster shows the library's type and its cause chain, each masked
        assert "ConnectionRefusedError" in shown and "http://floe:***@127.0.0.1:1/v1" in shown, shown
