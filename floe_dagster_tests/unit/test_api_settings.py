"""floe.yaml's ``api`` section and the HTTP API's keys: entries, roles, hashing, reloading, and the
loopback rule for a server without keys."""

import os

import pytest

from floe_dagster.api.auth import KeyStore, Permission, Principal, Role, check_bind, hash_key, is_loopback, new_key
from floe_dagster.api.auth import main as auth_main
from floe_dagster.errors import BindRefused, KeysError, SettingsError
from floe_dagster.settings import ApiSettings, load_settings


def write(tmp_path, text, name="floe.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_api_section_defaults_to_no_keys(tmp_path):
    settings = load_settings(write(tmp_path, ""), environ={})
    assert settings.api == ApiSettings() and not settings.api.keys_configured


def test_api_section_resolves_the_keys_file_against_the_settings_folder(tmp_path):
    settings = load_settings(write(tmp_path, "api:\n  keys-file: secrets/keys.txt\n  keys-env: FLOE_API_KEYS\n"),
                             environ={})
    assert settings.api.keys_file == str(tmp_path / "secrets" / "keys.txt")
    assert settings.api.keys_env == "FLOE_API_KEYS" and settings.api.keys_configured


@pytest.mark.parametrize("text, message", [
    ("api:\n  key-file: k.txt\n", "api.key-file: unknown key (did you mean 'keys-file'?)"),
    ("api:\n  keys-env: 'not a name'\n", "api.keys-env: expected the name of an environment variable"),
    ("api:\n  keys-env: 1ABC\n", "api.keys-env: expected the name of an environment variable"),
    ("api:\n  keys-file: [a, b]\n", "api.keys-file: expected a file path"),
    ("api:\n  keys-file: ''\n", "api.keys-file: expected a file path"),
    ("api: [1]\n", "api: expected a mapping"),
    ("apis: {}\n", "apis: unknown key (did you mean 'api'?)"),
])
def test_bad_api_section_names_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as error:
        load_settings(path, environ={})
    assert str(path) in str(error.value) and message in str(error.value)


def entry(name, role, key):
    return f"{name}:{role}:{hash_key(key)}"


def test_keys_from_file_and_environment_authenticate_by_hash(tmp_path):
    keys_file = write(tmp_path, f"# who may call\n\n{entry('alice', 'OPERATOR', 'k-alice')}\n", "keys.txt")
    environ = {"FLOE_API_KEYS": f"{entry('bob', 'viewer', 'k-bob')}, {entry('carol', 'VIEWER', 'k-carol')}"}
    store = KeyStore(ApiSettings(keys_file=str(keys_file), keys_env="FLOE_API_KEYS"), environ)
    alice, bob = store.authenticate("k-alice"), store.authenticate("k-bob")
    assert alice.name == "alice" and alice.role is Role.OPERATOR and alice.can(Permission.TRIGGER)
    assert bob.name == "bob" and bob.role is Role.VIEWER and bob.can(Permission.READ)
    assert not bob.can(Permission.TRIGGER)
    assert store.authenticate("k-nobody") is None and store.authenticate(None) is None
    assert store.authenticate("") is None
    for shown in (repr(store._keys), str(store._keys), repr(store), repr(list(store._keys.values()))):
        assert "k-alice" not in shown and hash_key("k-alice") not in shown and hash_key("k-bob") not in shown
    assert "alice" in repr(store._keys)


def test_without_keys_every_caller_is_anonymous_with_every_permission():
    store = KeyStore(ApiSettings(), {})
    who = store.authenticate(None)
    assert who.name == "anonymous" and who.anonymous and who.can(Permission.TRIGGER)
    assert not store.configured


def test_the_keys_file_is_reread_when_it_changes_and_fails_closed(tmp_path):
    keys_file = write(tmp_path, entry("alice", "OPERATOR", "k1") + "\n", "keys.txt")
    store = KeyStore(ApiSettings(keys_file=str(keys_file)), {})
    assert store.authenticate("k1").name == "alice"
    keys_file.write_text(entry("alice", "OPERATOR", "k2") + "\n# rotated\n")
    os.utime(keys_file, ns=(1, 10**18))  # a different modification time, whatever the clock's resolution
    assert store.authenticate("k1") is None and store.authenticate("k2").name == "alice"
    keys_file.write_text("alice:OPERATOR:not-a-hash\n")
    os.utime(keys_file, ns=(1, 2 * 10**18))
    assert store.authenticate("k2") is None
    assert "entry 1" in store.error() and "SHA-256" in store.error()
    keys_file.unlink()
    assert store.authenticate("k2") is None and "cannot be read" in store.error()


@pytest.mark.parametrize("text, message", [
    ("alice:OPERATOR\n", "entry 1: expected name:role:sha256hex"),
    (f"al ice:OPERATOR:{'a' * 64}\n", "entry 1: name 'al ice'"),
    (f"alice:ROOT:{'a' * 64}\n", "entry 1: role 'ROOT': expected VIEWER, OPERATOR or ADMIN"),
    ("alice:VIEWER:floe_secretkey\n", "not the key itself"),
    (f"# c\nalice:VIEWER:{'a' * 64}\nalice:OPERATOR:{'b' * 64}\n", "entry 3: name 'alice' is used by entry 2 too"),
    (f"a:VIEWER:{'a' * 64}\nb:OPERATOR:{'A' * 64}\n", "entry 2: the same key as entry 1"),
    ("# nothing here\n", "holds no entry"),
])
def test_bad_keys_file_is_refused_at_start_with_file_and_entry(tmp_path, text, message):
    keys_file = write(tmp_path, text, "keys.txt")
    with pytest.raises(KeysError) as error:
        KeyStore(ApiSettings(keys_file=str(keys_file)), {})
    assert str(keys_file) in str(error.value) and message in str(error.value)
    assert "floe_secretkey" not in str(error.value) or "not the key itself" in str(error.value)


def test_keys_env_unset_or_missing_file_is_refused(tmp_path):
    with pytest.raises(KeysError, match="FLOE_API_KEYS is not set or empty"):
        KeyStore(ApiSettings(keys_env="FLOE_API_KEYS"), {})
    with pytest.raises(KeysError, match="cannot be read"):
        KeyStore(ApiSettings(keys_file=str(tmp_path / "missing.txt")), {})
    with pytest.raises(KeysError, match="environment FLOE_API_KEYS: entry 1: role 'ROOT'"):
        KeyStore(ApiSettings(keys_env="FLOE_API_KEYS"), {"FLOE_API_KEYS": f"x:ROOT:{'a' * 64}"})


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("example.com", False),
])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_binding_beyond_loopback_needs_keys():
    check_bind("127.0.0.1", keys_configured=False)
    check_bind("0.0.0.0", keys_configured=True)
    with pytest.raises(BindRefused, match="refusing to listen on 0.0.0.0: no API keys are configured"):
        check_bind("0.0.0.0", keys_configured=False)


