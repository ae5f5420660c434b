"""REWRITE_POSITION_DELETE_FILES: Iceberg's ``rewrite_position_delete_files``, the policy's
``rewritePositionDeleteFiles``: small position delete files compacted, dangling ones dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from floe_dagster.core.rewrites.estimates import RewriteEstimate, estimate_rewrite_position_delete_files
from floe_dagster.core.operation_config import OperationConfig, at_least, boolean, job_order, option
from floe_dagster.core.operation_kinds.spec import ChecksRows, HoldsForWriters, RewritesData

if TYPE_CHECKING:
    from floe_dagster.core.facts.measurements import TableMetrics


@dataclass(frozen=True)
class RewritePositionDeleteFilesConfig(OperationConfig):
    target_file_size_bytes: int | None = option(at_least(1), iceberg="target-file-size-bytes")
    partial_progress_enabled: bool | None = option(boolean, iceberg="partial-progress.enabled")
    partial_progress_max_commits: int | None = option(at_least(1), iceberg="partial-progress.max-commits")
    rewrite_job_order: str | None = option(job_order, iceberg="rewrite-job-order")
    min_input_files: int | None = option(at_least(1), iceberg="min-input-files")
    rewrite_all: bool | None = option(boolean, iceberg="rewrite-all")


class RewritePositionDeleteFiles(RewritesData, HoldsForWriters, ChecksRows):
    name = "REWRITE_POSITION_DELETE_FILES"
    policy_key = "rewritePositionDeleteFiles"
    procedure = "rewrite_position_delete_files"
    order = 50
    config_type = RewritePositionDeleteFilesConfig
    no_change = "`REWRITE_POSITION_DELETE_FILES` changed nothing when it rewrote no delete file."
    docs_row = (
        "| `REWRITE_POSITION_DELETE_FILES` | `rewrite_position_delete_files` | `rewritePositionDeleteFiles`: "
        "`targetFileSizeBytes`, `partialProgressEnabled`, `partialProgressMaxCommits`, `rewriteJobOrder`, "
        "`minInputFiles`, `rewriteAll` |")

    def byte_estimate(self, metrics: TableMetrics, config: OperationConfig | None) -> RewriteEstimate | None:
        return estimate_rewrite_position_delete_files(metrics, config)

    def changed(self, numbers: Mapping[str, int]) -> bool:
        return numbers["rewritten_delete_files_count"] > 0


SPEC = RewritePositionDeleteFiles()
