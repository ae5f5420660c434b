"""The policies API's response schemas (Floe's ``PolicyResponse`` and list page) and how a stored
policy becomes one.

Floe's fields come first, with Floe's types: an operation is summarised as ``{enabled, schedule}``
(``enabled`` is the policy's flag, as in Floe; ``schedule`` the interval as an ISO-8601 duration, else
the cron expression, else null), ``healthThresholds`` is null while every threshold is the default,
``triggerConditions`` lists all 15 of Floe's fields and floe-dagster's two stale-statistics thresholds.
What floe-dagster knows beyond Floe (the full operation configs and schedules, ``rewritePositionDeleteFiles``,
``computeStatistics``, the ``mode`` (live or shadow), the source file, the version, whether the API may
write it) is under ``floe``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from floe_dagster.api.timestamps import iso
from floe_dagster.core.policies.conditions import GATE_FIELDS, THRESHOLDS
from floe_dagster.core.basics.durations import format_iso_duration
from floe_dagster.core.facts.health_assessment import HealthThresholds
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.policy import Policy
from floe_dagster.policy_store import StoredPolicy

# Floe's four operations (their specs' ``floe_native``), in PolicyResponse's order; floe-dagster's own are
# under ``floe``.
FLOE_OPERATIONS = tuple(op for op in ALL_OPERATIONS if op.spec.floe_native())
# Policy.to_json's keys that PolicyResponse already carries at the top level.
_FLOE_TOP_LEVEL = {"name", "description", "tablePattern", "enabled", "priority", "tags", "triggerConditions",
                   "healthThresholds"}


class OperationSummary(BaseModel):
    enabled: bool = Field(description="The policy's enabled flag (as in Floe)")
    schedule: str | None = Field(description="The interval (ISO-8601, e.g. P1D), else the cron expression")


class PolicyResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(description="uuid5 of the policy's name: stable across restarts, changed by a rename")
    name: str
    description: str | None
    tablePattern: str = Field(description="As written in the policy")
    enabled: bool
    priority: int
    tags: dict[str, str]
    createdAt: str | None = Field(json_schema_extra={"format": "date-time"},
                                  description="The file's modification time (files keep no creation time)")
    updatedAt: str | None = Field(json_schema_extra={"format": "date-time"},
                                  description="The file's modification time")
    rewriteDataFiles: OperationSummary | None
    expireSnapshots: OperationSummary | None
    orphanCleanup: OperationSummary | None
    rewriteManifests: OperationSummary | None
    healthThresholds: dict[str, Any] | None = Field(description="All 26 thresholds; null when all are defaults")
    triggerConditions: dict[str, Any] | None = Field(description="Floe's 15 fields, then statsStaleSnapshots "
                                                      "and statsStaleRowsPercent; null: always trigger")
    floe: dict[str, Any] = Field(description="floe-dagster's full view: every operation's config and schedule "
                                 "(rewritePositionDeleteFiles and computeStatistics too), mode (live or shadow), "
                                 "source file, version, managed")


# Floe's PolicyResponse names its four operations: the schema and the specs' flag agree.
assert [op.policy_key for op in FLOE_OPERATIONS] == [
    name for name, info in PolicyResponse.model_fields.items() if info.annotation == OperationSummary | None]


class PolicyPage(BaseModel):
    policies: list[PolicyResponse]
    total: int
    limit: int
    offset: int
    hasMore: bool


def operation_summary(policy: Policy, op: Operation) -> dict[str, Any] | None:
    if policy.config(op) is None:
        return None
    schedule = policy.schedule(op)
    text = None
    if schedule is not None:
        text = format_iso_duration(schedule.interval) if schedule.interval is not None else schedule.cron_expression
    return {"enabled": policy.enabled, "schedule": text}


def trigger_conditions(policy: Policy) -> dict[str, Any] | None:
    conditions = policy.trigger_conditions
    if conditions is None:
        return None
    gates = {
        "minIntervalMinutes": conditions.min_interval_minutes,
        "perOperationMinIntervalMinutes": {op.value: minutes for op, minutes in
                                           conditions.per_operation_min_interval_minutes.items()},
        "criticalPipeline": conditions.critical_pipeline,
        "criticalPipelineMaxDelayMinutes": conditions.critical_pipeline_max_delay_minutes,
        "triggerLogic": conditions.trigger_logic,
    }
    assert set(gates) == set(GATE_FIELDS)
    return {**{name: conditions.thresholds.get(name) for name in THRESHOLDS}, **gates}


def policy_response(stored: StoredPolicy) -> dict[str, Any]:
    """Floe's PolicyResponse, keys in Floe's order, then ``floe``."""
    policy = stored.policy
    modified = iso(stored.modified) if stored.modified is not None else None
    floe = {k: v for k, v in policy.to_json().items() if k not in _FLOE_TOP_LEVEL}
    floe.update(source=stored.file, managed=stored.managed)
    if stored.warnings:
        floe["warnings"] = list(stored.warnings)
    return {
        "id": stored.id,
        "name": policy.name,
        "description": policy.description or None,
        "tablePattern": policy.table_pattern.text,
        "enabled": policy.enabled,
        "priority": policy.priority,
        "tags": dict(policy.tags),
        "createdAt": modified,
        "updatedAt": modified,
        **{op.policy_key: operation_summary(policy, op) for op in FLOE_OPERATIONS},
        "healthThresholds": (None if policy.health_thresholds == HealthThresholds()
                             else policy.health_thresholds.to_json()),
        "triggerConditions": trigger_conditions(policy),
        "floe": floe,
    }
