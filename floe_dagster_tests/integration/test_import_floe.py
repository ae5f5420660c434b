"""``floe-dagster import-floe`` against a real ``floe-dagster serve`` (issue 23, part 4): policies created
over HTTP (``POST /api/v1/policies``, patterns matching real tables of a PyIceberg SQLite catalog) are read
back page by page over HTTP with an API key and written as policy files that load, validate, and mean the
same policies; a second run refuses to overwrite and leaves the files alone; a bad URL, no key and a
wrong key get clear messages and a nonzero exit."""

from __future__ import annotations

import hashlib
import os

import pytest
import requests

from floe_dagster import migration
from floe_dagster.cli import main
from floe_dagster.core.floe_migration import policy_meaning
from floe_dagster.core.policy import load_policies, validate_policy_paths
from floe_dagster.core.tables import TableName
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.integration.test_api_shutdown import free_port, serve, wait_until_up
from floe_dagster_tests.reliability._support import create_fragmented_table

KEY = "floe_migrationtestkey0123456789abcd"
QUOTED = "team \"a's\" manifests"
POLICIES = [
    {"name": "nightly-sales", "description": "everything a file can say", "tablePattern": "demo.sales.*",
     "priority": 5, "tags": {"team": "sales"},
     "rewriteDataFiles": {"strategy": "SORT", "sortOrder": ["id DESC"], "targetFileSizeBytes": 1048576,
                          "partialProgressEnabled": True, "rewriteJobOrder": "BYTES_DESC"},
     "rewriteDataFilesSchedule": {"interval": "PT6H", "windowStart": "01:00", "windowEnd": "05:00",
                                  "allowedDays": ["MONDAY", "FRIDAY"], "timezone": "Europe/Berlin", "timeout": 2},
     "expireSnapshots": {"retainLast": 3, "maxSnapshotAge": "P2D"},
     "expireSnapshotsSchedule": {"cronExpression": "0 3 * * *"},
     "orphanCleanup": {"retentionPeriodInDays": 4, "equalSchemes": {"s3a": "s3"}},
     "triggerConditions": {"smallFileCountAbove": 10, "minIntervalMinutes": 30,
                           "perOperationMinIntervalMinutes": {"EXPIRE_SNAPSHOTS": 120}},
     "healthThresholds": {"snapshotCountWarning": 40}},
    {"name": QUOTED, "tablePattern": "demo.sales.orders", "priority": 9,
     "rewriteManifests": {"sortBy": ["id"], "stagingLocation": "/tmp/stage", "rewriteIf": {"specId": 0, "content": "DATA"}},
     "rewriteManifestsSchedule": {"interval": "P1D", "enabled": False}},
    {"name": "odd-age", "tablePattern": "demo.ops.audit", "expireSnapshots": {"maxSnapshotAge": "PT36H"},
     "expireSnapshotsSchedule": {"interval": "PT90M"}},
]


@pytest.fixture
def server(tmp_path):
    """``floe-dagster serve`` on a lake with three tables, API keys on, the API's policy directory."""
    directory = tmp_path / "api-policies"
    directory.mkdir()
    config = write_settings(tmp_path, "[]\n", extra=f"api:\n  keys-env: FLOE_TEST_KEYS\n  policy-directory: {directory}\n")
    settings = load_settings(config, environ={})
    for name in ("sales.orders", "sales.events", "ops.audit"):
        create_fragmented_table(settings, TableName.parse(name, "demo"), files=1)
    refresh_table_cache(settings)
    home = tmp_path / "dagster_home"
    home.mkdir()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLOE_CONFIG": str(config), "FLOE_SCHEDULER_ENABLED": "false",
           "FLOE_TEST_KEYS": f"migrator:OPERATOR:{digest}"}
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    process = serve(env, log, port)
    try:
        wait_until_up(process, url, log)
        for body in POLICIES:
            created = requests.post(f"{url}/api/v1/policies", json=body, headers={"X-API-Key": KEY}, timeout=60)
            assert created.status_code == 201, created.text
        yield url, directory
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_import_floe_writes_every_policy_as_a_file_that_loads_to_the_same_policy(server, tmp_path, capsys,
                                                                                   monkeypatch):
    url, api_directory = server
    monkeypatch.setattr(migration, "PAGE_SIZE", 2)  # three policies: two pages, as Floe pages them
    target = tmp_path / "imported"
    assert main(["import-floe", "--url", url, "--key", KEY, "--to", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"read 3 policies from {url} (floe-dagster's full definitions)\n")
    assert sorted(p.name for p in target.iterdir()) == ["nightly-sales.yaml", "odd-age.json",
                                                        "team _a_s_ manifests.yaml"]
    assert (f"wrote {target / 'team _a_s_ manifests.yaml'}: policy '{QUOTED}' (file name: characters unsafe in a "
            "file name ('\"' \"'\") became _)") in out
    assert (f"wrote {target / 'odd-age.json'}: policy 'odd-age' (kept in Floe's API format (JSON): "
            "expireSnapshots.maxSnapshotAge: 'PT36H' is not a whole number of days, which the PolicyLoader format "
            "needs)") in out
    assert "not carried over" not in out  # floe-dagster's server gives every field
    assert "policy '" + QUOTED + "': rewrite-manifests.staging-location: ignored" in err  # the files' warnings

    # Loaded on their own (and validated by the CLI), they are the policies the server holds.
    written = validate_policy_paths([target])
    assert written.errors == []
    assert [f.format for f in written.files] == ["loader", "api", "loader"]
    assert policy_meaning(written.policies) == policy_meaning(load_policies([api_directory]))
    assert main(["validate", str(target)]) == 0
    capsys.readouterr()

    # Again without --overwrite: refused, nothing touched.
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in target.iterdir()}
    assert main(["import-floe", "--url", url, "--key", KEY, "--to", str(target)]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("floe-dagster import-floe: 3 file(s) already exist, nothing was written (pass --overwrite "
                          "to replace them): ")
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in target.iterdir()} == before
    assert main(["import-floe", "--url", url, "--key", KEY, "--to", str(target), "--overwrite"]) == 0
    capsys.readouterr()


def test_import_floe_names_an_unreachable_server_and_a_refused_key(server, tmp_path, capsys):
    url, _ = server
    target = tmp_path / "imported"
    assert main(["import-floe", "--url", url, "--key", "floe_wrong", "--to", str(target)]) == 1
    assert ("the server refused the request (HTTP 401" in capsys.readouterr().err)
    assert main(["import-floe", "--url", url, "--to", str(target)]) == 1
    err = capsys.readouterr().err
    assert "refused the request (HTTP 401" in err and err.rstrip().endswith("pass an API key with --key")
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["import-floe", "--url", dead, "--key", KEY, "--to", str(target)]) == 1
    assert capsys.readouterr().err.startswith(f"floe-dagster import-floe: {dead}/api/v1/policies?limit=100&offset=0: "
                                              "cannot reach the server (")
    assert main(["import-floe", "--url", "floe:9091", "--to", str(target)]) == 1
    assert "expected the server's http:// or https:// address" in capsys.readouterr().err
    assert not target.exists()
