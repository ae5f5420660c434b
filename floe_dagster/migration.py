"""``floe-dagster import-floe``: every policy of a running Floe server (or of ``floe-dagster serve``),
read with ``GET /api/v1/policies`` page by page, written as one validated policy file each. What a
policy becomes, and what it cannot carry, is :mod:`floe_dagster.core.foreign.floe_migration`'s; this module
does the HTTP and the files.

The files are written into a staging folder beside the target first and validated there together
with the policy files the target already holds (policy names unique across all of them, every file
loads), as the code location would read the folder; only then are they moved in. On any problem the
target is left as it was."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floe_dagster.core.foreign.floe_migration import ImportedPolicy, file_names, imported_policy, policy_file_text
from floe_dagster.core.policies.policy import PolicyError, folder_policy_files, validate_policy_paths

API_KEY_HEADER = "X-API-Key"  # Floe's (and floe-dagster's) API key header
PAGE_SIZE = 100  # Floe's largest page
TIMEOUT_S = 30.0


class MigrationError(Exception):
    """The import cannot go on (server unreachable, key refused, files in the way); the message says why."""


@dataclass
class ImportReport:
    written: list[tuple[str, str]] = field(default_factory=list)  # (file, what to say about it)
    lost: list[str] = field(default_factory=list)  # what did not carry over, "policy 'x': field: why"
    invalid: list[str] = field(default_factory=list)  # policies not written: every problem
    warnings: list[str] = field(default_factory=list)  # the written files' policy warnings
    full: bool = False  # the server gave full definitions (floe-dagster's)

    def print_lines(self, read_line: str, to: str) -> None:
        """What ``import-floe`` and ``import`` print: what was read, each file written, what was not carried
        over (stdout); the warnings and the problems that kept policies out (stderr)."""
        print(read_line)
        for file, what in self.written:
            print(f"wrote {file}: {what}")
        for line in self.lost:
            print(f"not carried over: {line}")
        for line in self.warnings:
            print(f"warning: {line}", file=sys.stderr)
        for line in self.invalid:
            print(line, file=sys.stderr)
        print(f"{len(self.written)} policy file(s) in {to}; list it under policies: in floe.yaml"
              + (f"; {len(self.invalid)} problem(s) kept policies out" if self.invalid else ""))


def policies_url(url: str) -> str:
    """The list endpoint from a server's base URL (``http://floe:9091``), with or without ``/api/v1``."""
    base = url.rstrip("/")
    for tail in ("/api/v1/policies", "/api/v1"):
        base = base.removesuffix(tail)
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise MigrationError(f"--url {url!r}: expected the server's http:// or https:// address, e.g. "
                             "http://floe.example.com:9091")
    return base + "/api/v1/policies"


def fetch_policies(url: str, key: str | None) -> list[dict[str, object]]:
    """Every policy, following Floe's paging (``limit``/``offset``, ``hasMore``, ``total``)."""
    endpoint, found = policies_url(url), []
    while True:
        page = _get_json(f"{endpoint}?limit={PAGE_SIZE}&offset={len(found)}", key)
        policies = page.get("policies") if isinstance(page, dict) else None
        if not isinstance(policies, list):
            raise MigrationError(f"{endpoint}: not Floe's policy list (no 'policies' list in the answer)")
        found += policies
        total = page.get("total")
        if not policies or not page.get("hasMore") or (isinstance(total, int) and len(found) >= total):
            return found


