"""The catalogue of table facts (issue 27): each fact declared once, and what a declaration drives. A fact an
operation kind declares from its own module reaches the metrics record, the health cache, Dagit's
observation, Floe's answer and the health text without an edit anywhere; the cache's and the observation's
versions are derived from the declarations (a new or changed fact changes them, the same in every process);
a bad declaration is refused naming the fact; docs/health.md's table of facts is the catalogue's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from floe_dagster.core.facts.fact_catalogue import RECORD_FIELDS, BUILTIN, declare, declaring, facts_markdown, views
from floe_dagster.core.facts.health_assessment import HealthThresholds, assess_health
from floe_dagster.core.policies.health_record import assess_table, health_record
from floe_dagster.core.facts.measurements import TableMetrics
from floe_dagster.core.facts.table_facts import FULL, SUMMARY, Api, Check, Fact, Text, stable_version
from floe_dagster.defs.health_events import fingerprint, observation_format, observation_keys, observation_metadata
from floe_dagster.iceberg.fact_reducers import (
    ManifestPart,
    Reducer,
    manifest_version,
    record_version,
    reducers_for,
    registering,
)
from floe_dagster.iceberg.metrics_cache import MetricsCache
from floe_dagster.reports.health_report import floe_health_json, format_health_text
from floe_dagster_tests.unit.test_health import NOW, healthy

ROOT = Path(__file__).resolve().parents[2]

# What the next operation kind (row retention) will declare from its own module in core/operation_kinds/.
OLDEST_ROW = Fact("oldest_row_value", "int | None", FULL, "the smallest value of the retention column",
                  derived=100, dagit=100, api=Api("oldestRowValue"), text=Text("oldest row"))
OLDEST_ROW_REDUCER = Reducer(("oldest_row_value",), lambda read: {"oldest_row_value": 7}, (FULL,), 1)


def with_oldest_row(metrics: TableMetrics, value: int | None) -> TableMetrics:
    return replace(metrics, more_facts={"oldest_row_value": value})


# -- a new fact: one declaration, everything picks it up ---------------------------------------------------


def test_a_fact_a_kind_declares_is_in_the_record_the_cache_dagit_floes_answer_and_the_text(tmp_path):
    with declaring(OLDEST_ROW), registering(OLDEST_ROW_REDUCER):
        metrics = with_oldest_row(healthy(), 1_700_000_000)
        assert metrics.oldest_row_value == 1_700_000_000  # an attribute, as the built-in facts
        assert with_oldest_row(healthy(), None).oldest_row_value is None
        assert healthy().oldest_row_value is None  # not measured: its default
        stored = metrics.to_json()
        assert list(stored)[-1] == "oldest_row_value" and TableMetrics.from_json(stored) == metrics
        cache = MetricsCache(tmp_path / "health.sqlite3")
        cache.put(metrics)
        assert cache.record(metrics.qualified_name, "full") == (metrics.metadata_location, metrics)
        cache.close()

        record = health_record(assess_table(metrics, None, NOW, {}, None), None, {}, NOW)
        assert record["metrics"]["oldest_row_value"] == 1_700_000_000
        assert list(record["derived"])[-1] == "oldest_row_value"
        observed = observation_metadata(record)
        assert observed["oldest_row_value"].value == 1_700_000_000
        assert list(observed).index("oldest_row_value") == list(observed).index("debt_score") - 1  # the last plotted
        answer = floe_health_json(record)
        assert answer["oldestRowValue"] == 1_700_000_000 and list(answer).index("oldestRowValue") < list(
            answer).index("issues")
        assert "    oldest row      1700000000" in format_health_text(record).splitlines()
    assert "oldest_row_value" not in healthy().to_json() and "oldest_row_value" not in views().by_name


def test_a_record_of_a_fact_no_longer_declared_is_collected_again(tmp_path):
    with declaring(OLDEST_ROW), registering(OLDEST_ROW_REDUCER):
        stored = with_oldest_row(healthy(), 3).to_json()
    with pytest.raises(TypeError):  # what the cache takes for an unreadable record (it collects it again)
        TableMetrics.from_json(stored)


def test_a_check_a_kind_declares_raises_its_own_issue_type():
    stale = Fact("rows_past_retention", "int", SUMMARY, "rows older than the retention", derived=101,
                 measure=lambda m, t: 42, check=Check("ROWS_PAST_RETENTION", None, 10, 100, "rows past retention"))
    with declaring(stale):
        report = assess_health(healthy(), None, NOW)
        (issue,) = report.issues
        assert issue.type == "ROWS_PAST_RETENTION" and issue.type.value == "ROWS_PAST_RETENTION"
        assert (issue.severity.value, issue.message) == ("WARNING", "rows past retention: 42 ≥ warning threshold 10")
        assert json.loads(json.dumps(issue.to_json()))["type"] == "ROWS_PAST_RETENTION"
        assert fingerprint(report)  # the issue types are part of it
    assert assess_health(healthy(), None, NOW).issues == ()


# -- the versions are derived ---------------------------------------------------------------------------------


def test_adding_a_fact_changes_the_record_version_and_what_dagit_shows_the_observation_format():
    before = (record_version(), manifest_version(), observation_format())
    hidden = Fact("rows_expired_total", "int", SUMMARY, "a stored fact no view shows", default=0)
    with declaring(hidden), registering(Reducer(("rows_expired_total",), lambda read: {}, (SUMMARY, FULL), 1)):
        assert record_version() != before[0]
        assert (manifest_version(), observation_format()) == before[1:]  # not shown in Dagit: no new report
    with declaring(OLDEST_ROW), registering(OLDEST_ROW_REDUCER):
        assert record_version() != before[0] and observation_format() != before[2]
        assert "oldest_row_value" in observation_keys()
    assert (record_version(), manifest_version(), observation_format()) == before


def test_changing_a_facts_declaration_or_its_reducer_changes_the_record_version():
    versions = set()
    for fact, version in ((OLDEST_ROW, 1), (replace(OLDEST_ROW, type="str | None"), 1),
                          (replace(OLDEST_ROW, tier=SUMMARY), 1), (OLDEST_ROW, 2)):
        reducer = replace(OLDEST_ROW_REDUCER, version=version, tiers=(SUMMARY, FULL) if fact.tier == SUMMARY
                          else (FULL,))
        with declaring(fact), registering(reducer):
            versions.add(record_version())
    assert len(versions) == 4
    with declaring(OLDEST_ROW), registering(OLDEST_ROW_REDUCER):  # a change of words only: the same record
        same = record_version()
    with declaring(replace(OLDEST_ROW, doc="other words")), registering(OLDEST_ROW_REDUCER):
        assert record_version() == same


def test_a_manifest_part_changes_the_manifest_version_and_so_the_record_version():
    before = (manifest_version(), record_version())
    assert before[0] == 1  # no parts: the manifests cached before the catalogue stay valid
    with registering(ManifestPart("column_lower_bounds", lambda manifest, entries: {}, 1)):
        assert manifest_version() != before[0] and record_version() != before[1]


def test_the_versions_are_the_same_in_every_process():
    """sha256 of the declarations, not ``hash()`` (salted per process): another process with another hash seed
    derives the same record and manifest versions, and the same version of the observation's keys."""
    code = ("from floe_dagster.iceberg.fact_reducers import record_version, manifest_version; "
            "from floe_dagster.core.facts.table_facts import stable_version; import sys, json; "
            "print(record_version(), manifest_version(), stable_version('health observation', "
            "tuple(json.loads(sys.argv[1]))))")
    env = {**os.environ, "PYTHONHASHSEED": "4242", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(observation_keys())], capture_output=True,
                          text=True, env=env, check=True)
    assert done.stdout.split() == [str(record_version()), str(manifest_version()), str(observation_format())]
    assert stable_version("a", [1, 2]) == stable_version("a", [1, 2]) != stable_version("a", [2, 1])


