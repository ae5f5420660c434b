"""How floe.yaml's declaration is read: its keys (each a dataclass field whose metadata holds the
default, the description and the rules, see :func:`floe_dagster.core.basics.validation.setting`), the one
environment rule, and the readers that collect every problem of a file before reporting them.

settings.py declares floe.yaml's sections with these; this module knows nothing of any section.
"""

from __future__ import annotations

import json
import os
import typing
from dataclasses import MISSING, Field, dataclass, fields
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Mapping

from floe_dagster.core.basics.validation import Location, Problems, closest

ENV_PREFIX = "FLOE_"


def key_name(attribute: str) -> str:
    """floe.yaml's spelling of a field: kebab-case."""
    return attribute.replace("_", "-")


def env_name(section: str | None, key: str) -> str:
    """The one environment rule: ``FLOE_<SECTION>__<KEY>``, ``FLOE_<KEY>`` for a top-level key."""
    words = [w.upper().replace("-", "_") for w in (section, key) if w]
    return ENV_PREFIX + "__".join(words)


@dataclass(frozen=True)
class Key:
    """One key of floe.yaml, as the declaration gives it."""

    section: str | None  # None for a top-level key
    field: Field
    kind: Any  # the field's type
    older_env_prefix: str | None = None  # the section's own rule before the one rule (the scheduler's)

    @cached_property
    def name(self) -> str:
        return key_name(self.field.name)

    @cached_property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name

    @property
    def rules(self) -> Mapping[str, Any]:
        return self.field.metadata

    @property
    def description(self) -> str:
        return self.rules.get("description", "")

    @property
    def default(self) -> object:
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return self.field.default

    @property
    def env_names(self) -> tuple[str, ...]:
        """The rule's name first, then the older names kept working."""
        older = tuple(self.rules.get("env", ()))
        if self.older_env_prefix:
            older += (self.older_env_prefix + self.field.name.upper(),)
        return (env_name(self.section, self.name), *older)


@cache
def type_hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


@cache  # the same keys for every file read (the sensors re-read floe.yaml)
def keys_of(cls: type, section: Key | None = None) -> tuple[Key, ...]:
    """The keys of floe.yaml's top level, or of one of its sections."""
    types = type_hints(cls)
    name, prefix = (section.name, section.rules.get("older_env_prefix")) if section else (None, None)
    return tuple(Key(name, f, types[f.name], prefix) for f in fields(cls) if not f.metadata.get("internal"))


def shown(value: object) -> str:
    """A default as floe.yaml would spell it."""
    if isinstance(value, str):
        return f"`{value.replace(str(Path.home()), '~')}`"
    return f"`{json.dumps(list(value) if isinstance(value, tuple) else value)}`"


# -- reading floe.yaml: every problem of a file is collected, then reported together ----------------------

UNREAD = object()  # a value that could not be read (its problem is reported); the default is used


def _flag(at: Location, value: object) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    at.error(f"expected true or false, got {value!r}")
    return UNREAD


def _number(at: Location, value: Any, whole: bool, minimum: float) -> object:
    """A number as written, or as text (the environment's values are text)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value).strip()) if whole else float(value)
    except (TypeError, ValueError):
        at.error(f"expected a {'whole ' if whole else ''}number ≥ {minimum}, got {value!r}")
        return UNREAD
    if number < minimum:
        at.error(f"expected a number ≥ {minimum}, got {value!r}")
        return UNREAD
    return number


def _text(at: Location, value: object, expects: str | None) -> object:
    """A scalar as text (numbers are read as written); an empty value is the default unless the key
    ``expects`` something named."""
    if value == "" and not expects:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (expects and not str(value).strip()):
        at.error(f"expected {expects}, got {value!r}" if expects else
                 f"expected text, got {type(value).__name__} {value!r}")
        return UNREAD
    return str(value)


def _text_map(at: Location, value: object) -> object:
    if not isinstance(value, Mapping):
        at.error(f"expected a mapping, got {type(value).__name__}")
        return UNREAD
    result = {}
    for name, item in value.items():
        if isinstance(item, (dict, list)):
            at.child(str(name)).error(f"expected a string, got {type(item).__name__}")
        result[str(name)] = "true" if item is True else "false" if item is False else str(item)
    return result


def _text_list(at: Location, value: object) -> object:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        at.error("expected a list of strings")
        return UNREAD
    return tuple(value)


def _read(at: Location, key: Key, value: object) -> object:
    """One value of the key's type, or UNREAD after reporting why not."""
    kind, origin = key.kind, typing.get_origin(key.kind)
    if "reader" in key.rules:
        return key.rules["reader"](at, value)
    if kind is bool:
        return _flag(at, value)
    if kind in (int, float):
        return _number(at, value, kind is int, key.rules.get("minimum", 0))
    if origin is dict:
        return _text_map(at, value)
    if origin is tuple:
        return _text_list(at, value)
    return _text(at, value, key.rules.get("expects"))


