"""A snapshot summary's totals (Iceberg metadata, no data read), under PyIceberg's own key names.

Writers may leave a total out, and a summary holds text: :func:`summary_total` says which happened
(``missing``) and never raises, so each caller decides what an absent total means.
"""

from __future__ import annotations

from typing import Any, Mapping

from pyiceberg.table.snapshots import (
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_EQUALITY_DELETES,
    TOTAL_FILE_SIZE,
    TOTAL_POSITION_DELETES,
    TOTAL_RECORDS,
)


def summary_total(summary: Mapping[str, Any] | Any | None, key: str, missing: int | None = None) -> int | None:
    """The total ``key`` of a summary (a mapping, or PyIceberg's ``Summary``): ``missing`` when the
    summary or the key is absent, None when its value is no integer."""
    value = summary.get(key) if summary is not None else None
    if value is None:
        return missing
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def live_rows(summary: Mapping[str, Any] | None) -> int | None:
    """Records minus position and equality deletes (a delete total left out counts 0); None without
    ``total-records`` or with a total that is no integer."""
    totals = (summary_total(summary, TOTAL_RECORDS), summary_total(summary, TOTAL_POSITION_DELETES, 0),
              summary_total(summary, TOTAL_EQUALITY_DELETES, 0))
    if any(total is None for total in totals):
        return None
    records, position_deletes, equality_deletes = totals
    return records - position_deletes - equality_deletes


__all__ = ["summary_total", "live_rows", "TOTAL_DATA_FILES", "TOTAL_DELETE_FILES", "TOTAL_EQUALITY_DELETES",
           "TOTAL_FILE_SIZE", "TOTAL_POSITION_DELETES", "TOTAL_RECORDS"]
