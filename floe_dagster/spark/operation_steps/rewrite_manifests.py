"""REWRITE_MANIFESTS in a run: the ``rewrite_manifests`` call (``spec_id``, from ``rewriteIf`` too;
``use_caching``; ``sort_by`` where the Spark line's procedure has it)."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping

from floe_dagster.core.operation_kinds.rewrite_manifests import RewriteManifestsConfig
from floe_dagster.spark.operation_steps.step import OperationStep
from floe_dagster.spark.procedures import CallArguments, release


def supports_manifest_sort_by(iceberg_version: str | None, spark_line: str | None) -> bool:
    """Whether rewrite_manifests has ``sort_by``: Iceberg 1.11 added it to the Spark 4.1 runtime only
    (its 3.5 and 4.0 runtimes' RewriteManifestsProcedure take table, use_caching and spec_id). An
    unknown Spark line: no (the procedure refuses a parameter it does not have)."""
    line, iceberg = release(spark_line), release(iceberg_version)
    return line is not None and line >= (4, 1) and (iceberg is None or iceberg >= (1, 11))


class RewriteManifestsStep(OperationStep):
    kind = "REWRITE_MANIFESTS"
    result_columns = ("rewritten_manifests_count", "added_manifests_count")

    def arguments(self, call: CallArguments, config: RewriteManifestsConfig, now: datetime,
                  table_properties: Mapping[str, str]) -> None:
        call.add("spec_id", config.effective_spec_id)  # rewriteIf's specId too
        call.add("use_caching", config.use_caching)
        if config.sort_by:
            if supports_manifest_sort_by(call.iceberg_version, call.spark_line):
                call.add("sort_by", list(config.sort_by))
            else:  # the policy's warning says so too; the run's metadata shows it
                call.decided["sort_by_ignored"] = (f"{list(config.sort_by)}: rewrite_manifests has no sort_by on "
                                                   f"Spark {call.spark_line or '(unknown)'} (Iceberg 1.11: Spark 4.1 "
                                                   "only)")


STEP = RewriteManifestsStep()
