"""Field checking shared by the policy parts: every problem is collected (never the first only) as
one line ``<file>: policy '<name>': <field.path>: <message>``, and unknown fields name the closest
valid one.

The parsers of schedules, trigger conditions, health thresholds and operation configs take a
:class:`Location` and return a usable value (the default) even after an error, so that one pass over a
policy reports everything that is wrong with it.
"""

from __future__ import annotations

import difflib
from dataclasses import MISSING, dataclass, field
from typing import Any, Iterable, Iterator, Mapping, TypeVar

_MISSING = object()
T = TypeVar("T")  # a reader's default: what it gives for an unset or invalid value
N = TypeVar("N", int, float)
Raw = Mapping[str, object]  # a mapping as YAML or JSON gave it: the readers below check each value's type


def setting(default: Any = MISSING, description: str = "", *, default_factory: Any = MISSING, **rules: Any) -> Any:
    """A field of a settings dataclass, as floe.yaml declares it: its default, the description the
    docs and the component's schema show, and the reading rules settings.py applies (``minimum``,
    ``path``, ``env`` for older variable names, ``check``). Plain dataclass metadata, so the pure
    core can declare its own sections (the scheduler's, the batching's, the debt weights)."""
    return field(default=default, default_factory=default_factory, metadata={"description": description, **rules})


@dataclass
class Problems:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Location:
    """Where a value sits: the message prefix (file and policy) and the field path inside it."""

    problems: Problems
    prefix: str = ""
    path: tuple[str, ...] = ()

    def child(self, key: str | int) -> "Location":
        if isinstance(key, int):
            if not self.path:
                return Location(self.problems, self.prefix, (f"[{key}]",))
            return Location(self.problems, self.prefix, (*self.path[:-1], f"{self.path[-1]}[{key}]"))
        return Location(self.problems, self.prefix, (*self.path, key))

    def line(self, message: str) -> str:
        parts = [p for p in (self.prefix, ".".join(self.path)) if p]
        return one_line(": ".join((*parts, message)))

    def error(self, message: str) -> None:
        self.problems.errors.append(self.line(message))

    def warn(self, message: str) -> None:
        self.problems.warnings.append(self.line(message))

    @property
    def has_errors(self) -> bool:
        return bool(self.problems.errors)


def one_line(text: str) -> str:
    """A message on one line whatever the file held: control characters in names (a field or policy
    name with a newline) are shown escaped, as Python writes them."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def standalone() -> Location:
    """A location for parsing one part on its own (``Schedule.from_mapping`` and friends)."""
    return Location(Problems())


def raise_if_errors(at: Location, what: str) -> None:
    if at.problems.errors:
        raise ValueError(f"invalid {what}: " + "; ".join(at.problems.errors))


def describe(value: object) -> str:
    """A value as a message shows it: strings quoted, other things by their YAML-ish name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return repr(value)


def closest(name: str, valid: Iterable[str]) -> str | None:
    """The valid name a typo most likely meant, comparing without case first (``TablePattern``)."""
    valid = list(valid)
    for candidate in valid:
        if candidate.lower() == name.lower():
            return candidate
    lowered = {v.lower(): v for v in valid}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def check_mapping(at: Location, raw: object, what: str = "a mapping") -> Mapping[str, object] | None:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        at.error(f"expected {what}, got {describe(raw)}")
        return None
    bad = [k for k in raw if not isinstance(k, str)]
    for key in bad:
        at.error(f"field names must be text, got {describe(key)}")
    return raw if not bad else {k: v for k, v in raw.items() if isinstance(k, str)}


def mapping_items(at: Location, raw: list, allowed: Iterable[str], what: str
                  ) -> Iterator[tuple[Location, Mapping[str, object]]]:
    """Each item of a list that must hold mappings of ``allowed`` keys, with its location; an item that
    is not a mapping, and unknown keys, are reported (the item is then left out or read without them)."""
    allowed = tuple(allowed)
    for index, item in enumerate(raw):
        here = at.child(index)
        mapping = check_mapping(here, item, what)
        if mapping is None:
            continue
        check_unknown(here, mapping, allowed)
        yield here, mapping


