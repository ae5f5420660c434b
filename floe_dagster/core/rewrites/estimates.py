"""Byte estimates for the rewriting operations: which files Iceberg's own planners would pick.

Pure (no PyIceberg, Spark or Dagster): the inputs are per-file numbers that the full health tier
stores in :class:`~floe_dagster.core.facts.measurements.TableMetrics` (``data_file_groups`` and
``position_delete_groups``), so one cached record serves every policy.

The rules follow Iceberg 1.10.2 and 1.11.0 alike: read in Iceberg's source at the commits their Spark
runtimes were built from (``git.commit.id`` in the jar's ``iceberg-build.properties``), the planners
below select the same files in both, for Spark 3.5, 4.0 and 4.1 (the planners live in iceberg-core;
the Spark actions of each line list the same valid options). What 1.11 changed does not reach the
selection: ``max-file-group-input-files`` (a cap on a group's file count) is new in the planner, but
Spark's ``rewrite_data_files`` refuses it as an unknown option (only Flink's maintenance API passes
it), so groups are bounded by bytes alone; and with ``max-files-to-rewrite`` 1.11 sizes a truncated
group's splits and output files from the files kept (1.10.2 from the whole group), which changes how
the kept files are written, not which. The rules:

``rewrite_data_files`` (``BinPackRewriteFilePlanner`` over ``SizeBasedFileRewritePlanner``)
  * files are grouped per partition of the table's *current* spec; files written under another spec
    all go to one group (the current spec's all-null partition);
  * a file is a candidate when its size is under ``min-file-size-bytes`` (default 75 % of the target)
    or over ``max-file-size-bytes`` (default 180 %), or it has at least ``delete-file-threshold``
    delete files (default ``Integer.MAX_VALUE``: off), or its file-scoped deletes remove at least
    ``delete-ratio-threshold`` (default 0.3) of its rows;
  * candidates are bin-packed, in scan order, into groups of at most ``max-file-group-size-bytes``
    (default 100 GiB; a lookback of one bin);
  * a group is rewritten when it has more than one file and at least ``min-input-files`` (default 5),
    or more than one file and more bytes than the target ("enough content"), or more bytes than
    ``max-file-size-bytes`` ("too much content"), or any file has too many deletes or too high a
    delete ratio;
  * ``rewrite-all`` takes every file and keeps every group (the group filter is skipped then);
  * ``max-files-to-rewrite`` keeps the first files of the groups, in partition order, up to that count
    (Iceberg's partition order is a hash order, so which partitions come first is approximate);
  * the target is ``target-file-size-bytes``, else the table's ``write.target-file-size-bytes``,
    else 512 MiB.

``rewrite_position_delete_files`` (``BinPackRewritePositionDeletePlanner``)
  * position delete files grouped per partition (coerced to the union of all specs' fields), picked
    by size only, groups kept by the same three size rules (no delete rules), ``rewrite-all`` as
    above; the target is ``target-file-size-bytes``, else ``write.delete.target-file-size-bytes``,
    else 64 MiB.

What the estimate cannot see: the ``where`` filter of a policy (``filter``) and Iceberg's pruning of
equality deletes by column statistics (delete counts per file may be over-counted), and position
delete files whose ``file_path`` bounds span several data files are counted against every data file
of their partition with an older sequence number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Sequence

from floe_dagster.core.operation_config import OperationConfig
from floe_dagster.core.rewrites.rewrite_rules import (
    DELETE_TARGET_FILE_SIZE_PROPERTY, TARGET_FILE_SIZE_PROPERTY, RewriteRules,
)

if TYPE_CHECKING:  # pragma: no cover
    from floe_dagster.core.facts.measurements import TableMetrics


class DataFileInfo(NamedTuple):
    """One live data file, as the rewrite planner sees it.

    ``delete_files``: delete files that apply to it (Iceberg's ``task.deletes().size()``);
    ``deleted_records``: rows removed by its *file-scoped* position deletes (the delete-ratio rule).
    """

    partition: str
    size: int
    delete_files: int = 0
    deleted_records: int = 0
    record_count: int = 0


class DeleteFileInfo(NamedTuple):
    """One live position delete file."""

    partition: str
    size: int


@dataclass(frozen=True)
class RewriteEstimate:
    """What a rewrite would take: input bytes and files, file groups, partitions touched."""

    bytes: int = 0
    files: int = 0
    groups: int = 0
    partitions: int = 0

    def to_json(self) -> dict[str, int]:
        return {"bytes": self.bytes, "files": self.files, "groups": self.groups, "partitions": self.partitions}


def estimate_error_pct(estimated_bytes: int, actual_bytes: int) -> float | None:
    """How far the estimate was from what Iceberg rewrote, in % of the actual bytes (positive: the
    estimate was high); None when nothing was estimated or rewritten to compare."""
    if estimated_bytes <= 0 or actual_bytes <= 0:
        return None
    return round((estimated_bytes - actual_bytes) * 100.0 / actual_bytes, 2)


# -- planning -----------------------------------------------------------------------------------------


def pack_groups(sizes: Sequence[int], max_group_bytes: int) -> list[list[int]]:
    """Iceberg's ``BinPacking.ListPacker(maxGroupSize, lookback=1, largestBinFirst=false)``: indexes
    into ``sizes`` packed in order; an item joins the open bin if the bin stays within the limit,
    otherwise it opens a new bin (an item larger than the limit gets a bin of its own)."""
    if sum(sizes) <= max_group_bytes:  # all fit in the first bin (the usual case: the limit is 100 GiB)
        return [list(range(len(sizes)))] if sizes else []
    groups: list[list[int]] = []
    current: list[int] = []
    weight = 0
    for index, size in enumerate(sizes):
        if current and weight + size <= max_group_bytes:
            current.append(index)
            weight += size
            continue
        if current:
            groups.append(current)
        current, weight = [index], size
    if current:
        groups.append(current)
    return groups


def _delete_rule_hit(delete_files: int, deleted_records: int, record_count: int, rules: RewriteRules) -> bool:
    """Too many delete files, or file-scoped deletes removing too high a share of the rows."""
    if delete_files >= rules.delete_file_threshold:
        return True
    if delete_files <= 0 or record_count <= 0:  # no deletes, or 0/0 (NaN in Java: never true)
        return False
    return min(deleted_records, record_count) / record_count >= rules.delete_ratio_threshold


def _keep_by_size(sizes: list[int], rules: RewriteRules) -> bool:
    total = sum(sizes)
    enough_input_files = len(sizes) > 1 and len(sizes) >= rules.min_input_files
    enough_content = len(sizes) > 1 and total > rules.target_file_size_bytes
    too_much_content = total > rules.max_file_size_bytes
    return enough_input_files or enough_content or too_much_content


def _partition_groups(sizes: Sequence[int], delete_hits: Sequence[bool] | None, rules: RewriteRules) -> list[list[int]]:
    """The groups (lists of file sizes) a rewrite takes from one partition's files, in scan order.
    ``delete_hits[i]``: file i meets a delete rule (None: no file does, as for delete files). Plain
    numbers, no per-file objects: a cold planner tick estimates every file of every table."""
    if delete_hits is None and not rules.rewrite_all:  # sizes alone decide: no index lists
        low, high = rules.min_file_size_bytes, rules.max_file_size_bytes
        candidates = [size for size in sizes if size < low or size > high]
        if not candidates:
            return []
        if sum(candidates) <= rules.max_file_group_size_bytes:  # one bin, as pack_groups packs it
            return [candidates] if _keep_by_size(candidates, rules) else []
    return [[sizes[i] for i in group] for group in partition_group_indexes(sizes, delete_hits, rules)]


def partition_group_indexes(sizes: Sequence[int], delete_hits: Sequence[bool] | None,
                            rules: RewriteRules) -> list[list[int]]:
    """:func:`_partition_groups` as indexes into ``sizes`` (which files, not only how large)."""
    low, high = rules.min_file_size_bytes, rules.max_file_size_bytes
    if rules.rewrite_all:
        picked = list(range(len(sizes)))
    elif delete_hits is None:
        picked = [i for i, size in enumerate(sizes) if size < low or size > high]
    else:
        picked = [i for i, size in enumerate(sizes) if size < low or size > high or delete_hits[i]]
    candidates = [sizes[i] for i in picked]
    selected = []
    for group in pack_groups(candidates, rules.max_file_group_size_bytes):
        chosen = [candidates[j] for j in group]
        if rules.rewrite_all or _keep_by_size(chosen, rules) or (
                delete_hits is not None and any(delete_hits[picked[j]] for j in group)):
            selected.append([picked[j] for j in group])
    return selected


def _estimate(partitions: Iterable[tuple[str, list[list[int]]]], max_files: int | None = None) -> RewriteEstimate:
    """Totals over the partitions' selected groups; ``max_files`` keeps the first files of the groups,
    in partition order (``max-files-to-rewrite``)."""
    total_bytes = files = groups = 0
    touched = set()
    remaining = max_files
    for partition, selected in partitions:
        for chosen in selected:
            if remaining is not None:
                if remaining <= 0:
                    break
                chosen = chosen[:remaining]
                remaining -= len(chosen)
            total_bytes += sum(chosen)
            files += len(chosen)
            groups += 1
            touched.add(partition)
    return RewriteEstimate(bytes=total_bytes, files=files, groups=groups, partitions=len(touched))


def _by_partition(files: Iterable[Any]) -> dict[str, list[Any]]:
    partitions: dict[str, list[object]] = {}
    for f in files:
        partitions.setdefault(f[0], []).append(f)
    return partitions


def plan_data_file_rewrite(files: Iterable[DataFileInfo | tuple], rules: RewriteRules) -> RewriteEstimate:
    """Bytes, files and groups ``rewrite_data_files`` (bin-pack) would rewrite. ``files`` may be plain
    ``(partition, size[, delete_files, deleted_records, record_count])`` tuples, in scan order."""
    partitions = []
    for partition, members in _by_partition(f if type(f) is DataFileInfo else DataFileInfo(*f) for f in files).items():
        hits = [_delete_rule_hit(f.delete_files, f.deleted_records, f.record_count, rules) for f in members]
        partitions.append((partition, _partition_groups([f.size for f in members], hits, rules)))
    return _estimate(partitions, rules.max_files_to_rewrite)


def plan_position_delete_rewrite(files: Iterable[DeleteFileInfo | tuple], rules: RewriteRules) -> RewriteEstimate:
    """Bytes, files and groups ``rewrite_position_delete_files`` would rewrite (``files``: position
    delete files as ``(partition, size)``)."""
    return _estimate((partition, _partition_groups([f[1] for f in members], None, rules))
                     for partition, members in _by_partition(files).items())


# -- from TableMetrics -----------------------------------------------------------------------------------


Group = tuple[str, tuple[int, ...], tuple[tuple[int, int, int, int], ...]]  # TableMetrics.data_file_groups


def all_null_key(key: str) -> bool:
    """Whether a partition key (a JSON list) holds only nulls, as the unpartitioned ``[]`` does."""
    return key == "[]" or (key.startswith("[null") and all(part == "null" for part in key[1:-1].split(",")))


def rewrite_groups(groups: Sequence[Group]) -> Sequence[Group]:
    """The recorded groups (one per spec and partition) as Iceberg's rewrite planner groups files: every
    file of another spec joins the default spec's all-null partition (``groupByPartition``: "treating
    all such files as un-partitioned"), in the order the groups were recorded."""
    if all(key.startswith("[") for key, _, _ in groups):  # one spec: the usual case, nothing to merge
        return groups
    merged: list[Group] = []
    sizes: list[int] = []
    deletes: list[tuple[int, int, int, int]] = []
    place = name = None
    for key, group_sizes, group_deletes in groups:
        if key.startswith("[") and not all_null_key(key):
            merged.append((key, group_sizes, group_deletes))
            continue
        if place is None:
            place = len(merged)
            merged.append(("", (), ()))
        if key.startswith("["):
            name = key
        deletes.extend((len(sizes) + index, *rest) for index, *rest in group_deletes)
        sizes.extend(group_sizes)
    merged[place] = (name or OTHER_SPECS_GROUP, tuple(sizes), tuple(deletes))
    return merged


OTHER_SPECS_GROUP = "other specs"  # the merged group's name when the default spec has no all-null partition


def data_files_of(metrics: "TableMetrics") -> list[DataFileInfo] | None:
    """The data files of a full-tier record, in scan order per partition as Iceberg's rewrite planner
    groups them (:func:`rewrite_groups`); None in the summary tier."""
    if metrics.data_file_groups is None:
        return None
    files: list[DataFileInfo] = []
    for partition, sizes, deletes in rewrite_groups(metrics.data_file_groups):
        extra = {index: (count, rows, records) for index, count, rows, records in deletes}
        for index, size in enumerate(sizes):
            count, rows, records = extra.get(index, (0, 0, 0))
            files.append(DataFileInfo(partition, size, count, rows, records))
    return files


def position_deletes_of(metrics: "TableMetrics") -> list[DeleteFileInfo] | None:
    if metrics.position_delete_groups is None:
        return None
    return [DeleteFileInfo(partition, size) for partition, sizes in metrics.position_delete_groups for size in sizes]


def estimate_rewrite_data_files(
    metrics: "TableMetrics", config: OperationConfig | None = None
) -> RewriteEstimate | None:
    """What ``rewrite_data_files`` with the policy's config would rewrite; None without the full tier."""
    if metrics.data_file_groups is None:
        return None
    return plan_recorded_data_files(metrics, _rules("data", config, metrics.properties))


def plan_recorded_data_files(metrics: "TableMetrics", rules: RewriteRules) -> RewriteEstimate:
    """:func:`plan_data_file_rewrite` over a full-tier record's files, read as stored."""
    groups = rewrite_groups(metrics.data_file_groups)
    if len({partition for partition, _, _ in groups}) != len(groups):  # the collector lists each once
        return plan_data_file_rewrite(data_files_of(metrics), rules)
    selected = []
    no_deletes_hit = _delete_rule_hit(0, 0, 0, rules)  # a delete-file-threshold of 0 takes every file
    for partition, sizes, deletes in groups:  # read as stored: no object per file
        hits = None
        if deletes or no_deletes_hit:
            hits = [no_deletes_hit] * len(sizes)
            for index, count, rows, records in deletes:
                hits[index] = _delete_rule_hit(count, rows, records, rules)
        selected.append((partition, _partition_groups(sizes, hits, rules)))
    return _estimate(selected, rules.max_files_to_rewrite)


def estimate_rewrite_position_delete_files(
    metrics: "TableMetrics", config: OperationConfig | None = None
) -> RewriteEstimate | None:
    """What ``rewrite_position_delete_files`` with the policy's config would rewrite; None without the
    full tier."""
    groups = metrics.position_delete_groups
    if groups is None:
        return None
    rules = _rules("deletes", config, metrics.properties)
    if len({partition for partition, _ in groups}) != len(groups):  # the collector lists each once
        return plan_position_delete_rewrite(position_deletes_of(metrics), rules)
    # Read as stored, no object per delete file: a cold tick estimates every table's.
    return _estimate((partition, _partition_groups(sizes, None, rules)) for partition, sizes in groups if sizes)


def data_file_rules(config: object, properties: Mapping[str, str]) -> RewriteRules:
    """``RewriteRules.for_data_files``, built once per config and target size (the admission scopes every
    rewrite candidate of a tick with them)."""
    return _rules("data", config, properties)


def _rules(kind: str, config: object, properties: Mapping[str, str]) -> RewriteRules:
    """The rules for a table. They depend only on the config and the one table property read, which
    most tables share, so a tick builds each combination once."""
    build, target_property = _RULE_BUILDERS[kind]
    # Kept on the (immutable) config when it has a __dict__: a config's generated hash reads every field,
    # and a cold tick asks once per rewriting decision.
    kept = getattr(config, "__dict__", None)
    memo = _RULES if kept is None else kept.setdefault("_rules", {})  # not a field: equality ignores it
    target = properties.get(target_property)
    key = (kind, target) if kept is not None else (kind, config, target)
    rules = memo.get(key)
    if rules is None:
        rules = build(config, properties)
        if len(memo) >= 1024:
            memo.clear()
        memo[key] = rules
    return rules


_RULE_BUILDERS = {
    "data": (RewriteRules.for_data_files, TARGET_FILE_SIZE_PROPERTY),
    "deletes": (RewriteRules.for_position_deletes, DELETE_TARGET_FILE_SIZE_PROPERTY),
}
_RULES: dict[tuple, RewriteRules] = {}
