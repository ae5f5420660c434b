"""Maintenance settings of the systems teams leave (Polaris policies, S3 Tables' maintenance configuration,
Amoro's table properties), turned into floe-dagster policies (``floe-dagster import --from ...``). Each
source's reader (core/foreign/import_polaris.py, import_s3tables.py, import_amoro.py) says what every level of its
hierarchy sets; this module resolves the hierarchy and writes one policy per level.

**Levels.** A source sets operations at the catalog (an S3 table bucket, Amoro's catalog defaults), at a
namespace, or at a table; a table gets, for each operation, the setting of its nearest level (Polaris'
inheritance: the table's own, else its namespace's, else the parent namespace's, ..., else the
catalog's). floe-dagster gives each table one policy, so each level becomes one policy holding the
operations in effect there (its own and the inherited ones), with ``priority`` its depth: the nearest
level's policy wins for every table under it. A level that turns an operation off (Polaris ``enable:
false``, S3 ``status: disabled``, Amoro ``...enabled=false``) leaves it out of its policy, which then
shadows the inherited one.

**Never more aggressive than the source.** An operation that deletes is written only from what the
source states: a source with no retention gives no retention (no defaults assumed). A value floe-dagster
cannot carry as it is (a snapshot age under :data:`MIN_SNAPSHOT_AGE`, orphans younger than
:data:`MIN_ORPHAN_DAYS` days, a fixed cutoff date, folders of the source's choosing) keeps its operation
written disabled (commented out, under its reason, with the nearest value floe-dagster allows), for a
person to decide. Everything else that does not carry over is listed with why.

Pure: no Dagster, Spark or PyIceberg; the files are read and written by :mod:`floe_dagster.foreign_import`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from floe_dagster.core.facts.expiry_defaults import MIN_SNAPSHOT_AGE  # below it an expiry needs a person's decision
from floe_dagster.core.foreign.floe_migration import ImportedPolicy

SOURCES = ("polaris", "s3tables", "amoro")
MIN_ORPHAN_DAYS = 1  # Iceberg refuses to remove files younger than 24 hours
DAILY = {"interval": "P1D"}  # the schedule of an imported operation the source gives no cadence for
_BAD_NAME = re.compile(r"[/\\*?.]|^\s|\s$")


class SourceError(ValueError):
    """The source file cannot be read: every problem, each naming the file and the field."""

    def __init__(self, errors: Iterable[str]):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


@dataclass(frozen=True)
class Setting:
    """One operation as one level of the source sets it."""

    key: str  # the policy key: rewriteDataFiles, expireSnapshots, orphanCleanup, rewriteManifests
    config: Mapping[str, object] | None  # None: the source turns the operation off at this level
    origin: str  # what set it: "policy 'p' (system.snapshot-expiry)"
    schedule: Mapping[str, object] = field(default_factory=lambda: dict(DAILY))
    disabled_reason: str = ""  # set: written commented out under this reason (config: what to uncomment)
    notes: tuple[str, ...] = ()  # what of the source's setting did not carry over, and why
    extra: Mapping[str, object] = field(default_factory=dict)  # policy fields written with it (refRetention)


@dataclass
class Level:
    """A place of the source's hierarchy and the operations it sets there."""

    path: tuple[str, ...]  # () the catalog; a namespace's parts; a table's namespace parts and name
    is_table: bool
    settings: dict[str, Setting] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        kind = "table" if self.is_table else "namespace" if self.path else "catalog"
        return f"{kind} {'.'.join(self.path)}" if self.path else kind


class Problems:
    """Errors found reading one source file, each as ``<file>: <field>: <message>``."""

    def __init__(self, source: str):
        self.source = source
        self.errors: list[str] = []

    def error(self, where: str, message: str) -> None:
        self.errors.append(f"{self.source}: {where}: {message}" if where else f"{self.source}: {message}")

    def raise_if_any(self) -> None:
        if self.errors:
            raise SourceError(self.errors)


def check_name(problems: Problems, where: str, name: object) -> str | None:
    """A namespace or table name floe-dagster can write in a pattern and a file name: text, without path
    separators, glob characters or dots (which floe-dagster reads as namespace levels)."""
    if not isinstance(name, str) or not name:
        problems.error(where, f"expected a non-empty name, got {name!r}")
        return None
    if _BAD_NAME.search(name) or name in (".", ".."):
        problems.error(where, f"{name!r} is not a name floe-dagster can import: no '/', '\\', '*', '?', '.' "
                              "or spaces around it")
        return None
    return name


