"""Floe's two policy file formats, and the translation of the second into the first.

- **The API format** (camelCase): Floe's REST API bodies, ``examples/policies``. A file holds one policy
  (a mapping), a list of them, a ``policies:`` list, or several YAML documents of these. Keys such as
  ``tablePattern``, ``rewriteDataFiles``, ``maxSnapshotAge: P7D``, ``interval: PT6H``, ``timeout: 2``.
- **Floe's PolicyLoader format** (kebab-case, ``core/policy/PolicyLoader.java``): a top-level
  ``policies:`` list of policies with kebab-case keys (``rewrite-data-files``, ``z-order-columns``), the
  table pattern as ``pattern``, and a few keys of its own: ``max-snapshot-age-days`` (whole days),
  ``retention-period-days``, ``interval-days`` / ``interval-hours`` / ``interval-minutes`` (summed into
  one interval) and ``timeout-hours``. ``created-at`` and ``updated-at`` are accepted and ignored.

**Detection**, document by document (a JSON file is one document):

1. A document whose only key is ``policies`` is a *policy list*: its entries are the policies, and a
   null or empty list holds none (as in Floe's loader). Any other document is in the API format: a
   mapping is one policy, a list holds policies.
2. Each mapping entry of a policy list is read by its own top-level keys: *kebab-case* when one of them
   contains ``-`` or is ``pattern``; *camelCase* when one has an upper-case letter (``tablePattern``);
   an entry with neither (only ``name``, ``description``, ``enabled``, ``mode``, ``priority``, ``tags``,
   spelled the same in both) is read in the API format, which for those keys is the same thing. An entry with both
   kinds of key is an error (and is read as kebab-case, so its camelCase keys are named too).
3. A file with a kebab-case entry and a camelCase one (in any of its documents) is an error: one file,
   one format. Each entry is still checked in its own format, so every other error is listed too.

**Translation.** A kebab-case policy is translated key by key into the API format's mapping, then
parsed by the same parser (``policy.parse_policy``): same checks, same defaults, same messages. The
translation refuses unknown keys itself, naming them as written with the closest valid one, and the
parser's messages are given back with the paths and field names as the file wrote them
(:func:`kebab_lines`). Every field the API format knows has its kebab-case spelling (floe-dagster's own
additions included: ``trigger-conditions``, ``health-thresholds``, ``allowed-days``, ``timezone``, ...),
except where Floe's loader spells a field its own way (``pattern``, ``max-snapshot-age-days``,
``retention-period-days``, ``interval-*``, ``timeout-hours``): there the API-style spelling is refused
with the loader's name. A schedule without ``enabled`` runs, as in the API format (Floe's loader leaves it
unset, which its scheduler reads as disabled; its documented API defaults it to true).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from floe_dagster.core.policies.conditions import TRIGGER_CONDITION_FIELDS
from floe_dagster.core.basics.durations import MAX_DURATION, format_iso_duration
from floe_dagster.core.facts.health_assessment import HEALTH_THRESHOLD_FIELDS
from floe_dagster.core.basics.loader_format import Combined, LoaderSection, kebab, spelled, whole_units, written_as
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.facts.refs import RULE_FIELDS
from floe_dagster.core.schedules.after_write import FIELDS as AFTER_WRITE_FIELDS
from floe_dagster.core.schedules.schedule import SCHEDULE_FIELDS
from floe_dagster.core.schedules.sla import SLA_FIELDS
from floe_dagster.core.basics.validation import Location, Problems, check_mapping, check_unknown, describe, get_int

API_FORMAT, LOADER_FORMAT = "api", "loader"
FORMAT_NAMES = {API_FORMAT: "Floe API format, camelCase", LOADER_FORMAT: "Floe PolicyLoader format, kebab-case"}

TOP_LEVEL_FIELDS = (
    "name", "description", "tablePattern", "enabled", "mode", "priority", "tags",
    *(op.policy_key for op in ALL_OPERATIONS), *(op.schedule_key for op in ALL_OPERATIONS),
    "triggerConditions", "healthThresholds", "refRetention", "ownerOverrides",
)


def policy_label(raw: Mapping[str, object], index: int) -> str:
    """How messages name a policy: ``policy 'nightly'``, or ``policy #2`` without a usable name."""
    name = raw.get("name")
    return f"policy '{name}'" if isinstance(name, str) and name.strip() else f"policy #{index}"


