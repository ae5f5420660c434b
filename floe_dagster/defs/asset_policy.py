"""What a table asset's definition says about its effective policy, so that Dagit's catalog shows
who owns a table, filters tables by policy, and explains when each operation runs:

* **owners**, from the policy's tags: ``owner`` (an email address or ``team:<name>``, several
  separated by commas) and ``team`` (``team: data-eng`` → the owner ``team:data-eng``). Dagster
  refuses any other owner, so a value it would refuse is left out with a warning naming the policy
  and the tag, and the code location still loads;
* the asset tag **``floe/policy``**: the policy's name, or ``none`` for a table no enabled policy
  matches. Asset tag values must be at most 63 letters, digits, ``_``, ``-`` or ``.``; a name that
  does not fit (or the policy named ``none``) becomes a readable, unique form: its readable name as
  Dagster names get it (defs/names.py: accents dropped, other runs of characters as ``_``), cut to
  fit, then ``-`` and 8 hex digits of its hash;
* the **description**: the table, the policy, and for each configured operation when it runs (its
  cron and schedule, its interval or its trigger conditions, and its window), as Markdown.

Made once per policy (:class:`AssetPolicyFacts`): a table's asset costs a lookup and one string.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

from dagster._core.definitions.utils import is_valid_owner  # Dagster's own rule (not exported)
from dagster._utils.tags import is_valid_strict_tag_value  # the rule for asset tag values

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.policies.conditions import THRESHOLDS, TriggerConditions
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.plan.planner import SchedulerSettings
from floe_dagster.core.policies.policy import Policy
from floe_dagster.defs.names import readable_name

log = logging.getLogger(__name__)

OWNER_TAG = "owner"  # a policy tag: owners of its tables' assets (emails or team:<name>, comma-separated)
TEAM_TAG = "team"  # a policy tag: the owning team, as the owner team:<value>
POLICY_ASSET_TAG = T.POLICY  # the asset tag naming the effective policy (the run tag's key)
NO_POLICY = "none"  # its value for a table that no enabled policy matches
_MAX_TAG_VALUE = 63
_HASH_CHARS = 8
ScheduleNames = Mapping[tuple[str, Operation], str]
SENSOR_LABEL = "debt-score sensor"


@dataclass(frozen=True)
class AssetPolicyFacts:
    """One policy's part of its tables' asset definitions."""

    owners: tuple[str, ...]
    tags: Mapping[str, str]
    summary: str  # the description after the table's own line

    def description(self, qualified: str) -> str:
        return f"Iceberg table `{qualified}`. {self.summary}"


def asset_policy_facts(policy: Policy | None, scheduler: SchedulerSettings,
                       schedule_names: ScheduleNames) -> AssetPolicyFacts:
    """The owners, tags and description summary of the tables governed by ``policy`` (None: by
    none); logs a warning for each owner Dagster would refuse. ``schedule_names``: the name of the
    Dagster schedule of each (policy, operation) cron rule."""
    tags = {POLICY_ASSET_TAG: policy_tag_value(policy.name if policy else None)}
    if policy is None:
        return AssetPolicyFacts((), tags, "No enabled policy matches it: floe-dagster neither schedules nor runs "
                                     "maintenance on it.")
    owners, problems = owners_from_tags(policy)
    for problem in problems:
        log.warning(problem)
    return AssetPolicyFacts(owners, tags, policy_summary(policy, scheduler, schedule_names))


# -- owners ---------------------------------------------------------------------------------------------------


def owners_from_tags(policy: Policy) -> tuple[tuple[str, ...], list[str]]:
    """The owners the policy's ``owner`` and ``team`` tags name, and a message for each value Dagster
    would refuse as an owner."""
    owners: list[str] = []
    problems: list[str] = []

    def refuse(key: str, value: str, why: str) -> None:
        where = f" ({policy.source})" if policy.source else ""
        problems.append(f"policy '{policy.name}'{where}: tag {key}={value!r}: {why}, so it does not name an "
                        f"owner of the policy's table assets in Dagit")

    raw_owner = policy.tags.get(OWNER_TAG)
    if raw_owner is not None:
        items = [item.strip() for item in raw_owner.split(",") if item.strip()]
        if not items:
            refuse(OWNER_TAG, raw_owner, "it is empty")
        for item in items:
            if is_valid_owner(item):
                owners.append(item)
            else:
                refuse(OWNER_TAG, raw_owner, f"{item!r} is neither an email address nor team:<name>")
    raw_team = policy.tags.get(TEAM_TAG)
    if raw_team is not None:
        team = raw_team.strip()
        owner = team if team.startswith("team:") else f"team:{team}"
        if team and is_valid_owner(owner):
            owners.append(owner)
        else:
            refuse(TEAM_TAG, raw_team, "it names no team")
    return tuple(dict.fromkeys(owners)), problems


# -- the policy tag ------------------------------------------------------------------------------------------


def policy_tag_value(name: str | None) -> str:
    """The ``floe/policy`` asset tag's value: the name when Dagster accepts it as a tag value, else a
    readable and unique form of it (see the module docstring); ``none`` without a policy."""
    if name is None:
        return NO_POLICY
    if name != NO_POLICY and is_valid_strict_tag_value(name):
        return name
    readable = readable_name(name) or "policy"
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"{readable[:_MAX_TAG_VALUE - _HASH_CHARS - 1]}-{digest}"


# -- the description ----------------------------------------------------------------------------------------


def policy_summary(policy: Policy, scheduler: SchedulerSettings, schedule_names: ScheduleNames) -> str:
    """The policy and when each of its configured operations runs, as Markdown."""
    head = f"Policy '{policy.name}'" + (f": {policy.description.strip()}" if policy.description.strip() else "") + "."
    if policy.shadow:
        head += (" **Shadow mode**: what would run is recorded (an observation per decision, in Events), "
                 "no run is created.")
    if not scheduler.enabled:
        head += " Automatic maintenance is off (`scheduler.enabled: false`): operations run only when triggered."
    lines = [f"- {op.value}: {operation_rule(policy, op, schedule_names)}" for op in ALL_OPERATIONS
             if op in policy.configs]
    if not lines:
        lines = ["- no operation configured"]
    text = head + "\n\n" + "\n".join(lines)
    conditions = policy.trigger_conditions
    if conditions is not None:
        if scheduler.condition_based_triggering_enabled:
            text += "\n\nTrigger conditions (every operation): " + conditions_text(conditions) + "."
        else:
            text += ("\n\nThe policy's trigger conditions are ignored "
                     "(`scheduler.condition-based-triggering-enabled: false`).")
    return text


def operation_rule(policy: Policy, op: Operation, schedule_names: ScheduleNames) -> str:
    """When one configured operation runs, and what launches it: ``cron `0 2 * * *` UTC (schedule
    floe_nightly_rewrite_data_files)``, ``every 6 hours (debt-score sensor)``. Short: every table's
    asset carries it (at 5,000 tables, each 100 characters are 0.5 MB of the code location's snapshot)."""
    schedule = policy.schedule(op)
    if schedule is None:
        return "no schedule, only when triggered"
    if not schedule.enabled:
        return "schedule disabled, only when triggered"
    if schedule.kind == "cron":
        name = schedule_names.get((policy.name, op))
        rule = f"cron `{schedule.cron_5field}` {schedule.timezone} ({f'schedule {name}' if name else 'its schedule'})"
    elif schedule.kind == "interval":
        assert schedule.interval is not None
        rule = f"every {duration_text(schedule.interval)} ({SENSOR_LABEL})"
    elif schedule.after_write is not None:  # writes alone make it due (core/schedules/after_write.py)
        rule = f"after its writer's writes ({SENSOR_LABEL})"
    elif op.spec.has_own_condition:  # the kind's own condition (its spec), not the thresholds
        rule = f"{op.spec.due_rule()} ({SENSOR_LABEL})"
    elif policy.trigger_conditions is not None:
        rule = f"when the trigger conditions are met ({SENSOR_LABEL})"
    else:
        rule = f"every tick ({SENSOR_LABEL})"
    if not schedule.always_open:
        rule += f", window {schedule.describe_window()}"
    if schedule.after_write is not None and schedule.kind != "condition":
        rule += ", and after its writer's writes"
    if schedule.quiet is not None:
        rule += (f", once quiet for {duration_text(schedule.quiet.quiet_for)} "
                 f"(forced after {duration_text(schedule.quiet.max_wait)})")
    if schedule.sla is not None:  # the owner stays in the check's metadata (text), out of Markdown
        rule += f", SLA {duration_text(schedule.sla.max_age)} ({schedule.sla.severity}: check sla_{op.value.lower()})"
    return rule


def conditions_text(conditions: TriggerConditions) -> str:
    """``small files % ≥ 30 or delete files ≥ 10; min interval 60 min``."""
    joiner = " and " if conditions.trigger_logic == "AND" else " or "
    parts = []
    met = [f"{THRESHOLDS[name].description} ≥ {_number(value)}" for name, value in conditions.thresholds.items()
           if name in THRESHOLDS]
    if met:
        parts.append(joiner.join(met))
    if conditions.min_interval_minutes:
        parts.append(f"min interval {_number(conditions.min_interval_minutes)} min")
    for op, minutes in sorted(conditions.per_operation_min_interval_minutes.items(), key=lambda item: item[0].order):
        parts.append(f"{op.value} min interval {_number(minutes)} min")
    if conditions.critical_delay is not None:
        parts.append(f"critical pipeline: forced {duration_text(conditions.critical_delay)} after the last success")
    return "; ".join(parts) or "none set"


def duration_text(duration: timedelta) -> str:
    """``7 days``, ``1 hour 30 minutes``."""
    rest = int(duration.total_seconds())
    parts = []
    for unit, seconds in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, rest = divmod(rest, seconds)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
