"""Byte estimates follow the bin-pack planners of Iceberg 1.10.2 and 1.11.0: file selection, min-input-files,
enough/too much content, delete thresholds, rewrite-all, group packing, per-partition independence.
The rules come from the policy's typed config (``RewriteRules.for_data_files``); planner options no
policy sets (min/max file size, delete ratio, max files) are given to ``RewriteRules.sized`` directly."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe_dagster.core.rewrites.rewrite_rules import (
    DEFAULT_DELETE_TARGET_FILE_SIZE_BYTES, DEFAULT_TARGET_FILE_SIZE_BYTES, EstimateOptionError, RewriteRules,
)
from floe_dagster.core.rewrites.estimates import (
    DataFileInfo, data_files_of, estimate_rewrite_data_files, estimate_rewrite_position_delete_files, pack_groups,
    plan_data_file_rewrite, plan_position_delete_rewrite, plan_recorded_data_files, position_deletes_of,
)
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operation_kinds.rewrite_position_delete_files import RewritePositionDeleteFilesConfig

T = 1000  # a target size that keeps the numbers readable
RULES = RewriteRules.sized(T)  # min 750, max 1800
SMALL = 100


def plan(files, **rules):
    return plan_data_file_rewrite(files, RewriteRules.sized(T, **rules))


# -- rules and options -----------------------------------------------------------------------------------


def test_defaults_are_icebergs():
    rules = RewriteRules.for_data_files()
    assert rules.target_file_size_bytes == DEFAULT_TARGET_FILE_SIZE_BYTES == 512 * 1024 * 1024
    assert rules.min_file_size_bytes == int(512 * 1024 * 1024 * 0.75)
    assert rules.max_file_size_bytes == int(512 * 1024 * 1024 * 1.8)
    assert (rules.min_input_files, rules.rewrite_all, rules.delete_file_threshold) == (5, False, 2**31 - 1)
    assert rules.delete_ratio_threshold == 0.3 and rules.max_file_group_size_bytes == 100 * 1024**3
    deletes = RewriteRules.for_position_deletes()
    assert deletes.target_file_size_bytes == DEFAULT_DELETE_TARGET_FILE_SIZE_BYTES == 64 * 1024 * 1024


def test_target_from_table_property_then_the_policys_config():
    props = {"write.target-file-size-bytes": "2000", "write.delete.target-file-size-bytes": "300"}
    assert RewriteRules.for_data_files(None, props).target_file_size_bytes == 2000
    assert RewriteRules.for_data_files(RewriteDataFilesConfig(target_file_size_bytes=4000), props).min_file_size_bytes == 3000
    typed = RewriteRules.for_data_files(RewriteDataFilesConfig.from_mapping(
        {"targetFileSizeBytes": 100, "minInputFiles": 2, "rewriteAll": True, "deleteFileThreshold": 3,
         "maxFileGroupSizeBytes": 5000, "strategy": "BINPACK", "partialProgressEnabled": True}))
    assert (typed.target_file_size_bytes, typed.min_input_files, typed.rewrite_all, typed.delete_file_threshold,
            typed.max_file_group_size_bytes) == (100, 2, True, 3, 5000)
    assert RewriteRules.for_position_deletes(None, props).target_file_size_bytes == 300
    deletes = RewriteRules.for_position_deletes(RewritePositionDeleteFilesConfig(target_file_size_bytes=40, rewrite_all=True), props)
    assert (deletes.target_file_size_bytes, deletes.rewrite_all, deletes.delete_file_threshold) == (40, True, 2**31 - 1)


@pytest.mark.parametrize("rules", [
    {"min_file_size_bytes": 1000},  # target must be > min
    {"max_file_size_bytes": 1000},  # target must be < max
    {"min_file_size_bytes": -1},
    {"min_input_files": 0},
    {"delete_ratio_threshold": 1.5},
    {"delete_ratio_threshold": 0},
    {"delete_file_threshold": -1},
    {"max_file_group_size_bytes": 0},
    {"max_files_to_rewrite": 0},
])
def test_rules_iceberg_refuses_are_refused(rules):
    with pytest.raises(EstimateOptionError):
        RewriteRules.sized(T, **rules)


@pytest.mark.parametrize("config, properties, message", [
    # A target of 1: the maximum (180 %) rounds down to 1, and Iceberg wants target < max.
    (RewriteDataFilesConfig(target_file_size_bytes=1), {}, "must be < 'max-file-size-bytes' (1)"),
    (None, {"write.target-file-size-bytes": "big"}, "'write.target-file-size-bytes' must be a whole number"),
    (None, {"write.target-file-size-bytes": "0"}, "'target-file-size-bytes' is set to 0 but must be > 0"),
    # Iceberg reads the table's property even when the option is set.
    (RewriteDataFilesConfig(target_file_size_bytes=1000), {"write.target-file-size-bytes": "big"}, "whole number"),
])
def test_what_iceberg_refuses_beyond_the_policy_is_refused(config, properties, message):
    with pytest.raises(EstimateOptionError, match=re.escape(message)):
        RewriteRules.for_data_files(config, properties)


# -- file selection by size ------------------------------------------------------------------------------------


def test_size_thresholds_are_strict():
    # Five files in one partition, so any selected group of five is rewritten by min-input-files.
    at_min = [("p", 750)] * 5
    under_min = [("p", 749)] * 5
    at_max = [("q", 1800)] * 5
    over_max = [("q", 1801)] * 5
    assert plan(at_min).bytes == 0
    assert plan(under_min).bytes == 749 * 5
    assert plan(at_max).bytes == 0
    assert plan(over_max).bytes == 1801 * 5


def test_explicit_min_and_max_file_size():
    files = [("p", 500)] * 5
    assert plan(files).files == 5
    assert plan(files, min_file_size_bytes=400).files == 0


# -- group rules -------------------------------------------------------------------------------------------------


def test_min_input_files():
    assert plan([("p", SMALL)] * 4).bytes == 0  # 4 small files, 400 bytes < target: left alone
    assert plan([("p", SMALL)] * 5).bytes == 500
    assert plan([("p", SMALL)] * 4, min_input_files=4).files == 4
    # A single file is never "enough input files", even with min-input-files 1.
    assert plan([("p", SMALL)], min_input_files=1).files == 0


def test_in_range_files_do_not_count_toward_min_input_files():
    files = [("p", SMALL)] * 4 + [("p", 1000)] * 10
    assert plan(files).files == 0


def test_enough_content():
    # Two files under the minimum whose total exceeds the target: one full output file's worth.
    assert plan([("p", 600), ("p", 500)]).files == 2
    assert plan([("p", 400), ("p", 500)]).files == 0  # 900 ≤ target


def test_too_much_content():
    # One file above the maximum is rewritten alone (split), though a group of one.
    estimate = plan([("p", 5000)])
    assert (estimate.files, estimate.bytes, estimate.groups) == (1, 5000, 1)


def test_partitions_are_planned_separately():
    files = [("a", SMALL)] * 4 + [("b", SMALL)] * 4
    assert plan(files).files == 0
    estimate = plan(files + [("a", SMALL)])
    assert (estimate.files, estimate.partitions, estimate.groups) == (5, 1, 1)


# -- delete rules ----------------------------------------------------------------------------------------------


def test_delete_file_threshold():
    in_range = DataFileInfo("p", 1000, delete_files=3, deleted_records=0, record_count=100)
    assert plan([in_range]).files == 0  # off by default (Integer.MAX_VALUE)
    assert plan([in_range], delete_file_threshold=3).files == 1  # at the threshold: rewritten, alone
    assert plan([in_range], delete_file_threshold=4).files == 0


def test_a_file_with_too_many_deletes_carries_its_partition_group():
    files = [DataFileInfo("p", SMALL), DataFileInfo("p", SMALL), DataFileInfo("p", 1000, 2, 0, 10)]
    estimate = plan(files, delete_file_threshold=2)
    assert estimate.files == 3 and estimate.bytes == 1200
    assert plan(files[:2], delete_file_threshold=2).files == 0


def test_delete_ratio_threshold():
    def file(deleted, deletes=1, records=10):
        return DataFileInfo("p", 1000, delete_files=deletes, deleted_records=deleted, record_count=records)

    assert plan([file(3)]).files == 1  # 30 % ≥ 0.3 (the default)
    assert plan([file(2)]).files == 0
    assert plan([file(3, deletes=0)]).files == 0  # no delete file applies
    assert plan([file(3, records=0)]).files == 0  # 0/0 is never ≥ the threshold
    assert plan([file(20)]).files == 1  # capped at the file's rows
    assert plan([file(2)], delete_ratio_threshold=0.2).files == 1


def test_delete_threshold_zero_takes_every_file():
    # Iceberg: deletes().size() >= 0 holds for every file.
    assert plan([("p", 1000), ("q", 1200)], delete_file_threshold=0).files == 2


# -- rewrite-all, packing, caps --------------------------------------------------------------------------------


def test_rewrite_all_takes_every_file_and_every_group():
    files = [("a", 1000), ("b", 1200), ("b", SMALL)]
    estimate = plan(files, rewrite_all=True)
    assert (estimate.files, estimate.bytes, estimate.partitions) == (3, 2300, 2)


def test_pack_groups_is_icebergs_list_packer_with_lookback_one():
    assert pack_groups([5, 5, 5, 20, 1], 10) == [[0, 1], [2], [3], [4]]
    assert pack_groups([], 10) == []
    assert pack_groups([3, 3, 3], 9) == [[0, 1, 2]]


def test_max_file_group_size_splits_a_partition():
    files = [("p", SMALL)] * 6
    assert plan(files).files == 6
    # Groups of at most 300 bytes: two groups of three files, each below min-input-files and target.
    assert plan(files, max_file_group_size_bytes=300).files == 0
    assert plan(files, max_file_group_size_bytes=300, min_input_files=3).groups == 2


def test_max_files_to_rewrite():
    files = [("a", SMALL)] * 5 + [("b", SMALL)] * 5
    estimate = plan(files, max_files_to_rewrite=7)
    assert (estimate.files, estimate.bytes, estimate.groups) == (7, 700, 2)


# -- position delete files -----------------------------------------------------------------------------------


def test_position_delete_rewrite_rules():
    rules = RewriteRules.for_position_deletes(RewritePositionDeleteFilesConfig(target_file_size_bytes=T))
    assert plan_position_delete_rewrite([("p", SMALL)] * 4, rules).files == 0
    assert plan_position_delete_rewrite([("p", SMALL)] * 5, rules).bytes == 500
    assert plan_position_delete_rewrite([("p", 600), ("p", 600)], rules).files == 2  # enough content
    assert plan_position_delete_rewrite([("p", 2000)], rules).files == 1  # too much content
    assert plan_position_delete_rewrite([("p", 1000)] * 9, rules).files == 0  # in range
    two = RewriteRules.for_position_deletes(RewritePositionDeleteFilesConfig(target_file_size_bytes=T, min_input_files=2))
    assert plan_position_delete_rewrite([("p", SMALL), ("p", SMALL), ("q", SMALL)], two).files == 2
    everything = RewriteRules.for_position_deletes(RewritePositionDeleteFilesConfig(rewrite_all=True))
    assert plan_position_delete_rewrite([("p", SMALL), ("q", 10**9)], everything).bytes == SMALL + 10**9


# -- from TableMetrics ----------------------------------------------------------------------------------------


def metrics(**fields) -> TableMetrics:
    return TableMetrics("demo.ns.t", "file:///m.json", "full", 0, **fields)


def test_estimates_from_table_metrics_and_json_round_trip():
    m = metrics(
        data_file_count=8, total_data_bytes=5 * SMALL + 3 * 1000,
        data_file_sizes=(SMALL,) * 5 + (1000,) * 3,
        data_file_groups=(
            ('["a"]', (SMALL,) * 5, ()),
            ('["b"]', (1000, 1000, 1000), ((1, 1, 5, 10),)),  # the 2nd file: 1 delete file, 5 of 10 rows
        ),
        position_delete_groups=(('["b"]', (40,)),),
        properties={"write.target-file-size-bytes": str(T)},
    )
    estimate = estimate_rewrite_data_files(m)
    assert (estimate.files, estimate.bytes, estimate.partitions) == (6, 5 * SMALL + 1000, 2)
    assert estimate_rewrite_position_delete_files(m).files == 0
    assert estimate_rewrite_position_delete_files(m, RewritePositionDeleteFilesConfig(rewrite_all=True)).bytes == 40
    assert TableMetrics.from_json(json.loads(json.dumps(m.to_json()))) == m
    assert estimate_rewrite_data_files(TableMetrics("demo.ns.t", None, "summary", 0)) is None
    assert estimate_rewrite_position_delete_files(TableMetrics("demo.ns.t", None, "summary", 0)) is None


# -- properties ----------------------------------------------------------------------------------------------

files_strategy = st.lists(
    st.builds(
        DataFileInfo,
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=1, max_value=4000),
        st.integers(min_value=0, max_value=3),
        st.integers(min_value=0, max_value=20),
        st.integers(min_value=0, max_value=20),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(files_strategy, st.integers(min_value=1, max_value=8))
def test_invariants(files, min_input):
    total = sum(f.size for f in files)
    estimate = plan(files, min_input_files=min_input)
    assert 0 <= estimate.bytes <= total and estimate.files <= len(files)
    # Fewer required input files never rewrites less; rewrite-all rewrites everything.
    assert plan(files, min_input_files=max(1, min_input - 1)).bytes >= estimate.bytes
    assert plan(files, rewrite_all=True).bytes == total
    # Files inside the size range without deletes are never taken unless rewrite-all.
    clean = [DataFileInfo(f.partition, 1000) for f in files]
    assert plan(clean).bytes == 0


group_strategy = st.tuples(
    st.lists(st.integers(min_value=1, max_value=4000), min_size=1, max_size=15),
    st.lists(st.tuples(st.integers(min_value=0, max_value=14), st.integers(min_value=1, max_value=4),
                       st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=20)), max_size=5),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(group_strategy, max_size=4),
       st.fixed_dictionaries({}, optional={
           "min_input_files": st.integers(min_value=1, max_value=6),
           "delete_file_threshold": st.integers(min_value=0, max_value=4),
           "delete_ratio_threshold": st.sampled_from([0.1, 0.3, 1.0]),
           "rewrite_all": st.booleans(),
           "max_files_to_rewrite": st.integers(min_value=1, max_value=10),
           "max_file_group_size_bytes": st.integers(min_value=500, max_value=20000)}))
def test_estimate_from_a_record_equals_planning_its_files(groups, rules):
    """The planner's estimate reads a record's groups as stored; it must pick what planning the same
    files one by one picks."""
    stored = []
    for number, (sizes, deletes) in enumerate(groups):
        by_index = {index % len(sizes): (index % len(sizes), count, rows, records)
                    for index, count, rows, records in deletes}
        stored.append((f'["p{number}"]', tuple(sizes), tuple(sorted(by_index.values()))))
    m = metrics(data_file_groups=tuple(stored), properties={"write.target-file-size-bytes": str(T)})
    sized = RewriteRules.sized(T, **rules)
    assert plan_recorded_data_files(m, sized) == plan_data_file_rewrite(data_files_of(m), sized)
    # The same through a policy's config (the options a policy can set).
    config = RewriteDataFilesConfig(**{k: v for k, v in rules.items() if k in (
        "min_input_files", "delete_file_threshold", "rewrite_all", "max_file_group_size_bytes")})
    expected = plan_data_file_rewrite(data_files_of(m), RewriteRules.for_data_files(config, m.properties))
    assert estimate_rewrite_data_files(m, config) == expected


def test_rules_remembered_for_one_config_never_answer_for_another():
    """The rules are kept per config (and table property); another config gets its own."""
    m = metrics(data_file_groups=(('["a"]', (SMALL,) * 6, ()),), properties={"write.target-file-size-bytes": str(T)})
    assert estimate_rewrite_data_files(m, RewriteDataFilesConfig(rewrite_all=True)).files == 6
    assert estimate_rewrite_data_files(m, RewriteDataFilesConfig(rewrite_all=True, min_input_files=7)).files == 6
    assert estimate_rewrite_data_files(m, RewriteDataFilesConfig(min_input_files=7)).files == 0
    with pytest.raises(EstimateOptionError):
        estimate_rewrite_data_files(m, RewriteDataFilesConfig(target_file_size_bytes=1))
    # The same config on a table with a smaller target: 600 bytes are now "enough content".
    smaller = metrics(data_file_groups=m.data_file_groups, properties={"write.target-file-size-bytes": "500"})
    assert estimate_rewrite_data_files(smaller, RewriteDataFilesConfig(min_input_files=7)).files == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(['["a"]', '["b"]', '["c"]', "[]"]),
                          st.lists(st.integers(min_value=1, max_value=4000), max_size=8)), max_size=5),
       st.fixed_dictionaries({}, optional={
           "min_input_files": st.integers(min_value=1, max_value=6), "rewrite_all": st.booleans(),
           "target_file_size_bytes": st.integers(min_value=100, max_value=8000)}))
def test_position_delete_estimate_from_a_record_equals_planning_its_files(groups, options):
    """The planner reads a record's position delete groups as stored (no object per delete file); it must
    pick what planning the same delete files one by one picks, partitions listed twice or empty included."""
    m = metrics(position_delete_groups=tuple((partition, tuple(sizes)) for partition, sizes in groups))
    config = RewritePositionDeleteFilesConfig(**options)
    expected = plan_position_delete_rewrite(position_deletes_of(m), RewriteRules.for_position_deletes(config, {}))
    assert estimate_rewrite_position_delete_files(m, config) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4000), max_size=20),
       st.fixed_dictionaries({}, optional={
           "min_input_files": st.integers(min_value=1, max_value=6), "rewrite_all": st.booleans(),
           "max_file_group_size_bytes": st.integers(min_value=500, max_value=20000)}))
def test_the_groups_of_sizes_alone_are_the_groups_of_their_indexes(sizes, options):
    """Without delete rules the groups are made from the sizes alone (no index lists): the same groups as
    the indexes Iceberg's bin-pack picks."""
    from floe_dagster.core.rewrites.estimates import _partition_groups, partition_group_indexes

    rules = RewriteRules.sized(T, **options)
    expected = [[sizes[i] for i in group] for group in partition_group_indexes(sizes, None, rules)]
    assert _partition_groups(sizes, None, rules) == expected
