"""One maintenance run as an operation record of the HTTP API: Floe's OperationResponse keys with ours
beside them (``/api/v1/operations``, ``/operations/{id}``), and a shadow policy's recorded decision in
the same shape. Only the shaping: the queries are in api/operation_reads.py.
"""

from __future__ import annotations


from floe_dagster.api.run_facts import RunFacts
from floe_dagster.api.timestamps import iso
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.basics.tables import TableName

# An operation record's status as Floe words it: Floe has no cancelled record (a cancelled run did not
# maintain its table, so it is FAILED there; runStatus still says CANCELED).
FLOE_RECORD_STATUS = {"SUCCEEDED": "SUCCESS", "CANCELLED": "FAILED"}
# A per-operation result whose table lost a commit race: the run succeeded, the table was not maintained.
CONFLICT = "CONFLICT"
# A shadow policy's recorded decisions (the ledger's shadow rows): what would have run, never a run.
SHADOW = "SHADOW"

_STATUS_DESCRIPTIONS = {"PENDING": "Queued for the daemon", "RUNNING": "Running",
                        "SUCCEEDED": "Completed successfully", "FAILED": "Failed", "CANCELLED": "Cancelled"}


def _floe_record_keys(facts: RunFacts, table: str | None) -> dict[str, object]:
    """Floe's OperationResponse keys for one run (ours follow beside them; ``status`` stays the run's own)."""
    name = None
    if table:
        try:
            name = TableName.parse(table, table.split(".", 1)[0])
        except ValueError:
            name = None
    numbers = facts.tables.get(table, {}) if table else {}
    operation = facts.tags.get(T.OPERATION) or facts.tags.get("dagster/partition")
    succeeded = facts.status == "SUCCEEDED"
    return {
        "id": facts.run_id,
        "catalog": name.catalog if name else None,
        "namespace": name.namespace_str if name else None,
        "tableName": name.name if name else None,
        "qualifiedTableName": table,
        "policyId": None,
        "engineType": "SPARK",
        "executionId": facts.run_id,
        "scheduleId": None,
        "policyVersion": None,
        "statusDescription": _STATUS_DESCRIPTIONS.get(facts.status, facts.status),
        "startedAt": iso(facts.start) or iso(facts.created),
        "completedAt": iso(facts.end),
        "results": {
            "operations": [{"operationType": operation, "status": facts.status, "metrics": numbers,
                            "errorMessage": facts.error}] if operation else [],
            "successCount": int(succeeded), "failedCount": int(facts.status == "FAILED"), "skippedCount": 0,
            "totalDurationMs": facts.duration_ms or 0,
        },
        "normalizedMetrics": numbers,
    }


def operation_item(facts: RunFacts, table: str | None) -> dict[str, object]:
    """A run's operation record; ``table`` is the table asked for (a batch run names several)."""
    tags = facts.tags
    own_table = tags.get(T.TABLE) or table
    if own_table is None and len(facts.tables) == 1:
        own_table = next(iter(facts.tables))
    return {
        **_floe_record_keys(facts, own_table),
        "runId": facts.run_id,
        "jobName": facts.job_name,
        "table": own_table,
        "operation": tags.get(T.OPERATION) or tags.get("dagster/partition"),
        # Floe's record status (a script checks SUCCESS); the run's own is runStatus.
        "status": FLOE_RECORD_STATUS.get(facts.status, facts.status),
        "runStatus": facts.dagster_status.value,
        "trigger": tags.get(T.TRIGGER),
        "triggerId": T.tag_value(tags, T.TRIGGER_ID),
        "policyName": tags.get(T.POLICY) or None,
        "actor": T.tag_value(tags, T.ACTOR),
        "reason": tags.get(T.REASON),
        "createdAt": iso(facts.created),
        "startTime": iso(facts.start),
        "endTime": iso(facts.end),
        "durationMs": facts.duration_ms,
        "metrics": facts.tables.get(own_table, {}) if own_table else {},
        "tables": [{"table": name, "metrics": numbers} for name, numbers in sorted(facts.tables.items())],
        "errorMessage": facts.error,
        # Lost commit races: `table`'s (its message naming the commit that won), and every table's.
        "conflict": facts.conflicts.get(own_table) if own_table else None,
        "conflicts": [{"table": name, "conflict": message} for name, message in sorted(facts.conflicts.items())],
        "shadow": False,  # a run; ?status=SHADOW lists the shadow policies' decisions, never runs
    }


def shadow_item(row) -> dict[str, object]:
    """A shadow policy's recorded decision (a ledger shadow row) as an operation record: no run, no
    trigger id; it says what would have run, when (``recordedAt``) and why."""
    return {
        "runId": None, "jobName": None, "table": row.table_name, "operation": row.operation.value,
        "status": SHADOW, "runStatus": None, "trigger": row.trigger, "triggerId": None, "policyName": None,
        "actor": None, "reason": row.reason, "createdAt": iso(row.admitted_at), "startTime": None,
        "endTime": None, "durationMs": None, "metrics": {}, "tables": [], "errorMessage": None,
        "conflict": None, "conflicts": [], "shadow": True, "recordedAt": iso(row.admitted_at),
        "slot": row.slot, "debtScore": row.debt_score, "estimatedBytes": row.estimated_bytes,
    }
