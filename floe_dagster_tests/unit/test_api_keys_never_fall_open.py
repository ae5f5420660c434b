"""API keys never fall open, over real HTTP (uvicorn in a thread, a real Dagster instance and the
coordination database, as in test_api_http.py): a server that has had keys refuses callers without
one even after every key is gone (revoked, deleted, expired) and after a restart; beyond loopback a key
is always needed; no change leaves the API without a working ADMIN key (the last one cannot be
revoked, disabled or demoted, an expired one does not count, the first key must be ADMIN), not even
when two ADMINs revoke each other at once."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
from dagster import DagsterInstance

from floe_dagster.api.app import create_app
from floe_dagster.api.auth import KeyStore
from floe_dagster.coordination.api_keys import ApiKeyTable
from floe_dagster.instance import project_file
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import write_settings
from floe_dagster_tests.unit.test_api_http import POLICIES, assert_error, call, start_server

KEYS = "/api/v1/auth/keys"
# One endpoint of each kind, for "every request is refused".
EVERY_KIND = [("GET", "/api/v1/operations"), ("GET", "/api/v1/catalog"), ("GET", KEYS),
              ("POST", KEYS), ("POST", "/api/v1/maintenance/trigger"), ("GET", "/api/v1/openapi.json")]


@contextmanager
def keyless_server(root, host: str = "127.0.0.1", extra: str = ""):
    """A server whose floe.yaml names no keys (unless ``extra`` does); ``host`` is the address it
    believes it listens on."""
    home = root / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copyfile(project_file("dagster.yaml"), home / "dagster.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        settings = load_settings(write_settings(root, POLICIES, extra=extra), environ={})
        with DagsterInstance.get() as instance:
            keys = KeyStore(settings.api, host=host)
            server, thread, url = start_server(create_app(settings, keys, instance))
            try:
                yield {"url": url, "keys": keys, "table": keys.database}
            finally:
                server.should_exit = True
                thread.join(20)


def create(api, key, name, role, **extra):
    response = call(api, "POST", KEYS, key=key, json={"name": name, "role": role, **extra})
    assert response.status_code == 201, response.text
    return response.json()["key"], response.json()["apiKey"]["id"]


def assert_closed(api, *keys):
    """Every kind of request is refused without a key and with each of ``keys``."""
    for method, path in EVERY_KIND:
        for key in (None, *keys):
            json_body = {"name": "intruder", "role": "ADMIN"} if path == KEYS and method == "POST" else {}
            response = call(api, method, path, key=key, json=json_body if method == "POST" else None)
            assert response.status_code == 401, (method, path, key, response.text)


def test_a_server_whose_keys_are_all_gone_stays_closed_also_after_a_restart(tmp_path):
    with keyless_server(tmp_path) as api:
        assert call(api, "GET", "/api/v1/operations", key=None).status_code == 200  # never had a key: open
        admin, admin_id = create(api, None, "first-admin", "ADMIN")
        viewer, viewer_id = create(api, admin, "dash", "VIEWER")
        assert call(api, "DELETE", f"{KEYS}/{viewer_id}", key=admin).status_code == 204
        # The last ADMIN key disappears outside the API (deleted in the database, another server, a clean-up).
        assert api["table"].delete(admin_id) and api["table"].count() == 0 and not api["keys"].configured
        assert_closed(api, admin, viewer)
        assert "every request is refused" in api["keys"].describe()
    with keyless_server(tmp_path) as restarted:  # a new server on the same coordination database
        assert_closed(restarted, admin)


def test_an_expired_last_admin_leaves_the_api_closed(tmp_path):
    with keyless_server(tmp_path) as api:
        admin, admin_id = create(api, None, "first-admin", "ADMIN")
        api["table"].change(admin_id, expires_at=datetime.now(timezone.utc) - timedelta(minutes=1))
        assert_closed(api, admin)


def test_beyond_loopback_every_request_needs_a_key(tmp_path):
    """A server listening beyond loopback never lets anyone in without a key, whatever the keys: here it
    has none at all (``serve`` refuses to start so; the app alone must refuse too)."""
    with keyless_server(tmp_path, host="0.0.0.0") as api:
        assert api["keys"].required and not api["keys"].configured
        assert_closed(api)
    assert KeyStore(load_settings(tmp_path / "floe.yaml", environ={}).api, host="::").beyond_loopback
    assert not KeyStore(load_settings(tmp_path / "floe.yaml", environ={}).api, host="localhost").beyond_loopback


def test_the_first_key_of_a_server_without_keys_must_be_an_admin(tmp_path):
    with keyless_server(tmp_path) as api:
        for body in ({"name": "dash", "role": "VIEWER"}, {"name": "ops", "role": "OPERATOR"}, {"name": "dash"},
                     {"name": "late", "role": "ADMIN", "expiresAt": "2000-01-01T00:00:00Z"}):
            assert_error(call(api, "POST", KEYS, key=None, json=body), 409, "LAST_ADMIN", "ADMIN")
        assert api["table"].count() == 0 and not api["table"].ever_had_keys()
        assert call(api, "GET", "/api/v1/operations", key=None).status_code == 200  # still open, as it was


def test_the_last_working_admin_cannot_be_revoked_disabled_or_demoted(tmp_path):
    with keyless_server(tmp_path) as api:
        admin, admin_id = create(api, None, "root", "ADMIN")
        _, lapsed_id = create(api, admin, "lapsed", "ADMIN", expiresAt="2000-01-01T00:00:00Z")
        _, disabled_id = create(api, admin, "off", "ADMIN")
        assert call(api, "PUT", f"{KEYS}/{disabled_id}", key=admin, json={"enabled": False}).status_code == 200
        # The expired and the disabled ADMIN do not count: root is the last working one.
        for change in ({"enabled": False}, {"role": "OPERATOR"}, {"role": "VIEWER", "enabled": False}):
            body = assert_error(call(api, "PUT", f"{KEYS}/{admin_id}", key=admin, json=change), 409, "LAST_ADMIN",
                                "no enabled ADMIN key")
            assert body["details"] == {"id": admin_id}
        assert call(api, "GET", f"{KEYS}/{admin_id}", key=admin).json()["role"] == "ADMIN"  # nothing changed
        assert call(api, "GET", f"{KEYS}/{admin_id}", key=admin).json()["enabled"] is True
        assert call(api, "DELETE", f"{KEYS}/{lapsed_id}", key=admin).status_code == 204  # not the last: fine
        # With a second working ADMIN, root may step down; then the other one is the last.
        other, other_id = create(api, admin, "other", "ADMIN")
        assert call(api, "PUT", f"{KEYS}/{admin_id}", key=admin, json={"role": "OPERATOR"}).status_code == 200
        assert_error(call(api, "PUT", f"{KEYS}/{other_id}", key=other, json={"enabled": False}), 409, "LAST_ADMIN")
        assert_error(call(api, "DELETE", f"{KEYS}/{other_id}", key=other), 400, "VALIDATION_FAILED",
                     "Cannot delete your own API key")  # Floe's rule comes first
        assert call(api, "GET", KEYS, key=other).status_code == 200


def test_a_file_admin_counts_so_database_admins_may_all_go(tmp_path):
    from floe_dagster.api.auth import hash_key
    from floe_dagster_tests.unit.test_api_floe_endpoints import ADMIN_KEY

    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"root:ADMIN:{hash_key(ADMIN_KEY)}\n")
    with keyless_server(tmp_path, extra=f"api:\n  keys-file: {keys_file}\n") as api:
        _, only_id = create(api, ADMIN_KEY, "db-admin", "ADMIN")
        assert call(api, "PUT", f"{KEYS}/{only_id}", key=ADMIN_KEY, json={"enabled": False}).status_code == 200
        assert call(api, "DELETE", f"{KEYS}/{only_id}", key=ADMIN_KEY).status_code == 204


def test_two_admins_revoking_each_other_at_once_leave_one(tmp_path):
    with keyless_server(tmp_path) as api:
        survivor, _ = create(api, None, "admin-0", "ADMIN")
        table: ApiKeyTable = api["table"]
        for round_ in range(1, 6):
            other, other_id = create(api, survivor, f"admin-{round_}", "ADMIN")
            survivor_id = next(k.id for k in table.all() if k.name != f"admin-{round_}")
            with ThreadPoolExecutor(2) as pool:
                first = pool.submit(call, api, "DELETE", f"{KEYS}/{other_id}", survivor)
                second = pool.submit(call, api, "DELETE", f"{KEYS}/{survivor_id}", other)
                statuses = sorted([first.result().status_code, second.result().status_code])
            assert statuses in ([204, 401], [204, 409]), statuses
            assert table.usable_admins(datetime.now(timezone.utc)) == 1
            remaining = table.all()[0]
            survivor = survivor if remaining.id == survivor_id else other
