"""The iceberg layer's half of the catalogue of table facts: every stored fact (core/facts/fact_catalogue.py) is
measured by a reducer registered here under the fact's name, for the tiers it is measured in.

A reducer (:func:`reduces`) reads a :class:`MetadataRead` (the table's metadata file; in the full tier also
its current manifests, each already reduced to plain numbers and cached by path) and returns its facts'
values by name. A fact that needs more of each manifest than iceberg/metadata_reduction.py's
``summarize_manifest`` keeps registers a manifest part (:func:`manifest_part`): its reduction of a
manifest's live entries, kept in the reduced manifest under its name. Every module of this package is
imported (in sorted order) before the first reduction, so a new fact's reducer is a module here and edits
no list. Each tier's facts are checked once: every stored fact it measures has exactly one reducer.

The health cache's versions are derived from the declarations (:func:`record_version`,
:func:`manifest_version`): a record of other facts, or of facts reduced by another reducer version, is
collected again; reduced manifests are read again only when the manifest reduction changes.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestFile
from pyiceberg.table.metadata import TableMetadata

from floe_dagster.core.facts.fact_catalogue import views
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.facts.table_facts import FULL, SUMMARY, TIERS, Tier, stable_version
from floe_dagster.core.basics.tables import TableName

# Bump when summarize_manifest's own reduction changes (its parts carry their own versions): every cached
# reduced manifest is read again.
MANIFEST_ALGORITHM = 1


@dataclass(frozen=True)
class MetadataRead:
    """What reducers read of one table: its metadata file, and in the full tier its current snapshot's
    manifests reduced (``summaries``: manifest path → reduced manifest) and what its refs alone keep
    (``pinned_files``: ref name → (files, bytes))."""

    table: TableName
    metadata_location: str
    metadata: TableMetadata
    collected_at_ms: int
    tier: Tier
    io: FileIO | None = None  # the summary tier reads the manifest list when the snapshot summary has no totals
    manifests: Sequence[ManifestFile] = ()
    summaries: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    pinned_files: Mapping[str, tuple[int, int]] | None = None


@dataclass(frozen=True)
class Reducer:
    """Measures ``facts`` in ``tiers`` (``version``: bump when the way it measures them changes)."""

    facts: tuple[str, ...]
    reduce: Callable[[MetadataRead], Mapping[str, object]]
    tiers: tuple[Tier, ...]
    version: int


@dataclass(frozen=True)
class ManifestPart:
    """A manifest's live entries reduced for one fact, kept in the reduced manifest under ``name``."""

    name: str
    reduce: Callable[[ManifestFile, list[ManifestEntry]], Any]
    version: int


_REDUCERS: list[Reducer] = []
_PARTS: list[ManifestPart] = []
_state: dict[str, Any] = {"discovered": False, "checked": {}}


def reduces(*facts: str, tiers: Sequence[Tier] = TIERS, version: int = 1
            ) -> Callable[[Callable[[MetadataRead], Mapping[str, Any]]], Callable[[MetadataRead], Mapping[str, Any]]]:
    """Register the decorated function as the reducer of ``facts`` in ``tiers``."""
    def register(reduce: Callable[[MetadataRead], Mapping[str, Any]]) -> Callable[[MetadataRead], Mapping[str, Any]]:
        _add(Reducer(tuple(facts), reduce, tuple(tiers), version))
        return reduce
    return register


