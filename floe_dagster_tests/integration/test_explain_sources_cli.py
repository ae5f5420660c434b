"""``floe-dagster explain`` (the installed console script, a real SQLite catalog and Dagster instance) on a
table whose owner set ``history.expire.*`` properties and floe.* overrides, and whose properties drifted
from the policy's: each expiry argument says where it came from, in ``--json`` and in text, and a drifted
property's name is shown while the values of a secret-named property and a secret value are masked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from floe_dagster.core.facts.expiry_defaults import MAX_REF_AGE_MS, MAX_SNAPSHOT_AGE_MS, MIN_SNAPSHOTS_TO_KEEP
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration._health_tables import ARROW_SCHEMA, lakehouse, rows

CLI = str(Path(sys.executable).parent / "floe-dagster")
SECRET = "hunter22hunter22"  # in a plain property's value: masked by shape (a URI's user info)
POLICIES = """
- name: owned
  tablePattern: "demo.ns.*"
  expireSnapshots: {retainLast: 1}
  expireSnapshotsSchedule: {interval: P1D}
  tableProperties:
    encryption.key-id: key-of-the-policy
    commit.retry.num-retries: 4
    comment: plain words
  tablePropertiesSchedule: {}
  ownerOverrides:
    allow:
      expire-snapshots.retain-last: {}
"""
OWNER = {MAX_SNAPSHOT_AGE_MS: "0", MIN_SNAPSHOTS_TO_KEEP: "4", MAX_REF_AGE_MS: "-1",
         "floe.expire-snapshots.retain-last": "3", "encryption.key-id": "key-of-the-owner",
         "commit.retry.num-retries": "7", "comment": f"see https://bob:{SECRET}@wiki.example/x"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain-sources")
    settings, catalog = lakehouse(root)
    # encryption.key-id (a name the secret rule masks the values of) needs the deployment's leave
    config = write_settings(root, POLICIES, "envelope:\n  allowed-table-properties: [encryption.key-id]\n")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=ARROW_SCHEMA, properties=OWNER)
    table.append(rows(0, 10))
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(Path(__file__).resolve().parents[2] / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLOE_CONFIG": str(config)}
    floe(env, "health", "demo.ns.t")  # the health explain reads the table's properties from
    return env


def floe(env, *args) -> str:
    result = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"floe-dagster {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def test_explain_json_names_where_each_expiry_argument_came_from(lake):
    report = json.loads(floe(lake, "explain", "demo.ns.t", "--json"))
    arguments = report["operationStatuses"]["EXPIRE_SNAPSHOTS"]["expiryArguments"]
    assert (arguments["retainLast"], arguments["retainLastFrom"]) == (
        3, "owner override floe.expire-snapshots.retain-last")
    assert (arguments["maxSnapshotAge"], arguments["maxSnapshotAgeFrom"], arguments["olderThanFrom"]) == (
        "PT1H", MAX_SNAPSHOT_AGE_MS, MAX_SNAPSHOT_AGE_MS)  # the owner's 0, bounded to an hour
    assert (arguments["maxRefAgeMs"], arguments["maxRefAgeFrom"]) == (7 * 86_400_000, "floe minimum")
    assert [why.split(" is ")[0] for why in arguments["adjusted"]] == [
        f"table property {MAX_SNAPSHOT_AGE_MS}=0", f"table property {MAX_REF_AGE_MS}=-1"]
    assert arguments["tableProperties"] == "as the last health read them"


def test_explain_text_shows_the_sources_too(lake):
    text = floe(lake, "explain", "demo.ns.t")
    (line,) = [line for line in text.splitlines() if line.startswith("    expiry arguments: ")]
    assert "(maxSnapshotAge PT1H from history.expire.max-snapshot-age-ms), retain_last 3 (from owner override " \
           "floe.expire-snapshots.retain-last)" in line
    assert "is removed after 604800000 ms (from floe minimum)" in line
    assert f"    expiry adjusted: table property {MAX_REF_AGE_MS}=-1 is under 7 days" in text


def test_explain_json_shows_each_drifted_propertys_name_and_masks_secret_values(lake):
    out = floe(lake, "explain", "demo.ns.t", "--json")
    drift = json.loads(out)["operationStatuses"]["APPLY_TABLE_PROPERTIES"]["propertyDrift"]
    by_name = {entry["key"]: entry for entry in drift}
    assert set(by_name) == {"encryption.key-id", "commit.retry.num-retries", "comment"}  # no name is "***"
    assert by_name["encryption.key-id"] == {"key": "encryption.key-id", "declared": "***", "current": "***"}
    assert by_name["commit.retry.num-retries"] == {"key": "commit.retry.num-retries", "declared": "4",
                                                   "current": "7"}
    assert by_name["comment"]["current"] == "see https://bob:***@wiki.example/x"
    assert SECRET not in out and "key-of-the-owner" not in out and "key-of-the-policy" not in out
