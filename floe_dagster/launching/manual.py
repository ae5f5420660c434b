"""Manual trigger (Floe's ``POST /maintenance/trigger`` and ``floe-dagster trigger``): run a table's
operations now, in process, recorded in the instance like any other run.

One run per operation, in Floe's order, sharing a ``floe/trigger-id``; after a failure the later
operations are cancelled. Schedules, windows and backoff are ignored; the table lock is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dagster import DagsterInstance

from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.core import run_tags as T
from floe_dagster.defs.names import asset_key_for, unmappable_reason
from floe_dagster.policies import configured_operations, resolve_operation
from floe_dagster.settings import Settings


@dataclass
class OperationOutcome:
    operation: Operation
    status: str  # SUCCEEDED, FAILED, CANCELLED
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
        return bool(self.outcomes) and all(o.status == "SUCCEEDED" for o in self.outcomes)

    def lines(self) -> list[str]:
        head = f"{self.table.qualified} (policy {self.policy_name}, trigger id {self.trigger_id})"
        body = [
            f"  {o.operation.value}: {o.status}" + (f" run {o.run_id}" if o.run_id else "")
            + (f" - {o.message}" if o.message else "")
            for o in self.outcomes
        ]
        return [head, *body]


def parse_table(settings: Settings, text: str) -> TableName:
    table = TableName.parse(text, settings.catalog.name)
    load_table(open_catalog(settings.catalog), table)  # an unknown table is a clear error, before any run
    return table


def trigger_table(
    settings: Settings,
    table_text: str,
    operations: list[str],
    *,
    reason: str,
    actor: str,
    trigger_id: str,
    instance: DagsterInstance | None = None,
) -> TriggerSummary:
    from floe_dagster.defs.build import MAINTENANCE_JOB, build_definitions
    from floe_dagster.instance import get_instance

    table = parse_table(settings, table_text)
    unmappable = unmappable_reason(table)
    if unmappable:  # it is no asset of the code location, so no run can maintain it
        raise ValueError(f"{unmappable}; floe-dagster cannot maintain it (rename the table)")
    wanted = [Operation.parse(o) for o in operations] if operations else configured_operations(settings, table)
    if not wanted:
        raise LookupError(f"table '{table.qualified}': no policy configures any operation for it")
    wanted = sorted(set(wanted), key=lambda op: op.order)
    for op in wanted:
        resolved = resolve_operation(settings, table, op)
        if resolved.config is None:
            raise LookupError(f"table '{table.qualified}': {resolved.why_not}")
    instance = instance or get_instance()
    # Only the table's asset: its health check is reported without runs (defs/health.py).
    job = build_definitions(settings, tables=[table]).resolve_job_def(MAINTENANCE_JOB).get_subset(
        asset_selection={asset_key_for(table)}, asset_check_selection=set())
    outcomes: list[OperationOutcome] = []
    policy_name = resolve_operation(settings, table, wanted[0]).policy_name
    failed = False
    for op in wanted:
        if failed:
            outcomes.append(OperationOutcome(op, "CANCELLED", message="a previous operation failed"))
            continue
        resolved = resolve_operation(settings, table, op)
        tags = T.operator_run_tags(table, op, resolved.policy_name, resolved.policy_version, "manual", reason, actor,
                                   trigger_id)
        result = job.execute_in_process(instance=instance, partition_key=op.value, tags=tags, raise_on_error=False)
        if result.success:
            materializations = [
                event.event_specific_data.materialization
                for event in result.all_events if event.event_type_value == "ASSET_MATERIALIZATION"
            ]
            metadata = {k: v.value for m in materializations for k, v in m.metadata.items()}
            outcomes.append(OperationOutcome(op, "SUCCEEDED", result.run_id, metadata=metadata))
        else:
            failed = True
            failure = next(
                (e.event_specific_data.error.message.strip() for e in result.all_events
                 if e.event_type_value == "STEP_FAILURE" and e.event_specific_data and e.event_specific_data.error),
                "the run failed",
            )
            outcomes.append(OperationOutcome(op, "FAILED", result.run_id, message=failure.splitlines()[0]))
    return TriggerSummary(table, trigger_id, policy_name, outcomes)
