"""APPLY_TABLE_PROPERTIES against a concurrent writer, for real: a real SQL catalog, a real run in a
real Dagster instance, and another writer's real commit (PyIceberg, from its own load of the table)
made between floe's read and floe's commit, or right after floe's commit. Either way the run ends as a
conflict, not a failure: the writer's value stands (floe never overwrites what it did not read), no
backoff counts, and a later run reads the table again and applies the policy."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


import pytest
from dagster import DagsterEventType, DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.runs.history import CONFLICT_STREAK, Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.operation_steps import apply_table_properties as table_properties_run
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.demo import EVENT_SCHEMA
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.reports.explain import explain_table
from floe_dagster_tests.conftest import configured

OP = Operation.APPLY_TABLE_PROPERTIES
TABLE = TableName("demo", ("db",), "events")
MAX_VERSIONS = "write.metadata.previous-versions-max"
DELETE_AFTER = "write.metadata.delete-after-commit.enabled"
POLICIES = f"""
- name: props
  tablePattern: "demo.db.*"
  tableProperties:
    {DELETE_AFTER}: true
    {MAX_VERSIONS}: 5
  tablePropertiesSchedule: {{}}
"""


@pytest.fixture
def lake(tmp_path, dagster_home, monkeypatch):
    settings = configured(tmp_path, monkeypatch, POLICIES)
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("db")
    catalog.create_table(TABLE.identifier, schema=EVENT_SCHEMA, properties={"owner": "etl"})
    refresh_table_cache(settings)
    return settings


def properties(settings) -> dict[str, str]:
    return dict(load_table(open_catalog(settings.catalog), TABLE).properties)


def another_writer_sets(settings, value: str) -> None:
    """Another writer's own commit: its own load of the table, one property set."""
    other = load_table(open_catalog(settings.catalog), TABLE)
    other.transaction().set_properties({MAX_VERSIONS: value}).commit_transaction()


def run(settings):
    with DagsterInstance.get() as instance:
        result = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key=OP.value, asset_selection=[asset_key_for(TABLE)], raise_on_error=False)
        observations = [
            {k: getattr(v, "value", v) for k, v in e.event_specific_data.asset_observation.metadata.items()}
            for e in result.all_events if e.event_type == DagsterEventType.ASSET_OBSERVATION
            and e.event_specific_data.asset_observation.partition == OP.value]
        return result, instance.get_run_by_id(result.run_id).tags, observations


def assert_a_conflict(settings, result, tags, observations, why: str) -> None:
    assert result.success  # a lost race is no failure of the run
    assert not result.asset_materializations_for_node("iceberg_tables")  # nothing claims it was applied
    assert tags[T.CONFLICTS] == TABLE.qualified and T.FAILURE_KIND not in tags
    [outcome] = Coordination(settings.coordination_url).outcomes_for(TABLE.qualified)
    assert (outcome["succeeded"], outcome["failure_kind"]) == (False, "conflict")
    assert why in outcome["message"]
    history = Coordination(settings.coordination_url).all_history()[(TABLE.qualified, OP)]
    assert (history.consecutive_conflicts, history.consecutive_failures, history.failures) == (1, 0, 0)
    [observation] = observations
    assert observation["outcome"] == "conflict"


def writer_at(settings, monkeypatch, read: int) -> None:
    """Another writer sets a declared property right after the run's ``read``-th load of the table
    (1: its read under the table lock, before its commit; 2: its check after the commit, just before)."""
    real, loads = table_properties_run.load_table, []

    def load(catalog, table):
        loads.append(table)
        if len(loads) == read == 2:
            another_writer_sets(settings, "9")
        loaded = real(catalog, table)
        if len(loads) == read == 1:
            another_writer_sets(settings, "9")
        return loaded

    monkeypatch.setattr(table_properties_run, "load_table", load)


def test_a_writer_between_floes_read_and_its_commit_wins_and_the_run_is_a_conflict(lake, monkeypatch):
    settings = lake
    writer_at(settings, monkeypatch, read=1)
    result, tags, observations = run(settings)
    assert_a_conflict(settings, result, tags, observations, "another writer changed a declared property after floe read it")
    after = properties(settings)
    assert after[MAX_VERSIONS] == "9" and DELETE_AFTER not in after  # floe set nothing over the writer
    assert after["owner"] == "etl"

    # The writer is gone: the next run reads again and applies the policy.
    monkeypatch.setattr(table_properties_run, "load_table", load_table)
    result, _, _ = run(settings)
    assert result.success and result.asset_materializations_for_node("iceberg_tables")
    assert properties(settings) == {**after, MAX_VERSIONS: "5", DELETE_AFTER: "true"}


def test_a_writer_right_after_floes_commit_is_a_conflict_not_a_failure(lake, monkeypatch):
    settings = lake
    writer_at(settings, monkeypatch, read=2)
    result, tags, observations = run(settings)
    assert_a_conflict(settings, result, tags, observations, f"then another writer changed {MAX_VERSIONS} (now "
                                                            f"{MAX_VERSIONS}=9)")
    after = properties(settings)
    assert (after[MAX_VERSIONS], after[DELETE_AFTER]) == ("9", "true")


def test_the_tenth_lost_race_in_a_row_fails_the_run_and_backs_off(lake, monkeypatch):
    """Nine lost races recorded before; the tenth, for real, counts as a failure too: the run fails, the
    planner backs off as for failures, and ``explain`` says so."""
    settings = lake
    coordination = Coordination(settings.coordination_url)
    start = datetime.now(timezone.utc) - timedelta(hours=3)
    for i in range(CONFLICT_STREAK - 1):
        at = start + timedelta(minutes=15 * i)
        coordination.record_outcome(Outcome(f"earlier-{i}", TABLE.qualified, OP, at, at, succeeded=False,
                                            failure_kind="conflict", conflict_writer="overwrite"))
    writer_at(settings, monkeypatch, read=1)
    result, tags, _ = run(settings)
    assert not result.success  # the long streak is a failure now: Dagit shows the run failed
    assert tags[T.CONFLICTS] == TABLE.qualified
    history = coordination.all_history()[(TABLE.qualified, OP)]
    assert (history.consecutive_conflicts, history.consecutive_failures) == (CONFLICT_STREAK, 1)
    now = datetime.now(timezone.utc)
    with DagsterInstance.get() as instance:
        status = explain_table(settings, coordination, TABLE.qualified, now, instance=instance)["operationStatuses"][OP.value]
    assert status["conflicts"]["countsAsFailure"] is True
    assert status["conflicts"]["consecutiveConflicts"] == CONFLICT_STREAK
    assert status["reasons"][0].startswith("failure_backoff: 1 consecutive failure(s) (the last 10 runs lost their "
                                           "commit race")
    assert status["backoff"]["consecutiveFailures"] == 1
