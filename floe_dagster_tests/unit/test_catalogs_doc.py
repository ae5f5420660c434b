"""docs/catalogs.md's floe.yaml examples (Nessie, Polaris, Lakekeeper, Gravitino, DataHub) load as
settings, and every REST property its table documents reaches Spark's catalog under the same name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from floe_dagster.core.storage.object_storage import S3_FILE_IO
from floe_dagster.settings import load_settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.runtime import spark_packages

DOC = Path(__file__).resolve().parents[2] / "docs" / "catalogs.md"
TEXT = DOC.read_text()
EXAMPLES = dict(re.findall(r"^## (?:Project |Apache )?(\w+)\n.*?```yaml\n(.*?)```", TEXT, re.DOTALL | re.MULTILINE))
# The properties column of the doc's table: `uri`, `warehouse`, ... (prefixes such as `header.<Name>` kept whole).
DOCUMENTED = re.findall(r"^\| `([\w.<>*-]+)` \|", TEXT.split("### What is tested")[0], re.MULTILINE)


def test_the_doc_has_an_example_for_each_catalog():
    assert sorted(EXAMPLES) == ["DataHub", "Gravitino", "Lakekeeper", "Nessie", "Polaris"]
    assert DOCUMENTED == ["uri", "warehouse", "credential", "token", "oauth2-server-uri", "scope", "prefix",
                         "header.<Name>", "rest.*", "s3.*"]


@pytest.mark.parametrize("name", ["DataHub", "Gravitino", "Lakekeeper", "Nessie", "Polaris"])
def test_each_example_maps_every_property_to_spark(name, tmp_path):
    config = tmp_path / "floe.yaml"
    config.write_text(EXAMPLES[name])
    settings = load_settings(config, environ={})
    properties = settings.catalog.properties
    assert properties["type"] == "rest" and properties["uri"].startswith(("http://", "https://"))
    conf, _ = spark_catalog_conf(settings.catalog)
    prefix = f"spark.sql.catalog.{settings.catalog.name}"
    assert conf[f"{prefix}.type"] == "rest"
    for key, value in properties.items():
        if key != "type":  # every REST, header and s3 property, under its own name
            assert conf[f"{prefix}.{key}"] == value, key
    # Tables on S3, with keys or vended ones: S3FileIO and its AWS SDK (iceberg-aws-bundle) for Spark.
    assert conf[f"{prefix}.io-impl"] == S3_FILE_IO
    assert any(":iceberg-aws-bundle:" in package for package in spark_packages(settings))


def test_the_documented_mapping_holds_for_every_key():
    from floe_dagster.settings import CatalogSettings

    properties = {"type": "rest", "uri": "https://c/api/catalog", "warehouse": "w", "credential": "id:secret",
                  "token": "t", "oauth2-server-uri": "https://idp/token", "scope": "PRINCIPAL_ROLE:ALL",
                  "prefix": "main", "header.X-Iceberg-Access-Delegation": "vended-credentials",
                  "rest.auth.type": "oauth2"}
    conf, packages = spark_catalog_conf(CatalogSettings("c", properties))
    assert {key: conf[f"spark.sql.catalog.c.{key}"] for key in properties} == properties
    assert packages == []
