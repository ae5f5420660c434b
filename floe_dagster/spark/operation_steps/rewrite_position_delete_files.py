"""REWRITE_POSITION_DELETE_FILES in a run: the ``rewrite_position_delete_files`` call with the policy's
options and floe's commit-race options (core/runs/commit_conflicts.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping

from floe_dagster.core.runs.commit_conflicts import race_options
from floe_dagster.core.operation_kinds.rewrite_position_delete_files import RewritePositionDeleteFilesConfig
from floe_dagster.spark.operation_steps.step import OperationStep
from floe_dagster.spark.procedures import CallArguments


class RewritePositionDeleteFilesStep(OperationStep):
    kind = "REWRITE_POSITION_DELETE_FILES"
    result_columns = ("rewritten_delete_files_count", "added_delete_files_count", "rewritten_bytes_count",
                      "added_bytes_count")

    def arguments(self, call: CallArguments, config: RewritePositionDeleteFilesConfig, now: datetime,
                  table_properties: Mapping[str, str]) -> None:
        options = config.iceberg_options()
        call.add("options", {**options, **race_options(options, table_properties)})


STEP = RewritePositionDeleteFilesStep()
