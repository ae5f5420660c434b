"""Launchers: the debt-score sensor and one schedule per (policy, operation) with a cron rule.

Both plan through the same :func:`floe_dagster.scheduling.tick.run_tick` under the scheduler lock and record
every admission in the trigger ledger before returning, so no two launchers (or replicas) admit the
same (table, operation, slot, attempt). Ticks that launch nothing say why in a ``SkipReason``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Sequence

from dagster import (
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from floe_dagster.core.operations import Operation
from floe_dagster.core.planner import Decision
from floe_dagster.core.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.tables import TableName
from floe_dagster.core import run_tags as T
from floe_dagster.defs.names import asset_key_for, group_name_for
from floe_dagster.policies import load_policy_set, policy_run_tags
from floe_dagster.settings import Settings

SENSOR_NAME = "floe_debt_score_sensor"
# A cron slot younger than this belongs to its schedule; after it, the sensor picks it up (a slot a
# closed window, the budget or a missed schedule tick deferred).
CRON_GRACE = timedelta(minutes=2)


def run_request_for(decision: Decision, settings: Settings) -> RunRequest:
    table, op = decision.table, decision.operation
    tags = {
        T.TABLE: table.qualified,
        T.NAMESPACE: table.namespace_str,
        T.OPERATION: op.value,
        T.POLICY: decision.policy or "",
        T.TRIGGER: decision.trigger or "",
        T.REASON: "; ".join(decision.reasons)[:1000],
        T.DEBT_SCORE: f"{decision.debt_score:.1f}",
        T.SLOT: decision.slot or "",
        T.ESTIMATED_BYTES: str(decision.estimated_bytes),
        T.ATTEMPT: str(decision.attempt),
        T.RUN_KEY: decision.run_key,
        "dagster/priority": str(T.run_priority(decision.trigger or "", decision.debt_score)),
    }
    if decision.max_runtime_s:
        tags["dagster/max_runtime"] = str(int(decision.max_runtime_s))
    tags.update(policy_run_tags(settings, table, op))
    return RunRequest(
        run_key=decision.run_key,
        asset_selection=[asset_key_for(table)],
        asset_check_keys=[],  # the health checks are reported without runs (defs/health.py)
        partition_key=op.value,
        tags=tags,
    )


def _skip_reason(result) -> SkipReason:
    return SkipReason(result.summary())


def build_sensor(settings: Settings, job, loaded_tables: Sequence[TableName], table_scope: Scope = DEFAULT_SCOPE):
    loaded = frozenset(loaded_tables)

    @sensor(
        name=SENSOR_NAME,
        job=job,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Admits every due maintenance item (interval, condition, critical, deferred cron slots), "
        "ranked by debt score within the budgets.",
    )
    def debt_score_sensor(context: SensorEvaluationContext):
        from floe_dagster.scheduling.tick import run_tick

        now = datetime.now(timezone.utc)

        def scope(decision: Decision) -> bool:
            if decision.trigger != "cron" or not decision.slot:
                return True
            return now - datetime.fromisoformat(decision.slot) >= CRON_GRACE

        result = run_tick(settings, context.instance, now, f"sensor:{table_scope.name}", loaded, scope=scope,
                          table_scope=table_scope)
        context.log.info(result.summary())
        if not result.admitted:
            yield _skip_reason(result)
            return
        for decision in result.admitted:
            yield run_request_for(decision, settings)

    return debt_score_sensor


def schedule_name(policy: str, op: Operation) -> str:
    return f"floe_{group_name_for((policy,))}_{op.value.lower()}"


def build_schedules(settings: Settings, job, loaded_tables: Sequence[TableName],
                    table_scope: Scope = DEFAULT_SCOPE) -> list[ScheduleDefinition]:
    loaded = frozenset(loaded_tables)
    schedules = []
    for policy_name, op, cron5, tz in load_policy_set(settings).cron_rules():

        def execution_fn(context: ScheduleEvaluationContext, policy_name=policy_name, op=op):
            from floe_dagster.scheduling.tick import run_tick

            now = context.scheduled_execution_time or datetime.now(timezone.utc)
            now = max(now.astimezone(timezone.utc), datetime.now(timezone.utc))

            def scope(decision: Decision) -> bool:
                return decision.policy == policy_name and decision.operation == op and decision.trigger == "cron"

            result = run_tick(settings, context.instance, now, f"schedule:{policy_name}:{op.value}", loaded, scope,
                              table_scope=table_scope)
            if not result.admitted:
                yield _skip_reason(result)
                return
            for decision in result.admitted:  # a schedule function yields (it may not return a list)
                yield run_request_for(decision, settings)

        schedules.append(ScheduleDefinition(
            name=schedule_name(policy_name, op),
            cron_schedule=cron5,
            execution_timezone=tz,
            job=job,
            execution_fn=execution_fn,
            default_status=DefaultScheduleStatus.RUNNING,
            description=f"Policy '{policy_name}': {op.value} at its cron slots ({cron5}, {tz}).",
        ))
    return schedules
