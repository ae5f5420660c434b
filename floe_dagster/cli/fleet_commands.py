"""``floe-dagster backfill``, ``serve``, ``mcp``, ``import-floe``, ``import`` and ``report``: the commands over many
tables, and the servers."""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

from floe_dagster.cli.command_inputs import EXIT_FAILED, EXIT_OK, open_coordination, read_settings


def cmd_backfill(args) -> int:
    from floe_dagster.launching.backfill import launch_dagster_backfill, queue_backfill

    settings = read_settings(args)
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
    return serve(read_settings(args), args.host, args.port)


def cmd_mcp(args) -> int:
    """The MCP server for agents (``floe_dagster.mcp_server``, docs/mcp.md): stdio, or streamable HTTP."""
    from floe_dagster.mcp_server.server import run_http, run_stdio

    settings = read_settings(args)
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


def add_fleet_commands(sub) -> None:
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
    add_import_command(sub, lambda args: cmd_import(args, read_settings))
    add_report_command(sub, lambda args: cmd_report(args, open_coordination, read_settings))
