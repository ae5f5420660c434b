"""What a maintenance operation kind is, once: :class:`OperationSpec`, the base class every kind subclasses.
One module of this package per kind defines its config class, its subclass and its ``SPEC`` (the
subclass's one instance); declarations only, no kind logic here.

A kind names itself in every layer (Floe's name, which is also the Dagster partition key; the policy
key in both formats; the Iceberg procedure), its order within a table, its config and its words in the
docs: the base's only data. It overrides the methods the rest of floe-dagster calls instead of branching
on the kind: its flags (rewrites data, deletes files, ...), its config's ignored and protected fields and
how the PolicyLoader format writes them, its own due condition, its byte estimate, its no-change rule,
what ``explain`` adds for it. Each has a neutral default here. Kind modules name themselves by ``name``
and never import ``Operation`` (it is built from the specs, core/operations.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from floe_dagster.core.basics.loader_format import LoaderSection
from floe_dagster.core.operation_config import camel
from floe_dagster.core.basics.validation import check_mapping, check_unknown

if TYPE_CHECKING:
    from floe_dagster.core.operation_config import OperationConfig
    from floe_dagster.core.basics.validation import Location
    from floe_dagster.core.facts.measurements import TableMetrics
    from floe_dagster.core.facts.refs import RefRetentionRule
    from floe_dagster.core.rewrites.estimates import RewriteEstimate
    from floe_dagster.core.schedules.orphan_cadence import CadenceVerdict, RecordedCleanup


class PropertyDriftLike(Protocol):
    """A fact behind a kind's own due verdict, as the trigger status shows it (core/facts/table_properties.py's
    PropertyDrift is the one kind that has them)."""

    def to_json(self) -> Mapping[str, object]: ...


class ExplainedPolicy(Protocol):
    """What a kind's ``explain`` reads of the effective policy (core/policies/policy.Policy, a floor above)."""

    @property
    def ref_retention(self) -> Sequence[RefRetentionRule]: ...


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
    facts: tuple[PropertyDriftLike, ...] = ()


@dataclass(frozen=True)
class LastRun:
    """The newest materialization of a table's operation partition: its metadata (plain values), run, time."""

    metadata: Mapping[str, object]
    run_id: str
    at: datetime


@dataclass(frozen=True)
class ExplainView:
    """What a kind's ``explain`` hook sees of one table: its effective policy (None: none) and that
    policy's config of the kind, the health the plan used, the time, (read only when asked) the
    operation's last materialization, and the options the table's owner overrides set on the config
    (config field → (the ``floe.*`` property, its value): core/policies/owner_overrides.py)."""

    policy: ExplainedPolicy | None
    config: Any  # the kind's own config class (each kind reads its fields), or None
    metrics: TableMetrics | None
    now: datetime
    last_run: Callable[[], LastRun | None]
    owner_overrides: Mapping[str, tuple[str, object]] = field(default_factory=dict)


_NONE: Mapping[str, str] = MappingProxyType({})
_PLAIN_LOADER = LoaderSection()


