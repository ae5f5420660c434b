"""``floe-dagster report`` through the real stack (issue 29, deliverable 6): one Dagster run compacts a small
table on real Spark with the Iceberg runtime and records its outcome with its figures; the installed console
script then reports that run (``--json``, ``--by namespace``, the text table and ``--html``) with the figures
the run's materialization carries, read back from the coordination database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance

from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.operations import Operation
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.core.basics.tables import TableName
from floe_dagster.demo import EVENT_SCHEMA, local_path, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._seeded import seeded_table

pytestmark = pytest.mark.spark

CLI = str(Path(sys.executable).parent / "floe-dagster")
POLICY = """
- name: valued
  tablePattern: "demo.valued.*"
  rewriteDataFiles: {strategy: BINPACK, minInputFiles: 2}
  rewriteDataFilesSchedule: {interval: PT1H}
"""
TABLE = TableName("demo", ("valued",), "events")
FILES = 4


@pytest.fixture
def maintained(tmp_path, dagster_home, monkeypatch):
    """The table after one real maintenance run: (config, the run's materialization metadata, its run id)."""
    config = write_settings(tmp_path, POLICY)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("valued")
    seeded_table(catalog, "valued.events", FILES, 20)
    refresh_table_cache(settings)
    with DagsterInstance.get() as instance:
        result = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key="REWRITE_DATA_FILES", asset_selection=[asset_key_for(TABLE)])
        assert result.success
        metadata = instance.get_latest_materialization_event(asset_key_for(TABLE)).asset_materialization.metadata
    return config, {key: getattr(value, "value", value) for key, value in metadata.items()}, result.run_id


def floe(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLOE_CONFIG": str(config)}
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=600)


def rendered(page: Path) -> str:
    """The page's DOM after its scripts ran, in headless Chromium (Debian's ``chromium``)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "headless Chromium is needed to render the report's page: apt-get install chromium"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


class _Cells(HTMLParser):
    """The page's table: each row's name and its cells by data-key."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self._row: str | None = None
        self._key: str | None = None
        self._heading = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._heading = tag == "th" and attrs.get("scope") == "row"
        self._key = attrs.get("data-key") if tag == "td" else None

    def handle_data(self, data):
        if self._heading:
            self._row, self._heading = data, False
            self.rows[data] = {}
        elif self._key and self._row:
            self.rows[self._row][self._key] = data
            self._key = None


def test_the_report_shows_a_real_runs_compute_and_benefit(maintained, tmp_path):
    config, metadata, run_id = maintained
    cpu_s = metadata["floe/compute/executor_cpu_s"]
    assert cpu_s > 0 and metadata["floe/benefit/files_removed"] == FILES - 1

    done = floe(config, "report", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [group] = report["groups"]
    assert group["table"] == TABLE.qualified
    assert (group["runs"], group["succeeded"], group["failures"], group["conflicts"]) == (1, 1, 0, 0)
    assert group["compute_hours"] == pytest.approx(cpu_s / 3600)
    assert group["files_removed"] == FILES - 1
    assert group["bytes_rewritten"] == metadata["rewritten_bytes_count"] > 0
    assert group["files_removed_per_compute_hour"] == pytest.approx((FILES - 1) / (cpu_s / 3600))
    assert report["total"]["runs"] == 1 and sum(day["files_removed"] for day in report["days"]) == FILES - 1

    by_namespace = json.loads(floe(config, "report", "--since", "PT1H", "--by", "namespace", "--json").stdout)
    assert [g["namespace"] for g in by_namespace["groups"]] == ["demo.valued"]

    text = floe(config, "report").stdout
    assert text.splitlines()[2].startswith(TABLE.qualified) and text.splitlines()[3].startswith("total")

    page = tmp_path / "report.html"
    written = floe(config, "report", "--html", str(page))
    assert written.returncode == 0 and f"wrote {page}" in written.stdout, written.stderr
    assert "Plotly.newPlot" in page.read_text() and "<script src=" not in page.read_text()  # plotly.js inlined

    # In a browser: plotly drew both charts (its SVG in each), and the table shows the database's numbers.
    dom = rendered(page)
    before_benefit, _, benefit = dom.partition('id="benefit-per-compute-hour"')
    cost = before_benefit.partition('id="cost-per-day"')[2]
    assert 'class="trace bars"' in cost and 'class="trace scatter' in cost, "the cost chart did not render"
    assert 'class="trace scatter' in benefit.partition("<table")[0], "the benefit chart did not render"
    [recorded] = CoordinationResource.from_settings(load_settings(config, environ={})).coordination.run_figures(
        TABLE.qualified, Operation.REWRITE_DATA_FILES)
    assert recorded.run_id == run_id
    cells = _Cells()
    cells.feed(dom)
    assert cells.rows[TABLE.qualified]["files_removed"] == str(recorded.benefit.files_removed) == str(FILES - 1)
    assert cells.rows[TABLE.qualified]["compute_hours"] == f"{recorded.compute.executor_cpu_s / 3600:.4f}"
    assert cells.rows[TABLE.qualified]["files_removed_per_compute_hour"] == \
        f"{recorded.benefit.files_removed / (recorded.compute.executor_cpu_s / 3600):.1f}"
    assert cells.rows["total"]["runs"] == "1"


def test_bad_options_are_refused_naming_the_option(tmp_path, dagster_home):
    config = write_settings(tmp_path, POLICY)
    since = floe(config, "report", "--since", "7 days")
    assert since.returncode == 2 and "--since: '7 days' is not an ISO-8601 duration" in since.stderr
    by = floe(config, "report", "--by", "team")
    assert by.returncode == 2 and "--by: 'team' is not one of namespace, table, operation" in by.stderr
