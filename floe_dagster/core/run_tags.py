"""Run tags: the audit trail. Every run that maintains a table says why it exists, with the same tag
set whoever launched it (the sensor, a schedule, ``floe-dagster trigger``, the HTTP API, a backfill,
or Dagit's *Materialize*, whose runs get the missing tags at start): :func:`run_tags` builds them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName

if TYPE_CHECKING:  # the planner imports nothing from here; a Decision is only read
    from floe_dagster.core.planner import Decision

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
RUN_KEY = "floe/run-key"  # the ledger's key of the run: an item's run key, or its batch's key
# A run over several tables (a batch): their names while they fit, how many, which trigger kinds.
TABLES = "floe/tables"
BATCH_SIZE = "floe/batch-size"
TRIGGER_KINDS = "floe/triggers"
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


# Dagster's own tags that floe-dagster sets.
DAGSTER_PRIORITY = "dagster/priority"
DAGSTER_MAX_RUNTIME = "dagster/max_runtime"
# Dagster's run tags are limited in length; a reason is a human sentence, cut to this.
MAX_REASON_CHARS = 1000
MAX_TABLES_CHARS = 1000


def run_key(table_qualified: str, operation: Operation, slot: str | None, attempt: int) -> str:
    """The run key of one admitted (table, operation, slot, attempt): the ledger's unique key and the
    sensor's ``run_key``, so Dagster never creates the same run twice either."""
    return f"{table_qualified}|{operation.value}|{slot}|attempt-{attempt}"


@dataclass(frozen=True)
class PolicyFacts:
    """What the table's effective policy says about one operation, for the run's tags."""

    name: str | None
    version: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)  # already as ``floe/tag.<key>``
    timeout_s: float | None = None  # the schedule's ``timeout`` (or the default), in seconds


@dataclass(frozen=True)
class Origin:
    """Who asked for the run, and why."""

    trigger: str  # one of TRIGGERS
    reason: str
    actor: str  # the OS user, the API key's name, or the launcher (``sensor:<scope>``)
    trigger_id: str | None = None  # shared by the runs of one manual trigger or backfill


def run_tags(
    table: TableName, op: Operation, policy: PolicyFacts, origin: Origin, decision: "Decision | None" = None
) -> dict[str, str]:
    """The tags of a run that maintains one operation of one table. A planner decision adds what the
    planner decided (debt score, slot, attempt, estimated bytes, run key) and its own maximum runtime
    (the schedule's timeout, cut to the window's end with ``enforceWindowEnd``)."""
    debt_score = decision.debt_score if decision is not None else 0.0
    tags = {
        TABLE: table.qualified,
        NAMESPACE: table.namespace_str,
        OPERATION: op.value,
        POLICY: policy.name or "",
        POLICY_VERSION: policy.version,
        TRIGGER: origin.trigger,
        REASON: origin.reason[:MAX_REASON_CHARS],
        ACTOR: origin.actor,
        DAGSTER_PRIORITY: str(run_priority(origin.trigger, debt_score)),
    }
    if origin.trigger_id:
        tags[TRIGGER_ID] = origin.trigger_id
    max_runtime_s = policy.timeout_s
    if decision is not None:
        tags.update({
            DEBT_SCORE: f"{decision.debt_score:.1f}",
            SLOT: decision.slot or "",
            ESTIMATED_BYTES: str(decision.estimated_bytes),
            ATTEMPT: str(decision.attempt),
            RUN_KEY: decision.run_key,
        })
        max_runtime_s = decision.max_runtime_s or max_runtime_s
    if max_runtime_s:
        tags[DAGSTER_MAX_RUNTIME] = str(int(max_runtime_s))
    tags.update(policy.tags)
    return tags


def shared_run_tags(tables: "list[TableName]", op: Operation, origin: Origin) -> dict[str, str]:
    """The tags of a run over several tables: what they share (each table's own decision goes into
    its materialization)."""
    tags = {
        OPERATION: op.value,
        TRIGGER: origin.trigger,
        REASON: origin.reason[:MAX_REASON_CHARS],
        ACTOR: origin.actor,
        DAGSTER_PRIORITY: str(run_priority(origin.trigger)),
    }
    namespaces = {t.namespace_str for t in tables}
    if len(namespaces) == 1:
        tags[NAMESPACE] = namespaces.pop()
    if origin.trigger_id:
        tags[TRIGGER_ID] = origin.trigger_id
    return tags


def batch_run_tags(decisions: "list[Decision]", policies: Mapping[TableName, PolicyFacts], launcher: str,
                   key: str) -> dict[str, str]:
    """The tags of the run of one batch: a batch of one is tagged as any run of one table; a larger
    batch gets what its tables share (each table's own decision goes into its materialization), its
    tables while they fit in a tag, their number and trigger kinds, the most urgent priority and the
    tightest maximum runtime."""
    first = decisions[0]
    op = first.operation
    if len(decisions) == 1:
        origin = Origin(first.trigger or "", "; ".join(first.reasons), launcher)
        return {**run_tags(first.table, op, policies[first.table], origin, first), RUN_KEY: key}
    tables = [d.table for d in decisions]
    kinds = sorted({d.trigger or "" for d in decisions})
    origin = Origin(first.trigger or "", f"{len(decisions)} tables due; the first: {'; '.join(first.reasons)}", launcher)
    tags = shared_run_tags(tables, op, origin)
    names = ",".join(t.qualified for t in tables)
    if len(names) <= MAX_TABLES_CHARS:
        tags[TABLES] = names
    tags.update({
        BATCH_SIZE: str(len(decisions)),
        TRIGGER_KINDS: ",".join(kinds),
        RUN_KEY: key,
        DEBT_SCORE: f"{max(d.debt_score for d in decisions):.1f}",
        ESTIMATED_BYTES: str(sum(d.estimated_bytes for d in decisions)),
        DAGSTER_PRIORITY: str(max(run_priority(d.trigger or "", d.debt_score) for d in decisions)),
    })
    if len({(policies[t].name, policies[t].version) for t in tables}) == 1:  # one policy version for all
        shared = policies[tables[0]]
        tags.update({POLICY: shared.name or "", POLICY_VERSION: shared.version, **shared.tags})
    runtimes = [d.max_runtime_s or policies[d.table].timeout_s for d in decisions]
    if all(runtimes):
        tags[DAGSTER_MAX_RUNTIME] = str(int(min(runtimes)))
    return tags
