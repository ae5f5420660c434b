"""Maintenance policies: the model, loading from YAML/JSON files, validation, and precedence.

A policy file holds one policy (a mapping) or a list of them (a ``policies:`` key holding the list,
and several YAML documents, are accepted too); a folder is read file by file (``*.yaml``, ``*.yml``,
``*.json``, not recursively, hidden files skipped). Fields use the names of Floe's API (camelCase); a
file in Floe's PolicyLoader format (a ``policies:`` list of kebab-case policies) is translated into
them first and checked the same way (:mod:`floe_dagster.core.policy_formats`). Fields:

``name`` (required, unique across all files), ``description``, ``tablePattern`` (default ``*``, with a
warning), ``enabled`` (default true), ``mode`` (``live``, the default, or ``shadow``: the planner decides
and the ledger records, but no run is created; docs/automation.md), ``priority`` (int, default 0), ``tags``
(text → text, become run tags ``dagster/floe.tag.<key>``; ``owner`` and ``team`` also name the table
assets' owners), the operation configs, one per kind of the registry (core/operation_kinds/:
``rewriteDataFiles``, ``expireSnapshots``, ``orphanCleanup``, ``rewriteManifests``,
``rewritePositionDeleteFiles``, ``computeStatistics``, ``tableProperties`` (Iceberg table property →
value: core/table_properties.py), ...) each with its schedule ``<operation>Schedule``, ``triggerConditions``,
``healthThresholds``, ``refRetention`` (the maximum age of branches and tags by name, which
``expireSnapshots`` runs apply: core/refs.py) and ``ownerOverrides`` (the table properties a table's owner
may set to tune or pause its maintenance, and their bounds: core/owner_overrides.py).

An operation is *configured* when it has a config, and *enabled* when it also has a schedule whose
``enabled`` is not false. Each table gets one effective policy: the enabled matching policy with the
highest ``priority × 1000 + specificity`` (what Floe documents), ties broken by name.

Every problem is reported, as ``<file>: policy '<name>': <field.path>: <message>``; loading raises
:class:`PolicyError` rather than return a partly read set. The warnings (a Floe field accepted and
ignored, an operation without a schedule, ...) come with the set (``PolicySet.warnings``): the CLI's
``validate`` prints them and :mod:`floe_dagster.policies` logs them once per load.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from floe_dagster.core.conditions import (
    ConditionResult,
    TriggerConditions,
    evaluate_conditions,
    parse_trigger_conditions,
)
from floe_dagster.core.health_assessment import (
    HealthAssessment,
    HealthIssue,
    HealthThresholds,
    assess_health,
    health_issues,
    parse_health_thresholds,
)
from floe_dagster.core.envelope import check_policy as check_envelope
from floe_dagster.core.measurements import TableMetrics
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.owner_overrides import NONE_ALLOWED, OwnerOverridePolicy, OwnerOverrides, owner_overrides, \
    parse_owner_overrides
from floe_dagster.core.patterns import TablePattern
from floe_dagster.core.policy_files import (
    folder_policy_files,
    parse_text,
    policy_files,
    read_policy_file,
)
from floe_dagster.core.policy_formats import (
    FORMAT_NAMES,
    LOADER_FORMAT,
    TOP_LEVEL_FIELDS,
    PolicyEntry,
    file_format,
    kebab_lines,
    policy_label,
    translate_policy,
)
from floe_dagster.core.policy_set import PolicySet
from floe_dagster.core.refs import RefRetentionRule, parse_ref_retention, ref_issues
from floe_dagster.core.run_tags import POLICY_TAG_PREFIX
from floe_dagster.core.schedule import Schedule, parse_schedule
from floe_dagster.core.tables import TableName
from floe_dagster.core.validation import (
    Location,
    Problems,
    check_unknown,
    describe,
    get_bool,
    get_enum,
    get_int,
    get_str,
)

LIVE, SHADOW = "live", "shadow"  # a policy's ``mode``: its decisions create runs, or are only recorded
RUN_TAG_PREFIX = POLICY_TAG_PREFIX  # a policy tag's run tag: this + its key
# Dagster tag keys allow letters, digits, '_', '-', '.' and one '/' namespace (the prefix takes it):
# 63 characters after the '/'.
MAX_TAG_KEY_CHARS = 63 - len(RUN_TAG_PREFIX.split("/", 1)[1])
_TAG_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,%d}$" % MAX_TAG_KEY_CHARS)


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
    version: str = ""  # a hash of its definition (run tag core.run_tags.POLICY_VERSION)

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    @property
    def shadow(self) -> bool:
        """Its decisions are recorded as shadow (what would have run), never run."""
        return self.mode == SHADOW

    # -- operations -----------------------------------------------------------------------------

    def configured_operations(self) -> list[Operation]:
        """Operations with a config, in Floe's order (manual runs use these)."""
        return [op for op in ALL_OPERATIONS if op in self.configs]

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
        own, config = operation.spec.own_condition, self.configs.get(operation)
        return evaluate_conditions(
            self.trigger_conditions, operation, metrics, last_success_start, now,
            small_file_size_bytes=self.health_thresholds.small_file_size_bytes,
            enabled=condition_based_triggering_enabled,
            own_condition=(lambda m: own.check(config, m)) if own is not None and config is not None else None,
        )

    def assess_health(self, metrics: TableMetrics, now: datetime) -> HealthAssessment:
        return assess_health(metrics, self.health_thresholds, now)

    def health_issues(self, metrics: TableMetrics, now: datetime) -> tuple[HealthIssue, ...]:
        """The planner's issues: the thresholds' and the stale refs' (both owe debt)."""
        stale = ref_issues(metrics.refs, self.ref_retention, metrics.properties, now)
        return (*health_issues(metrics, self.health_thresholds, now), *stale)

    def overrides_for(self, properties: Mapping[str, str]) -> OwnerOverrides | None:
        """What a table's ``floe.*`` properties do under this policy (None: it has none; core/owner_overrides.py)."""
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
    (on the run page, not in the runs list: core/run_tags.py)."""
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
    declare (floe.yaml's ``envelope.allowed-table-properties``; core/envelope.py)."""
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
    description, pattern = _identity(at, raw, name)
    enabled = get_bool(at, raw, "enabled", True)
    mode = get_enum(at, raw, "mode", (LIVE.upper(), SHADOW.upper()), LIVE.upper()).lower()
    priority = get_int(at, raw, "priority", 0)
    tags = _parse_tags(at, raw.get("tags"))
    configs, schedules = _operations(at, raw)
    check_envelope(at, pattern, configs, allowed_properties)  # locations inside the table, properties allowed
    conditions = None
    if raw.get("triggerConditions") is not None:
        conditions = parse_trigger_conditions(at.child("triggerConditions"), raw["triggerConditions"])
    thresholds = parse_health_thresholds(at.child("healthThresholds"), raw.get("healthThresholds"))
    ref_retention = _ref_retention(at, raw, configs)
    owner = parse_owner_overrides(at.child("ownerOverrides"), raw.get("ownerOverrides"))
    _warn_due_every_tick(at, raw, configs, schedules, conditions)
    if len(problems.errors) > before:
        return None
    return Policy(
        name=name, table_pattern=pattern, description=description, enabled=enabled, priority=priority,
        tags=tags, mode=mode, configs=configs, schedules=schedules, trigger_conditions=conditions,
        health_thresholds=thresholds, ref_retention=ref_retention, owner_overrides=owner, source=source,
        version=_version(raw),
    )


