"""Run requests from the planner's admitted decisions: what the debt-score sensor and the cron
schedules yield, one per batch (one run over the batch's tables for one operation partition). The
tags come from the one builder every launcher uses (core.run_tags)."""

from __future__ import annotations

from dagster import RunRequest, SkipReason

from floe_dagster.core.policy import PolicySet
from floe_dagster.core.run_tags import batch_run_tags
from floe_dagster.defs.names import asset_key_for
from floe_dagster.policies import resolve_operation
from floe_dagster.scheduling.tick import RunBatch, TickResult
from floe_dagster.settings import Settings


def run_request_for(batch: RunBatch, settings: Settings, launcher: str, policy_set: PolicySet) -> RunRequest:
    """``policy_set``: the one the tick planned with, so the tags name the policy version that decided."""
    op = batch.operation
    policies = {d.table: resolve_operation(settings, d.table, op, policy_set).policy for d in batch.decisions}
    return RunRequest(
        run_key=batch.key,
        asset_selection=[asset_key_for(d.table) for d in batch.decisions],
        asset_check_keys=[],  # the health checks are reported without runs (defs/health_reporting.py)
        partition_key=op.value,
        tags=batch_run_tags(batch.decisions, policies, launcher, batch.key),
    )


def run_requests(result: TickResult, settings: Settings, launcher: str) -> list[RunRequest]:
    if not result.batches:
        return []
    assert result.inputs is not None  # a tick that admitted work planned from its inputs
    return [run_request_for(batch, settings, launcher, result.inputs.policies) for batch in result.batches]


def skip_reason(result: TickResult) -> SkipReason:
    return SkipReason(result.summary())
