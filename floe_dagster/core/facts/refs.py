"""Branches and tags other than ``main``: their age, what they alone keep alive, when they are stale, and
the policy's ``refRetention`` rules that let snapshot expiry remove them.

**Why.** Iceberg's ``expire_snapshots`` keeps every snapshot a ref needs: a tag's snapshot, and a
branch's ancestry under the branch's own retention. A forgotten branch or tag therefore pins
snapshots (and the data and delete files they reference) that main's retention would have removed,
and nothing shows it. Iceberg removes a non-main ref itself when its head snapshot is older than the
ref's ``max-ref-age-ms`` (else the table's ``history.expire.max-ref-age-ms``, by default never).

**Stale** (:func:`ref_issues`): a ref whose head is older than its limit: the first matching
``refRetention`` rule of the table's policy, else the ref's own ``max-ref-age-ms``, else the table's
``history.expire.max-ref-age-ms`` (bounded: never under floe's minimum, 7 days; core/facts/expiry_defaults.py).
A ref with no limit is listed with its age and what it keeps, and is never an issue.

**refRetention** (a policy key): ``[{pattern: "audit-*", maxAge: P30D, type: branch|tag|any}]``.
``pattern`` is a glob over the ref's name (``*``, ``?``, ``[...]``, case-sensitive); the first rule
matching a ref's name and type gives its maximum age. ``main`` is never matched. An
``EXPIRE_SNAPSHOTS`` run sets each matching ref's ``max-ref-age-ms`` to the rule's age (only where it
differs) before it calls ``expire_snapshots``, which then removes the refs older than that.

What a ref alone keeps (its pinned snapshots and bytes) is measured in core/facts/ref_pins.py; what an
``EXPIRE_SNAPSHOTS`` run sets on the refs, records and takes back, in core/facts/ref_retention_changes.py.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

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
# Iceberg's table property (TableProperties) that removes a ref by age, as RemoveSnapshots reads it.
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"


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


__all__ = [
    "MAIN", "BRANCH", "TAG", "ANY", "RefRetentionRule", "rule_for", "parse_ref_retention", "RefFacts", "RefLimit",
    "ref_limit", "ref_report", "ref_issues", "format_age",
]