@dataclass(frozen=True)
class PolicyEntry:
    """One policy as a file wrote it, and the format it is written in."""

    raw: object
    format: str = API_FORMAT


def policy_entries(documents: list[Any], source: str, problems: Problems) -> list[PolicyEntry]:
    """The policies of one file's documents, each with its format (see the module's rules); a file
    mixing the formats is reported."""
    entries: list[PolicyEntry] = []
    kebab_seen = camel_seen = None  # (label, key) of the first entry of each kind, for the message
    for document in documents:
        if isinstance(document, Mapping) and set(document) == {"policies"}:
            listed = document["policies"]
            if listed is None:
                continue
            if not isinstance(listed, list):
                problems.errors.append(f"{source}: policies: expected a list of policies, got {describe(listed)}")
                continue
            for raw in listed:
                kebab_key, camel_key = _signals(raw)
                label = policy_label(raw, len(entries) + 1) if isinstance(raw, Mapping) else ""
                if kebab_key and camel_key:
                    problems.errors.append(
                        f"{source}: {label}: mixes kebab-case keys ('{kebab_key}', Floe's PolicyLoader format) with "
                        f"camelCase keys ('{camel_key}', Floe's API format); write it in one format")
                if kebab_key:
                    kebab_seen = kebab_seen or (label, kebab_key)
                elif camel_key:
                    camel_seen = camel_seen or (label, camel_key)
                entries.append(PolicyEntry(raw, LOADER_FORMAT if kebab_key else API_FORMAT))
            continue
        for raw in document if isinstance(document, list) else [document]:
            camel_key = _signals(raw)[1]
            if camel_key:
                camel_seen = camel_seen or (policy_label(raw, len(entries) + 1), camel_key)
            entries.append(PolicyEntry(raw))
    if kebab_seen and camel_seen:
        problems.errors.append(
            f"{source}: mixes Floe's two policy formats: {kebab_seen[0]} is in the PolicyLoader format "
            f"(kebab-case: '{kebab_seen[1]}') and {camel_seen[0]} in the API format (camelCase: '{camel_seen[1]}'); "
            "write each file in one format")
    return entries


def file_format(entries: list[PolicyEntry]) -> str | None:
    """The format a file is written in (None when it holds no policies)."""
    if not entries:
        return None
    return LOADER_FORMAT if any(e.format == LOADER_FORMAT for e in entries) else API_FORMAT


def _signals(raw: object) -> tuple[str | None, str | None]:
    """The first kebab-case key and the first camelCase key among a policy's own keys."""
    keys = [k for k in raw if isinstance(k, str)] if isinstance(raw, Mapping) else []
    kebab_key = next((k for k in keys if "-" in k or k == "pattern"), None)
    camel_key = next((k for k in keys if any(ch.isupper() for ch in k)), None)
    return kebab_key, camel_key


# -- translation ---------------------------------------------------------------------------------------


_INTERVAL_UNITS = {"interval-days": "days", "interval-hours": "hours", "interval-minutes": "minutes"}


def _interval(at: Location, values: Mapping[str, object]) -> str | None:
    """``interval-days`` + ``interval-hours`` + ``interval-minutes``, as Floe's loader sums them."""
    parts: dict[str, int] = {}
    ok = True
    for key, unit in _INTERVAL_UNITS.items():
        limit = int(MAX_DURATION / timedelta(**{unit: 1}))
        value = get_int(at, values, key, None, minimum=0, maximum=limit)
        ok = ok and (value is not None or values.get(key) is None)
        if value is not None:
            parts[unit] = value
    if not ok or not parts:
        return None
    total = timedelta(**parts)
    if total <= timedelta(0):
        at.child(next(k for k in _INTERVAL_UNITS if values.get(k) is not None)).error(
            "the interval (interval-days + interval-hours + interval-minutes) must be longer than zero")
        return None
    return format_iso_duration(total)


