"""SQL rendering of the typed operation configs for Iceberg's procedures: every option mapped, names
quoted. The configs come from the core's parser, which refuses bad options (test_policy.py)."""

from datetime import datetime, timezone

import pytest

from floe_dagster.core.rewrites.rewrite_rules import RewriteRules
from floe_dagster.core.rewrites.estimates import estimate_rewrite_data_files
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_kinds.expire_snapshots import ExpireSnapshotsConfig
from floe_dagster.core.operation_kinds.orphan_cleanup import OrphanCleanupConfig
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operations import CONFIG_TYPES
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import ProcedureOptionError
from floe_dagster.spark.sql_literals import quote_identifier, quote_literal
from floe_dagster.spark.operation_steps import build_procedure_call, summarize_result
from floe_dagster.spark.orphan_calls import ORPHAN_SAMPLE_LIMIT, OrphanRound, orphan_cleanup_calls, summarize_capped_orphan_cleanup, summarize_orphan_cleanup
from floe_dagster.spark.procedures import table_argument

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
T = TableName("demo", ("sales",), "orders")


def call(op, raw, props=None, table=T):
    """The SQL for a config as a policy writes it (``raw``, parsed by the core)."""
    return build_procedure_call(op, table, CONFIG_TYPES[op].from_mapping(raw), NOW, props).sql


def test_rewrite_data_files_maps_every_option():
    sql = call(Operation.REWRITE_DATA_FILES, {
        "strategy": "binpack", "targetFileSizeBytes": 1024, "maxFileGroupSizeBytes": 4096,
        "maxConcurrentFileGroupRewrites": 3, "partialProgressEnabled": True, "partialProgressMaxCommits": 7,
        "partialProgressMaxFailedCommits": 2, "rewriteJobOrder": "BYTES_DESC", "useStartingSequenceNumber": False,
        "removeDanglingDeletes": True, "outputSpecId": 0, "minInputFiles": 2, "deleteFileThreshold": 9,
        "rewriteAll": True, "filter": "region = 'eu'",
    })
    assert sql.startswith("CALL `demo`.`system`.rewrite_data_files(table => '`demo`.`sales`.`orders`', strategy => 'binpack'")
    for fragment in [
        "'target-file-size-bytes', '1024'", "'max-file-group-size-bytes', '4096'",
        "'max-concurrent-file-group-rewrites', '3'", "'partial-progress.enabled', 'true'",
        "'partial-progress.max-commits', '7'", "'partial-progress.max-failed-commits', '2'",
        "'rewrite-job-order', 'bytes-desc'", "'use-starting-sequence-number', 'false'",
        "'remove-dangling-deletes', 'true'", "'output-spec-id', '0'", "'min-input-files', '2'",
        "'delete-file-threshold', '9'", "'rewrite-all', 'true'", "where => 'region = \\'eu\\''",
    ]:
        assert fragment in sql


def test_sort_and_zorder_strategies():
    sort = call(Operation.REWRITE_DATA_FILES, {"strategy": "SORT", "sortOrder": ["id DESC NULLS LAST", "kind"]})
    assert "strategy => 'sort', sort_order => 'id DESC NULLS LAST, kind'" in sort
    zorder = call(Operation.REWRITE_DATA_FILES, {"strategy": "ZORDER", "zOrderColumns": ["id", "region"]})
    assert "strategy => 'sort', sort_order => 'zorder(id,region)'" in zorder
    # Without a sort order, Iceberg sorts by the table's own.
    assert call(Operation.REWRITE_DATA_FILES, {"strategy": "sort"}).endswith("strategy => 'sort')")
    assert call(Operation.REWRITE_DATA_FILES, {}) == (
        "CALL `demo`.`system`.rewrite_data_files(table => '`demo`.`sales`.`orders`', strategy => 'binpack')")


def test_expire_snapshots_uses_policy_then_table_properties_then_floe_defaults():
    explicit = call(Operation.EXPIRE_SNAPSHOTS, {"retainLast": 3, "maxSnapshotAge": "PT0S", "cleanExpiredMetadata": True,
                                                 "streamResults": True})
    assert "older_than => TIMESTAMP '2026-11-22 12:00:00.000000Z'" in explicit
    assert "retain_last => 3" in explicit and "clean_expired_metadata => true" in explicit
    assert "stream_results => true" in explicit
    from_table = call(Operation.EXPIRE_SNAPSHOTS, {}, {
        "history.expire.min-snapshots-to-keep": "9", "history.expire.max-snapshot-age-ms": str(3600 * 1000)})
    assert "retain_last => 9" in from_table and "TIMESTAMP '2026-11-22 11:00:00.000000Z'" in from_table
    defaults = call(Operation.EXPIRE_SNAPSHOTS, {})
    assert "retain_last => 5" in defaults and "TIMESTAMP '2026-11-15 12:00:00.000000Z'" in defaults
    # A policy value wins over the table's property, field by field.
    mixed = call(Operation.EXPIRE_SNAPSHOTS, {"retainLast": 2}, {"history.expire.min-snapshots-to-keep": "9"})
    assert "retain_last => 2" in mixed and "TIMESTAMP '2026-11-15 12:00:00.000000Z'" in mixed
    assert build_procedure_call(Operation.EXPIRE_SNAPSHOTS, T, ExpireSnapshotsConfig(), NOW).arguments == {
        "retain_last": 5, "older_than": "2026-11-15T12:00:00+00:00"}


