"""Schemas of the operations endpoints (``/api/v1/operations``, a table's operations, the stats): the runs as
Floe's operation records, a shadow policy's recorded decisions among them; the HTTP API's other schemas are in
api/models.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from floe_dagster.api.models import Number, OpenModel

# An operation record's status, as Floe's /operations words it (PENDING, RUNNING, SUCCESS, FAILED: a
# cancelled run is FAILED), or SHADOW for a shadow policy's recorded decision.
RecordStatus = Literal["PENDING", "RUNNING", "SUCCESS", "FAILED", "SHADOW"]


class TableResult(BaseModel):
    table: str
    metrics: dict[str, Number]


class TableConflict(BaseModel):
    table: str
    conflict: str


class OperationRun(OpenModel):
    """A maintenance run: Floe's OperationResponse keys (id, catalog, namespace, tableName, qualifiedTableName,
    startedAt, completedAt, results, normalizedMetrics...; extra fields here), then floe-dagster's. With
    ``?status=SHADOW``, a shadow policy's recorded decision (``shadow`` true: no run, so ``runId``,
    ``jobName`` and ``runStatus`` are null)."""

    runId: str | None
    jobName: str | None
    table: str | None = Field(description="The table it maintained (null for a run over several tables)")
    operation: str | None
    status: RecordStatus = Field(description="Floe's record status; the run's own is runStatus")
    runStatus: str | None = Field(description="Dagster's run status")
    trigger: str | None
    triggerId: str | None
    policyName: str | None
    actor: str | None
    reason: str | None
    createdAt: str | None = Field(json_schema_extra={"format": "date-time"})
    startTime: str | None = Field(json_schema_extra={"format": "date-time"})
    endTime: str | None = Field(json_schema_extra={"format": "date-time"})
    durationMs: int | None
    metrics: dict[str, Number] = Field(description="Materialization metadata numbers for `table`")
    tables: list[TableResult] = Field(description="Every table the run materialized, with its numbers")
    errorMessage: str | None
    conflict: str | None = Field(None, description="`table` lost a commit race with another writer (the run's "
                                                   "status stays SUCCESS): the race, naming the commit that won")
    conflicts: list[TableConflict] = Field(default_factory=list,
                                           description="Every table of the run that lost a commit race")
    shadow: bool = Field(False, description="A shadow policy's decision (status SHADOW), never a run")
    recordedAt: str | None = Field(
        None, json_schema_extra={"format": "date-time"},
        description="A shadow decision: when the ledger recorded it (when it would have run)")
    slot: str | None = Field(None, description="A shadow decision: the due slot it was recorded for (once per slot)")
    debtScore: float | None = Field(None, description="A shadow decision: its debt score")
    estimatedBytes: int | None = Field(None, description="A shadow decision: the bytes it would have rewritten")


class OperationsPage(BaseModel):
    operations: list[OperationRun]
    total: int
    limit: int
    offset: int
    hasMore: bool


class OperationStats(BaseModel):
    """Floe's StatsResponse."""

    totalOperations: int
    successCount: int
    failedCount: int
    partialFailureCount: int
    runningCount: int
    noPolicyCount: int
    noOperationsCount: int
    withFailuresCount: int
    completedCount: int
    successRate: float
    windowStart: str
    windowEnd: str
    windowDuration: str


class TableRef(BaseModel):
    catalog: str
    namespace: str
    name: str
    qualified: str


class TableOperations(BaseModel):
    operations: list[OperationRun]
    total: int
    table: TableRef
