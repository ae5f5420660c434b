"""Sharded code locations over one lakehouse: each holds only its scope's tables, plans only them,
and ticks under its own scheduler lock."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from dagster import DagsterInstance

from floe_dagster import shards
from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.locks import hold_lock, scheduler_lock_name
from floe_dagster.core.basics.scopes import scope_named
from floe_dagster.demo import DemoSizes, build_demo_lakehouse
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark  # builds the demo (Spark writes its position deletes)

POLICIES = """
- name: all
  tablePattern: "*"
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: PT1H}
"""


def test_shards_split_the_tables_and_plan_apart(tmp_path, dagster_home, monkeypatch):
    config = write_settings(tmp_path, POLICIES, extra="shards:\n  - {name: sales, tables: 'demo.sales.*'}\n"
                                                      "  - {name: rest, tables: '*'}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, DemoSizes(small_files=2, snapshots=2, position_delete_commits=1, old_orphans=0,
                                            young_orphans=0, skewed_files=1, other_partition_files=1))
    tables = refresh_table_cache(settings)
    shards._definitions.cache_clear()

    def asset_tables(defs):
        return {"/".join(key.path[1:]) for key in defs.resolve_asset_graph().get_all_asset_keys()}

    sales, rest = asset_tables(shards.sales), asset_tables(shards.rest)
    assert sales == {"sales/orders", "sales/events", "sales/customers"}
    assert rest == {"ops/audit_log", "ops/metrics", "ops/healthy"}
    half0, half1 = asset_tables(shards.shard_0_of_2), asset_tables(shards.shard_1_of_2)
    assert not half0 & half1 and half0 | half1 == sales | rest
    with pytest.raises(AttributeError, match="no shard named 'nope'"):
        shards.nope

    with DagsterInstance.get() as instance:
        now = datetime.now(timezone.utc)
        # The sales shard ticks while the rest shard's scheduler lock is held: separate locks.
        coordination = Coordination(settings.coordination_url)
        with hold_lock(scheduler_lock_name("rest"), settings.coordination_url):
            result = run_tick(settings, instance, coordination, now, "sensor:sales", None,
                              shard=scope_named("sales", settings.shards))
            blocked = run_tick(settings, instance, coordination, now, "sensor:rest", None,
                               shard=scope_named("rest", settings.shards))
        assert {d.table.namespace for d in result.admitted} == {("sales",)} and len(result.admitted) == 3
        assert blocked.skipped_tick.startswith("lock_held")
        later = run_tick(settings, instance, coordination, now, "sensor:rest", None,
                         shard=scope_named("rest", settings.shards))
        assert {d.table.namespace for d in later.admitted} == {("ops",)} and len(later.admitted) == 3
    assert len(tables) == 6
