"""One schedule per (policy, operation) with a cron rule: at each cron slot it admits that rule's due
tables, planning through the same tick as the debt-score sensor (defs/sensors.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from dagster import DefaultScheduleStatus, ScheduleDefinition, ScheduleEvaluationContext

from floe_dagster.core.planner import Decision
from floe_dagster.core.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.tables import TableName
from floe_dagster.defs.names import schedule_names_for
from floe_dagster.defs.run_requests import run_requests, skip_reason
from floe_dagster.policies import load_policy_set
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import Settings


def build_schedules(settings: Settings, job, loaded_tables: Sequence[TableName],
                    table_scope: Scope = DEFAULT_SCOPE) -> list[ScheduleDefinition]:
    loaded = frozenset(loaded_tables)
    rules = load_policy_set(settings).cron_rules()
    names = schedule_names_for((policy_name, op) for policy_name, op, _, _ in rules)
    schedules = []
    for policy_name, op, cron5, tz in rules:

        def execution_fn(context: ScheduleEvaluationContext, policy_name=policy_name, op=op):
            now = context.scheduled_execution_time or datetime.now(timezone.utc)
            now = max(now.astimezone(timezone.utc), datetime.now(timezone.utc))

            def scope(decision: Decision) -> bool:
                return decision.policy == policy_name and decision.operation == op and decision.trigger == "cron"

            launcher = f"schedule:{policy_name}:{op.value}"
            result = run_tick(settings, context.instance, now, launcher, loaded, scope, table_scope=table_scope)
            if not result.admitted:
                yield skip_reason(result)
                return
            yield from run_requests(result, settings, launcher)  # a schedule function yields

        schedules.append(ScheduleDefinition(
            name=names[(policy_name, op)],
            cron_schedule=cron5,
            execution_timezone=tz,
            job=job,
            execution_fn=execution_fn,
            default_status=DefaultScheduleStatus.RUNNING,
            description=f"Policy '{policy_name}': {op.value} at its cron slots ({cron5}, {tz}).",
        ))
    return schedules
