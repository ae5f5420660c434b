"""A shadow policy's decisions in Dagit: one ``AssetObservation`` per recorded shadow decision, on the
table's asset and the operation's partition, with what would have run, when and why.

Why an observation and not the sensor's tick text: an operator onboarding a policy looks at the
table, not at the sensor. The asset's *Events* tab (filter: the operation's partition) lists each
would-have-run beside the table's real materializations and health observations, kept as long as the
event log is, and a cron rule's shadow decisions (admitted by that rule's schedule, not the sensor)
land there too. The tick's ``SkipReason`` also counts them (``N shadow decision(s) recorded``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from dagster import AssetObservation, DagsterInstance

from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.runs.run_decision import shadow_summary
from floe_dagster.defs.names import asset_key_for

log = logging.getLogger(__name__)


def shadow_observation(decision: Decision, at: datetime) -> AssetObservation:
    reason = "; ".join(decision.reasons)
    return AssetObservation(
        asset_key=asset_key_for(decision.table),
        partition=decision.operation.value,
        description=shadow_summary(reason, at),
        metadata={
            "shadow": True,
            "operation": decision.operation.value,
            "would_run_at": at.isoformat(),
            "reason": reason,
            "trigger": decision.trigger or "",
            "slot": decision.slot or "",
            "policy": decision.policy or "",
            "debt_score": round(decision.debt_score, 2),
            "estimated_bytes": decision.estimated_bytes,
        },
    )


def report_shadow_decisions(instance: DagsterInstance, decisions: list[Decision], at: datetime) -> int:
    """Record the tick's shadow decisions (the ones the ledger accepted: once per slot). Never fails
    the tick: the ledger already holds them."""
    reported = 0
    for decision in decisions:
        try:
            instance.report_runless_asset_event(shadow_observation(decision, at))
            reported += 1
        except Exception:  # the event log is down: the ledger (plan, explain, the API) still has them
            log.warning("the shadow decision %s could not be recorded in Dagit", decision.item_key, exc_info=True)
    return reported
