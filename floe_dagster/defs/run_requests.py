"""Run requests from the planner's admitted decisions: what the debt-score sensor and the cron
schedules yield, one per batch (one run over the batch's tables for one operation partition). The
tags come from the one builder every launcher uses (core.runs.run_tags)."""

from __future__ import annotations

from dagster import RunRequest, SkipReason

from floe_dagster.core.runs.run_tags import batch_run_tags
from floe_dagster.defs.names import asset_key_for
from floe_dagster.scheduling.tick import RunBatch, TickResult


def run_request_for(batch: RunBatch, launcher: str) -> RunRequest:
    """The batch's tags name the policy versions the tick planned with (the policies that decided)."""
    return RunRequest(
        run_key=batch.batch_key,
        asset_selection=[asset_key_for(d.table) for d in batch.decisions],
        asset_check_keys=[],  # the health checks are reported without runs (defs/health_reporting.py)
        partition_key=batch.operation.value,
        tags=batch_run_tags(batch.decisions, batch.policies, launcher, batch.batch_key),
    )


def run_requests(result: TickResult, launcher: str) -> list[RunRequest]:
    return [run_request_for(batch, launcher) for batch in result.batches]


def skip_reason(result: TickResult) -> SkipReason:
    return SkipReason(result.summary())
