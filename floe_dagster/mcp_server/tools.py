"""The MCP server's tools (docs/mcp.md), each a thin call into the HTTP API's services (api/services.py) with the
same API keys and roles (api/auth.py): every read tool needs READ (any key), ``propose`` too (it changes no
table), ``approve`` needs TRIGGER (OPERATOR or ADMIN) and a named key.

Each answer is masked as the HTTP API's are (api/answer_masking.py), but for a proposal's ``approvalToken``.
A refusal is a tool error in the HTTP API's words, prefixed with its code; a bad argument's error names it.
"""

from __future__ import annotations

import functools
from datetime import datetime, timezone
from typing import Annotated, Any, Callable

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from floe_dagster.api.answer_masking import masked_answer
from floe_dagster.api.auth import HEADER, KeyStore, Permission, Principal
from floe_dagster.api.error_handlers import ANSWERS
from floe_dagster.api.services import ApiServices
from floe_dagster.core.basics.localtime import naive_as_utc
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.core.value.value_report import DEFAULT_GROUPING, DEFAULT_SINCE
from floe_dagster.errors import ApiError
from floe_dagster.mcp_server.proposals import Proposals
from floe_dagster.redaction import known_secrets
from floe_dagster.reports.plan_report import plan_json, planned
from floe_dagster.reports.value_cli import report_json

KEY_VARIABLE = "FLOE_API_KEY"  # the stdio server's key (one process, one caller)
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# Named like a secret, and one: shown once, to the proposer, by design (the masking rule would hide it).
UNMASKED = ("approvalToken",)

TableArgument = Annotated[str, Field(description="the table: namespace.table or catalog.namespace.table",
                                     min_length=1, max_length=1300)]


class Callers:
    """Who calls: each HTTP request's ``X-API-Key``, or the stdio server's key (``FLOE_API_KEY``), checked on
    every call against the HTTP API's keys."""

    def __init__(self, keys: KeyStore, process_key: str | None):
        self.keys = keys
        self.process_key = process_key

    def principal(self, ctx: Context, permission: Permission) -> Principal:
        headers = ctx.headers
        key = headers.get(HEADER.lower()) if headers is not None else self.process_key
        if self.keys.error():
            raise ToolError("AUTH_UNAVAILABLE: the server's API keys cannot be read; see its log")
        who = self.keys.authenticate(key)
        if who is None:
            where = f"the {HEADER} header" if headers is not None else f"the {KEY_VARIABLE} environment variable"
            raise ToolError(f"UNAUTHORIZED: {'the API key is not valid' if key else 'a valid API key is required'} "
                            f"({where})")
        if not who.can(permission):
            role = who.role.value if who.role else "anonymous"
            raise ToolError(f"FORBIDDEN: key '{who.name}' ({role}) lacks the {permission.value} permission")
        return who


def answering(tool: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A tool's refusals in the HTTP API's words (its code, then its message), and its answer masked."""

    @functools.wraps(tool)
    def answered(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            answer = tool(*args, **kwargs)
            shown = {key: answer.pop(key) for key in UNMASKED if key in answer}
            return {**masked_answer(answer, known_secrets()), **shown}
        except ApiError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from None
        except tuple(ANSWERS) as exc:
            answer = next(ANSWERS[kind] for kind in type(exc).__mro__ if kind in ANSWERS)(exc)
            raise ToolError(f"{answer.code}: {answer.message}") from None

    return answered


def table_parts(services: ApiServices, text: str) -> tuple[str, str]:
    """(namespace, table) of a ``table`` argument, refused with a message naming the argument."""
    try:
        name = TableName.parse(text, services.settings.catalog.name)
    except ValueError as exc:
        raise ToolError(f"argument 'table': {exc}") from None
    if name.catalog != services.settings.catalog.name:
        raise ToolError(f"argument 'table': catalog '{name.catalog}' is not served here (this server maintains "
                        f"catalog '{services.settings.catalog.name}')")
    return name.namespace_str, name.name


def operation_names(operations: list[str] | None) -> list[str] | None:
    try:
        return [Operation.parse(text).value for text in operations] if operations else None
    except ValueError as exc:
        raise ToolError(f"argument 'operations': {exc}") from None


def moment(text: str | None, argument: str) -> datetime:
    if not text:
        return datetime.now(timezone.utc)
    try:
        return naive_as_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        raise ToolError(f"argument '{argument}': expected an ISO-8601 time, got {text!r}") from None


def add_read_tools(server: MCPServer, services: ApiServices, callers: Callers) -> None:
    """tables, table, health, explain, plan, runs, trigger_status, value_report."""
    def reader(ctx: Context) -> Principal:
        return callers.principal(ctx, Permission.READ)

    @server.tool(annotations=READ)
    @answering
    def tables(ctx: Context, namespace: str | None = None, limit: Annotated[int, Field(ge=1, le=1000)] = 100,
               offset: Annotated[int, Field(ge=0)] = 0) -> dict[str, Any]:
        """The catalog's tables (the code location's cached list), or one namespace's (dotted when nested)."""
        reader(ctx)
        reads = services.catalog_reads
        return reads.tables_in(namespace, limit, offset) if namespace else reads.tables(limit, offset)

    @server.tool(annotations=READ)
    @answering
    def health(ctx: Context, table: TableArgument,
               tier: Annotated[str, Field(pattern="^(summary|full)$")] = "summary") -> dict[str, Any]:
        """One table's health: metrics, issues, status and debt score (tier full reads the manifests)."""
        reader(ctx)
        return services.table_reports.health(*table_parts(services, table), tier)

    @server.tool(annotations=READ)
    @answering
    def explain(ctx: Context, table: TableArgument, at: str | None = None) -> dict[str, Any]:
        """One table's trigger status (floe-dagster explain): for each operation whether it would run now,
        and why not (schedule, conditions, backoff, holds, envelope), its debt and estimate."""
        reader(ctx)
        return services.table_reports.trigger_status(*table_parts(services, table), moment(at, "at"))

    @server.tool(annotations=READ)
    @answering
    def plan(ctx: Context, table: str | None = None, at: str | None = None) -> dict[str, Any]:
        """A dry run of the next tick (floe-dagster plan): what would run and why, changing nothing;
        only one table's decisions with ``table``."""
        reader(ctx)
        qualified = ".".join((services.settings.catalog.name, *table_parts(services, table))) if table else None
        result, verdicts, _ = planned(services.settings, services.instance, services.coordination, moment(at, "at"))
        payload = plan_json(result, verdicts)
        if qualified:
            payload["decisions"] = [d for d in payload["decisions"] if d["table"] == qualified]
        return payload

    add_run_tools(server, services, reader)


