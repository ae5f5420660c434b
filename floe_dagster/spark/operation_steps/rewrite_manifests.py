"""REWRITE_MANIFESTS in a run: the ``rewrite_manifests`` call (``spec_id``, from ``rewriteIf`` too;
``use_caching``; ``sort_by`` where the Spark line's procedure has it)."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping

from floe_dagster.core.operation_kinds.rewrite_manifests import RewriteManifestsConfig
from floe_dagster.settings import DEFAULT_ICEBERG_VERSION
from floe_dagster.spark.operation_steps.step import OperationStep
from floe_dagster.spark.procedures import CallArguments, release


# The first Iceberg release whose rewrite_manifests takes ``sort_by``, per Spark line (javap on the runtime
# jars' RewriteManifestsProcedure): 1.11 on Spark 4.1, 1.12 on Spark 3.5 (backported). Spark 4.0's last
# runtime (1.11) has none; a line newer than 4.1 is taken to keep it.
MANIFEST_SORT_BY_SINCE = {(3, 5): (1, 12), (4, 1): (1, 11)}


def supports_manifest_sort_by(iceberg_version: str | None, spark_line: str | None) -> bool:
    """Whether rewrite_manifests has ``sort_by`` on this Spark line and Iceberg release (None: floe's
    default release). An unknown Spark line: no (the procedure refuses a parameter it does not have)."""
    line, iceberg = release(spark_line), release(iceberg_version or DEFAULT_ICEBERG_VERSION)
    if line is None:
        return False
    since = MANIFEST_SORT_BY_SINCE.get(line) or (MANIFEST_SORT_BY_SINCE[(4, 1)] if line > (4, 1) else None)
    return since is not None and iceberg is not None and iceberg >= since


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
                iceberg = call.iceberg_version or DEFAULT_ICEBERG_VERSION
                call.decided["sort_by_ignored"] = (f"{list(config.sort_by)}: rewrite_manifests has no sort_by on "
                                                   f"Spark {call.spark_line or '(unknown)'} with Iceberg {iceberg} "
                                                   "(it has: Spark 4.1 from Iceberg 1.11, Spark 3.5 from 1.12)")


STEP = RewriteManifestsStep()
