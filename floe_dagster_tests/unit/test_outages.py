"""The one rule that tells an outage from a table's own failure (core/runs/outages.py, errors.failure_kind):
only what shows a service cannot be reached is an outage; anything else loading or maintaining one
table (corrupt or missing metadata, a refused read, a 4xx about it, Spark's AnalysisException) is that
table's failure. The network errors are real ones: a connection to a port nobody listens on."""

from __future__ import annotations

import json
import socket

import pytest
import requests
import sqlalchemy
from pyiceberg.exceptions import (
    BadRequestError,
    ForbiddenError,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    ValidationError,
)

from floe_dagster.core.runs.outages import ErrorLink, job_internal_evidence, outage_evidence, outage_in_text
from floe_dagster.errors import (
    OUTAGE,
    CatalogUnavailable,
    EngineUnavailable,
    FailedAfterCommit,
    MaintenanceFailed,
    TableUnreadable,
    failure_kind,
    unreachable,
)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: nobody listens there


def raised(call) -> BaseException:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - the test wants whatever it raises
        return exc
    raise AssertionError("expected an error")


def test_a_refused_connection_is_an_outage_in_every_client():
    port = closed_port()
    assert failure_kind(raised(lambda: socket.create_connection(("127.0.0.1", port), timeout=5))) == OUTAGE
    assert failure_kind(raised(lambda: requests.get(f"http://127.0.0.1:{port}/v1/config", timeout=5))) == OUTAGE
    engine = sqlalchemy.create_engine(f"postgresql://floe:floe@127.0.0.1:{port}/catalog")
    assert failure_kind(raised(lambda: engine.connect())) == OUTAGE  # psycopg2: "Connection refused"
    engine.dispose()


def test_an_unknown_host_and_a_timeout_are_outages():
    assert failure_kind(socket.gaierror(-2, "Name or service not known")) == OUTAGE
    assert failure_kind(TimeoutError("timed out")) == OUTAGE
    assert failure_kind(requests.exceptions.ReadTimeout("read timed out")) == OUTAGE


def test_a_cause_deep_in_the_chain_counts():
    def load():
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as exc:
            raise OSError("When reading information for key 'metadata/v3.metadata.json'") from exc

    assert failure_kind(raised(load)) == OUTAGE


def test_what_one_table_does_wrong_is_its_own_failure():
    corrupt = raised(lambda: json.loads("\x00garbage"))
    missing = raised(lambda: open("/nonexistent/metadata/v9.metadata.json"))
    for exc in (corrupt, missing, PermissionError(13, "Permission denied", "/warehouse/t/metadata/v1.metadata.json"),
                NoSuchTableError("Table does not exist: sales.orders"), ForbiddenError("not allowed: sales.orders"),
                BadRequestError("Malformed request"), ValidationError("not a table metadata file"),
                sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))):
        assert failure_kind(exc) is None, exc


def http_error(status: int) -> BaseException:
    """PyIceberg's REST client raises its own error from requests' HTTPError, which has the answer."""
    response = requests.Response()
    response.status_code = status

    def call():
        try:
            raise requests.HTTPError(response=response)
        except requests.HTTPError as exc:
            raise ServerError(f"{status}: from the catalog") from exc

    return raised(call)


def test_a_gateway_in_front_of_a_catalog_that_is_down_is_an_outage_a_server_error_is_not():
    assert failure_kind(http_error(502)) == OUTAGE and failure_kind(http_error(504)) == OUTAGE
    assert failure_kind(ServiceUnavailableError("503: maintenance")) == OUTAGE
    assert failure_kind(http_error(500)) is None  # the server failed on this table (corrupt metadata)


