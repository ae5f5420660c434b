"""Adaptive orphan cadence, the pure half: ``orphanCleanup.adaptive: {targetBytes: 1GiB, min: P1D,
max: P90D}`` times a table's next orphan cleanup from the orphans its past cleanups found, as
Lakekeeper's commercial edition does, instead of a fixed interval.

**The rate.** Each successful cleanup found the orphan bytes that piled up since the cleanup before
it (or, for the table's first one, since ``observed_since`` when the caller knows it: the table's
creation). Over the last :data:`MAX_CLEANUPS` such periods, the rate is their bytes over their
days (a ratio of sums, so a long quiet period weighs as long as it lasted). Failed cleanups are left
out (what they found is unknown); a dry run's findings count (the files were listed).

**The interval** is ``targetBytes`` ÷ rate, clamped to ``[min, max]``: a table that makes 0.2 GiB of
orphans a day, with a 1 GiB target, is cleaned every 5 days. No orphans found: ``max``. No cleanup
recorded yet: due now (its findings start the measurement). One cleanup and no earlier start known:
``min`` after it (the next one gives the first rate). The next run is the last cleanup's end plus
the interval; :attr:`CadenceVerdict.why` says so in the words ``explain`` shows.

Pure: the figures come in as :class:`OrphanRunFigures`, read from the runs' recorded benefit
(core/runs/run_figures.Benefit's ``orphan_bytes``, :func:`recorded_cleanups`); the clock is the caller's ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Protocol

from floe_dagster.core.basics.durations import format_iso_duration, parse_iso_duration
from floe_dagster.core.basics.localtime import as_utc, naive_as_utc
from floe_dagster.core.basics.sizes import FORMS, format_gib, parse_size
from floe_dagster.core.basics.validation import Location, check_mapping, check_unknown, describe, get_str

ADAPTIVE_FIELDS = ("targetBytes", "min", "max")
DEFAULT_MIN = "P1D"
DEFAULT_MAX = "P90D"
# An orphan cleanup lists the whole table location: more often than hourly it costs more than it finds
# (and Iceberg keeps every file younger than the retention period, at least a day, anyway).
SHORTEST_MIN = timedelta(hours=1)
MAX_CLEANUPS = 10  # the periods the rate is measured over: the newest ones, as a table's writers change


@dataclass(frozen=True)
class AdaptiveCadence:
    """``orphanCleanup.adaptive``: the orphan bytes one cleanup should find (``targetBytes``), and the
    shortest and longest time between cleanups (ISO-8601, upper-cased; defaults P1D and P90D)."""

    target_bytes: int
    min: str = DEFAULT_MIN
    max: str = DEFAULT_MAX

    @property
    def shortest(self) -> timedelta:
        return parse_iso_duration(self.min)

    @property
    def longest(self) -> timedelta:
        return parse_iso_duration(self.max)

    def to_json(self) -> dict[str, object]:
        return {"targetBytes": self.target_bytes, "min": self.min, "max": self.max}


def parse_adaptive(at: Location, raw: Mapping[str, object], key: str) -> AdaptiveCadence | None:
    """``adaptive: {targetBytes: 1GiB, min: P1D, max: P90D}``; every problem reported at ``at``."""
    value = raw.get(key)
    if value is None:
        return None
    here = at.child(key)
    mapping = check_mapping(here, value, "a mapping {targetBytes, min, max}")
    if mapping is None:
        return None
    check_unknown(here, mapping, ADAPTIVE_FIELDS)
    target = _target_bytes(here, mapping)
    shortest = _duration(here, mapping, "min", DEFAULT_MIN)
    longest = _duration(here, mapping, "max", DEFAULT_MAX)
    if shortest is not None and parse_iso_duration(shortest) < SHORTEST_MIN:
        here.child("min").error(f"must be at least {format_iso_duration(SHORTEST_MIN)}, got {shortest!r}: a cleanup "
                                "lists the whole table location, and files younger than a day are kept anyway")
        shortest = None
    if shortest is not None and longest is not None and parse_iso_duration(shortest) > parse_iso_duration(longest):
        here.child("min").error(f"{shortest} is longer than max {longest}: min must be at most max")
        return None
    if target is None or shortest is None or longest is None:
        return None
    return AdaptiveCadence(target, shortest, longest)


def _target_bytes(at: Location, mapping: Mapping[str, object]) -> int | None:
    if mapping.get("targetBytes") is None:
        at.child("targetBytes").error(f"is required: the orphan bytes one cleanup should find ({FORMS})")
        return None
    try:
        target = parse_size(mapping["targetBytes"])
    except ValueError as exc:
        at.child("targetBytes").error(str(exc))
        return None
    if target <= 0:
        at.child("targetBytes").error(f"must be more than 0 bytes, got {describe(mapping['targetBytes'])}")
        return None
    return target


def _duration(at: Location, mapping: Mapping[str, object], key: str, default: str) -> str | None:
    text = get_str(at, mapping, key, None)
    if text is None:
        return default if mapping.get(key) is None else None
    try:
        length = parse_iso_duration(text)
    except ValueError as exc:
        at.child(key).error(str(exc))
        return None
    if length <= timedelta(0):
        at.child(key).error(f"must be longer than zero, got {text!r}")
        return None
    return text.strip().upper()


# -- the verdict ---------------------------------------------------------------------------------------


class CleanupBenefit(Protocol):
    """What a cleanup's recorded benefit says of the orphans it found (core/runs/run_figures.Benefit, a floor
    above)."""

    @property
    def orphan_bytes(self) -> int | None: ...
    @property
    def files_deleted(self) -> int: ...
    @property
    def orphan_bytes_estimated(self) -> bool: ...


class RecordedCleanup(Protocol):
    """A table's recorded run as the cadence reads it (core/value/run_history.RecordedRun, a floor above)."""

    @property
    def succeeded(self) -> bool: ...
    @property
    def finished_at(self) -> datetime: ...
    @property
    def benefit(self) -> CleanupBenefit | None: ...