def test_orphan_cleanup_options_and_retention_floor():
    sql = call(Operation.ORPHAN_CLEANUP, {
        "retentionPeriodInDays": 3, "location": "file:/wh/it's", "prefixMismatchMode": "ignore",
        "equalSchemes": {"s3a": "s3"}, "equalAuthorities": {"a": "b"}, "dryRun": True,
    })
    assert "older_than => TIMESTAMP '2026-11-19 12:00:00.000000Z'" in sql
    assert "location => 'file:/wh/it\\'s'" in sql
    assert "prefix_mismatch_mode => 'IGNORE'" in sql
    assert "equal_schemes => map('s3a', 's3')" in sql and "equal_authorities => map('a', 'b')" in sql
    assert "dry_run => true" in sql
    assert call(Operation.ORPHAN_CLEANUP, {"equalSchemes": {}}) == (
        "CALL `demo`.`system`.remove_orphan_files(table => '`demo`.`sales`.`orders`', "
        "older_than => TIMESTAMP '2026-11-19 12:00:00.000000Z', prefix_mismatch_mode => 'ERROR', "
        "stream_results => true)")


def test_orphan_cleanup_streams_by_default_from_iceberg_1_11_and_passes_deletes_concurrency():
    config = OrphanCleanupConfig.from_mapping({"maxConcurrentDeletes": 8})
    sql = build_procedure_call(Operation.ORPHAN_CLEANUP, T, config, NOW).sql
    assert "max_concurrent_deletes => 8, stream_results => true" in sql
    assert "stream_results => true" in build_procedure_call(Operation.ORPHAN_CLEANUP, T, config, NOW,
                                                            iceberg_version="1.11.0").sql
    # Iceberg 1.10's procedure has no stream_results: unset, it is not sent; a policy's false always is.
    assert "stream_results" not in build_procedure_call(Operation.ORPHAN_CLEANUP, T, config, NOW,
                                                        iceberg_version="1.10.1").sql
    off = OrphanCleanupConfig.from_mapping({"streamResults": False})
    assert "stream_results => false" in build_procedure_call(Operation.ORPHAN_CLEANUP, T, off, NOW).sql
    # The cap is Floe's own: never an argument of the procedure.
    capped = OrphanCleanupConfig.from_mapping({"maxFilesToDelete": 10})
    assert "max_files" not in build_procedure_call(Operation.ORPHAN_CLEANUP, T, capped, NOW).sql


def test_a_capped_run_lists_with_a_streamed_dry_run_and_deletes_only_the_given_view():
    config = OrphanCleanupConfig.from_mapping({"maxFilesToDelete": 10, "maxConcurrentDeletes": 4,
                                               "location": "file:/wh/t/data", "retentionPeriodInDays": 3})
    calls = orphan_cleanup_calls(T, config, NOW, view="floe_orphans_x")
    deletion = calls.deletion(["file:/wh/t/data/a/1.parquet", "file:/wh/t/data/a/2.parquet"]).sql
    assert "dry_run => true" in calls.listing.sql and "stream_results => true" in calls.listing.sql
    assert "max_concurrent_deletes" not in calls.listing.sql and "file_list_view" not in calls.listing.sql
    # The deletion: the same cutoff and location, only the view's paths, all of them returned (at most the cap).
    assert "file_list_view => 'floe_orphans_x'" in deletion
    assert "dry_run" not in deletion and "stream_results => false" in deletion
    assert "max_concurrent_deletes => 4" in deletion
    for sql in (calls.listing.sql, deletion):
        assert "older_than => TIMESTAMP '2026-11-19 12:00:00.000000Z'" in sql
    assert "location => 'file:/wh/t/data'" in calls.listing.sql
    # Iceberg keeps the view's paths under location: the paths' own prefix, as the listing spelled them.
    assert "location => 'file:/wh/t/data/a/'" in deletion
    # The view carries each file's real time (the engine reads it): Iceberg compares it with this cutoff.
    assert calls.cutoff == datetime(2026, 11, 19, 12, tzinfo=timezone.utc)
    assert calls.sample_limit == ORPHAN_SAMPLE_LIMIT
    # A quarantine's check before it moves: Iceberg's own, over the same view, deleting nothing.
    recheck = calls.recheck(["file:/wh/t/data/a/1.parquet"]).sql
    assert "dry_run => true" in recheck and "file_list_view => 'floe_orphans_x'" in recheck
    assert "max_concurrent_deletes" not in recheck and "location => 'file:/wh/t/data/a/1.parquet'" in recheck
    # A quarantine without a cap lists every orphan in one unstreamed dry run.
    whole = orphan_cleanup_calls(T, config, NOW, stream=False)
    assert "stream_results => false" in whole.listing.sql and whole.sample_limit is None
    # Iceberg 1.10: no streaming, so every listed path comes back.
    old = orphan_cleanup_calls(T, config, NOW, iceberg_version="1.10.0")
    assert "stream_results" not in old.listing.sql + old.deletion(["file:/a"]).sql and old.sample_limit is None


