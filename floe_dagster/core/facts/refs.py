"""Branches and tags other than ``main``: their age, what they alone keep alive, when they are stale, and
the policy's ``refRetention`` rules that let snapshot expiry remove them.

**Why.** Iceberg's ``expire_snapshots`` keeps every snapshot a ref needs: a tag's snapshot, and a
branch's ancestry under the branch's own retention. A forgotten branch or tag therefore pins
snapshots (and the data and delete files they reference) that main's retention would have removed,
and nothing shows it. Iceberg removes a non-main ref itself when its head snapshot is older than the
ref's ``max-ref-age-ms`` (else the table's ``history.expire.max-ref-age-ms``, by default never).

**Pinned snapshots** (:func:`pinned_snapshots`), Iceberg 1.11's ``RemoveSnapshots`` rules applied to
the metadata file alone: a branch retains its head's ancestors while fewer than its
``min-snapshots-to-keep`` are kept or the ancestor is not older than its ``max-snapshot-age-ms`` (each
defaulting to the table's ``history.expire.min-snapshots-to-keep`` / ``max-snapshot-age-ms``, 1 and
5 days); a tag retains its one snapshot. What a ref *alone keeps* is what it retains minus what main
retains under the same rules, measured at collection time (the table's properties, not a policy's
``retainLast``/``maxSnapshotAge``, so one record serves every policy).

**Pinned bytes** (:func:`pinned_file_bytes`, full tier only): the live data and delete files of the
manifests those snapshots list that main's current snapshot does not list, data files also dropped
when main's current snapshot still has them (a path hash, so a rewritten manifest does not count its
files twice). Cheap: the pinned snapshots' manifest lists, and only the manifests main does not share,
each read once and cached by path like main's own. It is compared with main's *current* files, not
every snapshot main retains, so it may include files that main's own older retained snapshots keep
for a while too: an upper bound of what removing the ref frees now, and what it frees once main's
retention has passed them.

**Stale** (:func:`ref_issues`): a ref whose head is older than its limit: the first matching
``refRetention`` rule of the table's policy, else the ref's own ``max-ref-age-ms``, else the table's
``history.expire.max-ref-age-ms`` (bounded: never under floe's minimum, 7 days; core/facts/expiry_defaults.py).
A ref with no limit is listed with its age and what it keeps, and is never an issue.

**refRetention** (a policy key): ``[{pattern: "audit-*", maxAge: P30D, type: branch|tag|any}]``.
``pattern`` is a glob over the ref's name (``*``, ``?``, ``[...]``, case-sensitive); the first rule
matching a ref's name and type gives its maximum age. ``main`` is never matched. An
``EXPIRE_SNAPSHOTS`` run sets each matching ref's ``max-ref-age-ms`` to the rule's age (only where it
differs) before it calls ``expire_snapshots``, which then removes the refs older than that.

**Undone when the rule goes** (:func:`retention_changes`, :func:`recorded_ages`). The ages floe set are
recorded in the table's own property ``floe.ref-retention.set-ages`` (JSON: ref name → the age floe set
and the one the ref had before), written in the same commit as the refs. It lives with the table, so it
survives restarts, a new coordination database and another floe deployment, and the owner can read it.
An expiry run whose policy has no rule for a ref any more puts back the age the ref had before floe
set it (none: the ref keeps no age of its own, so it never expires by age) — but only while the ref
still has the age floe set: an age the owner set since, or one floe never set, is never touched. A
ref gone (removed by the expiry, or dropped) leaves the record at the next run. A record that does not
parse is ignored: floe then forgets what it set and clears nothing (the owner's side of the doubt).
The same record holds floe's minimum (:data:`GUARD_RULE`): while the table's
``history.expire.max-ref-age-ms`` is below it, each ref it would decide gets the minimum as its own
age, taken back the same way once the property no longer is.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from floe_dagster.core.basics.durations import format_iso_duration, format_wait, parse_iso_duration
from floe_dagster.core.facts.expiry_defaults import FLOE_MINIMUM, ref_age_default
from floe_dagster.core.facts.health_assessment import HealthIssue, IssueType, Severity
from floe_dagster.core.basics.localtime import as_utc
from floe_dagster.core.facts.measurements import RefFacts, format_bytes
from floe_dagster.core.basics.validation import Location, describe, get_str, mapping_items

MAIN = "main"
BRANCH, TAG, ANY = "branch", "tag", "any"
REF_TYPES = (BRANCH, TAG, ANY)
RULE_FIELDS = ("pattern", "maxAge", "type")

# Iceberg's table properties and their defaults (TableProperties), as RemoveSnapshots reads them.
MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1

PINNED_METHOD = (
    "snapshots: what the ref retains under Iceberg's expire_snapshots rules (its own or the table's "
    "history.expire.* settings) minus what main retains, at collection time; bytes (full tier): live files "
    "of the manifests only those snapshots list, minus data files main's current snapshot still has"
)


# -- policy rules ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefRetentionRule:
    """One ``refRetention`` entry: refs named like ``pattern`` (of ``type``) may be ``max_age`` old."""

    pattern: str
    max_age: timedelta
    type: str = ANY

    @property
    def max_age_ms(self) -> int:
        return int(self.max_age.total_seconds() * 1000)

    def matches(self, name: str, ref_type: str) -> bool:
        """``main`` never matches, whatever the pattern."""
        return name != MAIN and self.type in (ANY, ref_type) and fnmatch.fnmatchcase(name, self.pattern)

    def to_json(self) -> dict[str, object]:
        return {"pattern": self.pattern, "maxAge": format_iso_duration(self.max_age), "type": self.type}


def rule_for(rules: Iterable[RefRetentionRule], name: str, ref_type: str) -> RefRetentionRule | None:
    """The first rule matching the ref (list order decides, as a policy author reads it)."""
    return next((rule for rule in rules if rule.matches(name, ref_type)), None)


def parse_ref_retention(at: Location, raw: object) -> tuple[RefRetentionRule, ...]:
    """A policy's ``refRetention`` list; every problem is reported at ``at``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        at.error(f"expected a list of rules such as [{{pattern: \"audit-*\", maxAge: P30D}}], got {describe(raw)}")
        return ()
    rules = []
    for here, mapping in mapping_items(at, raw, RULE_FIELDS, "a rule (pattern, maxAge, type)"):
        before = len(here.problems.errors)
        pattern = get_str(here, mapping, "pattern")
        if pattern is None and "pattern" not in mapping:
            here.child("pattern").error("is required: a glob over ref names, such as audit-*")
        elif pattern is not None and pattern.strip() == MAIN:
            here.child("pattern").error("matches only main, which is never expired; name the other refs")
        max_age = _max_age(here, mapping)
        ref_type = get_str(here, mapping, "type", ANY)
        if isinstance(ref_type, str) and ref_type.lower() not in REF_TYPES:
            here.child("type").error(f"expected one of {', '.join(REF_TYPES)}, got {ref_type!r}")
        if len(here.problems.errors) == before and pattern is not None and max_age is not None:
            rules.append(RefRetentionRule(pattern.strip(), max_age, ref_type.lower()))
    return tuple(rules)


