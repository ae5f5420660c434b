"""``floe-dagster report``: the value report from the coordination database, as a table, JSON or an HTML page
(core/value/value_report.py sums; coordination/value_rows.py reads; reports/value_report_html.py draws)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from floe_dagster.core.value.value_report import (
    DEFAULT_GROUPING,
    DEFAULT_SINCE,
    GROUPINGS,
    check_grouping,
    format_value_report_text,
    parse_since,
    value_report,
)


def report_json(open_coordination: Callable, since_text: str, by: str, now: datetime) -> dict:
    """The report over [now - since, now]; ValueError naming ``--since`` or ``--by`` for a bad value, before
    anything is opened."""
    from floe_dagster.coordination.value_rows import outcome_rows

    since = parse_since(since_text, now)
    check_grouping(by)
    return value_report(outcome_rows(open_coordination(), since, now), by, since, now).to_json()


def cmd_report(args, coordination_of: Callable, settings_of: Callable,
               clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> int:
    report = report_json(lambda: coordination_of(settings_of(args)), args.since, args.by, clock())
    if args.html:
        from floe_dagster.reports.value_report_html import value_report_html

        Path(args.html).write_text(value_report_html(report), encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.html:
        print(f"wrote {args.html}")
    else:
        print(format_value_report_text(report))
    return 0


def add_report_command(sub, func: Callable) -> None:
    report = sub.add_parser("report", help="what maintenance cost and bought over a window: runs, compute hours, "
                                           "files removed, failures, benefit per compute hour")
    report.add_argument("--since", default=DEFAULT_SINCE,
                        help=f"the window, an ISO-8601 duration back from now (default {DEFAULT_SINCE})")
    report.add_argument("--by", default=DEFAULT_GROUPING,
                        help=f"group by {', '.join(GROUPINGS)} (default {DEFAULT_GROUPING})")
    report.add_argument("--html", metavar="FILE", help="also write a self-contained page with charts per day")
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.set_defaults(func=func)
