"""The value report (``floe-dagster report``): what maintenance cost and what it bought over a window,
grouped by namespace, table or operation, and per day for the HTML's charts.

Pure: it sums the outcome rows the coordination database gives back (coordination/value_rows.py, one
query), with the clock passed in. Compute is the executor CPU the tables' own Spark jobs used (the
figure the history read ranks by, :attr:`core.runs.run_figures.RunFigures.compute_s`); a run Spark did not
measure (a metadata-only commit, Spark Connect) adds none. Benefit per compute hour is files removed per
executor CPU hour, as OpenHouse ranks candidates, and None when the window used no measured compute.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from floe_dagster.core.basics.durations import parse_iso_duration
from floe_dagster.core.runs.history import CONFLICT
from floe_dagster.core.operations import Operation
from floe_dagster.core.facts.table_facts import format_bytes

GROUPINGS = ("namespace", "table", "operation")
DEFAULT_SINCE = "P7D"
DEFAULT_GROUPING = "table"


@dataclass(frozen=True)
class OutcomeRow:
    """One table's result of one run, as ``floe_outcomes`` keeps it (figures None: not measured)."""

    table_name: str
    operation: str
    finished_at: datetime
    succeeded: bool
    failure_kind: str | None = None
    bytes_rewritten: int = 0
    executor_cpu_s: float | None = None
    wall_s: float | None = None
    files_removed: int | None = None
    bytes_reclaimed: int | None = None
    files_deleted: int | None = None
    snapshots_expired: int | None = None
    orphan_bytes_reclaimed: int | None = None


@dataclass
class Totals:
    """The sums of a group of outcome rows."""

    runs: int = 0
    succeeded: int = 0
    failures: int = 0
    conflicts: int = 0
    compute_s: float = 0.0
    wall_s: float = 0.0
    bytes_rewritten: int = 0
    files_removed: int = 0
    bytes_reclaimed: int = 0
    snapshots_expired: int = 0
    files_deleted: int = 0
    orphan_files_reclaimed: int = 0
    orphan_bytes_reclaimed: int = 0

    def add(self, row: OutcomeRow) -> None:
        self.runs += 1
        if row.succeeded:
            self.succeeded += 1
        elif row.failure_kind == CONFLICT:  # a lost commit race, as /metrics counts it: no failure
            self.conflicts += 1
        else:
            self.failures += 1
        self.compute_s += row.executor_cpu_s or 0.0
        self.wall_s += row.wall_s or 0.0
        self.bytes_rewritten += row.bytes_rewritten or 0
        self.files_removed += row.files_removed or 0
        self.bytes_reclaimed += row.bytes_reclaimed or 0
        self.snapshots_expired += row.snapshots_expired or 0
        self.files_deleted += row.files_deleted or 0
        if _reclaims_orphans(row.operation):
            self.orphan_files_reclaimed += row.files_deleted or 0
        self.orphan_bytes_reclaimed += row.orphan_bytes_reclaimed or 0

    @property
    def compute_hours(self) -> float:
        return self.compute_s / 3600.0

    @property
    def files_removed_per_compute_hour(self) -> float | None:
        """None when no compute was measured: a ratio over zero is no figure, not infinity."""
        return self.files_removed / self.compute_hours if self.compute_s > 0 else None

    @property
    def bytes_reclaimed_per_compute_hour(self) -> float | None:
        return self.bytes_reclaimed / self.compute_hours if self.compute_s > 0 else None

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "compute_hours": self.compute_hours,
                "files_removed_per_compute_hour": self.files_removed_per_compute_hour,
                "bytes_reclaimed_per_compute_hour": self.bytes_reclaimed_per_compute_hour}


def _reclaims_orphans(operation: str) -> bool:
    try:
        return Operation(operation).spec.reclaims_orphans()
    except ValueError:  # a kind this version does not know (a row written by a newer one)
        return False


def parse_since(text: str, now: datetime) -> datetime:
    """``--since P7D`` → the window's start. Raises ValueError naming the option."""
    try:
        duration = parse_iso_duration(text)
    except ValueError as exc:
        raise ValueError(f"--since: {exc}") from None
    if duration <= timedelta(0):
        raise ValueError(f"--since: {text!r} is empty: give a duration longer than zero, such as P7D")
    return now - duration


