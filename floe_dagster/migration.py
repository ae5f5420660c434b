"""``floe-dagster import-floe``: every policy of a running Floe server (or of ``floe-dagster serve``),
read with ``GET /api/v1/policies`` page by page, written as one validated policy file each. What a
policy becomes, and what it cannot carry, is :mod:`floe_dagster.core.floe_migration`'s; this module
does the HTTP and the files."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floe_dagster.core.floe_migration import ImportedPolicy, file_names, imported_policy, policy_file_text
from floe_dagster.core.policy import PolicyError, validate_policy_paths

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


def fetch_policies(url: str, key: str | None) -> list[dict[str, Any]]:
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
            raise MigrationError(f"{address}: the server refused the request (HTTP {exc.code}{detail}); {hint}") from None
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


def import_policies(responses: list[dict[str, Any]], to: Path, overwrite: bool = False) -> ImportReport:
    """One file per policy in ``to``. Nothing is written when a target exists and ``overwrite`` is false
    (MigrationError naming them); a policy that does not validate is not written (``invalid``)."""
    report = ImportReport(full=any(isinstance(r.get("floe"), dict) for r in responses))
    ready: list[tuple[ImportedPolicy, Any]] = []
    for response in responses:
        policy = imported_policy(response)
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
    to.mkdir(parents=True, exist_ok=True)
    for (policy, text), target, (_, renamed) in zip(ready, targets, names):
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_text(text.text, encoding="utf-8")
        os.replace(temporary, target)
        notes = [n for n in (f"file name: {renamed}" if renamed else "", text.note) if n]
        report.written.append((str(target), f"policy '{policy.name}'" + (f" ({'; '.join(notes)})" if notes else "")))
    if targets:
        checked = validate_policy_paths(targets)  # the files as written, together: names unique, all load
        if checked.errors:
            raise MigrationError("the written files do not load: " + "; ".join(checked.errors))
        report.warnings = checked.warnings
    return report
