"""The MCP SDK's real client on ``floe-dagster mcp`` (test_api.py's ``test_mcp_*``): over stdio (the console script
spawned by the client, its key in ``FLOE_API_KEY``) and over streamable HTTP (a server on a free port, its key in
each request's ``X-API-Key``)."""

from __future__ import annotations

import json
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import httpx2
import requests
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

READ_TOOLS = ("tables", "health", "explain", "plan", "runs", "trigger_status", "value_report")


def start_mcp_http(bin_dir: Path, root: Path, config: Path, env: dict, log: Path, port: int
                   ) -> tuple[subprocess.Popen, str]:
    """``floe-dagster mcp --transport http`` on ``port``, once it answers (a 401 to a request without a key)."""
    with open(log, "ab") as out:
        process = subprocess.Popen([str(bin_dir / "floe-dagster"), "--config", str(config), "mcp", "--transport",
                                    "http", "--port", str(port)], cwd=root, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.post(url, json={}, timeout=5).status_code == 401:
                return process, url
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"floe-dagster mcp did not start:\n{log.read_text()}")
        time.sleep(0.3)


@asynccontextmanager
async def over_http(url: str, key: str | None) -> AsyncIterator[Client]:
    headers = {"X-API-Key": key} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=900)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


@asynccontextmanager
async def over_stdio(bin_dir: Path, root: Path, config: Path, env: dict, key: str, errlog) -> AsyncIterator[Client]:
    parameters = StdioServerParameters(command=str(bin_dir / "floe-dagster"), args=["--config", str(config), "mcp"],
                                       env={**env, "FLOE_API_KEY": key}, cwd=root)
    async with Client(stdio_client(parameters, errlog=errlog), read_timeout_seconds=300) as client:
        yield client


def _text(result) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


async def answer(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's answer, which must not be an error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {_text(result)}"
    return result.structured_content or json.loads(_text(result))


async def refusal(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """A tool's error text, which it must be."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} answered instead of refusing: {_text(result)[:500]}"
    return _text(result)
