"""The metadata row proof's decisions (core/rewrites/row_proof.py), from facts: which files a commit touched,
which position deletes apply (Iceberg's rule), the live rows on each side, and where it hands over to
Spark. The same cases through real Spark and real files: reliability/test_row_proof.py."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from floe_dagster.core.rewrites.row_proof import (
    DATA,
    DELETION_VECTOR,
    EQUALITY_DELETES,
    POSITION_DELETES,
    CannotProve,
    FileFacts,
    live_files,
    prove_commit,
)
from floe_dagster.iceberg.row_proof import distinct_deleted, positions_by_path


def data(path: str, rows: int, seq: int = 1, partition: tuple = ("a",)) -> FileFacts:
    return FileFacts(path, DATA, "parquet", seq, rows, 0, partition)


def deletes(path: str, seq: int = 2, partition: tuple = ("a",), **facts) -> FileFacts:
    return FileFacts(path, POSITION_DELETES, "parquet", seq, 1, 0, partition, **facts)


class Reader:
    """The delete files' positions and the data files' footers as dicts; records what was read."""

    def __init__(self, positions: dict[str, dict[str, set[int]]], footers: dict[str, int] | None = None):
        self.positions, self.footers = positions, footers or {}
        self.read_deletes: list[str] = []
        self.footers_read: list[str] = []

    def read(self, files):
        self.read_deletes += [f.path for f in files if f.path not in self.read_deletes]

    def referenced_paths(self, delete):
        assert delete.path in self.read_deletes, "asked before it was read"
        return self.positions[delete.path].keys()

    def deleted_rows(self, data_file, applicable):
        assert all(d.path in self.read_deletes for d in applicable)
        named = set().union(*(self.positions[d.path].get(data_file.path, set()) for d in applicable))
        return len({p for p in named if 0 <= p < data_file.record_count})

    def stored_rows(self, files):
        self.footers_read += [f.path for f in files]
        return {f.path: self.footers.get(f.path, f.record_count) for f in files}


def prove(parent: list[FileFacts], child: list[FileFacts], reader: Reader):
    return prove_commit(live_files(1, parent), live_files(2, child), reader)


def test_a_compaction_that_applies_a_delete_keeps_the_rows():
    """Two files (10 rows, one of them deleted) into one of 19: the touched files hold 19 on both sides."""
    d1 = deletes("d1")
    reader = Reader({"d1": {"f1": {4}}})
    proof = prove([data("f1", 10), data("f2", 10), d1], [data("f3", 19, seq=2), d1], reader)
    assert (proof.rows_before, proof.rows_after, proof.holds, proof.touched_files) == (19, 19, True, 3)
    assert proof.changed_delete_files == 0 and reader.read_deletes == ["d1"]  # read for its positions, once


def test_a_file_swapped_for_a_copy_resurrects_its_deleted_row():
    """floe's resurrection test: the file with a delete swapped for a copy under a new path (same record
    count, same totals in the summary), so the delete no longer names it."""
    d1 = deletes("d1")
    proof = prove([data("f1", 10), d1], [data("f1-copy", 10), d1], Reader({"d1": {"f1": {3}}}))
    assert (proof.rows_before, proof.rows_after, proof.holds) == (9, 10, False)


def test_the_same_path_re_added_with_a_newer_sequence_number_escapes_its_delete():
    """The delete's sequence number is below the re-added file's: Iceberg no longer applies it."""
    d1 = deletes("d1", seq=2)
    proof = prove([data("f1", 10, seq=1), d1], [data("f1", 10, seq=3), d1], Reader({"d1": {"f1": {3}}}))
    assert (proof.rows_before, proof.rows_after) == (9, 10)


def test_a_dropped_delete_file_is_a_changed_file_and_its_data_file_is_touched():
    proof = prove([data("f1", 10), data("f2", 10), deletes("d1")], [data("f1", 10), data("f2", 10)],
                  Reader({"d1": {"f2": {0, 1}}}))
    assert (proof.touched_files, proof.changed_delete_files, proof.rows_before, proof.rows_after) == (1, 1, 8, 10)


def test_a_dropped_data_file_loses_its_rows():
    proof = prove([data("f1", 10), data("f2", 10)], [data("f1", 10)], Reader({}))
    assert (proof.rows_before, proof.rows_after, proof.touched_files) == (10, 0, 1)


def test_only_the_deletes_of_touched_files_are_read():
    """Count only what the rewrite touched: partition b's delete file is never opened, nor its footers."""
    in_a, in_b = deletes("da"), deletes("db", partition=("b",))
    untouched = [data("g1", 10, partition=("b",)), in_b]
    reader = Reader({"da": {"f1": {1}}, "db": {"g1": {2}}})
    proof = prove([data("f1", 10), in_a, *untouched], [data("f2", 9, seq=2), in_a, *untouched], reader)
    assert proof.holds and reader.read_deletes == ["da"] and sorted(reader.footers_read) == ["f1", "f2"]


