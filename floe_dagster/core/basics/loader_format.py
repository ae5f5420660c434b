"""How Floe's PolicyLoader format (kebab-case) spells keys, both ways: the sections of keys that
``core/policies/policy_formats.py`` translates, and what an operation kind declares of its own spellings
(``core/operation_kinds/``): a key the loader writes its own way, the API-style spelling it refuses,
keys the loader combines into one API value (and how to split that value again).

A section's key is the API key in kebab case (``zOrderColumns`` → ``z-order-columns``) unless the
section says otherwise. Pure: the kind modules and the translation both import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Mapping

from floe_dagster.core.basics.durations import parse_iso_duration

Combine = Callable[[Any, Mapping[str, object]], Any]  # (Location, the written keys' values) → the API value, or None
Split = Callable[[Any, str], Mapping[str, object]]  # (the API value, where it is) → the written keys and values


def kebab(name: str) -> str:
    """A camelCase key in kebab case, as Jackson's KEBAB_CASE writes it: ``zOrderColumns`` → ``z-order-columns``."""
    return re.sub(r"[A-Z]", lambda m: "-" + m.group(0).lower(), name)


@dataclass(frozen=True)
class Combined:
    """Loader keys summed up into one API value (``interval-days`` + ``interval-hours`` → ``interval``),
    and the way back (``split``, for ``floe-dagster import-floe``)."""

    keys: tuple[str, ...]
    combine: Combine
    split: Split


@dataclass(frozen=True)
class LoaderSection:
    """The keys of one mapping in the PolicyLoader format."""

    keys: Mapping[str, str] = field(default_factory=dict)  # kebab key → API key (value as written, or ``nested``)
    refused: Mapping[str, str] = field(default_factory=dict)  # kebab key → why not
    nested: Mapping[str, "LoaderSection"] = field(default_factory=dict)  # kebab key → its mapping's section
    combined: Mapping[str, Combined] = field(default_factory=dict)  # API key → its written keys
    ignored: tuple[str, ...] = ()  # accepted, dropped

    @property
    def allowed(self) -> list[str]:
        return [*self.keys, *(k for combined in self.combined.values() for k in combined.keys), *self.ignored]


def spelled(api_keys: tuple[str, ...], *spelled_otherwise: str) -> dict[str, str]:
    """Each API key's kebab-case spelling → the key, but for those the loader spells its own way."""
    return {kebab(key): key for key in api_keys if key not in spelled_otherwise}


def written_as(loader_key: str) -> str:
    """Why an API-style spelling is refused: the loader writes the field another way."""
    return f"is written {loader_key} in Floe's PolicyLoader format (kebab-case)"


def whole_units(value: object, where: str, unit: timedelta) -> int:
    """An ISO-8601 duration (or whole days, as Floe's API writes an interval) in whole ``unit``s; ValueError
    naming ``where`` when it is not a whole number of them (the PolicyLoader format has no other spelling)."""
    try:
        amount = (parse_iso_duration(value) if isinstance(value, str) else timedelta(days=value)
                  if isinstance(value, int) and not isinstance(value, bool) else None)
    except (ValueError, OverflowError):
        amount = None
    if amount is None or amount % unit:
        raise ValueError(f"{where}: {value!r} is not a whole number of {'days' if unit.days else 'minutes'}, "
                         "which the PolicyLoader format needs")
    return amount // unit


__all__ = ["Combine", "Split", "Combined", "LoaderSection", "kebab", "spelled", "written_as", "whole_units"]
