"""Run tags: the audit trail. Every run that maintains a table says why it exists."""

from __future__ import annotations

TAG_PREFIX = "floe/"
TABLE = "floe/table"
OPERATION = "floe/operation"
POLICY = "floe/policy"
POLICY_VERSION = "floe/policy-version"
TRIGGER = "floe/trigger"
REASON = "floe/reason"
DEBT_SCORE = "floe/debt-score"
SLOT = "floe/slot"
ESTIMATED_BYTES = "floe/estimated-bytes"
NAMESPACE = "floe/namespace"
ACTOR = "floe/actor"
TRIGGER_ID = "floe/trigger-id"
ATTEMPT = "floe/attempt"
RUN_KEY = "floe/run-key"
# Why a run failed without it being the table's fault ("lock_held", "outage"): history does not
# count such failures toward backoff.
FAILURE_KIND = "floe/failure-kind"
POLICY_TAG_PREFIX = "floe/tag."

TRIGGERS = ("cron", "interval", "condition", "critical", "manual", "backfill")

# dagster/priority bands (higher runs first in the queue): manual > critical > scheduled > backfill,
# plus a debt bucket of 0..9 within the band.
PRIORITY_BANDS = {"manual": 300, "critical": 200, "cron": 100, "interval": 100, "condition": 100, "backfill": 0}


def run_priority(trigger: str, debt_score: float = 0.0) -> int:
    bucket = max(0, min(9, int(debt_score // 100)))
    return PRIORITY_BANDS.get(trigger, 100) + bucket * 10


def operator_run_tags(table, op, policy_name: str | None, policy_version: str, trigger: str, reason: str,
                      actor: str, trigger_id: str) -> dict[str, str]:
    """Tags of a run an operator asked for (manual trigger, backfill): who, why, and which request."""
    return {
        TABLE: table.qualified, NAMESPACE: table.namespace_str, OPERATION: op.value,
        POLICY: policy_name or "", POLICY_VERSION: policy_version,
        TRIGGER: trigger, REASON: reason, ACTOR: actor, TRIGGER_ID: trigger_id,
        "dagster/priority": str(run_priority(trigger)),
    }