def check_unknown(at: Location, raw: Raw, allowed: Iterable[str],
                  refused: Mapping[str, str] | None = None) -> None:
    """Report every field not in ``allowed``: with the reason when it is knowingly refused, else with
    the closest valid name."""
    allowed = list(allowed)
    refused = refused or {}
    for key in raw:
        if key in allowed:
            continue
        if key in refused:
            at.child(key).error(refused[key])
            continue
        suggestion = closest(key, allowed)
        hint = f"did you mean '{suggestion}'?" if suggestion else f"valid fields: {', '.join(allowed)}"
        at.child(key).error(f"unknown field; {hint}")


def get_bool(at: Location, raw: Raw, key: str, default: T | None = None) -> bool | T | None:
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, bool):
        at.child(key).error(f"expected true or false, got {describe(value)}")
        return default
    return value


def get_int(at: Location, raw: Raw, key: str, default: T | None = None, minimum: int | None = None,
            maximum: int | None = None) -> int | T | None:
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        at.child(key).error(f"expected a whole number, got {describe(value)}")
        return default
    return _in_range(at.child(key), value, default, minimum, maximum)


def get_number(at: Location, raw: Raw, key: str, default: T | None = None, minimum: float | None = None,
               maximum: float | None = None, above: float | None = None) -> float | T | None:
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN
        at.child(key).error(f"expected a number, got {describe(value)}")
        return default
    if above is not None and value <= above:
        at.child(key).error(f"must be greater than {_num(above)}, got {_num(value)}")
        return default
    return _in_range(at.child(key), value, default, minimum, maximum)


def _in_range(at: Location, value: N, default: T, minimum: float | None, maximum: float | None) -> N | T:
    if minimum is not None and value < minimum:
        at.error(f"must be at least {_num(minimum)}, got {_num(value)}")
        return default
    if maximum is not None and value > maximum:
        at.error(f"must be at most {_num(maximum)}, got {_num(value)}")
        return default
    return value


def _num(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def get_str(at: Location, raw: Raw, key: str, default: T | None = None, non_empty: bool = True) -> str | T | None:
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, str):
        at.child(key).error(f"expected text, got {describe(value)}")
        return default
    if non_empty and not value.strip():
        at.child(key).error("must not be empty")
        return default
    return value


def get_enum(at: Location, raw: Raw, key: str, choices: Iterable[str], default: T | None = None) -> str | T | None:
    """An enumerated value in any case, normalized to upper case."""
    choices = list(choices)
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, str) and value.strip().upper() in choices:
        return value.strip().upper()
    at.child(key).error(f"must be one of {', '.join(choices)}, got {describe(value)}")
    return default


def get_str_list(at: Location, raw: Raw, key: str, default: T | None = None) -> list[str] | T | None:
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, (list, tuple)):
        at.child(key).error(f"expected a list of text, got {describe(value)}")
        return default
    items: list[str] = []
    ok = True
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            at.child(key).child(index).error(f"expected non-empty text, got {describe(item)}")
            ok = False
        else:
            items.append(item.strip())
    return items if ok else default


def get_str_map(at: Location, raw: Raw, key: str, default: T | None = None) -> dict[str, str] | T | None:
    value = raw.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, Mapping):
        at.child(key).error(f"expected a mapping of text to text, got {describe(value)}")
        return default
    result: dict[str, str] = {}
    ok = True
    for k, v in value.items():
        if not isinstance(k, str) or not k:
            at.child(key).error(f"keys must be non-empty text, got {describe(k)}")
            ok = False
        elif not isinstance(v, str):
            at.child(key).child(k).error(f"expected text (quote it in YAML), got {describe(v)}")
            ok = False
        else:
            result[k] = v
    return result if ok else default
