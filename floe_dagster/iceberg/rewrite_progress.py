"""What a ``rewrite_data_files`` run with partial progress landed, read from the table (PyIceberg).

Iceberg drops a partial-progress commit that lost its race without a word: its groups are neither in
the procedure's result nor in ``failed_data_files_count``. So the groups Iceberg's planner takes at the
run's start snapshot (the rules of core/rewrites/estimates.py) are planned again over the files of that
snapshot still live afterwards: those groups were left behind (core/runs/commit_conflicts.RewriteProgress).
"""

from __future__ import annotations

from typing import Any, Mapping

from pyiceberg.table import Table

from floe_dagster.core.runs.commit_conflicts import RewriteProgress
from floe_dagster.core.rewrites.estimates import DataFileInfo, plan_data_file_rewrite
from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig

DEFAULT_MAX_COMMITS = 10  # Iceberg's partial-progress.max-commits


def rewrite_progress(before: Table, after: Table, config: RewriteDataFilesConfig, partial_progress: bool,
                     failed_data_files: int, properties: Mapping[str, str]) -> RewriteProgress:
    """``before``: the table as the run found it; ``after``: read after the procedure returned."""
    known = {s.snapshot_id for s in before.metadata.snapshots}
    new = [s for s in after.metadata.snapshots if s.snapshot_id not in known]
    ours = [s for s in new if s.summary is not None and s.summary.operation.value == "replace"]
    progress = dict(partial_progress=partial_progress, commits=len(ours), concurrent_commits=len(new) - len(ours),
                    failed_data_files=failed_data_files,
                    max_commits=config.partial_progress_max_commits or DEFAULT_MAX_COMMITS)
    start, now = before.current_snapshot(), after.current_snapshot()
    if start is None or now is None or not (partial_progress or failed_data_files):
        return RewriteProgress(**progress)
    at_start = _data_files(after, start.snapshot_id)
    live = {path for path, _ in _data_files(after, now.snapshot_id)}
    rules = RewriteRules.for_data_files(config, properties)
    planned = plan_data_file_rewrite([info for _, info in at_start], rules)
    left = plan_data_file_rewrite([info for path, info in at_start if path in live], rules)
    return RewriteProgress(**progress, groups_planned=planned.groups, groups_left=left.groups, files_left=left.files)


def _data_files(table: Table, snapshot_id: int) -> list[tuple[str, DataFileInfo]]:
    """(path, the planner's view of the file) for each live data file of a snapshot, in scan order."""
    found = []
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        data = task.file
        scoped = sum(d.record_count for d in task.delete_files
                     if getattr(d, "referenced_data_file", None) == data.file_path)
        partition = f"{data.spec_id}:{_partition_key(data.partition)}"
        found.append((data.file_path, DataFileInfo(partition, data.file_size_in_bytes, len(task.delete_files),
                                                   scoped, data.record_count)))
    return found


def _partition_key(partition: Any) -> str:
    try:
        return repr(tuple(partition))
    except TypeError:
        return repr(partition)