def test_java_errors_are_read_with_their_cause_chain():
    assert outage_in_text("org.apache.iceberg.exceptions.RuntimeIOException: Failed to open input stream\n"
                          "Caused by: java.net.ConnectException: Connection refused (Connection refused)")
    assert outage_in_text("software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: "
                          "s3.internal: Name or service not known")
    assert outage_in_text("py4j.protocol.Py4JNetworkError: Answer from Java side is empty")
    assert outage_in_text("<_MultiThreadedRendezvous of RPC that terminated with: status = StatusCode.UNAVAILABLE")
    assert not outage_in_text("org.apache.iceberg.exceptions.RuntimeIOException: Failed to read file: "
                              "file:/w/t/metadata/v2.metadata.json\nCaused by: com.fasterxml.jackson.core."
                              "JsonParseException: Unexpected character ('g' (code 103))")
    assert not outage_in_text("[TABLE_OR_VIEW_NOT_FOUND] The table or view `demo`.`sales`.`gone` cannot be found.")
    # The commit's outcome is unknown: it may have landed, so someone must look (never retried as an outage).
    assert not outage_in_text("org.apache.iceberg.exceptions.CommitStateUnknownException: Read timed out")


def test_the_engines_own_errors_keep_the_kind_they_were_given():
    assert failure_kind(EngineUnavailable("Spark could not start")) == OUTAGE
    assert failure_kind(CatalogUnavailable("catalog 'demo' could not list tables")) == OUTAGE
    # A table's failure stays one, whatever its cause says (the cause was read when it was raised).
    wrapped = TableUnreadable("catalog 'demo' could not load 'demo.sales.b': bad JSON")
    wrapped.__cause__ = ConnectionResetError()
    assert failure_kind(wrapped) is None


def test_after_a_commit_the_error_that_followed_decides():
    landed = FailedAfterCommit.of("rewrite_data_files on 'demo.sales.b'", [7, 8], "the row check",
                                  MaintenanceFailed("[TABLE_OR_VIEW_NOT_FOUND] ..."))
    assert failure_kind(landed) is None and landed.snapshot_id == 8
    assert str(landed).startswith("rewrite_data_files on 'demo.sales.b' committed snapshot(s) 7, 8; "
                                  "then the row check failed: [TABLE_OR_VIEW_NOT_FOUND]")
    down = FailedAfterCommit.of("x on 't'", [], "reading the snapshots it committed", EngineUnavailable("gone"))
    assert failure_kind(down) == OUTAGE and down.snapshot_id is None
    assert "its changes landed; the snapshots it committed could not be read" in str(down)


@pytest.mark.parametrize("link, expected", [
    (ErrorLink(("ConnectionRefusedError", "ConnectionError", "OSError"), "x"), "ConnectionRefusedError (ConnectionError)"),
    (ErrorLink(("ServerError", "RESTError"), "x", status=503), "HTTP 503"),
    (ErrorLink(("OperationalError",), "x", disconnect=True), "the database connection was dropped"),
    (ErrorLink(("ValueError",), "x"), None),
])
def test_the_evidence_names_what_showed_it(link, expected):
    assert outage_evidence([link]) == expected


def test_unreachable_reads_the_text_the_caller_adds():
    assert unreachable(ValueError("An error occurred while calling o51.sql")) is None
    assert unreachable(ValueError("An error occurred while calling o51.sql"),
                       "Caused by: java.net.UnknownHostException: catalog.internal") == "'UnknownHostException'"


# -- a failure inside one of Spark's jobs is the table's, whatever connection words it carries ------------
# The texts as Spark 3.5 prints them (most "at" lines left out). The dead executor, the lost output
# location, the lost executor and the task out of memory were printed by this machine's PySpark 3.5 in
# local-cluster mode (an executor killed with SIGKILL between stages and during a task; a task building
# a 2 GB string in a 512 MB executor). "Failed to connect to" is the text when the executor's host stops
# answering before the driver has marked it dead (a node lost, an executor killed by the kernel).

