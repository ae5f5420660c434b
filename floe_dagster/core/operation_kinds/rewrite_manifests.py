"""REWRITE_MANIFESTS: Iceberg's ``rewrite_manifests``, the policy's ``rewriteManifests``. Floe's fields
of Iceberg's Java action are accepted with a warning saying what becomes of each: ``sortBy`` (the
procedure's sort_by where it has one), ``rewriteIf`` (only its specId reaches the procedure) and
``stagingLocation`` (kept, and withheld from every engine by the safety envelope)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from floe_dagster.core.basics.loader_format import LoaderSection, spelled
from floe_dagster.core.operation_config import OperationConfig, at_least, boolean, option, text, texts
from floe_dagster.core.operation_kinds.spec import ChecksRows, FloeNative, HoldsForWriters
from floe_dagster.core.basics.validation import (
    Location,
    check_mapping,
    check_unknown,
    describe,
    get_bool,
    get_enum,
    get_int,
    get_str,
    mapping_items,
)

MANIFEST_FILTER_FIELDS = (  # Floe's rewriteIf: one per ManifestFile field, compared for equality (AND)
    "path", "length", "specId", "content", "sequenceNumber", "minSequenceNumber", "snapshotId", "addedFilesCount",
    "existingFilesCount", "deletedFilesCount", "addedRowsCount", "existingRowsCount", "deletedRowsCount",
    "firstRowId", "keyMetadata", "partitionSummaries",
)
PARTITION_SUMMARY_FIELDS = ("containsNull", "containsNan", "lowerBound", "upperBound")


def _manifest_filter(at: Location, raw: Mapping[str, object], key: str) -> tuple[tuple[str, Any], ...] | None:
    """Floe's ``rewriteIf``: its fields checked by type, kept in the policy's order (the partition
    summaries as tuples of their fields)."""
    here = at.child(key)
    mapping = check_mapping(here, raw.get(key)) if raw.get(key) is not None else None
    if not mapping:
        return None
    check_unknown(here, mapping, MANIFEST_FILTER_FIELDS)
    kept: list[tuple[str, Any]] = []
    for name, value in mapping.items():
        if name not in MANIFEST_FILTER_FIELDS or value is None:
            continue
        if name == "partitionSummaries":
            value = _partition_summaries(here.child(name), value)
        elif name in ("path", "keyMetadata"):
            value = get_str(here, mapping, name, None, non_empty=False)
        elif name == "content":
            value = get_enum(here, mapping, name, ("DATA", "DELETES"), None)
        else:
            value = get_int(here, mapping, name, None)
        if value is not None:
            kept.append((name, value))
    return tuple(kept) or None


def _partition_summaries(at: Location, raw: object) -> tuple[tuple[tuple[str, str | bool], ...], ...] | None:
    if not isinstance(raw, (list, tuple)):
        at.error(f"expected a list of partition summaries, got {describe(raw)}")
        return None
    summaries = []
    for here, mapping in mapping_items(at, raw, PARTITION_SUMMARY_FIELDS, "a partition summary (a mapping)"):
        read = {name: get_bool(here, mapping, name, None) if name.startswith("contains")
                else get_str(here, mapping, name, None, non_empty=False) for name in PARTITION_SUMMARY_FIELDS}
        summaries.append(tuple((name, value) for name, value in read.items() if value is not None))
    return tuple(summaries)


def _filter_shown(value: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: [dict(s) for s in v] if k == "partitionSummaries" else v for k, v in value}


@dataclass(frozen=True)
class RewriteManifestsConfig(OperationConfig):
    spec_id: int | None = option(at_least(0))
    use_caching: bool | None = option(boolean)
    # Floe's fields of Iceberg's Java action (the spec's ``ignored`` says what becomes of each): ``sort_by``
    # is the procedure's sort_by where it has one (Spark 4.1 from Iceberg 1.11, 3.5 from 1.12);
    # ``rewrite_if`` (Floe's manifest filter, its fields in their policy's order) reaches the procedure only
    # through its specId; ``staging_location`` is kept and ignored.
    sort_by: tuple[str, ...] | None = option(texts)
    staging_location: str | None = option(text)
    rewrite_if: tuple[tuple[str, Any], ...] | None = option(_manifest_filter, shown=_filter_shown)

    @property
    def effective_spec_id(self) -> int | None:
        """``specId``, else ``rewriteIf.specId`` (a filter on one spec is the procedure's spec_id)."""
        return self.spec_id if self.spec_id is not None else dict(self.rewrite_if or ()).get("specId")


def _warn_manifest_filter(at: Location, config: RewriteManifestsConfig) -> None:
    """What becomes of Floe's rewriteIf: the procedure takes no manifest filter, so only a specId
    reaches it (as spec_id); every other field is named as ignored."""
    if config.rewrite_if is None:
        return
    at = at.child("rewriteIf")
    given = dict(config.rewrite_if or ())
    ignored = [key for key in given if key != "specId"]
    spec = given.get("specId")
    if spec is not None and config.spec_id is not None and spec != config.spec_id:
        at.child("specId").warn(f"{spec} differs from specId {config.spec_id}: specId {config.spec_id} is used "
                                "(Floe's Java action would have matched no manifest)")
    elif spec is not None:
        at.warn(f"the rewrite_manifests procedure takes no manifest filter: specId {spec} is passed as its spec_id"
                + (f"; ignored: {', '.join(ignored)}" if ignored else ""))
        return
    if ignored:
        at.warn(f"ignored: {', '.join(ignored)} (the rewrite_manifests procedure takes no manifest filter; it "
                "rewrites every manifest of the spec)")


# What becomes of Floe's fields of Iceberg's Java action that the procedure lacks (the warning a policy gets).
_IGNORED = {
    "stagingLocation": "ignored: it only says where Iceberg's Java action stages the new manifests; the "
                       "rewrite_manifests procedure writes them to the table's metadata location, and the safety "
                       "envelope never hands it to an engine",
    "sortBy": "passed as the procedure's sort_by where it has one (Spark 4.1 from Iceberg 1.11, Spark 3.5 from "
              "1.12); ignored on Spark 4.0 and on 3.5 with Iceberg 1.11 or 1.10, whose rewrite_manifests has "
              "no sort_by",
}
_LOADER = LoaderSection(nested={"rewrite-if": LoaderSection(
    spelled(MANIFEST_FILTER_FIELDS),
    nested={"partition-summaries": LoaderSection(spelled(PARTITION_SUMMARY_FIELDS))})})


class RewriteManifests(HoldsForWriters, ChecksRows, FloeNative):
    name = "REWRITE_MANIFESTS"
    policy_key = "rewriteManifests"
    procedure = "rewrite_manifests"
    order = 40
    config_type = RewriteManifestsConfig
    no_change = "`REWRITE_MANIFESTS` changed nothing when it rewrote no manifest."
    docs_row = (
        "| `REWRITE_MANIFESTS` | `rewrite_manifests` | `rewriteManifests`: `specId`, `useCaching`, and Floe's "
        "fields of Iceberg's Java action, accepted with a warning: `sortBy` (the procedure's `sort_by` where it "
        "has one: Spark 4.1 from Iceberg 1.11, Spark 3.5 from 1.12; ignored on 4.0), `rewriteIf` (only its "
        "`specId` reaches the procedure, as `spec_id`; the warning names the fields ignored), `stagingLocation` "
        "(ignored: the procedure writes new manifests to the metadata location; never handed to an engine) |")

    def ignored(self) -> Mapping[str, str]:
        return _IGNORED

    def withheld_fields(self) -> tuple[str, ...]:
        return ("staging_location",)  # Floe's Java action staged manifests there

    def loader(self) -> LoaderSection:
        return _LOADER

    def check(self, at: Location, config: RewriteManifestsConfig) -> None:
        _warn_manifest_filter(at, config)

    def changed(self, numbers: Mapping[str, int]) -> bool:
        return numbers["rewritten_manifests_count"] > 0


SPEC = RewriteManifests()
