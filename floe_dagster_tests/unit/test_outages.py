"""The one rule that tells an outage from a table's own failure (core/outages.py, errors.failure_kind):
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

from floe_dagster.core.outages import ErrorLink, outage_evidence, outage_in_text
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
