"""Maintenance policies: the model, loading from YAML/JSON files, validation, and precedence.

A policy file holds one policy (a mapping) or a list of them (a ``policies:`` key holding the list,
and several YAML documents, are accepted too); a folder is read file by file (``*.yaml``, ``*.yml``,
``*.json``, not recursively, hidden files skipped). Fields use the names of Floe's API (camelCase); a
file in Floe's PolicyLoader format (a ``policies:`` list of kebab-case policies) is translated into
them first and checked the same way (:mod:`floe_dagster.core.policies.policy_formats`). Fields:

``name`` (required, unique across all files), ``description``, ``tablePattern`` (default ``*``, with a
warning), ``enabled`` (default true), ``mode`` (``live``, the default, or ``shadow``: the planner decides
and the ledger records, but no run is created; docs/automation.md), ``priority`` (int, default 0), ``tags``
(text → text, become run tags ``dagster/floe.tag.<key>``; ``owner`` and ``team`` also name the table
assets' owners), the operation configs, one per kind of the registry (core/operation_kinds/:
``rewriteDataFiles``, ``expireSnapshots``, ``orphanCleanup``, ``rewriteManifests``,
``rewritePositionDeleteFiles``, ``computeStatistics``, ``tableProperties`` (Iceberg table property →
value: core/facts/table_properties.py), ...) each with its schedule ``<operation>Schedule``, ``triggerConditions``,
``healthThresholds``, ``refRetention`` (the maximum age of branches and tags by name, which
``expireSnapshots`` runs apply: core/facts/refs.py) and ``ownerOverrides`` (the table properties a table's owner
may set to tune or pause its maintenance, and their bounds: core/policies/owner_overrides.py).

An operation is *configured* when it has a config, and *enabled* when it also has a schedule whose
``enabled`` is not false. Each table gets one effective policy: the enabled matching policy with the
highest ``priority × 1000 + specificity`` (what Floe documents), ties broken by name.

Every problem is reported, as ``<file>: policy '<name>': <field.path>: <message>``; loading raises
:class:`PolicyError` rather than return a partly read set. The warnings (a Floe field accepted and
ignored, an operation without a schedule, ...) come with the set (``PolicySet.warnings``): the CLI's
``validate`` prints them and :mod:`floe_dagster.policies` logs them once per load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from floe_dagster.core.policies.conditions import (
    ConditionResult,
    TriggerConditions,
    evaluate_conditions,
    parse_trigger_conditions,
)
from floe_dagster.core.facts.health_assessment import (
    HealthAssessment,
    HealthIssue,
    HealthThresholds,
    assess_health,
    health_issues,
    parse_health_thresholds,
)
from floe_dagster.core.policies.envelope import check_policy as check_envelope
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.owner_overrides import (
    NONE_ALLOWED, OwnerOverridePolicy, OwnerOverrides, owner_overrides, parse_owner_overrides,
)
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.policies.policy_fields import (
    RUN_TAG_PREFIX, definition_version, read_identity, read_operations, read_ref_retention, read_tags,
    warn_due_every_tick,
)
from floe_dagster.core.policies.policy_files import (
    folder_policy_files,
    parse_text,
    policy_files,
    read_policy_file,
)
from floe_dagster.core.policies.policy_formats import (
    FORMAT_NAMES,
    LOADER_FORMAT,
    TOP_LEVEL_FIELDS,
    PolicyEntry,
    file_format,
    kebab_lines,
    policy_label,
    translate_policy,
)
from floe_dagster.core.policies.policy_set import PolicySet
from floe_dagster.core.facts.refs import RefRetentionRule, ref_issues
from floe_dagster.core.schedules.schedule import Schedule
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import (
    Location,
    Problems,
    check_unknown,
    describe,
    get_bool,
    get_enum,
    get_int,
)

LIVE, SHADOW = "live", "shadow"  # a policy's ``mode``: its decisions create runs, or are only recorded


class PolicyError(ValueError):
    """Policies that cannot be loaded; ``errors`` holds every problem, one line each."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class Policy:
    name: str
    table_pattern: TablePattern
    description: str = ""
    enabled: bool = True
    priority: int = 0
    tags: Mapping[str, str] = field(default_factory=dict)
    mode: str = LIVE  # LIVE or SHADOW
    configs: Mapping[Operation, OperationConfig] = field(default_factory=dict)
    schedules: Mapping[Operation, Schedule] = field(default_factory=dict)
    trigger_conditions: TriggerConditions | None = None
    health_thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    ref_retention: tuple[RefRetentionRule, ...] = ()  # refRetention, in the policy's order
    owner_overrides: OwnerOverridePolicy = NONE_ALLOWED  # ownerOverrides: the table properties owners may set
    source: str = ""  # the file it came from
    version: str = ""  # a hash of its definition (run tag core.runs.run_tags.POLICY_VERSION)

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    @property
    def shadow(self) -> bool:
        """Its decisions are recorded as shadow (what would have run), never run."""
        return self.mode == SHADOW

    @cached_property
    def has_after_write(self) -> bool:
        """One of its schedules has an after-write rule (its verdict reads the event log). Kept on the instance
        (not a field: equality and to_json ignore it): the planner asks for every table of every tick."""
        return any(schedule.after_write is not None for schedule in self.schedules.values())

    # -- operations -----------------------------------------------------------------------------

    def configured_operations(self) -> list[Operation]:
        """Operations with a config, in Floe's order (manual runs use these)."""
        return list(self.operations)

    @cached_property
    def operations(self) -> tuple[Operation, ...]:
        """:meth:`configured_operations`, kept on the instance (not a field: equality and to_json ignore it): the
        planner asks for every table of every tick."""
        return tuple(op for op in ALL_OPERATIONS if op in self.configs)

    def is_operation_enabled(self, operation: Operation) -> bool:
        schedule = self.schedules.get(operation)
        return operation in self.configs and schedule is not None and schedule.enabled

    def enabled_operations(self) -> list[Operation]:
        """Operations the scheduler runs: a config and an enabled schedule."""
        return [op for op in ALL_OPERATIONS if self.is_operation_enabled(op)]

    def config(self, operation: Operation) -> OperationConfig | None:
        """The operation's typed config (``RewriteDataFilesConfig`` and so on), or None."""
        return self.configs.get(operation)

    def schedule(self, operation: Operation) -> Schedule | None:
        return self.schedules.get(operation)

    # -- matching -------------------------------------------------------------------------------

    def matches(self, table: TableName) -> bool:
        return self.table_pattern.matches(table)

    @property
    def specificity(self) -> int:
        return self.table_pattern.specificity

    @property
    def effective_priority(self) -> int:
        return self.priority * 1000 + self.specificity

    @property
    def precedence_key(self) -> tuple[int, str]:
        """Sorts the policy that wins first."""
        return (-self.effective_priority, self.name)

    # -- gates ----------------------------------------------------------------------------------

    def evaluate_conditions(self, operation: Operation, metrics: TableMetrics | None,
                            last_success_start: datetime | None, now: datetime,
                            condition_based_triggering_enabled: bool = True) -> ConditionResult:
        spec, config = operation.spec, self.configs.get(operation)
        return evaluate_conditions(
            self.trigger_conditions, operation, metrics, last_success_start, now,
            small_file_size_bytes=self.health_thresholds.small_file_size_bytes,
            enabled=condition_based_triggering_enabled,
            own_condition=(lambda m: spec.due(config, m)) if spec.has_own_condition and config is not None else None,
        )

    def assess_health(self, metrics: TableMetrics, now: datetime) -> HealthAssessment:
        return assess_health(metrics, self.health_thresholds, now)

    def health_issues(self, metrics: TableMetrics, now: datetime) -> tuple[HealthIssue, ...]:
        """The planner's issues: the thresholds' and the stale refs' (both owe debt)."""
        stale = ref_issues(metrics.refs, self.ref_retention, metrics.properties, now)
        return (*health_issues(metrics, self.health_thresholds, now), *stale)

    def overrides_for(self, properties: Mapping[str, str]) -> OwnerOverrides | None:
        """What a table's ``floe.*`` properties do under this policy (None: it has none;
        core/policies/owner_overrides.py)."""
        return owner_overrides(self.name, self.owner_overrides, self.configs, properties)

    def run_tags(self) -> dict[str, str]:
        return policy_tags_as_run_tags(self.tags)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "name": self.name, "description": self.description, "tablePattern": self.table_pattern.text,
            "enabled": self.enabled, "mode": self.mode, "priority": self.priority, "tags": dict(self.tags),
            "specificity": self.specificity, "effectivePriority": self.effective_priority,
            "source": self.source, "version": self.version,
        }
        for op in ALL_OPERATIONS:
            if op in self.configs:
                data[op.policy_key] = self.configs[op].to_json()
            if op in self.schedules:
                data[op.schedule_key] = self.schedules[op].to_json()
        if self.trigger_conditions is not None:
            data["triggerConditions"] = self.trigger_conditions.to_json()
        data["healthThresholds"] = self.health_thresholds.to_json()
        if self.ref_retention:
            data["refRetention"] = [rule.to_json() for rule in self.ref_retention]
        if self.owner_overrides.allow:
            data["ownerOverrides"] = self.owner_overrides.to_json()
        return data


