"""``floe-dagster mcp``: the MCP server for agents, over the HTTP API's services and keys (docs/mcp.md)."""
