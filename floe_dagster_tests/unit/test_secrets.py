"""The one masking rule (core/basics/secrets.py) and where a process applies it (redaction.py): which keys
name a secret, URI user info, secrets inside free text, nested values, known secrets; log records
(floe's loggers, tracebacks), floe's errors and their causes, the CLI's output, the settings'
secrets remembered as they are loaded, and secrets handed to Dagster resources as EnvVar."""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from pathlib import Path

import pytest

from floe_dagster import redaction
from floe_dagster.core.basics.secrets import MASK, mask_text, masked, secret_key, secrets_in, split_secret_entries
from floe_dagster.errors import CatalogUnavailable, SecretInCause, SettingsError, masked_cause
from floe_dagster.settings import settings_from_mapping


def marker() -> str:
    return "S3cr3t" + uuid.uuid4().hex[:16]


@pytest.mark.parametrize("name", [
    "password", "jdbc.password", "s3.secret-access-key", "s3.access-key-id", "s3.session-token", "token",
    "credential", "header.Authorization", "header.X-Custom", "spark.sql.catalog.demo.header.Authorization",
    "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key", "adls.sas-token.account",
    "gcs.oauth2.token", "spark.ssl.keyStorePassword", "spark.authenticate.secret", "encryption.key-id",
    "apiKey", "api_key", "privateKey", "client_secret", "Cookie", "X-Amz-Signature", "sig", "pwd",
])
def test_keys_naming_a_secret(name):
    assert secret_key(name)


@pytest.mark.parametrize("name", [
    "uri", "warehouse", "type", "jdbc.user", "s3.endpoint", "s3.region", "spark.master", "keys-file", "keys_env",
    "policy-directory", "client.region", "io-impl", "monkeyPatch", "hockey", "name", "dagster/table",
])
def test_keys_that_are_no_secret(name):
    assert not secret_key(name)


@pytest.mark.parametrize("text, shown", [
    ("postgresql+psycopg2://user:hunter2@db:5432/lake", "postgresql+psycopg2://user:***@db:5432/lake"),
    ("postgresql://user:p@ss@db/lake", "postgresql://user:***@db/lake"),  # '@' in the password
    ("https://TOKEN123@github.com/x", "https://***@github.com/x"),  # a lone user info is a token
    ("could not parse 'postgresql://u:hunter2@h/db' (x)", "could not parse 'postgresql://u:***@h/db' (x)"),
    ("jdbc:postgresql://h/db?user=x&password=hunter2&ssl=true", "jdbc:postgresql://h/db?user=x&password=***&ssl=true"),
    ("sc://spark:15002/;token=abc123;user_id=me", "sc://spark:15002/;token=***;user_id=me"),
    ("{'header.Authorization': 'Bearer abc', 'uri': 'http://x'}", "{'header.Authorization': '***', 'uri': 'http://x'}"),
    ('{"s3.secret-access-key": "AKIA/x+y=", "warehouse": "s3://b"}', '{"s3.secret-access-key": "***", "warehouse": "s3://b"}'),
    ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: *** ***"),
    ("--conf spark.hadoop.fs.s3a.secret.key=abc --conf spark.master=local", "--conf spark.hadoop.fs.s3a.secret.key=*** --conf spark.master=local"),
    ("password: hunter2", "password: ***"),
    # A name ending in 'key' is no prose, unquoted before a ':' too: a request's headers quoted in an error.
    ("X-API-Key: floe_abc123def", "X-API-Key: ***"), ("api_key: abcdefghijk", "api_key: ***"),
    ("{'token': b'abcdefghijk'}", "{'token': b'***'}"),  # a bytes value, as Python shows a dict of bytes
    # A presigned S3 URL and an Azure SAS URL in a library's error: the signature and credential, not the path.
    ("GET https://b.s3.amazonaws.com/k.parquet?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=0f1e2d failed",
     "GET https://b.s3.amazonaws.com/k.parquet?X-Amz-Credential=***&X-Amz-Signature=*** failed"),
    ("https://a.blob.core.windows.net/c/f?sv=2020-08-04&sig=AbC%2Bd&se=1", "https://a.blob.core.windows.net/c/f?sv=2020-08-04&sig=***&se=1"),
    # JSON quoted inside JSON (a catalog's error body logged as a JSON string).
    (r'{\"password\": \"hunter2xyz\", \"user\": \"a\"}', r'{\"password\": \"***\", \"user\": \"a\"}'),
])
def test_secrets_inside_text(text, shown):
    assert mask_text(text) == shown
    assert mask_text(shown) == shown  # masking twice changes nothing


@pytest.mark.parametrize("text", [
    "Every API key: floe.yaml's and the ones created over HTTP",  # prose, not a secret
    "s3://bucket/path/a@b", "postgresql://db:5432/lake", "at 12:30:00 the key-file was read",
    "table demo.sales.orders: 13 files", "keys-file: /etc/floe/keys", "api.key-file: unknown key",
])
def test_text_without_secrets_is_unchanged(text):
    assert mask_text(text) == text


