"""The fields of one policy, read for :func:`~floe_dagster.core.policies.policy.parse_policy`: its identity
(name, description, table pattern), every kind's config and schedule, ``refRetention``, ``tags`` (which
become run tags) and the version hashed from the definition. Each records its problems at its field's
location and returns what it could read.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.validation import Location, describe, get_str
from floe_dagster.core.facts.refs import RefRetentionRule, parse_ref_retention
from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.conditions import TriggerConditions
from floe_dagster.core.runs.run_tags import POLICY_TAG_PREFIX
from floe_dagster.core.schedules.schedule import Schedule, parse_schedule

RUN_TAG_PREFIX = POLICY_TAG_PREFIX  # a policy tag's run tag: this + its key
# Dagster tag keys allow letters, digits, '_', '-', '.' and one '/' namespace (the prefix takes it):
# 63 characters after the '/'.
MAX_TAG_KEY_CHARS = 63 - len(RUN_TAG_PREFIX.split("/", 1)[1])
_TAG_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,%d}$" % MAX_TAG_KEY_CHARS)


def read_identity(at: Location, raw: Mapping[str, Any], name: Any) -> tuple[str, TablePattern]:
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


def read_operations(at: Location, raw: Mapping[str, object]) -> tuple[dict[Operation, OperationConfig],
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


def read_ref_retention(at: Location, raw: Mapping[str, object],
                   configs: Mapping[Operation, OperationConfig]) -> tuple[RefRetentionRule, ...]:
    """``refRetention``, with a warning when no operation of the policy applies it (snapshot expiry)."""
    rules = parse_ref_retention(at.child("refRetention"), raw.get("refRetention"))
    applying = [op for op in ALL_OPERATIONS if op.spec.applies_ref_retention()]
    if rules and not any(op in configs for op in applying):
        at.child("refRetention").warn(f"is applied by {' or '.join(op.policy_key for op in applying)} runs, which "
                                      "this policy does not configure: stale refs are reported, never removed")
    return rules


def warn_due_every_tick(at: Location, raw: Mapping[str, Any], configs: Mapping[Operation, OperationConfig],
                         schedules: Mapping[Operation, Schedule], conditions: TriggerConditions | None) -> None:
    """A schedule without a cron or an interval, in a policy without trigger conditions, is due every tick;
    not a kind whose own condition decides (tableProperties: the table's drift from them), nor one with an
    ``afterWrite`` rule (only writes make it due)."""
    for op, schedule in schedules.items():
        rules = [k for k in ("cronExpression", "interval") if isinstance(raw[op.schedule_key], Mapping)
                 and raw[op.schedule_key].get(k) is not None]
        if op in configs and schedule.enabled and not rules and conditions is None \
                and not op.spec.has_own_condition and schedule.after_write is None:
            at.child(op.schedule_key).warn("has neither cronExpression nor interval and the policy has no "
                                           "triggerConditions: it is due on every tick (every minute)")


def read_tags(at: Location, raw: object) -> dict[str, str]:
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


def definition_version(raw: Mapping[str, object]) -> str:
    """A hash of the definition, without ``mode``: switching a policy from shadow to live changes what
    creates runs, not what they do, so the live runs carry the version the shadow decisions were made by."""
    raw = {k: v for k, v in raw.items() if k != "mode"}
    canonical = json.dumps(raw, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
