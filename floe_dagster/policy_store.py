"""The policies the HTTP API reads and writes: files stay the source of truth.

Every policy from the loaded paths (:func:`floe_dagster.policies.policy_paths`) can be read. Writes go
to ``api.policy-directory`` only, one file per policy, ``<name>.json``, holding the policy in Floe's
camelCase JSON as the API takes it. A policy from any other file (or from a file of the directory that
holds something else) is *not managed*: writing or deleting it is refused (:class:`PolicyNotManaged`).

A write is checked with the real parser (:func:`floe_dagster.core.policies.policy.parse_policy`, whose
messages name the field; the safety envelope's rules included, with floe.yaml's allowed table
properties), an absolute location against its table's location in the catalog (``table_location``,
core/policies/envelope.py), and against the other policies' names before anything is written; then, under
a lock file in the directory (``.floe-api.lock``, so two servers or threads never interleave their
check-and-write), the file is written to a hidden temporary file in the same folder, synced and renamed
over the target: a reader (the sensor's next tick, the CLI, this server) sees the old file or the new
one, never half of one. Hidden files are never read as policies.

A policy's id is ``uuid5(POLICY_ID_NAMESPACE, name)``: stable across restarts and the same on every
server, so a script may list and then delete by id. A rename changes it.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections import Counter
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping

from floe_dagster.core.policies.envelope import Refusal, absolute_location_fields, catalog_refusals, policy_field
from floe_dagster.core.basics.patterns import MAX_PATTERN_LENGTH
from floe_dagster.core.policies.policy import TOP_LEVEL_FIELDS, Policy, PolicyError, parse_policy, validate_policy_paths
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import Problems
from floe_dagster.errors import (
    POLICY_REQUEST_BODY,
    InvalidPolicyRequest,
    LockHeld,
    PolicyConflict,
    PolicyNotFound,
    PolicyNotManaged,
    PolicyStoreBusy,
    PolicyWritesDisabled,
    UnknownTable,
)
from floe_dagster.file_locks import hold_file_lock, wait_for_lock
from floe_dagster.policies import forget_loaded_policies, load_policy_set, policy_paths
from floe_dagster.settings import Settings

POLICY_ID_NAMESPACE = uuid.UUID("37721a42-c799-559e-8f3a-eed0801ac120")  # uuid5(URL, .../api/v1/policies)
READ_ONLY_FIELDS = ("id", "createdAt", "updatedAt")  # in a response; ignored in a request body
LOCK_FILE = ".floe-api.lock"
LOCK_TIMEOUT_S = 10.0
MAX_NAME_BYTES = 250  # the file name <name>.json stays within the usual 255-byte limit
NEW_FILE_MODE = 0o644


def policy_id(name: str) -> str:
    return str(uuid.uuid5(POLICY_ID_NAMESPACE, name))


# -- what is read -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredPolicy:
    policy: Policy
    id: str
    file: str  # the file it came from
    managed: bool  # the API may write and delete it
    modified: float | None  # the file's mtime (None: it vanished meanwhile)
    warnings: tuple[str, ...] = ()  # the parser's warnings (writes only)

    @property
    def name(self) -> str:
        return self.policy.name


def _mtime(file: str) -> float | None:
    try:
        return os.stat(file).st_mtime
    except OSError:
        return None


class PolicyStore:
    """``table_location``: a table's location as the catalog has it (UnknownTable when it does not exist),
    to check a policy's absolute locations against; without it, a policy giving one is refused."""

    def __init__(self, settings: Settings, table_location: Callable[[TableName], str] | None = None):
        self.settings = settings
        directory = settings.api.policy_directory
        self.directory: Path | None = Path(directory) if directory else None
        self.table_location = table_location
        self.allowed_properties = settings.envelope.allowed_table_properties

    def managed_file(self, name: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{name}.json"

    # -- reads --------------------------------------------------------------------------------------

    def all(self) -> list[StoredPolicy]:
        """Every loaded policy (PolicyError when the files are invalid), by name."""
        return self._stored(load_policy_set(self.settings).policies)

    def find(self, key: str, by_name: bool = True) -> StoredPolicy:
        """The policy whose id is ``key``, else (``by_name``) the one named ``key``."""
        return self._find(self.all(), key, by_name)

    def _stored(self, policies: tuple[Policy, ...] | list[Policy]) -> list[StoredPolicy]:
        per_file = Counter(_resolved(p.source) for p in policies)
        return [StoredPolicy(p, policy_id(p.name), p.source, self._is_managed(p, per_file[_resolved(p.source)]),
                             _mtime(p.source)) for p in policies]

    def _is_managed(self, policy: Policy, policies_in_file: int) -> bool:
        return (self.directory is not None and policies_in_file == 1
                and _resolved(policy.source) == _resolved(str(self.managed_file(policy.name))))

    @staticmethod
    def _find(stored: list[StoredPolicy], key: str, by_name: bool) -> StoredPolicy:
        for entry in stored:
            if entry.id == key:
                return entry
        if by_name:
            for entry in stored:
                if entry.name == key:
                    return entry
        raise PolicyNotFound(key)

    # -- writes -------------------------------------------------------------------------------------

    def create(self, body: Mapping[str, object], check: Callable[[Policy], None] | None = None) -> StoredPolicy:
        """A new policy: 400 problems first (nothing is read or written), then its name against the
        policies on disk, under the lock, then ``check`` (the API's: the tables it matches), as Floe orders them."""
        self._require_directory()
        document = _request_fields(body)
        pattern = document.get("tablePattern")
        if pattern is None or (isinstance(pattern, str) and not pattern.strip()):
            raise InvalidPolicyRequest([("tablePattern", "Table pattern is required")])
        policy, warnings = _checked(document, self.allowed_properties)
        with self._locked():
            current = self._fresh()
            self._check_name_free(current, policy.name, replacing=None)
            if check is not None:
                check(policy)
            self._check_locations(policy)
            return self._write(document, policy, warnings)

    def update(self, key: str, body: Mapping[str, object], check: Callable[[Policy], None] | None = None
               ) -> StoredPolicy:
        """Floe's partial update: a field absent or null keeps its value; one given replaces it whole.
        Checked in Floe's order: the policy (404, or 409 when not managed), the body (400), the name (409),
        then ``check`` when the body gives a tablePattern."""
        self._require_directory()
        changes = {k: v for k, v in _request_fields(body).items() if v is not None}
        with self._locked():
            current = self._fresh()
            target = self._writable_target(current, key)
            document = {**_read_document(target.file), **changes}
            policy, warnings = _checked(document, self.allowed_properties)
            self._check_name_free(current, policy.name, replacing=target)
            if check is not None and "tablePattern" in changes:
                check(policy)
            self._check_locations(policy)  # whatever changed: the table may have moved meanwhile
            stored = self._write(document, policy, warnings)
            if policy.name != target.name:  # a rename: the new file is in place, then the old one goes
                self._remove(Path(target.file))
            return stored

    def delete(self, key: str) -> StoredPolicy:
        self._require_directory()
        with self._locked():
            target = self._writable_target(self._fresh(), key)
            self._remove(Path(target.file))
            return target

    def _require_directory(self) -> None:
        if self.directory is None:
            raise PolicyWritesDisabled(
                "Policies are read-only here: the API writes policies only to a policy directory. Set "
                "api.policy-directory in floe.yaml (a folder; it is read with the other policies) and "
                "restart the server")

    def _check_locations(self, policy: Policy) -> None:
        """The policy's absolute locations against its one table's location in the catalog (the parser
        already refused them with any other pattern): 400 naming each field outside it, or when the
        table cannot be found."""
        if self.table_location is None:
            refusals = tuple(Refusal(policy_field(op, name), f"{value!r} is absolute and cannot be checked here: write "
                                     "it relative to the table's location (e.g. 'data')")
                             for op, name, value in absolute_location_fields(policy.configs))
        else:
            refusals = catalog_refusals(policy.table_pattern, policy.configs, self.settings.catalog.name,
                                        self._location_or_none)
        if refusals:
            raise InvalidPolicyRequest([(r.field, r.why) for r in refusals])

    def _location_or_none(self, table: TableName) -> str | None:
        assert self.table_location is not None
        try:
            return self.table_location(table)
        except UnknownTable:
            return None

    def _fresh(self) -> list[StoredPolicy]:
        """The policies on disk now (not this process's cached set); PolicyError when they are invalid."""
        result = validate_policy_paths(policy_paths(self.settings), self.allowed_properties)
        if result.errors:
            raise PolicyError(result.errors)
        assert result.policies is not None
        return self._stored(result.policies.policies)

    def _writable_target(self, current: list[StoredPolicy], key: str) -> StoredPolicy:
        target = self._find(current, key, by_name=False)  # writes address a policy by its id, as Floe
        if not target.managed:
            raise PolicyNotManaged(
                f"Policy '{target.name}' comes from {target.file}, which is not managed by the API (it writes "
                f"only {self.managed_file('<name>')}, one policy per file): edit that file instead", target.file)
        return target

    def _check_name_free(self, current: list[StoredPolicy], name: str, replacing: StoredPolicy | None) -> None:
        if any(entry.name == name and entry is not replacing for entry in current):
            raise PolicyConflict(f"Policy with name '{name}' already exists")
        path = self.managed_file(name)
        if replacing is not None and _resolved(str(path)) == _resolved(replacing.file):
            return
        if path.exists():  # a file the loader refused to read, or another name on a case-insensitive disk
            raise PolicyConflict(f"Cannot write policy '{name}': the file {path} already exists and does not "
                                 f"hold that policy alone; rename or remove it first")

    def _write(self, document: Mapping[str, object], policy: Policy, warnings: tuple[str, ...]) -> StoredPolicy:
        path = self.managed_file(policy.name)
        _write_atomically(path, _serialize(document))
        forget_loaded_policies()
        policy = replace(policy, source=str(path))
        return StoredPolicy(policy, policy_id(policy.name), str(path), True, _mtime(str(path)), warnings)

    @staticmethod
    def _remove(path: Path) -> None:
        path.unlink()
        _sync_folder(path.parent)
        forget_loaded_policies()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The directory's lock file, held around a check-and-write (created with the directory; the
        loaders skip hidden files)."""
        assert self.directory is not None
        path = self.directory / LOCK_FILE
        try:
            with wait_for_lock(lambda: hold_file_lock(path, str(path)), LOCK_TIMEOUT_S, poll_s=0.01):
                yield
        except LockHeld:
            raise PolicyStoreBusy(f"another writer has held {path} for {LOCK_TIMEOUT_S:g} s; try again") from None


# -- the request ----------------------------------------------------------------------------------------


def _request_fields(body: Mapping[str, object]) -> dict[str, object]:
    """The body without the read-only fields a client may send back from a response."""
    return {k: v for k, v in body.items() if k not in READ_ONLY_FIELDS}


def _check_request_rules(document: Mapping[str, object]) -> None:
    """What the parser does not know: the name becomes a file name, and Floe's pattern length limit
    with Floe's message."""
    name = document.get("name")
    if isinstance(name, str) and name.strip():
        problem = None
        if "/" in name or "\\" in name:
            problem = "must not contain '/' or '\\' (the policy is written to the file <name>.json)"
        elif name.startswith("."):
            problem = "must not start with '.' (the policy is written to the file <name>.json)"
        elif not name.isprintable():
            problem = "must not contain control characters"
        elif len(name.encode("utf-8")) > MAX_NAME_BYTES:
            problem = f"is {len(name.encode('utf-8'))} bytes long (UTF-8); at most {MAX_NAME_BYTES} are allowed"
        if problem:
            raise InvalidPolicyRequest([("name", problem)])
    pattern = document.get("tablePattern")
    if isinstance(pattern, str) and len(pattern) > MAX_PATTERN_LENGTH:
        message = f"Pattern too long (max {MAX_PATTERN_LENGTH} characters): {len(pattern)}"
        raise InvalidPolicyRequest([("tablePattern", message)], message)


