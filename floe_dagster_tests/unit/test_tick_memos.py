"""What the planner keeps between calls to make a tick cheaper (benchmarks/README.md, benchmark 1) never
answers for an input it was not computed from: change the input, the answer changes."""

from __future__ import annotations

import pickle
from dataclasses import replace
from datetime import datetime, timezone

from floe_dagster.core.plan.batches import RunClass
from floe_dagster.core.rewrites.estimates import data_file_rules
from floe_dagster.core.plan.gates import _run_class
from floe_dagster.core.facts.health_assessment import HealthThresholds, IssueType, health_issues
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.operation_kinds.rewrite_data_files import RewriteDataFilesConfig
from floe_dagster.core.operations import ALL_OPERATIONS, Operation
from floe_dagster.core.policies.policy import parse_policies_text
from floe_dagster.core.schedules.schedule_due import Due
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg import byte_estimates
from floe_dagster.iceberg.byte_estimates import estimate_operation_bytes

MIB = 1024 * 1024
TABLE = TableName("lake", ("ns",), "t")


def _metrics(sizes: tuple[int, ...], **properties: str) -> TableMetrics:
    return TableMetrics("lake.ns.t", "file:///w/lake/ns/t/metadata/00001.metadata.json", "full", 0,
                        data_file_count=len(sizes), total_data_bytes=sum(sizes), data_file_sizes=sizes,
                        data_file_groups=(("[]", sizes, ()),), current_snapshot_id=1,
                        properties={"write.target-file-size-bytes": str(128 * MIB), **properties})


def test_the_byte_estimate_follows_the_config_and_the_properties_of_one_metadata_location():
    """The estimates are kept by metadata location and the config's and the properties' texts, each text kept
    on its (immutable) config or record: another config, or a new record of the same location with other
    properties, is estimated anew."""
    byte_estimates._ESTIMATES.clear()
    op = Operation.REWRITE_DATA_FILES
    record = _metrics((MIB,) * 4)
    some = RewriteDataFilesConfig(min_input_files=2)
    assert estimate_operation_bytes(TABLE, op, record, some) == 4 * MIB
    assert estimate_operation_bytes(TABLE, op, record, RewriteDataFilesConfig(min_input_files=5)) == 0
    assert estimate_operation_bytes(TABLE, op, record, some) == 4 * MIB  # the first answer, kept
    # The same location read again with a smaller target: the 4 MiB now make "enough content".
    smaller = _metrics((MIB,) * 4, **{"write.target-file-size-bytes": str(2 * MIB)})
    assert estimate_operation_bytes(TABLE, op, smaller, RewriteDataFilesConfig(min_input_files=5)) == 4 * MIB
    assert estimate_operation_bytes(TABLE, op, record, RewriteDataFilesConfig(min_input_files=5)) == 0


def test_a_table_name_hashes_as_its_fields_do_and_never_carries_its_kept_hash_elsewhere():
    """The hash is kept on the (frozen) name; string hashes differ between processes, so a pickled or copied
    name computes its own."""
    name = TableName("lake", ("a", "b"), "t")
    assert hash(name) == hash(("lake", ("a", "b"), "t")) == hash(TableName("lake", ("a", "b"), "t"))
    assert "_hash" in name.__dict__
    assert "_hash" not in pickle.loads(pickle.dumps(name)).__dict__
    assert {name: 1}[TableName("lake", ("a", "b"), "t")] == 1 and TableName("lake", ("a", "b"), "u") not in {name}
    assert replace(name, name="u") != name and hash(replace(name, name="u")) == hash(("lake", ("a", "b"), "u"))


def test_an_operation_hashes_and_compares_as_its_value():
    """Operations key dicts that are also looked up by Floe's name (the hash is str's, in C)."""
    for op in ALL_OPERATIONS:
        assert hash(op) == hash(op.value) and {op.value: 1}[op] == 1 and {op: 1}[op.value] == 1
        assert op.spec.name == op.value and op.rewrites_data == op.spec.rewrites_data()


