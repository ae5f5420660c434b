"""Orphan bytes reclaimed through the real stack (issue 29, deliverable 6's "orphan bytes reclaimed"): a small
table with one planted orphan file of a known size, ten days old; one Dagster run deletes it on real Spark
with the Iceberg runtime (rounds under a cap, no quarantine: the run's own listing reads each file's size,
no further scan). Its size is the run's figure: in the materialization (``floe/benefit/orphan_bytes_reclaimed``),
the outcome row, ``floe-dagster report`` (JSON, text, HTML) and ``/metrics`` over real HTTP."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from datetime import timedelta

import pyarrow.parquet as pq
import pytest
import requests
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore, hash_key
from floe_dagster.api.metric_counters import OutcomeTally
from floe_dagster.cli import main
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.operations import Operation
from floe_dagster.core.facts.table_facts import format_bytes
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._seeded import seeded_table, viewer_config
from floe_dagster_tests.integration.test_value_report_e2e import _Cells
from floe_dagster_tests.unit.test_api_http import VIEWER_KEY, start_server

pytestmark = pytest.mark.spark

POLICY = """
- name: orphans
  tablePattern: "demo.orphans.*"
  orphanCleanup: {retentionPeriodInDays: 3, maxFilesToDelete: 100, quarantine: {enabled: false}}
  orphanCleanupSchedule: {interval: PT1H}
"""
TABLE = TableName("demo", ("orphans",), "events")


def served_sample(url: str) -> float:
    text = requests.get(f"{url}/metrics", headers={"X-API-Key": VIEWER_KEY}, timeout=60).text
    found = re.search(r'^floe_operation_orphan_bytes_reclaimed_total\{operation="orphan_cleanup"\} (\S+)$', text, re.M)
    assert found, "floe_operation_orphan_bytes_reclaimed_total is not served"
    return float(found.group(1))


def test_an_orphan_cleanup_records_the_bytes_it_deleted_and_the_report_shows_them(tmp_path, dagster_home, capsys,
                                                                                   monkeypatch):
    config, settings = viewer_config(tmp_path, POLICY, monkeypatch)
    monkeypatch.setattr(OutcomeTally, "LAG", timedelta(0))  # count an outcome at the next scrape
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("orphans")
    _, folder = seeded_table(catalog, "orphans.events", 1, 20)
    [seed] = folder.glob("seed-*.parquet")
    orphan = folder / "planted-orphan.parquet"
    pq.write_table(rows(900, 300), orphan)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(orphan, (ten_days_ago, ten_days_ago))
    size = orphan.stat().st_size
    assert size != seed.stat().st_size  # an estimate from the table's mean file size would differ
    refresh_table_cache(settings)

    with DagsterInstance.get() as instance:
        server, thread, url = start_server(create_app(settings, KeyStore(settings.api), instance))
        try:
            assert served_sample(url) == 0.0  # the counters start at 0
            result = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
                instance=instance, partition_key="ORPHAN_CLEANUP", asset_selection=[asset_key_for(TABLE)])
            assert result.success
            assert not orphan.exists() and seed.exists()
            metadata = {key: getattr(value, "value", value) for key, value in instance.get_latest_materialization_event(
                asset_key_for(TABLE)).asset_materialization.metadata.items()}
            assert served_sample(url) == size
        finally:
            server.should_exit = True
            thread.join(20)
    assert metadata["quarantine"] is False and metadata["orphan_files_count"] == 1
    assert metadata["floe/benefit/orphan_bytes_reclaimed"] == size
    assert metadata["floe/benefit/orphan_bytes_reclaimed_estimated"] is False

    [run] = Coordination(settings.coordination_url).recorded_runs()[(TABLE.qualified, Operation.ORPHAN_CLEANUP)]
    assert (run.benefit.orphan_bytes_reclaimed, run.benefit.orphan_bytes_reclaimed_estimated) == (size, False)

    assert main(["--config", str(config), "report", "--json", "--by", "operation"]) == 0
    report = json.loads(capsys.readouterr().out)
    [group] = report["groups"]
    assert (group["operation"], group["orphan_files_reclaimed"], group["orphan_bytes_reclaimed"]) == \
        ("ORPHAN_CLEANUP", 1, size)
    assert report["total"]["orphan_bytes_reclaimed"] == size
    assert main(["--config", str(config), "report"]) == 0
    header, line = capsys.readouterr().out.splitlines()[1:3]
    assert "orphan bytes" in header and format_bytes(size) in line
    page = tmp_path / "report.html"
    assert main(["--config", str(config), "report", "--html", str(page)]) == 0
    cells = _Cells()
    cells.feed(page.read_text())
    assert cells.rows[TABLE.qualified]["orphan_bytes_reclaimed"] == format_bytes(size)
