"""The value report's sums (core/value/value_report.py, pure, clock passed in), its read of the coordination database
(coordination/value_rows.py, a real SQLite one) and its HTML page (reports/value_report_html.py): groupings,
benefit per compute hour with no compute, the window's edges, failures and conflicts, a hostile table name."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser

import pytest

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.value_rows import outcome_rows
from floe_dagster.core.runs.history import CONFLICT, LOCK_HELD, Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_figures import Benefit, Compute, TableShape
from floe_dagster.core.value.value_report import OutcomeRow, format_value_report_text, parse_since, value_report
from floe_dagster.reports.value_cli import report_json
from floe_dagster.reports.value_report_html import value_report_html

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
SINCE = NOW - timedelta(days=7)
RDF, EXPIRE, ORPHANS = "REWRITE_DATA_FILES", "EXPIRE_SNAPSHOTS", "ORPHAN_CLEANUP"


def row(table="demo.sales.orders", op=RDF, ago=timedelta(hours=1), ok=True, kind=None, **figures) -> OutcomeRow:
    return OutcomeRow(table, op, NOW - ago, ok, kind, **figures)


ROWS = [
    row(executor_cpu_s=1800.0, files_removed=90, bytes_rewritten=1000, ago=timedelta(days=1)),
    row(executor_cpu_s=1800.0, files_removed=30, bytes_rewritten=500),
    row("demo.sales.returns", executor_cpu_s=3600.0, files_removed=10),
    row("demo.sales.returns", EXPIRE, snapshots_expired=4, files_deleted=12),  # no Spark: no compute
    row("demo.lake.raw.clicks", ORPHANS, files_deleted=7, orphan_bytes_reclaimed=7 * 2**20),
    row("demo.lake.raw.clicks", RDF, ok=False, kind="error"),
    row("demo.lake.raw.clicks", RDF, ok=False, kind=CONFLICT),
    row("demo.lake.raw.clicks", RDF, ok=False, kind=LOCK_HELD),
]


def test_grouping_by_table_sums_each_tables_runs_busiest_compute_first():
    report = value_report(ROWS, "table", SINCE, NOW).to_json()
    groups = {group["table"]: group for group in report["groups"]}
    # an hour of compute each (ties by name), then none
    assert list(groups) == ["demo.sales.orders", "demo.sales.returns", "demo.lake.raw.clicks"]
    orders = groups["demo.sales.orders"]
    assert (orders["runs"], orders["compute_hours"], orders["files_removed"], orders["bytes_rewritten"]) == \
        (2, 1.0, 120, 1500)
    assert orders["files_removed_per_compute_hour"] == 120.0
    returns = groups["demo.sales.returns"]
    assert (returns["runs"], returns["snapshots_expired"], returns["files_deleted"]) == (2, 4, 12)
    clicks = groups["demo.lake.raw.clicks"]
    assert (clicks["runs"], clicks["succeeded"], clicks["failures"], clicks["conflicts"]) == (4, 1, 2, 1)
    assert clicks["orphan_files_reclaimed"] == 7 and returns["orphan_files_reclaimed"] == 0  # expiry's are not orphans
    assert clicks["orphan_bytes_reclaimed"] == report["total"]["orphan_bytes_reclaimed"] == 7 * 2**20
    text = format_value_report_text(report)
    assert "orphan bytes" in text.splitlines()[1] and "7.0 MiB" in text.splitlines()[-1], text
    total = report["total"]
    assert (total["runs"], total["compute_hours"], total["files_removed"], total["failures"], total["conflicts"]) == \
        (8, 2.0, 130, 2, 1)
    assert total["files_removed_per_compute_hour"] == 65.0


def test_grouping_by_namespace_and_by_operation():
    by_namespace = {g["namespace"]: g for g in value_report(ROWS, "namespace", SINCE, NOW).to_json()["groups"]}
    assert set(by_namespace) == {"demo.sales", "demo.lake.raw"}
    assert by_namespace["demo.sales"]["runs"] == 4 and by_namespace["demo.lake.raw"]["runs"] == 4
    by_operation = {g["operation"]: g for g in value_report(ROWS, "operation", SINCE, NOW).to_json()["groups"]}
    assert set(by_operation) == {RDF, EXPIRE, ORPHANS}
    assert by_operation[RDF]["runs"] == 6 and by_operation[RDF]["compute_hours"] == 2.0


def test_benefit_per_compute_hour_is_none_without_compute_not_infinite():
    report = value_report([row(EXPIRE, snapshots_expired=3, files_removed=5)], "operation", SINCE, NOW).to_json()
    assert report["total"]["compute_hours"] == 0.0
    assert report["total"]["files_removed_per_compute_hour"] is None
    assert report["total"]["bytes_reclaimed_per_compute_hour"] is None
    assert "-" in format_value_report_text(report).splitlines()[-1]


def test_the_window_keeps_its_edges_and_leaves_out_what_is_outside_it():
    rows = [row(ago=timedelta(days=7), files_removed=1), row(ago=timedelta(days=7, seconds=1), files_removed=10),
            row(ago=timedelta(0), files_removed=100), row(ago=-timedelta(seconds=1), files_removed=1000)]
    report = value_report(rows, "table", SINCE, NOW).to_json()
    assert report["total"]["files_removed"] == 101 and report["total"]["runs"] == 2
    days = [day["day"] for day in report["days"]]  # every day of the window, quiet ones too, for the charts
    assert days[0] == "2026-11-19" and days[-1] == "2026-11-26" and len(days) == 8
    assert sum(day["files_removed"] for day in report["days"]) == 101


def test_bad_since_and_by_name_the_option():
    with pytest.raises(ValueError, match=r"^--since: 'P1W'"):
        parse_since("P1W", NOW)
    with pytest.raises(ValueError, match=r"^--since: 'PT0S' is empty"):
        parse_since("PT0S", NOW)
    assert parse_since("P1DT12H", NOW) == NOW - timedelta(days=1, hours=12)
    with pytest.raises(ValueError, match=r"^--by: 'tables' is not one of namespace, table, operation"):
        value_report(ROWS, "tables", SINCE, NOW)

    def never_opened():
        raise AssertionError("the coordination database is opened before the options are checked")

    with pytest.raises(ValueError, match="--by"):
        report_json(never_opened, "P7D", "team", NOW)


def test_the_rows_are_read_from_the_coordination_database_failures_and_conflicts_included(tmp_path):
    coordination = Coordination(f"sqlite:///{tmp_path}/coordination.db")
    shape = TableShape(data_files=10, delete_files=0, live_bytes=1000, manifests=2, snapshots=5)
    after = TableShape(data_files=2, delete_files=0, live_bytes=900, manifests=1, snapshots=3)
    figures = (Compute("spark", wall_s=4.0, executor_cpu_s=7.2), Benefit(shape, after, files_deleted=2))
    results = [("run-1", True, None, figures), ("run-2", False, "error", (None, None)),
               ("run-3", False, CONFLICT, (None, None)), ("run-old", True, None, figures)]
    for run_id, ok, kind, (compute, benefit) in results:
        finished = NOW - (timedelta(days=30) if run_id == "run-old" else timedelta(hours=1))
        coordination.record_outcome(Outcome(
            run_id=run_id, table_name="demo.sales.orders", operation=Operation.REWRITE_DATA_FILES, trigger="interval",
            started_at=finished - timedelta(minutes=1), finished_at=finished, succeeded=ok, failure_kind=kind,
            bytes_rewritten=1000 if ok else 0, compute=compute, benefit=benefit))
    rows = outcome_rows(coordination, SINCE, NOW)
    assert [(r.succeeded, r.failure_kind) for r in rows] == [(True, None), (False, "error"), (False, CONFLICT)]
    assert (rows[0].executor_cpu_s, rows[0].files_removed, rows[0].snapshots_expired, rows[0].files_deleted) == \
        (7.2, 8, 2, 2)
    report = report_json(lambda: coordination, "P7D", "operation", NOW)
    [group] = report["groups"]
    assert (group["runs"], group["failures"], group["conflicts"], group["files_removed"]) == (3, 1, 1, 8)
    assert group["files_removed_per_compute_hour"] == pytest.approx(8 / (7.2 / 3600))
    json.dumps(report)  # --json prints it as is


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.row_names, self._in_row_head = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_row_head = tag == "th" and ("scope", "row") in attrs

    def handle_data(self, data):
        if self._in_row_head:
            self.row_names.append(data)
            self._in_row_head = False


def test_the_html_page_escapes_a_table_name_with_markup_in_it():
    hostile = 'demo.sales.<script>alert("x")</script><img src=x onerror=alert(1)>'
    report = value_report([row(hostile, executor_cpu_s=36.0, files_removed=3)], "table", SINCE, NOW).to_json()
    page = value_report_html(report)
    assert "<script>alert" not in page and "<img src=x" not in page
    parser = _Page()
    parser.feed(page)
    assert hostile in parser.row_names  # shown as text, whole
    assert "img" not in parser.tags
    assert 'id="cost-per-day"' in page and 'id="benefit-per-compute-hour"' in page
    assert "https://cdn" not in page.split("<body>")[0]  # plotly.js inlined: the page opens offline