# -- the views keep today's keys and order ------------------------------------------------------------------------


def test_the_observation_holds_exactly_the_keys_its_format_is_made_of():
    from floe_dagster.defs.health_events import TABLE_METADATA_KEYS
    from floe_dagster_tests.unit.test_health_views import POLICY, _full
    from floe_dagster.core.policies.policy import parse_policies_text

    policy = parse_policies_text(POLICY).get("strict")
    record = health_record(assess_table(_full(), policy.health_thresholds, NOW, {}, policy), policy, {}, NOW)
    assert list(observation_metadata(record)) == [k for k in observation_keys() if k not in TABLE_METADATA_KEYS]


def test_every_stored_fact_has_exactly_one_reducer_in_each_tier_it_is_measured_in():
    assert {n for r in reducers_for(FULL) for n in r.facts} == {f.name for f in views().stored}
    assert {n for r in reducers_for(SUMMARY) for n in r.facts} == {f.name for f in views().stored if f.tier == SUMMARY}
    with declaring(OLDEST_ROW):
        with pytest.raises(LookupError, match=r"\['oldest_row_value'\] have no reducer for the full tier"):
            reducers_for(FULL)
        reducers_for(SUMMARY)  # a full-tier fact is not measured in the summary tier
    twice = replace(OLDEST_ROW_REDUCER, facts=("record_count",), tiers=(SUMMARY,))
    with registering(twice), pytest.raises(LookupError, match=r"\['record_count'\] measured twice"):
        reducers_for(SUMMARY)


