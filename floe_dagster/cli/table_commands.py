"""``floe-dagster trigger``, ``plan``, ``explain``, ``health``, ``runs`` and ``restore``: the commands about one
table (``plan``: every table's next tick)."""

from __future__ import annotations

import getpass
import sys
import uuid

from floe_dagster.cli.command_inputs import EXIT_FAILED, EXIT_OK, open_coordination, read_settings, time_at
from floe_dagster.redaction import print_json


def cmd_trigger(args) -> int:
    from floe_dagster.launching.manual import trigger_table

    settings = read_settings(args)
    summary = trigger_table(
        settings, args.table, [*(args.operation or [])], reason=args.reason or "manual trigger from the CLI",
        actor=getpass.getuser(), trigger_id=str(uuid.uuid4()), verbose=args.verbose,
    )
    for line in summary.lines():
        print(line)
    return EXIT_OK if summary.succeeded else EXIT_FAILED


def cmd_plan(args) -> int:
    """A dry run of the next tick: plans with the same inputs as the sensor, admits nothing."""
    from floe_dagster.core.runs.run_decision import shadow_summary
    from floe_dagster.instance import get_instance
    from floe_dagster.reports.plan_report import plan_json, planned

    settings = read_settings(args)
    result, verdicts, missing = planned(settings, get_instance(), open_coordination(settings), time_at(args.at))
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

    settings = read_settings(args)
    report = explain_table(settings, open_coordination(settings), args.table, time_at(args.at))
    # print_json: masked as a structure, so propertyDrift's "key" fields stay the properties' names
    print_json(report) if args.json else print(format_explain_text(report))
    return EXIT_OK


def cmd_health(args) -> int:
    """One table's health: metrics, derived numbers, issues, status and debt score (text or JSON)."""
    from floe_dagster.errors import HealthError
    from floe_dagster.reports.health_report import format_health_text, health_report

    settings = read_settings(args)
    try:
        report = health_report(settings, open_coordination(settings), args.table, time_at(args.at), tier=args.tier)
    except HealthError as exc:
        print(f"floe-dagster: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print_json(report) if args.json else print(format_health_text(report))
    return EXIT_OK


def cmd_runs(args) -> int:
    """Every run that maintained one table (one-table runs and batches alike), newest first, from
    the coordination database's outcomes: each table's own result of each run."""
    from floe_dagster.iceberg.catalog import existing_table

    settings = read_settings(args)
    table = existing_table(settings.catalog, args.table)
    rows = open_coordination(settings).outcomes_for(table.qualified)[::-1][:args.limit]
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

    settings = read_settings(args)
    coordination = open_coordination(settings)  # opened once: the remembered roots, then the table lock
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


def add_table_commands(sub) -> None:
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