def test_streamed_orphan_results_are_a_sample_and_say_so():
    few = summarize_orphan_cleanup([{"orphan_file_location": f"file:/o{i}"} for i in range(3)], streamed=True)
    assert few.numbers["orphan_files_count"] == 3 and few.numbers["orphan_files_count_exact"] is True
    assert few.numbers["orphan_backlog_files"] == 0 and few.changed
    full = [{"orphan_file_location": f"file:/o{i}"} for i in range(ORPHAN_SAMPLE_LIMIT)]
    streamed = summarize_orphan_cleanup(full, streamed=True)
    assert streamed.numbers["orphan_files_count"] == ORPHAN_SAMPLE_LIMIT
    assert streamed.numbers["orphan_files_count_exact"] is False  # at least 20,000: Iceberg returns no more
    assert summarize_orphan_cleanup(full, streamed=False).numbers["orphan_files_count_exact"] is True
    dry = summarize_orphan_cleanup(full[:5], streamed=True, dry_run=True)
    assert not dry.changed and dry.numbers["orphan_backlog_files"] == 5  # a dry run deletes nothing


def test_a_capped_runs_summary_reports_deletions_the_cap_and_the_backlog():
    cut = summarize_capped_orphan_cleanup([OrphanRound(7, ("a", "b", "c"))], cap=3, sample_limit=ORPHAN_SAMPLE_LIMIT)
    assert cut.numbers == {"orphan_files_count": 3, "orphan_files_count_exact": True, "orphan_cap": 3,
                           "orphan_cap_reached": True, "orphan_backlog_files": 4, "orphan_backlog_exact": True,
                           "orphan_rounds": 1}
    assert cut.orphan_files == ("a", "b", "c") and cut.changed
    done = summarize_capped_orphan_cleanup([OrphanRound(2, ("a", "b"))], cap=3, sample_limit=ORPHAN_SAMPLE_LIMIT)
    assert not done.numbers["orphan_cap_reached"] and done.numbers["orphan_backlog_files"] == 0
    exactly = summarize_capped_orphan_cleanup([OrphanRound(3, ("a", "b", "c"))], cap=3, sample_limit=ORPHAN_SAMPLE_LIMIT)
    assert not exactly.numbers["orphan_cap_reached"]  # the cap deleted the last orphan: nothing was cut
    # Two rounds: the first listing was a full sample, the second one too: the backlog is a lower bound.
    big = [OrphanRound(ORPHAN_SAMPLE_LIMIT, tuple(f"x{i}" for i in range(ORPHAN_SAMPLE_LIMIT))),
           OrphanRound(ORPHAN_SAMPLE_LIMIT, tuple(f"y{i}" for i in range(5_000)))]
    many = summarize_capped_orphan_cleanup(big, cap=25_000, sample_limit=ORPHAN_SAMPLE_LIMIT)
    assert many.numbers["orphan_files_count"] == 25_000 and many.numbers["orphan_cap_reached"]
    assert many.numbers["orphan_backlog_files"] == 15_000 and many.numbers["orphan_backlog_exact"] is False
    none = summarize_capped_orphan_cleanup([OrphanRound(0, ())], cap=3, sample_limit=None)
    assert not none.changed and none.numbers["orphan_files_count"] == 0


def test_rewrite_manifests_options():
    assert "spec_id => 0, use_caching => false" in call(Operation.REWRITE_MANIFESTS, {"specId": 0, "useCaching": False})
    assert call(Operation.REWRITE_MANIFESTS, {}).endswith("rewrite_manifests(table => '`demo`.`sales`.`orders`')")


