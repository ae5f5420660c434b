"""EXPIRE_SNAPSHOTS in a run: first, under the lock, the policy's ``refRetention`` set on the table's refs
(iceberg/ref_retention.py), so the expiry removes the refs older than their limit; then the
``expire_snapshots`` call, each unset option from the table's ``history.expire.*`` properties (bounded:
core/facts/expiry_defaults.py), else Floe's defaults; after it, the refs it removed (a removed ref is a change,
for the zero-change throttle)."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping

from floe_dagster.core.facts.expiry_defaults import expiry_arguments
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.iceberg.ref_retention import apply_ref_retention
from floe_dagster.spark.operation_steps.step import Committed, OperationStep, Prepared, TableWork, as_json
from floe_dagster.spark.procedures import CallArguments


class ExpireSnapshotsStep(OperationStep):
    kind = "EXPIRE_SNAPSHOTS"
    result_columns = ("deleted_data_files_count", "deleted_position_delete_files_count",
                      "deleted_equality_delete_files_count", "deleted_manifest_files_count",
                      "deleted_manifest_lists_count", "deleted_statistics_files_count")
    deleted_files_columns = result_columns

    def prepare(self, work: TableWork) -> Prepared:
        """Before the expiry, under the lock: the refs' max-ref-age from refRetention."""
        return Prepared(state=apply_ref_retention(work.before, work.table, work.resolved.ref_retention))

    def arguments(self, call: CallArguments, config: ExpireSnapshotsConfig, now: datetime,
                  table_properties: Mapping[str, str]) -> None:
        # Explicit policy value, else the table's history.expire.* property (bounded: the owner's, untrusted),
        # else Floe's default.
        chosen = expiry_arguments(config.retain_last, config.max_snapshot_age, table_properties)
        call.older_than(now - chosen.max_age)
        call.add("retain_last", chosen.retain_last)
        call.add("clean_expired_metadata", config.clean_expired_metadata)
        call.add("stream_results", config.stream_results)

    def after_commit(self, done: Committed) -> dict[str, object]:
        """The refs the expiry removed (older than their max-ref-age): a change, for the zero-change throttle too."""
        refs = done.state
        if refs is None:
            return {}
        removed = refs.removed(done.after)
        return {"changed": done.outcome.result.changed or bool(removed), "refs_removed_count": len(removed),
                "refs_removed": as_json(removed), "ref_retention_set": as_json(refs.changes_json())}


STEP = ExpireSnapshotsStep()