def test_which_position_deletes_apply():
    f1 = data("s3://b/t/data/a/f1.parquet", 10, seq=5)
    files = live_files(1, [
        f1,
        deletes("older", seq=4),  # written before the data file: does not apply
        deletes("same-seq", seq=5),  # applies (a position delete at the data file's sequence number)
        deletes("other-partition", seq=6, partition=("b",)),
        deletes("scoped-elsewhere", seq=6, partition=("b",), referenced_path="s3://b/t/data/a/f1.parquet"),
        deletes("scoped-to-another", seq=6, referenced_path="s3://b/t/data/a/f9.parquet"),
        deletes("bounds-exclude", seq=6, path_bounds=("s3://b/t/data/a/g", "s3://b/t/data/a/z")),
        deletes("bounds-include", seq=6, path_bounds=("s3://b/t/data/a/a", "s3://b/t/data/a/g")),
    ])
    assert sorted(d.path for d in files.applicable(f1)) == ["bounds-include", "same-seq", "scoped-elsewhere"]


def test_a_position_named_twice_or_past_the_file_counts_once():
    reader = Reader({"d1": {"f1": {1, 2, 99}}, "d2": {"f1": {2, 3}}})
    proof = prove([data("f1", 10), deletes("d1"), deletes("d2")], [data("f1", 10), deletes("d1")], reader)
    assert (proof.rows_before, proof.rows_after) == (7, 8)  # 1, 2, 3 deleted; then 1, 2


@pytest.mark.parametrize("entry, reason", [
    (FileFacts("eq", EQUALITY_DELETES, "parquet", 2, 1, 0, ("a",)), "equality delete files"),
    (FileFacts("dv.puffin", DELETION_VECTOR, "puffin", 2, 1, 0, ("a",)), "deletion vectors"),
    (data("f1", 5), "live twice"),
])
def test_what_the_proof_hands_over_to_spark(entry, reason):
    with pytest.raises(CannotProve, match=reason):
        live_files(1, [data("f1", 10), entry])


def test_a_footer_that_disagrees_with_its_manifest_entry_hands_over_to_spark():
    """A Spark count reads the footers when deletes are present: a record count that lies would fool
    a proof that trusted it, so it is checked on every touched file."""
    reader = Reader({}, footers={"f2": 11})
    with pytest.raises(CannotProve, match="f2 holds 11 rows by its footer, 10 by its manifest entry"):
        prove([data("f1", 10)], [data("f2", 10, seq=2)], reader)


def test_an_unchanged_commit_touches_nothing():
    files = [data("f1", 10), deletes("d1")]
    reader = Reader({"d1": {"f1": {1}}})
    proof = prove(files, [replace(f) for f in files], reader)
    assert (proof.touched_files, proof.rows_before, proof.rows_after, reader.read_deletes) == (0, 0, 0, [])


def test_positions_are_grouped_by_data_file_whatever_the_order():
    table = pa.table({"file_path": ["b", "a", "b", "a", "c"], "pos": [5, 1, 2, 1, 0]})
    grouped = {path: sorted(array.to_pylist()) for path, array in positions_by_path(table).items()}
    assert grouped == {"a": [1, 1], "b": [2, 5], "c": [0]}
    assert positions_by_path(table.slice(0, 0)) == {}


def test_distinct_positions_inside_the_file():
    arrays = [pa.array([0, 3, 3, 12], pa.int64()), pa.array([3, 4, -1], pa.int32())]
    assert distinct_deleted(arrays, 10) == 3 and distinct_deleted([], 10) == 0