def _from_environment(at: Location, key: Key, text: str) -> object:
    """A variable's text as the file would hold the value: lists separated by os.pathsep (paths) or
    commas, mappings and other structures as JSON."""
    if typing.get_origin(key.kind) is tuple and "reader" not in key.rules:
        return [item for item in text.split(os.pathsep if key.rules.get("path") else ",") if item]
    if typing.get_origin(key.kind) is dict or "reader" in key.rules:
        try:
            return json.loads(text)
        except ValueError:
            at.error(f"expected JSON, got {text!r}")
            return UNREAD
    return text


def _resolve(at: Location, base: Path, path: str) -> object:
    if "\x00" in path:
        at.error(f"a path cannot contain a NUL character, got {path!r}")
        return UNREAD
    expanded = Path(os.path.expandvars(os.path.expanduser(path)))
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())


@dataclass(frozen=True)
class Reading:
    """One floe.yaml (or component's attributes) being read: where messages point and paths start."""

    problems: Problems
    source: str
    base: Path
    environ: Mapping[str, str]

    def at(self, *path: str) -> Location:
        return Location(self.problems, self.source, path)


def read_value(reading: Reading, key: Key, raw: Mapping[str, object]) -> Any:
    """The key's value: from its environment variable, else the file, else the default; checked
    and, for paths, resolved (the environment's policies against the working folder)."""
    name = next((n for n in key.env_names if reading.environ.get(n)), None)
    if name is not None:
        at, base = reading.at(f"environment {name}"), reading.base
        value = _from_environment(at, key, reading.environ[name])
        if key.rules.get("env_paths_from_working_folder"):
            base = Path.cwd()
    else:
        at, base, value = reading.at(*filter(None, (key.section, key.name))), reading.base, raw.get(key.name)
    if value is not UNREAD:
        value = key.default if value is None else _read(at, key, value)
    if value is UNREAD or value is None:  # unreadable (reported) or empty: the default
        return key.default
    return _checked(at, key, _resolved(at, key, base, value))


def _resolved(at: Location, key: Key, base: Path, value: Any) -> Any:
    if not key.rules.get("path"):
        return value
    if isinstance(value, tuple):
        return tuple(path for path in (_resolve(at, base, v) for v in value) if path is not UNREAD)
    return _resolve(at, base, value)


def _checked(at: Location, key: Key, value: object) -> object:
    problem = key.rules["check"](value) if "check" in key.rules and value is not UNREAD else None
    if problem:
        at.error(problem)
    return key.default if problem or value is UNREAD else value


def read_mapping(at: Location, value: object, allowed: list[str]) -> Mapping[str, object]:
    """A section (or the whole file) as a mapping of known keys; what is not is reported."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        at.error(f"expected a mapping, got {type(value).__name__}")
        return {}
    for name in value:
        if name not in allowed:
            close = closest(str(name), allowed)
            hint = f" (did you mean '{close}'?)" if close else ""
            at.child(str(name)).error(f"unknown key{hint}; allowed: {', '.join(sorted(allowed))}")
    return value
