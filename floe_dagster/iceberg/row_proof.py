"""The metadata row proof's reads (core/rewrites/row_proof.py decides): live manifest entries through PyIceberg,
position delete files and data file footers through pyarrow and the table's FileIO. No Spark, no data
page read.

One :class:`MetadataRowProof` serves one rewrite's chain of commits: manifests (immutable, by path),
delete files' positions and footers are read once however many commits share them, and each batch of
files is read by a small thread pool (one GET a file on object storage), one pool for the process.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Collection, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFileContent, FileFormat, ManifestEntry
from pyiceberg.table import Table

from floe_dagster.core.rewrites.row_proof import (
    DATA,
    DELETION_VECTOR,
    EQUALITY_DELETES,
    POSITION_DELETES,
    CannotProve,
    CommitProof,
    FileFacts,
    LiveFiles,
    live_files,
    prove_commit,
)

PATH_FIELD_ID = 2147483546  # the file_path column of position delete files (its bounds name the data files)
READ_THREADS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _read_pool() -> ThreadPoolExecutor:
    """The process's reading threads, started once (a pool per batch spent more starting threads than reading)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="floe-row-proof")
        return _pool


def file_facts(entry: ManifestEntry, format_version: int) -> FileFacts:
    """One live manifest entry as the proof's facts."""
    data_file = entry.data_file
    if data_file.content == DataFileContent.DATA:
        content = DATA
    elif data_file.content == DataFileContent.EQUALITY_DELETES:
        content = EQUALITY_DELETES
    else:
        content = DELETION_VECTOR if data_file.file_format == FileFormat.PUFFIN else POSITION_DELETES
    sequence_number = entry.sequence_number
    if sequence_number is None:
        if format_version > 1:  # PyIceberg inherits it for added entries: an existing entry without one is broken
            raise CannotProve(f"the manifest entry of {data_file.file_path} has no data sequence number")
        sequence_number = 0  # format 1: no sequence numbers, and no delete files
    partition = data_file.partition
    values = tuple(partition[i] for i in range(len(partition))) if partition is not None else ()
    if any(isinstance(value, float) and math.isnan(value) for value in values):
        raise CannotProve(f"the data file {data_file.file_path} has a NaN partition value")  # NaN != NaN
    lower, upper = _path_bound(data_file.lower_bounds), _path_bound(data_file.upper_bounds)
    bounds = (lower, upper) if content == POSITION_DELETES and lower is not None and upper is not None else None
    return FileFacts(
        path=data_file.file_path, content=content, file_format=str(data_file.file_format.value).lower(),
        sequence_number=sequence_number, record_count=data_file.record_count, spec_id=data_file.spec_id or 0,
        partition=values, referenced_path=lower if bounds is not None and lower == upper else None,
        path_bounds=bounds if bounds is not None and lower != upper else None)


def _path_bound(bounds: Mapping[int, bytes] | None) -> str | None:
    value = (bounds or {}).get(PATH_FIELD_ID)
    try:
        return value.decode("utf-8") if value else None
    except (UnicodeDecodeError, AttributeError):
        return None


def positions_by_path(table: pa.Table) -> dict[str, pa.Array]:
    """A position delete file's rows (``file_path``, ``pos``) as the positions it names in each data file."""
    if table.num_rows == 0:
        return {}
    ordered = table.sort_by("file_path")
    runs = pc.value_counts(ordered.column("file_path"))  # in order of first appearance: the sorted order
    positions = ordered.column("pos").combine_chunks()
    found, offset = {}, 0
    for path, n in zip(runs.field("values").to_pylist(), runs.field("counts").to_pylist()):
        found[path] = positions.slice(offset, n)
        offset += n
    return found


def distinct_deleted(arrays: Sequence[pa.Array], rows: int) -> int:
    """How many distinct positions in ``[0, rows)`` the arrays hold together."""
    if not arrays:
        return 0
    positions = pa.concat_arrays([array.cast(pa.int64()) for array in arrays])
    inside = pc.and_(pc.greater_equal(positions, 0), pc.less(positions, rows))
    return pc.count_distinct(pc.filter(positions, inside)).as_py()


