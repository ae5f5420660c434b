"""The one masking rule by key as well as by value, in every output (issue 34, deliver 6): which keys it
keeps (identifiers, a structure's bare ``key``), name/value entries, the HTTP answers' middleware (every
field at any depth, table and catalog properties), an error leaving a Dagster op with its cause chain
(a library's too: same objects, same types, same failure kind, rendered by Dagster's own serializer),
and Spark's ``spark.redaction.regex`` against every key of the conf floe builds. Each secret is a random
marker."""

from __future__ import annotations

import json
import inspect
import re
import uuid

import pytest

from floe_dagster import redaction
from floe_dagster.api.answer_masking import masked_body
from floe_dagster.core.policies.owner_overrides import Ignored
from floe_dagster.core.basics.secrets import (
    MASK,
    SPARK_REDACTION_REGEX,
    mask_text,
    masked,
    secret_field,
    secret_key,
    spark_redaction_regex,
)
from floe_dagster.core.facts.table_properties import PropertyDrift
from floe_dagster.errors import OUTAGE, failure_kind


def marker(position: str) -> str:
    return f"Zk{position}{uuid.uuid4().hex[:18]}"


@pytest.mark.parametrize("name", ["assetKey", "asset_key", "partition_key", "partitionKey", "sort-key",
                                  "dagster/run_key", "floe/run-key", "slot_key", "primaryKey", "keys"])
def test_a_key_naming_an_identifier_is_no_secret(name):
    assert not secret_key(name) and not secret_field(name)


def test_a_bare_key_field_names_a_key_but_key_equals_in_text_is_a_secret():
    assert secret_key("key") and not secret_field("key")
    for name in ("x-api-key", "api_key", "apiKey", "s3.access-key-id", "header.Authorization", "sessionKey"):
        assert secret_field(name), name
    secret = marker("Query")
    assert secret not in mask_text(f"GET https://maps.example/geo?key={secret}&q=x")
    # a drift entry and a 403's details name keys: shown as they are
    assert masked({"key": "write.format.default", "declared": "parquet", "current": "orc"}) == {
        "key": "write.format.default", "declared": "parquet", "current": "orc"}


def test_name_value_entries_naming_a_secret_have_their_value_masked():
    secret = marker("Entry")
    ignored = Ignored("floe.rewrite-data-files.secret-token", secret, "not a key owners may set")
    assert ignored.to_json() == {"property": "floe.rewrite-data-files.secret-token", "value": MASK,
                                 "reason": "not a key owners may set"}
    drift = PropertyDrift("s3.secret-access-key", secret + "d", secret + "c")
    assert drift.to_json() == {"key": "s3.secret-access-key", "declared": MASK, "current": MASK}
    assert secret not in drift.describe()
    assert masked({"name": "password", "value": secret}) == {"name": "password", "value": MASK}
    assert Ignored("floe.x.min-input-files", "1", "r").to_json()["value"] == "1"


def _answer(data, content_type: str = "application/json", by_key: bool = True):
    return json.loads(masked_body(json.dumps(data).encode(), content_type, by_key))


def test_every_http_answer_is_masked_by_key_at_any_depth():
    secrets = {name: marker(name) for name in ("Password", "S3", "Header", "Credential", "ApiKey", "Drift")}
    answer = {
        "table": "demo.sales.orders",
        "properties": {"s3.secret-access-key": secrets["S3"], "write.format.default": "parquet", "sort-key": "id"},
        "catalog": {"properties": {"header.X-Tenant-Token": secrets["Header"], "uri": "http://h:1"}},
        "details": {"cause": {"password": secrets["Password"], "status": 500}},
        "items": [{"credential": secrets["Credential"], "x-api-key": secrets["ApiKey"]}],
        "propertyDrift": [{"key": "s3.access-key-id", "declared": secrets["Drift"], "current": None}],
        "writers": [{"assetKey": "sales/orders_writer"}],
    }
    shown = _answer(answer)
    assert not [name for name, secret in secrets.items() if secret in json.dumps(shown)], shown
    assert shown["properties"] == {"s3.secret-access-key": MASK, "write.format.default": "parquet", "sort-key": "id"}
    assert shown["details"]["cause"] == {"password": MASK, "status": 500}
    assert shown["propertyDrift"] == [{"key": "s3.access-key-id", "declared": MASK, "current": None}]
    assert shown["writers"] == [{"assetKey": "sales/orders_writer"}]


def test_the_apis_own_fields_keep_their_contract():
    created = {"key": "floe_" + uuid.uuid4().hex, "apiKey": {"id": "k1", "name": "ci-bot", "role": "OPERATOR"}}
    assert _answer(created) == created  # the new key, shown this once; its public record
    forbidden = {"error": "Insufficient permissions", "code": "FORBIDDEN",
                 "details": {"key": "viewer-key", "role": "VIEWER", "needs": "TRIGGER"}}
    assert _answer(forbidden) == forbidden
    document = {"components": {"securitySchemes": {"APIKeyHeader": {"type": "apiKey", "name": "X-API-Key"}}}}
    assert _answer(document, by_key=False) == document  # the OpenAPI document names fields, holds none


