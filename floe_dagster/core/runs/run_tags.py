"""Run tags: the audit trail. Every run that maintains a table says why it exists, with the same tag
set whoever launched it (the sensor, a schedule, ``floe-dagster trigger``, the HTTP API, a backfill,
or Dagit's *Materialize*, whose runs get the missing tags at start): :func:`run_tags` builds them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from floe_dagster.core.operations import Operation
from floe_dagster.core.runs.run_decision import RunDecision
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.schedules.writers import Writer, key_text

# Where Dagit shows a run tag (dagster-webserver 1.13's runs list, ``RunRowTags`` with
# ``useTagPinning``): the runs list shows a run's *pinned* tags and offers the rest behind "View all
# tags"; the run page ("View tags and config") shows every tag. By default every tag is pinned except
# the keys under Dagster's own namespace ``dagster/`` (``dagster/partition`` and ``dagster/backfill``
# aside), and each browser may pin or unpin keys (kept in its local storage). Keys under ``.dagster/``
# are worse: Dagster's GraphQL leaves them out altogether, so no page shows them.
#
# So the tags an operator scans in the runs list are floe's own keys (``floe/...``), and the rest of
# the audit trail goes under ``dagster/floe.``: on every run page, filterable, but off the runs list.
# ``floe_dagster_tests/integration/test_dagit_views.py`` checks this rule against the installed UI's
# source and counts what the runs list shows for a real run.
RUN_PAGE_PREFIX = "dagster/floe."

# In the runs list: what the run maintains, and why.
TABLE = "floe/table"
TABLES = "floe/tables"  # a run over several tables (a batch): their names while they fit
OPERATION = "floe/operation"
POLICY = "floe/policy"
TRIGGER = "floe/trigger"
REASON = "floe/reason"
# An after-write run (core/schedules/after_write.py): the writer's materialization that made it due (issue 28 names
# them under floe/: the runs list shows which write a maintenance run follows).
UPSTREAM_ASSET = "floe/upstream-asset"
UPSTREAM_RUN = "floe/upstream-run"
UPSTREAM_STORAGE_ID = "floe/upstream-storage-id"
# A run an agent proposed and a person approved (``floe-dagster mcp``): the approving key's name, never the key.
APPROVED_BY = "floe/approved-by"
RUNS_LIST_KEYS = (TABLE, TABLES, OPERATION, POLICY, TRIGGER, REASON, UPSTREAM_ASSET, UPSTREAM_RUN, UPSTREAM_STORAGE_ID,
                  APPROVED_BY)

# On the run page only.
NAMESPACE = RUN_PAGE_PREFIX + "namespace"
POLICY_VERSION = RUN_PAGE_PREFIX + "policy-version"
DEBT_SCORE = RUN_PAGE_PREFIX + "debt-score"
SLOT = RUN_PAGE_PREFIX + "slot"
ESTIMATED_BYTES = RUN_PAGE_PREFIX + "estimated-bytes"
ACTOR = RUN_PAGE_PREFIX + "actor"
TRIGGER_ID = RUN_PAGE_PREFIX + "trigger-id"
ATTEMPT = RUN_PAGE_PREFIX + "attempt"
PROPOSED_BY = RUN_PAGE_PREFIX + "proposed-by"  # the key that proposed an agent's run (its name)
PROPOSAL = RUN_PAGE_PREFIX + "proposal"  # the proposal's id (never its token)
# The run's batch key (core/runs/run_decision.py; a batch of one: its item's key). The tag kept its first name.
BATCH_KEY = RUN_PAGE_PREFIX + "run-key"
BATCH_SIZE = RUN_PAGE_PREFIX + "batch-size"
TRIGGER_KINDS = RUN_PAGE_PREFIX + "triggers"  # a batch's trigger kinds
# Why a run failed without it being the table's fault ("lock_held" when every table's lock was held,
# "outage"): history does not count such failures toward backoff.
FAILURE_KIND = RUN_PAGE_PREFIX + "failure-kind"
# Tables the run skipped because another run held their table lock (not a failure of the run).
SKIPPED = RUN_PAGE_PREFIX + "skipped"
# Tables whose commit lost a race with another writer in this run (a conflict, not a failure).
CONFLICTS = RUN_PAGE_PREFIX + "conflicts"
# Tables whose work ended Spark's own process in this run (their failure; a fresh Spark was started).
SPARK_RESTARTED = RUN_PAGE_PREFIX + "spark-restarted"
# A partition-scoped rewrite (core/rewrites/partition_scope.py): its partitions and bytes, and the backlog left.
PARTITIONS = RUN_PAGE_PREFIX + "partitions"
POLICY_TAG_PREFIX = RUN_PAGE_PREFIX + "tag."  # + a policy's tag key: the policy's ``tags``

# The keys of runs made before floe-dagster moved them to the run page (issue 16): read with
# :func:`tag_value`, so the HTTP API still reports those runs' actor and trigger id.
LEGACY_KEYS = {
    key: "floe/" + key[len(RUN_PAGE_PREFIX):]
    for key in (NAMESPACE, POLICY_VERSION, DEBT_SCORE, SLOT, ESTIMATED_BYTES, ACTOR, TRIGGER_ID, ATTEMPT, BATCH_KEY,
                BATCH_SIZE, TRIGGER_KINDS, FAILURE_KIND)
}


def tag_value(tags: Mapping[str, str], key: str, default: str | None = None) -> str | None:
    """A run's tag, under its key or the key runs had before it moved (:data:`LEGACY_KEYS`)."""
    value = tags.get(key)
    if value is None and key in LEGACY_KEYS:
        value = tags.get(LEGACY_KEYS[key])
    return default if value is None else value