class MetadataRowProof:
    """``proof(parent_id, snapshot_id)`` -> CommitProof for a commit of the table ``table_of()`` returns
    (read after the commit landed); CannotProve where the metadata cannot decide. Also the reader the
    core asks (core.rewrites.row_proof.DeleteFileReader)."""

    def __init__(self, table_of: Callable[[], Table]):
        self._table_of = table_of
        self._io: FileIO | None = None
        self._entries: dict[str, list[FileFacts]] = {}  # manifest path -> its live entries' facts
        self._positions: dict[str, dict[str, pa.Array]] = {}  # delete file path -> data file path -> positions
        self._stored: dict[str, int] = {}  # data file path -> rows by its footer
        self.files_read = 0

    def __call__(self, parent_id: int, snapshot_id: int) -> CommitProof:
        table = self._table_of()
        self._io = table.io
        format_version = table.metadata.format_version
        if format_version >= 3:  # PyIceberg 0.12 drops referenced_data_file and the DV offsets of format 3
            raise CannotProve("a format 3 table: PyIceberg does not read which data file each delete names")
        parent, child = (self._live(table, sid, format_version) for sid in (parent_id, snapshot_id))
        return prove_commit(parent, child, self)

    def _live(self, table: Table, snapshot_id: int, format_version: int) -> LiveFiles:
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise CannotProve(f"snapshot {snapshot_id} is not in the table's metadata")
        manifests = snapshot.manifests(table.io)
        todo = [m for m in manifests if m.manifest_path not in self._entries]
        for manifest, entries in zip(todo, self._map(lambda m: m.fetch_manifest_entry(table.io), todo)):
            self._entries[manifest.manifest_path] = [file_facts(e, format_version) for e in entries]
            self.files_read += 1
        return live_files(snapshot_id, (facts for m in manifests for facts in self._entries[m.manifest_path]))

    @staticmethod
    def _map(function: Callable, items: Sequence) -> Iterable:
        return map(function, items) if len(items) <= 1 else list(_read_pool().map(function, items))

    def _cached(self, files: Collection[FileFacts], cache: dict, kind: str, read_one: Callable) -> None:
        """Read the files ``cache`` lacks (Parquet only), in parallel, into ``cache`` by path."""
        todo = [f for f in files if f.path not in cache]
        for entry in todo:
            if entry.file_format != "parquet":
                raise CannotProve(f"the {kind} {entry.path} is {entry.file_format}, not Parquet")
        for entry, value in zip(todo, self._map(read_one, todo)):
            cache[entry.path] = value
            self.files_read += 1

    # -- core.rewrites.row_proof.DeleteFileReader --------------------------------------------------------------
    def read(self, deletes: Collection[FileFacts]) -> None:
        self._cached(deletes, self._positions, "position delete file", self._read_positions)

    def _read_positions(self, delete: FileFacts) -> dict[str, pa.Array]:
        with self._io.new_input(delete.path).open() as stream:
            return positions_by_path(pq.read_table(stream, columns=["file_path", "pos"]))

    def referenced_paths(self, delete: FileFacts) -> Collection[str]:
        return self._positions[delete.path].keys()

    def deleted_rows(self, data: FileFacts, deletes: Sequence[FileFacts]) -> int:
        arrays = [self._positions[d.path][data.path] for d in deletes if data.path in self._positions[d.path]]
        return distinct_deleted(arrays, data.record_count)

    def stored_rows(self, data: Collection[FileFacts]) -> Mapping[str, int]:
        self._cached(data, self._stored, "data file", self._footer_rows)
        return {f.path: self._stored[f.path] for f in data}

    def _footer_rows(self, entry: FileFacts) -> int:
        with self._io.new_input(entry.path).open() as stream:
            return pq.read_metadata(stream).num_rows


__all__ = ["MetadataRowProof", "file_facts", "positions_by_path", "distinct_deleted"]
