"""The installed ``floe-dagster`` console script on a real lakehouse and a real Dagster instance."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from floe_dagster.core.runs import run_tags as T
from floe_dagster.demo import DemoSizes, build_demo_lakehouse
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings

pytestmark = pytest.mark.spark

CLI = str(Path(sys.executable).parent / "floe-dagster")
POLICIES = """
- name: sales
  tablePattern: "demo.sales.*"
  tags: {owner: data-eng}
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: P1D}
  expireSnapshots: {retainLast: 1, maxSnapshotAge: PT0S}
  expireSnapshotsSchedule: {interval: P1D}
  triggerConditions: {smallFileCountAbove: 5}
- name: ops
  tablePattern: "demo.ops.*"
  rewriteManifests: {}
  rewriteManifestsSchedule: {interval: P1D, windowStart: "00:00", windowEnd: "00:00"}
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    config = write_settings(root, POLICIES)
    settings = load_settings(config, environ={})
    build_demo_lakehouse(settings, DemoSizes(small_files=8, snapshots=4, position_delete_commits=1, old_orphans=1,
                                            young_orphans=0, skewed_files=2, other_partition_files=1))
    refresh_table_cache(settings)
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(Path(__file__).resolve().parents[2] / "dagster.yaml", home / "dagster.yaml")
    return config, home


def floe(lake, *args, check=True, **extra_env):
    config, home = lake
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLOE_CONFIG": str(config), **extra_env}
    result = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"floe-dagster {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def test_plan_json_is_the_contract(lake):
    payload = json.loads(floe(lake, "plan", "--json").stdout)
    assert set(payload) >= {"at", "decisions"}
    decisions = payload["decisions"]
    keys = {"table", "operation", "policy", "decision", "reasons", "trigger", "debt_score", "estimated_bytes",
            "next_eligible", "rank"}
    assert all(set(d) >= keys for d in decisions)
    by_item = {(d["table"], d["operation"]): d for d in decisions}
    orders = by_item[("demo.sales.orders", "REWRITE_DATA_FILES")]
    assert orders["decision"] == "run" and orders["trigger"] == "interval" and orders["rank"] >= 1
    assert orders["estimated_bytes"] > 0
    # sales.customers has one data file: the small-file condition is not met.
    customers = by_item[("demo.sales.customers", "REWRITE_DATA_FILES")]
    assert customers["decision"] == "skip" and customers["reasons"][0].startswith("conditions_unmet")
    assert customers["trigger"] is None and customers["rank"] is None
    ranks = sorted(d["rank"] for d in decisions if d["decision"] == "run")
    assert ranks == list(range(1, len(ranks) + 1))


def test_explain_json_and_unknown_table(lake):
    report = json.loads(floe(lake, "explain", "sales.orders", "--json").stdout)
    assert report["policyName"] == "sales" and report["conditionBasedTriggeringEnabled"] is True
    status = report["operationStatuses"]["REWRITE_DATA_FILES"]
    assert status["shouldTrigger"] is True
    assert any(c["name"] == "smallFileCountAbove" for c in status["metConditionDetails"])
    assert any(text.startswith("Small file count: ") for text in status["metConditions"])
    assert status["debtScore"] >= 0 and "failure_rate" in status["debtBreakdown"]
    missing = floe(lake, "explain", "demo.sales.nope", check=False)
    assert missing.returncode == 2 and "demo.sales.nope" in missing.stderr and "does not exist" in missing.stderr


def test_trigger_runs_in_process_and_records_the_run(lake):
    result = floe(lake, "trigger", "demo.sales.orders", "--reason", "compact before the report")
    assert "REWRITE_DATA_FILES: SUCCEEDED" in result.stdout and "EXPIRE_SNAPSHOTS: SUCCEEDED" in result.stdout
    config, home = lake
    with DagsterInstance.from_config(str(home)) as instance:
        runs = [r for r in instance.get_runs() if r.tags.get("floe/trigger") == "manual"]
    assert {r.tags["floe/operation"] for r in runs} == {"REWRITE_DATA_FILES", "EXPIRE_SNAPSHOTS"}
    assert len({r.tags[T.TRIGGER_ID] for r in runs}) == 1
    assert all(r.tags["floe/reason"] == "compact before the report" and r.tags[T.ACTOR] for r in runs)
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    failing = floe(lake, "trigger", "demo.ops.metrics", "--operation", "EXPIRE_SNAPSHOTS", check=False)
    assert failing.returncode == 2 and "does not configure EXPIRE_SNAPSHOTS" in failing.stderr


STACK_FRAME = re.compile(r'File "[^"]+", line \d+')  # a Python traceback's frame, whoever formats it


