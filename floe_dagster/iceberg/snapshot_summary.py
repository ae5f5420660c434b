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


def exact_live_rows(summary: Mapping[str, object] | None) -> int | None:
    """The snapshot's rows when its summary alone decides them: ``total-records`` of a snapshot with
    no delete files; None otherwise. With delete files the summary cannot decide: a position delete
    (or a deletion vector) stays counted while the data file it points at is gone (a dangling delete
    after a rewrite), two deletes may remove the same row, an equality delete counts its delete
    records, not the rows it removes. Worse, a rewrite that dropped a concurrent DELETE (the row
    resurrected, the delete left dangling) keeps ``total-records - total-position-deletes`` equal:
    the difference agrees while the rows are wrong. Such snapshots are counted with Spark."""
    deletes = [summary_total(summary, key, 0) for key in (TOTAL_DELETE_FILES, TOTAL_POSITION_DELETES,
                                                          TOTAL_EQUALITY_DELETES)]
    if any(total != 0 for total in deletes):  # None (no integer) or some deletes
        return None
    return summary_total(summary, TOTAL_RECORDS)


# What one commit changed, as its summary counts it (the totals above are the table's after the commit).
_COMMIT_DELETE_KEYS = ("added-delete-files", "removed-delete-files", "added-position-deletes",
                       "removed-position-deletes", "added-equality-deletes", "removed-equality-deletes")


def commit_rows(summary: Mapping[str, object] | None) -> tuple[int, int] | None:
    """(rows the commit removed, rows it added), from its own summary (``deleted-records``,
    ``added-records``), when that alone decides them: the commit added and removed no delete file and
    the table has none after it (:func:`exact_live_rows`), so every record counted is a live row. For
    a rewrite whose parent snapshot the metadata no longer holds (Nessie keeps only the current one):
    equal numbers mean the rewrite kept the rows, and a concurrent commit under it changes neither."""
    if exact_live_rows(summary) is None:
        return None
    if any(summary_total(summary, key, 0) != 0 for key in _COMMIT_DELETE_KEYS):
        return None
    removed, added = summary_total(summary, "deleted-records"), summary_total(summary, "added-records")
    return (removed, added) if removed is not None and added is not None else None


__all__ = ["summary_total", "exact_live_rows", "commit_rows", "TOTAL_DATA_FILES", "TOTAL_DELETE_FILES",
           "TOTAL_EQUALITY_DELETES", "TOTAL_FILE_SIZE", "TOTAL_POSITION_DELETES", "TOTAL_RECORDS"]
