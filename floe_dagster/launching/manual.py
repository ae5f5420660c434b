"""Manual trigger (Floe's ``POST /maintenance/trigger`` and ``floe-dagster trigger``): run a table's
operations now, recorded in the instance like any other run. One path for both: the CLI runs them in
process (:func:`trigger_table`), the HTTP API queues them for the daemon (:func:`submit_queued`);
both check the request the same way (:func:`prepare_trigger`) and tag the runs with the one builder.

One run per operation, in Floe's order, sharing a trigger id (``dagster/floe.trigger-id``); after a failure the later
operations are cancelled. Schedules, windows and backoff are ignored; the table lock is not. An
operation that deletes files is skipped on a table that sets ``gc.enabled=false``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from dagster import DagsterInstance, RunsFilter

from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import Operation, gc_disabled, gc_disabled_reason
from floe_dagster.core.policies.policy import Policy
from floe_dagster.core.runs.run_tags import Origin
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for, unmappable_reason
from floe_dagster.errors import LaunchFailed, TriggerRefused
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import read_cached_tables
from floe_dagster.instance import get_instance
from floe_dagster.launching.submit import RunToSubmit, submit_runs
from floe_dagster.launching.trigger_runs import cancel_queued_run, run_outcome
from floe_dagster.policies import load_policy_set, run_tags_for
from floe_dagster.settings import Settings

SUCCEEDED, FAILED, CANCELLED, SKIPPED = "SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED"
# The commit lost a race with another writer: nothing changed, no backoff; a later run retries it.
CONFLICT = "CONFLICT"
# Dagster's console logger of an in-process run, silenced unless asked (--verbose): events go to the instance only.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass(frozen=True)
class PreparedTrigger:
    """A checked manual trigger: the table, its effective policy, and what will run."""

    table: TableName
    policy: Policy
    to_run: list[Operation]  # in Floe's order
    skipped: dict[Operation, str]  # operations that will not run, with why (gc.enabled=false)


@dataclass
class OperationOutcome:
    operation: Operation
    status: str  # SUCCEEDED, CONFLICT, FAILED, CANCELLED, SKIPPED
    run_id: str | None = None
    message: str = ""
    metadata: dict = field(default_factory=dict)


@dataclass
class TriggerSummary:
    table: TableName
    trigger_id: str
    policy_name: str | None
    outcomes: list[OperationOutcome]

    @property
    def succeeded(self) -> bool:
        ran = [o for o in self.outcomes if o.status != SKIPPED]
        return bool(ran) and all(o.status in (SUCCEEDED, CONFLICT) for o in ran)  # a lost race is no failure

    def lines(self) -> list[str]:
        head = f"{self.table.qualified} (policy {self.policy_name}, trigger id {self.trigger_id})"
        body = [
            f"  {o.operation.value}: {o.status}" + (f" run {o.run_id}" if o.run_id else "")
            + (f" - {o.message}" if o.message else "")
            for o in self.outcomes
        ]
        return [head, *body]


def prepare_trigger(settings: Settings, table: TableName, operations: Sequence[Operation] | None,
                    policy_name: str | None = None, *, queued: bool) -> PreparedTrigger:
    """Check a manual trigger before any run: the table exists (UnknownTable), a policy is in effect
    and configures the operations asked for (every configured one when none is named), and the
    table can be an asset (for a queued run, it must be one of the code location's assets already).
    Refusals are :class:`TriggerRefused` with a code the HTTP API answers with."""
    properties = dict(load_table(open_catalog(settings.catalog), table).properties)
    policies = load_policy_set(settings)
    policy = policies.effective_policy(table)
    if policy_name is not None:
        named = policies.get(policy_name)
        if named is None or not named.enabled:
            raise TriggerRefused("POLICY_NOT_FOUND", f"no enabled policy named '{policy_name}'",
                                 {"policyName": policy_name})
        if policy is None or policy.name != named.name:
            raise TriggerRefused("POLICY_NOT_EFFECTIVE",
                                 f"policy '{policy_name}' is not the policy in effect for {table.qualified} "
                                 f"({policy.name if policy else 'none'}); runs always use the effective policy",
                                 {"policyName": policy_name, "effectivePolicy": policy.name if policy else None})
    if policy is None:
        raise TriggerRefused("NO_POLICY", f"No matching policy found for table {table.qualified}",
                             {"table": table.qualified})
    configured = policy.configured_operations()
    if operations:
        wanted = sorted(set(operations), key=lambda op: op.order)
        missing = [op.value for op in wanted if op not in configured]
        if missing:
            raise TriggerRefused("OPERATION_NOT_CONFIGURED",
                                 f"policy '{policy.name}' does not configure {', '.join(missing)} "
                                 f"for {table.qualified}",
                                 {"policyName": policy.name, "operations": missing,
                                  "configured": [op.value for op in configured]})
    else:
        wanted = configured
    skipped = {op: gc_disabled_reason(op) for op in wanted if op.needs_gc and gc_disabled(properties)}
    prepared = PreparedTrigger(table, policy, [op for op in wanted if op not in skipped], skipped)
    if not prepared.to_run:
        return prepared
    unmappable = unmappable_reason(table)
    if unmappable:  # it is no asset of the code location, so no run can maintain it
        raise TriggerRefused("TABLE_NOT_LOADED", f"{unmappable}; floe-dagster cannot maintain it (rename the table)",
                             {"table": table.qualified})
    if queued:
        cached = read_cached_tables(settings)
        if cached is not None and table not in set(cached):
            raise TriggerRefused("TABLE_NOT_LOADED",
                                 f"{table.qualified} is not an asset yet: run `floe-dagster tables --refresh` and "
                                 "reload the code location (the debt-score sensor refreshes the list by itself)",
                                 {"table": table.qualified})
    return prepared


def submit_queued(settings: Settings, prepared: PreparedTrigger, origin: Origin,
                  instance: DagsterInstance) -> list[str]:
    """Queue one run per operation for the daemon, as Dagit does; on a failure the runs already
    queued are cancelled (they would run without the rest) and LaunchFailed is raised."""
    table = prepared.table
    runs = [RunToSubmit(asset_key_for(table), op.value, run_tags_for(settings, table, op, origin))
            for op in prepared.to_run]
    try:
        return submit_runs(instance, runs, MAINTENANCE_JOB)
    except LaunchFailed as exc:
        for record in instance.get_run_records(RunsFilter(tags={T.TRIGGER_ID: origin.trigger_id})):
            cancel_queued_run(instance, record.dagster_run.run_id, f"floe-dagster: {exc}")
        raise


def run_in_process(settings: Settings, prepared: PreparedTrigger, origin: Origin,
                   instance: DagsterInstance, verbose: bool = False) -> list[OperationOutcome]:
    """Run each operation now in this process (``execute_in_process``), stopping after a failure. Dagster's
    own event log lines (a failed step's with its Python traceback) are printed only when ``verbose``: the
    outcomes say what ran and why a run failed, and every event stays in the instance (Dagit)."""
    table = prepared.table
    # Only the table's asset: its health check is reported without runs (defs/health_reporting.py).
    job = build_definitions(settings, tables=[table]).resolve_job_def(MAINTENANCE_JOB).get_subset(
        asset_selection={asset_key_for(table)}, asset_check_selection=set())
    outcomes = [OperationOutcome(op, SKIPPED, message=why) for op, why in prepared.skipped.items()]
    failed = False
    for op in prepared.to_run:
        if failed:
            outcomes.append(OperationOutcome(op, CANCELLED, message="a previous operation failed"))
            continue
        tags = run_tags_for(settings, table, op, origin)
        result = job.execute_in_process(instance=instance, partition_key=op.value, tags=tags, raise_on_error=False,
                                        run_config=None if verbose else QUIET_CONSOLE)
        ran = run_outcome(result.all_events)
        if result.success and ran.conflicts and not ran.tables:
            outcomes.append(OperationOutcome(op, CONFLICT, result.run_id, message=" | ".join(ran.conflicts.values())))
        elif result.success:
            metadata = {key: value for values in ran.tables.values() for key, value in values.items()}
            outcomes.append(OperationOutcome(op, SUCCEEDED, result.run_id, metadata=metadata))
        else:
            failed = True
            outcomes.append(OperationOutcome(op, FAILED, result.run_id, message=ran.error or "the run failed"))
    return sorted(outcomes, key=lambda o: o.operation.order)


def trigger_table(
    settings: Settings,
    table_text: str,
    operations: list[str],
    *,
    reason: str,
    actor: str,
    trigger_id: str,
    instance: DagsterInstance | None = None,
    verbose: bool = False,
) -> TriggerSummary:
    """``floe-dagster trigger``: the table's operations (all its policy configures when none are
    named), run in this process."""
    table = TableName.parse(table_text, settings.catalog.name)
    prepared = prepare_trigger(settings, table, [Operation.parse(o) for o in operations] or None, queued=False)
    if not prepared.to_run and not prepared.skipped:
        raise TriggerRefused("NO_OPERATIONS", f"policy '{prepared.policy.name}' configures no operation for "
                             f"{table.qualified}", {"table": table.qualified})
    origin = Origin("manual", reason, actor, trigger_id)
    outcomes = run_in_process(settings, prepared, origin, instance or get_instance(), verbose)
    return TriggerSummary(table, trigger_id, prepared.policy.name, outcomes)

