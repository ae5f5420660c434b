"""The Dagster component as a user meets it: a project made by ``create-dagster project``, the
component added with ``dg scaffold defs``, then ``dg check defs``, ``dg list defs`` and ``dg launch``
against a real lakehouse (a SQLite PyIceberg catalog with one table of several small files), the run
executed by real Spark and recorded in the project's Dagster instance ($DAGSTER_HOME).

The user's project is not installed into the shared test environment: ``PYTHONPATH=<project>/src``
stands in for the ``pip install -e .`` (or ``uv sync``) a user would run, and the dg commands run on
this environment's Python (``--no-uv-sync``: no new virtual environment, no download)."""

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

from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import EVENT_SCHEMA, rows
from floe_dagster.iceberg.catalog import load_table, open_catalog, table_counts
from floe_dagster.instance import project_file
from floe_dagster.settings import (
    CatalogSettings,
    embedded_catalog_properties,
    load_settings,
)
from floe_dagster_tests.conftest import JARS_CACHE

COMPONENT_TYPE = "floe_dagster.component.FloeMaintenanceComponent"
TABLE = TableName("lake", ("sales",), "orders")
SMALL_FILES = 8
BIN = Path(sys.executable).parent
DOCS = Path(__file__).resolve().parents[2] / "docs" / "component.md"
# The docs' example catalog; the test's lake stands in for it.
DOCS_URI, DOCS_WAREHOUSE = "sqlite:////data/lake/catalog.db?timeout=60", "file:///data/lake/warehouse"


def docs_example(name: str) -> str:
    found = re.search(rf"<!-- {name}: begin[^>]*-->\s*```yaml\n(.*?)```\s*<!-- {name}: end -->", DOCS.read_text(), re.DOTALL)
    assert found, f"{DOCS}: no {name} example"
    return found.group(1)


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> CatalogSettings:
    """One table written by eight PyIceberg appends: eight small data files."""
    root = tmp_path_factory.mktemp("lake")
    (root / "warehouse").mkdir()
    catalog_settings = CatalogSettings(name="lake", properties=embedded_catalog_properties(str(root)))
    catalog = open_catalog(catalog_settings)
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", EVENT_SCHEMA)
    for batch in range(SMALL_FILES):
        table.append(rows(batch * 10, 10))
    return catalog_settings


@pytest.fixture(scope="module")
def project(tmp_path_factory, lake):
    """``create-dagster project`` + ``dg scaffold defs``; returns (project root, component folder, env)."""
    for tool in ("create-dagster", "dg"):
        assert (BIN / tool).exists(), f"{tool} is not installed in {BIN}: pip install -e '.[test]'"
    root = tmp_path_factory.mktemp("dg")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOE_", "DAGSTER_"))}
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "DAGSTER_HOME": str(home),
        "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0",  # create-dagster would ask PyPI for a newer version
        "FLOE_JARS_CACHE": JARS_CACHE,
    })
    run([str(BIN / "create-dagster"), "project", "--no-uv-sync", "maintained"], root, env)
    project_root = root / "maintained"
    env["PYTHONPATH"] = str(project_root / "src")
    run([str(BIN / "dg"), "scaffold", "defs", COMPONENT_TYPE, "lake_maintenance", "--catalog-name", "lake",
         "--catalog-uri", lake.properties["uri"], "--warehouse", lake.properties["warehouse"]], project_root, env)
    folder = project_root / "src" / "maintained" / "defs" / "lake_maintenance"
    policy = folder / "policies" / "maintenance.yaml"
    # The scaffolded example policy is switched off; the user switches it on.
    policy.write_text(policy.read_text().replace("enabled: false", "enabled: true"))
    return project_root, folder, env