def test_new_keys_follow_floes_format_and_the_helper_prints_an_entry(capsys):
    key = new_key()
    assert key.startswith("floe_") and len(key) == 37 and key[5:].isalnum()
    assert auth_main(["ci-bot", "operator"]) == 0
    out = capsys.readouterr().out
    printed_key = out.split("): ")[1].splitlines()[0].strip()
    assert f"ci-bot:OPERATOR:{hash_key(printed_key)}" in out
    assert auth_main(["ci bot", "OPERATOR"]) == 2


def test_the_helper_makes_an_admin_entry_that_manages_keys(capsys, tmp_path):
    assert auth_main(["root", "admin"]) == 0
    out = capsys.readouterr().out
    key = out.split("): ")[1].splitlines()[0].strip()
    entry = out.split("entry for the keys file:")[1].strip()
    assert entry == f"root:ADMIN:{hash_key(key)}"
    keys_file = tmp_path / "keys"
    keys_file.write_text(entry + "\n")
    who = KeyStore(ApiSettings(keys_file=str(keys_file))).authenticate(key)
    assert (who.name, who.role, who.key_id) == ("root", Role.ADMIN, "file:root")
    assert all(who.can(permission) for permission in Permission)
    assert not Principal("v", Role.OPERATOR).can(Permission.MANAGE_KEYS)
