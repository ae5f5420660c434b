"""Run requests from the planner's admitted decisions: what the debt-score sensor and the cron
schedules yield. The tags come from the one builder every launcher uses (core.run_tags)."""

from __future__ import annotations

from dagster import RunRequest, SkipReason

from floe_dagster.core.planner import Decision
from floe_dagster.core.run_tags import Origin
from floe_dagster.defs.names import asset_key_for
from floe_dagster.policies import run_tags_for
from floe_dagster.scheduling.tick import TickResult
from floe_dagster.settings import Settings


def run_request_for(decision: Decision, settings: Settings, launcher: str) -> RunRequest:
    table, op = decision.table, decision.operation
    origin = Origin(trigger=decision.trigger or "", reason="; ".join(decision.reasons), actor=launcher)
    return RunRequest(
        run_key=decision.run_key,
        asset_selection=[asset_key_for(table)],
        asset_check_keys=[],  # the health checks are reported without runs (defs/health_checks.py)
        partition_key=op.value,
        tags=run_tags_for(settings, table, op, origin, decision),
    )


def skip_reason(result: TickResult) -> SkipReason:
    return SkipReason(result.summary())
