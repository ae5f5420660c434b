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
