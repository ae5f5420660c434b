"""``floe-dagster``: the command line. Every command reads the same settings and Dagster instance."""

from __future__ import annotations

import argparse
import getpass
import os
import subprocess
import sys
import traceback
import uuid
from pathlib import Path

from floe_dagster.redaction import print_json

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _settings(args):
    from floe_dagster.settings import load_settings

    if args.config:
        # The code location (Dagit, run workers, launched runs) reads the same file.
        os.environ["FLOE_CONFIG"] = str(Path(args.config).resolve())
    return load_settings(args.config)


def cmd_validate(args) -> int:
    from floe_dagster.core.policies.policy import validate_policy_paths

    settings = _settings(args)  # the safety envelope's allowed table properties, the catalog
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

    settings = _settings(args)
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

    settings = _settings(args)
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


def cmd_trigger(args) -> int:
    from floe_dagster.launching.manual import trigger_table

    settings = _settings(args)
    summary = trigger_table(
        settings, args.table, [*(args.operation or [])], reason=args.reason or "manual trigger from the CLI",
        actor=getpass.getuser(), trigger_id=str(uuid.uuid4()), verbose=args.verbose,
    )
    for line in summary.lines():
        print(line)
    return EXIT_OK if summary.succeeded else EXIT_FAILED


def cmd_setup(args) -> int:
    from floe_dagster.spark.jars import resolve_jars
    from floe_dagster.spark.runtime import spark_packages

    settings = _settings(args)
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


def _coordination(settings):
    """The coordination database, as the code location's resource opens it."""
    from floe_dagster.coordination.resource import CoordinationResource

    return CoordinationResource.from_settings(settings).coordination


def _at(text: str | None):
    from datetime import datetime, timezone

    from floe_dagster.core.basics.localtime import naive_as_utc

    if not text:
        return datetime.now(timezone.utc)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return naive_as_utc(moment)


def cmd_plan(args) -> int:
    """A dry run of the next tick: plans with the same inputs as the sensor, admits nothing."""
    from floe_dagster.core.runs.run_decision import shadow_summary
    from floe_dagster.instance import get_instance
    from floe_dagster.reports.plan_report import plan_json, planned

    settings = _settings(args)
    result, verdicts, missing = planned(settings, get_instance(), _coordination(settings), _at(args.at))
    if args.json:
        print_json(plan_json(result, verdicts))
        return EXIT_OK
    shadowed = len(result.shadowed)
    print(f"plan at {result.at.isoformat()}: {len(result.admitted)} to run, "
          + (f"{shadowed} shadow (recorded by the tick, never run), " if shadowed else "")
          + f"{len(result.decisions) - len(result.admitted) - shadowed} skipped"
          + (f", {missing} tables without health yet" if missing else ""))
    for decision, verdict in zip(result.decisions, verdicts):
        why = "; ".join(decision.reasons)
        if decision.decision == "run" and decision.shadow:
            mark, why = f"#{decision.rank:<3} shadow", shadow_summary(why, result.at)
        else:
            mark = f"#{decision.rank:<3} run " if decision.decision == "run" else "     skip"
        print(f"{mark} {decision.table.qualified} {decision.operation.value} "
              f"[{decision.trigger or '-'}] debt {decision.debt_score:.0f}: {why}"
              + (f" | envelope: {verdict.describe()}" if verdict is not None else "")
              + (f" | owner: {owner.describe(decision.operation)}" if (owner := decision.owner_overrides) else ""))
    for note in result.notes:
        print(f"note: {note}")
    return EXIT_OK


def cmd_explain(args) -> int:
    from floe_dagster.reports.explain import explain_table
    from floe_dagster.reports.explain_text import format_explain_text

    settings = _settings(args)
    report = explain_table(settings, _coordination(settings), args.table, _at(args.at))
    # print_json: masked as a structure, so propertyDrift's "key" fields stay the properties' names
    print_json(report) if args.json else print(format_explain_text(report))
    return EXIT_OK


