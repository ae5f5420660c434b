"""Spark's own process dying during one table's work (core/runs/outages.py ``spark_death_kind``; the engine's
side is spark/driver_restart.py, through real Spark in reliability/test_blast_radius.py): the table's
failure only when a local driver answered as the table's work began, no longer answers after its error,
and a fresh Spark answers; every other case stays an outage."""

from __future__ import annotations

import itertools

import pytest

from floe_dagster.core.runs.outages import SparkProcessFacts, spark_death_kind
from floe_dagster.errors import OUTAGE, FailedAfterCommit, SparkProcessDied, failure_kind

DIED_DURING_THE_WORK = SparkProcessFacts(local_driver=True, answered_before=True, answers_after=False)


def test_a_local_spark_that_died_during_the_tables_work_is_the_tables_failure_once_a_fresh_one_answers():
    assert DIED_DURING_THE_WORK.died_during_the_work
    assert spark_death_kind(DIED_DURING_THE_WORK, fresh_spark_answered=True) is None


def test_no_fresh_spark_that_answers_is_an_outage():
    assert spark_death_kind(DIED_DURING_THE_WORK, fresh_spark_answered=False) == OUTAGE


@pytest.mark.parametrize("facts, why", [
    (SparkProcessFacts(local_driver=True, answered_before=False, answers_after=False),
     "gone before the table's work began: nothing of the table's did it"),
    (SparkProcessFacts(local_driver=True, answered_before=True, answers_after=True),
     "Spark still answers: what could not be reached was something else (the catalog, the storage)"),
    (SparkProcessFacts(local_driver=False, answered_before=True, answers_after=False),
     "a Spark Connect server that went away is a service down, never restarted by its client"),
])
def test_every_other_case_is_an_outage_and_starts_no_fresh_spark(facts, why):
    assert not facts.died_during_the_work, why
    assert spark_death_kind(facts, fresh_spark_answered=True) == OUTAGE, why


def test_only_one_combination_of_facts_is_the_tables():
    tables = [(local, before, after, fresh) for local, before, after, fresh in itertools.product((True, False), repeat=4)
              if spark_death_kind(SparkProcessFacts(local, before, after), fresh) is None]
    assert tables == [(True, True, False, True)]


def test_the_recorded_kind_is_the_tables_own_with_backoff_before_or_after_a_commit():
    died = SparkProcessDied("REWRITE_DATA_FILES on 'demo.sales.b' failed: Spark's process died during this "
                            "table's work (Answer from Java side is empty); a fresh Spark was started")
    assert failure_kind(died) is None
    assert failure_kind(FailedAfterCommit("landed, then the row check failed", [7], died)) is None
