"""Floe's policies, as its server answers ``GET /api/v1/policies``, turned into policy files
(``floe-dagster import-floe``; the reading and writing is :mod:`floe_dagster.migration`).

**What each server says.** Floe's ``PolicyResponse`` summarises an operation as ``{enabled, schedule}``:
the schedule is the interval (ISO-8601) or else the cron expression, and the operation's options, its
schedule's window, allowed days, timeout and priority are not in it. So from Floe a policy carries
over its name, description, pattern, enabled flag, priority, tags, health thresholds, trigger
conditions, which operations it configures (with Iceberg's defaults) and each one's interval or cron;
every part it cannot carry is listed (:attr:`ImportedPolicy.lost`). floe-dagster's own server answers
the same shape plus a ``floe`` mapping with every operation's full config and schedule: from it a
policy carries over whole.

**Files.** Each policy becomes one file in Floe's PolicyLoader format (kebab-case YAML under
``policies:``), checked by parsing it back: it must load to the same policy as the API format's
mapping. A value that format cannot spell (a ``maxSnapshotAge`` that is not whole days, an interval
with seconds) keeps the policy in the API format, as JSON. File names come from policy names, made
safe (:func:`file_names`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import yaml

from floe_dagster.core.operations import ALL_OPERATIONS
from floe_dagster.core.policy import PolicyError, TOP_LEVEL_FIELDS, parse_policies_text
from floe_dagster.core.policy_formats import to_loader_policy
from floe_dagster.core.schedule import SCHEDULE_FIELDS

# PolicyResponse's fields that describe the record, not the policy.
RECORD_FIELDS = ("id", "createdAt", "updatedAt")
_COPIED = ("name", "description", "tablePattern", "enabled", "priority", "tags")
MAX_STEM_BYTES = 200
_UNSAFE = re.compile(r"[^\w.\- ]")  # path separators, quotes, and anything a shell or file system trips on


@dataclass(frozen=True)
class ImportedPolicy:
    name: str
    document: dict[str, Any]  # the policy in the API format, as a policy file holds it
    lost: tuple[str, ...] = ()  # what could not be carried over, and why, one line each


def imported_policy(response: Mapping[str, Any]) -> ImportedPolicy:
    """One PolicyResponse (Floe's, or floe-dagster's with its ``floe`` mapping) as a policy document."""
    document = {key: response[key] for key in _COPIED if response.get(key) not in (None, {}, "")}
    lost: list[str] = []
    full = response.get("floe") if isinstance(response.get("floe"), Mapping) else None
    for op in ALL_OPERATIONS:
        if full is not None:
            if full.get(op.policy_key) is not None:
                document[op.policy_key] = dict(full[op.policy_key])
            if isinstance(full.get(op.schedule_key), Mapping):  # without what it derives (cron5field, kind)
                document[op.schedule_key] = {k: v for k, v in full[op.schedule_key].items() if k in SCHEDULE_FIELDS}
            continue
        summary = response.get(op.policy_key)
        if not isinstance(summary, Mapping):
            continue
        document[op.policy_key] = {}
        lost.append(f"{op.policy_key}: Floe's API returns no operation options: written as {{}} (Iceberg's "
                    "defaults); copy its options from the policy's definition in Floe")
        schedule = summary.get("schedule")
        if isinstance(schedule, str) and schedule.strip():
            rule = "interval" if schedule.strip().upper().startswith("P") else "cronExpression"
            document[op.schedule_key] = {rule: schedule}
            lost.append(f"{op.schedule_key}: Floe's API returns only its {rule}: its windowStart, windowEnd, "
                        "allowedDays, timeout, priority and enabled are not carried over")
        else:
            lost.append(f"{op.schedule_key}: Floe's API returns no interval or cron for it: written without a "
                        "schedule (the operation runs only when triggered); add one if Floe's had a window only")
    if isinstance(response.get("healthThresholds"), Mapping):
        document["healthThresholds"] = dict(response["healthThresholds"])
    conditions = response.get("triggerConditions")
    if isinstance(conditions, Mapping):
        document["triggerConditions"] = {k: v for k, v in conditions.items() if v not in (None, {})}
    known = {*TOP_LEVEL_FIELDS, *RECORD_FIELDS, "floe"}
    lost += [f"{key}: no equivalent in floe-dagster's policies: not carried over" for key in response
             if key not in known]
    return ImportedPolicy(str(response.get("name", "")), document, tuple(lost))


@dataclass(frozen=True)
class PolicyFileText:
    text: str
    suffix: str  # .yaml (PolicyLoader format) or .json (API format)
    note: str = ""  # why it is not in the PolicyLoader format


def policy_file_text(policy: ImportedPolicy) -> PolicyFileText:
    """The policy's file, in the PolicyLoader format when it loads back to the same policy; raises
    PolicyError when the policy itself is invalid (every problem listed)."""
    api_text = json.dumps(policy.document, indent=2, ensure_ascii=False) + "\n"
    expected = policy_meaning(parse_policies_text(api_text, f"policy '{policy.name}' as read"))
    try:
        loader = yaml.safe_dump({"policies": [to_loader_policy(policy.document)]}, sort_keys=False,
                                allow_unicode=True, width=100)
        if policy_meaning(parse_policies_text(loader, "PolicyLoader format")) == expected:
            return PolicyFileText(loader, ".yaml")
        why = "the PolicyLoader format reads it back differently"
    except (ValueError, PolicyError) as exc:
        why = str(exc)
    return PolicyFileText(api_text, ".json", f"kept in Floe's API format (JSON): {why}")


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
           "RECORD_FIELDS"]
