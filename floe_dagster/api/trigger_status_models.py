"""Schemas of the trigger status (``GET /api/v1/tables/{namespace}/{table}/trigger-status``, ``floe-dagster
explain --json``): each operation's verdict with the gates that decided it (conditions, backoff, throttle, the
quiet period, the SLA contract, the writers' hold, conflicts, the envelope, shadow mode); the HTTP API's other
schemas are in api/models.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from floe_dagster.api.models import OpenModel


class ConditionCheck(OpenModel):
    name: str
    measured: float | None
    threshold: float


class BackoffState(OpenModel):
    consecutiveFailures: int
    until: str | None


class ThrottleState(OpenModel):
    consecutiveZeroChangeRuns: int
    until: str | None


class LastRun(OpenModel):
    start: str | None
    succeeded: bool | None
    trigger: str | None


class QuietState(OpenModel):
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


class SlaState(OpenModel):
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


class WriterHoldState(OpenModel):
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


class TableWriter(OpenModel):
    """An asset that writes the table: named by a floe.yaml ``writers`` rule (``rule``) or by the
    ``dagster/table_name`` of its materializations (``table_name``), with its newest materialization floe read."""

    assetKey: str = Field(description="The asset key as Dagit writes it (parts joined by '/')")
    source: Literal["rule", "table_name"]
    lastMaterialization: dict[str, Any] | None = Field(None, description="{storageId, runId, at}; null before one")


class Backlog(OpenModel):
    """Work an operation left for later runs (docs/automation.md): a partition-scoped rewrite's
    partitions and bytes; orphan cleanup's files the last run left on disk (its per-run cap), with
    ``exact`` false when that is a lower bound."""

    partitions: int | None = None
    bytes: int | None = None
    files: int | None = None
    exact: bool | None = None


class ConflictState(OpenModel):
    """Lost commit races in a row, when the next attempt may start, the snapshot operation of the last
    writer that won (``overwrite``, ``delete``...), and whether the streak is long enough that each lost
    race counts as a failure (backoff)."""

    consecutiveConflicts: int
    lastConflictAt: str | None
    retryAt: str | None
    writerOperation: str | None = None
    countsAsFailure: bool = False


class ShadowDecision(OpenModel):
    wouldRun: bool = Field(description="The decision now would run (it passed every gate and the shadow budgets)")
    wouldRunAt: str | None = Field(json_schema_extra={"format": "date-time"})
    summary: str | None = Field(description="shadow: would run at <time> because <reason>")
    lastRecordedAt: str | None = Field(json_schema_extra={"format": "date-time"},
                                       description="When the ledger last recorded a shadow decision (it stands "
                                                   "in for a successful run for the due rules)")
    lastRecordedSlot: str | None
    lastRecordedReason: str | None


class EnvelopeVerdict(OpenModel):
    """The safety envelope's verdict on the operation (core/policies/envelope.py): ``ok``; ``refused`` (a run fails
    before any engine call), each field and why; or ``unchecked`` (an absolute location while the table's
    location is not known yet)."""

    status: Literal["ok", "refused", "unchecked"]
    policy: str | None
    operation: str
    refusals: list[dict[str, str]] = Field(description="{field, reason} for each refused field")
    detail: str = Field(description="envelope: ok, refused: <field>: <why>, or not checked yet: <why>")


class OperationTriggerStatus(OpenModel):
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


class TriggerStatusResponse(OpenModel):
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