def _split_interval(value: object, where: str) -> dict[str, int]:
    minutes = whole_units(value, where, timedelta(minutes=1))
    parts = {"interval-days": minutes // 1440, "interval-hours": minutes % 1440 // 60, "interval-minutes": minutes % 60}
    return {key: amount for key, amount in parts.items() if amount} or {"interval-minutes": 0}


_SCHEDULE = LoaderSection(
    keys={**spelled(SCHEDULE_FIELDS, "interval", "timeout"), "timeout-hours": "timeout"},
    refused={"interval": written_as("interval-days, interval-hours or interval-minutes (summed)"),
             "timeout": written_as("timeout-hours")},
    combined={"interval": Combined(tuple(_INTERVAL_UNITS), _interval, _split_interval)},
    nested={"sla": LoaderSection(spelled(SLA_FIELDS)),  # max-age, severity, owner
            "after-write": LoaderSection(spelled(AFTER_WRITE_FIELDS))},  # settle, max-settle, dependency
)


def _operation_section(op: Operation) -> LoaderSection:
    """A kind's options: each field's kebab case, but for the spellings the kind declares as the loader's own."""
    spec = op.spec
    own = spec.loader()
    return LoaderSection(
        keys={**spelled(spec.fields, *own.keys.values(), *own.combined), **own.keys},
        refused=own.refused,
        nested=own.nested,
        combined=own.combined,
    )


_POLICY = LoaderSection(
    keys={**spelled(TOP_LEVEL_FIELDS, "tablePattern"), "pattern": "tablePattern"},
    refused={"table-pattern": written_as("pattern")},
    nested={
        # A kind whose config is not fields (tableProperties: Iceberg's own property names) is kept as written.
        **{kebab(op.policy_key): _operation_section(op) for op in ALL_OPERATIONS if op.spec.config_is_fields},
        **{kebab(op.schedule_key): _SCHEDULE for op in ALL_OPERATIONS},
        "trigger-conditions": LoaderSection(spelled(TRIGGER_CONDITION_FIELDS)),
        "health-thresholds": LoaderSection(spelled(HEALTH_THRESHOLD_FIELDS)),
        "ref-retention": LoaderSection(spelled(RULE_FIELDS)),  # a list of these mappings
        # Its keys name table properties (rewrite-data-files.target-file-size-bytes): the same in both formats.
        "owner-overrides": LoaderSection({"allow": "allow"}),
    },
    ignored=("created-at", "updated-at"),
)


def _paths(section: LoaderSection, api: str = "", written: str = "") -> dict[str, str]:
    """Every API path (``rewriteDataFiles.targetFileSizeBytes``) → its kebab-case path."""
    found: dict[str, str] = {}
    for key, api_key in section.keys.items():
        api_path, written_path = f"{api}{api_key}", f"{written}{key}"
        found[api_path] = written_path
        if key in section.nested:
            found.update(_paths(section.nested[key], api_path + ".", written_path + "."))
    for api_key, combined in section.combined.items():
        found[f"{api}{api_key}"] = f"{written}{'+'.join(combined.keys)}"
    return found


_PATHS = _paths(_POLICY)
# A field named in a message (``has no rewriteDataFilesSchedule``) → its kebab-case name.
_WORDS = {path.rsplit(".", 1)[-1]: written.rsplit(".", 1)[-1] for path, written in _PATHS.items()}
_CAMEL_WORD = re.compile(r"(?<![\w'])[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*(?![\w'])")


def _kebab_words(message: str) -> str:
    return _CAMEL_WORD.sub(lambda m: _WORDS.get(m.group(0), m.group(0)), message)


def translate_policy(raw: Mapping[str, object], at: Location) -> tuple[dict[str, object], dict[str, str]]:
    """A PolicyLoader-format policy as the API format's mapping, and each API path → the path as
    written (for :func:`kebab_lines`). Unknown and refused keys are reported at ``at``, as written."""
    paths = dict(_PATHS)
    return _translate(at, raw, _POLICY, "", "", paths), paths


def _translate(at: Location, raw: object, section: LoaderSection, api: str, written: str,
               paths: dict[str, str]) -> dict[str, object]:
    mapping = check_mapping(at, raw) or {}
    check_unknown(at, mapping, section.allowed, {k: _kebab_words(why) for k, why in section.refused.items()})
    result: dict[str, object] = {}
    for key, value in mapping.items():
        api_key = section.keys.get(key)
        if api_key is None:
            continue
        if key in section.nested and isinstance(value, Mapping):
            value = _translate(at.child(key), value, section.nested[key], f"{api}{api_key}.", f"{written}{key}.",
                               paths)
        elif key in section.nested and isinstance(value, list):  # mappings: partition-summaries, ref-retention
            for i in range(len(value)):
                paths.update(_paths(section.nested[key], f"{api}{api_key}[{i}].", f"{written}{key}[{i}]."))
            value = [_translate(at.child(key).child(i), item, section.nested[key], f"{api}{api_key}[{i}].",
                                f"{written}{key}[{i}].", paths) if isinstance(item, Mapping) else item
                     for i, item in enumerate(value)]
        result[api_key] = value
    for api_key, combined in section.combined.items():
        given = [k for k in combined.keys if mapping.get(k) is not None]
        if given:
            paths[f"{api}{api_key}"] = f"{written}{'+'.join(given)}"
            value = combined.combine(at, mapping)
            if value is not None:
                result[api_key] = value
    return result


def kebab_lines(lines: list[str], prefix: str, paths: Mapping[str, str]) -> list[str]:
    """The parser's messages about a translated policy, with its fields named as the file wrote them:
    ``<prefix>: rewriteDataFiles.zOrderColumns: …`` → ``<prefix>: rewrite-data-files.z-order-columns: …``."""
    head = prefix + ": "
    longest_first = sorted(paths, key=len, reverse=True)
    renamed = []
    for line in lines:
        rest = line[len(head):] if line.startswith(head) else ""
        path = next((p for p in longest_first if rest.startswith(p) and rest[len(p):len(p) + 1] in (":", ".", "[")),
                    None)
        if path is not None:
            tail, sep, message = rest[len(path):].partition(": ")
            line = head + paths[path] + _kebab_words(tail) + sep + _kebab_words(message)
        renamed.append(line)
    return renamed


__all__ = [
    "API_FORMAT", "LOADER_FORMAT", "FORMAT_NAMES", "TOP_LEVEL_FIELDS", "PolicyEntry", "policy_entries",
    "file_format", "policy_label", "translate_policy", "kebab_lines", "kebab",
]


# -- the other way: an API-format policy in the PolicyLoader format (floe-dagster import-floe) -------------


def to_loader_policy(document: Mapping[str, object]) -> dict[str, object]:
    """An API-format policy's mapping with the PolicyLoader format's keys (the translation above, the
    other way); ValueError naming the field when a value has no spelling there (a ``maxSnapshotAge``
    that is not whole days, an interval with seconds) or a key is unknown."""
    return _untranslate(document, _POLICY, "")


def _untranslate(mapping: Mapping[str, object], section: LoaderSection, where: str) -> dict[str, object]:
    spellings = {api_key: key for key, api_key in section.keys.items()}
    result: dict[str, object] = {}
    for key, value in mapping.items():
        if key in section.combined:
            result.update(section.combined[key].split(value, where + key))
            continue
        if key not in spellings:
            raise ValueError(f"{where}{key}: no PolicyLoader spelling")
        written, nested = spellings[key], section.nested.get(spellings[key])
        if nested is not None and isinstance(value, Mapping):
            value = _untranslate(value, nested, f"{where}{key}.")
        elif nested is not None and isinstance(value, list):
            value = [_untranslate(v, nested, f"{where}{key}[{i}].") if isinstance(v, Mapping) else v
                     for i, v in enumerate(value)]
        result[written] = value
    return result