def _max_age(at: Location, mapping: Mapping[str, object]) -> timedelta | None:
    value = mapping.get("maxAge")
    here = at.child("maxAge")
    if value is None:
        here.error("is required: an ISO-8601 duration such as P30D")
        return None
    if not isinstance(value, str):
        here.error(f"expected an ISO-8601 duration such as P30D, got {describe(value)}")
        return None
    try:
        age = parse_iso_duration(value)
    except ValueError as exc:
        here.error(str(exc))
        return None
    if age.total_seconds() < 0.001:
        here.error(f"must be at least one millisecond, got {value!r} (zero would remove every matching ref)")
        return None
    return age


# -- what was measured -----------------------------------------------------------------------------------


class SnapshotNode(NamedTuple):
    parent_id: int | None
    timestamp_ms: int


class RefHead(NamedTuple):
    """A ref as the retention rules need it."""

    type: str
    snapshot_id: int
    max_snapshot_age_ms: int | None = None
    min_snapshots_to_keep: int | None = None


def _int_property(properties: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(properties.get(key, default))
    except (TypeError, ValueError):
        return default


def retained_by(head: RefHead, snapshots: Mapping[int, SnapshotNode], now_ms: int,
                properties: Mapping[str, str]) -> set[int]:
    """The snapshots ``expire_snapshots`` keeps for one ref (RemoveSnapshots.computeBranchSnapshotsToRetain)."""
    if head.type == TAG:
        return {head.snapshot_id} if head.snapshot_id in snapshots else set()
    max_age = head.max_snapshot_age_ms
    if max_age is None:
        max_age = _int_property(properties, MAX_SNAPSHOT_AGE_MS, DEFAULT_MAX_SNAPSHOT_AGE_MS)
    keep = head.min_snapshots_to_keep
    if keep is None:
        keep = _int_property(properties, MIN_SNAPSHOTS_TO_KEEP, DEFAULT_MIN_SNAPSHOTS_TO_KEEP)
    older_than = now_ms - max_age
    kept: set[int] = set()
    current: int | None = head.snapshot_id
    while current is not None and current in snapshots and current not in kept:
        node = snapshots[current]
        if len(kept) < keep or node.timestamp_ms >= older_than:
            kept.add(current)
            current = node.parent_id
        else:
            break
    return kept


def pinned_snapshots(snapshots: Mapping[int, SnapshotNode], refs: Mapping[str, RefHead], now_ms: int,
                     properties: Mapping[str, str]) -> dict[str, set[int]]:
    """Each non-main ref → the snapshots it retains that main does not (module docstring)."""
    main = refs.get(MAIN)
    by_main = retained_by(main, snapshots, now_ms, properties) if main is not None else set()
    return {name: retained_by(head, snapshots, now_ms, properties) - by_main
            for name, head in refs.items() if name != MAIN}


def data_file_hashes(summaries: Iterable[Mapping[str, Any]]) -> set[int]:
    """The path hashes of the data files in reduced manifests (main's current snapshot's)."""
    return {entry[4] for summary in summaries if summary["content"] == 0 for entry in summary["files"]}


def pinned_file_bytes(summaries: Iterable[Mapping[str, Any]], main_data_files: set[int]) -> tuple[int, int]:
    """(files, bytes) of reduced manifests (iceberg/metadata_reduction.summarize_manifest) that main's current
    snapshot does not list: data files by path hash, once each and not when main still has them; delete
    files all (their summaries keep no path of their own)."""
    seen: set[int] = set()
    files = size = 0
    for summary in summaries:
        for entry in summary["files"]:
            if summary["content"] == 0:
                path_hash = entry[4]
                if path_hash in main_data_files or path_hash in seen:
                    continue
                seen.add(path_hash)
                files, size = files + 1, size + entry[1]
            else:
                files, size = files + 1, size + entry[2]
    return files, size


# -- staleness -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefLimit:
    max_age_ms: int
    source: str  # "policy", "ref", "table" or FLOE_MINIMUM (the table's property, below it)
    rule: RefRetentionRule | None = None

    def describe(self) -> str:
        age = format_age(self.max_age_ms)
        if self.source == "policy":
            return f"policy max {age}"
        if self.source == "ref":
            return f"its own max-ref-age {age}"
        if self.source == FLOE_MINIMUM:
            return f"floe's minimum {age}, table {MAX_REF_AGE_MS} below it"
        return f"table {MAX_REF_AGE_MS} {age}"


def ref_limit(ref: RefFacts, rules: Sequence[RefRetentionRule], properties: Mapping[str, str]) -> RefLimit | None:
    """The age at which the ref is stale: the policy's rule, else its own max-ref-age, else the table's."""
    rule = rule_for(rules, ref.name, ref.type)
    if rule is not None:
        return RefLimit(rule.max_age_ms, "policy", rule)
    if ref.max_ref_age_ms is not None:
        return RefLimit(ref.max_ref_age_ms, "ref")
    table = ref_age_default(properties)  # bounded: never under floe's minimum (core/facts/expiry_defaults.py)
    if table.max_ref_age_ms is None:
        return None
    return RefLimit(table.max_ref_age_ms, "table" if table.guard_ms is None else FLOE_MINIMUM)


def format_age(ms: int) -> str:
    """``94 days``, ``1 day``, or below a day the two largest units (``4m 10s``)."""
    days = ms / 86_400_000
    if days >= 1:
        whole = int(days)
        return f"{whole} day{'s' if whole != 1 else ''}"
    return format_wait(timedelta(milliseconds=ms))


def _keeps(ref: RefFacts) -> str:
    what = f"{ref.pinned_snapshots} snapshot{'s' if ref.pinned_snapshots != 1 else ''}"
    if ref.pinned_bytes is not None:
        what += f", {format_bytes(ref.pinned_bytes)}"
    return what


def ref_report(refs: Sequence[RefFacts] | None, rules: Sequence[RefRetentionRule], properties: Mapping[str, str],
               now: datetime) -> list[dict[str, object]]:
    """The record's ``refs``: each non-main ref with its age, limit, staleness and what it alone keeps."""
    now_ms = int(as_utc(now).timestamp() * 1000)
    report = []
    for ref in refs or ():
        limit = ref_limit(ref, rules, properties)
        age_ms = None if ref.head_timestamp_ms is None else max(0, now_ms - ref.head_timestamp_ms)
        report.append({
            "name": ref.name, "type": ref.type, "snapshot_id": ref.snapshot_id,
            "age_days": None if age_ms is None else round(age_ms / 86_400_000, 6),
            "max_age_ms": limit.max_age_ms if limit else None,
            "max_age_from": _limit_source(limit),
            "stale": bool(limit is not None and (age_ms is None or age_ms > limit.max_age_ms)),
            "max_ref_age_ms": ref.max_ref_age_ms, "max_snapshot_age_ms": ref.max_snapshot_age_ms,
            "min_snapshots_to_keep": ref.min_snapshots_to_keep,
            "pinned_snapshots": ref.pinned_snapshots, "pinned_files": ref.pinned_files,
            "pinned_bytes": ref.pinned_bytes,
        })
    return report


def _limit_source(limit: RefLimit | None) -> str | None:
    if limit is None:
        return None
    if limit.rule is not None:
        return f"policy refRetention '{limit.rule.pattern}' ({format_iso_duration(limit.rule.max_age)})"
    if limit.source == FLOE_MINIMUM:
        return f"floe's minimum (table property {MAX_REF_AGE_MS} is below it)"
    return "the ref's max-ref-age-ms" if limit.source == "ref" else f"table property {MAX_REF_AGE_MS}"


def ref_issues(refs: Sequence[RefFacts] | None, rules: Sequence[RefRetentionRule], properties: Mapping[str, str],
               now: datetime) -> tuple[HealthIssue, ...]:
    """A ``STALE_REF`` warning for each ref older than its limit (Iceberg removes a ref whose head is
    older than its max-ref-age: ``now - head > limit``)."""
    if not refs:  # most tables: no branch or tag (every table of a planner tick comes here)
        return ()
    now_ms = int(as_utc(now).timestamp() * 1000)
    issues = []
    for ref in refs or ():
        limit = ref_limit(ref, rules, properties)
        if limit is None:
            continue
        if ref.head_timestamp_ms is None:
            age_text, age_ms = "points at a snapshot the metadata no longer has", None
        else:
            age_ms = max(0, now_ms - ref.head_timestamp_ms)
            if age_ms <= limit.max_age_ms:
                continue
            age_text = f"is {format_age(age_ms)} old"
        issues.append(HealthIssue(
            IssueType.STALE_REF, Severity.WARNING,
            f"{ref.type} '{ref.name}' {age_text} ({limit.describe()}) and alone keeps {_keeps(ref)}",
            measured=None if age_ms is None else round(age_ms / 86_400_000, 6),
            threshold=round(limit.max_age_ms / 86_400_000, 6),
            details={"ref": ref.name, "ref_type": ref.type, "pinned_snapshots": ref.pinned_snapshots,
                     "pinned_bytes": ref.pinned_bytes},
        ))
    return tuple(issues)


# -- what an EXPIRE_SNAPSHOTS run sets -------------------------------------------------------------------


SET = "set"  # a rule's age set on the ref
CLEARED = "cleared"  # its rule gone: the age floe set taken back (the ref's earlier age, or none, put back)
SET_AGES_PROPERTY = "floe.ref-retention.set-ages"  # the table property recording what floe set (docstring)
# A change's ``rule`` when floe's minimum, not a policy's rule, set the age (core/facts/expiry_defaults.py).
GUARD_RULE = f"floe minimum: table {MAX_REF_AGE_MS} below it"


class RefRetentionChange(NamedTuple):
    name: str
    type: str
    snapshot_id: int
    max_ref_age_ms_before: int | None
    max_ref_age_ms: int | None  # None: the ref keeps no age of its own (a cleared one that had none)
    rule: str | None  # the pattern that asked for it; None when its rule went (CLEARED)
    action: str = SET


class SetAge(NamedTuple):
    """An age floe set on a ref, and the one the ref had before (put back when the rule goes)."""

    max_ref_age_ms: int
    before: int | None


def parse_set_ages(text: str | None) -> dict[str, SetAge]:
    """The table property's record; anything that does not parse is ignored (never clears an age)."""
    try:
        raw = json.loads(text) if text else {}
    except ValueError:
        return {}
    ages = {}
    for name, entry in (raw.items() if isinstance(raw, dict) else ()):
        if not isinstance(entry, dict):
            continue
        age, before = entry.get("set"), entry.get("before")
        if _is_ms(age) and (before is None or _is_ms(before)):
            ages[str(name)] = SetAge(age, before)
    return ages


def _is_ms(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def format_set_ages(ages: Mapping[str, SetAge]) -> str | None:
    """The property's value (None: no age of floe's left, the property is removed)."""
    if not ages:
        return None
    return json.dumps({name: {"set": age.max_ref_age_ms, "before": age.before} for name, age in sorted(ages.items())},
                      separators=(",", ":"), sort_keys=True)


def retention_changes(refs: Mapping[str, tuple[str, int, int | None]], rules: Sequence[RefRetentionRule],
                      set_ages: Mapping[str, SetAge] | None = None,
                      guard_ms: int | None = None) -> list[RefRetentionChange]:
    """The refs whose ``max-ref-age-ms`` an expiry run changes: name → (type, snapshot id, current
    max-ref-age-ms). A matching rule's age is set where it differs; a ref no rule matches any more gets
    back the age it had before floe set one, when ``set_ages`` records that floe did and the ref still
    has that age (the owner's own ages are never touched). ``main`` is never changed. ``guard_ms``
    (the table's ``history.expire.max-ref-age-ms`` is below floe's minimum: core/facts/expiry_defaults.py) is
    set on each ref without a rule that would otherwise fall to the table's property: one with no age, or
    only an age floe set over none."""
    changes = []
    for name, (ref_type, snapshot_id, current) in sorted(refs.items()):
        rule = rule_for(rules, name, ref_type)
        recorded = (set_ages or {}).get(name)
        if rule is not None:
            if current != rule.max_age_ms:
                changes.append(RefRetentionChange(name, ref_type, snapshot_id, current, rule.max_age_ms, rule.pattern))
        elif guard_ms is not None and name != MAIN and _falls_to_table(current, recorded):
            if current != guard_ms:
                changes.append(RefRetentionChange(name, ref_type, snapshot_id, current, guard_ms, GUARD_RULE))
        elif name != MAIN and recorded is not None and current == recorded.max_ref_age_ms != recorded.before:
            changes.append(RefRetentionChange(name, ref_type, snapshot_id, current, recorded.before, None, CLEARED))
    return changes


def _falls_to_table(current: int | None, recorded: SetAge | None) -> bool:
    """Whether, but for floe's ages, the ref has no age of its own (the table's property decides it)."""
    return current is None or (recorded is not None and recorded.before is None and current == recorded.max_ref_age_ms)


def recorded_ages(refs: Mapping[str, tuple[str, int, int | None]], set_ages: Mapping[str, SetAge],
                  changes: Sequence[RefRetentionChange]) -> dict[str, SetAge]:
    """The record after ``changes``: what floe set and the refs still have (a ref gone, or whose age its
    owner changed since, leaves it), each ref keeping the age it had before floe first set one."""
    kept = {name: age for name, age in set_ages.items() if name in refs and refs[name][2] == age.max_ref_age_ms}
    for change in changes:
        if change.action == CLEARED or change.max_ref_age_ms is None:
            kept.pop(change.name, None)
            continue
        earlier = kept.get(change.name)
        kept[change.name] = SetAge(change.max_ref_age_ms,
                                   earlier.before if earlier is not None else change.max_ref_age_ms_before)
    return kept


__all__ = [
    "MAIN", "BRANCH", "TAG", "ANY", "RefRetentionRule", "rule_for", "parse_ref_retention", "RefFacts",
    "SnapshotNode", "RefHead", "retained_by", "pinned_snapshots", "pinned_file_bytes", "data_file_hashes", "RefLimit",
    "ref_limit",
    "ref_report", "ref_issues", "format_age", "RefRetentionChange", "retention_changes",
    "PINNED_METHOD", "SET", "CLEARED", "SET_AGES_PROPERTY", "SetAge", "parse_set_ages", "format_set_ages",
    "recorded_ages", "GUARD_RULE",
]
