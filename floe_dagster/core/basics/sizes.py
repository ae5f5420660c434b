"""Sizes as people write them in a policy: ``1GiB``, ``512 MiB``, ``1.5GB``, or a whole number of bytes.

Binary units (KiB, MiB, GiB, TiB: powers of 1024) and decimal ones (KB, MB, GB, TB: powers of 1000),
as the IEC names them; the unit is read in any case (``1gib``), a space before it is allowed, and
``B`` alone means bytes. Bare letters (``1G``, ``10M``) are refused: whether they mean 1000 or
1024 is exactly the ambiguity a policy should not leave to the reader.
"""

from __future__ import annotations

import re

from floe_dagster.core.basics.validation import describe

UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]+)?\s*$")
FORMS = "a whole number of bytes or a size such as 1GiB, 512MiB or 2GB"


def parse_size(value: object) -> int:
    """The size in bytes (rounded to a whole byte); ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected {FORMS}, got {describe(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            raise ValueError(f"expected {FORMS}, got {describe(value)}")
        return int(value)
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"expected {FORMS}, got {describe(value)}")
    unit = (match.group("unit") or "b").lower()
    if unit not in UNITS:
        raise ValueError(f"{value!r}: unknown unit {match.group('unit')!r} "
                         "(use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)")
    return int(round(float(match.group("number")) * UNITS[unit]))


def format_gib(value: float) -> str:
    """Bytes as GiB with the digits a reader needs: ``1 GiB``, ``0.2 GiB``, ``0.004 GiB``; below a
    thousandth of a GiB in MiB, KiB or bytes (``2.5 KiB``)."""
    gib = value / 1024**3
    if gib == 0 or abs(gib) >= 10:
        return f"{gib:.0f} GiB"
    if abs(gib) >= 0.1:
        return f"{gib:.2g} GiB" if abs(gib) < 1 else f"{gib:.3g} GiB"
    if abs(gib) >= 0.001:
        return f"{gib:.1g} GiB"
    for unit, size in (("MiB", 1024**2), ("KiB", 1024)):  # a few orphans: GiB would read 2e-06
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


__all__ = ["parse_size", "format_gib", "UNITS", "FORMS"]
