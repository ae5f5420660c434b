"""API keys and roles for the HTTP API.

Keys come from floe.yaml's ``api`` section (see :class:`floe_dagster.settings.ApiSettings`): entries
``name:role:sha256hex``; and from the coordination database (coordination/api_keys.py), where an ADMIN creates,
changes and revokes keys over HTTP (``/api/v1/auth/keys``, api/key_admin.py). A client sends the key itself in the
``X-API-Key`` header; the server hashes it with SHA-256 and compares the hash with the stored ones, so the keys are
never stored, logged or put in run tags (runs carry the key's *name* as ``dagster/floe.actor``).

Roles (Floe's): ``VIEWER`` reads (trigger status, health, operations, pattern validation, the OpenAPI
document); ``OPERATOR`` reads and triggers maintenance; ``ADMIN`` does everything: it writes policies
(``api.operator-may-write-policies`` grants that to OPERATOR too) and is the only role that manages
API keys.

Keys never fall open. A key is required on every request, checked on every request, once the server
has had keys (floe.yaml names some, or a key was ever created in the coordination database, revoked
since or not) or whenever it listens beyond loopback; only a loopback server that never had a key
lets every caller in as ``anonymous`` (every permission), and :func:`check_bind` refuses to start
beyond loopback without a key to check.

``python -m floe_dagster.api.auth NAME ROLE`` prints a new random key once and the entry to store.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import string
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from pathlib import Path
from typing import Mapping

from floe_dagster.coordination.api_keys import ApiKeyTable
from floe_dagster.errors import BindRefused, KeysError
from floe_dagster.settings import ApiSettings

HEADER = "X-API-Key"
ANONYMOUS = "anonymous"
KEY_PREFIX = "floe_"
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_ENV_SEPARATORS = re.compile(r"[\n,;]")
LAST_USE_RESOLUTION = timedelta(minutes=1)  # how stale a key's lastUsedAt may be


class Permission(str, Enum):
    READ = "read"
    TRIGGER = "trigger"
    WRITE_POLICIES = "write-policies"
    MANAGE_KEYS = "manage-keys"


class Role(str, Enum):
    ADMIN = "ADMIN"
    OPERATOR = "OPERATOR"
    VIEWER = "VIEWER"

    @property
    def permissions(self) -> frozenset[Permission]:
        return _PERMISSIONS[self]


_PERMISSIONS = {
    Role.ADMIN: frozenset(Permission),
    Role.OPERATOR: frozenset({Permission.READ, Permission.TRIGGER}),
    Role.VIEWER: frozenset({Permission.READ}),
}
# Floe's permission names of each of ours.
FLOE_PERMISSIONS = {
    Permission.READ: ("READ_POLICIES", "READ_TABLES", "READ_OPERATIONS"),
    Permission.TRIGGER: ("TRIGGER_MAINTENANCE",),
    Permission.WRITE_POLICIES: ("WRITE_POLICIES", "DELETE_POLICIES"),
    Permission.MANAGE_KEYS: ("MANAGE_API_KEYS",),
}


def role_permissions(role: Role | None, settings: ApiSettings) -> frozenset[Permission]:
    """What a role may do on this server: Floe's, and policy writes for OPERATOR when
    ``api.operator-may-write-policies`` says so; anonymous (None, a server without keys) everything."""
    if role is None:
        return frozenset(Permission)
    if role is Role.OPERATOR and settings.operator_may_write_policies:
        return role.permissions | {Permission.WRITE_POLICIES}
    return role.permissions


@dataclass(frozen=True)
class ApiKey:
    name: str
    role: Role
    sha256: str  # lower-case hex

    def __repr__(self) -> str:  # never print even the hash in tracebacks
        return f"ApiKey(name={self.name!r}, role={self.role.value})"


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role | None  # None: anonymous on a server without keys (every permission)
    key_id: str | None = None  # the database key's id, or file:<name> / env:<name>
    permissions: frozenset[Permission] | None = None  # the role's on this server (None: Floe's own)

    @property
    def anonymous(self) -> bool:
        return self.role is None

    def can(self, permission: Permission) -> bool:
        if self.permissions is not None:
            return permission in self.permissions
        return self.role is None or permission in self.role.permissions


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """Floe's format: ``floe_`` and 32 letters and digits."""
    alphabet = string.ascii_letters + string.digits
    return KEY_PREFIX + "".join(secrets.choice(alphabet) for _ in range(32))


