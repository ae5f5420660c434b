"""``floe-dagster``: the command line. Every command reads the same settings and Dagster instance.

Here the parser and :func:`main` (the ``floe-dagster`` script's entry point); the commands, a module per
group: cli/setup_commands.py, cli/table_commands.py, cli/fleet_commands.py, and what they share in
cli/command_inputs.py. Each command imports what it runs when it runs, so the command line starts fast."""

from __future__ import annotations

import argparse
import sys
import traceback

from floe_dagster.cli.command_inputs import EXIT_FAILED, EXIT_USAGE
from floe_dagster.cli.fleet_commands import add_fleet_commands
from floe_dagster.cli.setup_commands import add_setup_commands
from floe_dagster.cli.table_commands import add_table_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe-dagster", description="Automatic Iceberg table maintenance on Dagster")
    parser.add_argument("--config", help="settings file (default: $FLOE_CONFIG or ./floe.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    # In the order `floe-dagster --help` lists them.
    add_setup_commands(sub)
    add_table_commands(sub)
    add_fleet_commands(sub)
    # Before or after the command's name: a failure's Python traceback (and, for a run in this process, Dagster's
    # event log lines) are printed only with it; without it, the reason alone.
    verbose_help = "print Python tracebacks and Dagster's event log lines of runs in this process"
    parser.add_argument("--verbose", action="store_true", help=verbose_help)
    for command in sub.choices.values():
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help)
    return parser


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
