"""REWRITE_DATA_FILES in a run: the ``rewrite_data_files`` call (strategy, sort order or z-order, the
policy's options and floe's commit-race options, a partition scope's ``where`` or file count), and after
the commit, what a partial-progress rewrite landed (a lost race is a conflict, groups that failed for
their own reason a failure)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from floe_dagster.core.runs.commit_conflicts import (
    CONFLICT, FAILED, PARTIAL, PARTIAL_PROGRESS, WINNER_PREFIX, race_options,
)
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.rewrites.partition_scope import MAX_SCOPED_PARTITIONS
from floe_dagster.errors import CommitConflict, MaintenanceFailed
from floe_dagster.iceberg.rewrite_progress import rewrite_progress
from floe_dagster.spark.operation_steps.step import Committed, OperationStep
from floe_dagster.spark.partition_predicates import partition_predicate
from floe_dagster.spark.procedures import CallArguments
from floe_dagster.spark.sql_literals import quote_literal

if TYPE_CHECKING:
    from pyiceberg.table import Table


class RewriteDataFilesStep(OperationStep):
    kind = "REWRITE_DATA_FILES"
    result_columns = ("rewritten_data_files_count", "added_data_files_count", "rewritten_bytes_count",
                      "failed_data_files_count", "removed_delete_files_count")

    def arguments(self, call: CallArguments, config: RewriteDataFilesConfig, now: datetime,
                  table_properties: Mapping[str, str]) -> None:
        strategy = config.effective_strategy
        call.decided["strategy"] = strategy
        if strategy == "ZORDER":
            call.sql.append(("strategy", quote_literal("sort")))
            call.sql.append(("sort_order", quote_literal("zorder(" + ",".join(config.z_order_columns or ()) + ")")))
            call.decided["zorder"] = list(config.z_order_columns or ())
        else:
            call.sql.append(("strategy", quote_literal(strategy.lower())))
            if strategy == "SORT" and config.sort_order:  # without one, Iceberg sorts by the table's own sort order
                call.sql.append(("sort_order", quote_literal(", ".join(config.sort_order))))
                call.decided["sort_order"] = list(config.sort_order)
        options = config.iceberg_options()
        options, where = {**options, **race_options(options, table_properties)}, config.filter  # commit_conflicts
        if call.scope is not None:
            options, where = _scoped(call, options, where)
        call.add("options", options)
        call.add("where", where)

    def after_commit(self, done: Committed) -> dict[str, object]:
        """What a partial-progress rewrite landed (nothing to check without partial progress or failed groups)."""
        work, outcome = done.work, done.outcome
        options = outcome.arguments.get("options") or {}
        partial = bool(options.get(PARTIAL_PROGRESS))
        failed = int(outcome.result.numbers.get("failed_data_files_count", 0))
        if not partial and not failed:
            return {}  # without partial progress a lost race throws (the engine's CommitConflict)
        before = work.before
        progress = rewrite_progress(before, done.after, work.config, partial, failed, dict(before.properties))
        what = f"{work.op.procedure} on '{work.table.qualified}'"
        if progress.outcome == FAILED:
            raise MaintenanceFailed(f"{what} rewrote nothing: {progress.describe()}")
        if progress.outcome == CONFLICT:
            raise CommitConflict(f"{what} lost a commit race: {progress.describe()}; "
                                 f"{WINNER_PREFIX}{_newest_other_commit(before, done.after)}")
        if progress.outcome == PARTIAL:
            work.log.warning(f"{work.op.value} on {work.table.qualified} landed partly: {progress.describe()}; "
                             "the groups left are rewritten by a later run")
        return progress.metadata()


def _scoped(call: CallArguments, options: dict[str, Any], where: str | None) -> tuple[dict[str, Any], str | None]:
    """A partition-scoped rewrite (core/rewrites/partition_scope.py): ``where`` limited to the chosen units, or to
    the files of older partition specs (ANDed with the policy's ``filter``), and/or
    ``max-files-to-rewrite`` (the smaller of the planner's and the policy's). A scope recorded before
    its fields were whose where cannot be written exactly (a bucket field) is bounded by its file count."""
    scope = call.scope
    call.decided["scoped_partitions"] = len(scope.partitions)
    limit = scope.max_files
    how = []
    predicate = None
    if scope.older_specs_excluding is not None:  # the older specs' files: one where, however many values
        predicate = partition_predicate(scope.fields, scope.older_specs_excluding, older_specs=True)
    elif scope.partitions and len(scope.partitions) <= MAX_SCOPED_PARTITIONS:
        predicate = partition_predicate(scope.fields, scope.partitions)
    if predicate is not None:
        where = f"({where}) AND ({predicate})" if where else predicate
        how.append("where")
    elif (scope.partitions or scope.older_specs_excluding is not None) and limit is None:
        limit = max(1, scope.files)
    if limit is not None:
        options = {**options, "max-files-to-rewrite": min(limit, options.get("max-files-to-rewrite") or limit)}
        how.append("max-files-to-rewrite")
    for option, value in (("min-file-size-bytes", scope.min_file_size), ("min-input-files", scope.min_input_files)):
        if value is not None:  # Iceberg's file rules for this run (core/rewrites/older_specs.py)
            options = {**options, option: value}
            how.append(option)
    call.decided["scope"] = " + ".join(how) or "none"
    return options, where


def _newest_other_commit(before: Table, after: Table) -> str:
    known = {s.snapshot_id for s in before.metadata.snapshots}
    others = [s for s in after.metadata.snapshots if s.snapshot_id not in known
              and (s.summary is None or s.summary.operation.value != "replace")]
    if not others:
        return "unknown (no other commit is left in the table's history)"
    newest = others[-1]
    operation = newest.summary.operation.value if newest.summary is not None else "unknown operation"
    at = datetime.fromtimestamp(newest.timestamp_ms / 1000, timezone.utc).isoformat()
    more = f", and {len(others) - 1} more" if len(others) > 1 else ""
    return f"snapshot {newest.snapshot_id} ({operation}) at {at}{more}"


STEP = RewriteDataFilesStep()
