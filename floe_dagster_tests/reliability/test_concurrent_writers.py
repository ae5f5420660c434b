"""Compaction while a PyIceberg writer appends batches: afterwards the table holds every row that was
there plus every appended row, each exactly once; on the PostgreSQL catalog and on SQLite (where the
engine serializes Spark's units of work and frees the JDBC catalog's read lock)."""

from __future__ import annotations

import os
import subprocess
import time

import pyarrow.compute as pc
import pytest
from pyiceberg.exceptions import CommitFailedException

from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import _write_files, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_production import BIN, POLICIES, pg_lake  # noqa: F401 (fixture)
from floe_dagster_tests.reliability._support import checksum, create_fragmented_table

pytestmark = pytest.mark.spark

FILES = 150  # enough small files that the rewrite takes a few seconds
BATCH = 7
FIRST_APPENDED_ID = 1_000_000


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def lake(request, tmp_path, dagster_home):
    """A fragmented table ``sales.orders`` on the embedded SQLite catalog or on PostgreSQL."""
    if request.param == "sqlite":
        config = write_settings(tmp_path, POLICIES)
        settings = load_settings(config, environ={})
        table = TableName.parse("sales.orders", settings.catalog.name)
        create_fragmented_table(settings, table, FILES)
    else:
        settings, config = request.getfixturevalue("pg_lake")
        table = TableName.parse("sales.orders", settings.catalog.name)
        existing = load_table(open_catalog(settings.catalog), table)
        existing.add_files(_write_files(existing, [rows(10_000 + i * 10, 10) for i in range(FILES)]))
    # A writer committing every 0.3 s can move the metadata under the rewrite's commit more often than Iceberg's
    # default 4 retries cover on a slow machine (the run then ends CONFLICT, the table intact, seen on 1.11 and
    # 1.12 alike); a table with a steady writer is given more retries, as its owner would.
    with load_table(open_catalog(settings.catalog), table).transaction() as change:
        change.set_properties({"commit.retry.num-retries": "50"})
    return settings, config, table


def append_with_retry(settings, table: TableName, batch) -> None:
    """A user's writer: reload the table and try again when another commit got in first."""
    for _ in range(50):
        try:
            load_table(open_catalog(settings.catalog), table).append(batch)
            return
        except CommitFailedException:
            continue
    raise AssertionError("the writer lost 50 commit races in a row")


def test_appends_during_compaction_are_neither_lost_nor_duplicated(lake):
    settings, config, table = lake
    before = load_table(open_catalog(settings.catalog), table).scan().to_arrow()
    # The run in its own process, as every run has (its Spark has the catalog's JDBC driver).
    started_ms = int(time.time() * 1000)
    compaction = subprocess.Popen(
        [str(BIN / "floe-dagster"), "trigger", table.qualified, "--operation", "REWRITE_DATA_FILES"],
        env={**os.environ, "FLOE_CONFIG": str(config)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    appended, next_id = [], FIRST_APPENDED_ID
    while compaction.poll() is None or len(appended) < 3:
        batch = rows(next_id, BATCH)
        append_with_retry(settings, table, batch)
        appended.append(batch)
        next_id += BATCH
        time.sleep(0.3)  # a steady writer, not a tight loop
    output = compaction.communicate(timeout=300)[0]
    assert compaction.returncode == 0 and "REWRITE_DATA_FILES: SUCCEEDED" in output, output[-3000:]

    after_table = load_table(open_catalog(settings.catalog), table)
    after = after_table.scan().to_arrow()
    ids = after["id"].to_pylist()
    expected_ids = set(before["id"].to_pylist()) | set(range(FIRST_APPENDED_ID, next_id))
    assert len(ids) == len(set(ids)) == before.num_rows + BATCH * len(appended)  # nothing duplicated
    assert set(ids) == expected_ids  # nothing lost
    # Every row that was there before is unchanged.
    old = after.filter(pc.less(after["id"], FIRST_APPENDED_ID))
    assert checksum(old) == checksum(before)

    # The compaction really ran while the writer committed: appends landed between the run's start
    # and the rewrite's own commit, which Iceberg rebased onto them.
    snapshots = after_table.metadata.snapshots
    replace = [s for s in snapshots if s.summary.operation.value == "replace"]
    assert len(replace) == 1
    during = [s for s in snapshots if s.summary.operation.value == "append"
              and started_ms <= s.timestamp_ms < replace[0].timestamp_ms]
    assert during, "no append committed while the compaction ran"
    assert table_counts(after_table)["data_files"] < FILES  # the small files were compacted
