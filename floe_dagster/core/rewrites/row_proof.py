"""Proving from metadata that a rewrite commit kept the table's rows: no data file read, no Spark.

For a ``replace`` commit N with parent P, let X be the data files the commit touched: every data
file whose live manifest entry differs between P and N (added, removed, or another data sequence
number, record count, spec or partition), plus every data file that a delete file whose entry
differs names (read from that delete file). Every data file outside X keeps its entry, and every
delete file that can reach it is unchanged, so it holds the same live rows in P and N. P and N
therefore hold the same number of rows iff X's live rows are equal in P and N.

The live rows of a data file in a snapshot are its stored rows minus the distinct positions below
that number that the snapshot's applicable position deletes name. "Applicable" is Iceberg's rule
(spec, "Scan Planning"; Java's and PyIceberg's ``DeleteFileIndex``): a delete file scoped to one data
file (equal path bounds) applies to that path; any other one applies to the data files of its spec
and partition; and only when its data sequence number is at least the data file's. The stored rows
are the data file's own footer, checked against the manifest's record count, since that footer is
what a Spark count reads when deletes are present.

Where the proof cannot decide as exactly as a Spark count it raises :class:`CannotProve` and the
caller counts with Spark: equality deletes (their reach depends on values), deletion vectors (PyIceberg
0.12 drops the fields that tell one from another inside a Puffin file), a path live twice in one
snapshot, a footer that disagrees with its record count, formats it cannot read.

Pure: the facts come from the caller's manifests (iceberg/row_proof.py), the delete files' positions
and the footers through a :class:`DeleteFileReader`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Protocol, Sequence

DATA = "data"
POSITION_DELETES = "position-deletes"
EQUALITY_DELETES = "equality-deletes"
DELETION_VECTOR = "deletion-vector"  # a position delete in a Puffin file (format 3)


class CannotProve(Exception):
    """The metadata cannot decide the rows as exactly as a count; ``reason`` says why (for the run's metadata)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class FileFacts:
    """One live manifest entry: what decides the rows a data file holds or a delete file removes.
    ``partition``: the partition's values (hashable); ``referenced_path``: the one data file a position
    delete file names (its path bounds equal); ``path_bounds``: the lowest and highest data file path it
    names, when its metrics keep them."""

    path: str
    content: str
    file_format: str
    sequence_number: int
    record_count: int
    spec_id: int
    partition: tuple
    referenced_path: str | None = None
    path_bounds: tuple[str, str] | None = None

    def signature(self) -> tuple:
        """What may not change for the file's rows (or a delete file's reach) to stay the same."""
        return (self.content, self.sequence_number, self.record_count, self.spec_id, self.partition,
                self.referenced_path, self.path_bounds)

    def may_name(self, data: "FileFacts") -> bool:
        """Whether this position delete file applies to ``data`` by Iceberg's rule (its positions for
        ``data``'s path, if it holds any, are then deleted rows)."""
        if self.sequence_number < data.sequence_number:
            return False
        if self.referenced_path is not None:
            return self.referenced_path == data.path
        if (self.spec_id, self.partition) != (data.spec_id, data.partition):
            return False
        return self.path_bounds is None or self.path_bounds[0] <= data.path <= self.path_bounds[1]


@dataclass(frozen=True)
class LiveFiles:
    """The live data and position delete files of one snapshot, by path, with the deletes indexed the
    way they apply (one data file's path, or a spec and partition)."""

    snapshot_id: int
    data: Mapping[str, FileFacts]
    deletes: Mapping[str, FileFacts]
    _by_path: Mapping[str, tuple[FileFacts, ...]] = field(default_factory=dict, repr=False, compare=False)
    _by_partition: Mapping[tuple, tuple[FileFacts, ...]] = field(default_factory=dict, repr=False, compare=False)

    def applicable(self, data: FileFacts) -> list[FileFacts]:
        candidates = (*self._by_path.get(data.path, ()), *self._by_partition.get((data.spec_id, data.partition), ()))
        return [delete for delete in candidates if delete.may_name(data)]


def live_files(snapshot_id: int, entries: Iterable[FileFacts]) -> LiveFiles:
    """A snapshot's live files from its live manifest entries; CannotProve where the proof stops."""
    data: dict[str, FileFacts] = {}
    deletes: dict[str, FileFacts] = {}
    for entry in entries:
        if entry.content == EQUALITY_DELETES:
            raise CannotProve(f"equality delete files ({entry.path}): which rows they remove depends on values")
        if entry.content == DELETION_VECTOR:
            raise CannotProve(f"deletion vectors ({entry.path}): their entries cannot be told apart in PyIceberg")
        if entry.content not in (DATA, POSITION_DELETES):
            raise CannotProve(f"a manifest entry of unknown content {entry.content!r} ({entry.path})")
        files = data if entry.content == DATA else deletes
        if entry.path in files:
            raise CannotProve(f"the file {entry.path} is live twice in snapshot {snapshot_id}")
        files[entry.path] = entry
    by_path: dict[str, list[FileFacts]] = defaultdict(list)
    by_partition: dict[tuple, list[FileFacts]] = defaultdict(list)
    for delete in deletes.values():
        if delete.referenced_path is not None:
            by_path[delete.referenced_path].append(delete)
        else:
            by_partition[(delete.spec_id, delete.partition)].append(delete)
    return LiveFiles(snapshot_id, data, deletes, {k: tuple(v) for k, v in by_path.items()},
                     {k: tuple(v) for k, v in by_partition.items()})


class DeleteFileReader(Protocol):
    """The file reads the proof needs (iceberg/row_proof.py: pyarrow through the table's FileIO).
    Each may raise CannotProve (a format it cannot read)."""

    def read(self, deletes: Collection[FileFacts]) -> None:
        """Read these position delete files (all at once, in parallel): the questions below are answered from memory."""

    def referenced_paths(self, delete: FileFacts) -> Collection[str]:
        """The data file paths a position delete file names."""

    def deleted_rows(self, data: FileFacts, deletes: Sequence[FileFacts]) -> int:
        """How many distinct positions in ``[0, data.record_count)`` ``deletes`` name for ``data``'s path."""

    def stored_rows(self, data: Collection[FileFacts]) -> Mapping[str, int]:
        """The rows each data file's own footer says it holds, by path."""


@dataclass(frozen=True)
class CommitProof:
    """The rows of the files one commit touched, in its parent and in itself."""

    snapshot_id: int
    parent_id: int
    touched_files: int
    changed_delete_files: int
    rows_before: int
    rows_after: int

    @property
    def holds(self) -> bool:
        return self.rows_before == self.rows_after

    def describe(self) -> str:
        return (f"the {self.touched_files} data file(s) snapshot {self.snapshot_id} touched hold {self.rows_after} "
                f"live rows, {self.rows_before} in its parent {self.parent_id} (from the manifests and "
                f"{self.changed_delete_files} changed position delete file(s))")


def _changed(before: Mapping[str, FileFacts], after: Mapping[str, FileFacts]) -> list[FileFacts]:
    """The entries present on one side only, or with another signature (both sides' entries)."""
    def differs(entry: FileFacts, other: Mapping[str, FileFacts]) -> bool:
        return entry.path not in other or other[entry.path].signature() != entry.signature()

    return [entry for entry in before.values() if differs(entry, after)] + \
        [entry for entry in after.values() if differs(entry, before)]


def prove_commit(parent: LiveFiles, child: LiveFiles, reader: DeleteFileReader) -> CommitProof:
    """The live rows of the files the commit touched, in the parent and in the commit (see the module)."""
    changed_deletes = _changed(parent.deletes, child.deletes)
    reader.read(changed_deletes)
    touched = {entry.path for entry in _changed(parent.data, child.data)}
    for delete in changed_deletes:
        touched.update(reader.referenced_paths(delete))
    sides = [(files, [files.data[path] for path in sorted(touched) if path in files.data]) for files in (parent, child)]
    stored = reader.stored_rows({entry.path: entry for _, entries in sides for entry in entries}.values())
    for _, entries in sides:
        for entry in entries:
            if stored[entry.path] != entry.record_count:
                raise CannotProve(f"the data file {entry.path} holds {stored[entry.path]} rows by its footer, "
                                  f"{entry.record_count} by its manifest entry")
    reader.read({delete.path: delete for files, entries in sides for entry in entries
                 for delete in files.applicable(entry)}.values())
    before, after = (sum(entry.record_count - reader.deleted_rows(entry, files.applicable(entry)) for entry in entries)
                     for files, entries in sides)
    return CommitProof(child.snapshot_id, parent.snapshot_id, len(touched), len(changed_deletes), before, after)


__all__ = ["DATA", "POSITION_DELETES", "EQUALITY_DELETES", "DELETION_VECTOR", "CannotProve", "FileFacts", "LiveFiles",
           "live_files", "DeleteFileReader", "CommitProof", "prove_commit"]