def test_a_refused_run_says_why_without_a_traceback(lake, tmp_path):
    """A run the safety envelope refuses (an orphan cleanup told to list outside its table): the command line
    says which operation failed and why, with no Python traceback; ``--verbose`` adds it. Its own policy
    folder and instance: the lake's other tests never see this run."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "outside.yaml").write_text(
        f"name: outside\ntablePattern: demo.ops.healthy\norphanCleanup: {{location: {tmp_path / 'elsewhere'}}}\n")
    (tmp_path / "home").mkdir()
    shutil.copyfile(lake[1] / "dagster.yaml", tmp_path / "home" / "dagster.yaml")
    env = {"FLOE_POLICIES": str(tmp_path / "policies"), "DAGSTER_HOME": str(tmp_path / "home")}
    args = ("trigger", "demo.ops.healthy", "--operation", "ORPHAN_CLEANUP")
    refused = floe(lake, *args, check=False, **env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "ORPHAN_CLEANUP: FAILED" in refused.stdout and "orphanCleanup.location" in refused.stdout
    assert not STACK_FRAME.search(refused.stdout + refused.stderr), refused.stderr
    verbose = floe(lake, *args, "--verbose", check=False, **env)
    assert verbose.returncode == 1 and "ORPHAN_CLEANUP: FAILED" in verbose.stdout
    assert STACK_FRAME.search(verbose.stderr)  # Dagster's own log of the failed step, as printed before


def test_backfill_dry_run_and_queue(lake):
    dry = floe(lake, "backfill", "--tables", "demo.ops.*", "--operation", "REWRITE_MANIFESTS", "--dry-run")
    assert "would queue demo.ops.metrics REWRITE_MANIFESTS" in dry.stdout and "3 run(s) would queue" in dry.stdout
    queued = floe(lake, "backfill", "--tables", "demo.ops.*", "--operation", "rewrite_manifests")
    assert "3 run(s) queued" in queued.stdout
    config, home = lake
    with DagsterInstance.from_config(str(home)) as instance:
        runs = [r for r in instance.get_runs() if r.tags.get("floe/trigger") == "backfill"]
    assert len(runs) == 3 and all(r.status == DagsterRunStatus.QUEUED for r in runs)
    assert {r.tags["floe/table"] for r in runs} == {"demo.ops.metrics", "demo.ops.audit_log", "demo.ops.healthy"}
    assert all(r.tags["dagster/partition"] == "REWRITE_MANIFESTS" for r in runs)
    assert all(int(r.tags["dagster/priority"]) < 100 for r in runs)


def test_validate(lake, tmp_path):
    ok = floe(lake, "validate", str(Path(__file__).resolve().parents[2] / "examples" / "policies"))
    assert ok.returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: x\n  tablePatern: '*'\n  expireSnapshots: {retainLast: 0}\n")
    result = floe(lake, "validate", str(bad), check=False)
    assert result.returncode == 2
    assert f"{bad}: policy 'x': tablePatern" in result.stdout and "tablePattern" in result.stdout
    assert "expireSnapshots.retainLast" in result.stdout


def test_dagster_backfill_of_a_namespace(lake):
    """``--dagster-backfill``: one Dagster backfill of the maintenance job over the namespace's
    assets (the daemon runs it: test_daemon_backfills.py); a table the code location does not list
    is refused by name."""
    import pyarrow as pa
    from dagster._core.execution.backfill import BulkActionStatus

    from floe_dagster.iceberg.catalog import open_catalog

    args = ("backfill", "--tables", "demo.ops.*", "--operation", "REWRITE_MANIFESTS", "--dagster-backfill")
    dry = floe(lake, *args, "--dry-run")
    assert "would include demo.ops.metrics" in dry.stdout
    assert "would launch a Dagster backfill: one REWRITE_MANIFESTS run over 3 table(s)" in dry.stdout
    launched = floe(lake, *args, "--reason", "after the migration")
    backfill_id = re.search(r"Dagster backfill (\S+) launched", launched.stdout).group(1)
    config, home = lake
    with DagsterInstance.from_config(str(home)) as instance:
        backfill = instance.get_backfill(backfill_id)
        assert backfill.status == BulkActionStatus.REQUESTED  # no daemon here to run it
        assert backfill.partition_set_origin.partition_set_name == "floe_maintenance_partition_set"
        assert backfill.partition_names == ["REWRITE_MANIFESTS"]
        assert sorted(k.to_user_string() for k in backfill.asset_selection) == [
            "demo/ops/audit_log", "demo/ops/healthy", "demo/ops/metrics"]
        assert backfill.tags[T.TRIGGER] == "backfill" and backfill.tags[T.NAMESPACE] == "ops"
        assert backfill.tags[T.REASON] == "after the migration" and int(backfill.tags["dagster/priority"]) < 100

        # A table created after the code location's table list was cached: refused, no backfill.
        catalog = open_catalog(load_settings(config, environ={}).catalog)
        catalog.create_namespace("late")
        catalog.create_table("late.events", schema=pa.schema([pa.field("id", pa.int64())]))
        late = floe(lake, "backfill", "--tables", "demo.late.*", "--operation", "REWRITE_MANIFESTS", "--dagster-backfill",
                    check=False)
        assert late.returncode == 2, late.stdout + late.stderr
        assert "1 matching table(s) are not in the code location's table list: demo.late.events" in late.stderr
        assert "floe-dagster tables --refresh" in late.stderr
        assert [b.backfill_id for b in instance.get_backfills()] == [backfill_id]