def test_the_run_class_and_the_slot_key_follow_their_schedule_and_verdict():
    policies = parse_policies_text("""
- name: p
  tablePattern: "lake.*.*"
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H, timeout: 2}
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: PT1H, timeout: 3, windowStart: "22:00", windowEnd: "06:00"}
""")
    policy = policies.get("p")
    rewrite, expire = (policy.schedule(op) for op in (Operation.REWRITE_DATA_FILES, Operation.EXPIRE_SNAPSHOTS))
    assert _run_class(rewrite) is _run_class(rewrite) and _run_class(rewrite).timeout == "2h"
    assert _run_class(expire).timeout == "3h" and "22:00" in _run_class(expire).window
    assert _run_class(replace(rewrite, timeout_hours=5)).timeout == "5h"  # a new schedule, its own class
    run_class = RunClass("2h", "w")
    assert run_class.key(("timeout",)) == ("2h",) and run_class.key(("timeout", "window")) == ("2h", "w")
    assert run_class.key(()) == ()
    due = Due(True, "interval", None, None, True, None, "never run")
    assert due.slot_key == "interval:first"
    assert replace(due, trigger="condition").slot_key == "condition:first"


def test_the_health_kept_on_a_record_follows_its_thresholds_and_the_rules_kept_on_a_config_its_target():
    """A record's clock-independent health is kept per thresholds (equal thresholds share it, other ones are
    assessed anew), and a config's rewrite rules per target file size property."""
    record, now = _metrics((MIB,) * 10), datetime(2026, 11, 23, tzinfo=timezone.utc)
    none_small = HealthThresholds(small_file_size_bytes=MIB // 2)
    all_small = HealthThresholds(small_file_size_bytes=2 * MIB)

    def small(thresholds: HealthThresholds) -> list[str]:
        return [i.message for i in health_issues(record, thresholds, now) if i.type is IssueType.TOO_MANY_SMALL_FILES]

    assert small(none_small) == []
    assert small(all_small) == ["small files (% of data files): 100 ≥ critical threshold 50"]
    assert small(replace(none_small)) == [] and small(replace(all_small)) == small(all_small)
    config = RewriteDataFilesConfig()
    rules = [data_file_rules(config, {"write.target-file-size-bytes": str(size)}).target_file_size_bytes
             for size in (MIB, 2 * MIB, MIB)]
    assert rules == [MIB, 2 * MIB, MIB]


def test_a_due_cron_verdicts_slot_key_is_its_own_slots_text_at_every_moment():
    """The slot key of a due cron verdict is filled from the schedule's clock facts at ``now`` (made once per
    tick): each moment's verdict names its own latest slot, as the key made from the verdict's slot would."""
    from floe_dagster.core.schedules.schedule import Schedule

    schedule = Schedule.from_mapping({"cronExpression": "15 * * * *", "timezone": "Europe/Berlin"})
    for hour in (1, 2, 7):
        now = datetime(2026, 3, 29, hour, 20, tzinfo=timezone.utc)  # Berlin's clock change among them
        due = schedule.due(None, now)
        assert due.due and due.slot is not None
        assert due.slot_key == due.slot.isoformat() == replace(due).slot_key  # replace: a verdict made afresh


def test_a_planned_decision_keeps_only_its_fields_off_the_defaults_and_equals_one_made_with_all():
    """The planner's decisions hold the fields that differ from the class's defaults (a smaller dict: 400,000
    of them at 50,000 tables x 8 kinds) and read, compare and copy as decisions made with every field."""
    from dataclasses import asdict, fields

    from floe_dagster.core.plan.decisions import Decision, PlanInput, SchedulerSettings
    from floe_dagster.core.plan.planner import plan

    policies = parse_policies_text("""
- name: p
  tablePattern: "lake.*.*"
  priority: 3
  rewriteDataFiles: {}
  rewriteDataFilesSchedule: {interval: PT1H, priority: 2}
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: PT1H, enabled: false}
""")
    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    decisions = plan(PlanInput(now, [TABLE], frozenset({TABLE}), policies, SchedulerSettings(),
                               metrics={TABLE: _metrics((MIB,) * 10)})).decisions
    by_op = {d.operation: d for d in decisions}
    rewrite, expire = by_op[Operation.REWRITE_DATA_FILES], by_op[Operation.EXPIRE_SNAPSHOTS]
    assert (rewrite.decision, rewrite.policy_priority, rewrite.schedule_priority, rewrite.enabled) == \
        ("run", 3, 2, True)
    assert (expire.decision, expire.code, expire.enabled, expire.schedule_priority) == \
        ("skip", "schedule_disabled", False, 0)
    for decision in decisions:
        assert len(decision.__dict__) <= 21  # CPython's dict of 464 bytes (832 beyond)
        whole = Decision(**{f.name: getattr(decision, f.name) for f in fields(Decision)})
        assert whole == decision and asdict(whole) == asdict(decision)
        assert pickle.loads(pickle.dumps(decision)) == decision and replace(decision, rank=7).rank == 7
