"""The arguments of a snapshot expiry where its policy leaves them unset: the table's own
``history.expire.min-snapshots-to-keep`` and ``history.expire.max-snapshot-age-ms`` (what Iceberg's own
expiry reads), else floe-dagster's 5 snapshots and ``P7D``.

Table properties are the table owner's, not the policy author's: untrusted. So they are bounded: a
property never makes an expiry keep fewer than one snapshot nor snapshots younger than
:data:`MIN_SNAPSHOT_AGE` (``history.expire.max-snapshot-age-ms=0`` expires at one hour; only the policy's
own ``maxSnapshotAge`` may go below it), a value below one snapshot is ignored, one Iceberg cannot read
(not a Java int/long: it then fails its own expiry, whatever floe passes) is said to, and an age beyond
floe-dagster's longest duration is cut to it. Each such case says why (:attr:`ExpiryArguments.adjusted`).

``history.expire.max-ref-age-ms`` is not an argument: Iceberg's expiry reads it itself (``RemoveSnapshots``,
for every branch and tag without a ``max-ref-age-ms`` of its own) and removes a ref whose head is older, and
with it what the ref alone keeps (a branch's unpublished data). No argument overrides it, so
:func:`ref_age_default` bounds it another way: below :data:`MIN_REF_AGE` (floe's default snapshot age, 7
days: a property never makes floe forget a named ref sooner than floe keeps unnamed history by default),
each such ref without a ``refRetention`` rule gets :data:`MIN_REF_AGE` as its own age before the expiry
(core/facts/ref_retention_changes.py sets it, records it and takes it back when the property no longer needs
it). Only a policy's ``refRetention`` may go below. A value Iceberg cannot read as a Java long makes its expiry
fail (nothing removed), which explain says. Pure: the properties arrive from the run's read of the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from floe_dagster.core.basics.durations import MAX_DURATION, parse_iso_duration

MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"
MIN_SNAPSHOT_AGE = timedelta(hours=1)  # below it only a policy's maxSnapshotAge may expire
DEFAULT_RETAIN_LAST = 5
DEFAULT_MAX_SNAPSHOT_AGE = "P7D"
MIN_REF_AGE = parse_iso_duration(DEFAULT_MAX_SNAPSHOT_AGE)  # below it only a policy's refRetention removes refs
MIN_REF_AGE_MS = int(MIN_REF_AGE.total_seconds() * 1000)
FLOE_MINIMUM = "floe minimum"  # a ref age's source when the table's property is below MIN_REF_AGE
_JAVA_LONG = re.compile(r"[+-]?\d{1,19}")  # what Long.parseLong reads (no spaces), within its range below


@dataclass(frozen=True)
class ExpiryArguments:
    retain_last: int
    max_age: timedelta
    retain_last_from: str  # "policy", the property's name, or "default"
    max_age_from: str
    adjusted: tuple[str, ...] = ()  # each table property ignored or bounded, and why

    def to_json(self) -> dict[str, object]:
        return {"retainLast": self.retain_last, "retainLastFrom": self.retain_last_from,
                "maxSnapshotAgeSeconds": int(self.max_age.total_seconds()), "maxSnapshotAgeFrom": self.max_age_from,
                "adjusted": list(self.adjusted)}


def _unreadable(key: str, value: Any, kind: str) -> str:
    return (f"table property {key}={value!r} is not a whole number Iceberg can read (a Java {kind}): its "
            "expire_snapshots fails on this table, removing nothing, until the owner corrects it")


def _java(value: Any, bits: int) -> int | None:
    """The value as Java's Integer/Long.parseLong reads it (no spaces), None when it cannot."""
    text = str(value)
    if not _JAVA_LONG.fullmatch(text) or not -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1):
        return None
    return int(text)


def _whole(properties: Mapping[str, str], key: str, bits: int) -> tuple[int | None, str]:
    """The property as a whole number, or None and why it is not used ('' when unset). Iceberg's expiry reads
    each history.expire.* property when it starts, whatever floe passes: one it cannot read fails it."""
    value = properties.get(key)
    if value is None:
        return None, ""
    read = _java(value, bits)
    return (read, "") if read is not None else (None, _unreadable(key, value, "int" if bits == 32 else "long"))


