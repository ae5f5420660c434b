"""Project Nessie for real: its server (the runner jar from Maven Central, in-memory version store) on
127.0.0.1 with its warehouse on s3proxy, reached through its Iceberg REST endpoint (``/iceberg/``) as a
plain ``type: rest`` catalog, the way docs/catalogs.md documents it. PyIceberg writes a table through
Nessie; floe-dagster lists it, collects its health, plans and explains it, and compacts it with real
Spark (Iceberg's REST catalog and S3FileIO, whose S3 requests Nessie signs up to Iceberg 1.11; from 1.12
on, S3FileIO writes with floe.yaml's keys: see ``signed_by_nessie``).

What Nessie does differently, and what these tests pin: its table metadata holds only the current
snapshot (Nessie's commits are the history), and it sets ``gc.enabled=false`` on every table, so
snapshot expiry and orphan cleanup never run on it, and plan/explain/trigger say why.

The server is one per session (``nessie`` fixture, about 20 s to start); each test has its own namespace.
The compaction is a process of its own (``floe-dagster trigger``), as every Dagster run is: its Spark
session loads Iceberg's AWS bundle, which the other tests' sessions do not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dagster import DagsterInstance

from floe_dagster.cli import main as floe_dagster_cli
from floe_dagster.core.basics.tables import TableName
from floe_dagster.defs.names import asset_key_for
from floe_dagster.demo import EVENT_SCHEMA, rows
from floe_dagster.iceberg.catalog import list_tables, load_table, open_catalog, table_counts
from floe_dagster.iceberg.health_collector import HealthCollector
from floe_dagster.settings import load_settings
from floe_dagster.spark.catalog_conf import spark_catalog_conf
from floe_dagster.spark.runtime import effective_iceberg_version
from floe_dagster_tests.conftest import JARS_CACHE
from floe_dagster_tests.reliability._support import checksum
from floe_dagster_tests.servers import nessie  # noqa: F401 (a fixture)

BIN = Path(sys.executable).parent
APPENDS = 6  # one small data file each: more than rewrite_data_files' default min-input-files (5)
# Iceberg 1.12's S3 signer no longer reads the signer properties Nessie answers with (``s3.signer.uri``,
# ``s3.signer.endpoint``: Nessie's own ``/s3sign/`` endpoint) and posts to the REST spec's per-table
# ``.../tables/<t>/sign`` instead, which Nessie does not serve (404, so the compaction's first write fails).
# The test's server is Nessie 0.99.0 (NESSIE_SERVER_PACKAGE: the newest runner jar Maven Central serves
# here), and Nessie's source up to after 0.108.4 still answers only with the old properties.
FIRST_ICEBERG_NESSIE_CANNOT_SIGN_FOR = (1, 12, 0)
GC_REASON = ("its catalog (e.g. Nessie) manages garbage collection, and gc.enabled=false forbids table "
             "maintenance to delete files")


def nessie_floe_yaml(root: Path, server, namespace: str, branch: str | None = None,
                     remote_signing: bool = True) -> Path:
    """floe.yaml for Nessie as docs/catalogs.md shows it: its Iceberg REST endpoint and the S3 keys the
    clients (PyIceberg, Spark's S3FileIO) read and write data files with; the warehouse is Nessie's
    default, the branch its default (main) or ``branch``, as the REST ``prefix``. Without
    ``remote_signing`` the clients ask Nessie for vended credentials only (the header docs/catalogs.md
    gives for Iceberg 1.12): Nessie, with no STS to vend from, then hands out neither credentials nor
    signing, and S3FileIO uses the keys. Policies for this test's namespace only (the server is shared)."""
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "nessie.yaml").write_text(textwrap.dedent(f"""
        - name: on-nessie
          tablePattern: "nessie.{namespace}.*"
          rewriteDataFiles: {{}}
          rewriteDataFilesSchedule: {{interval: PT1H}}
          expireSnapshots: {{retainLast: 1, maxSnapshotAge: PT0S}}
          expireSnapshotsSchedule: {{interval: PT1H}}
          orphanCleanup: {{retentionPeriodInDays: 3}}
          orphanCleanupSchedule: {{interval: P1D}}
    """))
    config = root / "floe.yaml"
    config.write_text(textwrap.dedent(f"""
        data-dir: {root / 'data'}
        catalog:
          name: nessie
          properties:
            type: rest
            uri: {server.uri}
            {f"prefix: {branch}" if branch else ""}
            {"" if remote_signing else "header.X-Iceberg-Access-Delegation: vended-credentials"}
            s3.endpoint: {server.s3.endpoint}
            s3.access-key-id: {server.s3.access_key_id}
            s3.secret-access-key: {server.s3.secret_access_key}
            s3.region: {server.s3.region}
        spark: {{jars-cache: {JARS_CACHE}}}
        policies: [{root / 'policies'}]
    """))
    return config


