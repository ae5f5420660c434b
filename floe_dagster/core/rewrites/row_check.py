"""The row check of a rewrite: each ``replace`` commit it made must hold the same rows as its parent.

Each commit is decided by the cheapest method that decides it exactly, in this order:

1. ``snapshot-summary``: both snapshots' summaries count their rows exactly (no delete files) and agree;
2. ``metadata-proof``: the rows of the files the commit touched, from the manifests and the position
   delete files (core/rewrites/row_proof.py), when the caller can prove (PyIceberg reads the table); a proof
   that holds decides; one that finds a change is confirmed by Spark's count, which then decides
   (and gives the whole-table figures the failure names);
3. ``spark-count``: Spark counts both snapshots (each snapshot of a partial-progress chain once): where
   the proof cannot decide (equality deletes, deletion vectors, see row_proof), or is not offered, or
   for every commit of a table up to ``row-count-check-max-bytes`` (``count_always``); and where the proof
   itself failed (a file it could not read: Spark may still read the table, and decides).

``RowCheck.method`` names the methods that ran, joined with ``+`` (``snapshot-summary+metadata-proof``,
``snapshot-summary+spark-count``...), and ``fallback`` why the proof handed over to Spark.
Pure: the summaries' arithmetic, the proof and the count are the caller's functions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from floe_dagster.core.rewrites.row_proof import CannotProve, CommitProof

log = logging.getLogger(__name__)

SNAPSHOT_SUMMARY = "snapshot-summary"
METADATA_PROOF = "metadata-proof"
SPARK_COUNT = "spark-count"

Prove = Callable[[int, int], CommitProof]  # (parent id, snapshot id) -> the touched files' rows; may raise CannotProve
Count = Callable[[int], int]  # snapshot id -> its rows, counted by Spark
ExactRows = Callable[[Any], "int | None"]  # a snapshot summary -> its rows, when the summary alone decides them


@dataclass(frozen=True)
class RowCheck:
    """What the check did. ``method``: the methods that decided (see the module), or ``not-applicable``;
    where the metadata keeps no parent (Nessie): ``commit-summary``, or ``parent-not-kept`` (could not be
    checked). ``rows_before``/``rows_after``: the table's rows before the first commit and after the last
    when every commit was decided on whole-table figures; else the live rows of the files the commits
    touched (proved from metadata), summed over the commits. ``fallback``: why the proof did not decide."""

    method: str
    checked_snapshots: tuple[int, ...] = ()
    rows_before: int | None = None
    rows_after: int | None = None
    fallback: str | None = None


class RowsChanged(Exception):
    """A commit of the rewrite holds other rows than its parent (the caller raises its RowCountMismatch)."""

    def __init__(self, snapshot_id: int, parent_id: int, rows_before: int, rows_after: int, ours: Sequence[int],
                 proof: CommitProof | None = None):
        super().__init__(f"snapshot {snapshot_id}: {rows_after} rows, its parent {parent_id}: {rows_before}")
        self.snapshot_id, self.parent_id, self.ours, self.proof = snapshot_id, parent_id, tuple(ours), proof
        self.rows_before, self.rows_after = rows_before, rows_after

    def message(self, table: str) -> str:
        text = (f"table '{table}': snapshot {self.snapshot_id} written by this run has {self.rows_after} rows but its "
                f"parent {self.parent_id} has {self.rows_before}; the rewrite changed the table's contents")
        return text + (f" ({self.proof.describe()})" if self.proof is not None else "")


@dataclass
class _Compared:
    before: int
    after: int
    whole_table: bool


@dataclass
class _Chain:
    """One rewrite's commits checked in order; the state they share."""

    exact_rows: ExactRows
    count: Count
    prove: Prove | None
    count_always: bool
    ours: tuple[int, ...]
    counted: dict[int, int] = field(default_factory=dict)  # a partial-progress chain: each snapshot counted once
    used: set[str] = field(default_factory=set)
    fallback: str | None = None

    def rows(self, snapshot_id: int) -> int:
        if snapshot_id not in self.counted:
            self.counted[snapshot_id] = self.count(snapshot_id)
        return self.counted[snapshot_id]

    def proved(self, parent_id: int, snapshot_id: int) -> CommitProof | None:
        if self.prove is None or self.fallback is not None:  # a proof that could not decide hands the chain to Spark
            return None
        try:
            proof = self.prove(parent_id, snapshot_id)
        except CannotProve as exc:
            self.fallback = exc.reason
            return None
        except Exception as exc:  # the proof only saves Spark's work: a read that fails leaves the check to Spark
            log.warning("row check of snapshot %s: the metadata proof failed, Spark counts instead: %s",
                        snapshot_id, exc)
            self.fallback = f"the metadata proof failed: {type(exc).__name__}: {exc}"
            return None
        self.used.add(METADATA_PROOF)
        return proof

    def check(self, snapshot: Mapping[str, Any], parent: Mapping[str, Any] | None) -> _Compared:
        snapshot_id, parent_id = snapshot["snapshot_id"], snapshot["parent_id"]
        proof = None
        if not self.count_always:
            after = self.exact_rows(snapshot.get("summary"))
            before = self.exact_rows(parent.get("summary")) if parent is not None else None
            if after is not None and after == before:
                return _Compared(before, after, whole_table=True)
            proof = self.proved(parent_id, snapshot_id)
            if proof is not None and proof.holds:
                return _Compared(proof.rows_before, proof.rows_after, whole_table=False)
        self.used.add(SPARK_COUNT)
        before, after = self.rows(parent_id), self.rows(snapshot_id)
        if after != before:
            raise RowsChanged(snapshot_id, parent_id, before, after, self.ours, proof)
        if proof is not None:  # the proof found a change Spark's count does not see: the count decides, as before
            log.warning("row check of snapshot %s: %s, but Spark counts %s rows in both; Spark's count decides",
                        snapshot_id, proof.describe(), after)
            self.fallback = f"the metadata proof disagreed with Spark's count on snapshot {snapshot_id}"
        return _Compared(before, after, whole_table=True)


def check_commits(ours: Sequence[Mapping[str, Any]], by_id: Mapping[int, Mapping[str, Any]], *, exact_rows: ExactRows,
                  count: Count, prove: Prove | None = None, count_always: bool = False) -> RowCheck:
    """Check each of ``ours`` (the rewrite's ``replace`` commits that have a parent, oldest first; each a
    mapping with ``snapshot_id``, ``parent_id``, ``summary``) against its parent (in ``by_id`` when the
    metadata holds it). Raises RowsChanged for the first commit whose rows differ."""
    chain = _Chain(exact_rows, count, prove, count_always, tuple(s["snapshot_id"] for s in ours))
    compared = [chain.check(snapshot, by_id.get(snapshot["parent_id"])) for snapshot in ours]
    if count_always:
        method = SPARK_COUNT
    else:
        method = "+".join([SNAPSHOT_SUMMARY] + [m for m in (METADATA_PROOF, SPARK_COUNT) if m in chain.used])
    if all(c.whole_table for c in compared):
        before, after = compared[0].before, compared[-1].after
    else:
        touched = [c for c in compared if not c.whole_table]
        before, after = sum(c.before for c in touched), sum(c.after for c in touched)
    return RowCheck(method, chain.ours, before, after, chain.fallback)


__all__ = ["SNAPSHOT_SUMMARY", "METADATA_PROOF", "SPARK_COUNT", "RowCheck", "RowsChanged", "check_commits"]