def expiry_arguments(retain_last: int | None, max_snapshot_age: str | None,
                     properties: Mapping[str, str]) -> ExpiryArguments:
    """The policy's values where set, else the table's bounded properties, else floe-dagster's defaults."""
    adjusted: list[str] = []
    keep, keep_from = retain_last, "policy"
    if keep is None:
        found, why = _whole(properties, MIN_SNAPSHOTS_TO_KEEP, 32)
        if found is not None and found < 1:
            why = f"table property {MIN_SNAPSHOTS_TO_KEEP}={found} keeps no snapshot: ignored"
            found = None
        adjusted += [why] if why else []
        keep, keep_from = (found, MIN_SNAPSHOTS_TO_KEEP) if found is not None else (DEFAULT_RETAIN_LAST, "default")
    if max_snapshot_age is not None:
        return ExpiryArguments(keep, parse_iso_duration(max_snapshot_age), keep_from, "policy", tuple(adjusted))
    millis, why = _whole(properties, MAX_SNAPSHOT_AGE_MS, 64)
    adjusted += [why] if why else []
    if millis is None:
        age, age_from = parse_iso_duration(DEFAULT_MAX_SNAPSHOT_AGE), "default"
    else:
        age, age_from = timedelta(milliseconds=max(millis, 0)) if millis < MAX_DURATION.days * 86_400_000 \
            else MAX_DURATION, MAX_SNAPSHOT_AGE_MS
        if age < MIN_SNAPSHOT_AGE:
            adjusted.append(f"table property {MAX_SNAPSHOT_AGE_MS}={millis} is under one hour: expiry keeps "
                            "snapshots of the last hour (only the policy's maxSnapshotAge may go below)")
            age = MIN_SNAPSHOT_AGE
    return ExpiryArguments(keep, age, keep_from, age_from, tuple(adjusted))


@dataclass(frozen=True)
class RefAgeDefault:
    """The age at which an expiry removes a branch or tag that has no ``max-ref-age-ms`` of its own and no
    ``refRetention`` rule: ``max_ref_age_ms`` None is never (Iceberg's default). ``guard_ms``: the age floe
    sets as each such ref's own before the expiry (the table's property is below :data:`MIN_REF_AGE`)."""

    max_ref_age_ms: int | None
    source: str  # MAX_REF_AGE_MS, FLOE_MINIMUM or "default"
    guard_ms: int | None = None
    adjusted: str = ""  # why the property is not what applies ('' when it is, or is unset)


def ref_age_default(properties: Mapping[str, str]) -> RefAgeDefault:
    """The table's ``history.expire.max-ref-age-ms`` as a floe expiry lets it act (module docstring)."""
    value = properties.get(MAX_REF_AGE_MS)
    if value is None:
        return RefAgeDefault(None, "default")
    millis = _java(value, 64)
    if millis is None:
        return RefAgeDefault(None, "default", None, _unreadable(MAX_REF_AGE_MS, value, "long"))
    if millis < MIN_REF_AGE_MS:
        return RefAgeDefault(MIN_REF_AGE_MS, FLOE_MINIMUM, MIN_REF_AGE_MS, (
            f"table property {MAX_REF_AGE_MS}={millis} is under {MIN_REF_AGE.days} days: each branch and tag "
            f"without an age of its own or a refRetention rule gets {MIN_REF_AGE.days} days as its own "
            "max-ref-age-ms before the expiry (only the policy's refRetention may go below)"))
    return RefAgeDefault(millis, MAX_REF_AGE_MS)


__all__ = ["ExpiryArguments", "expiry_arguments", "RefAgeDefault", "ref_age_default", "MAX_REF_AGE_MS",
           "MIN_REF_AGE", "MIN_REF_AGE_MS", "FLOE_MINIMUM", "MIN_SNAPSHOT_AGE", "MIN_SNAPSHOTS_TO_KEEP",
           "MAX_SNAPSHOT_AGE_MS", "DEFAULT_RETAIN_LAST", "DEFAULT_MAX_SNAPSHOT_AGE"]
