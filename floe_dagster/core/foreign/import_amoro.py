"""Apache Amoro's table properties (``floe-dagster import --from amoro FILE|CATALOG``), read into the levels
core/foreign/foreign_policies.py resolves: Amoro's catalog defaults (its catalog properties ``table.<key>``) are
the catalog level, each table's properties its own (a table's property wins over the catalog's, as in
Amoro). Read from a file (``{"defaults": {...}, "tables": {"sales.orders": {...}}}``) or from the tables
themselves (the adapter lists the catalog and hands the same mapping).

Only what the properties state is imported: a table that sets no key of Amoro's gets nothing of its own,
and Amoro's defaults (its expiry is on by default, 12 hours and 1 snapshot) are never assumed. Keys (and
the older spellings Amoro still reads): ``self-optimizing.enabled``, ``self-optimizing.target-size`` →
``rewriteDataFiles.targetFileSizeBytes``, ``self-optimizing.filter`` → ``filter``,
``self-optimizing.minor.trigger.interval`` (ms, default 1 hour) → the rewrite's interval;
``table-expire.enabled`` (``table-expire.enable``), ``snapshot.keep.duration`` (default ``720min``;
``snapshot.base.keep.minutes`` before it) → ``expireSnapshots.maxSnapshotAge``, ``snapshot.keep.min-count``
(default 1) → ``retainLast``; ``clean-orphan-file.enabled`` (``clean-orphan-file.enable``),
``clean-orphan-file.min-existing-time-minutes`` (default 2880) → ``orphanCleanup.retentionPeriodInDays``;
``gc.enabled=false`` turns Amoro's expiry and orphan cleanup off, as Amoro does.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Mapping

from floe_dagster.core.basics.durations import MAX_DURATION, format_iso_duration
from floe_dagster.core.foreign.foreign_policies import MIN_ORPHAN_DAYS, MIN_SNAPSHOT_AGE, Level, Problems, Setting, \
    check_name, off, whole_number

OPTIMIZING, EXPIRE, ORPHANS = "self-optimizing.enabled", "table-expire.enabled", "clean-orphan-file.enabled"
LEGACY = {"table-expire.enable": EXPIRE, "clean-orphan-file.enable": ORPHANS}
TARGET_SIZE, FILTER, MINOR_INTERVAL = ("self-optimizing.target-size", "self-optimizing.filter",
                                       "self-optimizing.minor.trigger.interval")
KEEP_DURATION, KEEP_MINUTES, KEEP_COUNT = ("snapshot.keep.duration", "snapshot.base.keep.minutes",
                                          "snapshot.keep.min-count")
ORPHAN_MINUTES = "clean-orphan-file.min-existing-time-minutes"
DEFAULT_KEEP, DEFAULT_ORPHAN_MINUTES, DEFAULT_MINOR_MS = "720min", 2880, 3_600_000
# Amoro's keys floe-dagster has no equivalent for (read, listed as not carried over).
_PREFIXES = ("self-optimizing.", "table-expire.", "snapshot.", "clean-orphan-file.", "clean-dangling-delete-files.",
             "data-expire.", "change.data.ttl", "tag.auto-create.")
_UNITS = {"d": "days", "day": "days", "h": "hours", "hour": "hours", "min": "minutes", "minute": "minutes",
          "s": "seconds", "sec": "seconds", "second": "seconds", "ms": "milliseconds", "milli": "milliseconds",
          "millisecond": "milliseconds"}
_USED = {OPTIMIZING, EXPIRE, ORPHANS, *LEGACY, TARGET_SIZE, FILTER, MINOR_INTERVAL, KEEP_DURATION, KEEP_MINUTES,
         KEEP_COUNT, ORPHAN_MINUTES, "gc.enabled"}


def amoro_levels(document: Any, source: str) -> list[Level]:
    """The catalog defaults' level and each table's; SourceError listing every problem."""
    problems = Problems(source)
    if not isinstance(document, Mapping) or not ({"defaults", "tables"} & set(document)):
        problems.error("", "expected {\"defaults\": {<catalog property>: value}, \"tables\": {\"<namespace>.<table>\": "
                           "{<table property>: value}}}")
        problems.raise_if_any()
    levels = []
    defaults = _properties(problems, "defaults", document.get("defaults") or {})
    if defaults is not None:
        defaults = {key.removeprefix("table."): value for key, value in defaults.items()}
        level = _level(problems, "defaults", (), False, defaults)
        if level is not None:
            levels.append(level)
    tables = document.get("tables") or {}
    if not isinstance(tables, Mapping):
        problems.error("tables", f"expected a mapping of table names to their properties, got {tables!r}")
        tables = {}
    for name, raw in tables.items():
        where = f"tables.{name}"
        parts = str(name).split(".")
        if len(parts) < 2:
            problems.error(where, f"expected <namespace>.<table>, got {name!r}")
            continue
        path = tuple(check_name(problems, f"{where} (name part {i + 1})", part) for i, part in enumerate(parts))
        properties = _properties(problems, where, raw)
        if all(path) and properties is not None:
            level = _level(problems, where, path, True, properties)
            if level is not None:
                levels.append(level)
    problems.raise_if_any()
    return levels


def _properties(problems: Problems, where: str, raw: object) -> dict[str, str] | None:
    if not isinstance(raw, Mapping):
        problems.error(where, f"expected a mapping of properties, got {raw!r}")
        return None
    return {str(key): (str(value).lower() if isinstance(value, bool) else str(value)) for key, value in raw.items()}


def _level(problems: Problems, where: str, path: tuple, is_table: bool, properties: Mapping[str, str]) -> Level | None:
    properties = {LEGACY.get(key, key): value for key, value in properties.items()}
    level = Level(path, is_table)
    origin = f"Amoro properties of the {level.label}"
    gc_off = properties.get("gc.enabled", "true").lower() != "true"
    for read in (_optimizing, _expiry, _orphans):
        setting = read(problems, where, properties, origin, gc_off)
        if setting is not None:
            level.settings[setting.key] = setting
    level.notes += [f"{key}={value!r}: no equivalent in floe-dagster: not carried over"
                    for key, value in properties.items() if key not in _USED and key.startswith(_PREFIXES)]
    if properties.get("data-expire.enabled", "").lower() == "true":
        level.notes.append("data-expire.enabled=true deletes rows: not imported; write rowRetention by hand (floe-"
                           "dagster counts the age from now, Amoro by default from the last commit)")
    return level if level.settings or level.notes else None


def _flag(properties: Mapping[str, str], key: str) -> bool | None:
    """A flag as Iceberg's PropertyUtil reads it ("true" in any case; anything else false), None when unset."""
    value = properties.get(key)
    return None if value is None else value.strip().lower() == "true"