@dataclass(frozen=True)
class OrphanRunFigures:
    """What one orphan cleanup of a table found (deleted, quarantined, or listed in a dry run)."""

    finished_at: datetime
    orphan_bytes: int
    orphan_files: int = 0
    succeeded: bool = True
    estimated: bool = False  # the bytes are the files × the table's mean file size (no quarantine measured them)


def recorded_cleanups(runs: Iterable[RecordedCleanup]) -> list[OrphanRunFigures]:
    """The cleanups among a table's recorded runs (core/value/run_history.RecordedRun: ``succeeded``,
    ``finished_at``, ``benefit``) that measured the orphans they found (core/runs/run_figures.Benefit's
    ``orphan_bytes``)."""
    found = []
    for run in runs:
        benefit = run.benefit
        if run.succeeded and benefit is not None and benefit.orphan_bytes is not None:
            found.append(OrphanRunFigures(run.finished_at, benefit.orphan_bytes, benefit.files_deleted, True,
                                          benefit.orphan_bytes_estimated))
    return found


@dataclass(frozen=True)
class CadenceVerdict:
    """When the next orphan cleanup is due under ``adaptive``, and why."""

    next_run_at: datetime
    interval: timedelta | None  # None: no cleanup yet, due at once
    rate_bytes_per_day: float | None  # None: not measurable yet
    cleanups: int  # the periods the rate was measured over
    clamped: str | None  # "min" or "max" when the interval was clamped
    why: str

    def due(self, now: datetime) -> bool:
        return as_utc(now) >= self.next_run_at

    def to_json(self) -> dict[str, object]:
        return {
            "nextRunAt": self.next_run_at.isoformat(),
            "interval": format_iso_duration(self.interval) if self.interval is not None else None,
            "orphanBytesPerDay": round(self.rate_bytes_per_day) if self.rate_bytes_per_day is not None else None,
            "cleanups": self.cleanups,
            "clamped": self.clamped,
            "why": self.why,
        }


def next_orphan_run(cadence: AdaptiveCadence, runs: Iterable[OrphanRunFigures], now: datetime,
                    observed_since: datetime | None = None) -> CadenceVerdict:
    """The next cleanup under ``cadence`` from the table's past cleanups (any order)."""
    done = sorted((r for r in runs if r.succeeded), key=lambda r: naive_as_utc(r.finished_at))
    if not done:
        return CadenceVerdict(as_utc(now), None, None, 0, None,
                              "due now: no orphan cleanup recorded yet (its findings start measuring the orphan rate)")
    last = naive_as_utc(done[-1].finished_at)
    periods = _periods(done, observed_since)
    if not periods:
        next_at = last + cadence.shortest
        return CadenceVerdict(next_at, cadence.shortest, None, 0, "min", (
            f"expected next run at {_moment(next_at)}: one cleanup recorded ({format_gib(done[-1].orphan_bytes)} "
            f"found) and no earlier one to measure the orphan rate from → the minimum {cadence.min}"))
    found = sum(b for _, b in periods)
    days = sum(d for d, _ in periods)
    rate = found / days
    wanted = timedelta(days=cadence.target_bytes / rate) if rate > 0 else None
    interval, clamped = _clamped(wanted, cadence)
    next_at = last + interval
    observed = f"{format_gib(rate)}/day of orphans observed over {len(periods)} cleanup{'s' * (len(periods) != 1)}"
    if any(run.estimated for run in done[-len(periods):]):
        observed += " (bytes estimated: files found × the table's mean file size)"
    if wanted is None:
        told = f"no orphans found → the maximum {cadence.max}"
    else:
        told = f"{format_gib(cadence.target_bytes)} target → every {_every(wanted)}"
        if clamped:
            bound = "raised to the minimum" if clamped == "min" else "lowered to the maximum"
            told += f", {bound} {getattr(cadence, clamped)}"
    return CadenceVerdict(next_at, interval, rate, len(periods), clamped,
                          f"expected next run at {_moment(next_at)}: {observed}, {told}")


def _periods(done: list[OrphanRunFigures], observed_since: datetime | None) -> list[tuple[float, int]]:
    """(days, orphan bytes) of each cleanup whose period's start is known, the newest MAX_CLEANUPS."""
    periods = []
    start = naive_as_utc(observed_since) if observed_since is not None else None
    for run in done:
        end = naive_as_utc(run.finished_at)
        if start is not None and end > start:
            periods.append(((end - start).total_seconds() / 86400, max(0, run.orphan_bytes)))
        start = end
    return periods[-MAX_CLEANUPS:]


def _clamped(wanted: timedelta | None, cadence: AdaptiveCadence) -> tuple[timedelta, str | None]:
    if wanted is None or wanted > cadence.longest:
        return cadence.longest, "max"
    if wanted < cadence.shortest:
        return cadence.shortest, "min"
    return timedelta(seconds=round(wanted.total_seconds())), None


def _every(interval: timedelta) -> str:
    days = interval.total_seconds() / 86400
    if days >= 1:
        return f"{days:.3g} day{'s' * (f'{days:.3g}' != '1')}"
    hours = days * 24
    return f"{hours:.3g} hour{'s' * (f'{hours:.3g}' != '1')}"


def _moment(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


__all__ = [
    "AdaptiveCadence", "OrphanRunFigures", "recorded_cleanups", "CadenceVerdict", "parse_adaptive", "next_orphan_run",
    "ADAPTIVE_FIELDS", "DEFAULT_MIN", "DEFAULT_MAX", "MAX_CLEANUPS",
]