def check_grouping(by: str) -> str:
    if by not in GROUPINGS:
        raise ValueError(f"--by: {by!r} is not one of {', '.join(GROUPINGS)}")
    return by


def group_key(row: OutcomeRow, by: str) -> str:
    if by == "operation":
        return row.operation
    if by == "namespace":  # catalog.namespace[.nested]: everything before the table's own name
        return row.table_name.rpartition(".")[0] or row.table_name
    return row.table_name


@dataclass
class ValueReport:
    since: datetime
    until: datetime
    by: str
    groups: dict[str, Totals] = field(default_factory=dict)
    days: dict[str, Totals] = field(default_factory=dict)
    total: Totals = field(default_factory=Totals)

    def to_json(self) -> dict[str, object]:
        return {"since": self.since.isoformat(), "until": self.until.isoformat(), "by": self.by,
                "total": self.total.to_json(),
                "groups": [{self.by: key, **totals.to_json()} for key, totals in self.groups.items()],
                "days": [{"day": day, **totals.to_json()} for day, totals in self.days.items()]}


def value_report(rows: Iterable[OutcomeRow], by: str, since: datetime, now: datetime) -> ValueReport:
    """The rows finished in [since, now], summed per group (busiest compute first, then by name), per UTC day
    (every day of the window, so a chart shows the quiet ones) and in total."""
    report = ValueReport(since, now, check_grouping(by))
    groups: dict[str, Totals] = {}
    days = {day: Totals() for day in _days(since, now)}
    for row in rows:
        if not since <= row.finished_at <= now:
            continue
        groups.setdefault(group_key(row, by), Totals()).add(row)
        days.setdefault(_day(row.finished_at), Totals()).add(row)
        report.total.add(row)
    report.groups = dict(sorted(groups.items(), key=lambda item: (-item[1].compute_s, item[0])))
    report.days = dict(sorted(days.items()))
    return report


def _day(moment: datetime) -> str:
    return moment.date().isoformat()


def _days(since: datetime, until: datetime) -> list[str]:
    found, day = [], since.date()
    while day <= until.date():
        found.append(day.isoformat())
        day += timedelta(days=1)
    return found


COLUMNS = (  # the text table's columns: (heading, the figure's key in Totals.to_json, format)
    ("runs", "runs", "{:d}"),
    ("failed", "failures", "{:d}"),
    ("conflicts", "conflicts", "{:d}"),
    ("cpu h", "compute_hours", "{:.4f}"),
    ("rewritten", "bytes_rewritten", "bytes"),
    ("files removed", "files_removed", "{:d}"),
    ("snapshots expired", "snapshots_expired", "{:d}"),
    ("orphans", "orphan_files_reclaimed", "{:d}"),
    ("orphan bytes", "orphan_bytes_reclaimed", "bytes"),
    ("files/cpu h", "files_removed_per_compute_hour", "{:.1f}"),
)


def cell(value: Any, form: str) -> str:
    if value is None:
        return "-"
    return format_bytes(value) if form == "bytes" else form.format(value)


def window_text(report: dict[str, Any]) -> str:
    """``from 2026-11-19 14:15 to 2026-11-26 14:15 UTC``: the window as people read it."""
    since, until = (datetime.fromisoformat(report[key]).strftime("%Y-%m-%d %H:%M") for key in ("since", "until"))
    return f"from {since} to {until} UTC"


def format_value_report_text(report: dict[str, Any]) -> str:
    """The report's JSON (:meth:`ValueReport.to_json`) as a table, one line per group and a total."""
    by = report["by"]
    rows = [[group[by], *(cell(group[key], form) for _, key, form in COLUMNS)] for group in report["groups"]]
    rows.append(["total", *(cell(report["total"][key], form) for _, key, form in COLUMNS)])
    header = [by, *(heading for heading, _, _ in COLUMNS)]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = [f"maintenance {window_text(report)}, by {by}"]
    for line in [header, *rows]:
        lines.append("  ".join(text.ljust(width) if i == 0 else text.rjust(width)
                               for i, (text, width) in enumerate(zip(line, widths))))
    if not report["groups"]:
        lines.append("(no run finished in the window)")
    return "\n".join(lines)


__all__ = ["OutcomeRow", "Totals", "ValueReport", "value_report", "parse_since", "check_grouping", "group_key",
           "format_value_report_text", "window_text", "GROUPINGS", "DEFAULT_SINCE", "DEFAULT_GROUPING"]
