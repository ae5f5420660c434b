"""EXPIRE_SNAPSHOTS: Iceberg's ``expire_snapshots``, the policy's ``expireSnapshots``. Before it, a run
sets the policy's ``refRetention`` on the table's refs (core/facts/refs.py's rules, core/facts/ref_retention_changes.py
sets them), so the expiry removes the branches
and tags older than their limit; ``explain`` shows what the next expiry does to them (``refs``) and the
arguments it passes, each with where it came from (``expiryArguments``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Mapping

from floe_dagster.core.basics.durations import MAX_DURATION, format_iso_duration, parse_iso_duration
# Floe's defaults, applied by the engine when a field is unset (after the table's bounded history.expire.*
# properties: core/facts/expiry_defaults.py).
from floe_dagster.core.facts.expiry_defaults import (
    DEFAULT_MAX_SNAPSHOT_AGE, DEFAULT_RETAIN_LAST, expiry_arguments, ref_age_default,
)
from floe_dagster.core.basics.loader_format import Combined, LoaderSection, whole_units, written_as
from floe_dagster.core.operation_config import OperationConfig, any_int, at_least, boolean, option
from floe_dagster.core.operation_kinds.spec import ExplainView, FloeNative, HoldsForWriters, NeedsGc
from floe_dagster.core.facts.refs import ref_report
from floe_dagster.core.storage.table_location import nested_tables
from floe_dagster.core.basics.validation import Location, get_int, get_str


def _duration(at: Location, raw: Mapping[str, object], key: str) -> str | None:
    age = get_str(at, raw, key, None)
    if age is None:
        return None
    try:
        parse_iso_duration(age)
    except ValueError as exc:
        at.child(key).error(str(exc))
        return None
    return age.strip().upper()


@dataclass(frozen=True)
class ExpireSnapshotsConfig(OperationConfig):
    retain_last: int | None = option(at_least(1))
    max_snapshot_age: str | None = option(_duration)  # an ISO-8601 duration, upper-cased (``PT0S``)
    clean_expired_metadata: bool | None = option(boolean)
    stream_results: bool | None = option(boolean)
    expire_snapshot_id: int | None = option(any_int)  # Floe's: kept, never sent (ignored)
    # The tables this one may nest with (Hive-style layouts), named exactly: without it, a table whose location
    # holds or lies inside another table's is refused by the safety envelope (core/storage/table_location.py).
    nested_tables: tuple[str, ...] | None = option(nested_tables)


def _days_as_duration(at: Location, values: Mapping[str, object]) -> str | None:
    days = get_int(at, values, "max-snapshot-age-days", None, minimum=0, maximum=MAX_DURATION.days)
    return f"P{days}D" if days is not None else None


def _refs(view: ExplainView) -> dict[str, object]:
    """What the next snapshot expiry does to the branches and tags: the policy's ``refRetention`` rules,
    and each ref with its age and limit (``stale``: the run removes it, once the rule is set as its
    max-ref-age; core/facts/refs.py). None: no rules and no refs measured."""
    rules = view.policy.ref_retention if view.policy is not None else ()
    metrics = view.metrics
    refs = ref_report(metrics.refs if metrics is not None else None, rules, metrics.properties if metrics else {},
                      view.now)
    if not rules and not refs:
        return {"refs": None}
    return {"refs": {"rules": [rule.to_json() for rule in rules], "refs": refs}}


_IGNORED = {
    "expireSnapshotId": "ignored: Floe stored it and never sent it to the engine (Iceberg's expire_snapshots "
                        "procedure takes a snapshot_ids list); retainLast and maxSnapshotAge decide",
}
_LOADER = LoaderSection(
    refused={"max-snapshot-age": written_as("max-snapshot-age-days (whole days)")},
    combined={"maxSnapshotAge": Combined(
        ("max-snapshot-age-days",), _days_as_duration,
        lambda value, where: {"max-snapshot-age-days": whole_units(value, where, timedelta(days=1))})},
)


def expiry_view(view: ExplainView) -> dict[str, object] | None:
    """What the next expiry passes and where each came from (the policy, a table's owner override, the
    table's ``history.expire.*`` property, or floe's default), as a run decides it (core/facts/expiry_defaults.py)
    from the table's properties as the last health read them; and the age at which it removes a branch or
    tag with no age of its own nor refRetention rule (Iceberg reads that property itself; a ref's own age
    and the policy's rules are under ``refs``). None: the policy does not configure the expiry."""
    config = view.config
    if config is None:
        return None
    owner = view.owner_overrides
    config = replace(config, **{field: value for field, (_, value) in owner.items()}) if owner else config
    properties = view.metrics.properties if view.metrics is not None else {}
    chosen = expiry_arguments(config.retain_last, config.max_snapshot_age, properties)
    shown = chosen.to_json()
    for field, key in (("retain_last", "retainLastFrom"), ("max_snapshot_age", "maxSnapshotAgeFrom")):
        if field in owner:  # the policy's field, set by the table's floe.* property the policy allows
            shown[key] = f"owner override {owner[field][0]}"
    refs = ref_age_default(properties)
    return {
        "olderThan": (view.now - chosen.max_age).isoformat(), "olderThanFrom": shown["maxSnapshotAgeFrom"],
        "maxSnapshotAge": format_iso_duration(chosen.max_age), **shown,
        "maxRefAgeMs": refs.max_ref_age_ms, "maxRefAgeFrom": refs.source,
        "adjusted": [*chosen.adjusted, *([refs.adjusted] if refs.adjusted else [])],
        "tableProperties": "as the last health read them" if view.metrics is not None else
        "not read yet (no health): a run reads the table's own",
    }


class ExpireSnapshots(HoldsForWriters, NeedsGc, FloeNative):
    name = "EXPIRE_SNAPSHOTS"
    policy_key = "expireSnapshots"
    procedure = "expire_snapshots"
    order = 20
    config_type = ExpireSnapshotsConfig
    no_change = "`EXPIRE_SNAPSHOTS` changed nothing when it deleted no file and removed no branch or tag."
    docs_row = (
        "| `EXPIRE_SNAPSHOTS` | `expire_snapshots` | `expireSnapshots`: `retainLast`, `maxSnapshotAge` (ISO-8601, "
        "e.g. `P7D`), `cleanExpiredMetadata`, `streamResults`; unset ones default to the table's "
        "`history.expire.*` properties, then Floe's 5 and `P7D` |")

    def applies_ref_retention(self) -> bool:
        return True

    def defaults(self) -> Mapping[str, object]:
        return {"retainLast": DEFAULT_RETAIN_LAST, "maxSnapshotAge": DEFAULT_MAX_SNAPSHOT_AGE}

    def ignored(self) -> Mapping[str, str]:
        return _IGNORED

    def loader(self) -> LoaderSection:
        return _LOADER

    def explain(self, view: ExplainView) -> dict[str, object]:
        return {**_refs(view), "expiryArguments": expiry_view(view)}


SPEC = ExpireSnapshots()
