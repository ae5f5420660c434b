"""Maintenance policies: the model, loading from YAML/JSON files, validation, and precedence.

A policy file holds one policy (a mapping) or a list of them (a ``policies:`` key holding the list,
and several YAML documents, are accepted too); a folder is read file by file (``*.yaml``, ``*.yml``,
``*.json``, not recursively, hidden files skipped). Fields use the names of Floe's API (camelCase); a
file in Floe's PolicyLoader format (a ``policies:`` list of kebab-case policies) is translated into
them first and checked the same way (:mod:`floe_dagster.core.policy_formats`). Fields:

``name`` (required, unique across all files), ``description``, ``tablePattern`` (default ``*``, with a
warning), ``enabled`` (default true), ``mode`` (``live``, the default, or ``shadow``: the planner decides and
the ledger records, but no run is created; docs/automation.md), ``priority`` (int, default 0), ``tags`` (text → text, become
run tags ``dagster/floe.tag.<key>``; ``owner`` and ``team`` also name the table assets' owners), the
operation configs ``rewriteDataFiles``, ``expireSnapshots``, ``orphanCleanup``, ``rewriteManifests``,
``rewritePositionDeleteFiles``, ``computeStatistics``, ``tableProperties`` (Iceberg table property →
value: core/table_properties.py) each with its schedule ``<operation>Schedule``, ``triggerConditions``,
``healthThresholds`` and ``refRetention`` (the maximum age of branches and tags by name, which
``expireSnapshots`` runs apply: core/refs.py).

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
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import yaml

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
from floe_dagster.core.operation_config import OperationConfig, parse_operation_config
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.patterns import TablePattern
from floe_dagster.core.policy_formats import (
    FORMAT_NAMES,
    LOADER_FORMAT,
    TOP_LEVEL_FIELDS,
    PolicyEntry,
    file_format,
    kebab_lines,
    policy_entries,
    policy_label,
    translate_policy,
)
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
    one_line,
)

POLICY_FILE_SUFFIXES = (".yaml", ".yml", ".json")
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
        declared = self.configs.get(operation) if operation is Operation.APPLY_TABLE_PROPERTIES else None
        return evaluate_conditions(
            self.trigger_conditions, operation, metrics, last_success_start, now,
            small_file_size_bytes=self.health_thresholds.small_file_size_bytes,
            enabled=condition_based_triggering_enabled,
            declared_properties=getattr(declared, "properties", None),
        )

    def assess_health(self, metrics: TableMetrics, now: datetime) -> HealthAssessment:
        return assess_health(metrics, self.health_thresholds, now)

    def health_issues(self, metrics: TableMetrics, now: datetime) -> tuple[HealthIssue, ...]:
        """The planner's issues: the thresholds' and the stale refs' (both owe debt)."""
        stale = ref_issues(metrics.refs, self.ref_retention, metrics.properties, now)
        return (*health_issues(metrics, self.health_thresholds, now), *stale)

    def run_tags(self) -> dict[str, str]:
        return policy_tags_as_run_tags(self.tags)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
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
        return data


