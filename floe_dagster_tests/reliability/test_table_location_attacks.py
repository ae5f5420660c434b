"""A table's own location, written by its owner, through the real stack (issue 34): real Spark with the real
Iceberg runtime, the real SQL catalog, a real Dagster instance. Two ordinary tables, ``demo.sales.a`` and
``demo.sales.b`` (their namespace has a ``location``), every file ten days old, and one fleet policy
(``demo.*.*``, orphan cleanup with its defaults). Each attacker is a table its owner creates with Spark
SQL's ``CREATE TABLE … LOCATION``, as the issue tried it:

- at the warehouse root: a whole-fleet orphan cleanup (one batch run of the maintenance job over every
  table) refuses it with the reason in the run's failure and the table's outcome, and maintains the
  others; ``plan`` and ``explain`` show the refusal before;
- at the namespace's folder, at another table's folder, inside a table's quarantine: each one's cleanup
  (``floe-dagster trigger``) fails with its reason, and ``restore`` refuses the first;
- a Hive-style nested table its policy names (``nestedTables``): the outer table's cleanup runs and
  leaves every file of the nested one.

After each: every file of the other tables is where it was (the quarantined one too), and Spark reads
every row of them. Without the check, the first cleanup of such a table moves the others' files into its
quarantine.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterEventType, DagsterInstance

from floe_dagster.cli import main
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.demo import _create, local_path, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.reports.explain import explain_table
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark

POLICIES = """
- name: fleet
  tablePattern: "demo.*.*"
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: P1D}
- name: hive
  tablePattern: "demo.hive.outer"
  priority: 5
  orphanCleanup: {nestedTables: [hive.archive]}
  orphanCleanupSchedule: {interval: P1D}
"""
A, B = TableName("demo", ("sales",), "a"), TableName("demo", ("sales",), "b")
ROOT = TableName("demo", ("ops",), "root")
ROWS = {A: 12, B: 18}
TEN_DAYS_AGO = time.time() - 10 * 86400
OC = Operation.ORPHAN_CLEANUP


def files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def age(root: Path) -> None:
    for path in files(root):
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO))  # only being referenced by their table protects them


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("owner_location")
    config = write_settings(root, POLICIES, "batching: {max-tables: 20}\n")
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    warehouse = settings.catalog.properties["warehouse"].rstrip("/")
    catalog.create_namespace("sales", {"location": f"{warehouse}/sales.db"})
    catalog.create_namespace("ops")
    for table, count in ROWS.items():
        created = _create(catalog, ".".join(table.identifier))
        for start in range(0, count, 6):
            created.append(rows(start, 6))
    return settings, config, warehouse


def owner_creates(settings, table: TableName, location: str) -> None:
    """What the table's owner may do: a table of their own, at a location of their choice, with a row."""
    reference = spark_table_reference(table)
    with IcebergSparkEngine.from_settings(settings).unit_of_work() as spark:
        spark.sql(f"CREATE TABLE {reference} (id BIGINT) USING iceberg LOCATION '{location}'")
        spark.sql(f"INSERT INTO {reference} VALUES (1)")
    refresh_table_cache(settings)


def the_others_are_whole(settings, warehouse: str, before: set[str]) -> None:
    """Every file of the other tables is where it was, and real Spark reads every row of them."""
    assert files(local_path(warehouse)) >= before, sorted(before - files(local_path(warehouse)))[:5]
    with IcebergSparkEngine.from_settings(settings).unit_of_work() as spark:
        for table, count in ROWS.items():
            assert spark.sql(f"SELECT count(*) AS n FROM {spark_table_reference(table)}").collect()[0]["n"] == count


def victims_files(settings) -> set[str]:
    catalog = open_catalog(settings.catalog)
    return {f for table in ROWS for f in files(local_path(load_table(catalog, table).location()))}