FETCH_FAILED_TO_CONNECT = """\
org.apache.spark.SparkException: Job aborted due to stage failure: ResultStage 7 (sql at NativeMethodAccessorImpl.java:0) \
has failed the maximum allowable number of times: 4. Most recent failure reason:
org.apache.spark.shuffle.FetchFailedException: Failed to connect to /10.0.1.7:39211
	at org.apache.spark.errors.SparkCoreErrors$.fetchFailedError(SparkCoreErrors.scala:437)
	at org.apache.spark.storage.ShuffleBlockFetcherIterator.throwFetchFailedException(ShuffleBlockFetcherIterator.scala:1239)
Caused by: java.io.IOException: Failed to connect to /10.0.1.7:39211
	at org.apache.spark.network.client.TransportClientFactory.createClient(TransportClientFactory.java:294)
Caused by: io.netty.channel.AbstractChannel$AnnotatedConnectException: Connection refused: /10.0.1.7:39211
Caused by: java.net.ConnectException: Connection refused
"""
FETCH_FROM_A_DEAD_EXECUTOR = """\
org.apache.spark.SparkException: Job aborted due to stage failure: ResultStage 3 (count at /tmp/blast/texts2.py:21) \
has failed the maximum allowable number of times: 1. Most recent failure reason:
org.apache.spark.shuffle.FetchFailedException
	at org.apache.spark.errors.SparkCoreErrors$.fetchFailedError(SparkCoreErrors.scala:437)
Caused by: org.apache.spark.ExecutorDeadException: [INTERNAL_ERROR_NETWORK] The relative remote executor(Id: 0), \
which maintains the block data to fetch is dead.
	at org.apache.spark.network.netty.NettyBlockTransferService$$anon$2.createAndStart(NettyBlockTransferService.scala:141)
"""
OUTPUT_LOCATION_LOST = """\
org.apache.spark.SparkException: Job aborted due to stage failure: ResultStage 3 (count at /tmp/blast/texts.py:21) \
has failed the maximum allowable number of times: 1. Most recent failure reason:
org.apache.spark.shuffle.MetadataFetchFailedException: Missing an output location for shuffle 0 partition 0
	at org.apache.spark.MapOutputTracker$.validateStatus(MapOutputTracker.scala:1747)
"""
EXECUTOR_LOST = """\
org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 4.0 failed 1 times, most recent \
failure: Lost task 0.0 in stage 4.0 (TID 10) (192.0.2.2 executor 1): ExecutorLostFailure (executor 1 exited caused by \
one of the running tasks) Reason: Command exited with code 137
Driver stacktrace:
	at org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)
"""
EXECUTOR_LOST_TO_THE_NETWORK = """\
org.apache.spark.SparkException: Job aborted due to stage failure: Task 2 in stage 5.0 failed 4 times, most recent \
failure: Lost task 2.3 in stage 5.0 (TID 31) (10.0.1.7 executor 3): ExecutorLostFailure (executor 3 exited unrelated \
to the running tasks) Reason: Remote RPC client disassociated. Likely due to containers exceeding thresholds, or \
network issues. Check driver logs for WARN messages.
Caused by: java.io.IOException: Connection reset by peer
"""
TASK_OUT_OF_MEMORY = """\
org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 5.0 failed 1 times, most recent \
failure: Lost task 0.0 in stage 5.0 (TID 11) (192.0.2.2 executor 2): java.lang.OutOfMemoryError: Java heap space
	at org.apache.spark.unsafe.types.UTF8String.fromBytes(UTF8String.java:109)
Driver stacktrace:
Caused by: java.lang.OutOfMemoryError: Java heap space
"""
TASK_CANNOT_READ_A_FILE = """\
java.lang.RuntimeException: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 7.0 \
failed 1 times, most recent failure: Lost task 0.0 in stage 7.0 (TID 5) (192.0.2.2 executor driver): \
org.apache.iceberg.exceptions.RuntimeIOException: Failed to open Parquet file: http://127.0.0.1:57529/lake/b/gone.parquet
Caused by: java.net.ConnectException: Connection refused (Connection refused)
"""
# Spark Connect relays the server's job failure with its text.
OVER_SPARK_CONNECT = """\
(org.apache.spark.SparkException) Job aborted due to stage failure: ShuffleMapStage 12 (rewrite) has failed the \
maximum allowable number of times: 4. Most recent failure reason: FetchFailed(BlockManagerId(2, 10.0.1.9, 41017, None), \
shuffleId=3, mapIndex=1, mapId=40, reduceId=0, message=
org.apache.spark.shuffle.FetchFailedException: Failed to connect to /10.0.1.9:41017"""