@pytest.fixture
def nessie_lake(request, tmp_path, nessie, dagster_home):  # noqa: F811
    """A table in a namespace named after the test, written by PyIceberg through Nessie: six appends."""
    namespace = request.node.name.replace("test_", "", 1)[:40]
    config = nessie_floe_yaml(tmp_path, nessie, namespace)
    settings = load_settings(config, environ={})
    catalog = open_catalog(settings.catalog)
    catalog.create_namespace(namespace)
    name = TableName("nessie", (namespace,), "orders")
    table = catalog.create_table(name.identifier, schema=EVENT_SCHEMA)
    for i in range(APPENDS):
        table.append(rows(i * 10, 10))
    return settings, config, name


def signing_works(iceberg_version: str) -> bool:
    """Whether Spark's S3FileIO on this Iceberg release can have its requests signed by Nessie 0.99."""
    return tuple(int(part) for part in iceberg_version.split(".")) < FIRST_ICEBERG_NESSIE_CANNOT_SIGN_FOR


def run_cli(config: Path, *args: str, capsys, exit_code: int = 0) -> str:
    capsys.readouterr()
    assert floe_dagster_cli(["--config", str(config), *args]) == exit_code
    return capsys.readouterr().out


def test_nessie_tables_health_plan_and_explain(nessie_lake, nessie, capsys, monkeypatch):  # noqa: F811
    settings, config, name = nessie_lake
    monkeypatch.setenv("FLOE_CONFIG", str(config))
    catalog = open_catalog(settings.catalog)
    table = load_table(catalog, name)
    # Nessie's ways: the table lives in its warehouse on the S3 server, gc.enabled=false is set by the
    # catalog (nobody asked for it), and the metadata keeps only the current snapshot of six appends.
    assert table.location().startswith(f"{nessie.warehouse}/{name.namespace[0]}/orders")
    assert table.properties["gc.enabled"] == "false"
    assert "nessie.commit.id" in table.properties
    assert len(table.metadata.snapshots) == 1
    assert table_counts(table)["data_files"] == APPENDS and table_counts(table)["records"] == APPENDS * 10
    assert name in list_tables(catalog)

    # Spark's side of the same catalog: Iceberg's REST catalog on Nessie's endpoint, S3FileIO with the keys.
    conf, packages = spark_catalog_conf(settings.catalog)
    prefix = "spark.sql.catalog.nessie"
    assert {key: conf[key] for key in (f"{prefix}.type", f"{prefix}.uri", f"{prefix}.io-impl", f"{prefix}.s3.endpoint",
                                       f"{prefix}.s3.path-style-access")} == {
        f"{prefix}.type": "rest", f"{prefix}.uri": nessie.uri, f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{prefix}.s3.endpoint": nessie.s3.endpoint, f"{prefix}.s3.path-style-access": "true"}
    assert packages == []

    # Health, from the metadata and manifests Nessie wrote to the bucket.
    health = HealthCollector(catalog, settings).collect([name], tier="full")
    assert health.errors == {}
    metrics = health.metrics[name]
    assert (metrics.data_file_count, metrics.record_count, metrics.snapshot_count) == (APPENDS, APPENDS * 10, 1)
    assert metrics.properties["gc.enabled"] == "false"

    # plan and explain: compaction is due; expiry and orphan cleanup are skipped, saying why.
    run_cli(config, "tables", "--refresh", capsys=capsys)
    decisions = {d["operation"]: d for d in json.loads(run_cli(config, "plan", "--json", capsys=capsys))["decisions"]
                 if d["table"] == name.qualified}
    assert decisions["REWRITE_DATA_FILES"]["decision"] == "run"
    for op in ("EXPIRE_SNAPSHOTS", "ORPHAN_CLEANUP"):
        assert decisions[op]["decision"] == "skip"
        assert decisions[op]["reasons"][0].startswith("gc_disabled: the table sets gc.enabled=false: ")
        assert GC_REASON in decisions[op]["reasons"][0] and f"so {op} never runs on it" in decisions[op]["reasons"][0]
    explained = json.loads(run_cli(config, "explain", name.qualified, "--json", capsys=capsys))["operationStatuses"]
    assert explained["REWRITE_DATA_FILES"]["shouldTrigger"] is True
    for op in ("EXPIRE_SNAPSHOTS", "ORPHAN_CLEANUP"):
        assert explained[op]["shouldTrigger"] is False
        assert GC_REASON in " ".join(explained[op]["reasons"])
    text = run_cli(config, "explain", name.qualified, capsys=capsys)
    assert f"EXPIRE_SNAPSHOTS: wait - gc_disabled: the table sets gc.enabled=false: {GC_REASON}" in text

    # A manual trigger of expiry starts no run and says the same (exit 1: nothing succeeded); the
    # table is untouched.
    out = run_cli(config, "trigger", name.qualified, "--operation", "EXPIRE_SNAPSHOTS", capsys=capsys, exit_code=1)
    assert f"EXPIRE_SNAPSHOTS: SKIPPED - the table sets gc.enabled=false: {GC_REASON}" in out, out
    assert load_table(open_catalog(settings.catalog), name).metadata_location == table.metadata_location


@pytest.mark.spark
def test_compaction_on_a_nessie_branch_through_spark(nessie_lake, nessie, tmp_path):  # noqa: F811
    """The compaction runs on a branch of its own (``prefix: <branch>``, for PyIceberg and Spark alike):
    the branch gets the new commit, main keeps its table as it was. Spark's S3 requests are signed by
    Nessie (its default) on the Iceberg releases whose signer reads Nessie's signer properties; on 1.12
    and later floe.yaml asks for no signing and S3FileIO writes with its keys."""
    main_settings, main_config, name = nessie_lake
    main_before = load_table(open_catalog(main_settings.catalog), name)
    branch = f"floe-{name.namespace[0]}".replace("_", "-")
    nessie.create_branch(branch)
    signed_by_nessie = signing_works(effective_iceberg_version(load_settings(main_config)))
    config = nessie_floe_yaml(tmp_path / "on-branch", nessie, name.namespace[0], branch=branch,
                              remote_signing=signed_by_nessie)
    settings = load_settings(config, environ={})
    before = load_table(open_catalog(settings.catalog), name)
    assert before.metadata_location == main_before.metadata_location  # the branch starts at main's commit
    before_files = {task.file.file_path for task in before.scan().plan_files()}
    before_rows = checksum(before.scan().to_arrow())
    assert len(before_files) == APPENDS
    signed_before = nessie.log.read_text(errors="replace").count("/s3sign/")

    result = subprocess.run(
        [str(BIN / "floe-dagster"), "trigger", name.qualified, "--operation", "REWRITE_DATA_FILES"],
        env={**os.environ, "FLOE_CONFIG": str(config)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "REWRITE_DATA_FILES: SUCCEEDED" in result.stdout, (
        result.stdout[-3000:] + result.stderr[-3000:])

    # What Nessie now serves: one new data file in place of the six, a replace commit, the same rows;
    # still one snapshot in the metadata (Nessie's), and a new Nessie commit.
    after = load_table(open_catalog(settings.catalog), name)
    after_files = {task.file.file_path for task in after.scan().plan_files()}
    assert len(after_files) == 1 and not after_files & before_files
    assert next(iter(after_files)).startswith(f"{nessie.warehouse}/")
    assert after.current_snapshot().summary.operation.value == "replace"
    assert after.current_snapshot().summary["deleted-data-files"] == str(APPENDS)
    assert len(after.metadata.snapshots) == 1
    assert after.properties["nessie.commit.id"] != before.properties["nessie.commit.id"]
    assert checksum(after.scan().to_arrow()) == before_rows
    # Spark wrote through S3FileIO, its requests signed by Nessie (its default client auth mode) where the
    # runtime can have them signed; otherwise with the keys, and Nessie signed nothing.
    signed_after = nessie.log.read_text(errors="replace").count("/s3sign/")
    assert signed_after > signed_before if signed_by_nessie else signed_after == signed_before
    # Main is untouched: the same metadata, the six files.
    main_after = load_table(open_catalog(main_settings.catalog), name)
    assert main_after.metadata_location == main_before.metadata_location
    assert {task.file.file_path for task in main_after.scan().plan_files()} == before_files

    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(asset_key_for(name))
    metadata = {key: getattr(value, "value", value) for key, value in event.asset_materialization.metadata.items()}
    assert event.dagster_event.partition == "REWRITE_DATA_FILES"
    assert metadata["rewritten_data_files_count"] == APPENDS
    assert (metadata["data_files_before"], metadata["data_files_after"]) == (APPENDS, 1)
    assert metadata["records_before"] == metadata["records_after"] == APPENDS * 10
    # The row check: the parent snapshot is not in Nessie's metadata, so the commit's own summary decides.
    assert metadata["row_check"] == "commit-summary" and metadata["rows_checked"] == APPENDS * 10
