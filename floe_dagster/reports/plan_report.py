"""``floe-dagster plan --json`` and the MCP server's ``plan`` tool: a dry run of the next tick, planned with
the same inputs as the sensor, admitting nothing; each decision with the safety envelope's verdict."""

from __future__ import annotations

from datetime import datetime

from dagster import DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.plan.decisions import Plan, PlanJson
from floe_dagster.core.plan.planner import plan
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.reports.explain import envelope_verdict, lake_around
from floe_dagster.scheduling.inputs import gather
from floe_dagster.settings import Settings


def planned(settings: Settings, instance: DagsterInstance, coordination: Coordination, at: datetime
            ) -> tuple[Plan, list, int]:
    """The plan at ``at``, each decision's envelope verdict (None: unchecked), and how many tables have
    no health yet."""
    cached = read_cached_tables(settings)
    inputs = gather(settings, instance, coordination, at, frozenset(cached) if cached is not None else None)
    data = inputs.plan_input
    result = plan(data)
    allowed = settings.envelope.allowed_table_properties
    known = lake_around(settings, data) if any(d.operation.needs_gc for d in result.decisions) else None
    verdicts = [envelope_verdict(data, d.table, d.operation, d.policy, allowed, known) for d in result.decisions]
    return result, verdicts, inputs.health_missing


def plan_json(result: Plan, verdicts: list) -> PlanJson:
    """What ``plan --json`` prints: the plan's decisions, each with its ``envelope``."""
    payload = result.to_json()
    for item, verdict in zip(payload["decisions"], verdicts):
        item["envelope"] = verdict.to_json() if verdict is not None else None
    return payload