def manifest_part(name: str, version: int = 1) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function (manifest, its live entries) → JSON-able as a manifest part."""
    def register(reduce: Callable[..., Any]) -> Callable[..., Any]:
        _add(ManifestPart(name, reduce, version))
        return reduce
    return register


def _add(registered: Reducer | ManifestPart) -> None:
    if isinstance(registered, Reducer):
        _REDUCERS.append(registered)
    else:
        if any(part.name == registered.name for part in _PARTS):
            raise ValueError(f"manifest part {registered.name!r} is registered twice")
        _PARTS.append(registered)
    _state["checked"] = {}


@contextlib.contextmanager
def registering(*registered: Reducer | ManifestPart) -> Iterator[None]:
    """Reducers and manifest parts registered for the block only (tests)."""
    _discover()
    for item in registered:
        _add(item)
    try:
        yield
    finally:
        for item in registered:
            (_REDUCERS if isinstance(item, Reducer) else _PARTS).remove(item)  # type: ignore[arg-type]
        _state["checked"] = {}


def _discover() -> None:
    """Import every module of this package once: each registers its reducers."""
    if _state["discovered"]:
        return
    _state["discovered"] = True
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda found: found.name):
        importlib.import_module(f"{__name__}.{module.name}")


def manifest_parts() -> tuple[ManifestPart, ...]:
    _discover()
    return tuple(_PARTS)


def reducers_for(tier: Tier) -> tuple[Reducer, ...]:
    """The reducers of a tier, checked against the catalogue: each fact measured in the tier has exactly one."""
    return _tier(tier)[0]


def _tier(tier: Tier) -> tuple[tuple[Reducer, ...], frozenset[str]]:
    """The tier's reducers and the facts they measure (checked once per catalogue and registry)."""
    _discover()
    facts = views()
    key = (tier, facts.generation)
    found = _state["checked"].get(key)
    if found is None:
        reducers = tuple(reducer for reducer in _REDUCERS if tier in reducer.tiers)
        needed = frozenset(f.name for f in facts.stored if f.tier == SUMMARY or tier == FULL)
        _check(tier, reducers, needed)
        found = _state["checked"][key] = (reducers, needed)
    return found


def _check(tier: Tier, found: tuple[Reducer, ...], needed: set[str]) -> None:
    measured: dict[str, int] = {}
    for reducer in found:
        for name in reducer.facts:
            measured[name] = measured.get(name, 0) + 1
    missing = sorted(needed - set(measured))
    if missing:
        raise LookupError(f"table facts {missing} have no reducer for the {tier} tier: register one with "
                          "@reduces(<fact name>, ...) in a module of iceberg/fact_reducers/")
    twice = sorted(name for name, count in measured.items() if count > 1)
    unknown = sorted(set(measured) - needed)
    if twice or unknown:
        what = "measured twice" if twice else "are no stored facts of this tier (core/facts/fact_catalogue.py)"
        raise LookupError(f"{tier} tier reducers: {twice or unknown} {what}")


def reduce_facts(read: MetadataRead) -> dict[str, object]:
    """Every stored fact of the read's tier, by name."""
    reducers, needed = _tier(read.tier)
    values: dict[str, object] = {}
    for reducer in reducers:
        values.update(reducer.reduce(read))
    if values.keys() != needed:  # a reducer returned other facts than it registered for
        wrong = [list(r.facts) for r in reducers if set(r.reduce(read)) != set(r.facts)]
        raise LookupError(f"the reducers of {wrong} returned other facts than they measure")
    return values


def measure(read: MetadataRead) -> TableMetrics:
    """The table's metrics record at the read's tier."""
    return TableMetrics.measured(read.table.qualified, read.metadata_location, read.tier, read.collected_at_ms,
                                 reduce_facts(read))


def manifest_version() -> int:
    """The cache version of reduced manifests: :data:`MANIFEST_ALGORITHM`, and the registered parts."""
    parts = sorted([part.name, part.version] for part in manifest_parts())
    return MANIFEST_ALGORITHM if not parts else stable_version("reduced manifest", MANIFEST_ALGORITHM, parts)


def record_version() -> int:
    """The cache version of metrics records, from what a record holds (every stored fact's declaration) and
    how each is measured (every reducer's facts, tiers and version, and the manifest reduction)."""
    _discover()
    reducers = sorted([list(r.facts), list(r.tiers), r.version] for r in _REDUCERS)
    return stable_version("metrics record", [fact.declaration() for fact in views().stored], reducers,
                          manifest_version())
