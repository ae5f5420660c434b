"""The values of a partition-scoped rewrite (core/rewrites/partition_scope.py chooses them): a partition field,
what one run takes and leaves (:class:`PartitionSelection`, kept in the trigger ledger), what the
engine needs to limit the CALL (:class:`RewriteScope`) and the backlog the planner continues. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

@dataclass(frozen=True)
class PartitionField:
    """One partition field: its source column (a dotted path for a nested column; None or "" when the
    current schema no longer has it), the transform as Iceberg prints it (``identity``, ``day``,
    ``bucket[16]``, ``truncate[4]``, ``void``), the source column's Iceberg type (``string``,
    ``date``, ``timestamptz``, ``decimal(10, 2)``, ...) and its field id."""

    source: str | None
    transform: str
    source_type: str
    source_id: int | None = None

    @property
    def kind(self) -> str:
        return self.transform.split("[", 1)[0].strip().lower()

    @property
    def width(self) -> int | None:
        """The N of ``bucket[N]`` or ``truncate[N]``."""
        if "[" not in self.transform:
            return None
        return int(self.transform.split("[", 1)[1].rstrip("]"))

    def describe(self) -> str:
        return self.source if self.kind == "identity" else f"{self.transform}({self.source})"

    def to_json(self) -> list[object]:
        return [self.source, self.transform, self.source_type, self.source_id]


def partition_values(key: str) -> list[object]:
    """A collector's partition key (or a unit key) back as its values."""
    values = json.loads(key)
    if not isinstance(values, list):
        raise ValueError(f"partition key {key!r} is not a JSON list")
    return values


@dataclass(frozen=True)
class PartitionSelection:
    """What one run takes (units and their fields, or a file count), its charge, and the backlog."""

    partitions: tuple[str, ...]  # unit keys (JSON lists of the values of ``fields``); () : no where
    bytes: int  # the charge: at most what Iceberg rewrites
    files: int
    backlog_partitions: int
    backlog_bytes: int
    cap: int
    oversized: bool = False  # not even two files fit: the smallest step was taken alone, over the cap
    fields: tuple[PartitionField, ...] | None = None  # the where's fields (None: recorded before they were)
    max_files: int | None = None  # max-files-to-rewrite (None: the chosen units whole)
    spec_id: int | None = None  # the default spec when planned
    # The files of older specs (beside the current spec's null partition): the where excludes the
    # current spec's partitions, whose values of the one field in ``fields`` these keys are.
    older_specs_excluding: tuple[str, ...] | None = None
    # Iceberg's file rules for this run alone (core/rewrites/older_specs.py): min-file-size-bytes lowered so
    # that no older spec's file the where scans is a candidate; min-input-files raised so that only the
    # older specs' group is kept (set: the backlog has reached the older specs' files alone).
    min_file_size: int | None = None
    min_input_files: int | None = None

    @property
    def older_specs_alone(self) -> bool:
        """It takes the older partition specs' files alone (by their where or by Iceberg's file rules)."""
        return self.older_specs_excluding is not None or self.min_input_files is not None

    def describe(self) -> str:
        what = (f"{len(self.partitions)} partition(s) by {', '.join(f.describe() for f in self.fields or ())}"
                if self.partitions else "the whole table")
        if self.older_specs_excluding is not None:
            what = (f"the files of older partition specs (none of the current spec's "
                    f"{len(self.older_specs_excluding)} {', '.join(f.describe() for f in self.fields or ())} value(s))")
        if self.min_input_files is not None:
            what = (f"the files of older partition specs alone (min-input-files {self.min_input_files}: "
                    "no partition of the current spec holds as many)")
        if self.max_files is not None:
            what = f"at most {self.max_files} file(s) of {what} (max-files-to-rewrite)"
        if self.min_file_size is not None:
            what += f" (min-file-size-bytes {self.min_file_size}: no file of an older spec is a candidate)"
        text = (f"partition-scoped: {what}, {self.bytes} bytes (cap {self.cap}); backlog "
                f"{self.backlog_partitions} partition(s), {self.backlog_bytes} bytes")
        if self.oversized:
            text += f"; not even two files fit in the cap: the smallest step ({self.bytes} bytes) runs alone"
        return text

    def to_json(self) -> dict[str, object]:
        data = {"partitions": list(self.partitions), "bytes": self.bytes, "files": self.files,
                "backlog_partitions": self.backlog_partitions, "backlog_bytes": self.backlog_bytes,
                "cap": self.cap, "oversized": self.oversized, "max_files": self.max_files, "spec_id": self.spec_id}
        if self.older_specs_excluding is not None:
            data["older_specs_excluding"] = list(self.older_specs_excluding)
        for name in ("min_file_size", "min_input_files"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.fields is not None:
            data["fields"] = [f.to_json() for f in self.fields]
        return data

    @classmethod
    def from_json(cls, data: Any) -> "PartitionSelection | None":
        if not data:
            return None
        if isinstance(data, str):
            data = json.loads(data)
        fields, excluding = data.get("fields"), data.get("older_specs_excluding")
        return cls(tuple(str(p) for p in data.get("partitions", ())), int(data.get("bytes", 0)),
                   int(data.get("files", 0)), int(data.get("backlog_partitions", 0)),
                   int(data.get("backlog_bytes", 0)), int(data.get("cap", 0)), bool(data.get("oversized", False)),
                   fields=tuple(PartitionField(*f) for f in fields) if fields is not None else None,
                   max_files=data.get("max_files"), spec_id=data.get("spec_id"),
                   older_specs_excluding=tuple(str(k) for k in excluding) if excluding is not None else None,
                   min_file_size=data.get("min_file_size"), min_input_files=data.get("min_input_files"))


@dataclass(frozen=True)
class RewriteScope:
    """What the engine needs to limit one ``rewrite_data_files`` CALL: the units' keys and the fields
    they are values of (the ``where``), and ``max-files-to-rewrite``; ``files`` bounds a scope recorded
    before fields were (its where cannot always be written)."""

    partitions: tuple[str, ...]
    fields: tuple[PartitionField, ...]
    files: int = 0
    max_files: int | None = None
    older_specs_excluding: tuple[str, ...] | None = None  # PartitionSelection's: the older specs' files
    min_file_size: int | None = None  # PartitionSelection's: Iceberg's file rules for this run
    min_input_files: int | None = None


@dataclass(frozen=True)
class Backlog:
    """What the newest admission of a (table, operation) left to do, from the trigger ledger: the
    planner continues it (same slot, next attempt) once that run succeeded, or retries it if not."""

    slot: str
    admitted_at: datetime  # UTC
    partitions: int
    bytes: int
    continuation: bool  # the admission itself continued a backlog (trigger "backlog")
    older_first: bool = False  # it took the older specs' files alone: the backlog stays there

    def open_after(self, last_success_start: datetime | None) -> bool:
        """Whether work is left: bytes left behind by a run that succeeded, or an admission (a
        scoped run or a continuation) that has not succeeded yet."""
        succeeded = last_success_start is not None and last_success_start >= self.admitted_at
        return (self.bytes > 0 and succeeded) or (not succeeded and (self.bytes > 0 or self.continuation))