def test_rewrite_position_delete_files_options():
    sql = call(Operation.REWRITE_POSITION_DELETE_FILES, {
        "targetFileSizeBytes": 10, "partialProgressEnabled": True, "partialProgressMaxCommits": 2,
        "rewriteJobOrder": "FILES_ASC", "minInputFiles": 1, "rewriteAll": True})
    assert sql.startswith("CALL `demo`.`system`.rewrite_position_delete_files(table => '`demo`.`sales`.`orders`', options => map(")
    assert "'rewrite-job-order', 'files-asc'" in sql and "'rewrite-all', 'true'" in sql
    assert "options" not in call(Operation.REWRITE_POSITION_DELETE_FILES, {})


def test_the_rendering_takes_only_its_operations_typed_config():
    with pytest.raises(TypeError, match="RewriteDataFilesConfig"):
        build_procedure_call(Operation.REWRITE_DATA_FILES, T, {}, NOW)
    with pytest.raises(TypeError, match="ExpireSnapshotsConfig"):
        build_procedure_call(Operation.EXPIRE_SNAPSHOTS, T, RewriteDataFilesConfig(), NOW)


def test_the_sql_and_the_estimate_read_the_same_typed_config():
    """A policy parsed once: the procedure's options and the estimate's rules come from the same fields
    of the same object (issue 13: one contract, no second parser)."""
    policy = parse_policies_text(
        "name: p\ntablePattern: '*'\nrewriteDataFiles: {targetFileSizeBytes: 1000, minInputFiles: 2}\n").get("p")
    config = policy.config(Operation.REWRITE_DATA_FILES)
    assert isinstance(config, RewriteDataFilesConfig) and config.target_file_size_bytes == 1000
    call = build_procedure_call(Operation.REWRITE_DATA_FILES, T, config, NOW)
    assert call.arguments["options"] == {"target-file-size-bytes": 1000, "min-input-files": 2} == config.iceberg_options()
    assert "options => map('target-file-size-bytes', '1000', 'min-input-files', '2')" in call.sql
    rules = RewriteRules.for_data_files(config, {"write.target-file-size-bytes": "4000"})  # the policy wins
    assert (rules.target_file_size_bytes, rules.min_input_files) == (1000, 2)
    # Two small files: a group of 2 ≥ minInputFiles 2 (Iceberg's default, 5, would leave them).
    m = TableMetrics("demo.sales.orders", "file:///m.json", "full", 0, data_file_groups=(('["a"]', (100, 100), ()),))
    assert estimate_rewrite_data_files(m, config).files == 2
    assert estimate_rewrite_data_files(m).files == 0


@pytest.mark.parametrize("name", ["it's", "a`b", "x'); DROP TABLE t; --", "semi;colon", "spa ce", "ünï\\code", "\\'"])
def test_hostile_table_names_stay_inside_one_quoted_literal(name):
    table = TableName("demo", ("ns'`;",), name)
    argument = table_argument(table)
    # Decode the literal as Spark would: the content must be exactly the quoted identifier.
    assert argument[0] == "'" and argument[-1] == "'"
    body, decoded, i = argument[1:-1], "", 0
    while i < len(body):
        if body[i] == "\\":
            decoded += body[i + 1]
            i += 2
        else:
            assert body[i] != "'", "an unescaped quote would end the literal"
            decoded += body[i]
            i += 1
    assert decoded == f"`demo`.{quote_identifier(table.namespace[0])}.{quote_identifier(name)}"
    assert quote_identifier("a`b") == "`a``b`"


def test_literal_escaping_and_nul_refused():
    assert quote_literal("a\\'b") == "'a\\\\\\'b'"
    with pytest.raises(ProcedureOptionError):
        quote_literal("a\x00b")


def test_result_parsing_and_zero_change():
    rewrite = summarize_result(Operation.REWRITE_DATA_FILES, [
        {"rewritten_data_files_count": 10, "added_data_files_count": 1, "rewritten_bytes_count": 500,
         "failed_data_files_count": 0, "removed_delete_files_count": 0}])
    assert rewrite.changed and rewrite.bytes_rewritten == 500 and rewrite.numbers["added_data_files_count"] == 1
    assert not summarize_result(Operation.REWRITE_DATA_FILES, [{"rewritten_data_files_count": 0}]).changed
    orphans = summarize_result(Operation.ORPHAN_CLEANUP, [{"orphan_file_location": "file:/a"}])
    assert orphans.changed and orphans.numbers["orphan_files_count"] == 1
    assert not summarize_result(Operation.ORPHAN_CLEANUP, []).changed
    assert not summarize_result(Operation.EXPIRE_SNAPSHOTS, [{"deleted_data_files_count": 0}]).changed
    assert summarize_result(Operation.REWRITE_MANIFESTS, [{"rewritten_manifests_count": 2}]).changed
