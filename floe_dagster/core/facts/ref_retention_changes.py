"""What an ``EXPIRE_SNAPSHOTS`` run sets on the table's branches and tags under the policy's ``refRetention``
rules (core/facts/refs.py) before it calls ``expire_snapshots``, and how floe remembers and takes back what it set.

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

import json
from typing import Mapping, NamedTuple, Sequence

from floe_dagster.core.facts.refs import MAIN, MAX_REF_AGE_MS, RefRetentionRule, rule_for

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
    "RefRetentionChange", "retention_changes", "SET", "CLEARED", "SET_AGES_PROPERTY", "SetAge", "parse_set_ages",
    "format_set_ages", "recorded_ages", "GUARD_RULE",
]
