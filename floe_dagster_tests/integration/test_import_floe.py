"""``floe-dagster import-floe`` against a real ``floe-dagster serve`` (issue 23, part 4): policies created
over HTTP (``POST /api/v1/policies``, patterns matching real tables of a PyIceberg SQLite catalog) are read
back page by page over HTTP with an API key and written as policy files that load, validate, and mean the
same policies; a second run refuses to overwrite and leaves the files alone; a bad URL, no key and a
wrong key get clear messages and a nonzero exit. The files are validated with the target's own files
before they are moved in: a conflict leaves the target as it was (issue 26).

No Floe server runs here (a Java/Quarkus service with PostgreSQL): its answers are served over real
HTTP by a small server holding Floe's documented shapes (``PolicyResource.list``: ``policies``, ``total``,
``limit``, ``offset``, ``hasMore``; ``PolicyResponse`` with operations summarised as ``{enabled,
schedule}``), paging as Floe pages and refusing requests without the key."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from floe_dagster import migration
from floe_dagster.cli import main
from floe_dagster.core.foreign.floe_migration import policy_meaning
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import load_policies, validate_policy_paths
from floe_dagster.core.basics.tables import TableName
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
           "FLOE_TEST_KEYS": f"migrator:ADMIN:{digest}"}  # policy writes need ADMIN (issue 26)
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


# Floe's PolicyResponse for a policy with every operation (PolicyResponse.from: options are not returned).
FLOE_POLICIES = [
    {"id": f"5b0c7f3e-0000-4000-8000-00000000000{i}", "name": name, "description": None, "tablePattern": pattern,
     "enabled": True, "priority": 0, "tags": {}, "createdAt": "2026-01-02T03:04:05Z", "updatedAt": "2026-01-02T03:04:05Z",
     "rewriteDataFiles": {"enabled": True, "schedule": "PT6H"},
     "expireSnapshots": {"enabled": True, "schedule": "P1D"},
     "orphanCleanup": {"enabled": True, "schedule": "0 0 4 * * ?"},
     "rewriteManifests": None,
     "healthThresholds": {"snapshotCountWarning": 100}, "triggerConditions": None}
    for i, (name, pattern) in enumerate([("floe-sales", "demo.sales.*"), ("floe-ops", "demo.ops.*")])
]


class FloeShapedServer(BaseHTTPRequestHandler):
    """``GET /api/v1/policies`` as Floe answers it (paged, X-API-Key checked)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        address = urllib.parse.urlsplit(self.path)
        if self.headers.get("X-API-Key") != KEY:
            return self._answer(401, {"error": "Unauthorized", "message": "Missing or invalid API key"})
        if address.path != "/api/v1/policies":
            return self._answer(404, {"error": "Not Found"})
        query = urllib.parse.parse_qs(address.query)
        limit, offset = int(query.get("limit", ["20"])[0]), int(query.get("offset", ["0"])[0])
        page = FLOE_POLICIES[offset:offset + limit]
        self._answer(200, {"policies": page, "total": len(FLOE_POLICIES), "limit": limit, "offset": offset,
                           "hasMore": offset + len(page) < len(FLOE_POLICIES)})

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def floe_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FloeShapedServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_operations_that_delete_are_written_disabled_with_the_reason(floe_server, tmp_path, capsys, monkeypatch):
    """Floe's answers hold no expiry or orphan cleanup options: with the default options they would delete
    more than Floe does, so they are written commented out under the reason; the rest is enabled."""
    monkeypatch.setattr(migration, "PAGE_SIZE", 1)  # two policies: two pages
    target = tmp_path / "from-floe"
    assert main(["import-floe", "--url", floe_server, "--key", KEY, "--to", str(target)]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith(f"read 2 policies from {floe_server} (Floe's policy summaries)\n")
    assert (f"wrote {target / 'floe-sales.yaml'}: policy 'floe-sales' (expireSnapshots and orphanCleanup written "
            "disabled, commented out under the reason: Floe's API returns no options for operations that delete)") in out
    assert ("not carried over: policy 'floe-sales': expireSnapshots: written disabled (commented out in the file): "
            "Floe's API returns no options for it, and with the default options it could delete snapshots that the "
            "policy's options in Floe keep") in out

    text = (target / "floe-sales.yaml").read_text()
    assert ("  # expire-snapshots and orphan-cleanup: written disabled by floe-dagster import-floe. Floe's API\n"
            "  # returns no options for operations that delete") in text
    assert ("  # expire-snapshots: {}\n  # expire-snapshots-schedule:\n  #   interval-days: 1\n"
            "  # orphan-cleanup: {}\n  # orphan-cleanup-schedule:\n  #   cron-expression: 0 0 4 * * ?\n") in text
    loaded = validate_policy_paths([target])
    assert loaded.errors == []
    for policy in loaded.policies:  # what the code location reads: nothing that deletes, even by a manual trigger
        assert policy.configured_operations() == [Operation.REWRITE_DATA_FILES]
        assert policy.is_operation_enabled(Operation.REWRITE_DATA_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["from-floe"]  # no staging folder left behind


def test_files_that_conflict_with_the_targets_own_are_never_moved_in(server, tmp_path, capsys):
    """The target already holds a policy named like an imported one (another file name): the imported
    files are validated with it in a staging folder, nothing is written, and the message names both files."""
    url, _ = server
    target = tmp_path / "team-policies"
    target.mkdir()
    legacy = target / "legacy.yaml"
    legacy.write_text("name: nightly-sales\ntablePattern: demo.sales.*\nexpireSnapshots: {retainLast: 9}\n"
                      "expireSnapshotsSchedule: {interval: P1D}\n")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    assert main(["import-floe", "--url", url, "--key", KEY, "--to", str(target)]) == 1
    _, err = capsys.readouterr()
    assert err.startswith(f"floe-dagster import-floe: the imported files do not load together with the 1 policy "
                          f"file(s) already in {target}, nothing was written: ")
    assert (f"{target / 'nightly-sales.yaml'}: policy 'nightly-sales': name: duplicate policy name, already defined "
            f"in {legacy}") in err
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before  # the target as it was
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no staging folder left

    # A target file that does not load is named too, and still nothing is written.
    legacy.write_text("name: [unclosed\n")
    assert main(["import-floe", "--url", url, "--key", KEY, "--to", str(target)]) == 1
    assert str(legacy) in capsys.readouterr().err
    assert sorted(p.name for p in target.iterdir()) == ["legacy.yaml"]
    # Without the conflict, the files are moved in beside the target's own.
    legacy.write_text("name: legacy\ntablePattern: demo.other.*\n")
    assert main(["import-floe", "--url", url, "--key", KEY, "--to", str(target)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in target.iterdir()) == ["legacy.yaml", "nightly-sales.yaml", "odd-age.json",
                                                        "team _a_s_ manifests.yaml"]
    assert validate_policy_paths([target]).errors == []