def add_run_tools(server: MCPServer, services: ApiServices, reader: Callable[[Context], Principal]) -> None:
    """runs, trigger_status, value_report."""
    @server.tool(annotations=READ)
    @answering
    def runs(ctx: Context, table: str | None = None, status: str | None = None,
             limit: Annotated[int, Field(ge=1, le=100)] = 20) -> dict[str, Any]:
        """Recent maintenance runs, newest first, with their numbers (GET /api/v1/operations)."""
        reader(ctx)
        return services.operations.operations(table, None, status, limit, 0)

    @server.tool(annotations=READ)
    @answering
    def trigger_status(ctx: Context, trigger_id: Annotated[str, Field(min_length=1, max_length=100)]
                       ) -> dict[str, Any]:
        """The runs of one trigger (an approved proposal's triggerId): their status, numbers and errors."""
        reader(ctx)
        return services.operations.operations(None, trigger_id, None, 100, 0)

    @server.tool(annotations=READ)
    @answering
    def value_report(ctx: Context, since: str = DEFAULT_SINCE, by: str = DEFAULT_GROUPING) -> dict[str, Any]:
        """What maintenance cost and bought over a window (floe-dagster report): runs, compute hours, files
        removed, failures, benefit per compute hour. ``since``: an ISO-8601 duration back from now."""
        reader(ctx)
        try:
            return report_json(lambda: services.coordination, since, by, datetime.now(timezone.utc))
        except ValueError as exc:  # "--since: ..." or "--by: ...", the command line's words
            raise ToolError(f"argument {str(exc).removeprefix('--')}") from None


def add_write_tools(server: MCPServer, services: ApiServices, callers: Callers, proposals: Proposals) -> None:
    """propose (any key: it changes no table) and approve (OPERATOR or ADMIN)."""

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    @answering
    def propose(ctx: Context, table: TableArgument, operations: list[str] | None = None,
                reason: Annotated[str | None, Field(max_length=500)] = None) -> dict[str, Any]:
        """Propose a table's maintenance: the exact decision (operations, reasons, estimate) and a single-use
        approvalToken bound to it and to the table as it is now. Nothing runs until a person approves it."""
        who = callers.principal(ctx, Permission.READ)
        namespace, name = table_parts(services, table)
        return proposals.propose(who.name, namespace, name, operation_names(operations), reason)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    @answering
    def approve(ctx: Context, token: Annotated[str, Field(min_length=1, max_length=200)], table: TableArgument,
                wait_seconds: Annotated[int, Field(ge=0, le=3600)] = 0) -> dict[str, Any]:
        """Approve a proposal (an OPERATOR or ADMIN key): runs exactly what it proposed, once, if the table and
        its policy have not changed since; ``table`` must be the proposal's. ``wait_seconds``: wait that long
        at most for the runs to finish."""
        who = callers.principal(ctx, Permission.TRIGGER)
        if who.anonymous:
            raise ToolError("FORBIDDEN: an approval needs a named OPERATOR or ADMIN key (its name goes into the "
                            "runs' floe/approved-by tag); this server has no API keys")
        namespace, name = table_parts(services, table)
        return proposals.approve(who.name, token, namespace, name, float(wait_seconds))
