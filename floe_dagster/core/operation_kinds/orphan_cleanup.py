"""ORPHAN_CLEANUP: Iceberg's ``remove_orphan_files``, the policy's ``orphanCleanup``: files under the
table's location that no snapshot references, older than the retention, deleted or moved into a
quarantine (core/storage/quarantine.py). Its ``location`` is a safety-envelope field (core/policies/envelope.py);
``explain`` shows the backlog its last run left (a per-run cap, or a dry run)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, Sequence

from floe_dagster.core.basics.loader_format import LoaderSection, spelled, written_as
from floe_dagster.core.operation_config import OperationConfig, at_least, boolean, one_of, option, text, text_map
from floe_dagster.core.operation_kinds.spec import ExplainView, FloeNative, NeedsGc
from floe_dagster.core.schedules.orphan_cadence import (
    ADAPTIVE_FIELDS, AdaptiveCadence, CadenceVerdict, RecordedCleanup, next_orphan_run, parse_adaptive,
    recorded_cleanups,
)
from floe_dagster.core.storage.quarantine import (
    DEFAULT_GRACE_PERIOD, QUARANTINE_FIELDS, QuarantinePolicy, parse_quarantine, quarantine_choice,
)
from floe_dagster.core.storage.table_location import nested_tables
from floe_dagster.core.basics.validation import Location, get_number

PREFIX_MISMATCH_MODES = ("ERROR", "IGNORE", "DELETE")
DEFAULT_ORPHAN_RETENTION_DAYS = 3
DEFAULT_PREFIX_MISMATCH_MODE = "ERROR"


def _retention_days(at: Location, raw: Mapping[str, object], key: str) -> int | float | None:
    days = raw.get(key)
    if isinstance(days, (int, float)) and not isinstance(days, bool) and days == days and days < 1:
        at.child(key).error(
            f"must be at least 1 day, got {days:g}: Iceberg refuses to remove files younger than 24 hours, "
            "which may belong to commits still in progress")
        return None
    return get_number(at, raw, key, None, minimum=1)


@dataclass(frozen=True)
class OrphanCleanupConfig(OperationConfig):
    retention_period_in_days: int | float | None = option(_retention_days)  # at least 1
    location: str | None = option(text)
    prefix_mismatch_mode: str | None = option(one_of(PREFIX_MISMATCH_MODES))  # ERROR, IGNORE or DELETE
    equal_schemes: tuple[tuple[str, str], ...] | None = option(text_map, shown=dict)  # the policy's order
    equal_authorities: tuple[tuple[str, str], ...] | None = option(text_map, shown=dict)
    dry_run: bool | None = option(boolean)
    # Unset: on with Iceberg 1.11 and later (the driver holds at most a sample of 20,000 paths, not every
    # orphan's); Iceberg 1.10's procedure has no such argument.
    stream_results: bool | None = option(boolean)
    max_concurrent_deletes: int | None = option(at_least(1))  # ignored by FileIOs that bulk-delete (S3, Hadoop)
    # A per-run cap: the run deletes at most this many files, the rest stays as backlog for later runs
    # (docs/operations.md, "Orphan cleanup at millions of files"). Unset: no cap.
    max_files_to_delete: int | None = option(at_least(1))
    # Move orphans into a quarantine instead of deleting them; purged after the grace period
    # (core/storage/quarantine.py). Unset: every cleanup quarantines; ``false`` opts out.
    quarantine: QuarantinePolicy | None = option(parse_quarantine, shown=lambda policy: policy.to_json())
    # Time each cleanup from the orphan rate its past cleanups found (core/schedules/orphan_cadence.py), within
    # [min, max], in place of the schedule's interval or cron. Unset: the schedule alone decides.
    adaptive: AdaptiveCadence | None = option(parse_adaptive, shown=lambda cadence: cadence.to_json())
    # The tables this one may nest with (Hive-style layouts), named exactly: without it, a table whose location
    # holds or lies inside another table's is refused by the safety envelope (core/storage/table_location.py).
    nested_tables: tuple[str, ...] | None = option(nested_tables)


def _explained(view: ExplainView) -> dict[str, object]:
    """``quarantine``: whether the table's cleanups quarantine (the policy's choice, or the default) and
    for how long; and the ``backlog``."""
    config = view.config if isinstance(view.config, OrphanCleanupConfig) else None
    if config is None:
        return {"quarantine": None, **_backlog(view)}
    policy = config.quarantine or QuarantinePolicy()
    choice = quarantine_choice(policy, bool(config.dry_run))
    return {"quarantine": {"enabled": choice.enabled, "gracePeriod": policy.grace_period or DEFAULT_GRACE_PERIOD,
                           "explicit": policy.enabled is not None, "reason": choice.reason}, **_backlog(view)}


def _backlog(view: ExplainView) -> dict[str, object]:
    """The orphans the table's last cleanup left on disk (a per-run cap cut it, or a dry run deleted
    nothing): its materialization's ``orphan_backlog_files``; the next run lists them again and deletes
    them first. None: no cleanup yet, or it left none."""
    last = view.last_run()
    found = last.metadata if last is not None else {}
    files = found.get("orphan_backlog_files")
    if last is None or not isinstance(files, int) or isinstance(files, bool) or files <= 0:
        return {"backlog": None}
    cap = found.get("orphan_cap")
    return {"backlog": {"files": files, "exact": bool(found.get("orphan_backlog_exact", True)),
                        "cap": cap if isinstance(cap, int) and not isinstance(cap, bool) else None,
                        "capReached": bool(found.get("orphan_cap_reached", False)), "runId": last.run_id,
                        "at": last.at.isoformat()}}


def _adaptive_cadence(config: OrphanCleanupConfig | None, runs: Sequence[RecordedCleanup],
                      now: datetime) -> CadenceVerdict | None:
    """``adaptive``: the next cleanup from the orphan rate the table's recorded cleanups found (None: not
    adaptive, the schedule's interval or cron decides)."""
    if config is None or config.adaptive is None:
        return None
    return next_orphan_run(config.adaptive, recorded_cleanups(runs), now)