def parse_entries(lines: list[tuple[int, str]], where: str) -> list[ApiKey]:
    """Entries ``name:role:sha256hex``; ``where`` names the file or variable in errors."""
    keys: list[ApiKey] = []
    names: dict[str, int] = {}
    hashes: dict[str, int] = {}
    for number, line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = [p.strip() for p in text.split(":")]
        at = f"{where}: entry {number}"
        if len(parts) != 3:
            raise KeysError(f"{at}: expected name:role:sha256hex (three fields separated by ':'), "
                            f"got {len(parts)} field(s)")
        name, role, digest = parts
        if not _NAME.fullmatch(name):
            raise KeysError(f"{at}: name {name!r}: use 1 to 100 letters, digits, '_', '.', '@' or '-'")
        try:
            parsed_role = Role(role.upper())
        except ValueError:
            raise KeysError(f"{at}: role {role!r}: expected VIEWER, OPERATOR or ADMIN") from None
        if not _SHA256.fullmatch(digest):
            raise KeysError(f"{at}: the third field must be the key's SHA-256 in hex (64 characters), "
                            "not the key itself; `python -m floe_dagster.api.auth NAME ROLE` prints one")
        if name in names:
            raise KeysError(f"{at}: name {name!r} is used by entry {names[name]} too")
        if digest.lower() in hashes:
            raise KeysError(f"{at}: the same key as entry {hashes[digest.lower()]}")
        names[name] = number
        hashes[digest.lower()] = number
        keys.append(ApiKey(name, parsed_role, digest.lower()))
    return keys


class _KeyTable(dict):
    """The keys by SHA-256; its repr (tracebacks, debuggers, logs) shows neither keys nor hashes."""

    def __repr__(self) -> str:
        names = ", ".join(sorted(key.name for key in self.values()))
        return f"<{len(self)} API key(s): {names}>"

    __str__ = __repr__