def _identity(at: Location, raw: Mapping[str, object], name: object) -> tuple[str, TablePattern]:
    """The name checked (it is already the policy's label), its description and its table pattern."""
    if not isinstance(name, str) or not name.strip():
        at.child("name").error("is required (non-empty text)" if name is None
                               else f"expected text, got {describe(name)}")
    elif name != name.strip():
        at.child("name").error("must not start or end with spaces")
    description = get_str(at, raw, "description", "", non_empty=False)
    pattern = TablePattern.parse("*")
    if "tablePattern" not in raw or raw["tablePattern"] is None:
        at.child("tablePattern").warn("not set: the policy matches every table")
    else:
        try:
            pattern = TablePattern.parse(raw["tablePattern"])
        except ValueError as exc:
            at.child("tablePattern").error(str(exc))
    return description, pattern


def _operations(at: Location, raw: Mapping[str, object]) -> tuple[dict[Operation, OperationConfig],
                                                              dict[Operation, Schedule]]:
    """Every kind's config (``rewriteDataFiles``...) and schedule (``rewriteDataFilesSchedule``), in Floe's order."""
    configs: dict[Operation, OperationConfig] = {}
    schedules: dict[Operation, Schedule] = {}
    for op in ALL_OPERATIONS:
        if op.policy_key in raw:
            if raw[op.policy_key] is None:
                at.child(op.policy_key).warn("is empty (null), so the operation is not configured; write {} to "
                                             "configure it with defaults")
            else:
                config = op.spec.parse(at.child(op.policy_key), raw[op.policy_key])
                if config is not None:
                    configs[op] = config
        if raw.get(op.schedule_key) is not None:
            schedules[op] = parse_schedule(at.child(op.schedule_key), raw[op.schedule_key])
            if op not in configs and raw.get(op.policy_key) is None:
                at.child(op.schedule_key).warn(f"has no {op.policy_key} config, so it schedules nothing; add "
                                               f"{op.policy_key}: {{}} to run the operation with defaults")
        elif op in configs:
            at.child(op.policy_key).warn(f"has no {op.schedule_key}: it runs only when triggered by hand")
    return configs, schedules