def test_a_fleet_cleanup_refuses_the_table_at_the_warehouse_root_and_maintains_the_others(lake, dagster_home,
                                                                                            capsys, monkeypatch):
    settings, config, warehouse = lake
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    owner_creates(settings, ROOT, warehouse)
    a_location = load_table(open_catalog(settings.catalog), A).location()
    orphan = local_path(a_location) / "data" / "a-orphan.parquet"  # a's own orphan: a's cleanup quarantines it
    pq.write_table(rows(900, 2), orphan)
    age(local_path(warehouse))
    before = files(local_path(warehouse)) - {str(orphan)}
    why = f"is the catalog's warehouse root {warehouse!r}: listing it would remove every other table's files"

    with DagsterInstance.get() as instance:
        # The whole fleet's orphan cleanup, as one batch run of the maintenance job (Dagit's materialize-all).
        defs = build_definitions(settings)
        selection = [asset_key_for(table) for table in (A, B, ROOT)]
        result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key=OC.value, asset_selection=selection, raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
        text = failure.event_specific_data.user_failure_data.description
        assert "failed on 1 of 3 table(s)" in text and ROOT.qualified in text and why in text, text
        maintained = {".".join(m.asset_key.path) for m in result.asset_materializations_for_node("iceberg_tables")}
        assert maintained == {A.qualified, B.qualified}
        # The table's failure, not an outage: the batch went on, and the refused table backs off alone.
        assert instance.get_run_by_id(result.run_id).tags.get(T.FAILURE_KIND) is None

    the_others_are_whole(settings, warehouse, before)
    assert not orphan.exists()  # a's own cleanup ran: its orphan is in its own quarantine
    outcomes = Coordination(settings.coordination_url).all_history()
    assert outcomes[(ROOT.qualified, OC)].consecutive_failures == 1
    assert outcomes[(A.qualified, OC)].last_run_succeeded and outcomes[(B.qualified, OC)].last_run_succeeded

    # plan and explain show the refusal and its reason (before a run as after it).
    with DagsterInstance.get() as instance:
        assert main(["--config", str(config), "plan", "--json"]) == 0
        planned = {d["table"]: d["envelope"] for d in json.loads(capsys.readouterr().out)["decisions"]
                   if d["operation"] == OC.value}
        assert planned[ROOT.qualified]["status"] == "refused", planned
        assert planned[ROOT.qualified]["detail"].startswith("refused: table location: ")
        assert why in planned[ROOT.qualified]["detail"]
        assert planned[A.qualified]["status"] == planned[B.qualified]["status"] == "ok"
        report = explain_table(settings, Coordination(settings.coordination_url), ROOT.qualified,
                               datetime.now(timezone.utc), instance)
        verdict = report["operationStatuses"][OC.value]["envelope"]
        assert verdict["status"] == "refused" and verdict["refusals"][0]["field"] == "table location"


@pytest.mark.parametrize("name, where, reason", [
    ("at_namespace", lambda wh, a: f"{wh}/sales.db", "is the location of namespace 'sales'"),
    ("at_table", lambda wh, a: a, "it is the location of table 'demo.sales.a'"),
    ("in_quarantine", lambda wh, a: f"{a}/_floe_quarantine", "lies inside a quarantine"),
])
def test_a_table_its_owner_puts_over_other_tables_is_refused_and_lists_nothing(lake, dagster_home, capsys, name,
                                                                              where, reason):
    settings, config, warehouse = lake
    a_location = load_table(open_catalog(settings.catalog), A).location()
    kept = local_path(a_location) / "_floe_quarantine" / f"20261201T000000Z_run-{name}" / "data" / "kept.parquet"
    kept.parent.mkdir(parents=True, exist_ok=True)  # a run folder of a's quarantine, within its grace period
    pq.write_table(rows(700, 2), kept)
    quarantined = files(local_path(a_location) / "_floe_quarantine")
    attacker = TableName("demo", ("ops",), name)
    owner_creates(settings, attacker, where(warehouse, a_location))
    age(local_path(warehouse))
    before = victims_files(settings)

    with DagsterInstance.get() as instance:
        summary = trigger_table(settings, attacker.qualified, [OC.value], reason="owner", actor="test",
                                trigger_id=f"owner-{name}", instance=instance)
    # Nothing of the other tables was listed, moved or deleted (a's quarantined files neither).
    assert victims_files(settings) >= before, sorted(before - victims_files(settings))[:5]
    assert files(local_path(a_location) / "_floe_quarantine") >= quarantined
    the_others_are_whole(settings, warehouse, before)
    (outcome,) = summary.outcomes
    assert outcome.status == "FAILED", summary.lines()
    assert f"ORPHAN_CLEANUP on table '{attacker.qualified}' refused by the safety envelope" in outcome.message
    assert reason in outcome.message, outcome.message
    if name == "at_namespace":  # restore, which moves files back under the table, is refused the same way
        capsys.readouterr()
        assert main(["--config", str(config), "restore", attacker.qualified, "--run", "latest"]) != 0
        assert "restore refused by the safety envelope: table location: " in (err := capsys.readouterr().err)
        assert reason in err, err


def test_a_nested_table_the_policy_names_is_left_out_of_the_outer_tables_listing(lake, dagster_home):
    settings, config, warehouse = lake
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("hive")
    outer = TableName("demo", ("hive",), "outer")
    created = _create(catalog, ".".join(outer.identifier))
    created.append(rows(0, 6))
    owner_creates(settings, TableName("demo", ("hive",), "archive"), f"{created.location().rstrip('/')}/archive")
    archive = local_path(created.location()) / "archive"
    orphan = local_path(created.location()) / "data" / "outer-orphan.parquet"
    pq.write_table(rows(800, 2), orphan)
    age(local_path(warehouse))
    nested_files = files(archive)

    with DagsterInstance.get() as instance:
        summary = trigger_table(settings, outer.qualified, [OC.value], reason="hive", actor="test",
                                trigger_id="hive-outer", instance=instance)
    assert files(archive) == nested_files  # listed under the outer table, yet left alone
    with IcebergSparkEngine.from_settings(settings).unit_of_work() as spark:
        assert spark.sql("SELECT count(*) AS n FROM demo.hive.archive").collect()[0]["n"] == 1
        assert spark.sql("SELECT count(*) AS n FROM demo.hive.outer").collect()[0]["n"] == 6
    (outcome,) = summary.outcomes
    assert outcome.status == "SUCCEEDED", outcome.message
    assert not orphan.exists() and outcome.metadata["orphan_files_count"] == 1  # the outer table's own orphan
