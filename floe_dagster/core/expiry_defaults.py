"""The arguments of a snapshot expiry where its policy leaves them unset: the table's own
``history.expire.min-snapshots-to-keep`` and ``history.expire.max-snapshot-age-ms`` (what Iceberg's own
expiry reads), else floe-dagster's 5 snapshots and ``P7D``.

Table properties are the table owner's, not the policy author's: untrusted. So they are bounded: a
property never makes an expiry keep fewer than one snapshot nor snapshots younger than
:data:`MIN_SNAPSHOT_AGE` (``history.expire.max-snapshot-age-ms=0`` expires at one hour; only the policy's
own ``maxSnapshotAge`` may go below it), a value that is not a whole number (or is below one snapshot) is
ignored, and an age beyond floe-dagster's longest duration is cut to it. Each such case says why
(:attr:`ExpiryArguments.adjusted`). ``history.expire.max-ref-age-ms`` is not an argument: Iceberg's
expiry reads it itself (docs/security.md). Pure: the properties arrive from the run's read of the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

from floe_dagster.core.durations import MAX_DURATION, parse_iso_duration

MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOT_AGE = timedelta(hours=1)  # below it only a policy's maxSnapshotAge may expire
DEFAULT_RETAIN_LAST = 5
DEFAULT_MAX_SNAPSHOT_AGE = "P7D"
_WHOLE = re.compile(r"\s*-?\d{1,18}\s*")


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


def _whole(properties: Mapping[str, str], key: str) -> tuple[int | None, str]:
    """The property as a whole number, or None and why it is ignored ('' when unset)."""
    value = properties.get(key)
    if value is None:
        return None, ""
    if not _WHOLE.fullmatch(str(value)):
        return None, f"table property {key}={value!r} is not a whole number: ignored"
    return int(value), ""


def expiry_arguments(retain_last: int | None, max_snapshot_age: str | None,
                     properties: Mapping[str, str]) -> ExpiryArguments:
    """The policy's values where set, else the table's bounded properties, else floe-dagster's defaults."""
    adjusted: list[str] = []
    keep, keep_from = retain_last, "policy"
    if keep is None:
        found, why = _whole(properties, MIN_SNAPSHOTS_TO_KEEP)
        if found is not None and found < 1:
            why = f"table property {MIN_SNAPSHOTS_TO_KEEP}={found} keeps no snapshot: ignored"
            found = None
        adjusted += [why] if why else []
        keep, keep_from = (found, MIN_SNAPSHOTS_TO_KEEP) if found is not None else (DEFAULT_RETAIN_LAST, "default")
    if max_snapshot_age is not None:
        return ExpiryArguments(keep, parse_iso_duration(max_snapshot_age), keep_from, "policy", tuple(adjusted))
    millis, why = _whole(properties, MAX_SNAPSHOT_AGE_MS)
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


__all__ = ["ExpiryArguments", "expiry_arguments", "MIN_SNAPSHOT_AGE", "MIN_SNAPSHOTS_TO_KEEP", "MAX_SNAPSHOT_AGE_MS",
           "DEFAULT_RETAIN_LAST", "DEFAULT_MAX_SNAPSHOT_AGE"]
