"""A snapshot of what the code location shows in Dagit, for a fixed table list and policy folder.

``build_definitions`` is resolved into its repository and reduced to a sorted, JSON-able description
(assets, jobs, partitions, schedules, the sensor, the health checks, the resource keys), which is
compared with ``snapshots/definitions.json``. A change to what Dagit shows therefore changes that
file, and the reviewer sees it in the diff. To accept a change, run::

    FLOE_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest floe_dagster_tests/unit/test_definitions_snapshot.py

and commit the rewritten snapshot with the change.

Built from an explicit table list, the definitions list no catalog and start no Spark: the catalog
here is a SQLite file that is never created, the Spark session builder and socket connections fail
the test if anything reaches for them, and nothing is written under the test's folder.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, Definitions

from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.settings import load_settings

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"
UPDATE_ENV = "FLOE_UPDATE_SNAPSHOTS"
TMP = "<tmp>"
HOME = "<home>"
# Dagster's implicit asset jobs (``__ASSET_JOB...``), which Dagit does not list.
IMPLICIT_JOB_PREFIX = "__ASSET_JOB"

CATALOG = "lake"
TABLES = [
    TableName(CATALOG, ("sales",), "orders"),
    TableName(CATALOG, ("sales",), "customers"),
    TableName(CATALOG, ("ops", "eu"), "audit_log"),  # nested namespace: group ops_eu
    TableName(CATALOG, ("ops", "eu"), "metrics"),
    TableName(CATALOG, ("web-logs",), "clicks"),  # '-' is not valid in a group name: web_logs
    TableName(CATALOG, ("web-logs",), "page views"),  # a space: an asset, with an escaped output name
    TableName(CATALOG, ("sales",), "bad/name"),  # '/' cannot be an asset: left out of the code location
]

# Floe's policy formats: a YAML document, a JSON object, and a YAML list of two policies.
POLICIES = {
    "sales.yaml": """\
        name: sales-maintenance
        description: Compaction and snapshot expiry for lake.sales.*
        tablePattern: "lake.sales.*"
        priority: 10
        tags:
          team: sales
        rewriteDataFiles:
          strategy: BINPACK
          targetFileSizeBytes: 134217728
        rewriteDataFilesSchedule:
          interval: PT1H
        expireSnapshots:
          retainLast: 5
          maxSnapshotAge: P1D
        expireSnapshotsSchedule:
          cronExpression: "30 2 * * *"
          timezone: America/New_York
        orphanCleanup:
          retentionPeriodInDays: 3
        orphanCleanupSchedule:
          cronExpression: "0 0 3 ? * SUN"  # Quartz; becomes "0 3 * * SUN"
          timezone: Europe/Berlin
        healthThresholds:
          smallFileSizeBytes: 8388608
          snapshotCountWarning: 50
          snapshotCountCritical: 100
        """,
    "ops.json": json.dumps({
        "name": "ops-eu",
        "tablePattern": "lake.ops.eu.*",
        "tags": {"team": "platform"},
        "expireSnapshots": {"retainLast": 3},
        "expireSnapshotsSchedule": {"interval": "PT6H"},
        "rewriteManifests": {},
        "rewriteManifestsSchedule": {"cronExpression": "15 4 * * MON-FRI", "timezone": "Asia/Tokyo"},
        "healthThresholds": {"deleteFileCountWarning": 10, "deleteFileCountCritical": 40,
                             "manifestCountWarning": 50, "manifestCountCritical": 200},
    }, indent=2),
    "web.yaml": """\
        - name: web-logs
          tablePattern: "lake.web-logs.*"
          rewriteDataFiles:
            strategy: BINPACK
          rewriteDataFilesSchedule:
            interval: PT2H
          healthThresholds:
            smallFilePercentWarning: 30
            smallFilePercentCritical: 60
        # Disabled: its cron rule must not become a schedule.
        - name: web-logs-zorder
          tablePattern: "lake.web-logs.clicks"
          enabled: false
          rewriteDataFiles:
            strategy: ZORDER
            zOrderColumns: [user_id]
          rewriteDataFilesSchedule:
            cronExpression: "0 1 * * *"
            timezone: Australia/Sydney
        """,
}


# -- the fixture ---------------------------------------------------------------------------------------


def _write_fixture(root: Path) -> Path:
    """floe.yaml with a SQLite catalog whose file is never created, and the policy folder."""
    policies = root / "policies"
    policies.mkdir(parents=True)
    for name, text in POLICIES.items():
        (policies / name).write_text(textwrap.dedent(text))
    config = root / "floe.yaml"
    config.write_text(textwrap.dedent(f"""\
        data-dir: {root / 'data'}
        catalog:
          name: {CATALOG}
          properties:
            type: sql
            uri: "sqlite:///{root / 'catalog.db'}"
            warehouse: "file://{root / 'warehouse'}"
        policies: [{policies}]
        spark:
          jars-cache: {root / 'jars'}
        health:
          checks: true
        """))
    return config


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def offline(monkeypatch):
    """Fail at once if anything starts Spark or opens a network connection."""

    def refuse(what):
        def fail(*args, **kwargs):
            raise AssertionError(f"building the definitions must not {what}")
        return fail

    monkeypatch.setattr(socket.socket, "connect", refuse("open a network connection"))
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # no pyspark: nothing can start it
        return
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse("start a Spark session"))


def _build(root: Path) -> Definitions:
    """The definitions for TABLES, resolved, after checking that they touched no catalog and no file."""
    settings = load_settings(_write_fixture(root), environ={})
    before = _files(root)
    defs = build_definitions(settings, tables=TABLES)
    defs.get_repository_def()  # resolve everything Dagit would: the asset graph, the jobs, the schedules
    assert not (root / "catalog.db").exists(), "building the definitions opened the SQLite catalog"
    assert not settings.table_cache_path.exists(), "building the definitions listed the catalog"
    assert _files(root) == before, "building the definitions wrote files"
    return defs


# -- the description -----------------------------------------------------------------------------------


def _key(key: AssetKey) -> str:
    return key.to_user_string()


def _value(value: Any) -> Any:
    """A metadata or tag value as JSON: a MetadataValue's plain value, else its type's name."""
    value = getattr(value, "value", value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return f"<{type(value).__name__}>"


def _partitions(partitions_def) -> Any:
    if partitions_def is None:
        return None
    return {"type": type(partitions_def).__name__, "keys": list(partitions_def.get_partition_keys())}


def _condition(condition) -> Any:
    return None if condition is None else (condition.get_label() or condition.name)


def describe(defs: Definitions) -> dict[str, Any]:
    """What Dagit shows for the definitions, sorted and JSON-able (before path normalization)."""
    repo = defs.get_repository_def()
    graph = repo.asset_graph

    assets = {}
    for node in graph.asset_nodes:
        assets[_key(node.key)] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "description": node.description,
            "op": graph.assets_def_for_key(node.key).node_def.name,
            "partitions": _partitions(node.partitions_def),
            "metadata": {k: _value(v) for k, v in sorted(node.metadata.items())},
            "owners": sorted(node.owners),
            "tags": {k: _value(v) for k, v in sorted(node.tags.items())},
            "deps": sorted(_key(k) for k in node.parent_keys),
            "checks": sorted(k.name for k in node.check_keys),
            "automation_condition": _condition(node.automation_condition),
            "materializable": node.is_materializable,
        }

    jobs = {}
    for job in repo.get_all_jobs():
        if job.name.startswith(IMPLICIT_JOB_PREFIX):
            continue
        layer = job.asset_layer
        jobs[job.name] = {
            "description": job.description,
            "assets": sorted(_key(k) for k in layer.selected_asset_keys),
            "asset_checks": sorted(
                f"{_key(k.asset_key)}:{k.name}" for d in layer.data for k in d.assets_def.check_keys
            ),
            "ops": sorted(node.name for node in job.graph.nodes),
            "executor": job.executor_def.name,
            "partitions": _partitions(job.partitions_def),
            "tags": {k: _value(v) for k, v in sorted(job.tags.items())},
        }

    schedules = {
        schedule.name: {
            "cron": schedule.cron_schedule,
            "timezone": schedule.execution_timezone,
            "job": schedule.job_name,
            "default_status": schedule.default_status.value,
            "description": schedule.description,
            "tags": {k: _value(v) for k, v in sorted(schedule.tags.items())},
        }
        for schedule in repo.schedule_defs
    }

    sensors = {
        sensor.name: {
            "type": sensor.sensor_type.value,
            "minimum_interval_seconds": sensor.minimum_interval_seconds,
            "default_status": sensor.default_status.value,
            "job": sensor.job_name,
            "description": sensor.description,
        }
        for sensor in repo.sensor_defs
    }

    checks = {}
    for check_key in graph.asset_check_keys:
        spec = graph.get_check_spec(check_key)
        checks[f"{_key(check_key.asset_key)}:{check_key.name}"] = {
            "name": check_key.name,
            "asset": _key(check_key.asset_key),
            "op": graph.assets_def_for_key(check_key).node_def.name,
            "blocking": spec.blocking,
            "partitions": _partitions(spec.partitions_def),
            "description": spec.description,
        }

    return {
        "counts": {"assets": len(assets), "jobs": len(jobs), "schedules": len(schedules),
                   "sensors": len(sensors), "asset_checks": len(checks)},
        "groups": sorted({a["group"] for a in assets.values()}),
        "assets": assets,
        "jobs": jobs,
        "schedules": schedules,
        "sensors": sensors,
        "asset_checks": checks,
        "resources": sorted(defs.resources or {}),
    }


def _normalize(value: Any, replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {_normalize(k, replacements): _normalize(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v, replacements) for v in value]
    return value


def render(defs: Definitions, root: Path) -> str:
    """The snapshot text: paths replaced by placeholders, keys sorted, one trailing newline."""
    replacements = sorted({(str(root.resolve()), TMP), (str(root), TMP), (str(Path.home()), HOME)},
                          key=lambda pair: -len(pair[0]))  # longest first: the tmp folder may be under home
    text = json.dumps(_normalize(describe(defs), replacements), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert not re.search(r"0x[0-9a-fA-F]{6,}| object at ", text), "the snapshot holds a memory address"
    return text


# -- the tests -----------------------------------------------------------------------------------------


def test_definitions_build_without_catalog_spark_or_network(tmp_path, offline):
    defs = _build(tmp_path / "location")
    description = describe(defs)
    assert description["counts"]["assets"] == len(TABLES) - 1  # all but the unmappable one
    assert "lake/sales/bad/name" not in description["assets"]


def test_definitions_match_the_snapshot(tmp_path, offline):
    root = tmp_path / "location"
    actual = render(_build(root), root)
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        if not SNAPSHOT.exists() or SNAPSHOT.read_text(encoding="utf-8") != actual:
            SNAPSHOT.write_text(actual, encoding="utf-8")
        return
    how = (f"set {UPDATE_ENV}=1 to rewrite it, e.g. `{UPDATE_ENV}=1 .venv/bin/python -m pytest "
           f"floe_dagster_tests/unit/test_definitions_snapshot.py`, then review and commit the diff")
    if not SNAPSHOT.exists():
        pytest.fail(f"no snapshot at {SNAPSHOT}: {how}", pytrace=False)
    expected = SNAPSHOT.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile="snapshots/definitions.json (committed)", tofile="definitions (built now)",
        ))
        pytest.fail(f"What Dagit shows for the definitions changed. If that is intended, {how}.\n\n{diff}",
                    pytrace=False)