def _get_json(address: str, key: str | None) -> Any:
    request = urllib.request.Request(address, headers={"Accept": "application/json",
                                                       **({API_KEY_HEADER: key} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            body = answer.read()
    except urllib.error.HTTPError as exc:
        detail = _error_text(exc)
        if exc.code in (401, 403):
            hint = "pass an API key with --key" if not key else "check --key (and that its role may read policies)"
            raise MigrationError(
                f"{address}: the server refused the request (HTTP {exc.code}{detail}); {hint}") from None
        raise MigrationError(f"{address}: HTTP {exc.code}{detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MigrationError(f"{address}: cannot reach the server ({reason}); check --url and that it runs") from None
    try:
        return json.loads(body)
    except ValueError:
        raise MigrationError(f"{address}: the answer is not JSON: is this a Floe server?") from None


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        return ""
    message = body.get("error") or body.get("message") if isinstance(body, dict) else None
    return f": {message}" if message else ""


def import_policies(responses: list[dict[str, object]], to: Path, overwrite: bool = False) -> ImportReport:
    """One file per policy in ``to``. Nothing is written when a target exists and ``overwrite`` is false,
    or when the files do not load together with the policy files already in ``to`` (MigrationError
    naming them); a policy that does not validate on its own is not written (``invalid``)."""
    report = write_policies([imported_policy(response) for response in responses], to, overwrite)
    report.full = any(isinstance(r.get("floe"), dict) for r in responses)
    return report


def write_policies(policies: list[ImportedPolicy], to: Path, overwrite: bool = False,
                   command: str = "import-floe") -> ImportReport:
    """The policies as one file each in ``to``, validated in a staging folder beside it first (with the
    files ``to`` keeps), as :func:`import_policies` says; ``command`` names the staging folder."""
    report = ImportReport()
    ready: list[tuple[ImportedPolicy, Any]] = []
    for policy in policies:
        report.lost += [f"policy '{policy.name}': {line}" for line in policy.lost]
        try:
            ready.append((policy, policy_file_text(policy)))
        except PolicyError as exc:
            report.invalid += [f"policy '{policy.name}' not written: {line}" for line in exc.errors]
    names = file_names([p.name for p, _ in ready], [text.suffix for _, text in ready])
    targets = [to / name for name, _ in names]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise MigrationError(f"{len(existing)} file(s) already exist, nothing was written (pass --overwrite to "
                             f"replace them): {', '.join(existing)}")
    if not targets:
        return report
    if to.exists() and not to.is_dir():
        raise MigrationError(f"--to {to}: is a file, not a folder; nothing was written")
    staging = Path(tempfile.mkdtemp(prefix=f".{to.name}.{command}-", dir=_nearest_folder(to.parent)))
    try:
        for (_, text), target in zip(ready, targets):
            (staging / target.name).write_text(text.text, encoding="utf-8")
        report.warnings = _validate_together(staging, to, targets)
        to.mkdir(parents=True, exist_ok=True)
        for target in targets:
            _move_in(staging / target.name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for (policy, text), target, (_, renamed) in zip(ready, targets, names):
        report.written.append((str(target), f"policy '{policy.name}'" + _file_notes(policy, text, renamed)))
    return report


def _file_notes(policy: ImportedPolicy, text: Any, renamed: str) -> str:
    disabled = policy.disabled_operations
    why = ("see the comment in the file" if policy.disabled_reason
           else "Floe's API returns no options for operations that delete")
    notes = [n for n in (f"file name: {renamed}" if renamed else "", text.note,
                         f"{' and '.join(op.policy_key for op in disabled)} written disabled, commented out "
                         f"under the reason: {why}" if disabled else "") if n]
    return f" ({'; '.join(notes)})" if notes else ""


def _nearest_folder(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists (the staging folder's place: the target's file system)."""
    while not path.is_dir() and path.parent != path:
        path = path.parent
    return path


def _validate_together(staging: Path, to: Path, targets: list[Path]) -> list[str]:
    """The staged files checked with the policy files of ``to`` that stay (the ones not replaced), as the
    code location will read the folder; the staged files' warnings, or MigrationError naming the files
    at their places in ``to``."""
    replaced = {target.name for target in targets}
    staying = [p for p in folder_policy_files(to) if p.name not in replaced] if to.is_dir() else []
    checked = validate_policy_paths([*staying, *(staging / target.name for target in targets)])

    def placed(message: str) -> str:
        return message.replace(str(staging) + os.sep, str(to) + os.sep)

    if checked.errors:
        what = f"together with the {len(staying)} policy file(s) already in {to}" if staying else "together"
        raise MigrationError(f"the imported files do not load {what}, nothing was written: "
                             + "; ".join(placed(error) for error in checked.errors))
    return [placed(warning) for warning in checked.warnings if str(staging) in warning]


def _move_in(staged: Path, target: Path) -> None:
    """A staged file put in place in one step (a rename; across file systems, a copy beside it renamed)."""
    try:
        os.replace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        temporary = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(staged, temporary)
        os.replace(temporary, target)
