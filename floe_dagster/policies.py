"""The policies as the adapters see them: loaded from the settings' paths and the HTTP API's policy
directory (re-read when a file changes, so a policy change takes effect on the next tick and the next
CLI call), and resolved to the config of one operation on one table."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.owner_overrides import NONE_ALLOWED, OwnerOverridePolicy, OwnerOverrides
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.policies.policy import Policy, PolicySet, load_policies
from floe_dagster.core.facts.refs import RefRetentionRule
from floe_dagster.core.runs.run_tags import Origin, PolicyFacts, run_tags
from floe_dagster.core.basics.tables import TableName
from floe_dagster.settings import Settings

_cache: dict[tuple, PolicySet] = {}
_log = logging.getLogger(__name__)


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
                # The inode too: a file replaced atomically (the API's writes) within one tick of the
                # file-system clock, at the same size, still reads as changed.
                entries.append((str(file), stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return tuple(entries)


def policy_paths(settings: Settings) -> tuple[str, ...]:
    """Where the policies are read from: the settings' ``policies``, and the HTTP API's
    ``api.policy-directory`` when they do not list it (skipped while it does not exist: the API creates
    it with its first policy)."""
    paths = tuple(settings.policies)
    directory = settings.api.policy_directory
    if directory and Path(directory).is_dir() and not any(_same_path(directory, p) for p in paths):
        paths += (directory,)
    return paths


def _same_path(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def load_policy_set(settings: Settings) -> PolicySet:
    """The policy set (PolicyError listing every problem when a file is bad: never a half-read set). Its
    warnings are logged when the files are read, so once per change of the files in each process."""
    paths = policy_paths(settings)
    allowed = settings.envelope.allowed_table_properties
    key = (paths, allowed, _fingerprint(paths))
    found = _cache.get(key)  # one read: another thread (an API write) may clear the cache meanwhile
    if found is None:
        found = load_policies(paths, allowed)
        for warning in found.warnings:
            _log.warning("policy warning: %s", warning)
        _cache.clear()
        _cache[key] = found
    return found


def forget_loaded_policies() -> None:
    """Drop this process's loaded set: the next :func:`load_policy_set` reads the files again (the
    HTTP API calls it after each write; other processes see the change in the files' fingerprint)."""
    _cache.clear()


@dataclass(frozen=True)
class ResolvedOperation:
    policy: PolicyFacts  # name None: no enabled policy matches the table
    config: OperationConfig | None  # None: nothing configures this operation for this table
    why_not: str = ""
    # EXPIRE_SNAPSHOTS: the policy's refRetention, set on the table's refs before the expiry.
    ref_retention: tuple[RefRetentionRule, ...] = ()
    # floe.yaml's envelope.allowed-table-properties: checked again before the run sets any (core/policies/envelope.py).
    allowed_properties: tuple[str, ...] = ()
    # The policy's ownerOverrides, and what the table's floe.* properties did under it once the run read them.
    owner_allow: OwnerOverridePolicy = NONE_ALLOWED
    owner_overrides: OwnerOverrides | None = None
    # ORPHAN_CLEANUP: the nested tables' folders its listing leaves out (the policy's nestedTables, as the
    # safety envelope found them inside the table's location: core/storage/table_location.py).
    listing_exclusions: tuple[str, ...] = ()

    @property
    def policy_name(self) -> str | None:
        return self.policy.name

    @property
    def policy_version(self) -> str:
        return self.policy.version


def resolve_operation(settings: Settings, table: TableName, op: Operation,
                      policies: PolicySet | None = None) -> ResolvedOperation:
    """The effective policy's config of one operation on one table, and what the run's tags say of it.
    ``policies``: an already loaded set (a tick's, a run's), so a caller resolving many tables reads
    the policy files' fingerprint once, not once per table."""
    policy = (policies or load_policy_set(settings)).effective_policy(table)
    facts = policy_facts(settings, policy, op)
    if policy is None:
        return ResolvedOperation(facts, None, "no enabled policy matches this table")
    config = policy.config(op)
    if config is None:
        return ResolvedOperation(facts, None, f"policy '{policy.name}' does not configure {op.value} ({op.policy_key})")
    return ResolvedOperation(facts, config,
                             ref_retention=policy.ref_retention if op.spec.applies_ref_retention() else (),
                             allowed_properties=settings.envelope.allowed_table_properties,
                             owner_allow=policy.owner_overrides)


def policy_facts(settings: Settings, policy: Policy | None, op: Operation) -> PolicyFacts:
    """What the run's tags say of a table's effective policy (already found) for one operation."""
    default_timeout_s = settings.maintenance.default_timeout_hours * 3600
    if policy is None:
        return PolicyFacts(None, timeout_s=default_timeout_s)
    schedule = policy.schedule(op)
    return PolicyFacts(policy.name, policy.version, policy.run_tags(),
                       schedule.timeout_hours * 3600 if schedule else default_timeout_s)


def configured_operations(settings: Settings, table: TableName) -> list[Operation]:
    policy = load_policy_set(settings).effective_policy(table)
    return policy.configured_operations() if policy else []


def run_tags_for(settings: Settings, table: TableName, op: Operation, origin: Origin) -> dict[str, str]:
    """The run tags of one (table, operation) a person launches (core.runs.run_tags.run_tags)."""
    return run_tags(table, op, resolve_operation(settings, table, op).policy, origin)


def matching_tables(pattern: str, tables: Sequence[TableName]) -> list[TableName]:
    parsed = TablePattern.parse(pattern)
    return [table for table in tables if parsed.matches(table)]