JOB_INTERNAL = {
    "fetch failure, failed to connect": FETCH_FAILED_TO_CONNECT, "fetch from a dead executor": FETCH_FROM_A_DEAD_EXECUTOR,
    "output location lost": OUTPUT_LOCATION_LOST, "executor lost": EXECUTOR_LOST,
    "executor lost to the network": EXECUTOR_LOST_TO_THE_NETWORK, "task out of memory": TASK_OUT_OF_MEMORY,
    "task cannot read a file": TASK_CANNOT_READ_A_FILE, "over Spark Connect": OVER_SPARK_CONNECT,
}


@pytest.mark.parametrize("text", JOB_INTERNAL.values(), ids=JOB_INTERNAL.keys())
def test_a_failure_inside_a_spark_job_is_the_tables_even_with_connection_words(text):
    assert outage_in_text(text) is None
    assert job_internal_evidence([ErrorLink((), text)])
    # As the engine asks it: Py4J's "An error occurred while calling" with the Java text it adds.
    assert unreachable(RuntimeError("An error occurred while calling o51.sql"), text) is None


def test_the_words_of_a_job_in_one_link_of_the_chain_decide_for_the_chain():
    chain = [ErrorLink(("Py4JJavaError", "Py4JError", "Exception"), "An error occurred while calling o88.sql.\n"
                       "Caused by: java.net.ConnectException: Connection refused"),
             ErrorLink((), FETCH_FAILED_TO_CONNECT)]
    assert outage_evidence(chain) is None and job_internal_evidence(chain) == "'Job aborted due to stage failure'"


SERVICE_UNREACHABLE = {
    "Spark master": "org.apache.spark.SparkException: Exception thrown in awaitResult: \nCaused by: java.io.IOException: "
                    "Failed to connect to spark-master/10.0.0.2:7077\nCaused by: io.netty.channel.AbstractChannel$"
                    "AnnotatedConnectException: Connection refused: spark-master/10.0.0.2:7077",
    "Spark stopped": "org.apache.spark.SparkException: Job 12 cancelled because SparkContext was shut down",
    "Spark Connect server": "<_MultiThreadedRendezvous of RPC that terminated with: status = StatusCode.UNAVAILABLE "
                            "details = \"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:15002: "
                            "Failed to connect to remote host: Connection refused\">",
    "JDBC catalog": "org.apache.iceberg.jdbc.UncheckedSQLException: Failed to connect to: jdbc:postgresql://catalog:5432/"
                    "lake\nCaused by: org.postgresql.util.PSQLException: Connection to catalog:5432 refused.\n"
                    "Caused by: java.net.ConnectException: Connection refused",
    "REST catalog": "org.apache.iceberg.exceptions.RESTException: Error occurred while processing GET request\n"
                    "Caused by: org.apache.hc.client5.http.HttpHostConnectException: Connect to http://rest:8181 "
                    "[rest/10.0.0.3] failed: Connection refused",
    "storage on the driver": "org.apache.iceberg.exceptions.RuntimeIOException: Failed to open input stream for file: "
                             "s3://lake/sales/b/metadata/snap-1.avro\nCaused by: software.amazon.awssdk.core.exception."
                             "SdkClientException: Unable to execute HTTP request: Connect to s3.internal:9000 "
                             "[s3.internal/10.0.0.4] failed: Connection refused",
    "Py4J gateway": "py4j.protocol.Py4JNetworkError: Answer from Java side is empty",
}


@pytest.mark.parametrize("text", SERVICE_UNREACHABLE.values(), ids=SERVICE_UNREACHABLE.keys())
def test_a_service_that_cannot_be_reached_outside_any_job_is_an_outage(text):
    assert outage_in_text(text)


def test_the_clients_own_lost_connection_is_an_outage_whatever_its_text_says():
    # Py4J lost its gateway while a job ran: the JVM is gone, whatever the last text was.
    gone = ErrorLink(("Py4JNetworkError", "Py4JError", "Exception"), f"Error while sending\n{EXECUTOR_LOST}")
    assert outage_evidence([gone]) == "Py4JNetworkError"
    assert outage_evidence([ErrorLink(("ServerError",), TASK_OUT_OF_MEMORY, status=503)]) == "HTTP 503"