def _failing_chain(known: str, by_key: str):
    """A PyIceberg error whose cause is a refused connection quoting the catalog's URI (a known secret)."""
    from pyiceberg.exceptions import RESTError

    try:
        raise ConnectionRefusedError(111, f"Connection refused: http://floe:{known}@127.0.0.1:1/v1/config")
    except ConnectionRefusedError as refused:
        raise RESTError(f"catalog said: s3.secret-access-key={by_key} is not valid") from refused


def test_an_error_leaving_a_dagster_op_is_masked_with_its_causes_and_keeps_its_type(tmp_path):
    from dagster._utils.error import serializable_error_info_from_exc_info
    from pyiceberg.exceptions import RESTError

    known, by_key = marker("Known"), marker("ByKey")
    redaction.remember({"catalog": {"properties": {"uri": f"http://floe:{known}@127.0.0.1:1"}}})

    @redaction.failures_masked
    def op_body(context):  # Dagster reads the signature through the decorator
        yield 1
        _failing_chain(known, by_key)

    with pytest.raises(RESTError) as raised:
        list(op_body(None))
    error = raised.value
    assert isinstance(error.__cause__, ConnectionRefusedError) and error.__cause__.errno == 111
    assert failure_kind(error) == OUTAGE  # the refused connection still classifies it
    info = serializable_error_info_from_exc_info((type(error), error, error.__traceback__))
    rendered = info.to_string()
    assert info.cls_name == "RESTError" and info.cause.cls_name == "ConnectionRefusedError"
    assert "s3.secret-access-key=***" in rendered and "http://floe:***@127.0.0.1:1" in rendered
    assert known not in rendered and by_key not in rendered
    assert list(inspect.signature(op_body).parameters) == ["context"]


def test_a_library_class_with_its_own_text_is_masked_and_pickles_masked():
    import pickle

    from py4j.protocol import Py4JNetworkError

    secret = marker("Py4J")
    error = redaction.mask_exception(Py4JNetworkError(f"gateway at http://u:{secret}@h:1 gone; token={secret}",
                                                      when="sending"))
    assert type(error).__name__ == "Py4JNetworkError" and isinstance(error, Py4JNetworkError)
    copy = pickle.loads(pickle.dumps(error))  # the library's own class, its attributes kept
    assert secret not in str(error) and secret not in str(copy) and type(copy) is Py4JNetworkError
    assert copy.when == "sending" and "_floe_shown" not in vars(copy)
    plain = ValueError("nothing secret")
    assert redaction.mask_exception(plain) is plain and type(plain) is ValueError


REST_CATALOG = """
catalog:
  name: lake
  properties:
    type: rest
    uri: "http://floe:{password}@127.0.0.1:8181"
    credential: "client:{credential}"
    token: {token}
    header.Authorization: "Bearer {header}"
    header.X-Iceberg-Access-Delegation: vended-credentials
    s3.endpoint: "http://127.0.0.1:9000"
    s3.access-key-id: {key_id}
    s3.secret-access-key: {s3_secret}
    s3.session-token: {session}
  spark-properties:
    rest.signing-secret: {signing}
spark:
  conf:
    spark.hadoop.fs.s3a.secret.key: {s3a}
    spark.executorEnv.API_KEY: {env_key}
"""


def test_sparks_redaction_regex_covers_every_secret_key_floe_sets(tmp_path):
    from floe_dagster.settings import load_settings
    from floe_dagster.spark.session import REDACTION_REGEX, held_back, spark_conf_for

    secrets = {name: marker(name) for name in ("password", "credential", "token", "header", "key_id", "s3_secret",
                                                "session", "signing", "s3a", "env_key")}
    (tmp_path / "floe.yaml").write_text(REST_CATALOG.format(**secrets))
    settings = load_settings(tmp_path / "floe.yaml", environ={})
    conf = spark_conf_for(settings)
    pattern = re.compile(conf[REDACTION_REGEX])
    hidden = {key for key, value in conf.items() if pattern.search(key) or pattern.search(value)}
    # Spark hides an entry whose key or value matches: every entry holding a marker is hidden.
    holding = {key for key, value in conf.items() if any(secret in value for secret in secrets.values())}
    assert len(holding) == len(secrets) and holding <= hidden, sorted(holding - hidden)
    assert {key for key in conf if secret_key(key)} <= hidden
    assert {"spark.sql.catalog.lake.credential", "spark.sql.catalog.lake.header.Authorization",
            "spark.sql.catalog.lake.uri"} <= hidden  # Spark's default regex hides none of them
    assert "spark.master" not in hidden and "spark.sql.catalog.lake.type" not in hidden
    assert held_back(settings)[0][REDACTION_REGEX] == conf[REDACTION_REGEX]  # Dagit shows it as it is
    assert mask_text(SPARK_REDACTION_REGEX) == SPARK_REDACTION_REGEX


def test_a_users_own_redaction_regex_is_kept_beside_floes():
    combined = spark_redaction_regex("internal[.]host")
    assert combined.startswith(SPARK_REDACTION_REGEX) and re.search(combined, "spark.internal.host")
    assert re.search(combined, "spark.sql.catalog.x.credential")
