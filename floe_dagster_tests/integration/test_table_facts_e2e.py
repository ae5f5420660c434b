"""A table fact that an operation kind declares, through the real stack (issue 27): the next kind's "oldest
row value", declared as its kind module will (one :class:`Fact`), with its reducer and a manifest part that
reads the column's lower bounds registered in the iceberg layer by the fact's name. On a real PyIceberg table
(SQLite catalog, file:// warehouse) the health collector measures it from the manifests, the on-disk cache
keeps it, and Dagit's observation, Floe's health answer and the health text show it, with no other edit.
Records and reduced manifests cached before the fact existed are read again, once."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent
from pyiceberg.types import LongType

from floe_dagster.core.facts.fact_catalogue import declaring
from floe_dagster.core.policies.policy import PolicySet
from floe_dagster.core.facts.table_facts import FULL, Api, Fact, Text
from floe_dagster.defs.health_events import table_health_events
from floe_dagster.core.policies.health_record import assess_table, health_record
from floe_dagster.iceberg.fact_reducers import ManifestPart, MetadataRead, Reducer, registering
from floe_dagster.iceberg.health_collector import HealthCollector, forget_parsed_records
from floe_dagster.reports.health_report import floe_health_json, format_health_text
from floe_dagster_tests.integration._health_tables import lakehouse, name, rows

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
ID_FIELD = 1  # the tables' "id" column

OLDEST_ID = Fact("oldest_id", "int | None", FULL, "the smallest id in the live data files (their lower bounds)",
                 derived=100, dagit=100, api=Api("oldestId"), text=Text("oldest id"))


def lower_bounds(manifest: Any, entries: list) -> int | None:
    """The manifest part: the smallest lower bound of the id column among the manifest's live data files."""
    found = [from_bytes(LongType(), entry.data_file.lower_bounds[ID_FIELD]) for entry in entries
             if entry.data_file.content == DataFileContent.DATA and ID_FIELD in (entry.data_file.lower_bounds or {})]
    return min(found, default=None)


def oldest_id(read: MetadataRead) -> dict[str, Any]:
    """The reducer: the smallest over the current manifests' parts."""
    found = [read.summaries[m.manifest_path]["id_lower_bound"] for m in read.manifests]
    return {"oldest_id": min((v for v in found if v is not None), default=None)}


@pytest.fixture
def table(tmp_path):
    settings, catalog = lakehouse(tmp_path / "lake")
    catalog.create_namespace("ns")
    created = catalog.create_table("ns.events", schema=rows(0, 1).schema)
    for start in (40, 10, 25):
        created.append(rows(start, 5))
    return settings, catalog, name(catalog, "ns.events")


def test_a_kinds_fact_is_measured_cached_and_shown_everywhere(table):
    settings, catalog, events = table
    with HealthCollector(catalog, settings, clock=lambda: NOW) as collector:
        before = collector.collect([events], tier="full")
    assert before.files_read == 1 + 1 + 3  # metadata, manifest list, three manifests
    with declaring(OLDEST_ID), registering(ManifestPart("id_lower_bound", lower_bounds, 1),
                                           Reducer(("oldest_id",), oldest_id, (FULL,), 1)):
        forget_parsed_records()
        with HealthCollector(catalog, settings, clock=lambda: NOW) as collector:
            first = collector.collect([events], tier="full")
            # The fact's record and manifest versions are new: the cached record and manifests are read again.
            assert first.computed == [events] and first.files_read == 1 + 1 + 3
            metrics = first.metrics[events]
            assert metrics.oldest_id == 10 and metrics.data_file_count == 3
            assert collector.collect([events], tier="full").files_read == 0
        forget_parsed_records()  # as a new process: the record is read back from the cache on disk
        with HealthCollector(catalog, settings, clock=lambda: NOW) as collector:
            again = collector.collect([events], tier="full")
        assert again.files_read == 0 and again.computed == [] and again.metrics[events] == metrics

        policies = PolicySet([])
        observation = table_health_events(events, metrics, policies, NOW).observation
        assert observation.metadata["oldest_id"].value == 10
        record = health_record(assess_table(metrics, None, NOW, {}, None), None, {}, NOW)
        assert floe_health_json(record)["oldestId"] == 10 and record["derived"]["oldest_id"] == 10
        assert "    oldest id       10" in format_health_text(record).splitlines()
    forget_parsed_records()
    with HealthCollector(catalog, settings, clock=lambda: NOW) as collector:
        after = collector.collect([events], tier="full")
    assert after.computed == [events] and not hasattr(after.metrics[events], "oldest_id")


def test_a_reducer_that_measures_other_facts_than_it_registered_is_that_tables_error(table):
    settings, catalog, events = table
    with declaring(OLDEST_ID), registering(Reducer(("oldest_id",), lambda read: {"oldest": 1}, (FULL,), 1)):
        with HealthCollector(catalog, settings, clock=lambda: NOW) as collector:
            found = collector.collect([events], tier="full")
    assert events not in found.metrics
    assert found.errors[events] == "LookupError: the reducers of [['oldest_id']] returned other facts than they measure"
