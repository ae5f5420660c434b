"""Declared table properties (a policy's ``tableProperties``): which names Iceberg knows, their values
checked where it is cheap, and the drift between what a policy declares and what a table has.

The names are Iceberg 1.11's and 1.12's ``org.apache.iceberg.TableProperties`` constants (read from the
iceberg-spark-runtime jars with ``javap -constants``; the same list as the "Table properties" section of
Iceberg's configuration docs; 1.12 added three Parquet ones and dropped ``write.manifest-lists.enabled``,
kept for the 1.11 and 1.10 runtimes still selectable), plus the column families Iceberg defines by a
prefix ending in ``.column.`` (``write.metadata.metrics.column.<col>``,
``write.parquet.bloom-filter-enabled.column.<col>``, ...). The properties Iceberg reserves for its own
bookkeeping (``format-version``, ``uuid``, ``current-snapshot-id``, ...) are refused: no policy sets
them. Anything else is refused with the policy, the file and the key in the message, and the closest
known name.

Values are kept as the text Iceberg stores: a YAML boolean is ``true``/``false``, a number its digits.
Two values are the same when Iceberg reads them the same (booleans and modes without case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from floe_dagster.core.storage.storage_keys import storage_refusal
from floe_dagster.core.basics.secrets import masked
from floe_dagster.core.basics.validation import Location, check_mapping, closest, describe

PROPERTIES = frozenset({
    "comment",
    "commit.manifest-merge.enabled", "commit.manifest.min-count-to-merge", "commit.manifest.target-size-bytes",
    "commit.retry.max-wait-ms", "commit.retry.min-wait-ms", "commit.retry.num-retries",
    "commit.retry.total-timeout-ms", "commit.status-check.max-wait-ms", "commit.status-check.min-wait-ms",
    "commit.status-check.num-retries", "commit.status-check.total-timeout-ms",
    "compatibility.snapshot-id-inheritance.enabled",
    "encryption.data-key-length", "encryption.key-id",
    "engine.hive.enabled", "engine.hive.lock-enabled",
    "gc.enabled",
    "history.expire.max-ref-age-ms", "history.expire.max-snapshot-age-ms", "history.expire.min-snapshots-to-keep",
    "identifier-fields.rely",
    "read.data-planning-mode", "read.delete-planning-mode",
    "read.orc.vectorization.batch-size", "read.orc.vectorization.enabled",
    "read.parquet.vectorization.batch-size", "read.parquet.vectorization.enabled",
    "read.split.adaptive-size.enabled", "read.split.metadata-target-size", "read.split.open-file-cost",
    "read.split.planning-lookback", "read.split.target-size",
    "schema.name-mapping.default",
    "write.avro.compression-codec", "write.avro.compression-level",
    "write.data.path", "write.folder-storage.path", "write.location-provider.impl", "write.metadata.path",
    "write.object-storage.enabled", "write.object-storage.partitioned-paths", "write.object-storage.path",
    "write.delete.avro.compression-codec", "write.delete.avro.compression-level",
    "write.delete.distribution-mode", "write.delete.format.default", "write.delete.granularity",
    "write.delete.isolation-level", "write.delete.mode",
    "write.delete.orc.block-size-bytes", "write.delete.orc.compression-codec",
    "write.delete.orc.compression-strategy", "write.delete.orc.stripe-size-bytes",
    "write.delete.orc.vectorized.batch-size",
    "write.delete.parquet.compression-codec", "write.delete.parquet.compression-level",
    "write.delete.parquet.dict-size-bytes", "write.delete.parquet.page-row-limit",
    "write.delete.parquet.page-size-bytes", "write.delete.parquet.page-version",
    "write.delete.parquet.row-group-check-max-record-count",
    "write.delete.parquet.row-group-check-min-record-count", "write.delete.parquet.row-group-size-bytes",
    "write.delete.target-file-size-bytes",
    "write.distribution-mode", "write.format.default",
    "write.manifest-lists.enabled", "write.manifest.compression-codec", "write.manifest.compression-level",
    "write.merge.distribution-mode", "write.merge.isolation-level", "write.merge.mode",
    "write.metadata.compression-codec", "write.metadata.delete-after-commit.enabled",
    "write.metadata.metrics.default", "write.metadata.metrics.max-inferred-column-defaults",
    "write.metadata.previous-versions-max",
    "write.orc.block-size-bytes", "write.orc.bloom.filter.columns", "write.orc.bloom.filter.fpp",
    "write.orc.compression-codec", "write.orc.compression-strategy", "write.orc.stripe-size-bytes",
    "write.orc.vectorized.batch-size",
    "write.parquet.bloom-filter-adaptive-enabled", "write.parquet.row-group-size-track-uncompressed",  # 1.12
    "write.parquet.bloom-filter-max-bytes", "write.parquet.compression-codec", "write.parquet.compression-level",
    "write.parquet.dict-size-bytes", "write.parquet.page-row-limit", "write.parquet.page-size-bytes",
    "write.parquet.page-version", "write.parquet.row-group-check-max-record-count",
    "write.parquet.row-group-check-min-record-count", "write.parquet.row-group-size-bytes",
    "write.parquet.shred-variants", "write.parquet.variant-inference-buffer-size",
    "write.spark.accept-any-schema", "write.spark.advisory-partition-size-bytes",
    "write.spark.auto-schema-evolution.enabled", "write.spark.fanout.enabled",
    "write.summary.partition-limit", "write.target-file-size-bytes",
    "write.update.distribution-mode", "write.update.isolation-level", "write.update.mode",
    "write.upsert.enabled", "write.wap.enabled",
})
# Families Iceberg defines by a prefix: one property per column, the column's name after the prefix.
COLUMN_FAMILIES = (
    "write.metadata.metrics.column.", "write.parquet.bloom-filter-enabled.column.",
    "write.parquet.bloom-filter-fpp.column.", "write.parquet.bloom-filter-ndv.column.",
    "write.parquet.stats-enabled.column.", "write.parquet.dict-encoding-enabled.column.",  # the last: 1.12
)
# TableProperties.RESERVED_PROPERTIES: Iceberg's own bookkeeping, never set through properties here.
RESERVED = frozenset({
    "format-version", "uuid", "snapshot-count", "current-snapshot-id", "current-snapshot-summary",
    "current-snapshot-timestamp-ms", "current-schema", "default-partition-spec", "default-sort-order",
})

DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"

# Cheap value checks. Iceberg reads booleans with Java's Boolean.parseBoolean (anything but "true" is
# false: "yes" would silently turn a feature off) and modes by name without case.
_BOOLEAN_FAMILIES = ("write.parquet.bloom-filter-enabled.column.", "write.parquet.stats-enabled.column.",
                     "write.parquet.dict-encoding-enabled.column.")
_BOOLEANS = frozenset({name for name in PROPERTIES if name.endswith((".enabled", "-enabled"))} | {
    "identifier-fields.rely", "write.object-storage.partitioned-paths", "write.spark.accept-any-schema",
    "write.parquet.shred-variants", "write.parquet.row-group-size-track-uncompressed",
})
_CHOICES = {
    **{f"write.{kind}.mode": ("copy-on-write", "merge-on-read") for kind in ("delete", "update", "merge")},
    **{name: ("none", "hash", "range") for name in (
        "write.distribution-mode", "write.delete.distribution-mode", "write.update.distribution-mode",
        "write.merge.distribution-mode")},
    **{f"write.{kind}.isolation-level": ("serializable", "snapshot") for kind in ("delete", "update", "merge")},
    "write.delete.granularity": ("file", "partition"),
    "write.format.default": ("parquet", "avro", "orc"),
    "write.delete.format.default": ("parquet", "avro", "orc"),
}
# Positive whole numbers (sizes, counts, times); the retry counts and limits may be 0.
_NON_NEGATIVE = frozenset({"commit.retry.num-retries", "commit.status-check.num-retries",
                           "write.summary.partition-limit", "write.metadata.metrics.max-inferred-column-defaults"})
_POSITIVE = frozenset({
    name for name in PROPERTIES
    if name.endswith(("-bytes", "-ms", "-size", "batch-size", "-limit", "-count", "-max", "-to-keep",
                      "-to-merge", "planning-lookback", "open-file-cost", "data-key-length"))
} - _NON_NEGATIVE)


# The numbers Iceberg reads as Java longs (their defaults in TableProperties are longs); it reads the
# others as ints, and a larger value would make every reader of the property fail.
_LONGS = frozenset({
    "commit.manifest.target-size-bytes", "commit.status-check.min-wait-ms", "commit.status-check.max-wait-ms",
    "commit.status-check.total-timeout-ms", "history.expire.max-ref-age-ms", "history.expire.max-snapshot-age-ms",
    "read.split.target-size", "read.split.metadata-target-size", "read.split.open-file-cost",
    "write.orc.stripe-size-bytes", "write.orc.block-size-bytes", "write.delete.orc.stripe-size-bytes",
    "write.delete.orc.block-size-bytes", "write.target-file-size-bytes", "write.delete.target-file-size-bytes",
    "write.spark.advisory-partition-size-bytes",
})
_INT_MAX, _LONG_MAX = 2**31 - 1, 2**63 - 1
_WHOLE = re.compile(r"-?[0-9]+")  # ASCII digits only (str.isdigit accepts '²', which int() refuses)


def property_family(name: str) -> str | None:
    """The column family a name belongs to (``write.metadata.metrics.column.``), or None."""
    return next((prefix for prefix in COLUMN_FAMILIES if name.startswith(prefix) and len(name) > len(prefix)), None)


def is_table_property(name: str) -> bool:
    return name in PROPERTIES or property_family(name) is not None


def same_value(name: str, declared: str, current: str | None) -> bool:
    """Whether Iceberg reads the two values the same (booleans and modes without case)."""
    if current is None:
        return False
    if name in _BOOLEANS or property_family(name) in _BOOLEAN_FAMILIES or name in _CHOICES:
        return declared.strip().lower() == current.strip().lower()
    return declared == current


def parse_table_properties(at: Location, raw: object) -> tuple[tuple[str, str], ...] | None:
    """The declared properties as (name, value text) pairs in the policy's order; every problem is
    recorded at ``at`` (``<file>: policy '<name>': tableProperties.<key>: ...``). None: not a mapping."""
    mapping = check_mapping(at, raw, "a mapping of Iceberg table property names to values")
    if mapping is None:
        return None
    declared: list[tuple[str, str]] = []
    for name, value in mapping.items():
        text = _checked(at.child(name), name, value)
        if text is not None:
            declared.append((name, text))
    if not mapping:
        at.warn("declares no properties: APPLY_TABLE_PROPERTIES has nothing to apply")
    return tuple(declared)


def _checked(at: Location, name: str, value: object) -> str | None:
    if name in RESERVED:
        at.error(f"'{name}' is reserved by Iceberg (it keeps the table's own bookkeeping); a policy cannot "
                 "declare it")
        return None
    storage = storage_refusal(name)
    if storage is not None:  # the envelope's refusal, said here rather than "not an Iceberg table property"
        at.error(storage)
        return None
    if not is_table_property(name):
        hint = closest(name, PROPERTIES)
        at.error(f"'{name}' is not an Iceberg table property" + (f"; did you mean '{hint}'?" if hint else "")
                 + " (docs/policies.md, \"Table properties\", lists the names and column families accepted)")
        return None
    if value is None or isinstance(value, (list, tuple, Mapping)):
        at.error(f"expected a value (text, a number or true/false), got {describe(value)}")
        return None
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if "\x00" in text:
        at.error("must not contain a NUL character")
        return None
    if name in _BOOLEANS or property_family(name) in _BOOLEAN_FAMILIES:
        if text.strip().lower() not in ("true", "false"):
            at.error(f"expected true or false, got {describe(value)} (Iceberg reads anything but true as false)")
            return None
        return text.strip().lower()
    if name in _CHOICES:
        if text.strip().lower() not in _CHOICES[name]:
            at.error(f"expected one of {', '.join(_CHOICES[name])}, got {describe(value)}")
            return None
        return text.strip().lower()
    if name in _POSITIVE or name in _NON_NEGATIVE:
        minimum = 0 if name in _NON_NEGATIVE else 1
        whole = int(text.strip()) if not isinstance(value, bool) and _WHOLE.fullmatch(text.strip()) else None
        maximum = _LONG_MAX if name in _LONGS else _INT_MAX
        if whole is None or not minimum <= whole <= maximum:
            at.error(f"expected a whole number from {minimum} to {maximum}, got {describe(value)}"
                     + (" (Iceberg reads it as a Java int)" if maximum == _INT_MAX else ""))
            return None
        return str(whole)
    return text


@dataclass(frozen=True)
class PropertyDrift:
    """One declared property whose table value differs: ``current`` None when the table does not set it."""

    name: str
    declared: str
    current: str | None

    def to_json(self) -> dict[str, object]:
        """As every output shows it: the values masked when the name is a secret key (core/basics/secrets.py)."""
        return masked({"key": self.name, "declared": self.declared, "current": self.current})

    def describe(self) -> str:
        return _drift_text(self.name, self.declared, self.current)


@lru_cache(maxsize=4096)
def _drift_text(name: str, declared: str, current: str | None) -> str:
    """:meth:`PropertyDrift.describe`, kept per (name, declared, current): the drift gate tells it for every
    table that lacks a declared property (most lack the same ones, unset), and the masking scans each value."""
    shown = PropertyDrift(name, declared, current).to_json()
    current_text = "unset" if current is None else repr(shown["current"])
    return f"{name}: declared {shown['declared']!r}, table has {current_text}"


def property_drift(declared: tuple[tuple[str, str], ...] | Mapping[str, str],
                   current: Mapping[str, str]) -> tuple[PropertyDrift, ...]:
    """The declared properties whose value on the table differs (in the policy's order); properties the
    policy does not name are never looked at."""
    items = declared.items() if isinstance(declared, Mapping) else declared
    return tuple(PropertyDrift(name, value, current.get(name)) for name, value in items
                 if not same_value(name, value, current.get(name)))


__all__ = [
    "PROPERTIES", "COLUMN_FAMILIES", "RESERVED", "DELETE_AFTER_COMMIT", "PREVIOUS_VERSIONS_MAX", "PropertyDrift",
    "is_table_property", "property_family", "same_value", "parse_table_properties", "property_drift",
]