def policy_tags_as_run_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A policy's ``tags`` as Dagster run tags: ``{"team": "sales"}`` → ``{"dagster/floe.tag.team": "sales"}``
    (on the run page, not in the runs list: core/runs/run_tags.py)."""
    return {RUN_TAG_PREFIX + key: value for key, value in tags.items()}


@dataclass(frozen=True)
class PolicyFile:
    """One file read: its format (``policy_formats.API_FORMAT`` or ``LOADER_FORMAT``, None when it holds
    no policies) and how many policies it holds."""

    path: str
    format: str | None
    count: int

    def describe(self) -> str:
        """``Floe API format, camelCase: 2 policies``, or ``no policies``."""
        if self.format is None:
            return "no policies"
        return f"{FORMAT_NAMES[self.format]}: {self.count} polic{'y' if self.count == 1 else 'ies'}"


@dataclass(frozen=True)
class ValidationResult:
    errors: list[str]
    warnings: list[str]
    policies: PolicySet | None  # None when there are errors
    files: tuple[PolicyFile, ...] = ()  # every file read, in order

    @property
    def ok(self) -> bool:
        return not self.errors


# -- loading ----------------------------------------------------------------------------------------


def load_policies(paths: Iterable[str | Path], allowed_properties: Iterable[str] = ()) -> PolicySet:
    """Every policy under ``paths`` (files or folders), with its warnings; raises PolicyError listing
    every problem. ``allowed_properties``: floe.yaml's ``envelope.allowed-table-properties``."""
    result = validate_policy_paths(paths, allowed_properties)
    if result.errors:
        raise PolicyError(result.errors)
    assert result.policies is not None
    return result.policies


