"""What a branch or tag other than ``main`` alone keeps alive: the snapshots it retains beyond main's, and the
files only those snapshots reference (core/facts/refs.py says when a ref is stale).

**Pinned snapshots** (:func:`pinned_snapshots`), Iceberg 1.11's ``RemoveSnapshots`` rules applied to
the metadata file alone: a branch retains its head's ancestors while fewer than its
``min-snapshots-to-keep`` are kept or the ancestor is not older than its ``max-snapshot-age-ms`` (each
defaulting to the table's ``history.expire.min-snapshots-to-keep`` / ``max-snapshot-age-ms``, 1 and
5 days); a tag retains its one snapshot. What a ref *alone keeps* is what it retains minus what main
retains under the same rules, measured at collection time (the table's properties, not a policy's
``retainLast``/``maxSnapshotAge``, so one record serves every policy).

**Pinned bytes** (:func:`pinned_file_bytes`, full tier only): the live data and delete files of the
manifests those snapshots list that main's current snapshot does not list, data files also dropped
when main's current snapshot still has them (a path hash, so a rewritten manifest does not count its
files twice). Cheap: the pinned snapshots' manifest lists, and only the manifests main does not share,
each read once and cached by path like main's own. It is compared with main's *current* files, not
every snapshot main retains, so it may include files that main's own older retained snapshots keep
for a while too: an upper bound of what removing the ref frees now, and what it frees once main's
retention has passed them.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from floe_dagster.core.facts.expiry_defaults import MAX_SNAPSHOT_AGE_MS, MIN_SNAPSHOTS_TO_KEEP
from floe_dagster.core.facts.refs import MAIN, TAG

# The defaults of Iceberg's history.expire.* table properties (TableProperties), as RemoveSnapshots reads them.
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1

PINNED_METHOD = (
    "snapshots: what the ref retains under Iceberg's expire_snapshots rules (its own or the table's "
    "history.expire.* settings) minus what main retains, at collection time; bytes (full tier): live files "
    "of the manifests only those snapshots list, minus data files main's current snapshot still has"
)


class SnapshotNode(NamedTuple):
    parent_id: int | None
    timestamp_ms: int


class RefHead(NamedTuple):
    """A ref as the retention rules need it."""

    type: str
    snapshot_id: int
    max_snapshot_age_ms: int | None = None
    min_snapshots_to_keep: int | None = None


def _int_property(properties: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(properties.get(key, default))
    except (TypeError, ValueError):
        return default


def retained_by(head: RefHead, snapshots: Mapping[int, SnapshotNode], now_ms: int,
                properties: Mapping[str, str]) -> set[int]:
    """The snapshots ``expire_snapshots`` keeps for one ref (RemoveSnapshots.computeBranchSnapshotsToRetain)."""
    if head.type == TAG:
        return {head.snapshot_id} if head.snapshot_id in snapshots else set()
    max_age = head.max_snapshot_age_ms
    if max_age is None:
        max_age = _int_property(properties, MAX_SNAPSHOT_AGE_MS, DEFAULT_MAX_SNAPSHOT_AGE_MS)
    keep = head.min_snapshots_to_keep
    if keep is None:
        keep = _int_property(properties, MIN_SNAPSHOTS_TO_KEEP, DEFAULT_MIN_SNAPSHOTS_TO_KEEP)
    older_than = now_ms - max_age
    kept: set[int] = set()
    current: int | None = head.snapshot_id
    while current is not None and current in snapshots and current not in kept:
        node = snapshots[current]
        if len(kept) < keep or node.timestamp_ms >= older_than:
            kept.add(current)
            current = node.parent_id
        else:
            break
    return kept


def pinned_snapshots(snapshots: Mapping[int, SnapshotNode], refs: Mapping[str, RefHead], now_ms: int,
                     properties: Mapping[str, str]) -> dict[str, set[int]]:
    """Each non-main ref → the snapshots it retains that main does not (module docstring)."""
    main = refs.get(MAIN)
    by_main = retained_by(main, snapshots, now_ms, properties) if main is not None else set()
    return {name: retained_by(head, snapshots, now_ms, properties) - by_main
            for name, head in refs.items() if name != MAIN}


def data_file_hashes(summaries: Iterable[Mapping[str, Any]]) -> set[int]:
    """The path hashes of the data files in reduced manifests (main's current snapshot's)."""
    return {entry[4] for summary in summaries if summary["content"] == 0 for entry in summary["files"]}


def pinned_file_bytes(summaries: Iterable[Mapping[str, Any]], main_data_files: set[int]) -> tuple[int, int]:
    """(files, bytes) of reduced manifests (iceberg/metadata_reduction.summarize_manifest) that main's current
    snapshot does not list: data files by path hash, once each and not when main still has them; delete
    files all (their summaries keep no path of their own)."""
    seen: set[int] = set()
    files = size = 0
    for summary in summaries:
        for entry in summary["files"]:
            if summary["content"] == 0:
                path_hash = entry[4]
                if path_hash in main_data_files or path_hash in seen:
                    continue
                seen.add(path_hash)
                files, size = files + 1, size + entry[1]
            else:
                files, size = files + 1, size + entry[2]
    return files, size


__all__ = [
    "SnapshotNode", "RefHead", "retained_by", "pinned_snapshots", "pinned_file_bytes", "data_file_hashes",
    "PINNED_METHOD",
]