def _ref_retention(at: Location, raw: Mapping[str, object],
                   configs: Mapping[Operation, OperationConfig]) -> tuple[RefRetentionRule, ...]:
    """``refRetention``, with a warning when no operation of the policy applies it (snapshot expiry)."""
    rules = parse_ref_retention(at.child("refRetention"), raw.get("refRetention"))
    applying = [op for op in ALL_OPERATIONS if op.spec.applies_ref_retention]
    if rules and not any(op in configs for op in applying):
        at.child("refRetention").warn(f"is applied by {' or '.join(op.policy_key for op in applying)} runs, which "
                                      "this policy does not configure: stale refs are reported, never removed")
    return rules


def _warn_due_every_tick(at: Location, raw: Mapping[str, object], configs: Mapping[Operation, OperationConfig],
                         schedules: Mapping[Operation, Schedule], conditions: TriggerConditions | None) -> None:
    """A schedule without a cron or an interval, in a policy without trigger conditions, is due every tick;
    not a kind whose own condition decides (tableProperties: the table's drift from them), nor one with an
    ``afterWrite`` rule (only writes make it due)."""
    for op, schedule in schedules.items():
        rules = [k for k in ("cronExpression", "interval") if isinstance(raw[op.schedule_key], Mapping)
                 and raw[op.schedule_key].get(k) is not None]
        if op in configs and schedule.enabled and not rules and conditions is None \
                and op.spec.own_condition is None and schedule.after_write is None:
            at.child(op.schedule_key).warn("has neither cronExpression nor interval and the policy has no "
                                           "triggerConditions: it is due on every tick (every minute)")


def _parse_tags(at: Location, raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    here = at.child("tags")
    if not isinstance(raw, Mapping):
        here.error(f"expected a mapping of text to text, got {describe(raw)}")
        return {}
    tags: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _TAG_KEY.match(key):
            here.error(f"tag key {describe(key)} must be 1-{MAX_TAG_KEY_CHARS} letters, digits, '_', '-' or '.' (it "
                       f"becomes the Dagster run tag {RUN_TAG_PREFIX}<key>)")
        elif not isinstance(value, str):
            here.child(key).error(f"expected text (quote it in YAML), got {describe(value)}")
        else:
            tags[key] = value
    return tags


def _version(raw: Mapping[str, object]) -> str:
    """A hash of the definition, without ``mode``: switching a policy from shadow to live changes what
    creates runs, not what they do, so the live runs carry the version the shadow decisions were made by."""
    raw = {k: v for k, v in raw.items() if k != "mode"}
    canonical = json.dumps(raw, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# -- the planner's view -------------------------------------------------------------------------------


__all__ = [
    "Policy", "PolicySet", "PolicyError", "PolicyFile", "ValidationResult", "load_policies", "validate_policy_paths",
    "parse_policies_text", "parse_policy", "policy_tags_as_run_tags", "folder_policy_files",
    "TOP_LEVEL_FIELDS", "RUN_TAG_PREFIX", "LIVE", "SHADOW",
]