def validate_policy_paths(paths: Iterable[str | Path], allowed_properties: Iterable[str] = ()) -> ValidationResult:
    """Read and check the policies; never raises for a problem in them (see ``.errors``)."""
    allowed = frozenset(allowed_properties)
    problems = Problems()
    policies: list[Policy] = []
    seen: dict[str, str] = {}
    files: list[PolicyFile] = []
    for file in policy_files(paths, problems):
        entries = read_policy_file(file, problems)
        files.append(PolicyFile(file, file_format(entries), len(entries)))
        _collect(entries, file, problems, seen, policies, allowed)
    if problems.errors:
        return ValidationResult(problems.errors, problems.warnings, None, tuple(files))
    return ValidationResult([], problems.warnings, PolicySet(policies, problems.warnings), tuple(files))


def parse_policies_text(text: str, source: str = "<text>", allowed_properties: Iterable[str] = ()) -> PolicySet:
    """Policies from YAML or JSON text (tests, the HTTP API); raises PolicyError."""
    problems = Problems()
    policies: list[Policy] = []
    _collect(parse_text(text, source, problems, json_file=False), source, problems, {}, policies,
             frozenset(allowed_properties))
    if problems.errors:
        raise PolicyError(problems.errors)
    return PolicySet(policies, problems.warnings)