def policy_tags_as_run_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A policy's ``tags`` as Dagster run tags: ``{"team": "sales"}`` → ``{"dagster/floe.tag.team": "sales"}``
    (on the run page, not in the runs list: core/run_tags.py)."""
    return {RUN_TAG_PREFIX + key: value for key, value in tags.items()}


_EFFECTIVE_BY_PATTERNS: dict[tuple[tuple[str, str], ...], dict[TableName, str | None]] = {}
_EFFECTIVE_SETS_KEPT = 4
_EFFECTIVE_LOCK = threading.Lock()


class PolicySet:
    """All loaded policies; answers which one governs a table."""

    def __init__(self, policies: Iterable[Policy] = (), warnings: Iterable[str] = ()):
        self._policies = tuple(sorted(policies, key=lambda p: p.name))
        self.warnings = tuple(warnings)  # what loading them warned about, one line each
        self._by_name = {p.name: p for p in self._policies}
        if len(self._by_name) != len(self._policies):
            raise ValueError("policy names must be unique")
        self._enabled = tuple(sorted((p for p in self._policies if p.enabled), key=lambda p: p.precedence_key))
        # Which policy wins depends only on the enabled policies' patterns in precedence order. The
        # sensor loads a new PolicySet every tick; sets with the same patterns share their answers.
        matching_key = tuple((p.name, p.table_pattern.text) for p in self._enabled)
        with _EFFECTIVE_LOCK:  # sensors and API requests load policy sets in several threads
            self._effective: dict[TableName, str | None] = _EFFECTIVE_BY_PATTERNS.pop(matching_key, None) or {}
            _EFFECTIVE_BY_PATTERNS[matching_key] = self._effective  # most recent last
            while len(_EFFECTIVE_BY_PATTERNS) > _EFFECTIVE_SETS_KEPT:
                del _EFFECTIVE_BY_PATTERNS[next(iter(_EFFECTIVE_BY_PATTERNS))]

    @property
    def policies(self) -> tuple[Policy, ...]:
        return self._policies

    def __iter__(self) -> Iterator[Policy]:
        return iter(self._policies)

    def __len__(self) -> int:
        return len(self._policies)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Policy | None:
        return self._by_name.get(name)

    def matching(self, table: TableName, include_disabled: bool = False) -> list[Policy]:
        """Every policy whose pattern matches, the winner first (disabled ones last, when asked for)."""
        candidates = self._policies if include_disabled else self._enabled
        found = [p for p in candidates if p.matches(table)]
        return sorted(found, key=lambda p: (not p.enabled, p.precedence_key))

    def effective_policy(self, table: TableName) -> Policy | None:
        """The enabled matching policy with the highest priority × 1000 + specificity, then by name."""
        try:
            name = self._effective[table]
        except KeyError:
            winner = next((p for p in self._enabled if p.matches(table)), None)
            name = self._effective[table] = winner.name if winner is not None else None
        return self._by_name[name] if name is not None else None

    def cron_rules(self) -> list[tuple[str, Operation, str, str]]:
        """(policy name, operation, 5-field cron, time zone) for every enabled cron rule: one Dagster
        schedule each. A schedule with an interval is not a cron rule (the interval wins)."""
        rules = []
        for policy in self._enabled:
            for op in policy.enabled_operations():
                schedule = policy.schedules[op]
                if schedule.kind == "cron":
                    rules.append((policy.name, op, schedule.cron_5field, schedule.timezone))
        return sorted(rules, key=lambda r: (r[0], r[1].order))

    def to_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self._policies]


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
    for file in _policy_files(paths, problems):
        entries = _read_policy_file(file, problems)
        files.append(PolicyFile(file, file_format(entries), len(entries)))
        _collect(entries, file, problems, seen, policies, allowed)
    if problems.errors:
        return ValidationResult(problems.errors, problems.warnings, None, tuple(files))
    return ValidationResult([], problems.warnings, PolicySet(policies, problems.warnings), tuple(files))


def parse_policies_text(text: str, source: str = "<text>", allowed_properties: Iterable[str] = ()) -> PolicySet:
    """Policies from YAML or JSON text (tests, the HTTP API); raises PolicyError."""
    problems = Problems()
    policies: list[Policy] = []
    _collect(_parse_text(text, source, problems, json_file=False), source, problems, {}, policies,
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


def folder_policy_files(folder: Path) -> list[Path]:
    """The policy files a folder holds, as loading reads them: ``*.yaml``, ``*.yml``, ``*.json``, not
    recursively, hidden files skipped, by name."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.suffix.lower() in POLICY_FILE_SUFFIXES and not p.name.startswith("."))


def _policy_files(paths: Iterable[str | Path], problems: Problems) -> list[str]:
    files: list[str] = []
    seen: set[Path] = set()
    if isinstance(paths, (str, Path)):
        paths = [paths]
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            found = folder_policy_files(path)
            if not found:
                problems.warnings.append(f"{entry}: no policy files (*.yaml, *.yml, *.json) in this folder")
            candidates = found
        elif path.is_file():
            candidates = [path]
        else:
            problems.errors.append(f"{entry}: no such file or folder")
            continue
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                files.append(str(candidate))
    return files


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


def _read_policy_file(file: str, problems: Problems) -> list[PolicyEntry]:
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.errors.append(f"{file}: cannot read: {exc}")
        return []
    raws = _parse_text(text, file, problems, json_file=file.lower().endswith(".json"))
    if not raws and not problems.errors:
        problems.warnings.append(f"{file}: holds no policies")
    return raws


