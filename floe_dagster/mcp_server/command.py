"""``floe-dagster mcp``: its arguments and the command, kept here beside the server; the command line imports
neither the SDK nor the server until the command runs."""

from __future__ import annotations

import os
from typing import Callable

DEFAULT_PORT = 9092


def add_mcp_command(sub, settings_of: Callable) -> None:
    mcp = sub.add_parser("mcp", help="the MCP server for agents: read tools, and maintenance an agent proposes and "
                                      "a person with an OPERATOR or ADMIN key approves (docs/mcp.md)")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio (default; the key in $FLOE_API_KEY) or streamable HTTP at /mcp (X-API-Key per "
                          "request)")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP: the address (beyond loopback only with API keys)")
    mcp.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP: the port (default {DEFAULT_PORT})")
    mcp.set_defaults(func=lambda args: cmd_mcp(args, settings_of))


def cmd_mcp(args, settings_of: Callable) -> int:
    """The MCP server for agents (docs/mcp.md): stdio, or streamable HTTP."""
    from floe_dagster.mcp_server.server import run_http, run_stdio

    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port: expected 1 to 65535, got {args.port}")
    settings = settings_of(args)
    if args.transport == "stdio":
        return run_stdio(settings, os.environ)
    return run_http(settings, os.environ, args.host, args.port)