class OperationSpec:
    """One operation kind: subclassed once per kind (core/operation_kinds/<kind>.py), whose module's ``SPEC``
    is its one instance.

    The base's data is the seven facts every kind declares (``_REQUIRED``: a kind leaving one out is
    refused when its ``SPEC`` is made): who the kind is in every layer, where it sorts, its config, and
    its words in the docs. Everything else is a method here with a neutral default (False, nothing, None:
    "not this kind's"), which a kind overrides when it differs; a kind's own data (its ignored fields, its
    location fields, its due condition) lives in its module, behind the method. Callers call the method,
    never test whether a kind has it. A cross-cutting feature adds a method here, never a field
    (floe_dagster_tests/unit/test_operation_kind_shape.py holds the base to its seven facts).
    ``docs_row`` is the kind's row of docs/operations.md's table and ``no_change`` its sentence in
    docs/automation.md's zero-change list (a unit test holds both docs to the specs)."""

    name: str  # Floe's name: the Operation's value, the Dagster partition key
    policy_key: str  # the API format's key (camelCase); the PolicyLoader format's is its kebab case
    procedure: str  # Iceberg's Spark procedure that performs it (or the statement)
    order: int  # where it sorts in Floe's order within a table (leave room between kinds; Operation.order: its place)
    config_type: type  # its OperationConfig subclass, declared in the kind's module
    docs_row: str
    no_change: str

    _REQUIRED = ("name", "policy_key", "procedure", "order", "config_type", "docs_row", "no_change")

    def __init__(self) -> None:
        missing = [what for what in self._REQUIRED if not hasattr(self, what)]
        if missing:
            raise TypeError(f"the operation kind {type(self).__name__} must declare {', '.join(missing)}")
        if self.has_own_condition and type(self).due_rule is OperationSpec.due_rule:
            raise TypeError(f"the operation kind {type(self).__name__} has a due condition of its own (due) and "
                            "must say when it runs (due_rule)")
        self.config_type.spec = self  # the config class parses itself through its spec (from_mapping)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    # -- flags several kinds share: a kind says yes by subclassing the trait of that name (below) -------------

    def rewrites_data(self) -> bool:
        """Whether it rewrites table data, so that it counts against the bytes-per-hour budget."""
        return False

    def needs_gc(self) -> bool:
        """Whether it deletes files, so that a table's gc.enabled=false forbids it."""
        return False

    def checks_rows(self) -> bool:
        """Whether each snapshot it commits must hold its parent's rows (the engine checks)."""
        return False

    def floe_native(self) -> bool:
        """Whether it is one of Floe's four operations (the policies API's top-level summaries)."""
        return False

    def holds_for_writers(self) -> bool:
        """Whether it waits while a run of the table's writer asset is queued or started (the gate
        writer_running): the writer's run commits meanwhile, so a run of the kind would lose its commit race."""
        return False

    # -- what a kind says about its config's fields (the mappings live in the kind's module) ------------------

    def defaults(self) -> Mapping[str, object]:
        """What an unset config field means (policy key → value), for display."""
        return _NONE

    def ignored(self) -> Mapping[str, str]:
        """Floe's config fields kept and (partly) ignored (policy key → why, the warning a policy gets)."""
        return _NONE

    def policy_only_fields(self) -> Mapping[str, str]:
        """Config fields only a policy may set, never a table owner's property
        (core/policies/owner_overrides.py): why."""
        return _NONE

    def loader(self) -> LoaderSection:
        """The PolicyLoader format's own spellings of its config (none: the fields in kebab case)."""
        return _PLAIN_LOADER

    # -- what one kind has today: the answer, and any data behind it, live in that kind ----------------------

    def scopes_partitions(self) -> bool:
        """Whether the planner may scope a run of it to partitions (core/rewrites/partition_scope.py)."""
        return False

    def applies_ref_retention(self) -> bool:
        """Whether the policy's refRetention is set on the table's refs before it runs."""
        return False

    def reclaims_orphans(self) -> bool:
        """Whether the files it deletes are orphans (the value report counts them so)."""
        return False

    def location_fields(self) -> Mapping[str, str]:
        """Config field → what a run does under the location it names (the safety envelope checks them)."""
        return _NONE

    def withheld_fields(self) -> tuple[str, ...]:
        """Config fields naming a location no engine is ever handed."""
        return ()

    def due(self, config: Any, metrics: TableMetrics | None) -> DueVerdict | None:
        """A due condition of its own, in place of the policy's thresholds and critical-pipeline force (the
        minimum intervals still hold): its verdict on the table (metrics None: no health collected); None
        (the default) lets the thresholds decide. A kind overriding it says when it runs in ``due_rule``."""
        return None

    def due_rule(self) -> str:
        """When a kind with a due condition of its own runs, as a table asset's description says it."""
        return ""

    @cached_property
    def has_own_condition(self) -> bool:
        """Whether the kind overrides ``due`` (the policy then neither warns that it is due every tick nor
        hands the kind the thresholds' verdict); asked on every condition check, so read once."""
        return type(self).due is not OperationSpec.due

    def parse(self, at: "Location", raw: object) -> "OperationConfig | None":
        """The config from the policy's mapping, or None when it is not a mapping (every problem is recorded at
        ``at``): by default its fields, each by its reader (``option``); a kind whose config is not fields
        (tableProperties: Iceberg's property names) overrides it."""
        mapping = check_mapping(at, raw)
        if mapping is None:
            return None
        check_unknown(at, mapping, self.fields)
        values = self.read_first(at, mapping)
        for f in dataclass_fields(self.config_type):  # in the fields' order, so the errors come in the policy's order
            read = f.metadata.get("read")
            value = read(at, mapping, camel(f.name)) if read is not None else None
            if value is not None:
                values[f.name] = value
        for key, why in self.ignored().items():
            if mapping.get(key) is not None:
                at.child(key).warn(why)
        config = self.config_type(**values)
        self.check(at, config)
        return config

    @property
    def config_is_fields(self) -> bool:
        """Whether the config is read as its fields (the PolicyLoader spellings and owner overrides follow
        them), that is whether the kind keeps the default ``parse``."""
        return type(self).parse is OperationSpec.parse

    def read_first(self, at: "Location", raw: Mapping[str, object]) -> dict[str, object]:
        """Fields read together before the others (a strategy and its columns): none by default."""
        return {}

    def check(self, at: "Location", config: Any) -> None:
        """Warnings about the parsed config as a whole: none by default."""

    def byte_estimate(self, metrics: TableMetrics, config: "OperationConfig | None") -> RewriteEstimate | None:
        """Its core.rewrites.estimates.Estimate of a run (None: none of its own; the table's size bounds it)."""
        return None

    def changed(self, numbers: Mapping[str, int]) -> bool:
        """The no-change rule over the result's numbers: by default, any number not zero."""
        return any(numbers.values())

    def explain(self, view: ExplainView) -> Mapping[str, object]:
        """The keys it adds to (or sets in) ``explain``: none by default."""
        return {}

    def cadence(self, config: Any, runs: Sequence[RecordedCleanup], now: datetime) -> CadenceVerdict | None:
        """A cadence of its own in place of the schedule's interval or cron (its window and days still hold):
        (config, the table's recorded runs of the kind, now) → a verdict (``next_run_at``, ``why``,
        ``to_json()``), or None (the default) to keep the schedule's rule (ORPHAN_CLEANUP's ``adaptive``)."""
        return None

    @property
    def has_cadence(self) -> bool:
        """Whether the kind overrides ``cadence``: the planner neither calls it nor gathers its arguments (the
        policy's config, the table's runs) for the others, on each of a tick's decisions."""
        return type(self).cadence is not OperationSpec.cadence

    # -- derived names ---------------------------------------------------------------------------------------

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
        return tuple(camel(f.name) for f in dataclass_fields(self.config_type))


# -- the traits several kinds share: a kind lists the ones it has among its bases (``class
# RewriteManifests(HoldsForWriters, ChecksRows, FloeNative)``), each answering yes to its one question.


class RewritesData(OperationSpec):
    def rewrites_data(self) -> bool:
        return True


class NeedsGc(OperationSpec):
    def needs_gc(self) -> bool:
        return True


class ChecksRows(OperationSpec):
    def checks_rows(self) -> bool:
        return True


class FloeNative(OperationSpec):
    def floe_native(self) -> bool:
        return True


class HoldsForWriters(OperationSpec):
    def holds_for_writers(self) -> bool:
        return True


__all__ = ["OperationSpec", "DueVerdict", "ExplainView", "LastRun", "RewritesData", "NeedsGc", "ChecksRows",
           "FloeNative", "HoldsForWriters"]
