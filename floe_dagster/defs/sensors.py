"""The debt-score sensor: every 60 s it admits everything due that no cron schedule owns (interval,
condition, critical, deferred cron slots, breached SLAs), ranked by debt score within the budgets (a
breached SLA first), then records Dagit's view of table health and of the SLA contracts.

It plans through :func:`floe_dagster.scheduling.tick.run_tick` under the scheduler lock, like the
schedules (defs/schedules.py), so no two launchers (or replicas) admit the same (table, operation,
slot, attempt). A tick that launches nothing says why in a ``SkipReason``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Sequence

from dagster import DagsterInstance, DefaultSensorStatus, SensorEvaluationContext, sensor

from floe_dagster.coordination.database import Coordination
from floe_dagster.coordination.resource import CoordinationResource
from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.basics.scopes import DEFAULT_SCOPE, Scope
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.health_reporting import report_health_events
from floe_dagster.defs.run_requests import run_requests, skip_reason
from floe_dagster.defs.shadow_events import report_shadow_decisions
from floe_dagster.defs.sla_reporting import report_sla_checks
from floe_dagster.redaction import failures_masked
from floe_dagster.scheduling.retention import Pruned, prune_if_due
from floe_dagster.scheduling.tick import TickResult, run_tick
from floe_dagster.scheduling.tick_stats import record_tick
from floe_dagster.scheduling.writer_facts import learn_writers
from floe_dagster.settings import Settings

log = logging.getLogger(__name__)

SENSOR_NAME = "floe_debt_score_sensor"
# A cron slot younger than this belongs to its schedule; after it, the sensor picks it up (a slot a
# closed window, the budget or a missed schedule tick deferred).
CRON_GRACE = timedelta(minutes=2)
# The sensor's cursor: {"writers": <the storage id of the last materialization read>} (JSON: room for more).
WRITERS_CURSOR = "writers"


def build_sensor(settings: Settings, job, loaded_tables: Sequence[TableName], shard: Scope = DEFAULT_SCOPE):
    loaded = frozenset(loaded_tables)
    launcher = f"sensor:{shard.name}"

    @sensor(
        name=SENSOR_NAME,
        job=job,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Admits every due maintenance item (interval, condition, critical, deferred cron slots), "
        "ranked by debt score within the budgets.",
    )
    @failures_masked
    def debt_score_sensor(context: SensorEvaluationContext, floe_coordination: CoordinationResource):
        now = datetime.now(timezone.utc)

        def not_a_schedules(decision: Decision) -> bool:
            if decision.trigger != "cron" or not decision.slot:
                return True
            return now - datetime.fromisoformat(decision.slot) >= CRON_GRACE

        coordination = floe_coordination.coordination
        # The writers first (their newest materializations, new writers), so that this tick plans with them.
        learn_writers_quietly(settings, context, coordination, loaded_tables)
        result = run_tick(settings, context.instance, coordination, now, launcher, loaded,
                          launcher_filter=not_a_schedules, shard=shard)
        # After the scheduler lock is released: Dagit's view of table health (the sensor only), and
        # once a day the retention of floe's finished runs.
        result.health_reported = report_tick_health(settings, context.instance, result, now)
        if result.plan is not None:  # the SLA checks whose verdict changed (defs/sla_reporting.py)
            report_sla_checks(context.instance, result.plan.decisions, loaded, shard.name, now)
        report_shadow_decisions(context.instance, result.shadow, now)
        record_tick(context.instance, shard.name, result, now)  # for GET /metrics; never fails
        context.log.info(result.summary())
        pruned = prune_quietly(settings, context.instance, coordination, now, shard)
        if pruned is not None:
            context.log.info(pruned.summary())
        if not result.admitted:
            yield skip_reason(result)
            return
        yield from run_requests(result, launcher)

    return debt_score_sensor


def learn_writers_quietly(settings: Settings, context: SensorEvaluationContext, coordination: Coordination,
                          tables: Sequence[TableName]) -> None:
    """New materializations after the sensor's cursor (scheduling/writer_facts.py); the cursor moves only when
    the rows are recorded (and Dagster saves it only when the tick succeeds). Never fails the tick."""
    cursor = _writers_cursor(context.cursor)
    try:
        after, recorded = learn_writers(context.instance, coordination, tables, settings.writers,
                                        settings.catalog.name, cursor)
    except Exception:  # the event log or the coordination database is down: the next tick reads the same events
        log.warning("the writers' materializations could not be read this tick", exc_info=True)
        return
    if recorded:
        context.log.info(f"writers: {recorded} writer row(s) recorded from new materializations")
    if after != cursor:
        context.update_cursor(json.dumps({WRITERS_CURSOR: after}))


def _writers_cursor(text: str | None) -> int | None:
    """The storage id the writers were read up to (None: never, or a cursor this version does not read)."""
    try:
        value = json.loads(text)[WRITERS_CURSOR] if text else None
    except (ValueError, TypeError, KeyError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def prune_quietly(settings: Settings, instance: DagsterInstance, coordination: Coordination, now: datetime,
                  shard: Scope) -> Pruned | None:
    """Retention (scheduling/retention.py), never failing the tick."""
    try:
        return prune_if_due(instance, coordination, now, settings.maintenance.retention_days, shard.name)
    except Exception:  # a storage error: the next day's tick prunes instead
        log.warning("retention could not prune this tick", exc_info=True)
        return None


def report_tick_health(settings: Settings, instance: DagsterInstance, result: TickResult, now: datetime) -> int:
    """Observations and ``health`` check results for the code location's tables whose full-tier
    health changed (or that a maintenance run materialized), within the time budget. Never fails
    the tick: an error is logged and the tables are reported by a later tick."""
    inputs = result.inputs
    if inputs is None:
        return 0
    full = {table: metrics for table, metrics in inputs.metrics.items() if metrics.tier == "full"}
    try:
        return report_health_events(
            instance, full, inputs.policies, now, only=inputs.loaded_tables, history=inputs.history,
            debt_weights=settings.debt, time_budget_s=settings.health.report_time_budget_s,
        )
    except Exception:  # the event log is down, a bad record...: planning already happened
        log.warning("health events could not be recorded this tick", exc_info=True)
        return 0