def test_the_metrics_record_has_every_stored_fact_as_a_field_in_the_catalogues_order():
    stored = [f.name for f in BUILTIN if f.stored]
    names = list(TableMetrics.__dataclass_fields__)
    assert names == ["qualified_name", "metadata_location", "tier", "collected_at_ms", *stored, "more_facts"]
    assert set(names) - set(stored) == RECORD_FIELDS
    assert TableMetrics("demo.ns.t", None, "summary", 0).properties == {}  # a fresh dict each time
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        healthy().nope  # noqa: B018


# -- bad declarations -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fact, message", [
    (Fact("data_file_count", "int", SUMMARY, "again"), "'data_file_count' is declared twice"),
    (Fact("tier", "str", SUMMARY, "again"), "'tier': the metrics record's own field has this name"),
    (Fact("checked", "int", SUMMARY, "x", measure=lambda m, t: 1, check=Check("X", None, 1, 2, "x")),
     "'checked': a checked fact is shown among the derived numbers"),
    (Fact("aged", "float", SUMMARY, "x", age_of="nope", derived=100), "'aged': its age is of 'nope'"),
    (Fact("hidden", "int", SUMMARY, "x", measure=lambda m, t: 1, dagit=100),
     "'hidden': a fact Dagit or Floe's answer shows is read from the health record"),
])
def test_a_bad_declaration_is_refused_naming_the_fact(fact, message):
    with pytest.raises(ValueError, match=message):
        with declaring(fact):
            views()


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "_private"}, "a public Python identifier"), ({"tier": "weekly"}, "tier must be one of"),
    ({"shape": "yaml"}, "shape must be one of"), ({"measure": lambda m, t: 1, "age_of": "x"}, "not both"),
])
def test_a_malformed_fact_is_refused_naming_it(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Fact(**{"name": "good", "type": "int", "tier": SUMMARY, "doc": "x", **kwargs})


def test_a_checks_threshold_must_be_a_health_threshold_or_a_number():
    bad = Fact("bad_limit", "int", SUMMARY, "x", derived=100, measure=lambda m, t: 1,
               check=Check("X", None, "snapshot_count_warnnig", 2, "x"))
    with declaring(bad), pytest.raises(ValueError, match="'bad_limit': its check's threshold 'snapshot_count_warnnig'"):
        assess_health(healthy(), HealthThresholds(), NOW)


def test_declare_outside_a_block_adds_for_good():
    fact = Fact("declared_for_good", "int", SUMMARY, "x", default=0)
    try:
        assert declare(fact) == (fact,) and views().by_name["declared_for_good"] is fact
    finally:
        from floe_dagster.core.facts import fact_catalogue
        fact_catalogue._DECLARED.remove(fact)
        fact_catalogue._changed()


# -- the docs ----------------------------------------------------------------------------------------------------


def test_the_health_docs_list_every_fact_as_the_catalogue_declares_it():
    text = (ROOT / "docs" / "health.md").read_text(encoding="utf-8")
    assert facts_markdown() in text, "docs/health.md: paste `python -m floe_dagster.core.facts.fact_catalogue`'s table"
