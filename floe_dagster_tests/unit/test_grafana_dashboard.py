"""The Grafana dashboard in deploy/grafana/floe-dagster.json reads only what the server serves: every PromQL
expression in it is parsed, each metric name taken out of it, and each must be a sample name of a real
``GET /metrics`` (the FastAPI application on uvicorn with a real Dagster instance and coordination database,
test_api_http's ``api``), scraped after an outcome row with figures was recorded. A query naming a metric the
server does not serve fails the test (the extractor is checked on one)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from floe_dagster.api.metric_counters import OutcomeTally
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs.history import Outcome
from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_figures import Benefit, Compute, TableShape
from floe_dagster_tests.unit import test_api_http

api = test_api_http.api  # a fixture of this module too: its own lakehouse, server and instance
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "floe-dagster.json"
# PromQL's words that are not metric names: aggregation modifiers, set and comparison operators, offset.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def expressions(node: Any) -> Iterator[str]:
    """Every ``expr`` of every target of every panel (rows' nested panels too)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects. Raises ValueError when it does not parse (brackets)."""
    depth = 0
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
    if depth != 0 or expr.count("{") != expr.count("}") or expr.count("[") != expr.count("]"):
        raise ValueError(f"unbalanced brackets in {expr!r}")
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors ([1d], [$__range])
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana's variables
    names = set()
    for match in _NAME.finditer(text):
        if text[match.end():].lstrip().startswith("(") or match.group() in KEYWORDS:
            continue  # a function, or a keyword
        if match.start() and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # a number's exponent or unit
        names.add(match.group())
    return names


def served_names(url: str) -> set[str]:
    response = requests.get(url + "/metrics", timeout=60)
    assert response.status_code == 200, response.text
    return {sample.name for family in text_string_to_metric_families(response.text) for sample in family.samples}


def test_the_extractor_finds_every_metric_and_skips_functions_labels_and_ranges():
    assert metric_names('sum by (operation, kind) (increase(floe_a_total{kind="x", op=~"b.*"}[$__range])) / 3600 '
                        '+ on (operation) group_left (kind) floe_b_seconds_sum offset 1d') == \
        {"floe_a_total", "floe_b_seconds_sum"}
    assert metric_names("rate(floe_no_such_metric_total[5m]) > bool 1e3") == {"floe_no_such_metric_total"}
    with pytest.raises(ValueError, match="unbalanced"):
        metric_names("sum(rate(floe_a_total[5m])")


def test_every_dashboard_query_names_a_metric_the_server_serves(api, monkeypatch):
    monkeypatch.setattr(OutcomeTally, "LAG", timedelta(0))  # count the outcome at the next scrape
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = list(expressions(dashboard["panels"]))
    assert len(exprs) >= 10
    assert all(panel["targets"] for panel in dashboard["panels"]), "a panel without a query"

    served_names(api["url"])  # the first scrape starts the counters
    coordination = Coordination(api["settings"].coordination_url)
    finished = datetime.now(timezone.utc) - timedelta(seconds=1)
    shape = TableShape(data_files=6, delete_files=0, live_bytes=6000, manifests=2, snapshots=4)
    coordination.record_outcome(Outcome(
        "run-dashboard", "demo.sales.orders", Operation.REWRITE_DATA_FILES, finished - timedelta(seconds=5), finished,
        True, trigger="interval", bytes_rewritten=6000, compute=Compute("spark", wall_s=4.0, executor_cpu_s=3.0),
        benefit=Benefit(shape, TableShape(1, 0, 5800, 1, 3))))
    served = served_names(api["url"])

    unknown = {(expr, name) for expr in exprs for name in metric_names(expr) if name not in served}
    assert not unknown, f"the dashboard queries metrics /metrics does not serve: {sorted(unknown)}"
    used = set().union(*(metric_names(expr) for expr in exprs))
    assert {"floe_operation_executor_cpu_seconds_total", "floe_operation_files_removed_total",
            "floe_operation_snapshots_expired_total", "floe_operation_failures_total",
            "floe_operation_conflicts_total", "floe_bytes_rewritten_total"} <= used
    # A name the server does not serve is caught the same way.
    assert "floe_operation_files_removed" not in served  # a counter is served as <name>_total
