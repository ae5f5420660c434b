"""One schedule per (policy, operation) with a cron rule: at each cron slot it admits that rule's due
tables, planning through the same tick as the debt-score sensor (defs/sensors.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from dagster import DefaultScheduleStatus, ScheduleDefinition, ScheduleEvaluationContext, schedule

from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.basics.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import schedule_names_for
from floe_dagster.defs.run_requests import run_requests, skip_reason
from floe_dagster.defs.shadow_events import report_shadow_decisions
from floe_dagster.policies import load_policy_set
from floe_dagster.redaction import failures_masked
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import Settings


def build_schedules(settings: Settings, job, loaded_tables: Sequence[TableName],
                    shard: Scope = DEFAULT_SCOPE) -> list[ScheduleDefinition]:
    loaded = frozenset(loaded_tables)
    rules = load_policy_set(settings).cron_rules()
    names = schedule_names_for((policy_name, op) for policy_name, op, _, _ in rules)
    return [_cron_schedule(settings, job, loaded, shard, names[(policy_name, op)], policy_name, op, cron5, tz)
            for policy_name, op, cron5, tz in rules]


def _cron_schedule(settings: Settings, job, loaded: frozenset[TableName], shard: Scope, name: str,
                   policy_name: str, op: Operation, cron5: str, tz: str) -> ScheduleDefinition:
    launcher = f"schedule:{policy_name}:{op.value}"

    def its_rule(decision: Decision) -> bool:
        return decision.policy == policy_name and decision.operation == op and decision.trigger == "cron"

    @schedule(
        name=name,
        cron_schedule=cron5,
        execution_timezone=tz,
        job=job,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Policy '{policy_name}': {op.value} at its cron slots ({cron5}, {tz}).",
    )
    @failures_masked
    def cron_rule(context: ScheduleEvaluationContext, floe_coordination: CoordinationResource):
        now = context.scheduled_execution_time or datetime.now(timezone.utc)
        now = max(now.astimezone(timezone.utc), datetime.now(timezone.utc))
        result = run_tick(settings, context.instance, floe_coordination.coordination, now, launcher, loaded,
                          its_rule, shard=shard)
        report_shadow_decisions(context.instance, result.shadow, now)  # a shadow policy's cron rule
        if not result.admitted:
            yield skip_reason(result)
            return
        yield from run_requests(result, launcher)  # a schedule function yields

    return cron_rule
