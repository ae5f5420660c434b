"""APPLY_TABLE_PROPERTIES through the real stack: a table Spark created, a policy declaring three
properties, drift in health and ``explain``, the debt-score sensor requesting the operation and the
request run as a real Dagster run, the table's properties read back from its Iceberg metadata with
PyIceberg, and a manual run without drift that changes nothing."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from dagster import DagsterInstance, build_sensor_context

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.reports.explain import explain_table
from floe_dagster.reports.health_report import health_report
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._health_tables import table_dir

pytestmark = pytest.mark.spark

OP = "APPLY_TABLE_PROPERTIES"
TABLE = TableName("demo", ("db",), "events")
POLICIES = """
- name: props
  tablePattern: "demo.db.*"
  tableProperties:
    write.metadata.delete-after-commit.enabled: true
    write.metadata.previous-versions-max: 5
    write.delete.mode: merge-on-read
  tablePropertiesSchedule: {}  # neither cron nor interval: due whenever the table drifts
"""
DECLARED = {"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "5",
            "write.delete.mode": "merge-on-read"}
UNDECLARED = ("commit.retry.num-retries", "7")  # set by the table's creator; the policy does not name it


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("props")
    settings = load_settings(write_settings(root, POLICIES), environ={})
    open_catalog(settings.catalog).create_namespace("db")
    engine = IcebergSparkEngine.from_settings(settings)
    try:
        with engine.unit_of_work() as spark:
            spark.sql("CREATE TABLE demo.db.events (id BIGINT, kind STRING) USING iceberg TBLPROPERTIES "
                      f"('write.delete.mode'='copy-on-write', '{UNDECLARED[0]}'='{UNDECLARED[1]}')")
            for start in (0, 10, 20):
                spark.sql(f"INSERT INTO demo.db.events SELECT id, 'k' FROM range({start}, {start + 10})")
    finally:
        engine.stop()
    refresh_table_cache(settings)  # the code location's table list: the table is an asset
    return settings



def sensor_requests(settings, instance):
    defs = build_definitions(settings)
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        return defs, defs.resolve_sensor_def(SENSOR_NAME).evaluate_tick(context).run_requests


def properties(settings) -> dict[str, str]:
    return dict(load_table(open_catalog(settings.catalog), TABLE).properties)


def metadata_json_on_disk(settings) -> int:
    table = load_table(open_catalog(settings.catalog), TABLE)
    return len(list((table_dir(table) / "metadata").glob("*.metadata.json")))


def test_drift_is_shown_then_applied_by_a_run_then_gone(lake, instance):
    coordination = Coordination(lake.coordination_url)
    now = datetime.now(timezone.utc)
    assert properties(lake)["write.delete.mode"] == "copy-on-write"

    # Before: health and explain show each declared key that differs, declared against current.
    record = health_report(lake, coordination, TABLE, now)
    assert record["table_properties"]["drift"] == [
        {"key": "write.metadata.delete-after-commit.enabled", "declared": "true", "current": None},
        {"key": "write.metadata.previous-versions-max", "declared": "5", "current": None},
        {"key": "write.delete.mode", "declared": "merge-on-read", "current": "copy-on-write"},
    ]
    # create + 3 inserts: 4 metadata.json files on disk, all tracked, all counted from the file name
    assert metadata_json_on_disk(lake) == 4
    assert record["metrics"]["metadata_files_tracked"] == 4 and record["metrics"]["metadata_files_written"] == 4
    assert record["derived"]["metadata_file_count"] == 4
    assert record["derived"]["metadata_delete_after_commit"] is False
    status = explain_table(lake, coordination, TABLE.qualified, now, instance=instance)["operationStatuses"][OP]
    assert status["shouldTrigger"] is True and status["trigger"] == "condition"
    assert [d["key"] for d in status["propertyDrift"]] == list(DECLARED)
    assert status["metConditions"][2] == ("Table property drift: write.delete.mode: declared 'merge-on-read', "
                                          "table has 'copy-on-write'")

    # The debt-score sensor requests it (drift is its condition), and the request runs as a Dagster run.
    defs, requests = sensor_requests(lake, instance)
    assert [r.partition_key for r in requests] == [OP]
    request = requests[0]
    assert request.tags["floe/trigger"] == "condition" and request.tags["floe/operation"] == OP
    assert request.tags["floe/policy"] == "props" and request.tags["floe/table"] == TABLE.qualified
    result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
        instance=instance, partition_key=request.partition_key, asset_selection=request.asset_selection,
        tags=request.tags, raise_on_error=False)
    assert result.success
    after = properties(lake)
    assert {key: after.get(key) for key in DECLARED} == DECLARED
    assert after[UNDECLARED[0]] == UNDECLARED[1]  # never touched
    assert metadata_json_on_disk(lake) == 5  # one metadata commit for the three properties
    event = instance.get_latest_materialization_event(asset_key_for(TABLE))
    assert event.run_id == result.run_id and event.dagster_event.partition == OP
    metadata = event.asset_materialization.metadata
    assert metadata["changed"].value is True and metadata["properties_set"].value == 3
    assert metadata["property_changes"].value == {
        "write.metadata.delete-after-commit.enabled": {"before": None, "after": "true"},
        "write.metadata.previous-versions-max": {"before": None, "after": "5"},
        "write.delete.mode": {"before": "copy-on-write", "after": "merge-on-read"},
    }
    assert metadata["property write.delete.mode"].value == "copy-on-write -> merge-on-read"
    assert "SET TBLPROPERTIES" in metadata["statement"].value and "commit.retry" not in metadata["statement"].value
    run = instance.get_run_by_id(result.run_id)
    assert run.tags["floe/operation"] == OP and run.tags["floe/table"] == TABLE.qualified
    assert run.tags["floe/policy"] == "props" and run.tags["floe/trigger"] == "condition"

    # After: no drift anywhere, so the operation is not due.
    later = datetime.now(timezone.utc)
    assert health_report(lake, coordination, TABLE, later)["table_properties"]["drift"] == []
    status = explain_table(lake, coordination, TABLE.qualified, later, instance=instance)["operationStatuses"][OP]
    assert status["propertyDrift"] == []
    assert status["shouldTrigger"] is False and status["reasons"][0].startswith("no_drift: ")
    assert status["unmetConditions"] == ["No table property drift"]
    assert sensor_requests(lake, instance)[1] == []

    # A run without drift changes nothing: no new metadata file, before = after.
    again = trigger_table(lake, TABLE.qualified, [OP], reason="again", actor="tester", trigger_id="t-props",
                          instance=instance)
    assert again.succeeded, again.lines()
    assert instance.get_run_by_id(again.outcomes[0].run_id).tags["floe/trigger"] == "manual"
    assert again.outcomes[0].metadata["changed"] is False and again.outcomes[0].metadata["properties_set"] == 0
    assert metadata_json_on_disk(lake) == 5
