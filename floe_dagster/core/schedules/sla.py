"""SLA contracts (a schedule's ``sla``): how old an operation's last success may get, who owns the
promise, and how loud a breach is (docs/beside-pipelines.md, "SLA contracts").

``sla: {maxAge: P1D, severity: WARN|ERROR, owner: "team-x"}`` sits inside the operation's schedule
block (``expireSnapshotsSchedule.sla``; ``expire-snapshots-schedule.sla`` with ``max-age`` in the
PolicyLoader format), beside ``quietFor``: it is a promise about when the operation runs.

- **Breached** when ``now - last successful run start > maxAge``. Manual, backfill and escalated runs
  count, as for the due rules.
- **Never succeeded**: measured from when the table first had data (its oldest snapshot, what the
  quiet period's "due since" uses too): a table has wanted maintenance since then. A table with no
  snapshot has nothing to maintain and meets its SLA; without health collected (the oldest snapshot
  unknown) the verdict is unknown, which is not a breach (the next tick knows).
- A breach **escalates** the work (core/plan/gates.py, the ``sla`` gate; core/plan/plan_stages.py, the ``sla
  first`` stage): the conditions and minimum intervals are passed, as by the critical force, and the
  work ranks first; the schedule, backoff, the budgets, the envelope and one operation per table at a
  time still hold.

Pure: no Dagster, Spark or PyIceberg; ``now`` is injected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Mapping

from floe_dagster.core.basics.durations import format_iso_duration, format_wait, parse_iso_duration
from floe_dagster.core.basics.localtime import UTC, as_utc
from floe_dagster.core.basics.validation import Location, check_mapping, check_unknown, describe, get_enum

if TYPE_CHECKING:
    from floe_dagster.core.facts.measurements import TableMetrics

SLA_FIELDS = ("maxAge", "severity", "owner")
WARN, ERROR = "WARN", "ERROR"  # Dagster's AssetCheckSeverity names
SEVERITIES = (WARN, ERROR)
DEFAULT_SEVERITY = ERROR  # Dagster's own default for a failed check
MAX_OWNER_CHARS = 200
MIN_MAX_AGE = timedelta(minutes=1)  # the sensor's tick: a shorter promise cannot be checked
# Where the age is measured from.
SINCE_SUCCESS, SINCE_FIRST_DATA, SINCE_UNKNOWN, NO_DATA = "last_success", "first_data", "unknown", "no_data"


@dataclass(frozen=True)
class SlaContract:
    max_age: timedelta
    severity: str = DEFAULT_SEVERITY
    owner: str = ""

    def to_json(self) -> dict[str, object]:
        return {"maxAge": format_iso_duration(self.max_age), "severity": self.severity, "owner": self.owner}


@dataclass(frozen=True)
class SlaVerdict:
    """The contract at ``now``: ``breached`` since ``breached_since`` (``since`` + maxAge), measured from
    ``since`` (the last success, or the table's first data: ``measured_from``)."""

    contract: SlaContract
    breached: bool
    measured_from: str  # SINCE_SUCCESS, SINCE_FIRST_DATA, SINCE_UNKNOWN, NO_DATA
    since: datetime | None
    last_success: datetime | None
    breached_since: datetime | None  # since + maxAge, also while met (when it would be breached)
    age: timedelta | None
    detail: str

    @property
    def passed(self) -> bool:
        return not self.breached

    @property
    def rank_key(self) -> tuple[int, datetime]:
        """Escalated work's order: ERROR before WARN, then the longest breached first."""
        return (0 if self.contract.severity == ERROR else 1, self.breached_since or datetime.max.replace(tzinfo=UTC))

    def to_json(self) -> dict[str, object]:
        def iso(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        return {**self.contract.to_json(), "breached": self.breached, "measuredFrom": self.measured_from,
                "since": iso(self.since), "lastSuccess": iso(self.last_success),
                "breachedSince": iso(self.breached_since) if self.breached else None,
                "dueBy": iso(self.breached_since),
                "ageSeconds": self.age.total_seconds() if self.age is not None else None, "detail": self.detail}


def evaluate_sla(contract: SlaContract, last_success_start: datetime | None, first_data: datetime | None,
                 now: datetime, has_data: bool = True) -> SlaVerdict:
    """The contract's verdict at ``now`` (the module's rules). ``first_data``: the table's oldest
    snapshot's time (None: unknown); ``has_data`` False: the table has no snapshot at all."""
    now = as_utc(now)
    rule = f"maxAge {format_iso_duration(contract.max_age)}"
    last = as_utc(last_success_start) if last_success_start is not None else None
    if last is not None:
        since, measured, what = last, SINCE_SUCCESS, f"last success {last.isoformat()}"
    elif not has_data:
        return SlaVerdict(contract, False, NO_DATA, None, None, None, None,
                          f"met: never succeeded, and the table has no data to maintain ({rule})")
    elif first_data is not None:
        since, measured = as_utc(first_data), SINCE_FIRST_DATA
        what = f"never succeeded; the table has had data since {since.isoformat()}"
    else:
        return SlaVerdict(contract, False, SINCE_UNKNOWN, None, None, None, None,
                          f"unknown: never succeeded, and the table's health (its first data) is not collected yet "
                          f"({rule})")
    age, deadline = now - since, since + contract.max_age
    if age > contract.max_age:
        return SlaVerdict(contract, True, measured, since, last, deadline, age,
                          f"breached for {format_wait(now - deadline)}: {what}, {format_wait(age)} ago ({rule})")
    return SlaVerdict(contract, False, measured, since, last, deadline, age,
                      f"met: {what}, {format_wait(age)} ago; breached after {deadline.isoformat()} ({rule})")


def table_sla(contract: SlaContract, last_success_start: datetime | None, metrics: "TableMetrics | None",
              now: datetime) -> SlaVerdict:
    """One (table, operation)'s contract at ``now`` (what the planner, the check and explain all use): from
    its last success, else the table's first data (its oldest snapshot in the health the plan read)."""
    first = metrics.oldest_snapshot_ms if metrics is not None else None
    return evaluate_sla(contract, last_success_start,
                        datetime.fromtimestamp(first / 1000, tz=UTC) if first is not None else None, now,
                        has_data=metrics is None or metrics.current_snapshot_id is not None)


# -- parsing --------------------------------------------------------------------------------------------


def parse_sla(at: Location, raw: object, rule_period: timedelta | None = None) -> SlaContract | None:
    """A schedule's ``sla`` mapping; problems go to ``at`` (None then). ``rule_period``: the schedule's
    interval or cron gap, for the warning that the rule alone already breaks the promise."""
    if raw is None:
        return None
    mapping = check_mapping(at, raw)
    if mapping is None:
        return None
    check_unknown(at, mapping, SLA_FIELDS)
    before = len(at.problems.errors)
    max_age = _max_age(at, mapping.get("maxAge"))
    severity = get_enum(at, mapping, "severity", SEVERITIES, DEFAULT_SEVERITY)
    owner = _owner(at.child("owner"), mapping.get("owner"))
    if max_age is None or len(at.problems.errors) > before:
        return None
    if rule_period is not None and rule_period > max_age:
        at.child("maxAge").warn(f"is shorter than the schedule's period ({format_iso_duration(rule_period)}): "
                                "the contract is breached before each run is due")
    return SlaContract(max_age, severity, owner)


def _max_age(at: Location, value: object) -> timedelta | None:
    here = at.child("maxAge")
    if value is None:
        here.error("is required: an ISO-8601 duration such as P1D (how old the last success may get)")
        return None
    if not isinstance(value, str):
        here.error(f"expected an ISO-8601 duration such as P1D, got {describe(value)}")
        return None
    try:
        max_age = parse_iso_duration(value)
    except ValueError as exc:
        here.error(str(exc))
        return None
    if max_age < MIN_MAX_AGE:
        here.error(f"must be at least PT1M (the scheduler's tick), got {value!r}")
        return None
    return max_age


def _owner(here: Location, value: object) -> str:
    """One line of text: it becomes a Prometheus label, a Dagster metadata value and a line of ``explain``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        here.error(f"expected text (a team or an address), got {describe(value)}")
        return ""
    if not value.isprintable():
        here.error("must be one line of printable text (no newline, tab or control character)")
        return ""
    if len(value) > MAX_OWNER_CHARS:
        here.error(f"must be at most {MAX_OWNER_CHARS} characters, got {len(value)}")
        return ""
    return value.strip()


def sla_of(schedule: object) -> SlaContract | None:
    return getattr(schedule, "sla", None) if schedule is not None else None


def contracts(policy: Any) -> Mapping[Any, SlaContract]:
    """A policy's operations with an SLA: operation → contract (configured operations only)."""
    found = {}
    for op in policy.configured_operations():
        contract = sla_of(policy.schedule(op))
        if contract is not None:
            found[op] = contract
    return found


__all__ = [
    "SlaContract", "SlaVerdict", "evaluate_sla", "parse_sla", "table_sla", "sla_of", "contracts",
    "SLA_FIELDS", "SEVERITIES", "WARN", "ERROR", "DEFAULT_SEVERITY",
]
