"""Owner overrides: a table's own properties tune or pause its maintenance, within what its policy allows.

A table owner without access to the policy files sets properties on the table (as Amoro's
``self-optimizing.*``): ``floe.maintenance.enabled=false`` pauses every operation of the table (the
planner's gate ``owner_paused``), and ``floe.<operation>.<option>`` sets one option of one operation's
config, both in kebab case: ``floe.rewrite-data-files.target-file-size-bytes=268435456``. The keys
(:func:`override_keys`) are derived from the operation registry's config fields: every option whose value
is a number, a flag or a choice, but never a location (the safety envelope: a run lists, writes and
deletes only under its own table), nor a free-text one (a filter is a Spark SQL predicate), nor a kind
whose config is not options (``tableProperties``: the envelope governs what a run sets).

The policy says which keys owners may set and within which bounds: ``ownerOverrides: {allow:
{"rewrite-data-files.target-file-size-bytes": {min: 67108864, max: 1073741824}, "maintenance.enabled": {}}}``
(:func:`parse_owner_overrides`; the same spelling in both policy formats). A property the policy does not
allow, out of its bounds, unreadable, or for an operation the policy does not configure, is ignored, and
:class:`OwnerOverrides` says why (plan, explain, the trigger status and the run's metadata show it). An
override tunes; it never enables an operation, and a policy cannot allow a location key (an error when
the policy is read). A table property that would steer its storage (``py-io-impl``, ``s3.endpoint``…:
core/storage/storage_keys.py) is listed as ignored too: floe's FileIO never reads it. Pure: no Dagster, Spark or
PyIceberg.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any, Mapping, TypedDict

from floe_dagster.core.basics.loader_format import kebab
from floe_dagster.core.operation_config import OperationConfig, camel, text
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.basics.secrets import masked
from floe_dagster.core.storage.storage_keys import TABLE_STORAGE_IGNORED, steers_storage, storage_properties
from floe_dagster.core.basics.validation import Location, check_mapping, check_unknown, standalone

if TYPE_CHECKING:
    from dataclasses import Field

PREFIX = "floe."
PAUSE_KEY = "maintenance.enabled"  # the policy's name for the property floe.maintenance.enabled
PAUSE_PROPERTY = PREFIX + PAUSE_KEY
# A config field's type (as its dataclass declares it) → how a property's text reads as a value of it.
_KINDS = {"int | None": "whole number", "int | float | None": "number", "bool | None": "flag",
          "str | None": "text as the policy writes it"}
_BOUNDED = ("whole number", "number")
_ENVELOPE = ("never overridable: it names a location, and a run lists, writes and deletes only under its own "
             "table (the safety envelope)")


@dataclass(frozen=True)
class OverrideKey:
    """One option an owner may be allowed to set: ``rewrite-data-files.target-file-size-bytes``."""

    key: str
    operation: Operation
    field: str  # the config field (snake case)
    kind: str  # whole number, number, flag, or text as the policy writes it (a choice, a duration)

    @property
    def policy_field(self) -> str:
        return f"{self.operation.policy_key}.{camel(self.field)}"


def _never_overridable() -> dict[str, str]:
    """Every ``<operation>.<field>`` in kebab case that no owner may ever set, with why: the fields naming a
    location (location and withheld fields) and those the kind keeps for the policy alone."""
    never = {f"{kebab(op.policy_key)}.{kebab(camel(name))}": _ENVELOPE for op in ALL_OPERATIONS
             for name in (*op.spec.location_fields(), *op.spec.withheld_fields())}
    return never | {f"{kebab(op.policy_key)}.{kebab(camel(name))}": why for op in ALL_OPERATIONS
                    for name, why in op.spec.policy_only_fields().items()}


def _offered(op: Operation, f: Field[object]) -> str | None:
    """The override kind of a config field, or None when owners can never set it."""
    kind = _KINDS.get(str(f.type))
    spec = op.spec
    if kind is None or f.name in (*spec.location_fields(), *spec.withheld_fields(), *spec.policy_only_fields()):
        return None
    if f.name.endswith(("location", "path")) or (kind == _KINDS["str | None"] and f.metadata.get("read") is text):
        return None  # a location by another name, or free text (a Spark SQL filter)
    return kind if f.metadata.get("read") is not None else None


def override_keys() -> dict[str, OverrideKey]:
    """Every key an owner may be allowed to set, by its name without ``floe.``, in Floe's operation order."""
    keys: dict[str, OverrideKey] = {}
    for op in ALL_OPERATIONS:
        if not op.spec.config_is_fields:  # its config is not options (tableProperties)
            continue
        for f in fields(op.spec.config_type):
            kind = _offered(op, f)
            if kind is not None:
                key = f"{kebab(op.policy_key)}.{kebab(camel(f.name))}"
                keys[key] = OverrideKey(key, op, f.name, kind)
    return keys


KEYS = override_keys()
NEVER_OVERRIDABLE = _never_overridable()


# -- the policy's allow list -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    minimum: float | None = None
    maximum: float | None = None

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in (("min", self.minimum), ("max", self.maximum)) if v is not None}


