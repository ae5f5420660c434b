"""Request and response schemas of the HTTP API; the OpenAPI document is generated from them.

Field names follow Floe's REST API (camelCase). Responses computed by shared code
(``explain_table``, ``health_report``) are passed through unchanged, so their schemas allow extra
fields: a field added there appears here without breaking a client. The table browsing and catalog
schemas are in api/catalog_models.py, the API keys' in api/key_models.py.
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
# An operation record's status, as Floe's /operations words it (PENDING, RUNNING, SUCCESS, FAILED: a
# cancelled run is FAILED), or SHADOW for a shadow policy's recorded decision.
RecordStatus = Literal["PENDING", "RUNNING", "SUCCESS", "FAILED", "SHADOW"]
Number = float | int | bool


class _Strict(BaseModel):
    # No coercion ("true" is not a boolean) and no unknown fields: a mistyped "dryrun" must not
    # turn a dry run into a real one.
    model_config = ConfigDict(strict=True, extra="forbid")


class _Open(BaseModel):
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


class ConditionCheck(_Open):
    name: str
    measured: float | None
    threshold: float


class BackoffState(_Open):
    consecutiveFailures: int
    until: str | None


class ThrottleState(_Open):
    consecutiveZeroChangeRuns: int
    until: str | None


class LastRun(_Open):
    start: str | None
    succeeded: bool | None
    trigger: str | None


class QuietState(_Open):
    """The quiet period (a schedule's ``quietFor``/``maxQuietWait``): how long until the table is quiet and
    until the run is forced (seconds, 0 once reached, null when unknown or not checked)."""

    evaluated: bool
    quietFor: str
    maxQuietWait: str
    detail: str
    quiet: bool | None = None
    forced: bool | None = None
    lastForeignCommit: str | None = None
    lastForeignOperation: str | None = None
    quietAt: str | None = None
    secondsUntilQuiet: float | None = None
    dueSince: str | None = None
    forcedAt: str | None = None
    secondsUntilForced: float | None = None


class SlaState(_Open):
    """The operation's SLA contract now (a schedule's ``sla``): breached when its last success started more
    than ``maxAge`` ago (never succeeded: since the table's first data); a breach runs it first (trigger sla)."""

    maxAge: str
    severity: Literal["WARN", "ERROR"]
    owner: str
    breached: bool
    measuredFrom: Literal["last_success", "first_data", "unknown", "no_data"]
    since: str | None = None
    lastSuccess: str | None = None
    breachedSince: str | None = Field(None, description="When the breach began; null while met")
    dueBy: str | None = Field(None, description="When it is (or was) breached without a success")
    ageSeconds: float | None = None
    detail: str


class WriterHoldState(_Open):
    """The gate ``writer_running`` (docs/beside-pipelines.md): the writers' runs queued or started that hold a
    rewrite or an expiry, and when it runs anyway (``maxWriterWait`` after it became due)."""

    maxWriterWait: str
    held: bool
    forced: bool
    runs: list[dict[str, str]] = Field(description="{runId, status, assetKey} of each writer run queued or started")
    dueSince: str | None = None
    forcedAt: str | None = None
    secondsUntilForced: float | None = None
    detail: str


class TableWriter(_Open):
    """An asset that writes the table: named by a floe.yaml ``writers`` rule (``rule``) or by the
    ``dagster/table_name`` of its materializations (``table_name``), with its newest materialization floe read."""

    assetKey: str = Field(description="The asset key as Dagit writes it (parts joined by '/')")
    source: Literal["rule", "table_name"]
    lastMaterialization: dict[str, Any] | None = Field(None, description="{storageId, runId, at}; null before one")


class Backlog(_Open):
    """Work an operation left for later runs (docs/automation.md): a partition-scoped rewrite's
    partitions and bytes; orphan cleanup's files the last run left on disk (its per-run cap), with
    ``exact`` false when that is a lower bound."""

    partitions: int | None = None
    bytes: int | None = None
    files: int | None = None
    exact: bool | None = None


class ConflictState(_Open):
    """Lost commit races in a row, when the next attempt may start, the snapshot operation of the last
    writer that won (``overwrite``, ``delete``...), and whether the streak is long enough that each lost
    race counts as a failure (backoff)."""

    consecutiveConflicts: int
    lastConflictAt: str | None
    retryAt: str | None
    writerOperation: str | None = None
    countsAsFailure: bool = False


class ShadowDecision(_Open):
    wouldRun: bool = Field(description="The decision now would run (it passed every gate and the shadow budgets)")
    wouldRunAt: str | None = Field(json_schema_extra={"format": "date-time"})
    summary: str | None = Field(description="shadow: would run at <time> because <reason>")
    lastRecordedAt: str | None = Field(json_schema_extra={"format": "date-time"},
                                       description="When the ledger last recorded a shadow decision (it stands "
                                                   "in for a successful run for the due rules)")
    lastRecordedSlot: str | None
    lastRecordedReason: str | None


class EnvelopeVerdict(_Open):
    """The safety envelope's verdict on the operation (core/policies/envelope.py): ``ok``; ``refused`` (a run fails
    before any engine call), each field and why; or ``unchecked`` (an absolute location while the table's
    location is not known yet)."""

    status: Literal["ok", "refused", "unchecked"]
    policy: str | None
    operation: str
    refusals: list[dict[str, str]] = Field(description="{field, reason} for each refused field")
    detail: str = Field(description="envelope: ok, refused: <field>: <why>, or not checked yet: <why>")


class OperationTriggerStatus(_Open):
    operationType: str
    shouldTrigger: bool = Field(description="The operation's own verdict, as Floe's: every gate lets it run now")
    enabled: bool
    reasons: list[str]
    waitsThisTick: str | None = Field(None, description="Why this tick's admission holds it back although its gates "
                                      "let it run (another operation of the table admitted first, a budget, the tick "
                                      "cap): the planner's first reason; null when admitted or a gate decided")
    trigger: str | None
    conditionsMet: bool
    metConditions: list[str]
    unmetConditions: list[str]
    metConditionDetails: list[ConditionCheck]
    unmetConditionDetails: list[ConditionCheck]
    forcedByCriticalPipeline: bool
    forcedBySla: bool = Field(False, description="A breached SLA contract admits it (trigger sla), past the "
                                                 "conditions and minimum intervals")
    quiet: QuietState | None = None
    sla: SlaState | None = Field(None, description="The SLA contract's verdict now; null without one")
    writerHold: WriterHoldState | None = Field(None, description="The writer_running gate's verdict (a rewrite or "
                                               "an expiry of a table with a known writer); null before it is reached")
    nextEligibleTime: str | None
    debtScore: float
    debtBreakdown: dict[str, float]
    backoff: BackoffState
    conflicts: ConflictState | None = None
    throttle: ThrottleState
    backlog: Backlog | None = None
    refs: dict[str, Any] | None = Field(default=None, description="EXPIRE_SNAPSHOTS only: the policy's refRetention "
                                        "rules and each branch and tag with its age, limit and what it alone keeps")
    expiryArguments: dict[str, Any] | None = Field(
        default=None, description="EXPIRE_SNAPSHOTS only: what the next expiry passes (olderThan, retainLast) and the "
        "age at which it removes a ref with no age of its own (maxRefAgeMs), each with where it came from (policy, "
        "owner override floe.*, the table's history.expire.* property, floe minimum, default), and adjusted (each "
        "property bounded or ignored, and why); null when the policy does not configure the expiry")
    lastRun: LastRun
    efficiency: dict[str, Any] | None = Field(None, description="The learned ranking's measured-efficiency factor "
                                              "(factor, why, ranking, computeSource, computeEstimate...)")
    cadence: dict[str, Any] | None = Field(None, description="An adaptive orphan cleanup's expected next run "
                                           "(nextRunAt, interval, orphanBytesPerDay, cleanups, clamped, why)")
    shadow: bool = Field(False, description="The policy's mode is shadow: decisions are recorded, never run "
                                            "(shouldTrigger stays false)")
    shadowDecision: ShadowDecision | None = Field(None, description="A shadow policy's: what would run now, and "
                                                                    "its last recorded decision")
    # APPLY_TABLE_PROPERTIES only: each declared key whose table value differs ({key, declared, current});
    # null before health was collected.
    propertyDrift: list[dict[str, Any]] | None = None
    envelope: EnvelopeVerdict | None = Field(None, description="The safety envelope's verdict; null for an operation "
                                                              "no policy configures")
    ownerOverrides: dict[str, Any] | None = Field(
        None, description="The table's floe.* properties under its policy (docs/policies.md, \"Owner overrides\"): "
        "paused, the options applied ({policyField: value}) and those ignored ({property, value, reason}); null when "
        "the table sets none")


class TriggerStatusResponse(_Open):
    """``floe-dagster explain --json``, unchanged."""

    catalog: str
    namespace: str
    table: str
    qualifiedName: str
    policyName: str | None
    conditionBasedTriggeringEnabled: bool
    at: str
    writers: list[TableWriter] = Field(default_factory=list, description="The assets that write the table")
    computeBudget: dict[str, Any] | None = Field(
        None, description="max-compute-hours-per-hour's rolling hour now (limitSeconds, spentSeconds by the finished "
        "runs, finishedRuns, inFlightSeconds estimated, inFlightRuns, overSpent, summary); null without a compute "
        "budget")
    operationStatuses: dict[str, OperationTriggerStatus]


class HealthIssue(_Open):
    type: str
    severity: Literal["info", "warning", "critical"]
    message: str


class HealthResponse(_Open):
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


class HealthHistoryResponse(_Open):
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


class TableResult(BaseModel):
    table: str
    metrics: dict[str, Number]


class TableConflict(BaseModel):
    table: str
    conflict: str


class OperationRun(_Open):
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


class HealthCheck(BaseModel):
    name: str
    status: Literal["UP", "DOWN"]


class ServiceHealth(BaseModel):
    status: Literal["UP", "DOWN"]
    checks: list[HealthCheck]
    timestamp: str = Field(json_schema_extra={"format": "date-time"})


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
