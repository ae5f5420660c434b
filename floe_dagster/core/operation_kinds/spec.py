"""What a maintenance operation kind declares, once: :class:`OperationSpec`. One module of this package
per kind defines its config class and its ``SPEC``; declarations only, no kind logic here.

A spec names the kind in every layer (Floe's name, which is also the Dagster partition key; the policy
key in both formats; the Iceberg procedure), its order within a table, its flags, its config and how
the policy formats write it, and the optional hooks the rest of floe-dagster calls instead of
branching on the kind: its own due condition, its byte estimate, its no-change rule, what ``explain``
adds for it. Spec modules name themselves by ``name`` and never import ``Operation`` (it is built from
the specs, core/operations.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from floe_dagster.core.loader_format import LoaderSection
from floe_dagster.core.operation_config import camel

if TYPE_CHECKING:
    from floe_dagster.core.operation_config import OperationConfig
    from floe_dagster.core.validation import Location


@dataclass(frozen=True)
class DueVerdict:
    """A kind's own due condition's answer for one table: due, or why not (``code``, a skip code of the
    planner), with Floe's words for the trigger status (``metConditions`` / ``unmetConditions``) and the
    facts behind it (shown as the conditions' ``drift``)."""

    due: bool
    code: str | None = None
    detail: str = ""
    floe_met: tuple[str, ...] = ()
    floe_unmet: tuple[str, ...] = ()
    facts: tuple[Any, ...] = ()


@dataclass(frozen=True)
class OwnCondition:
    """A due condition of the kind's own, in place of the policy's thresholds and critical-pipeline force
    (the minimum intervals still hold): ``check(config, metrics)`` (metrics None: no health collected).
    ``rule_text``: when the operation runs, as a table asset's description says it; ``codes``: its skip codes."""

    check: Callable[[Any, Any], DueVerdict]
    rule_text: str
    codes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LastRun:
    """The newest materialization of a table's operation partition: its metadata (plain values), run, time."""

    metadata: Mapping[str, Any]
    run_id: str
    at: datetime


@dataclass(frozen=True)
class ExplainView:
    """What a kind's ``explain`` hook sees of one table: its effective policy (None: none) and that
    policy's config of the kind, the health the plan used, the time, and (read only when asked) the
    operation's last materialization."""

    policy: Any
    config: Any
    metrics: Any
    now: datetime
    last_run: Callable[[], LastRun | None]


ConfigParser = Callable[["Location", Any], "OperationConfig | None"]
FieldsReader = Callable[["Location", Mapping[str, Any]], dict[str, Any]]
ConfigCheck = Callable[["Location", Any], None]


@dataclass(frozen=True, eq=False)
class OperationSpec:
    """One operation kind. ``docs_row`` is its row of docs/operations.md's table and ``no_change`` its
    sentence in docs/automation.md's zero-change list (a unit test holds both docs to the specs)."""

    name: str  # Floe's name: the Operation's value, the Dagster partition key
    policy_key: str  # the API format's key (camelCase); the PolicyLoader format's is its kebab case
    procedure: str  # Iceberg's Spark procedure that performs it (or the statement)
    order: int  # where it sorts in Floe's order within a table (leave room between kinds; Operation.order: its place)
    config_type: type  # its OperationConfig subclass, declared in the kind's module
    docs_row: str
    no_change: str
    rewrites_data: bool = False  # counts against the bytes-per-hour budget
    needs_gc: bool = False  # deletes files, so a table's gc.enabled=false forbids it
    reclaims_orphans: bool = False  # the files it deletes are orphans (the value report counts them so)
    row_check: bool = False  # each snapshot it commits must hold its parent's rows (the engine checks)
    scopes_partitions: bool = False  # the planner may scope it to partitions (core/partition_scope.py)
    applies_ref_retention: bool = False  # the policy's refRetention is set on the table's refs before it
    floe_native: bool = False  # one of Floe's four operations (the policies API's top-level summaries)
    # Waits while a run of the table's writer asset is queued or started (the gate writer_running).
    holds_for_writers: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)  # what an unset field means, for display
    ignored: Mapping[str, str] = field(default_factory=dict)  # Floe's fields kept and (partly) ignored: why
    refused: Mapping[str, str] = field(default_factory=dict)  # Floe's fields refused: why
    location_fields: Mapping[str, str] = field(default_factory=dict)  # config field → what a run does under it
    withheld_fields: tuple[str, ...] = ()  # config fields naming a location no engine is ever handed
    # Config fields only a policy may set, never a table owner's property (core/owner_overrides.py): why.
    policy_only_fields: Mapping[str, str] = field(default_factory=dict)
    loader: LoaderSection = field(default_factory=LoaderSection)  # the PolicyLoader format's own spellings
    parse: ConfigParser | None = None  # the config when it is not fields (tableProperties)
    read_first: FieldsReader | None = None  # fields read together before the others (strategy + its columns)
    check: ConfigCheck | None = None  # warnings about the parsed config as a whole
    own_condition: OwnCondition | None = None
    byte_estimate: Callable[[Any, Any], Any] | None = None  # (metrics, config) → core.estimates.Estimate | None
    changed: Callable[[Mapping[str, int]], bool] | None = None  # the no-change rule over the result's numbers
    explain: Callable[[ExplainView], Mapping[str, Any]] | None = None  # keys it adds to (or sets in) explain
    # A cadence of its own, in place of the schedule's interval or cron (its window and days still hold):
    # (config, the table's recorded runs of the kind, now) → a verdict (``next_run_at``, ``why``,
    # ``to_json()``), or None to keep the schedule's rule (ORPHAN_CLEANUP's ``adaptive``).
    cadence: Callable[[Any, Sequence[Any], datetime], Any] | None = None

    def __post_init__(self) -> None:
        self.config_type.spec = self  # the config class parses itself through its spec (from_mapping)

    @property
    def schedule_key(self) -> str:
        return self.policy_key + "Schedule"

    @property
    def snake_key(self) -> str:
        """The policy key in snake case (``table_properties``), which Operation.parse accepts too."""
        return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), self.policy_key)

    @property
    def fields(self) -> tuple[str, ...]:
        """The config's fields as the policy writes them (camelCase), in the config's order."""
        return tuple(camel(f.name) for f in fields(self.config_type))


__all__ = ["OperationSpec", "OwnCondition", "DueVerdict", "ExplainView", "LastRun"]
