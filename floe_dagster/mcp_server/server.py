"""``floe-dagster mcp``: the MCP server (docs/mcp.md), on the official ``mcp`` SDK, over stdio (one caller, the key
in ``FLOE_API_KEY``) or streamable HTTP (``/mcp``, a key in each request's ``X-API-Key``).

The same settings, Dagster instance, coordination database and API keys as ``floe-dagster serve``, and the same
start-up checks: it refuses to listen beyond loopback without keys (api/auth.py's ``check_bind``), and over HTTP
a request without a valid key is refused (401) before the MCP layer whenever keys are required; each tool then
checks the key's role.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Mapping

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from floe_dagster.api.auth import HEADER, KeyStore, check_bind
from floe_dagster.api.error_handlers import error_body
from floe_dagster.api.services import ApiServices
from floe_dagster.coordination.api_keys import ApiKeyTable
from floe_dagster.errors import KeysError
from floe_dagster.instance import get_instance
from floe_dagster.mcp_server.command import DEFAULT_PORT
from floe_dagster.mcp_server.proposals import Proposals
from floe_dagster.mcp_server.tools import KEY_VARIABLE, Callers, add_read_tools, add_write_tools
from floe_dagster.redaction import install_log_masking
from floe_dagster.settings import Settings

DEFAULT_HOST, PATH = "127.0.0.1", "/mcp"
INSTRUCTIONS = (
    "floe-dagster maintains Apache Iceberg tables. Read with tables, health, explain (why a table's operations "
    "run or not), plan, runs, trigger_status and value_report. To maintain a table, propose it: the answer is the "
    "exact decision and an approvalToken; show both to a person, who approves it with an OPERATOR or ADMIN key. "
    "Nothing runs without that approval.")

log = logging.getLogger(__name__)


def _package_version() -> str:
    try:
        return version("floe-dagster")
    except PackageNotFoundError:  # pragma: no cover
        return "0"


def build_server(settings: Settings, environ: Mapping[str, str], host: str = DEFAULT_HOST,
                 process_key: str | None = None) -> tuple[MCPServer, KeyStore]:
    """The server and its keys (KeysError when they cannot be read), on this process's instance."""
    services = ApiServices(settings, get_instance())
    keys = KeyStore(settings.api, environ, database=ApiKeyTable(services.coordination.engine), host=host)
    server = MCPServer("floe-dagster", instructions=INSTRUCTIONS, version=_package_version(), log_level="WARNING")
    callers = Callers(keys, process_key)
    add_read_tools(server, services, callers)
    add_write_tools(server, services, callers, Proposals(services))
    return server, keys


def run_stdio(settings: Settings, environ: Mapping[str, str]) -> int:
    """Serve one client on stdin/stdout, as the key in ``FLOE_API_KEY`` (checked now and on every call)."""
    install_log_masking()
    key = environ.get(KEY_VARIABLE) or None
    server, keys = build_server(settings, environ, process_key=key)
    if keys.required and keys.authenticate(key) is None:
        raise KeysError(f"{KEY_VARIABLE}: {'not a valid API key' if key else 'not set'}; this server's API keys "
                        "are required (give the MCP client's key in its environment)")
    server.run("stdio")
    return 0


class RequireKey:
    """Refuse an HTTP request without a valid key (401, the HTTP API's error shape) whenever keys are required."""

    def __init__(self, app: ASGIApp, keys: KeyStore):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.keys.required:
            presented = Headers(scope=scope).get(HEADER)
            who = await anyio.to_thread.run_sync(self._caller, presented)
            if who is None:
                message = (f"a valid API key is required in the {HEADER} header" if not presented
                           else "the API key is not valid")
                await JSONResponse(error_body(401, "UNAUTHORIZED", message), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _caller(self, presented: str | None):
        if self.keys.error():
            return None
        return self.keys.authenticate(presented)


def run_http(settings: Settings, environ: Mapping[str, str], host: str = DEFAULT_HOST,
             port: int = DEFAULT_PORT) -> int:
    """Serve streamable HTTP at ``/mcp`` until interrupted; the checks run before anything listens."""
    import uvicorn

    install_log_masking()
    server, keys = build_server(settings, environ, host)
    check_bind(host, keys.configured)
    app = RequireKey(server.streamable_http_app(streamable_http_path=PATH, host=host), keys)
    shown = f"[{host}]" if ":" in host else host
    print(f"floe-dagster MCP server on http://{shown}:{port}{PATH} ({keys.describe()})", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="info", server_header=False)
    return 0