def test_nested_values_lists_and_keys():
    settings = {"catalog": {"properties": {"uri": "postgresql://u:pw@h/db", "header.Authorization": "Bearer t",
                                           "token": "", "credential": None, "warehouse": "s3://b"}},
                "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "SK", "spark.master": "local[2]"},
                          "jars": ["a.jar", "https://u:pw2@repo/x.jar"]},
                "api": {"secrets": {"nested": "deep", "list": ["x"]}}}
    shown = masked(settings)
    assert shown["catalog"]["properties"] == {"uri": "postgresql://u:***@h/db", "header.Authorization": MASK,
                                              "token": "", "credential": None, "warehouse": "s3://b"}
    assert shown["spark"]["conf"] == {"spark.hadoop.fs.s3a.secret.key": MASK, "spark.master": "local[2]"}
    assert shown["spark"]["jars"] == ["a.jar", "https://u:***@repo/x.jar"]
    assert shown["api"]["secrets"] == MASK  # a secret key's value is masked whole, whatever its shape
    assert secrets_in(settings) == {"pw", "Bearer t", "SK", "pw2", "deep", "x"}


def test_known_secrets_are_masked_in_any_shape_but_only_when_long_enough():
    long, short = marker(), "floe"
    text = f"failed for {long} and {short}; again {long}"
    assert mask_text(text, [long, short]) == f"failed for {MASK} and {short}; again {MASK}"


def test_a_flat_conf_split_into_what_is_shown_and_what_is_held_back():
    shown, held = split_secret_entries({"spark.sql.catalog.demo.jdbc.password": "pw", "spark.master": "local",
                                        "spark.sql.catalog.demo.uri": "jdbc:postgresql://h/db?password=x"})
    assert shown == {"spark.sql.catalog.demo.jdbc.password": MASK, "spark.master": "local",
                     "spark.sql.catalog.demo.uri": "jdbc:postgresql://h/db?password=***"}
    assert held == {"spark.sql.catalog.demo.jdbc.password": "pw",
                    "spark.sql.catalog.demo.uri": "jdbc:postgresql://h/db?password=x"}


def _secret_settings(secret: str, tmp_path: Path, environ: dict | None = None):
    raw = {"catalog": {"name": "demo", "properties": {
        "type": "sql", "uri": f"postgresql+psycopg2://floe:{secret}@127.0.0.1:9/lake", "warehouse": "file:///w"}},
        "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": secret + "-spark"}},
        "coordination": {"url": f"postgresql://floe:{secret}-coord@127.0.0.1:9/c"}}
    return settings_from_mapping(raw, tmp_path, str(tmp_path / "floe.yaml"), environ=environ or {})


def test_loaded_settings_secrets_are_masked_in_every_later_text(tmp_path):
    secret = marker()
    _secret_settings(secret, tmp_path)
    # a library's message that quotes the password alone, outside any URI or pair
    assert secret not in redaction.mask_text(f"authentication failed with {secret}-spark for user floe")
    assert secret not in redaction.mask_text(f"could not use {secret}-coord")


def test_a_settings_error_never_quotes_a_secret(tmp_path):
    secret = marker()
    raw = {"coordination": {"url": [f"postgresql://floe:{secret}@127.0.0.1/c"]},
           "catalog": {"name": "demo", "properties": {"type": "sql", "token": {"nested": secret + "x"}}}}
    with pytest.raises(SettingsError) as raised:
        settings_from_mapping(raw, tmp_path, "floe.yaml", environ={})
    assert "coordination.url" in str(raised.value) and secret not in str(raised.value)
    assert all(secret not in line for line in raised.value.errors)
    # from the environment too (its text is quoted when it is not JSON)
    with pytest.raises(SettingsError) as raised:
        settings_from_mapping({}, tmp_path, "floe.yaml",
                              environ={"FLOE_CATALOG__PROPERTIES": f'{{"uri": "postgresql://u:{secret}@h/db",'})
    assert "FLOE_CATALOG__PROPERTIES" in str(raised.value) and secret not in str(raised.value)


def test_floes_errors_and_their_causes_are_masked():
    secret = marker()
    error = CatalogUnavailable(f"catalog 'demo' could not be loaded: bad uri postgresql://u:{secret}@h/db")
    assert secret not in str(error) and "postgresql://u:***@h/db" in str(error)
    cause = ValueError(f"Could not parse SQLAlchemy URL from string 'postgresql://u:{secret}@h'")
    stand_in = masked_cause(cause)
    assert isinstance(stand_in, SecretInCause) and secret not in str(stand_in) and "ValueError" in str(stand_in)
    harmless = OSError("connection refused")
    assert masked_cause(harmless) is harmless  # kept with its traceback when it shows no secret