def _optimizing(problems: Problems, where: str, properties: Mapping[str, str], origin: str, gc_off: bool):
    enabled = _flag(properties, OPTIMIZING)
    if enabled is False:
        return off("rewriteDataFiles", origin, f"{OPTIMIZING}=false")
    if enabled is None and not any(key in properties for key in (TARGET_SIZE, FILTER, MINOR_INTERVAL)):
        return None
    config: dict[str, object] = {}
    if TARGET_SIZE in properties:
        config["targetFileSizeBytes"] = whole_number(problems, f"{where}.{TARGET_SIZE}", properties[TARGET_SIZE], 1)
    if properties.get(FILTER, "").strip():
        config["filter"] = properties[FILTER].strip()
    interval_ms = whole_number(problems, f"{where}.{MINOR_INTERVAL}",
                               properties.get(MINOR_INTERVAL, DEFAULT_MINOR_MS), 60_000) or DEFAULT_MINOR_MS
    interval = format_iso_duration(timedelta(milliseconds=min(interval_ms, MAX_DURATION // timedelta(milliseconds=1))))
    return Setting("rewriteDataFiles", config, origin, schedule={"interval": interval})


def _expiry(problems: Problems, where: str, properties: Mapping[str, str], origin: str, gc_off: bool):
    enabled = _flag(properties, EXPIRE)
    stated = any(key in properties for key in (KEEP_DURATION, KEEP_MINUTES, KEEP_COUNT))
    if enabled is False or gc_off:  # Amoro expires only tables whose gc.enabled is true
        return off("expireSnapshots", origin, f"{EXPIRE}=false" if enabled is False else "gc.enabled=false")
    if enabled is None and not stated:
        return None
    if KEEP_DURATION in properties:
        age = amoro_duration(problems, f"{where}.{KEEP_DURATION}", properties[KEEP_DURATION], "minutes")
    elif KEEP_MINUTES in properties:
        age = amoro_duration(problems, f"{where}.{KEEP_MINUTES}", properties[KEEP_MINUTES], "minutes")
    else:
        age = amoro_duration(problems, where, DEFAULT_KEEP, "minutes")
    keep = whole_number(problems, f"{where}.{KEEP_COUNT}", properties.get(KEEP_COUNT, "1"))
    config = {"retainLast": max(keep or 0, 1), "maxSnapshotAge": format_iso_duration(max(age, MIN_SNAPSHOT_AGE))}
    reason = ""
    if age < MIN_SNAPSHOT_AGE:
        reason = (f"Amoro keeps snapshots for {format_iso_duration(age)}: under one hour floe-dagster asks a person; "
                  "written with the shortest age it takes without asking (PT1H).")
    notes = () if stated else (f"{KEEP_DURATION} unset: Amoro's default {DEFAULT_KEEP}",)
    return Setting("expireSnapshots", config, origin, disabled_reason=reason, notes=notes)


def _orphans(problems: Problems, where: str, properties: Mapping[str, str], origin: str, gc_off: bool):
    enabled = _flag(properties, ORPHANS)
    if enabled is False or gc_off:  # inherited or not: Amoro cleans only tables whose gc.enabled is true
        return off("orphanCleanup", origin, f"{ORPHANS}=false" if enabled is False else "gc.enabled=false")
    if enabled is None:
        return None
    minutes = whole_number(problems, f"{where}.{ORPHAN_MINUTES}",
                           properties.get(ORPHAN_MINUTES, DEFAULT_ORPHAN_MINUTES)) or 0
    days = minutes / 1440
    config = {"retentionPeriodInDays": int(days) if days.is_integer() and days >= MIN_ORPHAN_DAYS
              else max(round(days, 3), MIN_ORPHAN_DAYS)}
    reason = ""
    if days < MIN_ORPHAN_DAYS:
        reason = (f"Amoro removes orphans older than {minutes} minutes: Iceberg refuses to remove files younger than "
                  f"a day, which may belong to commits in progress; written with {MIN_ORPHAN_DAYS}.")
    return Setting("orphanCleanup", config, origin, disabled_reason=reason)


def amoro_duration(problems: Problems, where: str, text: str, default_unit: str) -> timedelta:
    """Amoro's duration text: a whole number and a unit label (``720min``, ``12h``, ``7d``; no label: the
    key's default unit). Unreadable: an error, and zero (which nothing writes)."""
    match = re.fullmatch(r"\s*(\d{1,15})\s*([a-zA-Z]*)\s*", str(text))
    unit = _UNITS.get(match.group(2).lower(), None) if match and match.group(2) else default_unit
    if match is None or unit is None:
        problems.error(where, f"{text!r} is not a duration Amoro reads (a number and d, h, min, s or ms)")
        return timedelta(0)
    try:
        return min(timedelta(**{unit: int(match.group(1))}), MAX_DURATION)
    except OverflowError:
        return MAX_DURATION


__all__ = ["amoro_levels", "amoro_duration"]
