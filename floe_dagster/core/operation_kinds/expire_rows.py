"""EXPIRE_ROWS: row-level retention (Databricks' Auto-TTL, OpenHouse's retention), the policy's
``rowRetention: {column, maxAge, granularity, timezone, allowShort}``. A run deletes the rows whose
``column`` is older than the cut-off: the run's time minus ``maxAge``, truncated down to the start of its
``granularity`` (HOUR, DAY, MONTH or YEAR; DAY by default). Truncated so, the cut-off falls on a partition
boundary of a table partitioned by the matching transform of the column (``hours``, ``days``, ``months``,
``years``), and Iceberg drops whole files in a metadata-only delete; otherwise the delete is row-level, in
the table's own ``write.delete.mode``. Not a procedure: a Spark SQL ``DELETE``
(spark/operation_steps/expire_rows.py).

- **The column** is a top-level ``date``, ``timestamp`` or ``timestamptz`` column of the table, named
  exactly as the schema writes it: ``a.b`` is the top-level column of that name, never the field ``b`` of a
  struct ``a`` (nested fields are refused by a run, before any engine call, with a message saying so). The
  statement quotes it as one identifier, whatever it holds (dots, back quotes, spaces).
- **Zone-less columns** (``timestamp``, Spark's ``timestamp_ntz``, and ``date``) hold wall-clock times:
  their cut-off is the wall-clock time in the policy's ``timezone`` (an IANA name, default UTC), truncated
  on that clock (Iceberg's transforms of a zone-less column work on its wall-clock value, so the boundary
  still matches the partitions). A ``timestamptz`` column's cut-off is the instant, truncated in UTC (as
  Iceberg's transforms are). A row whose column is null is never deleted.
- **A floor**: ``maxAge`` below one hour is refused unless ``allowShort: true`` (``PT1M`` would delete
  every row but the last minute's).

A run changes the row count by design, so the row check does not apply; what it deleted is read from the
snapshot summaries it committed (:func:`deleted_numbers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Mapping, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from floe_dagster.core.basics.durations import parse_iso_duration
from floe_dagster.core.operation_config import OperationConfig, boolean, one_of, option, text
from floe_dagster.core.operation_kinds.spec import ExplainView, OperationSpec
from floe_dagster.core.basics.validation import Location, get_str

KIND = "EXPIRE_ROWS"
GRANULARITIES = ("HOUR", "DAY", "MONTH", "YEAR")
DEFAULT_GRANULARITY = "DAY"
COLUMN_TYPES = ("date", "timestamp", "timestamptz")  # Iceberg's type names, as PyIceberg prints them
ZONELESS_TYPES = ("date", "timestamp")  # wall-clock values: their cut-off is read in the policy's timezone
DEFAULT_TIMEZONE = "UTC"
# Below this a maxAge needs allowShort: true (a typo such as PT1M for P1M would delete nearly every row).
MAX_AGE_FLOOR = timedelta(hours=1)
REQUIRED = ("is required: rowRetention deletes the rows whose column is older than maxAge "
            "(e.g. {column: ts, maxAge: P90D})")


def _given(at: Location, raw: Mapping[str, object], key: str) -> bool:
    """Whether the policy gives ``key`` (both fields are required: there is no default column or age)."""
    if raw.get(key) is None:
        at.child(key).error(REQUIRED)
        return False
    return True


def _column(at: Location, raw: Mapping[str, object], key: str) -> str | None:
    """A top-level column's name as the table's schema writes it (any characters a name may hold: the
    statement quotes it), but no control character, which no column name holds."""
    name = text(at, raw, key) if _given(at, raw, key) else None
    if name is not None and any(ord(c) < 32 or ord(c) == 127 for c in name):
        at.child(key).error(f"{name!r} holds a control character, which no column name holds")
        return None
    return name


def _max_age(at: Location, raw: Mapping[str, object], key: str) -> str | None:
    """An ISO-8601 duration longer than zero (``P30D``, ``PT12H``), upper-cased."""
    age = get_str(at, raw, key, None) if _given(at, raw, key) else None
    if age is None:
        return None
    try:
        duration = parse_iso_duration(age)
    except ValueError as exc:
        at.child(key).error(str(exc))
        return None
    if duration <= timedelta(0):
        at.child(key).error(f"{age!r}: must be longer than zero (a row's age is counted back from the run), "
                            "such as P30D")
        return None
    if duration < MAX_AGE_FLOOR and raw.get("allowShort") is not True:
        at.child(key).error(f"{age!r} is shorter than one hour: a run would delete every row older than that; "
                            "set allowShort: true beside it if that is meant")
        return None
    return age.strip().upper()


def _timezone(at: Location, raw: Mapping[str, object], key: str) -> str | None:
    """An IANA time zone name (``Europe/Berlin``, ``UTC``), as the zone database spells it."""
    name = get_str(at, raw, key, None)
    if name is None:
        return None
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        at.child(key).error(f"{name!r} is not a time zone name (an IANA name such as UTC or Europe/Berlin)")
        return None
    return name.strip()


@dataclass(frozen=True)
class ExpireRowsConfig(OperationConfig):
    column: str | None = option(_column)
    max_age: str | None = option(_max_age)  # an ISO-8601 duration, upper-cased (``P30D``)
    granularity: str | None = option(one_of(GRANULARITIES))  # None: DAY
    timezone: str | None = option(_timezone)  # zone-less columns' wall clock; None: UTC
    allow_short: bool | None = option(boolean)  # read by _max_age: a maxAge under MAX_AGE_FLOOR is meant

    def cutoff(self, now: datetime) -> datetime:
        """A ``timestamptz`` column's rows older than this are deleted: ``now - maxAge``, truncated down to the
        granularity in UTC."""
        assert self.max_age is not None, "rowRetention.maxAge is required"
        return truncate(now - parse_iso_duration(self.max_age), self.granularity or DEFAULT_GRANULARITY)

    def wall_cutoff(self, now: datetime) -> datetime:
        """A zone-less column's cut-off (naive): ``now - maxAge`` as the wall clock of the policy's timezone
        shows it, truncated down on that clock."""
        assert self.max_age is not None, "rowRetention.maxAge is required"
        moment = (now - parse_iso_duration(self.max_age)).astimezone(ZoneInfo(self.timezone or DEFAULT_TIMEZONE))
        return truncate(moment, self.granularity or DEFAULT_GRANULARITY, keep_zone=True).replace(tzinfo=None)


def truncate(moment: datetime, granularity: str, keep_zone: bool = False) -> datetime:
    """``moment`` in UTC (or, ``keep_zone``, on its own zone's wall clock), down to the start of its hour, day,
    month or year: the boundary of the partition that Iceberg's ``hours``/``days``/``months``/``years``
    transform puts it in (computed in UTC for a timestamptz, on the wall clock for a zone-less value)."""
    if moment.tzinfo is None:
        raise ValueError("the cut-off's time must carry a time zone")
    start = (moment if keep_zone else moment.astimezone(timezone.utc)).replace(minute=0, second=0, microsecond=0)
    if granularity == "HOUR":
        return start
    start = start.replace(hour=0)
    if granularity == "DAY":
        return start
    start = start.replace(day=1)
    return start if granularity == "MONTH" else start.replace(month=1)


def deleted_numbers(summaries: Sequence[Mapping[str, str]]) -> dict[str, int]:
    """What the commits of a run deleted, from their snapshot summaries (Iceberg's keys; a missing one is 0).
    ``rows_deleted``: the rows no longer live; a copy-on-write delete removes whole files and adds them back
    without the rows (``deleted-records`` - ``added-records``), a merge-on-read one adds position (or
    equality) deletes, and a metadata-only one removes whole files."""
    def total(key: str) -> int:
        return sum(int(summary.get(key) or 0) for summary in summaries)

    return {
        "rows_deleted": total("deleted-records") - total("added-records") + total("added-position-deletes")
        + total("added-equality-deletes"),
        "data_files_deleted": total("deleted-data-files"),
        "data_files_added": total("added-data-files"),
        "delete_files_added": total("added-delete-files"),
        "bytes_removed": total("removed-files-size"),
        "bytes_written": total("added-files-size"),
    }


def delete_kind(numbers: Mapping[str, int]) -> str:
    """How the delete was done: ``metadata-only`` (whole files dropped, nothing written), ``copy-on-write``
    (files rewritten without the rows), ``merge-on-read`` (delete files written), or ``none``."""
    if numbers["delete_files_added"]:
        return "merge-on-read"
    if numbers["data_files_added"]:
        return "copy-on-write"
    return "metadata-only" if numbers["data_files_deleted"] else "none"


def _changed(numbers: Mapping[str, int]) -> bool:
    """A run changed something when it deleted a row or dropped a file."""
    return numbers.get("rows_deleted", 0) > 0 or numbers.get("data_files_deleted", 0) > 0


def _cutoff_shown(view: ExplainView) -> dict[str, object]:
    """``rowRetention``: the column, and the cut-off a run now would use (None: not configured)."""
    config = view.config
    if config is None or config.max_age is None:
        return {"rowRetention": None}
    zone = config.timezone or DEFAULT_TIMEZONE
    return {"rowRetention": {"column": config.column, "granularity": config.granularity or DEFAULT_GRANULARITY,
                             "deletesRowsBefore": config.cutoff(view.now).isoformat(), "timezone": zone,
                             "zonelessDeletesRowsBefore": config.wall_cutoff(view.now).isoformat(),
                             "zoneless": f"a date or timestamp (without zone) column is read as wall-clock time in "
                                         f"{zone}"}}


# Which live rows are deleted is the policy's decision alone: a table property (untrusted, and a
# duration has no bounds a policy could set) must never shorten the retention or move the column.
_POLICY_ONLY = {name: "never overridable: it decides which live rows are deleted, which only the policy may say"
                for name in ("column", "max_age", "granularity", "timezone", "allow_short")}


class ExpireRows(OperationSpec):
    name = KIND
    policy_key = "rowRetention"
    procedure = "delete_from"
    order = 58  # after the rewrites, before the statistics (so they describe the rows it left)
    config_type = ExpireRowsConfig
    no_change = "`EXPIRE_ROWS` changed nothing when no row was older than the cut-off."
    docs_row = (
        "| `EXPIRE_ROWS` | none: a Spark SQL `DELETE FROM … WHERE <column> < <cut-off>` | `rowRetention`: `column` (a "
        "top-level `date`, `timestamp` or `timestamptz` column, named as the schema writes it: `a.b` is a top-level "
        "name, never a nested field), `maxAge` (ISO-8601, e.g. `P90D`; under `PT1H` only with `allowShort: true`), "
        "`granularity` (`HOUR`, `DAY`, `MONTH`, `YEAR`; default `DAY`), `timezone` (the wall clock of a zone-less "
        "column; default `UTC`): the cut-off is now - `maxAge`, truncated down; aligned with the partitioning, "
        "whole files are dropped (metadata only), else a row-level delete in the table's `write.delete.mode` |")

    def defaults(self) -> Mapping[str, object]:
        return {"granularity": DEFAULT_GRANULARITY}

    def policy_only_fields(self) -> Mapping[str, str]:
        return _POLICY_ONLY

    def changed(self, numbers: Mapping[str, int]) -> bool:
        return _changed(numbers)

    def explain(self, view: ExplainView) -> dict[str, object]:
        return _cutoff_shown(view)


SPEC = ExpireRows()
