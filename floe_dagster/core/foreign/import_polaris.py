"""Apache Polaris' maintenance policies (``floe-dagster import --from polaris FILE``), read into the levels
core/foreign/foreign_policies.py resolves.

**The file.** Polaris' API answers a policy (``LoadPolicyResponse.policy``: ``name``, ``policy-type``,
``inheritable``, ``description``, ``content`` as JSON text, ``version``) and takes its attachments
(``AttachPolicyRequest.target``: ``{type: catalog|namespace|table-like, path: [...]}``) but has no call
listing a policy's attachments, so the file pairs them: ``{"policies": [{<policy>, "targets": [<target>,
...]}]}`` (a list alone too; ``type`` for ``policy-type`` and a content object for its text are
accepted). Unknown ``custom.*`` types are not maintenance policies: listed and skipped.

**Content** (Polaris' schemas, version ``2025-02-03``; ``enable`` required, ``config`` a map of text):

- ``system.data-compaction``: ``target_file_size_bytes`` (top level or in ``config``) →
  ``rewriteDataFiles.targetFileSizeBytes``; ``config.compaction_strategy`` ``bin-pack`` → ``BINPACK``,
  ``sort`` → ``SORT`` (the table's sort order), ``z-order`` written disabled (floe-dagster needs the
  columns); ``config.max-concurrent-file-group-rewrites`` → ``maxConcurrentFileGroupRewrites``.
- ``system.snapshot-expiry``: ``config.min_snapshot_to_keep`` → ``expireSnapshots.retainLast`` (at least
  1), ``config.max_snapshot_age_days`` → ``maxSnapshotAge`` ``P<n>D`` (0: under the floor, written
  disabled), ``config.max_ref_age_days`` → ``refRetention`` ``[{pattern: "*", maxAge: P<n>D}]``.
- ``system.orphan-file-removal``: ``max_orphan_file_age_in_days`` → ``orphanCleanup.retentionPeriodInDays``
  (0: written disabled with 1); ``older_than`` (a fixed instant) and ``locations``/``location`` (folders)
  cannot be carried: written disabled; ``config.prefix_mismatch_mode`` ``error``/``ignore``.
- ``system.metadata-compaction``: ``rewriteManifests`` (``config.spec_id`` → ``specId``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from floe_dagster.core.foreign.foreign_policies import MIN_ORPHAN_DAYS, Level, Problems, Setting, check_name, off, \
    whole_number

VERSION = "2025-02-03"
COMPACTION, EXPIRY, ORPHANS, METADATA = ("system.data-compaction", "system.snapshot-expiry",
                                         "system.orphan-file-removal", "system.metadata-compaction")
TYPES = (COMPACTION, EXPIRY, ORPHANS, METADATA)
_POLICY_NAME = re.compile(r"^[A-Za-z0-9\-_]+$")  # Polaris' PolicyName
_TARGETS = ("catalog", "namespace", "table-like")
_STRATEGIES = {"bin-pack": "BINPACK", "binpack": "BINPACK", "sort": "SORT"}
_PREFIX_MODES = {"error": "ERROR", "ignore": "IGNORE"}


def polaris_levels(document: Any, source: str) -> list[Level]:
    """Every level a policy of the file is attached to, with what it sets there; SourceError listing every
    problem (naming the file and the field)."""
    problems = Problems(source)
    entries = document.get("policies") if isinstance(document, Mapping) else document
    if not isinstance(entries, list):
        problems.error("policies", "expected a list of Polaris policies (or {\"policies\": [...]})")
        problems.raise_if_any()
    levels: dict[tuple[tuple[str, ...], bool], Level] = {}
    attached: dict[tuple[tuple[str, ...], bool, str], str] = {}
    for index, entry in enumerate(entries):
        where = f"policies[{index}]"
        if not isinstance(entry, Mapping):
            problems.error(where, f"expected a policy (a mapping), got {entry!r}")
            continue
        read = _read_policy(problems, where, entry)
        if read is None:
            continue
        name, kind, setting, inheritable = read
        for place, is_table, target_where in _targets(problems, where, entry):
            level = levels.setdefault((place, is_table), Level(place, is_table))
            if setting is None:
                level.notes.append(f"policy '{name}' ({kind}): not a maintenance policy of Polaris: not imported")
            elif not inheritable and not is_table:
                level.notes.append(f"policy '{name}' ({kind}) is not inheritable: it governs the {level.label} "
                                   "itself, not its tables: not imported")
            elif (place, is_table, kind) in attached:
                problems.error(target_where, f"a second {kind} policy ('{name}') attached to the {level.label}, "
                                             f"beside '{attached[place, is_table, kind]}': Polaris allows one")
            else:
                attached[place, is_table, kind] = name
                level.settings[setting.key] = setting
    problems.raise_if_any()
    return list(levels.values())


def _read_policy(problems: Problems, where: str, entry: Mapping[str, object]) -> tuple | None:
    """(name, type, its setting or None for a type that is not maintenance, inheritable) or None."""
    name = entry.get("name")
    if not isinstance(name, str) or not _POLICY_NAME.match(name):
        problems.error(f"{where}.name", f"{name!r} is not a Polaris policy name (letters, digits, '-' and '_')")
        return None
    kind = entry.get("policy-type", entry.get("type"))
    if not isinstance(kind, str) or not kind:
        problems.error(f"{where}.policy-type", f"policy '{name}': expected the policy's type, got {kind!r}")
        return None
    inheritable = entry.get("inheritable", True)
    if not isinstance(inheritable, bool):
        problems.error(f"{where}.inheritable", f"policy '{name}': expected true or false, got {inheritable!r}")
        return None
    if kind not in TYPES:
        if kind.startswith("system."):
            problems.error(f"{where}.policy-type", f"policy '{name}': unknown Polaris policy type {kind!r}; "
                                                   f"expected one of {', '.join(TYPES)} (or a custom.* type)")
            return None
        return name, kind, None, inheritable
    content = _content(problems, f"{where}.content", entry.get("content"))
    if content is None:
        return None
    setting = _TRANSLATE[kind](problems, f"{where}.content", content, f"policy '{name}' ({kind})")
    return (name, kind, setting, inheritable) if setting is not None else None


def _content(problems: Problems, where: str, raw: object) -> Mapping[str, object] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            problems.error(where, f"not JSON: {exc}")
            return None
    if not isinstance(raw, Mapping):
        problems.error(where, f"expected the policy's content (a JSON object), got {raw!r}")
        return None
    if raw.get("version", VERSION) != VERSION:
        problems.error(f"{where}.version", f"unknown schema version {raw.get('version')!r}; expected {VERSION}")
        return None
    if not isinstance(raw.get("enable"), bool):
        problems.error(f"{where}.enable", f"is required: true or false, got {raw.get('enable')!r}")
        return None
    if raw.get("config") is not None and not isinstance(raw.get("config"), Mapping):
        problems.error(f"{where}.config", f"expected a map of settings, got {raw.get('config')!r}")
        return None
    return raw


def _targets(problems: Problems, where: str, entry: Mapping[str, object]) -> list[tuple[tuple[str, ...], bool, str]]:
    """Each attachment as (path, is a table, where it is in the file)."""
    raw = entry.get("targets")
    if not isinstance(raw, list):
        problems.error(f"{where}.targets", "expected the list of places the policy is attached to, such as "
                                           "[{\"type\": \"namespace\", \"path\": [\"sales\"]}]")
        return []
    found = []
    for index, target in enumerate(raw):
        here = f"{where}.targets[{index}]"
        target = target.get("target", target) if isinstance(target, Mapping) else target
        kind = target.get("type") if isinstance(target, Mapping) else None
        if kind not in _TARGETS:
            problems.error(f"{here}.type", f"expected one of {', '.join(_TARGETS)}, got {kind!r}")
            continue
        path = target.get("path") or []
        if not isinstance(path, list) or (kind == "namespace" and not path) or (kind == "table-like" and len(path) < 2):
            then = ", then the table's name" if kind == "table-like" else ""
            problems.error(f"{here}.path", f"expected the {kind}'s path (namespace parts{then}), got {path!r}")
            continue
        if kind == "catalog" and path:
            problems.error(f"{here}.path", f"a catalog target has no path, got {path!r}")
            continue
        names = [check_name(problems, f"{here}.path[{i}]", part) for i, part in enumerate(path)]
        if all(names):
            found.append((tuple(names), kind == "table-like", here))
    return found


def _config(content: Mapping[str, Any]) -> Mapping[str, object]:
    return content.get("config") or {}


def _rest(config: Mapping[str, object], known: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"config.{key}={value!r}: no equivalent in floe-dagster: not carried over"
                 for key, value in config.items() if key not in known)


def _compaction(problems: Problems, where: str, content: Mapping[str, object], origin: str) -> Setting | None:
    if not content["enable"]:
        return off("rewriteDataFiles", origin, "enable: false")
    config, result, notes = _config(content), {}, []
    size = content.get("target_file_size_bytes", config.get("target_file_size_bytes"))
    if size is not None:
        result["targetFileSizeBytes"] = whole_number(problems, f"{where}.target_file_size_bytes", size, 1)
    concurrency = config.get("max-concurrent-file-group-rewrites")
    if concurrency is not None:
        result["maxConcurrentFileGroupRewrites"] = whole_number(
            problems, f"{where}.config.max-concurrent-file-group-rewrites", concurrency, 1)
    strategy = str(config.get("compaction_strategy", "")).strip().lower()
    reason = ""
    if strategy in _STRATEGIES:
        result["strategy"] = _STRATEGIES[strategy]
    elif strategy in ("z-order", "zorder"):
        result["strategy"] = "ZORDER"
        result["zOrderColumns"] = ["<column>"]
        reason = ("Polaris' compaction_strategy z-order names no columns, and floe-dagster's z-order needs them: "
                  "name them in zOrderColumns (or choose BINPACK or SORT).")
    elif strategy:
        notes.append(f"config.compaction_strategy={strategy!r}: unknown: written without a strategy (BINPACK)")
    notes += _rest(config, ("target_file_size_bytes", "compaction_strategy", "max-concurrent-file-group-rewrites"))
    return Setting("rewriteDataFiles", result, origin, disabled_reason=reason, notes=tuple(notes))


def _expiry(problems: Problems, where: str, content: Mapping[str, object], origin: str) -> Setting | None:
    if not content["enable"]:
        return off("expireSnapshots", origin, "enable: false")
    config, result, notes, extra, reason = _config(content), {}, [], {}, ""
    keep = config.get("min_snapshot_to_keep")
    if keep is not None:
        kept = whole_number(problems, f"{where}.config.min_snapshot_to_keep", keep)
        result["retainLast"] = max(kept or 0, 1)
        if kept == 0:
            notes.append("config.min_snapshot_to_keep=0: written as retainLast 1 (Iceberg keeps at least one)")
    days = config.get("max_snapshot_age_days")
    if days is not None:
        age = whole_number(problems, f"{where}.config.max_snapshot_age_days", days)
        result["maxSnapshotAge"] = f"P{age}D" if age else "PT1H"
        if age == 0:
            reason = ("Polaris' max_snapshot_age_days is 0 (expire every snapshot but the newest): under one hour "
                      "floe-dagster asks a person; written with the shortest age it takes without asking (PT1H).")
    ref_days = config.get("max_ref_age_days")
    if ref_days is not None:
        ref_age = whole_number(problems, f"{where}.config.max_ref_age_days", ref_days)
        if ref_age:
            extra["refRetention"] = [{"pattern": "*", "maxAge": f"P{ref_age}D"}]
        elif ref_age == 0:
            notes.append("config.max_ref_age_days=0 (remove every branch and tag): not carried over; refs keep "
                         "their own limits")
    if not result:
        notes.append("no config: unset options are the table's history.expire.* properties (bounded), else "
                     "floe-dagster's 5 snapshots and P7D")
    notes += _rest(config, ("min_snapshot_to_keep", "max_snapshot_age_days", "max_ref_age_days"))
    return Setting("expireSnapshots", result, origin, disabled_reason=reason, notes=tuple(notes), extra=extra)


def _orphans(problems: Problems, where: str, content: Mapping[str, Any], origin: str) -> Setting | None:
    if not content["enable"]:
        return off("orphanCleanup", origin, "enable: false")
    config, result, notes, reasons = _config(content), {}, [], []
    days = content.get("max_orphan_file_age_in_days")
    if days is not None:
        age = whole_number(problems, f"{where}.max_orphan_file_age_in_days", days)
        result["retentionPeriodInDays"] = max(age or 0, MIN_ORPHAN_DAYS)
        if age is not None and age < MIN_ORPHAN_DAYS:
            reasons.append(f"Polaris' max_orphan_file_age_in_days is {age}: Iceberg refuses to remove files younger "
                           f"than a day, which may belong to commits in progress; written with {MIN_ORPHAN_DAYS}.")
    else:
        notes.append("no max_orphan_file_age_in_days: written without one (floe-dagster's 3 days)")
    if content.get("older_than") is not None:
        reasons.append(f"Polaris' older_than ({content['older_than']!r}) is a fixed instant, and floe-dagster keeps "
                       "an age: its cutoff would move forward and remove files the fixed one keeps; set "
                       "retentionPeriodInDays.")
    locations = content.get("locations") or ([content["location"]] if content.get("location") else [])
    if locations:
        reasons.append(f"Polaris names the folders to clean ({', '.join(map(str, locations))}); floe-dagster "
                       "cleans the table's own location only (the safety envelope): check they are the table's.")
    mode = str(config.get("prefix_mismatch_mode", "")).strip().lower()
    if mode in _PREFIX_MODES:
        result["prefixMismatchMode"] = _PREFIX_MODES[mode]
    elif mode:
        reasons.append(f"Polaris' prefix_mismatch_mode {mode!r} deletes files under another scheme or authority: "
                       "only the policy's author may choose it (written as ERROR).")
    notes += _rest(config, ("prefix_mismatch_mode",))
    return Setting("orphanCleanup", result, origin, disabled_reason=" ".join(reasons), notes=tuple(notes))


def _metadata(problems: Problems, where: str, content: Mapping[str, object], origin: str) -> Setting | None:
    if not content["enable"]:
        return off("rewriteManifests", origin, "enable: false")
    config, result = _config(content), {}
    if config.get("spec_id") is not None:
        result["specId"] = whole_number(problems, f"{where}.config.spec_id", config["spec_id"])
    return Setting("rewriteManifests", result, origin, notes=_rest(config, ("spec_id",)))


_TRANSLATE: dict[str, Callable[..., Setting | None]] = {
    COMPACTION: _compaction, EXPIRY: _expiry, ORPHANS: _orphans, METADATA: _metadata}

__all__ = ["polaris_levels", "TYPES", "VERSION"]
