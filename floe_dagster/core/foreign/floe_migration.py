"""Floe's policies, as its server answers ``GET /api/v1/policies``, turned into policy files
(``floe-dagster import-floe``; the reading and writing is :mod:`floe_dagster.migration`).

**What each server says.** Floe's ``PolicyResponse`` summarises an operation as ``{enabled, schedule}``:
the schedule is the interval (ISO-8601) or else the cron expression, and the operation's options, its
schedule's window, allowed days, timeout and priority are not in it. So from Floe a policy carries
over its name, description, pattern, enabled flag, priority, tags, health thresholds, trigger
conditions, which operations it configures (with the default options) and each one's interval or cron;
every part it cannot carry is listed (:attr:`ImportedPolicy.lost`). An operation that deletes (expiring
snapshots, orphan cleanup: :attr:`Operation.needs_gc`) is not enabled with the default options, which
may delete what Floe's own options keep (a shorter snapshot age, a younger orphan): it is written
disabled, commented out in the file under the reason, with its interval or cron, for its owner to
fill in from Floe's definition and uncomment (:attr:`ImportedPolicy.disabled`). floe-dagster's own server answers
the same shape plus a ``floe`` mapping with every operation's full config and schedule: from it a
policy carries over whole.

**Files.** Each policy becomes one file in Floe's PolicyLoader format (kebab-case YAML under
``policies:``), checked by parsing it back: it must load to the same policy as the API format's
mapping. A value that format cannot spell (a ``maxSnapshotAge`` that is not whole days, an interval
with seconds) keeps the policy in the API format, as JSON (as YAML when it has operations written
disabled: JSON has no comments). File names come from policy names, made
safe (:func:`file_names`).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import yaml

from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.policy import PolicyError, TOP_LEVEL_FIELDS, parse_policies_text
from floe_dagster.core.policies.policy_formats import to_loader_policy
from floe_dagster.core.schedules.schedule import SCHEDULE_FIELDS

# PolicyResponse's fields that describe the record, not the policy.
RECORD_FIELDS = ("id", "createdAt", "updatedAt")
_COPIED = ("name", "description", "tablePattern", "enabled", "priority", "tags")
MAX_STEM_BYTES = 200
_UNSAFE = re.compile(r"[^\w.\- ]")  # path separators, quotes, and anything a shell or file system trips on


@dataclass(frozen=True)
class ImportedPolicy:
    name: str
    document: dict[str, object]  # the policy in the API format, as a policy file holds it
    lost: tuple[str, ...] = ()  # what could not be carried over, and why, one line each
    # Operations that delete, written disabled (commented out): their config ({}) and schedule, API format.
    disabled: dict[str, object] = field(default_factory=dict)
    # Why they are disabled, for the comment above them (empty: import-floe's reason, Floe's API gives no options).
    disabled_reason: str = ""

    @property
    def disabled_operations(self) -> list[Operation]:
        return [op for op in ALL_OPERATIONS if op.policy_key in self.disabled]


def imported_policy(response: Mapping[str, Any]) -> ImportedPolicy:
    """One PolicyResponse (Floe's, or floe-dagster's with its ``floe`` mapping) as a policy document."""
    document = {key: response[key] for key in _COPIED if response.get(key) not in (None, {}, "")}
    lost: list[str] = []
    disabled: dict[str, object] = {}
    full = response.get("floe") if isinstance(response.get("floe"), Mapping) else None
    for op in ALL_OPERATIONS:
        if full is not None:
            if full.get(op.policy_key) is not None:
                document[op.policy_key] = dict(full[op.policy_key])
            if isinstance(full.get(op.schedule_key), Mapping):  # without what it derives (cron5field, kind)
                document[op.schedule_key] = {k: v for k, v in full[op.schedule_key].items() if k in SCHEDULE_FIELDS}
            continue
        summary = response.get(op.policy_key)
        if isinstance(summary, Mapping):
            lost += _summarised(op, summary, disabled if op.needs_gc else document)
    if isinstance(response.get("healthThresholds"), Mapping):
        document["healthThresholds"] = dict(response["healthThresholds"])
    conditions = response.get("triggerConditions")
    if isinstance(conditions, Mapping):
        document["triggerConditions"] = {k: v for k, v in conditions.items() if v not in (None, {})}
    known = {*TOP_LEVEL_FIELDS, *RECORD_FIELDS, "floe"}
    lost += [f"{key}: no equivalent in floe-dagster's policies: not carried over" for key in response
             if key not in known]
    return ImportedPolicy(str(response.get("name", "")), document, tuple(lost), disabled)


def disabled_reason(op: Operation) -> str:
    """Why an operation that deletes is written disabled (the report's line)."""
    return (f"written disabled (commented out in the file): Floe's API returns no options for it, and with the "
            f"default options it could delete {_DELETES[op]} that the policy's options in Floe keep; copy "
            "its options from the policy's definition in Floe, then uncomment it")


_DELETES = {Operation.EXPIRE_SNAPSHOTS: "snapshots", Operation.ORPHAN_CLEANUP: "files"}


def _summarised(op: Operation, summary: Mapping[str, object], into: dict[str, object]) -> list[str]:
    """Floe's ``{enabled, schedule}`` of one operation written into ``into`` (the document, or the
    disabled part for an operation that deletes); what it cannot carry, one line each."""
    into[op.policy_key] = {}
    if op.needs_gc:
        lost = [f"{op.policy_key}: {disabled_reason(op)}"]
    else:
        lost = [f"{op.policy_key}: Floe's API returns no operation options: written as {{}} (Iceberg's "
                "defaults); copy its options from the policy's definition in Floe"]
    schedule = summary.get("schedule")
    if isinstance(schedule, str) and schedule.strip():
        rule = "interval" if schedule.strip().upper().startswith("P") else "cronExpression"
        into[op.schedule_key] = {rule: schedule}
        lost.append(f"{op.schedule_key}: Floe's API returns only its {rule}: its windowStart, windowEnd, "
                    "allowedDays, timeout, priority and enabled are not carried over")
    elif op.needs_gc:
        lost.append(f"{op.schedule_key}: Floe's API returns no interval or cron for it: add one when you enable it")
    else:
        lost.append(f"{op.schedule_key}: Floe's API returns no interval or cron for it: written without a "
                    "schedule (the operation runs only when triggered); add one if Floe's had a window only")
    return lost


@dataclass(frozen=True)
class PolicyFileText:
    text: str
    suffix: str  # .yaml (PolicyLoader format) or .json (API format)
    note: str = ""  # why it is not in the PolicyLoader format


def policy_file_text(policy: ImportedPolicy) -> PolicyFileText:
    """The policy's file, in the PolicyLoader format when it loads back to the same policy; raises
    PolicyError when the policy itself is invalid (every problem listed). Operations written disabled
    follow the policy as a commented-out block under their reason."""
    api_text = json.dumps(policy.document, indent=2, ensure_ascii=False) + "\n"
    expected = policy_meaning(parse_policies_text(api_text, f"policy '{policy.name}' as read"))
    try:
        loader = _yaml({"policies": [to_loader_policy(policy.document)]})
        if policy_meaning(parse_policies_text(loader, "PolicyLoader format")) == expected:
            return PolicyFileText(loader + _disabled_block(policy, loader_format=True), ".yaml")  # ValueError too
        why = "the PolicyLoader format reads it back differently"
    except (ValueError, PolicyError) as exc:
        why = str(exc)
    if policy.disabled:  # the comment needs YAML: the API format's keys, in YAML
        api_yaml = _yaml(policy.document)
        if policy_meaning(parse_policies_text(api_yaml, "API format as YAML")) == expected:
            return PolicyFileText(api_yaml + _disabled_block(policy, loader_format=False), ".yaml",
                                  f"kept in Floe's API format (as YAML, for the comment on what is disabled): {why}")
    return PolicyFileText(api_text, ".json", f"kept in Floe's API format (JSON): {why}")


def _yaml(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def _disabled_block(policy: ImportedPolicy, loader_format: bool) -> str:
    """The operations written disabled, commented out after the policy's keys (indented as its keys are,
    so that uncommenting them puts them in the policy) under the reason."""
    if not policy.disabled:
        return ""
    indent = "  " if loader_format else ""
    # ValueError: a schedule the PolicyLoader format cannot spell (the file is then in the API format)
    spelled = to_loader_policy(policy.disabled) if loader_format else policy.disabled
    keys = " and ".join(key for key in spelled if not key.lower().endswith("schedule"))
    reason = policy.disabled_reason or (
        f"{keys}: written disabled by floe-dagster import-floe. Floe's API returns no options for "
        "operations that delete, and with the default options they could delete snapshots or files that "
        "the policy's options in Floe keep. Copy the options from the policy's definition in Floe, then uncomment:")
    lines = [*textwrap.wrap(reason, 96), *_yaml(spelled).splitlines()]
    return "".join(f"{indent}# {line}\n" for line in lines)


def policy_meaning(policies: Any) -> list[dict[str, Any]]:
    """What a policy set means, whatever file and format it came from (its JSON without the file and
    the version, which hashes the policy as written)."""
    return [{k: v for k, v in p.to_json().items() if k not in ("source", "version")} for p in policies]


def file_names(names: Sequence[str], suffixes: Sequence[str]) -> list[tuple[str, str]]:
    """For each policy name, a file name safe on any file system, and why it differs from the name
    ('' when it does not): unsafe characters (path separators, quotes, ...) become ``_``, a leading
    ``.`` (a hidden file, never read as a policy) gets a ``_`` before it, long names are cut, and names
    that meet after that (case ignored) get ``-2``, ``-3``, ..."""
    taken: set[str] = set()
    result = []
    for name, suffix in zip(names, suffixes):
        stem, why = _UNSAFE.sub("_", name).strip() or "policy", []
        if stem != name:
            bad = sorted({ch for ch in name if _UNSAFE.match(ch)})
            why.append("characters unsafe in a file name (" + " ".join(repr(ch) for ch in bad) + ") became _"
                       if bad else "spaces around it were dropped")
        if stem.startswith("."):
            stem = "_" + stem
            why.append("a leading '.' (a hidden file) got a '_' before it")
        if len(stem.encode()) > MAX_STEM_BYTES:
            stem = stem.encode()[:MAX_STEM_BYTES].decode(errors="ignore")
            why.append(f"cut to {MAX_STEM_BYTES} bytes")
        base, number = stem, 1
        while stem.lower() + suffix in taken:
            number += 1
            stem = f"{base}-{number}"
        if number > 1:
            why.append(f"'{base}{suffix}' was taken by another policy")
        taken.add(stem.lower() + suffix)
        result.append((stem + suffix, "; ".join(why)))
    return result


__all__ = ["ImportedPolicy", "imported_policy", "PolicyFileText", "policy_file_text", "policy_meaning", "file_names",
           "RECORD_FIELDS", "disabled_reason"]