def _checked(document: Mapping[str, object], allowed_properties: tuple[str, ...]) -> tuple[Policy, tuple[str, ...]]:
    """The policy the file will hold, parsed by the real parser from the very text to be written."""
    _check_request_rules(document)
    try:
        raw = json.loads(_serialize(document))
    except ValueError as exc:  # NaN or Infinity: not JSON
        raise InvalidPolicyRequest([("", f"numbers must be finite ({exc})")]) from None
    problems = Problems()
    policy = parse_policy(raw, POLICY_REQUEST_BODY, 1, problems, allowed_properties)
    name = raw.get("name")
    label = f"policy '{name}'" if isinstance(name, str) and name.strip() else "policy #1"
    if problems.errors or policy is None:
        raise InvalidPolicyRequest([_field_and_message(line, label) for line in problems.errors])
    return policy, tuple(": ".join(p for p in _field_and_message(line, label) if p) for line in problems.warnings)


def _field_and_message(line: str, label: str) -> tuple[str, str]:
    """``body: policy 'x': priority: expected …`` → (``priority``, ``expected …``)."""
    rest = line.removeprefix(f"{POLICY_REQUEST_BODY}: {label}: ")
    field, sep, message = rest.partition(": ")
    return (field, message) if sep else ("", rest)


def _serialize(document: Mapping[str, object]) -> str:
    order = {name: index for index, name in enumerate(TOP_LEVEL_FIELDS)}
    ordered = dict(sorted(document.items(), key=lambda item: order.get(item[0], len(order))))
    return json.dumps(ordered, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _read_document(file: str) -> dict[str, object]:
    """A managed file's one policy, as written (the fields a PUT leaves alone)."""
    data = json.loads(Path(file).read_text(encoding="utf-8"))
    if isinstance(data, Mapping) and set(data) == {"policies"}:
        data = data["policies"]
    if isinstance(data, list):
        (data,) = data  # managed: the file holds this policy alone
    return dict(data)


# -- the file system --------------------------------------------------------------------------------------


def _resolved(file: str) -> Path:
    return Path(file).resolve()


def _write_atomically(path: Path, text: str) -> None:
    """A hidden temporary file in the same folder, synced, then renamed over ``path``."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    fd, temporary = tempfile.mkstemp(prefix=".floe-api-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make a rename or an unlink durable (POSIX: sync the folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform that cannot open folders
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


__all__ = ["PolicyStore", "StoredPolicy", "policy_id", "POLICY_ID_NAMESPACE"]