TRIGGERS = ("cron", "interval", "condition", "critical", "manual", "backfill", "backlog", "sla", "after_write",
            "agent")

# dagster/priority bands (higher runs first in the queue): manual and an approved agent's > critical and a
# breached SLA > scheduled > backfill, plus a debt bucket of 0..9 within the band.
PRIORITY_BANDS = {"manual": 300, "agent": 300, "critical": 200, "sla": 200, "cron": 100, "interval": 100,
                  "condition": 100, "backfill": 0}


def run_priority(trigger: str, debt_score: float = 0.0) -> int:
    bucket = max(0, min(9, int(debt_score // 100)))
    return PRIORITY_BANDS.get(trigger, 100) + bucket * 10


# Dagster's own tags that floe-dagster sets.
DAGSTER_PRIORITY = "dagster/priority"
DAGSTER_MAX_RUNTIME = "dagster/max_runtime"
# Dagster's run tags are limited in length; a reason is a human sentence, cut to this.
MAX_REASON_CHARS = 1000
MAX_TABLES_CHARS = 1000


@dataclass(frozen=True)
class PolicyFacts:
    """What the table's effective policy says about one operation, for the run's tags."""

    name: str | None
    version: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)  # already as run tags (POLICY_TAG_PREFIX + key)
    timeout_s: float | None = None  # the schedule's ``timeout`` (or the default), in seconds


@dataclass(frozen=True)
class Approval:
    """An agent's proposal that a person approved: the names of the keys (never the keys) and the proposal's id."""

    approved_by: str
    proposed_by: str
    proposal_id: str

    def tags(self) -> dict[str, str]:
        return {APPROVED_BY: self.approved_by, PROPOSED_BY: self.proposed_by, PROPOSAL: self.proposal_id}


@dataclass(frozen=True)
class Origin:
    """Who asked for the run, and why."""

    trigger: str  # one of TRIGGERS
    reason: str
    actor: str  # the OS user, the API key's name, or the launcher (``sensor:<scope>``)
    trigger_id: str | None = None  # shared by the runs of one manual trigger or backfill
    approval: Approval | None = None  # an agent's run: who proposed it and who approved it


def run_tags(
    table: TableName, op: Operation, policy: PolicyFacts, origin: Origin, decision: RunDecision | None = None
) -> dict[str, str]:
    """The tags of a run that maintains one operation of one table. A launcher's decision adds what the
    planner decided (debt score, slot, attempt, estimated bytes, item key) and its own maximum runtime
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
    if origin.approval is not None:
        tags.update(origin.approval.tags())
    max_runtime_s = policy.timeout_s
    if decision is not None:
        tags.update({
            DEBT_SCORE: f"{decision.debt_score:.1f}",
            SLOT: decision.slot,
            ESTIMATED_BYTES: str(decision.estimated_bytes),
            ATTEMPT: str(decision.attempt),
            BATCH_KEY: decision.item_key,
        })
        if decision.scope is not None:
            tags[PARTITIONS] = scope_tag(decision.scope)
        if decision.upstream is not None:
            tags.update(upstream_tags(decision.upstream))
        max_runtime_s = decision.max_runtime_s or max_runtime_s
    if max_runtime_s:
        tags[DAGSTER_MAX_RUNTIME] = str(int(max_runtime_s))
    tags.update(policy.tags)
    return tags


def upstream_tags(upstream: Writer) -> dict[str, str]:
    """An after-write run's link to the write that made it due."""
    return {UPSTREAM_ASSET: key_text(upstream.asset_key), UPSTREAM_RUN: upstream.last_run_id or "",
            UPSTREAM_STORAGE_ID: str(upstream.last_storage_id)}


def with_upstream_from_tags(decision: RunDecision, tags: Mapping[str, str]) -> RunDecision:
    """A decision read back from the ledger (which keeps the slot, ``write:<storage id>``, not the write) with
    the write its run's tags name, when they name the same one (a run of one table)."""
    storage_id = tags.get(UPSTREAM_STORAGE_ID)
    if decision.upstream is not None or not storage_id or decision.slot != f"write:{storage_id}":
        return decision
    key = tuple(tags.get(UPSTREAM_ASSET, "").split("/"))
    return replace(decision, upstream=Writer(key, "", int(storage_id), tags.get(UPSTREAM_RUN) or None))


def scope_tag(scope: Any) -> str:
    """A partition-scoped rewrite in a few words (the partitions themselves are in the ledger row)."""
    files = f", at most {scope.max_files} file(s)" if getattr(scope, "max_files", None) is not None else ""
    return (f"{len(scope.partitions)} partition(s){files}, {scope.bytes} bytes; backlog {scope.backlog_partitions} "
            f"partition(s), {scope.backlog_bytes} bytes" + ("; over the cap" if scope.oversized else ""))


def shared_run_tags(tables: Sequence[TableName], op: Operation, origin: Origin) -> dict[str, str]:
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


def tables_run_tags(tables: Sequence[TableName], op: Operation, origin: Origin,
                    policy_of: Callable[[TableName], PolicyFacts],
                    decision: RunDecision | None = None) -> dict[str, str]:
    """The tags of a run over these tables, whoever launches it: a run of one table is tagged with
    its own policy (``policy_of`` is asked only then) and ``decision``; a run over several with what
    they share."""
    if len(tables) == 1:
        return run_tags(tables[0], op, policy_of(tables[0]), origin, decision)
    return shared_run_tags(tables, op, origin)


def batch_run_tags(decisions: Sequence[RunDecision], policies: Mapping[TableName, PolicyFacts], launcher: str,
                   batch_key: str) -> dict[str, str]:
    """The tags of the run of one admitted batch: a batch of one is tagged as any run of one table; a
    larger batch gets what its tables share (each table's own decision goes into its
    materialization), its tables while they fit in a tag, their number and trigger kinds, the most
    urgent priority and the tightest maximum runtime."""
    first = decisions[0]
    tables = [d.table for d in decisions]
    reason = first.reason if len(decisions) == 1 else f"{len(decisions)} tables due; the first: {first.reason}"
    tags = tables_run_tags(tables, first.operation, Origin(first.trigger, reason, launcher), policies.__getitem__,
                           first)
    tags[BATCH_KEY] = batch_key
    if len(decisions) > 1:
        tags.update(_batch_tags(decisions, policies))
    return tags


def _batch_tags(decisions: Sequence[RunDecision], policies: Mapping[TableName, PolicyFacts]) -> dict[str, str]:
    """What only a run over several tables says of them."""
    tables = [d.table for d in decisions]
    names = ",".join(t.qualified for t in tables)
    tags = {TABLES: names} if len(names) <= MAX_TABLES_CHARS else {}
    tags.update({
        BATCH_SIZE: str(len(decisions)),
        TRIGGER_KINDS: ",".join(sorted({d.trigger for d in decisions})),
        DEBT_SCORE: f"{max(d.debt_score for d in decisions):.1f}",
        ESTIMATED_BYTES: str(sum(d.estimated_bytes for d in decisions)),
        DAGSTER_PRIORITY: str(max(run_priority(d.trigger, d.debt_score) for d in decisions)),
    })
    # One writer run made every table of the batch due after its write: tables due on their own schedule,
    # batched beside them (the demo's hourly expiry of other tables), made no writer's run theirs.
    upstream_runs = {d.upstream.last_run_id for d in decisions if d.upstream}
    if len(upstream_runs) == 1 and None not in upstream_runs:
        tags[UPSTREAM_RUN] = upstream_runs.pop()
    if len({(policies[t].name, policies[t].version) for t in tables}) == 1:  # one policy version for all
        shared = policies[tables[0]]
        tags.update({POLICY: shared.name or "", POLICY_VERSION: shared.version, **shared.tags})
    runtimes = [d.max_runtime_s or policies[d.table].timeout_s for d in decisions]
    if all(runtimes):
        tags[DAGSTER_MAX_RUNTIME] = str(int(min(runtimes)))
    return tags


def decision_from_tags(table: TableName, op: Operation, tags: Mapping[str, str]) -> RunDecision:
    """Why a run no launcher admitted maintains a table (a manual trigger, a backfill, Dagit), from
    its tags: it has no slot of its own, so it is named after its trigger and trigger id."""
    def tag(key: str) -> str | None:
        return tag_value(tags, key)

    trigger = tag(TRIGGER) or ""
    return RunDecision(table, op, trigger, tag(REASON) or "", float(tag(DEBT_SCORE) or 0.0),
                       tag(SLOT) or f"{trigger}:{tag(TRIGGER_ID) or 'run'}", int(tag(ATTEMPT) or 0),
                       int(tag(ESTIMATED_BYTES) or 0))
