"""The full tier's numbers from the current snapshot's manifests, each already reduced to plain numbers
(iceberg/metadata_reduction.py's ``summarize_manifest``): data file sizes and records, partitions, and
which delete files apply to each data file, as Iceberg's ``DeleteFileIndex`` decides. Pure.

A reduced manifest is ``{"content": 0|1, "spec": spec id, "partitions": [partition key, ...],
"files": [...]}`` where a data file is ``[partition index, size, records, data sequence number, path
hash]`` and a delete file is ``[content (1 position, 2 equality), partition index, size, records, data
sequence number, hash of the data file it is scoped to or null]``.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

from floe_dagster.core.facts.measurements import data_group_key

DATA_MANIFEST = 0  # Iceberg's ManifestContent.DATA
# The stored facts (core/facts/fact_catalogue.py) :func:`full_tier_fields` measures.
FULL_TIER_FACTS = (
    "data_file_count", "total_data_bytes", "record_count", "data_file_sizes", "delete_file_count",
    "position_delete_file_count", "equality_delete_file_count", "manifest_count", "manifest_total_bytes",
    "partition_count", "max_files_per_partition", "data_file_groups", "position_delete_groups",
)
POSITION_DELETES, EQUALITY_DELETES = 1, 2  # Iceberg's DataFileContent


@dataclass(frozen=True)
class PartitionSpecs:
    """What the reduction needs of the table's partition specs."""

    field_ids: Mapping[int, list[int]]  # spec id → its partition fields' ids
    current: int  # the default spec's id
    unpartitioned: frozenset[int]  # the ids of specs without partition fields

    @cached_property
    def unified_field_ids(self) -> list[int]:
        return sorted({fid for ids in self.field_ids.values() for fid in ids})


@dataclass
class _DeleteFiles:
    scoped_position: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # data file hash → [(seq, records)]
    partition_position: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # (spec, partition) → seqs
    partition_equality: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    global_equality: list[int] = field(default_factory=list)
    position_sizes: dict[str, list[int]] = field(default_factory=dict)  # unified partition → sizes
    position_count: int = 0
    equality_count: int = 0

    def applying(self, spec_id: int, key: str, seq: int, hashed: int) -> tuple[int, int]:
        """(delete files that apply to a data file, rows its file-scoped position deletes remove):
        position deletes with a sequence number at or after the data file's, equality deletes
        strictly after it."""
        deletes = scoped_rows = 0
        for delete_seq, delete_records in self.scoped_position.get(hashed, ()):
            if delete_seq >= seq:
                deletes += 1
                scoped_rows += delete_records
        seqs = self.partition_position.get((spec_id, key))
        if seqs:
            deletes += len(seqs) - bisect_left(seqs, seq)
        seqs = self.partition_equality.get((spec_id, key))
        if seqs:
            deletes += len(seqs) - bisect_right(seqs, seq)
        if self.global_equality:
            deletes += len(self.global_equality) - bisect_right(self.global_equality, seq)
        return deletes, scoped_rows


def _unified(specs: PartitionSpecs, spec_id: int, key: str) -> str:
    """A partition in the union of all specs' fields (Iceberg's ``Partitioning.partitionType``)."""
    values = dict(zip(specs.field_ids.get(spec_id, []), json.loads(key)))
    return json.dumps([values.get(fid) for fid in specs.unified_field_ids], separators=(",", ":"))


def _split_files(reduced_manifests: Sequence[Mapping[str, Any]], specs: PartitionSpecs
                 ) -> tuple[list[tuple[int, str, int, int, int, int]], _DeleteFiles]:
    """The live data files (spec, partition, size, records, seq, path hash) and the delete files, indexed."""
    data: list[tuple[int, str, int, int, int, int]] = []
    deletes = _DeleteFiles()
    for reduced in reduced_manifests:
        spec_id, keys = reduced["spec"], reduced["partitions"]
        if reduced["content"] == DATA_MANIFEST:
            data.extend((spec_id, keys[index], size, records, seq, hashed)
                        for index, size, records, seq, hashed in reduced["files"])
            continue
        for content, index, size, records, seq, scoped in reduced["files"]:
            key = keys[index]
            if content == POSITION_DELETES:
                deletes.position_count += 1
                deletes.position_sizes.setdefault(_unified(specs, spec_id, key), []).append(size)
                if scoped is not None:
                    deletes.scoped_position.setdefault(scoped, []).append((seq, records))
                else:
                    deletes.partition_position.setdefault((spec_id, key), []).append(seq)
            elif content == EQUALITY_DELETES:
                deletes.equality_count += 1
                if spec_id in specs.unpartitioned:
                    deletes.global_equality.append(seq)
                else:
                    deletes.partition_equality.setdefault((spec_id, key), []).append(seq)
    for seqs in (*deletes.partition_position.values(), *deletes.partition_equality.values(), deletes.global_equality):
        seqs.sort()
    return data, deletes


def full_tier_fields(manifests: Sequence[tuple[int, Mapping[str, object]]], specs: PartitionSpecs) -> dict[str, object]:
    """The :data:`FULL_TIER_FACTS` from the current snapshot's manifests, each given as (manifest length in
    bytes, reduced manifest)."""
    data, deletes = _split_files([reduced for _, reduced in manifests], specs)
    per_partition: dict[tuple[int, str], int] = {}
    groups: dict[str, tuple[list[int], list[tuple[int, int, int, int]]]] = {}
    sizes: list[int] = []
    records_total = 0
    for spec_id, key, size, records, seq, hashed in data:
        sizes.append(size)
        records_total += records
        per_partition[(spec_id, key)] = per_partition.get((spec_id, key), 0) + 1
        applying, scoped_rows = deletes.applying(spec_id, key, seq, hashed)
        group_sizes, group_deletes = groups.setdefault(data_group_key(spec_id, key, specs.current), ([], []))
        if applying:
            group_deletes.append((len(group_sizes), applying, scoped_rows, records))
        group_sizes.append(size)
    return {
        "data_file_count": len(sizes),
        "total_data_bytes": sum(sizes),
        "record_count": records_total,
        "data_file_sizes": tuple(sizes),
        "delete_file_count": deletes.position_count + deletes.equality_count,
        "position_delete_file_count": deletes.position_count,
        "equality_delete_file_count": deletes.equality_count,
        "manifest_count": len(manifests),
        "manifest_total_bytes": sum(length for length, _ in manifests),
        "partition_count": len(per_partition),
        "max_files_per_partition": max(per_partition.values(), default=0),
        "data_file_groups": tuple((k, tuple(s), tuple(d)) for k, (s, d) in groups.items()),
        "position_delete_groups": tuple((k, tuple(v)) for k, v in deletes.position_sizes.items()),
    }