@dataclass(frozen=True)
class OwnerOverridePolicy:
    """A policy's ``ownerOverrides``: the keys owners may set (without ``floe.``), each with its bounds."""

    allow: Mapping[str, Bounds] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"allow": {key: bounds.to_json() for key, bounds in self.allow.items()}}


NONE_ALLOWED = OwnerOverridePolicy()


def parse_owner_overrides(at: Location, raw: object) -> OwnerOverridePolicy:
    """``ownerOverrides: {allow: {key: {min, max} | {} | null}}``; every problem recorded at ``at``."""
    mapping = check_mapping(at, raw)
    if not mapping:
        return NONE_ALLOWED
    check_unknown(at, mapping, ("allow",))
    allow = check_mapping(at.child("allow"), mapping.get("allow")) or {}
    parsed: dict[str, Bounds] = {}
    for key, value in allow.items():
        here = at.child("allow").child(str(key))
        bounds = _bounds(here, key, value)
        if bounds is not None:
            parsed[key] = bounds
    return OwnerOverridePolicy(parsed)


def _bounds(at: Location, key: str, raw: object) -> Bounds | None:
    if key in NEVER_OVERRIDABLE:
        at.error(f"{NEVER_OVERRIDABLE[key]}; no policy may allow it")
        return None
    known = KEYS.get(key)
    if known is None and key != PAUSE_KEY:
        close = get_close_matches(str(key), [PAUSE_KEY, *KEYS], n=1)
        at.error("is not a key owners may set" + (f"; did you mean {close[0]!r}?" if close else "")
                 + " (docs/policies.md, \"Owner overrides\", lists them)")
        return None
    mapping = check_mapping(at, raw)
    if mapping is None:
        return None
    bounded = known is not None and known.kind in _BOUNDED
    if not bounded:
        for name in mapping:
            at.child(str(name)).error("only a number has bounds (min, max): write {} to allow it")
        return Bounds()
    check_unknown(at, mapping, ("min", "max"))
    limits = [_limit(at.child(name), known, mapping.get(name)) for name in ("min", "max")]
    if None not in limits and limits[0] > limits[1]:
        at.error(f"min {limits[0]} is above max {limits[1]}")
    return Bounds(*limits)


def _limit(at: Location, known: OverrideKey, value: object) -> float | None:
    if value is None:
        return None
    read = _read(known, value)
    if isinstance(read, str):
        at.error(read)
        return None
    return read


# -- a table's properties against the allow list -----------------------------------------------------------


class OverridesView(TypedDict):
    """What a table's ``floe.*`` properties do, as ``plan`` and the API show it."""

    paused: bool
    applied: dict[str, object]  # "<operation>.<option>": the value applied
    ignored: list[dict[str, str]]


@dataclass(frozen=True)
class Ignored:
    property: str
    value: str
    reason: str
    operation: Operation | None = None  # None: the table's (the pause, an unknown key)

    def to_json(self) -> dict[str, str]:
        """As every output shows it: the value masked when the property's name is a secret key
        (core/basics/secrets.py)."""
        return masked({"property": self.property, "value": self.value, "reason": self.reason})


@dataclass(frozen=True)
class OwnerOverrides:
    """What a table's ``floe.*`` properties do under its effective policy: paused (by which property), the
    options each operation's config takes from them, and the properties ignored, each with why."""

    policy: str
    paused: bool = False
    applied: Mapping[Operation, Mapping[str, object]] = field(default_factory=dict)  # config field → value
    ignored: tuple[Ignored, ...] = ()

    @property
    def pause_detail(self) -> str:
        return (f"the table's owner paused its maintenance: property {PAUSE_PROPERTY}=false (allowed by policy "
                f"'{self.policy}')")

    def config(self, op: Operation, config: OperationConfig | None) -> OperationConfig | None:
        """``config`` with this table's overrides of ``op`` (None stays None: an override never enables)."""
        changes = self.applied.get(op)
        return replace(config, **changes) if changes and config is not None else config

    def to_json(self, op: Operation | None = None) -> OverridesView:
        """The table's view, or one operation's (its own overrides and the table-wide ignored ones)."""
        ops = [op] if op is not None else list(self.applied)
        return {
            "paused": self.paused,
            "applied": {f"{o.policy_key}.{camel(name)}": value for o in ops
                        for name, value in self.applied.get(o, {}).items()},
            "ignored": [i.to_json() for i in self.ignored if op is None or i.operation in (None, op)],
        }


    def describe(self, op: Operation) -> str:
        """One line for ``floe-dagster plan``: the options applied to ``op`` and the properties ignored."""
        view = self.to_json(op)
        parts = [f"{name}={value}" for name, value in view["applied"].items()]
        parts += [f"ignored {i['property']}={i['value']} ({i['reason']})" for i in view["ignored"]]
        return "; ".join(parts) or "none applies"


def with_overrides(owner: OwnerOverrides | None, op: Operation, config: OperationConfig | None
                   ) -> OperationConfig | None:
    """``config`` with a table's overrides of ``op`` (``owner`` None: the table sets none)."""
    return owner.config(op, config) if owner is not None else config


