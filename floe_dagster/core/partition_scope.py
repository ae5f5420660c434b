"""Partition-scoped rewrites: which partitions a ``rewrite_data_files`` run takes when the whole
table's rewrite exceeds what the run may rewrite (docs/automation.md, "Large tables: partition-scoped
rewrites").

Pure (no PyIceberg, Spark or Dagster). The inputs are the full health tier's files per partition
(:attr:`~floe_dagster.core.measurements.TableMetrics.data_file_groups`, keyed by the collector's
partition key: the current spec's partition values as a compact JSON list, see
``iceberg/metadata_reduction.partition_key``) and the rules of core/estimates.py, so a partition's
bytes are the bytes Iceberg's own planner would take from it.

The choice: each partition's *benefit* is the data files the rewrite removes (input files minus the
files it writes at the target size) plus the delete files it applies to them; partitions are taken by
benefit per byte rewritten, best first, as long as they fit in the cap (a partition that does not fit
is passed over for smaller ones behind it). When no partition fits, the smallest one is taken alone
and the selection says it is oversized: the only way a run rewrites more than its cap.

Whatever is not chosen is the *backlog* (partitions and bytes): the next tick plans it as new work of
the same slot (core/planner.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from floe_dagster.core.estimates import RewriteRules, _delete_rule_hit, partition_group_indexes

if TYPE_CHECKING:  # pragma: no cover
    from floe_dagster.core.measurements import TableMetrics

TEMPORAL_TRANSFORMS = ("year", "month", "day", "hour")


@dataclass(frozen=True)
class PartitionCost:
    """What rewriting one partition takes (bytes, input files) and gives (files removed, delete files
    applied)."""

    key: str  # the collector's partition key (a JSON list of the partition's values)
    bytes: int
    files: int
    delete_files: int = 0  # delete files applying to the files taken (a delete file counts per data file)
    output_files: int = 1  # files written at the target size

    @property
    def benefit(self) -> int:
        return max(self.files - self.output_files, 0) + self.delete_files

    @property
    def benefit_per_byte(self) -> float:
        return self.benefit / self.bytes if self.bytes > 0 else 0.0


@dataclass(frozen=True)
class PartitionSelection:
    """The partitions one run takes, and the backlog it leaves."""

    partitions: tuple[str, ...]
    bytes: int
    files: int
    backlog_partitions: int
    backlog_bytes: int
    cap: int
    oversized: bool = False  # no partition fitted: the smallest was taken alone, over the cap

    def describe(self) -> str:
        text = (f"partition-scoped: {len(self.partitions)} partition(s), {self.bytes} bytes "
                f"(cap {self.cap}); backlog {self.backlog_partitions} partition(s), {self.backlog_bytes} bytes")
        if self.oversized:
            text += f"; partition {self.partitions[0]} alone is larger than the cap ({self.bytes} > {self.cap})"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"partitions": list(self.partitions), "bytes": self.bytes, "files": self.files,
                "backlog_partitions": self.backlog_partitions, "backlog_bytes": self.backlog_bytes,
                "cap": self.cap, "oversized": self.oversized}

    @classmethod
    def from_json(cls, data: Any) -> "PartitionSelection | None":
        if not data:
            return None
        if isinstance(data, str):
            data = json.loads(data)
        return cls(tuple(str(p) for p in data.get("partitions", ())), int(data.get("bytes", 0)),
                   int(data.get("files", 0)), int(data.get("backlog_partitions", 0)),
                   int(data.get("backlog_bytes", 0)), int(data.get("cap", 0)), bool(data.get("oversized", False)))


def partition_costs(metrics: "TableMetrics", rules: RewriteRules) -> list[PartitionCost] | None:
    """Each partition's rewrite as Iceberg's planner would pick it (partitions it takes nothing from
    are left out); None without the full tier."""
    if metrics.data_file_groups is None:
        return None
    target = rules.target_file_size_bytes
    no_deletes_hit = _delete_rule_hit(0, 0, 0, rules)
    merged: dict[str, tuple[list[int], list[tuple[int, int, int, int]]]] = {}
    for key, sizes, deletes in metrics.data_file_groups:  # the collector lists each key once; merge anyway
        known, extra = merged.setdefault(key, ([], []))
        extra.extend((len(known) + index, count, rows, records) for index, count, rows, records in deletes)
        known.extend(sizes)
    costs = []
    for key, (sizes, deletes) in merged.items():
        applying = {index: count for index, count, _, _ in deletes}
        hits = None
        if deletes or no_deletes_hit:
            hits = [no_deletes_hit] * len(sizes)
            for index, count, rows, records in deletes:
                hits[index] = _delete_rule_hit(count, rows, records, rules)
        taken = [i for group in partition_group_indexes(sizes, hits, rules) for i in group]
        if not taken:
            continue
        total = sum(sizes[i] for i in taken)
        costs.append(PartitionCost(key, total, len(taken), sum(applying.get(i, 0) for i in taken),
                                   max(1, -(-total // target))))
    return costs


def select_partitions(costs: Sequence[PartitionCost], cap: int) -> PartitionSelection | None:
    """The partitions with the most benefit per byte that fit in ``cap`` bytes together; None when
    there is nothing to rewrite or everything fits (no scoping needed)."""
    costs = [c for c in costs if c.bytes > 0]
    total = sum(c.bytes for c in costs)
    if not costs or total <= cap:
        return None
    ranked = sorted(costs, key=lambda c: (-c.benefit_per_byte, -c.benefit, c.bytes, c.key))
    chosen: list[PartitionCost] = []
    used = 0
    for cost in ranked:
        if used + cost.bytes <= cap:
            chosen.append(cost)
            used += cost.bytes
    oversized = not chosen
    if oversized:  # every partition alone exceeds the cap: the smallest (least over), best per byte on ties
        chosen = [min(ranked, key=lambda c: (c.bytes, -c.benefit_per_byte, c.key))]
        used = chosen[0].bytes
    return PartitionSelection(
        partitions=tuple(c.key for c in chosen), bytes=used, files=sum(c.files for c in chosen),
        backlog_partitions=len(costs) - len(chosen), backlog_bytes=total - used, cap=cap, oversized=oversized)


# -- the partition spec, as the engine needs it to limit the CALL ----------------------------------------


@dataclass(frozen=True)
class PartitionField:
    """One field of the table's current partition spec: its source column (a dotted path for a nested
    column), the transform as Iceberg prints it (``identity``, ``day``, ``bucket[16]``,
    ``truncate[4]``, ``void``) and the source column's Iceberg type (``string``, ``date``,
    ``timestamptz``, ``decimal(10, 2)``, ...)."""

    source: str
    transform: str
    source_type: str

    @property
    def kind(self) -> str:
        return self.transform.split("[", 1)[0].strip().lower()

    @property
    def width(self) -> int | None:
        """The N of ``bucket[N]`` or ``truncate[N]``."""
        if "[" not in self.transform:
            return None
        return int(self.transform.split("[", 1)[1].rstrip("]"))


def partition_values(key: str) -> list[Any]:
    """A collector's partition key back as its values."""
    values = json.loads(key)
    if not isinstance(values, list):
        raise ValueError(f"partition key {key!r} is not a JSON list")
    return values


@dataclass(frozen=True)
class RewriteScope:
    """What the engine needs to limit one ``rewrite_data_files`` CALL to the chosen partitions: their
    keys, the table's current partition spec, and the files chosen (the bound used when the spec has a
    transform that ``where`` cannot express)."""

    partitions: tuple[str, ...]
    fields: tuple[PartitionField, ...]
    files: int = 0


@dataclass(frozen=True)
class Backlog:
    """What the newest admission of a (table, operation) left to do, from the trigger ledger: the
    planner continues it (same slot, next attempt) once that run succeeded, or retries it if not."""

    slot: str
    admitted_at: Any  # datetime (UTC)
    partitions: int
    bytes: int
    continuation: bool  # the admission itself continued a backlog (trigger "backlog")

    def open_after(self, last_success_start: Any) -> bool:
        """Whether work is left: bytes left behind by a run that succeeded, or an admission (a
        scoped run or a continuation) that has not succeeded yet."""
        succeeded = last_success_start is not None and last_success_start >= self.admitted_at
        return (self.bytes > 0 and succeeded) or (not succeeded and (self.bytes > 0 or self.continuation))
