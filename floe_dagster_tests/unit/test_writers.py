"""The writers of a table (issue 28, deliverables 1 and 3): floe.yaml's ``writers`` rules, what
``dagster/table_name`` on materializations teaches, the merge of both, and the gate ``writer_running``
(after ``not_quiet``) with its ``maxWriterWait``. Pure: the planner with an injected ``now``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import PlanInput, SchedulerSettings, plan
from floe_dagster.core.schedules.schedule import parse_schedule
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.basics.validation import standalone
from floe_dagster.core.schedules.writers import (
    DEFAULT_MAX_WRITER_WAIT,
    SOURCE_RULE,
    SOURCE_TABLE_NAME,
    Materialization,
    Writer,
    WriterRun,
    known_writers,
    learned_rows,
    read_writer_rules,
    rule_index,
    writers_by_table,
    writers_of,
)
from floe_dagster.errors import SettingsError
from floe_dagster.settings import settings_from_mapping
from floe_dagster_tests.unit.test_planner import EXP, NOW, RDF, A, B, code, decision, hist, metrics, policies, policy

NESTED = TableName("demo", ("eu", "sales"), "orders")
WRITER = ("warehouse", "sales", "a")
INTERVAL = {"interval": "PT6H"}
# Due since NOW - 1h: the last success 7 hours ago, interval 6 hours.
DUE_SINCE = NOW - timedelta(hours=1)
SUCCEEDED = {(A.qualified, op): hist(last_success_start=NOW - timedelta(hours=7), last_run_succeeded=True)
             for op in Operation}


def rules(*entries: dict):
    at = standalone()
    found = read_writer_rules(at, list(entries))
    assert not at.problems.errors, at.problems.errors
    return found


# -- rules -----------------------------------------------------------------------------------------


def test_a_rule_names_the_writer_of_every_table_its_pattern_matches():
    [rule] = rules({"tables": "demo.*.*", "asset": "warehouse/{namespace}/{table}"})
    assert rule.asset_key(A) == ("warehouse", "sales", "a")
    assert rule.asset_key(NESTED) == ("warehouse", "eu.sales", "orders")  # dotted: one part
    [by_path] = rules({"tables": "demo.*.orders", "asset": "{catalog}/{namespace_path}/{table}_writer"})
    assert by_path.asset_key(NESTED) == ("demo", "eu", "sales", "orders_writer")  # one part per level
    assert by_path.asset_key(A) is None  # the pattern does not match


def test_bad_rules_are_refused_naming_the_file_and_the_field():
    raw = {"writers": [
        {"tables": "demo..x", "asset": "w/{table}"},
        {"tables": "demo.sales.*", "asset": "w//{table}"},
        {"tables": "demo.sales.*", "asset": "w/{tabel}"},
        {"tables": "demo.sales.*", "asset": "w/x{namespace_path}"},
        {"tables": "demo.sales.*", "asset": "w/{table!r}"},
        {"tables": "demo.sales.*", "asset": "w/{table", "owner": "me"},
        {"asset": "w/{table}"},
        "warehouse/{table}",
    ]}
    with pytest.raises(SettingsError) as raised:
        settings_from_mapping(raw, Path("/tmp"), "floe.yaml", environ={})
    errors = str(raised.value).splitlines()
    expected = ["floe.yaml: writers[0].tables: 'demo..x' has an empty part",
                "floe.yaml: writers[1].asset: 'w//{table}' has an empty part",
                "floe.yaml: writers[2].asset: 'w/{tabel}' has the unknown placeholder {tabel}",
                "floe.yaml: writers[3].asset: 'w/x{namespace_path}': {namespace_path} must be a part of its own",
                "floe.yaml: writers[4].asset: 'w/{table!r}': a placeholder takes no format or conversion",
                "floe.yaml: writers[5].owner: unknown field",
                "floe.yaml: writers[5].asset: 'w/{table':",
                "floe.yaml: writers[6].tables: expected text, got",
                "floe.yaml: writers[7]: expected {tables: <table pattern>, asset: <asset key template>}"]
    for start in expected:
        assert any(error.startswith(start) for error in errors), (start, errors)
    with pytest.raises(SettingsError, match=r"floe.yaml: writers: expected a list"):
        settings_from_mapping({"writers": {"tables": "x"}}, Path("/tmp"), "floe.yaml", environ={})


# -- merged writers ------------------------------------------------------------------------------


def test_rules_and_learned_writers_merge_with_the_learned_facts():
    rule = rules({"tables": "demo.sales.*", "asset": "warehouse/sales/{table}"})
    seen = datetime(2026, 11, 23, 11, 0, tzinfo=NOW.tzinfo)
    learned = {A.qualified: (Writer(WRITER, SOURCE_RULE, 7, "run-1", seen),  # the rule's, with its facts
                             Writer(("etl", "a"), SOURCE_TABLE_NAME, 9, "run-2", seen),
                             Writer(("gone",), SOURCE_RULE, 3, "run-0", seen))}  # its rule was removed
    assert writers_of(A, rule, learned) == (Writer(WRITER, SOURCE_RULE, 7, "run-1", seen),
                                            Writer(("etl", "a"), SOURCE_TABLE_NAME, 9, "run-2", seen))
    assert writers_of(B, rule, learned) == (Writer(("warehouse", "sales", "b"), SOURCE_RULE),)
    assert writers_by_table([A, B, NESTED], rule, learned).keys() == {A.qualified, B.qualified}
    assert writers_by_table([A, B], (), {}) == {}


def test_materializations_teach_writers_by_table_name_but_never_floes_own_asset():
    named = {t.qualified.lower(): t for t in (A, B, NESTED)}
    at = datetime(2026, 11, 23, 11, 0, tzinfo=NOW.tzinfo)
    events = [
        Materialization(("etl", "orders"), 10, "r1", at, "EU.Sales.Orders"),  # no catalog, another case
        Materialization(("etl", "orders"), 12, "r2", at, "eu.sales.orders"),  # the newest wins
        Materialization(("demo", "sales", "a"), 11, "floe", at, "demo.sales.a"),  # floe's own asset
        Materialization(("etl", "other"), 13, "r3", at, "demo.nowhere.x"),  # not a table floe knows
        Materialization(("etl", "plain"), 14, "r4", at, None),
    ]
    rows = learned_rows(events, {}, named, "demo")
    assert rows == {(NESTED.qualified, ("etl", "orders")): Writer(("etl", "orders"), SOURCE_TABLE_NAME, 12, "r2", at)}


def test_a_rules_writer_and_a_learned_one_are_updated_without_their_payloads():
    rule = rules({"tables": "demo.sales.a", "asset": "warehouse/sales/{table}"})
    named = {t.qualified.lower(): t for t in (A, B)}
    learned = {B.qualified: (Writer(("etl", "b"), SOURCE_TABLE_NAME, 1, "r0", NOW),)}
    known = known_writers(rule_index([A, B], rule), learned, named)
    events = [Materialization(WRITER, 20, "r5", NOW), Materialization(("etl", "b"), 21, "r6", NOW)]
    assert learned_rows(events, known, named, "demo") == {
        (A.qualified, WRITER): Writer(WRITER, SOURCE_RULE, 20, "r5", NOW),
        (B.qualified, ("etl", "b")): Writer(("etl", "b"), SOURCE_TABLE_NAME, 21, "r6", NOW)}


# -- the gate writer_running ---------------------------------------------------------------------


def planned(schedules=None, *, now=NOW, running=True, writer=True, health=None, op=RDF):
    data = PlanInput(
        now=now, catalog_tables=[A], loaded_tables=frozenset({A}),
        policies=policies(policy(schedules=schedules or {RDF: INTERVAL, EXP: INTERVAL,
                                                         Operation.COMPUTE_STATISTICS: INTERVAL})),
        limits=SchedulerSettings(), metrics={A: health or metrics(A)}, history=SUCCEEDED,
        writers={A.qualified: (Writer(WRITER, SOURCE_RULE),)} if writer else {},
        writer_runs={WRITER: (WriterRun("4f1c2a7e-run", "STARTED", WRITER),)} if running else {},
    )
    return decision(plan(data), A, op)


def test_a_started_writer_run_holds_a_rewrite_and_an_expiry():
    for op in (RDF, EXP):
        d = planned(op=op)
        assert code(d) == "writer_running"
        forced_at = DUE_SINCE + DEFAULT_MAX_WRITER_WAIT
        assert d.reasons == (
            f"writer_running: its writer runs: warehouse/sales/a (run 4f1c2a7e, STARTED); waits until it ends, "
            f"forced in 5h at {forced_at.isoformat()} (maxWriterWait PT6H, due since {DUE_SINCE.isoformat()})",)
        state = d.writer_hold.to_json()
        assert (state["held"], state["forced"], state["secondsUntilForced"]) == (True, False, 5 * 3600.0)
        assert state["runs"] == [{"runId": "4f1c2a7e-run", "status": "STARTED", "assetKey": "warehouse/sales/a"}]
        assert d.next_eligible == NOW + timedelta(minutes=1)  # looked at again next tick


def test_no_writer_run_no_writer_or_an_operation_that_does_not_hold_runs():
    assert planned(running=False).decision == "run"
    assert planned(running=False).writer_hold.passed
    assert planned(writer=False).decision == "run" and planned(writer=False).writer_hold is None
    stats = planned(op=Operation.COMPUTE_STATISTICS)  # reads the table, commits no rewrite: never held
    assert stats.decision == "run" and stats.writer_hold is None


def test_the_hold_is_forced_after_max_writer_wait_with_an_injected_clock():
    schedules = {RDF: {**INTERVAL, "maxWriterWait": "PT2H"}}
    held = planned(schedules, now=NOW)
    assert code(held) == "writer_running" and "maxWriterWait PT2H" in held.reasons[0]
    later = NOW + timedelta(hours=1, minutes=1)  # due since NOW - 1h: 2h 1m waited
    forced = planned(schedules, now=later)
    assert forced.decision == "run"
    assert forced.writer_hold.forced
    assert forced.reasons[-1].startswith("forced after PT2H: its writer runs (warehouse/sales/a (run 4f1c2a7e")


def test_the_quiet_gate_decides_before_the_writer_gate():
    recent = metrics(A, newest_foreign_commit_ms=int((NOW - timedelta(minutes=1)).timestamp() * 1000),
                     newest_foreign_commit_operation="append")
    d = planned({RDF: {**INTERVAL, "quietFor": "PT10M"}}, health=recent)
    assert code(d) == "not_quiet" and d.writer_hold is None


def test_max_writer_wait_is_checked():
    for value, message in (("PT0S", "must be longer than zero"), ("-PT1H", "must not be negative"),
                           (6, "expected an ISO-8601 duration")):
        at = standalone()
        parse_schedule(at, {**INTERVAL, "maxWriterWait": value})
        assert any(e.startswith("maxWriterWait: ") and message in e for e in at.problems.errors), at.problems.errors
    at = standalone()
    assert parse_schedule(at, INTERVAL).max_writer_wait == DEFAULT_MAX_WRITER_WAIT
    assert parse_schedule(at, {**INTERVAL, "maxWriterWait": "PT30M"}).max_writer_wait == timedelta(minutes=30)


# -- the after-write trigger ---------------------------------------------------------------------

LAST_SUCCESS = NOW - timedelta(hours=7)


def wrote(key, minutes_ago: float, storage_id: int, run_id: str = "run") -> Writer:
    return Writer(key, SOURCE_RULE, storage_id, run_id, NOW - timedelta(minutes=minutes_ago))


def after_write(writers, schedule=None, *, now=NOW, history=SUCCEEDED):
    data = PlanInput(
        now=now, catalog_tables=[A], loaded_tables=frozenset({A}),
        policies=policies(policy(schedules={RDF: schedule or {"afterWrite": {"settle": "PT5M"}}})),
        limits=SchedulerSettings(), metrics={A: metrics(A)}, history=history,
        writers={A.qualified: tuple(writers)} if writers else {},
    )
    return decision(plan(data), A, RDF)


def test_a_write_since_the_last_success_makes_it_due_once_it_has_settled():
    d = after_write([wrote(WRITER, 6, 812, "8faebc25-writer")])
    assert d.decision == "run" and d.trigger == "after_write" and d.slot == "write:812"
    assert d.upstream == wrote(WRITER, 6, 812, "8faebc25-writer")
    written_at = (NOW - timedelta(minutes=6)).isoformat()
    assert d.reasons[0].startswith(f"after_write: warehouse/sales/a materialized at {written_at} (run 8faebc25-writer, "
                                   f"storage id 812), 1 of 1 writer(s) new since the last success at "
                                   f"{LAST_SUCCESS.isoformat()}")
    settling = after_write([wrote(WRITER, 2, 812)])  # another write 2 minutes ago: it waits for the storm to end
    assert code(settling) == "not_due" and "settling: warehouse/sales/a materialized" in settling.reasons[0]
    assert settling.next_eligible == NOW + timedelta(minutes=3)
    old = after_write([wrote(WRITER, 8 * 60, 700)])  # written before the last success: nothing new
    assert code(old) == "not_due" and "no new write by warehouse/sales/a since the last success" in old.reasons[0]


def test_a_storm_of_writes_makes_one_slot_and_a_later_write_another():
    # The sensor keeps each writer's newest materialization: whatever the storm, one slot (its newest write).
    first = after_write([wrote(WRITER, 10, 900)])
    assert first.slot == "write:900"
    after_run = {(A.qualified, RDF): hist(last_success_start=NOW - timedelta(minutes=9), last_run_succeeded=True)}
    assert code(after_write([wrote(WRITER, 10, 900)], history=after_run)) == "not_due"  # that write was maintained
    assert after_write([wrote(WRITER, 6, 950)], history=after_run).slot == "write:950"


def test_any_or_all_of_several_writers():
    other = ("etl", "a")
    writers = [wrote(WRITER, 30, 10), Writer(other, SOURCE_TABLE_NAME, 5, "r", NOW - timedelta(hours=9))]
    assert after_write(writers).decision == "run"  # ANY_UPDATED, the default
    every = {"afterWrite": {"settle": "PT5M", "dependency": "ALL_UPDATED"}}
    held = after_write(writers, every)
    assert code(held) == "not_due" and "no new write by etl/a since the last success" in held.reasons[0]
    both = [wrote(WRITER, 30, 10), Writer(other, SOURCE_TABLE_NAME, 11, "r2", NOW - timedelta(minutes=20))]
    d = after_write(both, every)
    assert d.decision == "run" and d.slot == "write:11" and "2 of 2 writer(s) new" in d.reasons[0]


def test_with_an_interval_either_rule_makes_it_due_and_without_a_writer_only_the_interval():
    schedule = {"interval": "P1D", "afterWrite": {"settle": "PT5M"}}
    assert after_write([wrote(WRITER, 6, 812)], schedule).trigger == "after_write"
    assert code(after_write([], schedule)) == "not_due"  # interval not due (last success 7 h ago), no writer
    assert code(after_write([], {"afterWrite": {}})) == "not_due"  # never due every tick like a condition rule
    assert after_write([], {"interval": "PT6H", "afterWrite": {}}).trigger == "interval"


def test_after_write_is_checked():
    for raw, message in (({"settle": "-PT1M"}, "afterWrite.settle: "), ({"settle": 5}, "afterWrite.settle: "),
                         ({"dependency": "SOME"}, "afterWrite.dependency: expected ANY_UPDATED or ALL_UPDATED"),
                         ({"debounce": "PT1M"}, "afterWrite.debounce: unknown field"), ("PT5M", "afterWrite: ")):
        at = standalone()
        parse_schedule(at, {"afterWrite": raw})
        assert any(e.startswith(message) for e in at.problems.errors), (raw, at.problems.errors)


def test_the_run_is_tagged_with_the_write_and_the_ledger_decision_gets_it_back():
    from floe_dagster.core.runs import run_tags as T
    from floe_dagster.core.runs.run_decision import RunDecision
    from floe_dagster.core.runs.run_tags import Origin, PolicyFacts, run_tags, with_upstream_from_tags

    d = RunDecision.admitted(after_write([wrote(WRITER, 6, 812, "8faebc25-writer")]))
    tags = run_tags(A, RDF, PolicyFacts("p", "v1", {}), Origin("after_write", "written", "sensor:default"), d)
    assert {k: tags[k] for k in (T.UPSTREAM_ASSET, T.UPSTREAM_RUN, T.UPSTREAM_STORAGE_ID)} == {
        T.UPSTREAM_ASSET: "warehouse/sales/a", T.UPSTREAM_RUN: "8faebc25-writer", T.UPSTREAM_STORAGE_ID: "812"}
    assert d.metadata()["upstream_storage_id"] == 812 and d.metadata()["upstream_asset"] == "warehouse/sales/a"
    from_ledger = RunDecision(A, RDF, "after_write", "written", slot="write:812")
    assert with_upstream_from_tags(from_ledger, tags).upstream.last_run_id == "8faebc25-writer"
    assert with_upstream_from_tags(RunDecision(A, RDF, "after_write", "", slot="write:9"), tags).upstream is None


def test_a_batch_keeps_each_tables_write_through_the_ledger(tmp_path):
    """A run over several tables reads each table's decision back from the ledger: each keeps the write that
    made it due (its materialization's upstream_*), and the run is tagged with the writer run they share."""
    from dataclasses import replace

    from floe_dagster.coordination.database import Coordination
    from floe_dagster.core.runs import run_tags as T
    from floe_dagster.core.runs.run_decision import RunDecision
    from floe_dagster.core.runs.run_tags import PolicyFacts, batch_run_tags

    first = RunDecision.admitted(after_write([wrote(WRITER, 6, 812, "8faebc25-writer")]), batch_key="batch-1")
    second = replace(first, table=B, slot="write:813", batch_key="batch-1",
                     upstream=wrote(("warehouse", "sales", "b"), 6, 813, "8faebc25-writer"))
    coordination = Coordination(f"sqlite:///{tmp_path / 'c.db'}")
    coordination.admit([first, second], NOW, "sensor:default")
    rows = coordination.batch_rows("batch-1")
    upstream = {name: {k: RunDecision.from_ledger(d.table, rows[name]).metadata()[k]
                       for k in ("upstream_asset", "upstream_run", "upstream_storage_id")}
                for name, d in ((A.qualified, first), (B.qualified, second))}
    assert upstream == {
        A.qualified: {"upstream_asset": "warehouse/sales/a", "upstream_run": "8faebc25-writer", "upstream_storage_id": 812},
        B.qualified: {"upstream_asset": "warehouse/sales/b", "upstream_run": "8faebc25-writer", "upstream_storage_id": 813}}
    facts = PolicyFacts("p", "v1", {})
    tags = batch_run_tags([first, second], {A: facts, B: facts}, "sensor:default", "batch-1")
    assert tags[T.UPSTREAM_RUN] == "8faebc25-writer" and T.UPSTREAM_STORAGE_ID not in tags
    other = replace(second, upstream=wrote(("warehouse", "sales", "b"), 6, 813, "another-writer-run"))
    assert T.UPSTREAM_RUN not in batch_run_tags([first, other], {A: facts, B: facts}, "sensor:default", "batch-1")
    # A table due on its schedule in the same batch has no writer: the after-write table's writer run is still
    # the run's upstream (the demo batches the ops tables' hourly expiry with the sales tables' after-write one).
    scheduled = replace(second, upstream=None, trigger="interval")
    tags = batch_run_tags([first, scheduled], {A: facts, B: facts}, "sensor:default", "batch-1")
    assert tags[T.UPSTREAM_RUN] == "8faebc25-writer"
    assert T.UPSTREAM_RUN not in batch_run_tags([scheduled], {B: facts}, "sensor:default", "batch-1")


def test_the_table_assets_description_says_it_runs_after_writes():
    from floe_dagster.defs.asset_policy import operation_rule

    [alone] = policies(policy(schedules={RDF: {"afterWrite": {}}})).policies
    [both] = policies(policy(schedules={RDF: {"interval": "PT6H", "afterWrite": {}}})).policies
    assert operation_rule(alone, RDF, {}) == "after its writer's writes (debt-score sensor)"
    assert operation_rule(both, RDF, {}) == "every 6 hours (debt-score sensor), and after its writer's writes"
