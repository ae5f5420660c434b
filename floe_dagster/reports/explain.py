"""Floe's trigger status for one table (``floe-dagster explain``, the HTTP API's trigger-status):
the planner's decision now for each operation, with conditions, debt, backoff and throttle state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from floe_dagster.core.planner import plan
from floe_dagster.iceberg.catalog import existing_table
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.instance import get_instance
from floe_dagster.scheduling.inputs import gather
from floe_dagster.settings import Settings


def explain_table(settings: Settings, table_text: str, now: datetime, instance=None) -> dict[str, Any]:
    table = existing_table(settings.catalog, table_text)
    cached = read_cached_tables(settings)
    data = gather(settings, instance or get_instance(), now, frozenset(cached) if cached is not None else None).plan_input
    policy = data.policies.effective_policy(table)
    result = plan(data)
    statuses: dict[str, Any] = {}
    for decision in (d for d in result.decisions if d.table == table):
        history = data.history.get((table.qualified, decision.operation))
        conditions = decision.conditions or {}
        statuses[decision.operation.value] = {
            "operationType": decision.operation.value,
            "shouldTrigger": decision.decision == "run",
            "enabled": decision.enabled,
            "reasons": list(decision.reasons),
            "trigger": decision.trigger if decision.decision == "run" else None,
            "conditionsMet": conditions.get("passed", True),
            "metConditions": conditions.get("met", []),
            "unmetConditions": conditions.get("unmet", []),
            "forcedByCriticalPipeline": bool(conditions.get("forced", False)),
            "nextEligibleTime": decision.next_eligible.isoformat() if decision.next_eligible else None,
            "debtScore": decision.debt_score,
            "debtBreakdown": dict(decision.debt_breakdown),
            "backoff": {
                "consecutiveFailures": history.consecutive_failures if history else 0,
                "until": decision.backoff_until.isoformat() if decision.backoff_until else None,
            },
            "throttle": {
                "consecutiveZeroChangeRuns": history.consecutive_zero_change if history else 0,
                "until": decision.throttled_until.isoformat() if decision.throttled_until else None,
            },
            "lastRun": {
                "start": history.last_run_start.isoformat() if history and history.last_run_start else None,
                "succeeded": history.last_run_succeeded if history else None,
                "trigger": history.last_run_trigger if history else None,
            },
        }
    return {
        "catalog": table.catalog,
        "namespace": table.namespace_str,
        "table": table.name,
        "qualifiedName": table.qualified,
        "policyName": policy.name if policy else None,
        "conditionBasedTriggeringEnabled": data.limits.condition_based_triggering_enabled,
        "at": now.isoformat(),
        "operationStatuses": statuses,
    }
