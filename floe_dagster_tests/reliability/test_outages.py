"""Outages: the catalog unreachable (a real network path to PostgreSQL that goes down and comes back)
makes the debt-score sensor skip with the reason and recover by itself; Spark that cannot start
fails the run with a clear message, blames no table and opens the launch circuit; Spark without the
Iceberg runtime fails the run with a clear message that counts toward the table's backoff."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy
from dagster import DagsterInstance

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.runs import run_tags as T
from floe_dagster.core.operations import Operation
from floe_dagster.core.plan.planner import plan
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.build import build_definitions
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.scheduling.inputs import gather
from floe_dagster.scheduling.tick import run_tick
from floe_dagster.settings import load_settings
from floe_dagster_tests.conftest import postgres_url, write_settings
from floe_dagster_tests.integration.test_automation import evaluate_sensor
from floe_dagster_tests.integration.test_production import BIN, POLICIES, pg_lake  # noqa: F401 (fixture)
from floe_dagster_tests.reliability._support import create_fragmented_table

pytestmark = pytest.mark.spark


class TcpProxy:
    """A TCP forwarder to a real server that can be taken down (refusing connections and cutting the
    open ones) and brought back on the same port: the network path of an outage."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []

    def up(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(16)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        if self.listener:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
            self.listener.close()
            self.listener = None
        for connection in self.open:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()
        self.open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self.open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture
def catalog_behind_proxy(pg_lake):
    """test_production's PostgreSQL lakehouse, its catalog now reached through a proxy."""
    _, config = pg_lake
    catalog_url = sqlalchemy.engine.make_url(postgres_url("floe_catalog"))
    proxy = TcpProxy(catalog_url.port)
    proxy.up()
    direct = f":{catalog_url.port}/{catalog_url.database}"
    config.write_text(config.read_text().replace(direct, f":{proxy.port}/{catalog_url.database}"))
    yield load_settings(config, environ={}), proxy
    proxy.down()


@pytest.mark.postgres
def test_sensor_skips_while_the_catalog_is_unreachable_and_recovers(catalog_behind_proxy):
    settings, proxy = catalog_behind_proxy
    defs = build_definitions(settings)
    table = f"{settings.catalog.name}.sales.orders"
    with DagsterInstance.get() as instance:
        proxy.down()
        down = evaluate_sensor(defs, instance)
        assert not down.run_requests
        assert down.skip_message.startswith(f"tick skipped: catalog_unavailable: catalog '{settings.catalog.name}'")
        assert not Coordination(settings.coordination_url).ledger_rows(table)  # nothing admitted, nobody blamed

        proxy.up()
        back = evaluate_sensor(defs, instance)
        assert [r.tags["floe/table"] for r in back.run_requests] == [table]
        assert back.run_requests[0].tags["floe/operation"] == "REWRITE_DATA_FILES"


@pytest.fixture
def sqlite_lake(tmp_path, dagster_home):
    config = write_settings(tmp_path, POLICIES)
    settings = load_settings(config, environ={})
    table = TableName.parse("sales.orders", settings.catalog.name)
    create_fragmented_table(settings, table, files=6)
    refresh_table_cache(settings)
    return settings, config, table


def trigger_in_process_of_its_own(config, table: TableName, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "floe-dagster"), "trigger", table.qualified, "--operation", "REWRITE_DATA_FILES"],
                          env={**os.environ, "FLOE_CONFIG": str(config), **env}, capture_output=True, text=True,
                          timeout=300)


def test_spark_that_cannot_start_fails_the_run_blames_no_table_and_opens_the_circuit(sqlite_lake):
    settings, config, table = sqlite_lake
    result = trigger_in_process_of_its_own(config, table, FLOE_SPARK_MASTER="nowhere://spark")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "REWRITE_DATA_FILES: FAILED" in result.stdout
    assert "Spark could not start (spark.master 'nowhere://spark')" in result.stdout
    coordination = Coordination(settings.coordination_url)
    [outcome] = coordination.outcomes_for(table.qualified)
    assert outcome["failure_kind"] == "outage" and not outcome["succeeded"]
    history = coordination.all_history().get((table.qualified, Operation.REWRITE_DATA_FILES))
    assert history is None or (history.failures, history.consecutive_failures) == (0, 0)  # no table backoff
    with DagsterInstance.get() as instance:
        run = instance.get_run_by_id(outcome["run_id"])
        assert run.status.value == "FAILURE" and run.tags[T.FAILURE_KIND] == "outage"
        tick = run_tick(settings, instance, coordination, datetime.now(timezone.utc), "sensor:test", None)
    assert tick.skipped_tick.startswith("circuit_open") and not tick.admitted


def test_spark_without_the_iceberg_runtime_fails_clearly_and_counts_toward_backoff(sqlite_lake):
    settings, config, table = sqlite_lake
    # A deployment whose own Spark conf replaces the jar list with the JDBC driver alone (floe-dagster
    # adds the runtime to spark.jars, and spark.conf wins): the Iceberg runtime jar is missing.
    driver = Path(settings.spark.jars_cache) / "sqlite-jdbc-3.47.1.0.jar"
    config.write_text(config.read_text().replace("spark:\n", f"spark:\n  conf: {{spark.jars: '{driver}'}}\n"))
    result = trigger_in_process_of_its_own(config, table)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "REWRITE_DATA_FILES: FAILED" in result.stdout
    assert f"'{table.qualified}' failed" in result.stdout
    assert "org.apache.iceberg.spark.SparkCatalog" in result.stdout  # says which class is missing
    history = Coordination(settings.coordination_url).all_history()[(table.qualified, Operation.REWRITE_DATA_FILES)]
    assert history.consecutive_failures == 1
    with DagsterInstance.get() as instance:
        coordination = Coordination(settings.coordination_url)
        data = gather(settings, instance, coordination, datetime.now(timezone.utc), None).plan_input
    decision = next(d for d in plan(data).decisions if d.table == table and d.operation == Operation.REWRITE_DATA_FILES)
    assert decision.decision == "skip" and decision.reasons[0].startswith("failure_backoff")
