"""A REST catalog that refuses one table: Iceberg's own REST catalog server, reached through a proxy that
answers 403 Forbidden (the REST spec's error body) for everything about ``sales.refused`` and passes
everything else through. That table's trouble stays its own: health collection leaves it out (even when
it is the only table collected) without calling the catalog unavailable, the tick plans the others, and
a batch run over all three maintains the two others, records the refused one as its own failure (with
backoff), and trips no circuit breaker. APPLY_TABLE_PROPERTIES is a PyIceberg commit: no Spark here."""

from __future__ import annotations

import http.client
import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest
from dagster import DagsterInstance
from pyiceberg.catalog import load_catalog

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.spark.operation_steps import apply_table_properties as table_properties_run
from floe_dagster.defs.build import build_definitions
from floe_dagster.defs.names import MAINTENANCE_JOB, asset_key_for
from floe_dagster.demo import EVENT_SCHEMA
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.scheduling.tick import CIRCUIT_PAUSE, run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import JARS_CACHE
from floe_dagster_tests.servers import rest_catalog  # noqa: F401 (a fixture)

OP = Operation.APPLY_TABLE_PROPERTIES
A, REFUSED, C = (TableName("lake", ("sales",), name) for name in ("a", "refused", "c"))
REFUSED_PATH = "/namespaces/sales/tables/refused"
POLICIES = """
- name: props
  tablePattern: "lake.sales.*"
  tableProperties: {write.metadata.previous-versions-max: 5}
  tablePropertiesSchedule: {}
"""


class RefusingProxy:
    """An HTTP proxy to the REST catalog that answers 403 for one table's paths."""

    def __init__(self, target: str):
        parsed = urlparse(target)
        host, port = parsed.hostname, parsed.port

        class Handler(BaseHTTPRequestHandler):
            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if REFUSED_PATH in self.path:
                    answer = json.dumps({"error": {"message": "Forbidden: no access to sales.refused",
                                                   "type": "ForbiddenException", "code": 403}}).encode()
                    status, headers = 403, {"Content-Type": "application/json"}
                else:
                    upstream = http.client.HTTPConnection(host, port, timeout=30)
                    upstream.request(self.command, self.path, body or None,
                                     {k: v for k, v in self.headers.items() if k.lower() != "host"})
                    response = upstream.getresponse()
                    answer, status = response.read(), response.status
                    headers = {k: v for k, v in response.getheaders()
                               if k.lower() not in ("transfer-encoding", "connection", "content-length")}
                    upstream.close()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_DELETE = do_HEAD = _forward

            def log_message(self, *args):  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def refusing_lake(tmp_path, rest_catalog, dagster_home, monkeypatch):  # noqa: F811
    proxy = RefusingProxy(rest_catalog.uri)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(POLICIES)
    config = tmp_path / "floe.yaml"
    config.write_text(f"data-dir: {tmp_path / 'data'}\n"
                      f"catalog: {{name: lake, properties: {{type: rest, uri: '{proxy.uri}'}}}}\n"
                      f"spark: {{jars-cache: {JARS_CACHE}}}\npolicies: [{tmp_path / 'policies'}]\n"
                      "batching: {max-tables: 20}\n")
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    settings = load_settings(config, environ={})
    # The tables are made straight through the server (the proxy refuses the one).
    direct = load_catalog("lake", type="rest", uri=rest_catalog.uri)
    direct.create_namespace("sales")
    for table in (A, REFUSED, C):
        direct.create_table(table.identifier, schema=EVENT_SCHEMA)
    refresh_table_cache(settings)
    yield settings
    proxy.close()


def test_a_table_the_catalog_refuses_fails_alone(refusing_lake):
    settings = refusing_lake
    catalog = open_catalog(settings.catalog)
    # Health: the refused table is left out with the catalog's answer, even when it is the only one asked.
    with HealthCollector(catalog, settings) as collector:
        alone = collector.collect([REFUSED], tier="summary")
        assert REFUSED not in alone.metrics and "Forbidden" in alone.errors[REFUSED]
        every = collector.collect([A, REFUSED, C], tier="summary")
        assert set(every.metrics) == {A, C}
    coordination = Coordination(settings.coordination_url)
    defs = build_definitions(settings)
    with DagsterInstance.get() as instance:
        tick = run_tick(settings, instance, coordination, datetime.now(timezone.utc), "sensor:test", None)
        assert tick.skipped_tick is None  # not catalog_unavailable
        assert sorted(d.table.name for d in tick.admitted) == ["a", "c"]  # the refused one has no health yet
        # A run over all three (as Dagit's "Materialize selected"): the two others are maintained.
        result = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key=OP.value, raise_on_error=False,
            asset_selection=[asset_key_for(t) for t in (A, REFUSED, C)])
        assert not result.success
        assert {".".join(m.asset_key.path) for m in result.asset_materializations_for_node("iceberg_tables")} == {
            A.qualified, C.qualified}
        assert T.FAILURE_KIND not in instance.get_run_by_id(result.run_id).tags
    for table in (A, C):
        assert load_table(catalog, table).properties["write.metadata.previous-versions-max"] == "5"
    [outcome] = coordination.outcomes_for(REFUSED.qualified)
    assert (outcome["succeeded"], outcome["failure_kind"]) == (False, None)
    assert f"could not load '{REFUSED.qualified}'" in outcome["message"] and "Forbidden" in outcome["message"]
    assert coordination.all_history()[(REFUSED.qualified, OP)].consecutive_failures == 1
    assert coordination.outage_circuit(datetime.now(timezone.utc), CIRCUIT_PAUSE) is None


def test_a_declared_property_a_writer_set_after_floes_read_wins_on_a_rest_catalog_too(refusing_lake, monkeypatch):
    """The REST server cannot check floe's own requirement: the table is read again right before the
    commit, so a writer that came first still wins and the run is a conflict."""
    settings = refusing_lake
    real = table_properties_run.load_table

    def read_then_writer(catalog, table):
        loaded = real(catalog, table)
        other = load_table(open_catalog(settings.catalog), A)  # another writer's own load and commit
        other.transaction().set_properties({"write.metadata.previous-versions-max": "9"}).commit_transaction()
        monkeypatch.setattr(table_properties_run, "load_table", real)  # once
        return loaded

    monkeypatch.setattr(table_properties_run, "load_table", read_then_writer)
    with DagsterInstance.get() as instance:
        result = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance, partition_key=OP.value, raise_on_error=False, asset_selection=[asset_key_for(A)])
        assert result.success and instance.get_run_by_id(result.run_id).tags[T.CONFLICTS] == A.qualified
    assert load_table(open_catalog(settings.catalog), A).properties["write.metadata.previous-versions-max"] == "9"
    [outcome] = Coordination(settings.coordination_url).outcomes_for(A.qualified)
    assert outcome["failure_kind"] == "conflict" and "max: unset -> '9'" in outcome["message"]
