"""``floe-dagster report --html FILE``: the value report (core/value/value_report.py) as one self-contained page,
its charts over time drawn by plotly (plotly.js inlined, so the page opens without a network) and its table
of groups written here, every name escaped: a table's name is whatever its catalog accepts, and a name with
``<script>`` in it is text on the page, never markup."""

from __future__ import annotations

from html import escape
from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from floe_dagster.core.value.value_report import COLUMNS, cell, window_text


def _charts(days: list[Mapping[str, object]]) -> str:
    """Per day: compute hours and files removed (one chart, two axes), and files removed per compute hour."""
    x = [day["day"] for day in days]
    cost = make_subplots(specs=[[{"secondary_y": True}]])
    cost.add_trace(go.Bar(x=x, y=[day["compute_hours"] for day in days], name="executor CPU hours"),
                   secondary_y=False)
    cost.add_trace(go.Scatter(x=x, y=[day["files_removed"] for day in days], name="files removed",
                              mode="lines+markers"), secondary_y=True)
    cost.update_layout(title="What maintenance cost and removed, per day", xaxis_title="day (UTC)")
    cost.update_yaxes(title_text="executor CPU hours", secondary_y=False)
    cost.update_yaxes(title_text="files removed", secondary_y=True)
    value = go.Figure(go.Scatter(x=x, y=[day["files_removed_per_compute_hour"] for day in days],
                                 name="files removed per CPU hour", mode="lines+markers", connectgaps=False))
    value.update_layout(title="Benefit per compute hour (files removed per executor CPU hour), per day",
                        xaxis_title="day (UTC)", yaxis_title="files removed per CPU hour")
    return (cost.to_html(full_html=False, include_plotlyjs=True, div_id="cost-per-day")
            + value.to_html(full_html=False, include_plotlyjs=False, div_id="benefit-per-compute-hour"))


def _table(report: Mapping[str, Any]) -> str:
    by = report["by"]
    head = "".join(f"<th>{escape(heading)}</th>" for heading in (by, *(h for h, _, _ in COLUMNS)))
    lines = []
    for name, figures, kind in [*((group[by], group, "group") for group in report["groups"]),
                                ("total", report["total"], "total")]:
        cells = "".join(f'<td data-key="{escape(key)}">{escape(cell(figures[key], form))}</td>'
                        for _, key, form in COLUMNS)
        lines.append(f'<tr class="{kind}"><th scope="row">{escape(str(name))}</th>{cells}</tr>')
    return f'<table id="groups"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'


def value_report_html(report: Mapping[str, Any]) -> str:
    """The page for the report's JSON (:meth:`core.value.value_report.ValueReport.to_json`)."""
    title = f"floe-dagster: maintenance {window_text(report)}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th[scope=row],thead th:first-child{{text-align:left}}
tr.total{{font-weight:bold}}</style></head>
<body><h1>{escape(title)}</h1>
<p>Compute is the executor CPU of the tables' own Spark jobs; benefit per compute hour is files removed per
executor CPU hour (- where no compute was measured). Orphans: files orphan cleanup deleted; orphan bytes: their
bytes (moved into the quarantine or deleted), estimated from the mean file size after a plain cleanup.</p>
{_charts(report["days"])}
<h2>By {escape(report["by"])}</h2>
{_table(report)}
</body></html>
"""
