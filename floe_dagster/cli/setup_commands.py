"""``floe-dagster setup``, ``validate``, ``tables`` and ``demo``: the commands that set a lakehouse up and check it
before any table is maintained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from floe_dagster.cli.command_inputs import EXIT_OK, EXIT_USAGE, read_settings


def cmd_validate(args) -> int:
    from floe_dagster.core.policies.policy import validate_policy_paths

    settings = read_settings(args)  # the safety envelope's allowed table properties, the catalog
    result = validate_policy_paths(args.paths, settings.envelope.allowed_table_properties)
    errors, warnings = list(result.errors), list(result.warnings)
    if result.policies is not None:
        errors, warnings = _locations_against_catalog(settings, result, warnings)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in errors:
        print(line)
    if errors:
        print(f"{len(errors)} error(s)", file=sys.stderr)
        return EXIT_USAGE
    for file in result.files:  # which of Floe's two formats each file is in
        print(f"ok: {file.path} ({file.describe()})")
    if not result.files:
        print(f"ok: {', '.join(str(p) for p in args.paths)} (no policy files)")
    return EXIT_OK


def _locations_against_catalog(settings, result, warnings: list[str]) -> tuple[list[str], list[str]]:
    """The policies' absolute locations against their table's location in the settings' catalog
    (core/policies/envelope.py): an error for each outside it; a warning when it cannot be checked now (no floe.yaml,
    the catalog down, no such table), since every run checks it again before any engine call."""
    from floe_dagster.core.policies.envelope import absolute_location_fields, catalog_refusals, single_table
    from floe_dagster.core.policies.policy_formats import LOADER_FORMAT, kebab
    from floe_dagster.errors import CatalogUnavailable, UnknownTable
    from floe_dagster.iceberg.catalog import load_table, open_catalog

    loader_files = {file.path for file in result.files if file.format == LOADER_FORMAT}
    errors, warnings, catalog = [], list(warnings), None
    for policy in result.policies:
        if not absolute_location_fields(policy.configs):
            continue
        table = single_table(policy.table_pattern, settings.catalog.name)
        label = f"{policy.source}: policy '{policy.name}'"
        try:
            if settings.source == "<defaults>":
                raise CatalogUnavailable("no floe.yaml names the catalog")
            catalog = catalog or open_catalog(settings.catalog)
            location = load_table(catalog, table).location() if table is not None else None
        except (CatalogUnavailable, UnknownTable) as exc:
            warnings.append(f"{label}: its absolute location is not checked against the table's location now ({exc}); "
                            "every run checks it before any engine call")
            continue
        refusals = catalog_refusals(policy.table_pattern, policy.configs, settings.catalog.name, lambda _: location)
        for refusal in refusals:
            field = ".".join(map(kebab, refusal.field.split("."))) if policy.source in loader_files else refusal.field
            errors.append(f"{label}: {field}: {refusal.why}")
    return errors, warnings


def cmd_tables(args) -> int:
    from floe_dagster.iceberg.table_cache import read_cached_tables, refresh_table_cache

    settings = read_settings(args)
    tables = refresh_table_cache(settings) if args.refresh else (read_cached_tables(settings) or [])
    if not tables and not args.refresh:
        tables = refresh_table_cache(settings)
    for table in tables:
        print(table.qualified)
    return EXIT_OK


def cmd_demo(args) -> int:
    from floe_dagster.demo import build_demo_lakehouse, write_workspace
    from floe_dagster.iceberg.table_cache import refresh_table_cache
    from floe_dagster.instance import ensure_dagster_home

    settings = read_settings(args)
    home = ensure_dagster_home()
    print(f"Building the demo lakehouse in {settings.data_dir} (catalog '{settings.catalog.name}') ...", flush=True)
    for line in build_demo_lakehouse(settings):
        print(f"  {settings.catalog.name}.{line}")
    tables = refresh_table_cache(settings)
    print(f"{len(tables)} tables are assets; policies from {', '.join(settings.policies)}")
    print(f"Dagster instance: {home}")
    if args.no_dagit:
        return EXIT_OK
    from floe_dagster.demo_writers import start_demo_writers

    print("\n".join(start_demo_writers(settings)))
    workspace = write_workspace(home)
    print(f"Dagit: http://{args.host}:{args.port}  (Ctrl-C to stop)", flush=True)
    command = ["dagster", "dev", "-w", str(workspace), "-h", args.host, "-p", str(args.port)]
    return subprocess.call([str(Path(sys.executable).parent / command[0]), *command[1:]])


def cmd_setup(args) -> int:
    from floe_dagster.spark.jars import resolve_jars
    from floe_dagster.spark.runtime import spark_packages

    settings = read_settings(args)
    for path in resolve_jars(spark_packages(settings), settings.spark.jars_cache):
        print(f"jar: {path}")
    if args.test_servers:  # what the tests start: REST catalogs (Iceberg's, Nessie), Spark Connect, an S3 server
        from floe_dagster.spark.jars import NESSIE_SERVER_PACKAGE, S3PROXY_PACKAGE, rest_fixture_classpath
        from floe_dagster.spark.runtime import (
            effective_iceberg_version, iceberg_aws_bundle, spark_connect_server_packages,
        )

        # The object storage tests' Spark also loads Iceberg's AWS bundle (S3FileIO's AWS SDK).
        test_packages = [*spark_connect_server_packages(), S3PROXY_PACKAGE, NESSIE_SERVER_PACKAGE,
                         iceberg_aws_bundle(effective_iceberg_version(settings))]
        for path in resolve_jars(test_packages, settings.spark.jars_cache):
            print(f"jar: {path}")
        classpath = rest_fixture_classpath(settings.spark.jars_cache)
        print(f"iceberg REST catalog fixture: {len(classpath)} jars in {classpath[0].parent}")
    return EXIT_OK


def add_setup_commands(sub) -> None:
    """setup, validate, tables, demo."""
    setup = sub.add_parser("setup", help="fetch the Iceberg Spark runtime and JDBC jars into the cache")
    setup.add_argument("--test-servers", action="store_true",
                       help="also fetch the servers the tests start: Iceberg's REST catalog fixture, Spark Connect, "
                            "s3proxy (S3), the Nessie server and Iceberg's AWS bundle")
    setup.set_defaults(func=cmd_setup)

    validate = sub.add_parser("validate", help="check policy files; exit 2 listing every error")
    validate.add_argument("paths", nargs="+", type=Path)
    validate.set_defaults(func=cmd_validate)

    tables = sub.add_parser("tables", help="list the catalog's tables (the code location's cached list)")
    tables.add_argument("--refresh", action="store_true", help="list the catalog again and update the cache")
    tables.set_defaults(func=cmd_tables)

    demo = sub.add_parser("demo", help="create the embedded demo lakehouse and start Dagit with the automation on")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=3000)
    demo.add_argument("--no-dagit", action="store_true", help="only build the lakehouse")
    demo.set_defaults(func=cmd_demo)