def test_every_log_record_is_masked_tracebacks_too(tmp_path, caplog):
    secret = marker()
    _secret_settings(secret, tmp_path)  # loading settings installs the masking
    log = logging.getLogger("floe_dagster.some.module")
    with caplog.at_level(logging.DEBUG):
        log.warning("could not connect to %s", f"postgresql://floe:{secret}@127.0.0.1:9/lake")
        logging.getLogger("uvicorn.error").error("header.Authorization=Bearer %s", secret)
        try:
            raise RuntimeError(f"driver said: password {secret}-spark rejected")
        except RuntimeError:
            log.exception("step failed")
    text = caplog.text + "".join(logging.Formatter().format(r) for r in caplog.records)
    assert "could not connect to postgresql://floe:***@127.0.0.1:9/lake" in caplog.text
    assert "step failed" in text and "RuntimeError: driver said: password *** rejected" in text
    assert secret not in text


def test_the_clis_output_is_masked(tmp_path, capsys):
    secret = marker()
    _secret_settings(secret, tmp_path)
    with redaction.masked_output():
        print(f"uri postgresql://floe:{secret}@127.0.0.1:9/lake")
        print(f"conf {secret}-spark", file=sys.stderr)
    out, err = capsys.readouterr()
    assert "postgresql://floe:***@" in out and "conf ***" in err and secret not in out + err


def test_a_secret_in_json_inside_a_table_property_is_masked_in_the_clis_json(capsys):
    """``health --json`` prints the table's properties as they are: an owner's JSON value holding a password
    comes out as escaped JSON inside a JSON string, which the text rule masks as it is written."""
    secret = marker()
    facts = {"properties": {"comment": json.dumps({"user": "etl", "password": secret}), "format-version": "2"}}
    with redaction.masked_output():
        print(json.dumps(facts, indent=2, default=str))  # as cli/table_commands.py prints a --json report
    out, _ = capsys.readouterr()
    assert secret not in out and '\\"password\\": \\"***\\"' in out and '\\"user\\": \\"etl\\"' in out, out


def test_resources_hold_secrets_as_environment_variables(tmp_path, monkeypatch):
    """What Dagit shows of the resources (their config) holds variables' names, never a secret; the
    real values are in this process's environment, where Dagster's EnvVar reads them at run time."""
    from dagster import EnvVar

    from floe_dagster.coordination.resource import CoordinationResource
    from floe_dagster.spark.engine import IcebergSparkEngine
    from floe_dagster.spark.session import secret_entries as _secret_entries

    secret = marker()
    settings = _secret_settings(secret, tmp_path)
    engine, coordination = IcebergSparkEngine.from_settings(settings), CoordinationResource.from_settings(settings)
    shown = json.dumps(engine.pyspark.spark_config) + json.dumps(engine.session_conf)
    assert secret not in shown and engine.pyspark.spark_config["spark.hadoop.fs.s3a.secret.key"] == MASK
    assert engine.pyspark.spark_config[f"spark.sql.catalog.demo.jdbc.password"] == MASK
    assert isinstance(engine.secret_conf, EnvVar) and isinstance(coordination.url, EnvVar)
    assert _secret_entries(engine.secret_conf) == {"spark.hadoop.fs.s3a.secret.key": secret + "-spark",
                                                   "spark.sql.catalog.demo.jdbc.password": secret}
    assert os.environ[coordination.url.env_var_name] == f"postgresql://floe:{secret}-coord@127.0.0.1:9/c"
    assert coordination._key()[0] == f"postgresql://floe:{secret}-coord@127.0.0.1:9/c"
    # the same settings, the same variable; the user's own variable when it holds the URL
    assert CoordinationResource.from_settings(settings).url.env_var_name == coordination.url.env_var_name
    monkeypatch.setenv("FLOE_COORDINATION_URL", f"postgresql://floe:{secret}-coord@127.0.0.1:9/c")
    assert CoordinationResource.from_settings(settings).url.env_var_name == "FLOE_COORDINATION_URL"
    # a setting without a secret stays a plain value
    plain = settings_from_mapping({}, tmp_path, "plain.yaml", environ={})
    assert IcebergSparkEngine.from_settings(plain).secret_conf is None
    assert CoordinationResource.from_settings(plain).url is None


def test_a_formatter_that_reads_the_arguments_keeps_them_masked(tmp_path, caplog):
    """uvicorn's access log formats its record's five arguments itself: a secret in a request's query
    string is masked in the argument, which stays a tuple."""
    from uvicorn.logging import AccessFormatter

    secret = marker()
    _secret_settings(secret, tmp_path)
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET",
                                                 f"/api/v1/tables?password={secret}", "1.1", 200)
    [record] = [r for r in caplog.records if r.name == "uvicorn.access"]
    line = AccessFormatter(use_colors=False).format(record)
    assert "GET /api/v1/tables?password=*** HTTP/1.1" in line and "200" in line and secret not in line