def test_scaffolded_files_are_the_docs_examples(project, lake):
    _, folder, _ = project
    expected = docs_example("component-defs-yaml").replace(DOCS_URI, lake.properties["uri"])
    assert (folder / "defs.yaml").read_text() == expected.replace(DOCS_WAREHOUSE, lake.properties["warehouse"])
    policy = (folder / "policies" / "maintenance.yaml").read_text()
    assert policy == docs_example("component-policy").replace("enabled: false", "enabled: true")


def test_dg_check_defs_passes(project):
    project_root, _, env = project
    result = run([str(BIN / "dg"), "check", "defs"], project_root, env)
    assert "All component YAML validated successfully." in result.stdout
    assert "All definitions loaded successfully." in result.stdout


def test_dg_list_defs_shows_the_code_locations_definitions(project, lake, tmp_path):
    project_root, folder, env = project
    listed = json.loads(run([str(BIN / "dg"), "list", "defs", "--json"], project_root, env).stdout)

    assert [a["asset_key"] for a in listed["assets"]] == ["lake/sales/orders"]
    assert set(listed["assets"][0]["kinds"]) == {"iceberg", "spark"}
    assert listed["assets"][0]["source"].startswith("src/maintained/defs/lake_maintenance/defs.yaml")
    assert [c["key"] for c in listed["asset_checks"]] == ["lake/sales/orders:health"]
    assert [s["name"] for s in listed["sensors"]] == ["floe_debt_score_sensor"]
    assert len(listed["schedules"]) == 1  # the policy's one cron rule (nightly compaction)

    # The same definitions as the code location built from the equivalent floe.yaml.
    config = tmp_path / "floe.yaml"
    config.write_text(json.dumps({
        "data-dir": str(tmp_path / "data"),
        "catalog": {"name": lake.name, "properties": lake.properties},
        "policies": [str(folder / "policies")],
    }))
    defs = build_definitions(load_settings(config, environ={}))
    repository = defs.get_repository_def()
    assert {"/".join(k.path) for k in repository.asset_graph.get_all_asset_keys()} == {a["asset_key"] for a in listed["assets"]}
    assert {f"{'/'.join(k.asset_key.path)}:{k.name}" for k in repository.asset_graph.asset_check_keys} == {
        c["key"] for c in listed["asset_checks"]}
    assert {s.name for s in repository.sensor_defs} == {s["name"] for s in listed["sensors"]}
    assert {s.name for s in repository.schedule_defs} == {s["name"] for s in listed["schedules"]}
    assert {j.name for j in repository.get_all_jobs() if not j.name.startswith("__")} == {j["name"] for j in listed["jobs"]}


@pytest.mark.spark
def test_dg_launch_compacts_the_table_and_records_the_run(project, lake):
    project_root, _, env = project
    before = load_table(open_catalog(lake), TABLE)
    rows_before = before.scan().to_arrow().sort_by("id")
    assert table_counts(before)["data_files"] == SMALL_FILES

    run([str(BIN / "dg"), "launch", "--assets", "lake/sales/orders", "--partition", "REWRITE_DATA_FILES"],
        project_root, env, timeout=600)

    after = load_table(open_catalog(lake), TABLE)
    assert table_counts(after)["data_files"] < SMALL_FILES
    assert after.metadata.current_snapshot_id != before.metadata.current_snapshot_id
    assert after.scan().to_arrow().sort_by("id").equals(rows_before)

    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [run_record] = instance.get_runs()
        assert run_record.status == DagsterRunStatus.SUCCESS
        assert run_record.tags["floe/table"] == "lake.sales.orders"
        assert run_record.tags["floe/operation"] == "REWRITE_DATA_FILES"
        assert run_record.tags["floe/trigger"] == "manual"
        assert run_record.tags["floe/policy"] == "lake-maintenance"
        event = instance.get_latest_materialization_event(asset_key_for(TABLE))
        assert event.run_id == run_record.run_id and event.dagster_event.partition == "REWRITE_DATA_FILES"
    # floe's coordination database sits beside the instance, as for the code location.
    assert (Path(env["DAGSTER_HOME"]) / "floe-coordination.db").is_file()
