"""Fair shares through the real stack: real PyIceberg tables in two namespaces with very different
demand (12 due tables against 2), a scarce table budget, a real Dagster instance, and the real
debt-score sensor's ticks: each tick's run requests split the budget between the namespaces by
weight, the small namespace's unused share goes to the big one, and the plan the CLI, explain
and the HTTP API read names the share a table waits for (``budget_share``)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import pytest
from dagster import DagsterInstance, build_sensor_context

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.plan.planner import plan
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.sensors import SENSOR_NAME
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.scheduling.inputs import gather
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import create_fragmented_table

POLICIES = """
- name: everything
  tablePattern: "demo.*.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
"""
BIG = [TableName("demo", ("big",), f"t{i:02d}") for i in range(12)]
SMALL = [TableName("demo", ("small",), f"t{i}") for i in range(2)]


def make_lakehouse(tmp_path, monkeypatch, tables_per_tick: int, tables: list[TableName]):
    config = write_settings(tmp_path, POLICIES, f"""
        scheduler: {{max-tables-per-poll: {tables_per_tick}}}
        batching: {{max-tables: 1}}
        fair-shares: {{by: namespace, weights: {{big: 3}}}}
        """)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    for table in tables:
        create_fragmented_table(settings, table, files=2, rows_per_file=3)
    refresh_table_cache(settings)
    return settings


@pytest.fixture
def lakehouse(tmp_path, dagster_home, monkeypatch):
    settings = make_lakehouse(tmp_path, monkeypatch, 4, BIG + SMALL)
    with DagsterInstance.get() as instance:
        yield settings, instance, build_definitions(settings)


def sensor_tick(defs, instance) -> Counter[str]:
    """One tick of the real debt-score sensor: its run requests, by namespace."""
    with build_sensor_context(instance=instance, definitions=defs, resources=defs.resources) as context:
        data = defs.resolve_sensor_def(SENSOR_NAME).evaluate_tick(context)
    requests = list(data.run_requests or [])
    assert all(r.partition_key == "REWRITE_DATA_FILES" for r in requests)
    return Counter(r.tags[T.NAMESPACE] for r in requests)


def test_ticks_split_a_scarce_budget_between_namespaces_by_weight(lakehouse):
    settings, instance, defs = lakehouse
    # What `floe-dagster plan`, explain and the API show before the first tick.
    coordination = Coordination(settings.coordination_url)
    planned = plan(gather(settings, instance, coordination, datetime.now(timezone.utc), None).plan_input)
    assert Counter(d.table.namespace_str for d in planned.admitted) == {"big": 3, "small": 1}
    waiting = next(d for d in planned.decisions if d.table == SMALL[1])
    assert waiting.reasons[0] == ("budget_share: namespace 'small' used its share, 1 of 4 tables this tick "
                                  "(max-tables-per-poll); weight 1 of 4")

    # Weights 3 and 1 split the 4 tables of a tick 3 and 1, while both namespaces have due tables.
    assert sensor_tick(defs, instance) == {"big": 3, "small": 1}
    assert sensor_tick(defs, instance) == {"big": 3, "small": 1}
    # small has nothing left to do: its share goes to big in the same tick.
    assert sensor_tick(defs, instance) == {"big": 4}
    assert sensor_tick(defs, instance) == {"big": 2}
    assert sensor_tick(defs, instance) == {}
    # Every table was admitted exactly once (the ledger).
    admitted = Counter(row.table_name for row in coordination.ledger_rows())
    assert admitted == {t.qualified: 1 for t in BIG + SMALL}


def test_with_room_for_one_table_a_tick_the_light_share_is_not_starved(tmp_path, dagster_home, monkeypatch):
    """One table a tick, weights 3:1: each tick's admission is in the ledger, and the next tick's shares
    remember it (decaying over an hour), so the light namespace is admitted on the second tick instead of
    waiting until the heavy one has nothing left."""
    settings = make_lakehouse(tmp_path, monkeypatch, 1, BIG[:4] + SMALL)
    with DagsterInstance.get() as instance:
        defs = build_definitions(settings)
        admitted = [sensor_tick(defs, instance) for _ in range(4)]
        assert admitted == [{"big": 1}, {"small": 1}, {"big": 1}, {"big": 1}]
        # What the next tick plans, and why small waits: its admission is remembered.
        coordination = Coordination(settings.coordination_url)
        planned = plan(gather(settings, instance, coordination, datetime.now(timezone.utc), None).plan_input)
        assert [d.table.namespace_str for d in planned.admitted] == ["big"]
        waiting = next(d for d in planned.decisions if d.table == SMALL[1])
        assert waiting.reasons[0].startswith("budget_share: namespace 'small' used its share, 0 of 1 tables this "
                                             "tick (max-tables-per-poll), and 1.0 tables admitted in earlier ticks")
        ledger = [row.table_name.split(".")[1] for row in sorted(coordination.ledger_rows(), key=lambda r: r.id)]
        assert ledger == ["big", "small", "big", "big"]