def whole_number(problems: Problems, where: str, value: object, minimum: int = 0) -> int | None:
    """An integer written as a JSON number or as text (Polaris' config map and table properties are text)."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,18}\s*", value):
        number = int(value)
    else:
        number = None
    if number is None:
        problems.error(where, f"expected a whole number, got {value!r}")
        return None
    if number < minimum:
        problems.error(where, f"must be at least {minimum}, got {number}")
        return None
    return number


def pattern_of(catalog: str, level: Level) -> str:
    """The table pattern of a level: every table of the catalog, of a namespace and the namespaces under
    it (a regex: one pattern for every depth), or one table."""
    if not level.path:
        return f"{catalog}.*.*"
    if level.is_table:
        return ".".join((catalog, *level.path))
    return "/" + r"\.".join(re.escape(part) for part in (catalog, *level.path)) + r"\..+/"


def _ancestors(level: Level, levels: Mapping[tuple[tuple[str, ...], bool], Level]) -> list[Level]:
    """The levels whose settings a level inherits, farthest first, the level itself last."""
    namespace = level.path[:-1] if level.is_table else level.path
    chain = [levels.get((namespace[:depth], False)) for depth in range(len(namespace) + 1)]
    if level.is_table:
        chain.append(level)
    return [found for found in chain if found is not None]


def resolve(source: str, catalog: str, levels: Iterable[Level]) -> tuple[list[ImportedPolicy], list[str]]:
    """One policy per level (catalog first, then by depth), with the operations in effect there; and the
    notes of the levels that need no policy (nothing in effect, nothing inherited to turn off)."""
    by_place = {(level.path, level.is_table): level for level in levels}
    policies, unwritten = [], []
    for level in sorted(by_place.values(), key=lambda lv: (len(lv.path), lv.is_table, lv.path)):
        chain = _ancestors(level, by_place)
        effective: dict[str, tuple[Setting, Level]] = {}
        for ancestor in chain:
            for key, setting in ancestor.settings.items():
                effective[key] = (setting, ancestor)
        shadows = any(s.config is not None for ancestor in chain if ancestor is not level
                      for s in ancestor.settings.values())
        if not shadows and all(s.config is None for s, _ in effective.values()):
            unwritten += [f"{level.label}: {note}" for note in level.notes]
            continue  # nothing in effect here, nothing inherited to turn off
        policies.append(_policy(source, catalog, level, effective))
    return policies, unwritten


def _policy(source: str, catalog: str, level: Level, effective: Mapping[str, tuple[Setting, Level]]) -> ImportedPolicy:
    name = ".".join((source, catalog, *level.path))
    document: dict[str, object] = {"name": name, "description": f"imported from {source} ({level.label})",
                                "tablePattern": pattern_of(catalog, level), "priority": len(level.path)}
    disabled: dict[str, object] = {}
    reasons, lost = [], [f"{level.label}: {note}" for note in level.notes]
    for key, (setting, where) in effective.items():
        inherited = "" if where is level else f" (inherited from the {where.label})"
        lost += [f"{key}: {setting.origin}{inherited}: {note}" for note in setting.notes]
        if setting.config is None:
            continue
        target = disabled if setting.disabled_reason else document
        target[key] = dict(setting.config)
        target[f"{key}Schedule"] = dict(setting.schedule)
        if setting.disabled_reason:
            reasons.append(f"{key}: {setting.disabled_reason}")
            lost.append(f"{key}: {setting.origin}{inherited}: written disabled: {setting.disabled_reason}")
        else:
            document.update(setting.extra)
    return ImportedPolicy(name, document, tuple(lost), disabled,
                          disabled_reason=" ".join(reasons) + (" Decide, then uncomment:" if reasons else ""))


def off(key: str, origin: str, why: str) -> Setting:
    """The source turns an operation off at this level (it shadows what the level inherits)."""
    return Setting(key, None, origin, notes=(f"turned off by the source ({why}): not written",))


__all__ = ["SOURCES", "MIN_SNAPSHOT_AGE", "MIN_ORPHAN_DAYS", "DAILY", "SourceError", "Setting", "Level", "Problems",
           "check_name", "whole_number", "pattern_of", "resolve", "off"]
