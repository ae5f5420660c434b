"""The policies as the adapters see them: loaded from the settings' paths (re-read when a file
changes, so a policy change takes effect on the next tick and the next CLI call), and resolved to
the config of one operation on one table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from floe_dagster.core.operations import Operation
from floe_dagster.core.patterns import TablePattern
from floe_dagster.core.policy import PolicySet, load_policies
from floe_dagster.core.tables import TableName
from floe_dagster.core import run_tags as T
from floe_dagster.settings import Settings

_cache: dict[tuple, PolicySet] = {}


def _fingerprint(paths: Sequence[str]) -> tuple:
    """Names, sizes and modification times of every policy file: cheap to compute every tick."""
    entries = []
    for path in paths:
        root = Path(path)
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for file in files:
            try:
                stat = file.stat()
            except OSError:
                entries.append((str(file), None))
                continue
            if file.is_file():
                entries.append((str(file), stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


def load_policy_set(settings: Settings) -> PolicySet:
    """The policy set (PolicyError listing every problem when a file is bad: never a half-read set)."""
    key = (tuple(settings.policies), _fingerprint(settings.policies))
    if key not in _cache:
        _cache.clear()
        _cache[key] = load_policies(settings.policies)
    return _cache[key]


@dataclass(frozen=True)
class ResolvedOperation:
    policy_name: str | None
    policy_version: str
    config: dict[str, Any] | None  # None: nothing configures this operation for this table
    why_not: str = ""
    tags: dict[str, str] | None = None


def resolve_operation(settings: Settings, table: TableName, op: Operation) -> ResolvedOperation:
    policy = load_policy_set(settings).effective_policy(table)
    if policy is None:
        return ResolvedOperation(None, "", None, "no enabled policy matches this table")
    config = policy.config(op)
    if config is None:
        return ResolvedOperation(policy.name, policy.version, None,
                                 f"policy '{policy.name}' does not configure {op.value} ({op.policy_key})")
    return ResolvedOperation(policy.name, policy.version, config, tags=policy.run_tags())


def configured_operations(settings: Settings, table: TableName) -> list[Operation]:
    policy = load_policy_set(settings).effective_policy(table)
    return policy.configured_operations() if policy else []


def policy_run_tags(settings: Settings, table: TableName, op: Operation) -> dict[str, str]:
    """``floe/policy-version`` and the policy's ``tags`` as ``floe/tag.<key>``."""
    resolved = resolve_operation(settings, table, op)
    tags = dict(resolved.tags or {})
    if resolved.policy_version:
        tags[T.POLICY_VERSION] = resolved.policy_version
    return tags


def matching_tables(pattern: str, tables: Sequence[TableName]) -> list[TableName]:
    parsed = TablePattern.parse(pattern)
    return [table for table in tables if parsed.matches(table)]
