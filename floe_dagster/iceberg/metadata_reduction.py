"""Iceberg metadata reduced to :class:`TableMetrics`, with PyIceberg only (no Spark, no data file read).

``summary`` tier
    The table's metadata file alone (snapshots, their times, the current snapshot's summary totals).
``full`` tier
    Also the current snapshot's manifest list and manifests: each manifest's live entries reduced to
    plain numbers (:func:`summarize_manifest`, cached by path since manifests are immutable), then
    the numbers of the whole table (core/facts/manifest_reduction.py).

Each stored fact (core/facts/fact_catalogue.py) is measured by its reducer (iceberg/fact_reducers/): this module
holds what they share (the reduced manifest, the refs, the specs, the metadata file counts) and the two
tiers' entry points.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from datetime import date, datetime
from datetime import time as dt_time
from decimal import Decimal
from typing import Any, Iterable, Mapping
from uuid import UUID

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFileContent, ManifestEntry, ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from floe_dagster.core.facts.measurements import RefFacts, TableMetrics
from floe_dagster.core.schedules.quiet import OWN_OPERATION
from floe_dagster.core.facts.ref_pins import RefHead, SnapshotNode, pinned_snapshots
from floe_dagster.core.facts.refs import MAIN
from floe_dagster.core.facts.table_facts import FULL, SUMMARY
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.fact_reducers import MetadataRead, manifest_parts, measure

PATH_FIELD_ID = 2147483546  # the file_path column of position delete files


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, (date, datetime, dt_time)):
        return value.isoformat()
    return str(value)


def partition_key(values: Iterable[object]) -> str:
    """A partition value as a compact JSON list (the key estimates and partition counts use)."""
    return json.dumps([_jsonable(v) for v in values], separators=(",", ":"))


def path_hash(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "big") >> 1


def _file_scoped_path(data_file: Any) -> str | None:
    """The one data file a position delete file refers to (Iceberg's ``ContentFileUtil.isFileScoped``):
    ``referenced_data_file`` (v3), or equal lower and upper bounds on its ``file_path`` column."""
    referenced = None
    with contextlib.suppress(AttributeError, IndexError, KeyError):
        referenced = data_file.referenced_data_file
    if referenced:
        return referenced
    lower, upper = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    low, high = lower.get(PATH_FIELD_ID), upper.get(PATH_FIELD_ID)
    if low is not None and low == high:
        try:
            return bytes(low).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def summarize_manifest(manifest: ManifestFile, entries: list[ManifestEntry]) -> dict[str, object]:
    """A manifest's live entries reduced to the numbers health and estimates need.

    ``{"content": 0|1, "spec": spec id, "partitions": [partition key, ...], "files": [...]}`` where
    a data file is ``[partition index, size, records, data sequence number, path hash]`` and a delete
    file is ``[content (1 position, 2 equality), partition index, size, records, data sequence number,
    hash of the data file it is scoped to or null]``, then each registered manifest part under its name.
    """
    partitions: dict[str, int] = {}
    files: list[list[object]] = []
    for entry in entries:
        data_file = entry.data_file
        values = data_file.partition
        key = partition_key(values[i] for i in range(len(values))) if values is not None else "[]"
        index = partitions.setdefault(key, len(partitions))
        seq = entry.sequence_number or 0
        content = int(data_file.content) if data_file.content is not None else 0
        if content == DataFileContent.DATA:
            files.append([index, data_file.file_size_in_bytes, data_file.record_count, seq,
                          path_hash(data_file.file_path)])
        else:
            scoped = _file_scoped_path(data_file) if content == DataFileContent.POSITION_DELETES else None
            files.append([
                content, index, data_file.file_size_in_bytes, data_file.record_count, seq,
                path_hash(scoped) if scoped else None,
            ])
    reduced = {
        "content": int(manifest.content),
        "spec": manifest.partition_spec_id,
        "partitions": list(partitions),
        "files": files,
    }
    for part in manifest_parts():  # what a fact needs of each manifest beyond these (iceberg/fact_reducers/)
        reduced[part.name] = part.reduce(manifest, entries)
    return reduced


def _operation(snapshot: Snapshot) -> str:
    """A snapshot's operation as Iceberg writes it (``append``, ``replace``, ...); ``unknown`` when its
    summary is missing (old format 1 writers)."""
    summary = snapshot.summary
    if summary is None or summary.operation is None:
        return "unknown"
    return getattr(summary.operation, "value", str(summary.operation))


def newest_foreign_commit(snapshots: Iterable[Snapshot]) -> tuple[int | None, str | None]:
    """(time in ms, operation) of the newest snapshot another writer committed: any operation but
    ``replace``, which is every commit of floe's own (core/schedules/quiet.py); (None, None) when none is retained."""
    newest: Snapshot | None = None
    for snapshot in snapshots:
        if (newest is None or snapshot.timestamp_ms > newest.timestamp_ms) and _operation(snapshot) != OWN_OPERATION:
            newest = snapshot
    return (newest.timestamp_ms, _operation(newest)) if newest is not None else (None, None)


def ref_heads(metadata: TableMetadata) -> dict[str, RefHead]:
    """Every ref (main too) as the retention rules need it."""
    return {name: RefHead(getattr(ref.snapshot_ref_type, "value", str(ref.snapshot_ref_type)), ref.snapshot_id,
                          ref.max_snapshot_age_ms, ref.min_snapshots_to_keep)
            for name, ref in metadata.refs.items()}


def pinned_by_ref(metadata: TableMetadata, now_ms: int) -> dict[str, set[int]]:
    """Each non-main ref → the snapshots it alone keeps beyond main's retention (core/facts/ref_pins.py)."""
    if all(name == MAIN for name in metadata.refs):  # most tables: no walk over the snapshots
        return {}
    nodes = {s.snapshot_id: SnapshotNode(s.parent_snapshot_id, s.timestamp_ms) for s in metadata.snapshots}
    return pinned_snapshots(nodes, ref_heads(metadata), now_ms, metadata.properties)


def measured_refs(metadata: TableMetadata, now_ms: int,
                  pinned_files: Mapping[str, tuple[int, int]] | None = None) -> tuple[RefFacts, ...]:
    """The non-main refs, by name, with their pinned snapshots; ``pinned_files``: name → (files, bytes)
    where the full tier measured them."""
    pinned = pinned_by_ref(metadata, now_ms)
    facts = []
    for name, ref in sorted(metadata.refs.items()):
        if name == MAIN:
            continue
        head = metadata.snapshot_by_id(ref.snapshot_id)
        files, size = (pinned_files or {}).get(name, (None, None))
        facts.append(RefFacts(
            name, getattr(ref.snapshot_ref_type, "value", str(ref.snapshot_ref_type)), ref.snapshot_id,
            head.timestamp_ms if head is not None else None, ref.max_ref_age_ms, ref.max_snapshot_age_ms,
            ref.min_snapshots_to_keep, len(pinned.get(name, ())), files, size,
        ))
    return tuple(facts)


_VERSIONED_NAME = re.compile(r"^(?:v)?(\d+)[-.]")  # 00042-<uuid>.metadata.json, v42.metadata.json


def metadata_files_written(metadata_location: str | None) -> int | None:
    """How many metadata.json files the table's commits wrote: the current file's version number + 1
    (the first file is version 0, or v1 for Hadoop tables, whose numbering starts at 1); None when
    the name carries no number."""
    name = (metadata_location or "").rsplit("/", 1)[-1]
    found = _VERSIONED_NAME.match(name)
    if found is None:
        return None
    version = int(found.group(1))
    return version if name.startswith("v") else version + 1


def partition_specs(metadata: TableMetadata) -> tuple[tuple[int, tuple[tuple[int, str | None, str, str], ...]], ...]:
    """Every partition spec as ``TableMetrics.partition_specs`` keeps it: its fields' source column (id,
    path in the current schema or None, type) and transform, so a ``where`` on source columns can be
    judged against the files of each spec (core/rewrites/partition_scope.py)."""
    schema = metadata.schema()
    specs = []
    for spec_id, spec in sorted(metadata.specs().items()):
        fields = []
        for f in spec.fields:
            try:
                name, source_type = schema.find_column_name(f.source_id), str(schema.find_type(f.source_id))
            except ValueError:  # the source column was dropped from the schema
                name, source_type = None, ""
            fields.append((f.source_id, name, str(f.transform), source_type))
        specs.append((spec_id, tuple(fields)))
    return tuple(specs)


def summary_metrics(
    table: TableName,
    metadata_location: str,
    metadata: TableMetadata,
    collected_at_ms: int,
    io: FileIO | None = None,
) -> TableMetrics:
    """The summary tier: the metadata file and the current snapshot's summary. When the summary lacks
    totals (some writers omit them) and ``io`` is given, counts come from the manifest list instead."""
    return measure(MetadataRead(table, metadata_location, metadata, collected_at_ms, SUMMARY, io=io))


def full_metrics(
    table: TableName,
    metadata_location: str,
    metadata: TableMetadata,
    manifests: list[ManifestFile],
    summaries: Mapping[str, Mapping[str, object]],
    collected_at_ms: int,
    pinned_files: Mapping[str, tuple[int, int]] | None = None,
) -> TableMetrics:
    """The full tier, from the current snapshot's manifests (reduced by :func:`summarize_manifest`);
    ``pinned_files``: each ref's (files, bytes) it alone keeps (the collector reads them)."""
    return measure(MetadataRead(table, metadata_location, metadata, collected_at_ms, FULL, manifests=manifests,
                                summaries=summaries, pinned_files=pinned_files))
