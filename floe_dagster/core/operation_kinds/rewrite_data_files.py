"""REWRITE_DATA_FILES: compaction with Iceberg's ``rewrite_data_files`` (bin-pack, sort or z-order),
the policy's ``rewriteDataFiles``. The only kind the planner may scope to partitions
(``maxBytesPerRun``, core/rewrites/partition_scope.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from floe_dagster.core.rewrites.estimates import RewriteEstimate, estimate_rewrite_data_files
from floe_dagster.core.operation_config import (
    OperationConfig,
    at_least,
    boolean,
    job_order,
    option,
    text,
)
from floe_dagster.core.operation_kinds.spec import ChecksRows, FloeNative, HoldsForWriters, RewritesData
from floe_dagster.core.basics.validation import Location, get_enum, get_str_list

if TYPE_CHECKING:
    from floe_dagster.core.facts.measurements import TableMetrics

STRATEGIES = ("BINPACK", "SORT", "ZORDER")
DEFAULT_STRATEGY = "BINPACK"
# "col", "col DESC", "col ASC NULLS LAST", "`odd name` DESC": one column (back-quoted when it has
# spaces), then the optional direction and null order.
_SORT_TERM = re.compile(r"^\s*(`[^`]+`|[^\s,()`]+)(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class RewriteDataFilesConfig(OperationConfig):
    strategy: str | None = option(None)  # BINPACK, SORT or ZORDER (read with its columns); see effective_strategy
    sort_order: tuple[str, ...] | None = option(None)  # strategy SORT: "column [ASC|DESC] [NULLS FIRST|LAST]" terms
    z_order_columns: tuple[str, ...] | None = option(None)  # ZORDER: non-empty; with SORT or BINPACK: kept, unused
    target_file_size_bytes: int | None = option(at_least(1), iceberg="target-file-size-bytes")
    max_file_group_size_bytes: int | None = option(at_least(1), iceberg="max-file-group-size-bytes")
    max_concurrent_file_group_rewrites: int | None = option(at_least(1), iceberg="max-concurrent-file-group-rewrites")
    partial_progress_enabled: bool | None = option(boolean, iceberg="partial-progress.enabled")
    partial_progress_max_commits: int | None = option(at_least(1), iceberg="partial-progress.max-commits")
    partial_progress_max_failed_commits: int | None = option(at_least(0), iceberg="partial-progress.max-failed-commits")
    filter: str | None = option(text)  # a Spark SQL predicate: the procedure's ``where``
    rewrite_job_order: str | None = option(job_order, iceberg="rewrite-job-order")
    use_starting_sequence_number: bool | None = option(boolean, iceberg="use-starting-sequence-number")
    remove_dangling_deletes: bool | None = option(boolean, iceberg="remove-dangling-deletes")
    output_spec_id: int | None = option(at_least(0), iceberg="output-spec-id")
    min_input_files: int | None = option(at_least(1), iceberg="min-input-files")
    delete_file_threshold: int | None = option(at_least(0), iceberg="delete-file-threshold")
    rewrite_all: bool | None = option(boolean, iceberg="rewrite-all")
    # Iceberg's max-files-to-rewrite (1.10+): the first files in planning order
    max_files_to_rewrite: int | None = option(at_least(1), iceberg="max-files-to-rewrite")
    # Floe's own cap on the estimated bytes one run rewrites (never sent to Iceberg): above it, the
    # planner scopes the run to the partitions with the most benefit per byte (core/rewrites/partition_scope.py).
    max_bytes_per_run: int | None = option(at_least(1))

    @property
    def effective_strategy(self) -> str:
        return self.strategy or DEFAULT_STRATEGY


def _strategy_fields(at: Location, raw: Mapping[str, object]) -> dict[str, object]:
    """``strategy``, ``sortOrder`` and ``zOrderColumns``: ZORDER needs its columns; a sort order with
    another strategy than SORT, or columns with another than ZORDER, are kept but ignored, with a warning
    (Floe stores them and its Spark job ignores them: its e2e test sends SORT with zOrderColumns, its
    comprehensive example BINPACK with both)."""
    values: dict[str, object] = {}
    strategy = get_enum(at, raw, "strategy", STRATEGIES, None)
    if strategy is not None:
        values["strategy"] = strategy
    effective = strategy or DEFAULT_STRATEGY
    sort_order = get_str_list(at, raw, "sortOrder", None)
    if sort_order is not None:
        if effective != "SORT":  # kept, never rendered (Floe's comprehensive example sends it with BINPACK)
            at.child("sortOrder").warn(f"ignored with strategy {effective} (Floe stores and ignores it too; only SORT "
                                       "uses it)")
        for index, term in enumerate(sort_order):
            if not _SORT_TERM.match(term):
                at.child("sortOrder").child(index).error(
                    f"{term!r} is not 'column [ASC|DESC] [NULLS FIRST|NULLS LAST]'")
        values["sort_order"] = tuple(sort_order)
    columns = get_str_list(at, raw, "zOrderColumns", None)
    if columns is not None:
        if effective != "ZORDER":  # kept (to_json shows them), never rendered: as Floe's Spark job does
            at.child("zOrderColumns").warn(f"ignored with strategy {effective} (Floe stores and ignores them too; "
                                           "only ZORDER uses them)")
        for index, column in enumerate(columns):
            if any(ch in column for ch in ",()"):
                at.child("zOrderColumns").child(index).error(f"{column!r} is not a column name")
        values["z_order_columns"] = tuple(columns)
    # (a zOrderColumns of the wrong type already has its own error)
    if effective == "ZORDER" and not columns and (columns == [] or raw.get("zOrderColumns") is None):
        at.child("zOrderColumns").error("strategy ZORDER needs a non-empty list of columns")
    return values


class RewriteDataFiles(RewritesData, HoldsForWriters, ChecksRows, FloeNative):
    name = "REWRITE_DATA_FILES"
    policy_key = "rewriteDataFiles"
    procedure = "rewrite_data_files"
    order = 10
    config_type = RewriteDataFilesConfig
    no_change = "`REWRITE_DATA_FILES` changed nothing when it rewrote no data file."
    docs_row = (
        "| `REWRITE_DATA_FILES` | `rewrite_data_files` | `rewriteDataFiles`: `strategy` BINPACK/SORT "
        "(`sortOrder`)/ZORDER (`zOrderColumns`), `targetFileSizeBytes`, `maxFileGroupSizeBytes`, "
        "`maxConcurrentFileGroupRewrites`, `partialProgressEnabled`, `partialProgressMaxCommits`, "
        "`partialProgressMaxFailedCommits`, `filter` (Spark SQL predicate), `rewriteJobOrder`, "
        "`useStartingSequenceNumber`, `removeDanglingDeletes`, `outputSpecId`, `minInputFiles`, "
        "`deleteFileThreshold`, `rewriteAll`, `maxFilesToRewrite` (Iceberg's `max-files-to-rewrite`), "
        "`maxBytesPerRun` (Floe's cap per run, never sent to Iceberg: see [automation](automation.md), \"Large "
        "tables\") |")

    def scopes_partitions(self) -> bool:
        return True

    def defaults(self) -> Mapping[str, object]:
        return {"strategy": DEFAULT_STRATEGY}

    def read_first(self, at: Location, raw: Mapping[str, object]) -> dict[str, object]:
        return _strategy_fields(at, raw)

    def byte_estimate(self, metrics: TableMetrics, config: OperationConfig | None) -> RewriteEstimate | None:
        return estimate_rewrite_data_files(metrics, config)

    def changed(self, numbers: Mapping[str, int]) -> bool:
        return numbers["rewritten_data_files_count"] > 0


SPEC = RewriteDataFiles()