def cmd_health(args) -> int:
    """One table's health: metrics, derived numbers, issues, status and debt score (text or JSON)."""
    from floe_dagster.errors import HealthError
    from floe_dagster.reports.health_report import format_health_text, health_report

    settings = _settings(args)
    try:
        report = health_report(settings, _coordination(settings), args.table, _at(args.at), tier=args.tier)
    except HealthError as exc:
        print(f"floe-dagster: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print_json(report) if args.json else print(format_health_text(report))
    return EXIT_OK


def cmd_runs(args) -> int:
    """Every run that maintained one table (one-table runs and batches alike), newest first, from
    the coordination database's outcomes: each table's own result of each run."""
    from floe_dagster.iceberg.catalog import existing_table

    settings = _settings(args)
    table = existing_table(settings.catalog, args.table)
    rows = _coordination(settings).outcomes_for(table.qualified)[::-1][:args.limit]
    if args.json:
        print_json(rows)
        return EXIT_OK
    for row in rows:
        failed = f"failed ({row['failure_kind']})" if row["failure_kind"] else "failed"
        status = "succeeded" if row["succeeded"] else failed
        print(f"{row['finished_at']:%Y-%m-%d %H:%M:%S}  {row['run_id']}  {row['operation']:<30} "
              f"{row['trigger'] or '-':<9} {status}" + (f": {row['message']}" if row["message"] else ""))
    if not rows:
        print(f"no run has maintained {table.qualified} yet")
    return EXIT_OK


def cmd_restore(args) -> int:
    """A table's quarantined orphans: without --run, list its runs; with one, move that run's files
    back to their original paths under the table lock, never over an existing file. Without a table:
    the quarantines no policy will ever purge."""
    from floe_dagster.coordination.locks import table_lock_name
    from floe_dagster.coordination.quarantine_roots import QuarantineRoots
    from floe_dagster.errors import LockHeld, MaintenanceFailed
    from floe_dagster.iceberg.known_locations import restore_refusals
    from floe_dagster.iceberg.quarantine_store import open_table_quarantine
    from floe_dagster.reports.quarantine_orphans import never_purged, print_never_purged, print_quarantined_runs

    settings = _settings(args)
    coordination = _coordination(settings)  # opened once: the remembered roots, then the table lock
    roots = QuarantineRoots(coordination.engine)
    if not args.table:
        print_never_purged(never_purged(settings, roots))
        return EXIT_OK
    quarantine, grace = open_table_quarantine(settings, args.table, roots)
    name = quarantine.table.qualified
    if not args.run:
        print_quarantined_runs(quarantine, grace)
        return EXIT_OK
    refused = restore_refusals(settings, quarantine.table, quarantine.location.uri)
    if refused:  # the table's own location reaches other tables: nothing is moved (core/storage/table_location.py)
        print(f"floe-dagster: {name}: restore refused by the safety envelope: table location: {'; '.join(refused)}",
              file=sys.stderr)
        return EXIT_FAILED
    try:
        with coordination.locks.hold(table_lock_name(quarantine.table)):
            run = quarantine.find(args.run)
            report = quarantine.restore(run)
    except LockHeld:
        print(f"floe-dagster: {name} is being maintained by another run (its table lock is held); "
              "restore it when that run ends", file=sys.stderr)
        return EXIT_FAILED
    except MaintenanceFailed as exc:
        print(f"floe-dagster: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"restored {report.restored} file(s), {report.bytes} bytes, of run {run.run.run_id} "
          f"(quarantined {run.run.at.isoformat()}) to {quarantine.location.uri}")
    for why in report.kept:
        print(f"not restored: {why}")
    if report.kept:
        print(f"{report.left_in_quarantine} file(s) stay in {run.folder.uri}")
    return EXIT_FAILED if report.kept else EXIT_OK


def cmd_backfill(args) -> int:
    from floe_dagster.launching.backfill import launch_dagster_backfill, queue_backfill

    settings = _settings(args)
    how = {"dry_run": args.dry_run, "actor": getpass.getuser(), "reason": args.reason or "backfill from the CLI"}
    if args.dagster_backfill:
        backfill = launch_dagster_backfill(settings, args.tables, args.operation, **how)
        for table in backfill.tables:
            print(f"{'would include' if args.dry_run else 'included'} {table.qualified}")
        what = f"one {backfill.operation.value} run over {len(backfill.tables)} table(s)"
        print(f"would launch a Dagster backfill: {what}" if args.dry_run else
              f"Dagster backfill {backfill.backfill_id} launched: the daemon starts {what}")
        return EXIT_OK
    queued = queue_backfill(settings, args.tables, args.operation, **how)
    verb = "would queue" if args.dry_run else "queued"
    for table, run_id in queued:
        print(f"{verb} {table.qualified} {args.operation.upper()}" + (f" run {run_id}" if run_id else ""))
    print(f"{len(queued)} run(s) {verb}")
    return EXIT_OK


def cmd_serve(args) -> int:
    """Floe's HTTP API on the same settings and Dagster instance (``floe_dagster.api``)."""
    from floe_dagster.api.server import serve

    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port: expected 1 to 65535, got {args.port}")
    return serve(_settings(args), args.host, args.port)


def cmd_mcp(args) -> int:
    """The MCP server for agents (``floe_dagster.mcp_server``, docs/mcp.md): stdio, or streamable HTTP."""
    from floe_dagster.mcp_server.server import run_http, run_stdio

    settings = _settings(args)
    return run_stdio(settings, os.environ) if args.transport == "stdio" else run_http(settings, os.environ, args.host,
                                                                                       args.port)


def cmd_import_floe(args) -> int:
    """Every policy of a running Floe server (or floe-dagster serve) as one policy file each."""
    from floe_dagster.migration import MigrationError, fetch_policies, import_policies

    try:
        responses = fetch_policies(args.url, args.key or os.environ.get("FLOE_API_KEY"))
        report = import_policies(responses, Path(args.to), overwrite=args.overwrite)
    except MigrationError as exc:
        print(f"floe-dagster import-floe: {exc}", file=sys.stderr)
        return EXIT_FAILED
    source = "floe-dagster's full definitions" if report.full else "Floe's policy summaries"
    report.print_lines(f"read {len(responses)} polic{'y' if len(responses) == 1 else 'ies'} from {args.url} "
                       f"({source})", args.to)
    return EXIT_FAILED if report.invalid else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe-dagster", description="Automatic Iceberg table maintenance on Dagster")
    parser.add_argument("--config", help="settings file (default: $FLOE_CONFIG or ./floe.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    # In the order `floe-dagster --help` lists them.
    _add_setup_commands(sub)
    _add_table_commands(sub)
    _add_fleet_commands(sub)
    # Before or after the command's name: a failure's Python traceback (and, for a run in this process, Dagster's
    # event log lines) are printed only with it; without it, the reason alone.
    verbose_help = "print Python tracebacks and Dagster's event log lines of runs in this process"
    parser.add_argument("--verbose", action="store_true", help=verbose_help)
    for command in sub.choices.values():
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help)
    return parser


def _add_setup_commands(sub) -> None:
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


def _add_table_commands(sub) -> None:
    """One table's: trigger, plan (every table's), explain, health, runs, restore."""
    trigger = sub.add_parser("trigger", help="run a table's maintenance now, in process, recorded in the instance")
    trigger.add_argument("table", help="catalog.namespace.table or namespace.table")
    trigger.add_argument("--operation", action="append",
                         help="an operation (repeatable); default: all the policy configures")
    trigger.add_argument("--reason", help="why (recorded as floe/reason)")
    trigger.set_defaults(func=cmd_trigger)
    plan = sub.add_parser("plan", help="dry run of the next tick: what would run and why, changing nothing")
    plan.add_argument("--at", help="ISO-8601 time to plan at (default: now)")
    plan.add_argument("--json", action="store_true")
    plan.set_defaults(func=cmd_plan)

    explain = sub.add_parser("explain", help="Floe's trigger status for one table")
    explain.add_argument("table")
    explain.add_argument("--at")
    explain.add_argument("--json", action="store_true")
    explain.set_defaults(func=cmd_explain)

    health = sub.add_parser("health", help="one table's health: metrics, issues, status and debt score")
    health.add_argument("table", help="catalog.namespace.table or namespace.table")
    health.add_argument("--json", action="store_true")
    health.add_argument("--tier", choices=("summary", "full"), default="full",
                        help="full (default) reads the manifests; summary only the metadata file")
    health.add_argument("--at", help="ISO-8601 time to assess at (default: now)")
    health.set_defaults(func=cmd_health)

    runs = sub.add_parser("runs", help="every run that maintained one table, newest first (batches included)")
    runs.add_argument("table", help="catalog.namespace.table or namespace.table")
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=cmd_runs)

    restore = sub.add_parser("restore", help="list a table's quarantined orphan cleanup runs, or put one run's "
                                             "files back (never over an existing file); without a table, list "
                                             "the quarantines no policy will ever purge")
    restore.add_argument("table", nargs="?", help="catalog.namespace.table or namespace.table")
    restore.add_argument("--run", help="the run to restore: its run id, a unique prefix of it, or latest "
                                       "(without it: list the runs)")
    restore.set_defaults(func=cmd_restore)


