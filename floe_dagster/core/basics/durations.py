"""ISO-8601 durations (``P7D``, ``PT6H``, ``PT30M``, ``P1DT12H``, ``PT0S``) as policies write them.

Days and time parts only: years, months and weeks are refused because their length is ambiguous
(the Spark engine reads ``maxSnapshotAge`` with the same rule, so what validates here also runs).
"""

from __future__ import annotations

import re
from datetime import timedelta

_ISO_DURATION = re.compile(
    r"^P(?!$)(?:(?P<days>\d+(?:\.\d+)?)D)?(?:T(?=\d)(?:(?P<hours>\d+(?:\.\d+)?)H)?"
    r"(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)

# Longer durations are surely mistakes, and dates computed with them would overflow.
MAX_DURATION = timedelta(days=36_500)


def parse_iso_duration(text: str) -> timedelta:
    """``P7D`` → 7 days. Raises ValueError with the accepted forms."""
    match = _ISO_DURATION.match(text.strip().upper()) if isinstance(text, str) else None
    if not match:
        raise ValueError(
            f"{text!r} is not an ISO-8601 duration in days and time, such as P7D, PT6H, PT30M or PT0S"
        )
    try:
        duration = timedelta(**{k: float(v) for k, v in match.groupdict().items() if v})
    except OverflowError:
        duration = None
    if duration is None or duration > MAX_DURATION:
        raise ValueError(f"{text!r} is longer than {MAX_DURATION.days} days")
    return duration


def format_iso_duration(duration: timedelta) -> str:
    """The shortest ISO-8601 text for a duration: 1 day → ``P1D``, 90 minutes → ``PT1H30M``."""
    total = int(duration.total_seconds())
    if total == 0:
        return "PT0S"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    text = "P" + (f"{days}D" if days else "")
    time_part = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "") + (f"{seconds}S" if seconds else "")
    return text + ("T" + time_part if time_part else "")


def format_wait(duration: timedelta) -> str:
    """A wait as people read it, the two largest units: ``4m 10s``, ``5h 50m``, ``2d 3h``, ``12s``
    (whole seconds; a negative wait reads ``0s``)."""
    total = max(0, int(duration.total_seconds()))
    parts = []
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, seconds)
        if count or parts:
            parts.append(f"{count}{unit}")
    parts = [p for p in parts[:2] if not p.startswith("0")] or ["0s"]
    return " ".join(parts)