class KeyStore:
    """The configured keys. The file is re-read when it changes (a removed key stops working without
    a restart); when it becomes unreadable or invalid every authenticated call fails (closed)."""

    def __init__(self, settings: ApiSettings, environ: Mapping[str, str] | None = None,
                 database: ApiKeyTable | None = None, host: str = "127.0.0.1"):
        environ = os.environ if environ is None else environ
        self.settings = settings
        self.database = database  # the keys created over HTTP (create_app attaches the coordination database's)
        self.beyond_loopback = not is_loopback(host)  # the address the server listens on
        self._lock = threading.Lock()
        self._env_keys: list[ApiKey] = []
        if settings.keys_env:
            value = environ.get(settings.keys_env)
            if not value or not value.strip():
                raise KeysError(f"api.keys-env: environment variable {settings.keys_env} is not set or empty; "
                                "configured keys that turn out empty would leave the API open")
            entries = [(i, part) for i, part in enumerate(_ENV_SEPARATORS.split(value), start=1)]
            self._env_keys = parse_entries(entries, f"environment {settings.keys_env}")
        self._file_stamp: tuple[int, int] | None = None
        self._file_keys: list[ApiKey] = []
        self._file_error: str | None = None
        self._keys: dict[str, ApiKey] = _KeyTable()
        if settings.keys_file:
            self._reload_file(raise_errors=True)
        else:
            self._keys = self._merge(self._env_keys, [])
        if not self._keys and self.configured:
            raise KeysError(f"api: the configured keys ({self._where()}) hold no entry; "
                            "configured keys that turn out empty would leave the API open")

    @property
    def configured(self) -> bool:
        """Keys exist to check: floe.yaml configures some, or the database holds one."""
        return self.settings.keys_configured or (self.database is not None and self.database.count() > 0)

    @property
    def required(self) -> bool:
        """Every caller needs a valid key (read on every request): floe.yaml configures keys, a key was
        ever created in the database (all revoked since does not open the API again), or the server
        listens beyond loopback."""
        return (self.settings.keys_configured or self.beyond_loopback
                or (self.database is not None and self.database.ever_had_keys()))

    def principal(self, name: str, role: Role | None, key_id: str | None = None) -> Principal:
        return Principal(name, role, key_id, role_permissions(role, self.settings))

    def configured_admins(self) -> int:
        """floe.yaml's ADMIN keys (they never expire and are changed only in that file)."""
        return sum(1 for _, key in self.configured_keys() if key.role is Role.ADMIN)

    def configured_keys(self) -> list[tuple[str, ApiKey]]:
        """floe.yaml's keys with where each comes from (``file`` or ``env``), file first."""
        if self.settings.keys_file:
            with self._lock:
                self._reload_file()
        env = {key.name for key in self._env_keys}
        return [("env" if key.name in env else "file", key) for key in self._keys.values()]

    def _where(self) -> str:
        parts = []
        if self.settings.keys_file:
            parts.append(f"file {self.settings.keys_file}")
        if self.settings.keys_env:
            parts.append(f"environment {self.settings.keys_env}")
        return ", ".join(parts)

    @staticmethod
    def _merge(env_keys: list[ApiKey], file_keys: list[ApiKey]) -> dict[str, ApiKey]:
        merged: dict[str, ApiKey] = _KeyTable()
        names = set()
        for key in [*env_keys, *file_keys]:
            if key.name in names:
                raise KeysError(f"api: key name {key.name!r} is in both the keys file and the environment")
            if key.sha256 in merged:
                raise KeysError(f"api: the same key is in both the keys file and the environment ({key.name!r})")
            names.add(key.name)
            merged[key.sha256] = key
        return merged

    def _reload_file(self, raise_errors: bool = False) -> None:
        path = Path(self.settings.keys_file or "")
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._file_stamp and self._file_error is None:
                return
            text = path.read_text(encoding="utf-8")
            file_keys = parse_entries(list(enumerate(text.splitlines(), start=1)), f"api.keys-file {path}")
            if not file_keys and not self._env_keys:
                raise KeysError(f"api.keys-file {path}: holds no entry")
            keys = self._merge(self._env_keys, file_keys)
        except OSError as exc:
            error = f"api.keys-file {path}: cannot be read: {exc.strerror or exc}"
            if raise_errors:
                raise KeysError(error) from None
            self._file_error, self._file_stamp = error, None
            return
        except KeysError as exc:
            if raise_errors:
                raise
            self._file_error, self._file_stamp = str(exc), None
            return
        self._file_stamp, self._file_keys, self._keys, self._file_error = stamp, file_keys, keys, None

    def error(self) -> str | None:
        """Why the keys are unusable right now (the file changed into something invalid), or None."""
        if self.settings.keys_file:
            with self._lock:
                self._reload_file()
                return self._file_error
        return None

    def authenticate(self, presented: str | None) -> Principal | None:
        """The caller for a presented key; None when keys are required and it matches none."""
        if not self.required:
            return self.principal(ANONYMOUS, None)
        if not presented:
            return None
        if self.settings.keys_file:
            with self._lock:
                self._reload_file()
                if self._file_error:
                    return None
        digest = hash_key(presented)
        found = None
        for stored, key in self._keys.items():
            if hmac.compare_digest(stored, digest):
                found = key
        if found is not None:
            source = "env" if any(k.name == found.name for k in self._env_keys) else "file"
            return self.principal(found.name, found.role, f"{source}:{found.name}")
        return self._database_key(digest)

    def _database_key(self, digest: str) -> Principal | None:
        """A key created over HTTP: enabled and not expired; its last use is recorded."""
        if self.database is None:
            return None
        stored = self.database.by_hash(digest)
        now = datetime.now(timezone.utc)
        if stored is None or not stored.usable(now):
            return None
        if stored.last_used_at is None or now - stored.last_used_at >= LAST_USE_RESOLUTION:
            self.database.touch(stored.id, now)  # not a write per request
        return self.principal(stored.name, Role(stored.role), stored.id)

    def __repr__(self) -> str:
        return f"KeyStore({self.describe()})"

    def describe(self) -> str:
        if not self.configured:
            if self.required:
                return "no usable API keys (every key created over HTTP was revoked): every request is refused"
            return "no API keys (loopback only, every caller is 'anonymous')"
        stored = self.database.count() if self.database is not None else 0
        sources = [f"{len(self._keys)} API key(s) from {self._where()}"] if self.settings.keys_configured else []
        if stored:
            sources.append(f"{stored} created over HTTP (coordination database)")
        return "; ".join(sources)


def is_loopback(host: str) -> bool:
    text = host.strip().strip("[]")
    if text.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys_configured: bool) -> None:
    if keys_configured or is_loopback(host):
        return
    raise BindRefused(
        f"refusing to listen on {host}: no API keys are configured, so anyone who can reach the server "
        "could trigger maintenance. Listen on 127.0.0.1, localhost or ::1, or configure keys in floe.yaml "
        "(api: {keys-file: FILE} or api: {keys-env: VARIABLE}, entries name:VIEWER|OPERATOR|ADMIN:sha256hex; "
        "`python -m floe_dagster.api.auth NAME OPERATOR` makes one)"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[1].upper() not in Role.__members__ or not _NAME.fullmatch(args[0]):
        print("usage: python -m floe_dagster.api.auth NAME VIEWER|OPERATOR|ADMIN", file=sys.stderr)
        return 2
    key = new_key()
    print(f"key (give it to {args[0]}; it is not stored anywhere): {key}")
    print(f"entry for the keys file:  {args[0]}:{args[1].upper()}:{hash_key(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