_LOCATION_FIELDS = {"location": "remove_orphan_files would delete every file under it that this table does not "
                               "reference, other tables' files included"}
# DELETE removes files whose scheme or authority differs from the table's (another bucket's copy of a
# path): whether that is safe is the policy's call, never a table property's (owners are untrusted).
_POLICY_ONLY = {"prefix_mismatch_mode": "never overridable: DELETE removes files whose scheme or authority differs "
                                        "from the table's, which only the policy may decide"}
_LOADER = LoaderSection(
    keys={"retention-period-days": "retentionPeriodInDays"},
    refused={"retention-period-in-days": written_as("retention-period-days")},
    nested={"quarantine": LoaderSection(spelled(QUARANTINE_FIELDS)),  # enabled, grace-period
            "adaptive": LoaderSection(spelled(ADAPTIVE_FIELDS))},  # target-bytes, min, max
)


class OrphanCleanup(NeedsGc, FloeNative):
    name = "ORPHAN_CLEANUP"
    policy_key = "orphanCleanup"
    procedure = "remove_orphan_files"
    order = 30
    config_type = OrphanCleanupConfig
    no_change = ("`ORPHAN_CLEANUP` changed nothing when it deleted or quarantined no file and purged no "
                 "quarantined run (a dry run never changes anything).")
    docs_row = (
        "| `ORPHAN_CLEANUP` | `remove_orphan_files` | `orphanCleanup`: `retentionPeriodInDays` (default 3, at "
        "least 1), `location` (default the table's location; relative to it, or absolute inside it: see below), "
        "`prefixMismatchMode` (default ERROR), `equalSchemes`, `equalAuthorities`, `dryRun`, `streamResults` "
        "(default true from Iceberg 1.11), `maxConcurrentDeletes`, `maxFilesToDelete` (Floe's per-run cap; see "
        "below), `quarantine` (`enabled`, `gracePeriod` (default P7D, at least PT1H): move orphans into a quarantine "
        "instead of deleting them; on for every cleanup unless `quarantine: false`; see below), `adaptive` "
        "(`targetBytes`, `min`, `max`: time each cleanup from the orphan rate; [Automation](automation.md), "
        "\"Adaptive orphan cadence\") |")

    def reclaims_orphans(self) -> bool:
        return True

    def defaults(self) -> Mapping[str, object]:
        return {"retentionPeriodInDays": DEFAULT_ORPHAN_RETENTION_DAYS,
                "prefixMismatchMode": DEFAULT_PREFIX_MISMATCH_MODE}

    def location_fields(self) -> Mapping[str, str]:
        return _LOCATION_FIELDS

    def policy_only_fields(self) -> Mapping[str, str]:
        return _POLICY_ONLY

    def loader(self) -> LoaderSection:
        return _LOADER

    def explain(self, view: ExplainView) -> dict[str, object]:
        return _explained(view)

    def cadence(self, config: OrphanCleanupConfig | None, runs: Sequence[RecordedCleanup],
                now: datetime) -> CadenceVerdict | None:
        return _adaptive_cadence(config, runs, now)


SPEC = OrphanCleanup()
