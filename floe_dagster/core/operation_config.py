"""Operation configs (``rewriteDataFiles``, ``expireSnapshots``, ...): one frozen dataclass per kind,
declared in the kind's module (``core/operation_kinds/``) as a subclass of :class:`OperationConfig`,
the only form the rest of floe-dagster reads. The engine's steps render it to SQL
(``spark/operation_steps/``) and the byte estimates read its rewrite options (``core/rewrites/estimates.py``);
nothing parses a policy's options again. This module is what the kinds share: the base class and the
readers of the options several kinds take (the generic parser is ``OperationSpec.parse``'s default).

A field is None when the policy leaves it unset (enumerations are upper-cased, text trimmed, lists and
mappings kept as tuples): an unset expire option must stay unset so that the Spark engine falls back
to the table's ``history.expire.*`` properties, and then to Floe's defaults. An empty config ``{}`` is
valid and means "all defaults".

A field's name is its policy key in snake case (``targetFileSizeBytes`` is ``target_file_size_bytes``),
which is also the name of the procedure's argument (``retain_last``). Each field is declared with
:func:`option`: how the policy's value is read and checked (the same name means the same option in
every kind), the name Iceberg's ``options`` map gives it (``target-file-size-bytes``) and how
``to_json()`` shows it. ``to_json()`` gives the policy's view back: camelCase keys, only the fields set.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping

from floe_dagster.core.basics.validation import (
    Location,
    get_bool,
    get_enum,
    get_int,
    get_str,
    get_str_list,
    get_str_map,
    raise_if_errors,
    standalone,
)

Reader = Callable[[Location, Mapping[str, object], str], Any]
REWRITE_JOB_ORDERS = ("NONE", "BYTES_ASC", "BYTES_DESC", "FILES_ASC", "FILES_DESC")


def camel(field_name: str) -> str:
    """A config field's key in the policy: ``z_order_columns`` → ``zOrderColumns``."""
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def option(read: Reader | None, *, iceberg: str | None = None, shown: Callable[[Any], Any] | None = None) -> Any:
    """A config field: unset by default, read from the policy by ``read`` (None: read with other fields,
    see ``OperationSpec.read_first``); ``iceberg``: its name in the rewriting procedures' ``options`` map;
    ``shown``: its value in ``to_json()`` (default: a tuple as a list)."""
    return field(default=None, metadata={"read": read, "iceberg": iceberg, "shown": shown})


@dataclass(frozen=True)
class OperationConfig:
    """What every operation's config offers: its policy view, and (for the rewrites) its options map."""

    # The kind's OperationSpec (core/operation_kinds/spec.py), bound when its SPEC is made: it parses the config.
    spec: ClassVar[Any]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> "OperationConfig":
        """Parse one operation's config on its own, as a policy writes it (``{"strategy": "sort"}``);
        raises ValueError listing every problem. ``RewriteDataFilesConfig.from_mapping({})``: defaults."""
        at = standalone()
        config = cls.spec.parse(at, raw)
        raise_if_errors(at, f"{cls.spec.policy_key} config")
        assert config is not None
        return config

    def to_json(self) -> dict[str, object]:
        """The policy's view: camelCase keys, only the fields set, lists and mappings as JSON has them."""
        data: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            shown = f.metadata.get("shown")
            data[camel(f.name)] = shown(value) if shown else list(value) if isinstance(value, tuple) else value
        return data

    def iceberg_options(self) -> dict[str, object]:
        """The fields set that the procedure takes in its ``options`` map, under Iceberg's names, typed
        (a job order as Iceberg spells it: ``BYTES_DESC`` → ``bytes-desc``)."""
        options: dict[str, object] = {}
        for f in fields(self):
            value, name = getattr(self, f.name), f.metadata.get("iceberg")
            if value is not None and name:
                options[name] = value.lower().replace("_", "-") if isinstance(value, str) else value
        return options

    def properties_to_set(self) -> tuple[tuple[str, str], ...]:
        """The table properties a run of this config sets (the safety envelope checks each): none, but
        for the kind that declares table properties."""
        return ()


# -- the readers the kinds share --------------------------------------------------------------------------


def at_least(minimum: int) -> Reader:
    return lambda at, raw, key: get_int(at, raw, key, None, minimum=minimum)


def any_int(at: Location, raw: Mapping[str, object], key: str) -> int | None:
    return get_int(at, raw, key, None)


def boolean(at: Location, raw: Mapping[str, object], key: str) -> bool | None:
    return get_bool(at, raw, key, None)


def one_of(choices: tuple[str, ...]) -> Reader:
    return lambda at, raw, key: get_enum(at, raw, key, choices, None)


def job_order(at: Location, raw: Mapping[str, object], key: str) -> str | None:
    """``BYTES_DESC``, or as Iceberg (and Floe's PolicyLoader tests) spell it, ``bytes-desc``."""
    value = raw.get(key)
    if isinstance(value, str):
        raw = {key: value.replace("-", "_")}
    return get_enum(at, raw, key, REWRITE_JOB_ORDERS, None)


def text(at: Location, raw: Mapping[str, object], key: str) -> str | None:
    value = get_str(at, raw, key, None)
    return value.strip() if value is not None else None


def text_map(at: Location, raw: Mapping[str, object], key: str) -> tuple[tuple[str, str], ...] | None:
    """A mapping of text to text, kept as its items in the policy's order (shown as a mapping: ``dict``)."""
    value = get_str_map(at, raw, key, None)
    return tuple(value.items()) if value is not None else None


def texts(at: Location, raw: Mapping[str, object], key: str) -> tuple[str, ...] | None:
    value = get_str_list(at, raw, key, None)
    if value == []:
        at.child(key).error("must not be empty (leave it out instead)")
        return None
    return tuple(value) if value is not None else None


__all__ = [
    "OperationConfig", "camel", "option", "Reader", "REWRITE_JOB_ORDERS",
    "at_least", "any_int", "boolean", "one_of", "job_order", "text", "text_map", "texts",
]
