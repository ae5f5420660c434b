"""Request and response schemas of the HTTP API; the OpenAPI document is generated from them.

Field names follow Floe's REST API (camelCase). Responses computed by shared code
(``explain_table``, ``health_report``) are passed through unchanged, so their schemas allow extra
fields: a field added there appears here without breaking a client. The trigger status's schemas are in
api/trigger_status_models.py, the operations' in api/operation_models.py, the table browsing and catalog
schemas in api/catalog_models.py, the API keys' in api/key_models.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from floe_dagster.core.operations import ALL_OPERATIONS

# Every kind of the operation registry (core/operation_kinds/), in Floe's order.
OperationName = Literal[tuple(op.value for op in ALL_OPERATIONS)]  # type: ignore[valid-type]

# A trigger's per-operation result: Floe's SUCCEEDED, FAILED, CANCELLED, SKIPPED; PENDING while queued,
# RUNNING while it runs; WOULD_RUN in a dry run; CONFLICT: its commit lost a race with another writer
# (the run succeeded and changed nothing; `conflict` names the commit that won). Not a failure.
OperationResultStatus = Literal[
    "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED", "WOULD_RUN", "CONFLICT",
]
# Trigger statuses (Floe's SUCCESS, PARTIAL_FAILURE, FAILED, NO_OPERATIONS; PENDING and RUNNING while
# the runs are queued or running; CANCELLED when every run was cancelled; DRY_RUN).
TriggerStatus = Literal[
    "PENDING", "RUNNING", "SUCCESS", "PARTIAL_FAILURE", "FAILED", "CANCELLED", "NO_OPERATIONS", "DRY_RUN",
]
Number = float | int | bool


class _Strict(BaseModel):
    # No coercion ("true" is not a boolean) and no unknown fields: a mistyped "dryrun" must not
    # turn a dry run into a real one.
    model_config = ConfigDict(strict=True, extra="forbid")


class OpenModel(BaseModel):
    """A response passed through from shared code: its fields beyond the schema's are kept (module docstring)."""

    model_config = ConfigDict(extra="allow")


class ErrorResponse(BaseModel):
    """Every error (4xx and 5xx) has this shape."""

    error: str = Field(description="What went wrong, for people")
    code: str = Field(description="Machine-readable code, e.g. VALIDATION_FAILED, NOT_FOUND, TABLE_BUSY")
    details: dict[str, Any] = Field(description="Structured context (for 409: runId, runStatus, operation)")
    timestamp: str = Field(json_schema_extra={"format": "date-time"})


class TriggerRequest(_Strict):
    model_config = ConfigDict(strict=True, extra="forbid", json_schema_extra={"examples": [
        {"catalog": "demo", "namespace": "sales", "table": "orders"},
        {"catalog": "demo", "namespace": "sales", "table": "orders", "operations": ["REWRITE_DATA_FILES"],
         "reason": "compact before the report", "dryRun": True},
    ]})

    catalog: str = Field(min_length=1, max_length=255, description="The catalog name (floe.yaml's catalog.name)")
    namespace: str = Field(min_length=1, max_length=1024, description="Dotted for nested namespaces: a.b")
    table: str = Field(min_length=1, max_length=255)
    policyName: str | None = Field(
        None, max_length=255,
        description="Must name the table's effective policy (runs always use the effective policy); blank or "
                    "absent: no specific policy, as in Floe",
    )
    operations: list[OperationName] | None = Field(
        None, min_length=1, max_length=5, description="Default: every operation the policy configures",
    )
    reason: str | None = Field(None, max_length=1000, description="Recorded as the floe/reason run tag")
    dryRun: bool = Field(False, description="Say what would be queued; launch nothing")


class OperationResult(BaseModel):
    operationType: OperationName
    status: OperationResultStatus
    runId: str | None = None
    startTime: str | None = Field(None, json_schema_extra={"format": "date-time"})
    endTime: str | None = Field(None, json_schema_extra={"format": "date-time"})
    durationMs: int | None = None
    metrics: dict[str, Number] = Field(default_factory=dict,
                                       description="The run's materialization metadata numbers for the table")
    errorMessage: str | None = None
    conflict: str | None = Field(None, description="Status CONFLICT: the lost commit race, naming the commit "
                                                   "that won (snapshot id, its operation, when)")


class TriggerConflict(BaseModel):
    operationType: OperationName
    runId: str | None
    conflict: str | None


class TriggerResponse(BaseModel):
    orchestrationId: str = Field(description="The trigger id: every run carries it as the tag dagster/floe.trigger-id")
    status: TriggerStatus
    table: str = Field(description="catalog.namespace.table")
    policyName: str | None
    startTime: str = Field(json_schema_extra={"format": "date-time"})
    endTime: str | None = Field(None, json_schema_extra={"format": "date-time"})
    durationMs: int | None = None
    operationResults: list[OperationResult]
    message: str
    dryRun: bool = False
    conflicts: list[TriggerConflict] = Field(
        default_factory=list,
        description="The operations whose commit lost a race with another writer (status CONFLICT): they "
                    "count as completed for `status` (SUCCESS, not FAILED: a lost race is no failure)")


class HealthIssue(OpenModel):
    type: str
    severity: Literal["info", "warning", "critical"]
    message: str


class HealthResponse(OpenModel):
    """Floe's HealthReport, then floe-dagster's own fields (tier, policy, derived numbers, raw metrics,
    debt score)."""

    qualifiedName: str
    assessedAt: str
    healthStatus: Literal["healthy", "warning", "critical"]
    snapshotCount: int | None
    dataFileCount: int | None
    totalDataSizeBytes: int | None
    totalDataSizeFormatted: str | None
    minFileSizeBytes: int | None
    maxFileSizeBytes: int | None
    avgFileSizeBytes: float | None
    avgFileSizeFormatted: str | None
    smallFileCount: int | None
    largeFileCount: int | None
    deleteFileCount: int | None
    positionDeleteFileCount: int | None
    equalityDeleteFileCount: int | None
    deleteFileRatio: float | None
    manifestCount: int | None
    totalManifestSizeBytes: int | None
    totalManifestSizeFormatted: str | None
    partitionCount: int | None
    oldestSnapshotAgeDays: int | None
    newestSnapshotAgeDays: int | None
    issues: list[HealthIssue]
    thresholds: dict[str, Any]
    # The effective policy's declared table properties and the drift ({declared, drift}); null: none declared.
    tableProperties: dict[str, Any] | None = None


class HealthHistoryResponse(OpenModel):
    catalog: str
    namespace: str
    table: str
    history: list[dict[str, Any]]
    total: int


class ValidatePatternRequest(_Strict):
    model_config = ConfigDict(strict=True, extra="forbid",
                              json_schema_extra={"examples": [{"pattern": "demo.sales.*"}]})

    pattern: str = Field(min_length=1, max_length=1024, description="A table pattern, as in a policy's tablePattern")


class ValidatePatternResponse(BaseModel):
    valid: bool
    message: str
    matchedTables: list[str]
    matchCount: int


class HealthCheck(BaseModel):
    name: str
    status: Literal["UP", "DOWN"]


class ServiceHealth(BaseModel):
    status: Literal["UP", "DOWN"]
    checks: list[HealthCheck]
    timestamp: str = Field(json_schema_extra={"format": "date-time"})