def _collect(entries: list[PolicyEntry], source: str, problems: Problems, seen: dict[str, str],
             policies: list[Policy], allowed: frozenset[str] = frozenset()) -> None:
    """Parse one file's policies; a name already taken (valid policy or not) is an error."""
    for index, entry in enumerate(entries, start=1):
        raw = entry.raw
        name = raw.get("name") if isinstance(raw, Mapping) else None
        duplicate = isinstance(name, str) and name in seen
        if duplicate:
            where = "earlier in this file" if seen[name] == source else f"in {seen[name]}"
            Location(problems, f"{source}: policy '{name}'", ("name",)).error(
                f"duplicate policy name, already defined {where}")
        policy = _parse_entry(entry, source, index, problems, allowed)
        if isinstance(name, str) and not duplicate:
            seen[name] = source
        if policy is not None and not duplicate:
            policies.append(policy)


def _parse_entry(entry: PolicyEntry, source: str, index: int, problems: Problems,
                 allowed: frozenset[str]) -> Policy | None:
    """A policy in either format: a PolicyLoader-format one is translated, parsed as the API format's
    mapping (its version hashes that mapping), and its messages name its keys as written."""
    if entry.format != LOADER_FORMAT or not isinstance(entry.raw, Mapping):
        return parse_policy(entry.raw, source, index, problems, allowed)
    prefix = f"{source}: {policy_label(entry.raw, index)}"
    translation_errors = len(problems.errors)
    translated, paths = translate_policy(entry.raw, Location(problems, prefix))  # messages as written
    parsed = Problems()
    policy = parse_policy(translated, source, index, parsed, allowed)
    problems.errors.extend(kebab_lines(parsed.errors, prefix, paths))
    problems.warnings.extend(kebab_lines(parsed.warnings, prefix, paths))
    return None if len(problems.errors) > translation_errors else policy


def parse_policy(raw: object, source: str, index: int, problems: Problems,
                 allowed_properties: Iterable[str] = ()) -> Policy | None:
    """One policy from its raw mapping; problems are recorded and None is returned when any.
    ``allowed_properties``: the table properties the safety envelope lets this deployment's policies
    declare (floe.yaml's ``envelope.allowed-table-properties``; core/policies/envelope.py)."""
    before = len(problems.errors)
    if not isinstance(raw, Mapping):
        problems.errors.append(f"{source}: policy #{index}: expected a policy (a mapping of fields), got "
                               f"{describe(raw)}")
        return None
    name = raw.get("name")
    at = Location(problems, f"{source}: {policy_label(raw, index)}")
    for key in (k for k in raw if not isinstance(k, str)):
        at.error(f"field names must be text, got {describe(key)}")
    raw = {k: v for k, v in raw.items() if isinstance(k, str)}
    check_unknown(at, raw, TOP_LEVEL_FIELDS)
    description, pattern = read_identity(at, raw, name)
    enabled = get_bool(at, raw, "enabled", True)
    mode = get_enum(at, raw, "mode", (LIVE.upper(), SHADOW.upper()), LIVE.upper()).lower()
    priority = get_int(at, raw, "priority", 0)
    tags = read_tags(at, raw.get("tags"))
    configs, schedules = read_operations(at, raw)
    check_envelope(at, pattern, configs, allowed_properties)  # locations inside the table, properties allowed
    conditions = None
    if raw.get("triggerConditions") is not None:
        conditions = parse_trigger_conditions(at.child("triggerConditions"), raw["triggerConditions"])
    thresholds = parse_health_thresholds(at.child("healthThresholds"), raw.get("healthThresholds"))
    ref_retention = read_ref_retention(at, raw, configs)
    owner = parse_owner_overrides(at.child("ownerOverrides"), raw.get("ownerOverrides"))
    warn_due_every_tick(at, raw, configs, schedules, conditions)
    if len(problems.errors) > before:
        return None
    return Policy(
        name=name, table_pattern=pattern, description=description, enabled=enabled, priority=priority,
        tags=tags, mode=mode, configs=configs, schedules=schedules, trigger_conditions=conditions,
        health_thresholds=thresholds, ref_retention=ref_retention, owner_overrides=owner, source=source,
        version=definition_version(raw),
    )


# -- the planner's view -------------------------------------------------------------------------------


__all__ = [
    "Policy", "PolicySet", "PolicyError", "PolicyFile", "ValidationResult", "load_policies", "validate_policy_paths",
    "parse_policies_text", "parse_policy", "policy_tags_as_run_tags", "folder_policy_files",
    "TOP_LEVEL_FIELDS", "LIVE", "SHADOW",
]
