"""Table and namespace names with quotes, back quotes, semicolons, spaces, backslashes and unicode,
created in the SQL catalog with PyIceberg and maintained through the real engine: the operation hits
exactly that table and no other (decoys named like what a broken quoting would reach stay as they
were); names that cannot be assets are refused with a clear message before any run."""

from __future__ import annotations

import re

import pytest
from dagster import DagsterInstance

from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.reliability._support import checksum, create_fragmented_table

pytestmark = pytest.mark.spark

POLICIES = """
- name: everything
  tablePattern: "*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
"""
HOSTILE = [
    TableName("demo", ("o'k; ns",), "t`b; DROP TABLE decoy --"),
    TableName("demo", ("sp ace",), 'ü "表" 🙂 \\\' OR 1=1'),
    # A namespace named like the catalog: Iceberg would read an unqualified 'demo.orders' as table
    # 'orders' in catalog 'demo', so the procedures get the catalog-qualified name.
    TableName("demo", ("demo",), "orders"),
]
# What a broken quoting of the hostile names would reach instead.
DECOYS = [
    TableName("demo", ("o'k; ns",), "t"),
    TableName("demo", ("o'k; ns",), "decoy"),
    TableName("demo", ("sp ace",), "ü"),
    TableName("demo", ("sales",), "orders"),
]
REFUSED = {
    TableName("demo", ("sales",), "ta/ble"): "has '/' in its name",
    TableName("demo", ("sales",), "new\nline"): "has a control character in its name",
}


@pytest.fixture
def lake(tmp_path, dagster_home):
    settings = load_settings(write_settings(tmp_path, POLICIES), environ={})
    for table in [*HOSTILE, *DECOYS, *REFUSED]:
        create_fragmented_table(settings, table, files=6)
    with DagsterInstance.get() as instance:
        yield settings, instance


def metadata_location(settings, table: TableName) -> str:
    return load_table(open_catalog(settings.catalog), table).metadata_location


def test_hostile_names_are_quoted_and_hit_only_their_table(lake):
    settings, instance = lake
    untouched = {t: metadata_location(settings, t) for t in DECOYS}
    for table in HOSTILE:
        content = checksum(load_table(open_catalog(settings.catalog), table).scan().to_arrow())
        summary = trigger_table(settings, table.qualified, ["REWRITE_DATA_FILES"], reason="hostile names",
                                actor="test", trigger_id=f"names-{HOSTILE.index(table)}", instance=instance)
        assert summary.succeeded, summary.lines()
        assert summary.outcomes[0].metadata["rewritten_data_files_count"] == 6
        after = load_table(open_catalog(settings.catalog), table)
        assert table_counts(after)["data_files"] == 1 and checksum(after.scan().to_arrow()) == content
        run = instance.get_run_by_id(summary.outcomes[0].run_id)
        assert run.tags["floe/table"] == table.qualified
    assert {t: metadata_location(settings, t) for t in DECOYS} == untouched  # no other table changed


def test_names_that_cannot_be_assets_are_refused_before_any_run(lake):
    settings, instance = lake
    for table, message in REFUSED.items():
        before = metadata_location(settings, table)
        with pytest.raises(ValueError, match=re.escape(f"table {table.qualified!r} {message}") + ".*cannot maintain it"):
            trigger_table(settings, table.qualified, ["REWRITE_DATA_FILES"], reason="refused", actor="test",
                          trigger_id="refused", instance=instance)
        assert metadata_location(settings, table) == before
    assert not instance.get_runs()
