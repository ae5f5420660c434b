"""The learned ranking's factor and the adaptive orphan cadence through the real stack (issue 29, 4
and 5): a real table of small files written by PyIceberg, a planted orphan ten days old, a policy in
the PolicyLoader format with ``orphan-cleanup: {adaptive: …}``; a real compaction and a real orphan
cleanup run in process (Spark, the Dagster instance, the coordination database); then
``floe-dagster explain`` (the CLI, in process) shows each operation's measured-efficiency factor from
the recorded run, and the orphan cleanup's expected next run and why; ``plan`` holds the cleanup until
then and admits it after."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance

from floe_dagster.cli import main
from floe_dagster.coordination.database import Coordination
from floe_dagster.core.operations import Operation
from floe_dagster.core.value.run_history import compute_seconds, learning_run
from floe_dagster.demo import _create, local_path, rows
from floe_dagster.iceberg.catalog import open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.launching.manual import trigger_table
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark
TABLE = "demo.sales.events"
POLICIES = """
policies:
  - name: adaptive
    pattern: "demo.sales.*"
    rewrite-data-files: {}
    rewrite-data-files-schedule: {interval-days: 1}
    orphan-cleanup: {retention-period-days: 3, adaptive: {target-bytes: 1GiB, min: P2D, max: P30D}}
    orphan-cleanup-schedule: {interval-hours: 1}
"""


def explain(config, capsys, at: datetime | None = None) -> dict:
    args = ["--config", str(config), "explain", TABLE, "--json"] + (["--at", at.isoformat()] if at else [])
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_shows_the_learned_factor_and_the_next_adaptive_orphan_cleanup(tmp_path, dagster_home, capsys,
                                                                               monkeypatch):
    config = write_settings(tmp_path, POLICIES)
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace("sales")
    table = _create(catalog, "sales.events")
    for start in range(0, 40, 5):  # 8 small files
        table.append(rows(start, 5))
    orphan = local_path(table.location()) / "data" / "planted-orphan.parquet"
    pq.write_table(rows(900, 50), orphan)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(orphan, (ten_days_ago, ten_days_ago))
    orphan_bytes = orphan.stat().st_size
    refresh_table_cache(settings)

    with DagsterInstance.get() as instance:
        summary = trigger_table(settings, TABLE, ["REWRITE_DATA_FILES", "ORPHAN_CLEANUP"], reason="learn",
                                actor="test", trigger_id="learned-e2e", instance=instance)
        assert [o.status for o in summary.outcomes] == ["SUCCEEDED", "SUCCEEDED"], summary.lines()
    assert not orphan.exists()  # every cleanup quarantines it by default

    # Each outcome row keeps the run's figures (core/runs/run_figures.py, the one declaration): the executor CPU
    # seconds Spark measured as compute, the files the compaction removed, the orphan bytes the quarantine
    # measured; the ranking reads the rewrite as (executor CPU seconds, benefit).
    runs = Coordination(settings.coordination_url).recorded_runs()
    (rewrite,), (cleanup,) = runs[(TABLE, Operation.REWRITE_DATA_FILES)], runs[(TABLE, Operation.ORPHAN_CLEANUP)]
    assert rewrite.compute.source == "spark" and rewrite.compute.executor_cpu_s > 0
    assert compute_seconds(rewrite.compute) == (rewrite.compute.executor_cpu_s, "executor_cpu")
    counted = learning_run(rewrite)
    assert (counted.compute_s, counted.data_files_removed, counted.scan_files_before) == \
        (rewrite.compute.executor_cpu_s, 7, 8)
    assert (cleanup.benefit.orphan_bytes, cleanup.benefit.files_deleted) == (orphan_bytes, 1)
    assert cleanup.benefit.orphan_bytes_estimated is False
    # Moved into the quarantine: removed from the table, the size the quarantine's move read.
    assert (cleanup.benefit.orphan_bytes_reclaimed, cleanup.benefit.orphan_bytes_reclaimed_estimated) == \
        (orphan_bytes, False)

    report = explain(config, capsys)
    efficiency = report["operationStatuses"]["REWRITE_DATA_FILES"]["efficiency"]
    assert efficiency["runs"] == pytest.approx(1.0, abs=0.01) and efficiency["computeSource"] == "executor_cpu"
    assert efficiency["ranking"] == "static" and efficiency["table"] > 0
    # Compacted into one file, its byte estimate promises nothing more: the prior (5 of 6 parts with one run)
    # pulls the factor toward 0; the only table, its own efficiency is the fleet's.
    assert efficiency["priorSource"] == "estimate" and efficiency["prior"] == 0
    assert efficiency["factor"] == pytest.approx(max(0.05, 1 / 6), abs=0.01)
    assert efficiency["computeEstimate"]["per"] in ("GiB", "run")

    # One cleanup and no earlier start: the next one after the minimum, measured from its end.
    status = report["operationStatuses"]["ORPHAN_CLEANUP"]
    cadence = status["cadence"]
    next_run = cleanup.finished_at + timedelta(days=2)
    assert cadence["nextRunAt"] == next_run.isoformat() and cadence["clamped"] == "min"
    assert f"one cleanup recorded ({orphan_bytes / 1024:.3g} KiB found)" in cadence["why"] and "the minimum P2D" in cadence["why"]
    assert status["shouldTrigger"] is False and status["reasons"][0].startswith("not_due: adaptive cadence")
    assert status["nextEligibleTime"] == next_run.isoformat()

    assert main(["--config", str(config), "explain", TABLE]) == 0
    text = capsys.readouterr().out
    assert f"adaptive cadence: expected next run at {next_run.isoformat(timespec='seconds')}" in text
    assert "efficiency factor ×0.167" in text and "compute from executor_cpu" in text

    # At the expected time every gate lets it run (the schedule's own PT1H interval passed long before); the
    # compaction, due again too, goes first: one operation per table at a time.
    assert main(["--config", str(config), "plan", "--json", "--at", next_run.isoformat()]) == 0
    planned_at_next_run = json.loads(capsys.readouterr().out)["decisions"]
    planned = {(d["table"], d["operation"]): d for d in planned_at_next_run}
    reasons = planned[(TABLE, "ORPHAN_CLEANUP")]["reasons"]
    assert reasons[0].startswith("in_flight: REWRITE_DATA_FILES of this table was admitted this tick"), reasons
    assert reasons[1].startswith("interval: adaptive cadence, expected next run at"), reasons
    before = next_run - timedelta(minutes=1)
    assert main(["--config", str(config), "plan", "--json", "--at", before.isoformat()]) == 0
    planned = {(d["table"], d["operation"]): d for d in json.loads(capsys.readouterr().out)["decisions"]}
    assert planned[(TABLE, "ORPHAN_CLEANUP")]["reasons"][0].startswith("not_due: adaptive cadence")

    # Shadow mode (floe.yaml's ranking.shadow, here from the environment): the plan's notes compare both
    # orders; what runs is the same; explain says the plan ranks statically with the learned order in shadow.
    monkeypatch.setenv("FLOE_RANKING__SHADOW", "true")
    assert main(["--config", str(config), "plan", "--json", "--at", next_run.isoformat()]) == 0
    shadowed = json.loads(capsys.readouterr().out)
    assert any(note.startswith("ranking shadow: static admits 1, learned 1") for note in shadowed["notes"]), shadowed
    assert [d for d in shadowed["decisions"] if d["decision"] == "run"] == [
        d for d in planned_at_next_run if d["decision"] == "run"]
    assert explain(config, capsys)["operationStatuses"]["REWRITE_DATA_FILES"]["efficiency"]["ranking"] == \
        "static (learned in shadow)"