def _add_fleet_commands(sub) -> None:
    """Many tables', or the server's: backfill, serve, import-floe, import, report."""
    backfill = sub.add_parser("backfill", help="queue one run per matching table for the daemon (low priority)")
    backfill.add_argument("--tables", required=True,
                          help="a table pattern, as in policies ('demo.sales.*': a namespace)")
    backfill.add_argument("--operation", required=True)
    backfill.add_argument("--reason")
    backfill.add_argument("--dagster-backfill", action="store_true",
                          help="launch one Dagster backfill instead: the daemon makes one run over every matching "
                               "table (shown in Dagit's Backfills)")
    backfill.add_argument("--dry-run", action="store_true")
    backfill.set_defaults(func=cmd_backfill)

    serve = sub.add_parser("serve",
                           help="Floe's HTTP API (trigger, trigger status, health, operations) with API keys")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; beyond loopback only with API keys configured)")
    serve.add_argument("--port", type=int, default=9091, help="port (default 9091)")
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("import-floe", help="write every policy of a running Floe server as policy files")
    migrate.add_argument("--url", required=True, help="the server's address, e.g. http://floe.example.com:9091")
    migrate.add_argument("--key", help="an API key, sent as X-API-Key (default: $FLOE_API_KEY)")
    migrate.add_argument("--to", required=True, help="the folder to write the policy files to")
    migrate.add_argument("--overwrite", action="store_true", help="replace files that already exist")
    migrate.set_defaults(func=cmd_import_floe)

    from floe_dagster.foreign_import import add_import_command, cmd_import
    from floe_dagster.mcp_server.command import add_mcp_command
    from floe_dagster.reports.value_cli import add_report_command, cmd_report

    add_mcp_command(sub, cmd_mcp)
    add_import_command(sub, lambda args: cmd_import(args, _settings))
    add_report_command(sub, lambda args: cmd_report(args, _coordination, _settings))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from floe_dagster.errors import CatalogUnavailable, SettingsError, TableUnreadable
    from floe_dagster.redaction import masked_output

    with masked_output():  # every line a command prints, and every log line, with its secrets masked
        try:
            return args.func(args)
        except (SettingsError, CatalogUnavailable, TableUnreadable, LookupError, ValueError) as exc:
            print(f"floe-dagster: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # exit status 1, masked; the traceback as Python would print it with --verbose
            if args.verbose:
                traceback.print_exc()
            else:
                print(f"floe-dagster: {type(exc).__name__}: {exc} (--verbose shows the traceback)", file=sys.stderr)
            return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
