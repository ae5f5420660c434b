"""How a table fact is declared: once, with everything that shows it (core/facts/fact_catalogue.py lists them).

A :class:`Fact` is one number (or value) about a table. A *stored* fact is measured from Iceberg metadata
by a reducer the iceberg layer registers under the fact's name (iceberg/fact_reducers/), kept in the
metrics record (:class:`~floe_dagster.core.facts.measurements.TableMetrics`) and in the health cache; a
*computed* fact is worked out from the stored ones when health is assessed (under the policy's
thresholds, or at the assessment's clock), never cached. Either may be shown:

``derived``   its place among the health record's derived numbers (``derived`` in the record, the API's
              health, ``floe-dagster health --json``);
``dagit``     its place among the numbers of Dagit's health observation (plotted over time);
``api``       its key in Floe's health answer (and in the health history read back from observations);
``check``     a health check on it: an issue when it reaches a threshold (a policy's ``healthThresholds``
              field, or a fixed limit);
``text``      its line in ``floe-dagster health``'s numbers.

Places are small integers, each view's own: the views keep the order they had before the catalogue
(Floe's answer and check order, the record's derived numbers, Dagit's observation), and a new fact takes
the next free place (an ``Api``'s or a ``Check``'s may be left out: after the placed ones); equal places
keep the declaration order. The metrics record and the text lines follow the declaration order.
A stored fact with no reducer for a tier it is measured in is an error naming the fact. The health
cache's record version and the observation format are derived from the declarations
(:func:`stable_version`), never set by hand. Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

Tier = Literal["summary", "full"]
SUMMARY: Tier = "summary"  # measured in both tiers, from the metadata file
FULL: Tier = "full"  # measured in the full tier only (manifests read); the default in the summary tier
TIERS: tuple[Tier, ...] = (SUMMARY, FULL)

# How a stored fact is written to JSON (the cache and the record): as it is, nested tuples as lists,
# or a tuple of core/facts/measurements.py's named tuples as lists.
PLAIN, NESTED, COLUMNS, REFS = "plain", "nested", "columns", "refs"
SHAPES = (PLAIN, NESTED, COLUMNS, REFS)


@dataclass(frozen=True)
class Check:
    """A health check on a fact: an issue of type ``issue`` when its derived number reaches ``critical``
    (CRITICAL) or else ``warning`` (WARNING). A threshold is a :class:`HealthThresholds` attribute name (a
    policy's ``healthThresholds`` field) or a fixed number. ``at``: its place among the checks (issues are
    listed in check order); ``unless`` (of the derived numbers) skips it."""

    issue: str
    at: int | None
    warning: str | float
    critical: str | float
    label: str  # the message's subject: "<label>: <measured> ≥ <severity> threshold <threshold>"
    unless: Callable[[Mapping[str, object]], object] | None = None  # truthy: the check does not apply


@dataclass(frozen=True)
class Api:
    """A fact's key in Floe's health answer. ``formatted``: also this key, the size as Floe writes it;
    ``whole``: a number of days as Floe gives it (whole days)."""

    key: str
    at: int | None = None
    formatted: str | None = None
    whole: bool = False


@dataclass(frozen=True)
class Text:
    """A fact's line in ``floe-dagster health``: ``label`` then ``render(metrics, derived)`` (the health
    record's two sections); no render: the fact's value."""

    label: str
    render: Callable[[Mapping[str, object], Mapping[str, object]], str] | None = None


@dataclass(frozen=True)
class Fact:
    """One table fact, declared once (see the module docstring)."""

    name: str  # the metrics record's attribute and every view's key
    type: str  # its Python type as written ("int", "int | None", ...)
    tier: Tier
    doc: str
    default: object = None  # its value when not measured (the summary tier of a full-tier fact)
    default_factory: Callable[[], Any] | None = None  # a mutable default (dict)
    shape: str = PLAIN  # how it is written to JSON (stored facts)
    # Computed facts: the value from the metrics record under a policy's HealthThresholds (None outside an
    # assessment: a fact the record's report keeps must not need them), rounded to ``digits`` when shown.
    measure: Callable[[Any, Any], Any] | None = None
    age_of: str | None = None  # computed at the assessment's clock: days since this stored fact (epoch ms)
    digits: int | None = None
    report: bool | None = None  # in the record's metrics (stored: yes unless False; computed: only if True)
    derived: int | None = None
    dagit: int | None = None
    api: Api | None = None
    check: Check | None = None
    text: Text | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.startswith("_"):
            raise ValueError(f"table fact {self.name!r}: a fact's name is a public Python identifier")
        if self.tier not in TIERS:
            raise ValueError(f"table fact {self.name!r}: tier must be one of {TIERS}, got {self.tier!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"table fact {self.name!r}: shape must be one of {SHAPES}, got {self.shape!r}")
        if self.measure is not None and self.age_of is not None:
            raise ValueError(f"table fact {self.name!r}: computed by measure or as an age, not both")

    @property
    def stored(self) -> bool:
        """Measured from metadata and kept in the metrics record (else computed when assessed)."""
        return self.measure is None and self.age_of is None

    @property
    def in_report(self) -> bool:
        return self.report is not False if self.stored else bool(self.report)

    @property
    def clocked(self) -> bool:
        return self.age_of is not None

    def declaration(self) -> list[object]:
        """What the health cache's record version is made of: what a stored record holds of this fact."""
        return [self.name, self.type, self.tier, self.shape, repr(self.default_factory() if self.default_factory
                                                                else self.default)]


def stable_version(*parts: object) -> int:
    """A version number from JSON-able declarations: the same in every process and Python (sha256, never
    ``hash()``), different when any part differs. 48 bits: an SQLite INTEGER holds it."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:6], "big")


# -- the text of numbers (health text lines) ------------------------------------------------------------


def format_bytes(value: int | float) -> str:
    """A size as people read it: ``512 B``, ``1.4 GiB``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def bytes_text(value: Any) -> str:
    """A size, or ``-`` when not measured."""
    return "-" if value is None else format_bytes(value)


def number_text(value: object, digits: int = 2) -> str:
    """A number as the health text prints it (``-`` when not measured, floats without trailing zeros)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") or "0"
    return str(value)