def sets_owner_keys(properties: Mapping[str, str]) -> bool:
    """Whether ``properties`` hold a ``floe.*`` key or one that would steer a FileIO: without either,
    :func:`owner_overrides` is None whatever the policy."""
    return any(key.startswith(PREFIX) or steers_storage(key) for key in properties)


def owner_overrides(policy_name: str, allowed: OwnerOverridePolicy, configured: object,
                    properties: Mapping[str, str]) -> OwnerOverrides | None:
    """The verdict on a table's ``floe.*`` properties and the storage keys it sets (None: it has neither).
    ``configured``: the operations the policy configures (a container of Operation)."""
    owned = {k[len(PREFIX):]: v for k, v in properties.items() if k.startswith(PREFIX)}
    steering = storage_properties(properties)
    if not owned and not steering:
        return None
    paused, applied = False, {}
    # Keys that would steer a FileIO (py-io-impl, s3.endpoint…) are never used (iceberg/table_io.py): say so
    # (Ignored.to_json masks a secret's value, s3.secret-access-key set on a table, as it is shown).
    ignored = [Ignored(name, value, TABLE_STORAGE_IGNORED) for name, value in steering.items()]
    for key, value in sorted(owned.items()):
        known = KEYS.get(key)
        why = _refusal(policy_name, allowed, configured, key, known, value)
        if why is not None:
            ignored.append(Ignored(PREFIX + key, value, why, known.operation if known else None))
        elif known is None:  # the pause, allowed and readable
            paused = value.strip().lower() == "false"
        else:
            applied.setdefault(known.operation, {})[known.field] = _read(known, value)
    return OwnerOverrides(policy_name, paused, applied, tuple(ignored))


def _refusal(policy_name: str, allowed: OwnerOverridePolicy, configured: object, key: str, known: OverrideKey | None,
             value: str) -> str | None:
    """Why one property is ignored (None: it applies)."""
    if key in NEVER_OVERRIDABLE:
        return NEVER_OVERRIDABLE[key]
    if known is None and key != PAUSE_KEY:
        return f"not a key owners may set (floe.{PAUSE_KEY} or floe.<operation>.<option>: docs/policies.md)"
    bounds = allowed.allow.get(key)
    if bounds is None:
        return f"policy '{policy_name}' does not allow owners to set it (ownerOverrides.allow)"
    if known is None:
        return None if value.strip().lower() in ("true", "false") else f"expected true or false, got {value!r}"
    if known.operation not in configured:
        return (f"policy '{policy_name}' does not configure {known.operation.policy_key}: an override tunes an "
                "operation, it never enables one")
    read = _read(known, value)
    if isinstance(read, str):
        return read
    if bounds.minimum is not None and read < bounds.minimum:
        return f"{read} is below the minimum {bounds.minimum} policy '{policy_name}' allows"
    if bounds.maximum is not None and read > bounds.maximum:
        return f"{read} is above the maximum {bounds.maximum} policy '{policy_name}' allows"
    return None


def _read(known: OverrideKey, value: object) -> Any:
    """A property's text (or a policy's bound) as the option's value, read by the option's own reader (its
    minimum, its choices); the message when it is not one."""
    typed = _typed(known.kind, value)
    if typed is None:
        return f"expected a {known.kind}, got {value!r}"
    at = standalone()
    name = camel(known.field)
    read = next(f for f in fields(known.operation.spec.config_type) if f.name == known.field).metadata["read"]
    result = read(at, {name: typed}, name)
    if at.problems.errors:
        return at.problems.errors[0].partition(": ")[2] or at.problems.errors[0]
    return result


def _typed(kind: str, value: object) -> object:
    if not isinstance(value, str):
        return None if isinstance(value, bool) and kind != "flag" else value
    text_value = value.strip()
    try:
        if kind == "whole number":
            return int(text_value)
        if kind == "number":
            return float(text_value) if any(c in text_value for c in ".eE") else int(text_value)
    except ValueError:
        return None
    if kind == "flag":
        return {"true": True, "false": False}.get(text_value.lower())
    return text_value


def describe_keys() -> str:
    """docs/policies.md's table of the keys (a unit test keeps the doc equal)."""
    lines = ["| property | option | value |", "| --- | --- | --- |",
             f"| `{PAUSE_PROPERTY}` | `false` pauses every operation of the table (gate `owner_paused`) | flag |"]
    lines += [f"| `{PREFIX}{k.key}` | `{k.policy_field}` | {k.kind} |" for k in KEYS.values()]
    return "\n".join(lines) + "\n"


__all__ = [
    "PREFIX", "PAUSE_KEY", "PAUSE_PROPERTY", "KEYS", "NEVER_OVERRIDABLE", "OverrideKey", "Bounds",
    "OwnerOverridePolicy", "NONE_ALLOWED", "parse_owner_overrides", "Ignored", "OwnerOverrides",
    "owner_overrides", "override_keys", "describe_keys", "with_overrides",
]
