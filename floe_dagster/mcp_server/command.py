"""``floe-dagster mcp``'s arguments (the command itself is cli/fleet_commands.py's ``cmd_mcp``): kept here, beside
the server, so the command line imports neither the SDK nor the server until the command runs."""

from __future__ import annotations

import argparse
from typing import Callable

DEFAULT_PORT = 9092


def add_mcp_command(sub, func: Callable) -> None:
    mcp = sub.add_parser("mcp", help="the MCP server for agents: read tools, and maintenance an agent proposes and "
                                      "a person with an OPERATOR or ADMIN key approves (docs/mcp.md)")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio (default; the key in $FLOE_API_KEY) or streamable HTTP at /mcp (X-API-Key per "
                          "request)")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP: the address (beyond loopback only with API keys)")
    mcp.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"HTTP: the port (default {DEFAULT_PORT})")
    mcp.set_defaults(func=func)


def _port(text: str) -> int:
    port = int(text) if text.isdigit() else 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text!r}")
    return port