def _parse_text(text: str, source: str, problems: Problems, json_file: bool) -> list[PolicyEntry]:
    """The policies in one file, as written, each with its format (what is not a mapping is reported
    by parse_policy)."""
    if json_file:
        try:
            documents = [json.loads(text)] if text.strip() else []
        except json.JSONDecodeError as exc:
            problems.errors.append(f"{source}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}")
            return []
    else:
        try:
            documents = [d for d in yaml.load_all(text, Loader=_PolicyLoader) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
            problems.errors.append(one_line(f"{source}: {where}invalid YAML: {problem or exc}"))
            return []
    return policy_entries(documents, source, problems)


class _PolicyLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars where YAML 1.1 surprises: ``02:30`` is text (not the base-60
    number 150), only true/false are booleans (``name: off`` is the text "off", not false), and a
    duplicate key is an error (the last would silently win)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            keys: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (str, int, float, bool)) and key in keys:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"found duplicate key {key!r} (first at line {keys[key].line + 1})", key_node.start_mark)
                if isinstance(key, (str, int, float, bool)):
                    keys[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_PolicyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# Integers and floats again, without the base-60 forms (``190:20:30``).
_PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    list("-+0123456789"),
)
_PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def parse_policy(raw: Any, source: str, index: int, problems: Problems,
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
    bad_keys = [k for k in raw if not isinstance(k, str)]
    for key in bad_keys:
        at.error(f"field names must be text, got {describe(key)}")
    raw = {k: v for k, v in raw.items() if isinstance(k, str)}
    check_unknown(at, raw, TOP_LEVEL_FIELDS)

    if not isinstance(name, str) or not name.strip():
        at.child("name").error("is required (non-empty text)" if name is None else f"expected text, got {describe(name)}")
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
    enabled = get_bool(at, raw, "enabled", True)
    mode = get_enum(at, raw, "mode", (LIVE.upper(), SHADOW.upper()), LIVE.upper()).lower()
    priority = get_int(at, raw, "priority", 0)
    tags = _parse_tags(at, raw.get("tags"))

    configs: dict[Operation, OperationConfig] = {}
    schedules: dict[Operation, Schedule] = {}
    for op in ALL_OPERATIONS:
        if op.policy_key in raw:
            if raw[op.policy_key] is None:
                at.child(op.policy_key).warn("is empty (null), so the operation is not configured; write {} to "
                                             "configure it with defaults")
            else:
                config = parse_operation_config(at.child(op.policy_key), op, raw[op.policy_key])
                if config is not None:
                    configs[op] = config
        if raw.get(op.schedule_key) is not None:
            schedules[op] = parse_schedule(at.child(op.schedule_key), raw[op.schedule_key])
            if op not in configs and raw.get(op.policy_key) is None:
                at.child(op.schedule_key).warn(f"has no {op.policy_key} config, so it schedules nothing; add "
                                               f"{op.policy_key}: {{}} to run the operation with defaults")
        elif op in configs:
            at.child(op.policy_key).warn(f"has no {op.schedule_key}: it runs only when triggered by hand")

    check_envelope(at, pattern, configs, allowed_properties)  # locations inside the table, properties allowed
    conditions = None
    if raw.get("triggerConditions") is not None:
        conditions = parse_trigger_conditions(at.child("triggerConditions"), raw["triggerConditions"])
    thresholds = parse_health_thresholds(at.child("healthThresholds"), raw.get("healthThresholds"))
    ref_retention = parse_ref_retention(at.child("refRetention"), raw.get("refRetention"))
    if ref_retention and Operation.EXPIRE_SNAPSHOTS not in configs:
        at.child("refRetention").warn(f"is applied by {Operation.EXPIRE_SNAPSHOTS.policy_key} runs, which this policy "
                                      "does not configure: stale refs are reported, never removed")
    for op, schedule in schedules.items():
        rules = [k for k in ("cronExpression", "interval") if isinstance(raw[op.schedule_key], Mapping)
                 and raw[op.schedule_key].get(k) is not None]
        # tableProperties' own condition is the table's drift from them (core/conditions.py): not every tick.
        if op in configs and schedule.enabled and not rules and conditions is None \
                and op is not Operation.APPLY_TABLE_PROPERTIES:
            at.child(op.schedule_key).warn("has neither cronExpression nor interval and the policy has no "
                                           "triggerConditions: it is due on every tick (every minute)")

    if len(problems.errors) > before:
        return None
    return Policy(
        name=name, table_pattern=pattern, description=description, enabled=enabled, priority=priority,
        tags=tags, mode=mode, configs=configs, schedules=schedules, trigger_conditions=conditions,
        health_thresholds=thresholds, ref_retention=ref_retention, source=source, version=_version(raw),
    )


def _parse_tags(at: Location, raw: Any) -> dict[str, str]:
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


def _version(raw: Mapping[str, Any]) -> str:
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
