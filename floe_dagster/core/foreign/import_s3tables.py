"""Amazon S3 Tables' maintenance configuration (``floe-dagster import --from s3tables FILE``), read into the
levels core/foreign/foreign_policies.py resolves: the table bucket is the catalog level, each table its own.

**The file.** S3 Tables answers a table's configuration (``GetTableMaintenanceConfiguration``:
``{tableARN, configuration: {<type>: {status, settings: {<type>: {...}}}}}``) with the table's id in its
ARN, not its name, so the file names each table: ``{"bucket": <GetTableBucketMaintenanceConfiguration's
answer>, "tables": [{"namespace": "sales", "name": "orders", "configuration": {...}}]}``.

**Types** (``status`` ``enabled`` or ``disabled``; an enabled type without ``settings`` has S3's defaults):

- ``icebergCompaction`` (table): ``targetFileSizeMB`` (default 512) → ``rewriteDataFiles.targetFileSizeBytes``;
  ``strategy`` ``binpack`` → ``BINPACK``, ``sort`` → ``SORT`` (the table's sort order), ``auto`` → no
  strategy (binpack; S3 sorts when the table has a sort order), ``z-order`` written disabled.
- ``icebergSnapshotManagement`` (table): ``minSnapshotsToKeep`` (default 1) → ``expireSnapshots.retainLast``,
  ``maxSnapshotAgeHours`` (default 120) → ``maxSnapshotAge`` ``PT<n>H``.
- ``icebergUnreferencedFileRemoval`` (bucket): ``unreferencedDays`` (default 3) →
  ``orphanCleanup.retentionPeriodInDays``; ``nonCurrentDays`` (default 10), the days S3 keeps a file it
  marked before deleting it for good → ``orphanCleanup.quarantine: {enabled: true, gracePeriod: P<n>D}``
  (floe-dagster moves orphans into a quarantine, ``floe-dagster restore`` puts them back).

A type the file leaves out is not imported (S3 enables every type by default, but floe-dagster assumes
no retention the file does not state).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping

from floe_dagster.core.basics.durations import format_iso_duration

from floe_dagster.core.foreign.foreign_policies import MIN_ORPHAN_DAYS, Level, Problems, Setting, check_name, off, \
    whole_number

COMPACTION, SNAPSHOTS, UNREFERENCED = "icebergCompaction", "icebergSnapshotManagement", "icebergUnreferencedFileRemoval"
TABLE_TYPES, BUCKET_TYPES = (COMPACTION, SNAPSHOTS), (UNREFERENCED,)
DEFAULTS = {COMPACTION: {"targetFileSizeMB": 512, "strategy": "auto"},
            SNAPSHOTS: {"minSnapshotsToKeep": 1, "maxSnapshotAgeHours": 120},
            UNREFERENCED: {"unreferencedDays": 3, "nonCurrentDays": 10}}
_STRATEGIES = {"binpack": "BINPACK", "sort": "SORT"}
_MB = 1024 * 1024


def s3tables_levels(document: Any, source: str) -> list[Level]:
    """The bucket's level and each table's; SourceError listing every problem (naming the file and field)."""
    problems = Problems(source)
    if not isinstance(document, Mapping) or not ({"bucket", "tables"} & set(document)):
        problems.error("", "expected {\"bucket\": <the table bucket's maintenance configuration>, \"tables\": "
                           "[{\"namespace\", \"name\", \"configuration\"}]}")
        problems.raise_if_any()
    levels = []
    bucket = document.get("bucket")
    if bucket is not None:
        level = Level((), False)
        _read_types(problems, "bucket", bucket, BUCKET_TYPES, level)
        levels.append(level)
    tables = document.get("tables") or []
    if not isinstance(tables, list):
        problems.error("tables", f"expected a list of tables, got {tables!r}")
        tables = []
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(tables):
        where = f"tables[{index}]"
        if not isinstance(entry, Mapping):
            problems.error(where, f"expected a table ({{namespace, name, configuration}}), got {entry!r}")
            continue
        namespace = check_name(problems, f"{where}.namespace", entry.get("namespace"))
        name = check_name(problems, f"{where}.name", entry.get("name"))
        if namespace is None or name is None:
            continue
        if (namespace, name) in seen:
            problems.error(where, f"table {namespace}.{name} is listed twice")
            continue
        seen.add((namespace, name))
        level = Level((namespace, name), True)
        _read_types(problems, where, entry, TABLE_TYPES, level)
        levels.append(level)
    problems.raise_if_any()
    return levels


def _read_types(problems: Problems, where: str, answer: object, known: tuple[str, ...], level: Level) -> None:
    configuration = answer.get("configuration") if isinstance(answer, Mapping) else None
    if not isinstance(configuration, Mapping):
        problems.error(f"{where}.configuration", f"expected the maintenance configuration (a mapping of types), "
                                                 f"got {configuration!r}")
        return
    for kind, value in configuration.items():
        here = f"{where}.configuration.{kind}"
        if kind not in known:
            problems.error(here, f"unknown maintenance type {kind!r} here; expected {', '.join(known)}")
            continue
        status = value.get("status") if isinstance(value, Mapping) else None
        if status not in ("enabled", "disabled"):
            problems.error(f"{here}.status", f"expected enabled or disabled, got {status!r}")
            continue
        setting = _setting(problems, here, kind, status, value.get("settings"), f"S3 Tables {kind} ({level.label})")
        if setting is not None:
            level.settings[setting.key] = setting


def _setting(problems: Problems, where: str, kind: str, status: str, settings: object, origin: str) -> Setting | None:
    key = {COMPACTION: "rewriteDataFiles", SNAPSHOTS: "expireSnapshots", UNREFERENCED: "orphanCleanup"}[kind]
    if status == "disabled":
        return off(key, origin, "status: disabled")
    notes: list[str] = []
    if settings is None:
        values = dict(DEFAULTS[kind])
        notes.append(f"no settings: S3 Tables' defaults {values}")
    elif isinstance(settings, Mapping) and isinstance(settings.get(kind, {}), Mapping):
        values = {**DEFAULTS[kind], **settings.get(kind, {})}
    else:
        problems.error(f"{where}.settings", f"expected {{\"{kind}\": {{...}}}}, got {settings!r}")
        return None
    unknown = [name for name in values if name not in DEFAULTS[kind]]
    for name in unknown:
        problems.error(f"{where}.settings.{kind}.{name}", f"unknown setting; expected {', '.join(DEFAULTS[kind])}")
    if unknown:
        return None
    read = {COMPACTION: _compaction, SNAPSHOTS: _snapshots, UNREFERENCED: _unreferenced}[kind]
    return read(problems, f"{where}.settings.{kind}", values, origin, notes)


def _compaction(problems: Problems, where: str, values: Mapping[str, object], origin: str, notes: list) -> Setting:
    size = whole_number(problems, f"{where}.targetFileSizeMB", values["targetFileSizeMB"], 1)
    config: dict[str, object] = {"targetFileSizeBytes": size * _MB if size else None}
    strategy, reason = str(values["strategy"]).strip().lower(), ""
    if strategy in _STRATEGIES:
        config["strategy"] = _STRATEGIES[strategy]
    elif strategy == "auto":
        notes.append("strategy auto: written without a strategy (binpack); S3 sorts when the table has a sort "
                     "order: set strategy SORT for such tables")
    elif strategy == "z-order":
        config.update(strategy="ZORDER", zOrderColumns=["<column>"])
        reason = ("S3 Tables' z-order takes its columns from the table's sort order, and floe-dagster's z-order "
                  "needs them named: name them in zOrderColumns (or choose BINPACK or SORT).")
    else:
        problems.error(f"{where}.strategy", f"expected auto, binpack, sort or z-order, got {values['strategy']!r}")
    return Setting("rewriteDataFiles", config, origin, disabled_reason=reason, notes=tuple(notes))


def _snapshots(problems: Problems, where: str, values: Mapping[str, object], origin: str, notes: list) -> Setting:
    keep = whole_number(problems, f"{where}.minSnapshotsToKeep", values["minSnapshotsToKeep"])
    hours = whole_number(problems, f"{where}.maxSnapshotAgeHours", values["maxSnapshotAgeHours"])
    config = {"retainLast": max(keep or 0, 1),
              "maxSnapshotAge": format_iso_duration(timedelta(hours=min(max(hours or 0, 1), 876_000)))}
    if keep == 0:
        notes.append("minSnapshotsToKeep 0: written as retainLast 1 (Iceberg keeps at least one)")
    reason = ""
    if hours == 0:
        reason = ("S3 Tables' maxSnapshotAgeHours is 0 (expire every snapshot but the newest): under one hour "
                  "floe-dagster asks a person; written with the shortest age it takes without asking (PT1H).")
    return Setting("expireSnapshots", config, origin, disabled_reason=reason, notes=tuple(notes))


def _unreferenced(problems: Problems, where: str, values: Mapping[str, object], origin: str, notes: list) -> Setting:
    days = whole_number(problems, f"{where}.unreferencedDays", values["unreferencedDays"])
    grace = whole_number(problems, f"{where}.nonCurrentDays", values["nonCurrentDays"])
    config = {"retentionPeriodInDays": max(days or 0, MIN_ORPHAN_DAYS),
              "quarantine": {"enabled": True, "gracePeriod": f"P{grace}D" if grace else "PT1H"}}
    reasons = []
    if days is not None and days < MIN_ORPHAN_DAYS:
        reasons.append(f"S3 Tables' unreferencedDays is {days}: Iceberg refuses to remove files younger than a day, "
                       f"which may belong to commits in progress; written with {MIN_ORPHAN_DAYS}.")
    if grace == 0:
        reasons.append("S3 Tables' nonCurrentDays is 0 (delete marked files at once): floe-dagster keeps "
                       "quarantined files at least PT1H; written with PT1H.")
    return Setting("orphanCleanup", config, origin, disabled_reason=" ".join(reasons), notes=tuple(notes))


__all__ = ["s3tables_levels", "TABLE_TYPES", "BUCKET_TYPES", "DEFAULTS"]
