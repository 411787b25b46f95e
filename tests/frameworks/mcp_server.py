"""A real MCP server for tests/frameworks/test_mcp.py, run over stdio as a process of its own.

``python tests/frameworks/mcp_server.py`` serves two tools, as the server named ``shop``:

- ``get_weather(city)``: the weather in a city;
- ``refund(order_id, amount)``: pays ``amount`` back on an order and says so.

When the ``MCP_SERVER_LOG`` environment variable names a file, every request the server answers
about its tools appends one line to it: ``refund <order_id> <amount>`` for a refund paid,
``get_weather <city>``, and ``list_tools`` for a listing. That file is the server's own account
of what reached it: a replay that stubs the tools must leave it as the recording left it.

It uses the SDK's high-level server: ``MCPServer`` in mcp 2.x, ``FastMCP`` in mcp 1.x.
"""

from __future__ import annotations

import json
import os
from typing import Any

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as FastMCP
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]

SERVER_NAME = "shop"
LOG = "MCP_SERVER_LOG"
"""The environment variable naming the file the server appends a line to for each request."""


def _log(line: str) -> None:
    path = os.environ.get(LOG)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


class Shop(FastMCP):  # type: ignore[misc,unused-ignore]
    """The SDK's server, logging each tool listing it answers."""

    async def list_tools(self) -> Any:
        """The tools, as the SDK lists them; logged."""
        _log("list_tools")
        return await super().list_tools()


server = Shop(SERVER_NAME)


@server.tool()
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    _log(f"get_weather {city}")
    return json.dumps({"city": city, "sky": "sunny", "celsius": 21})


@server.tool()
def refund(order_id: str, amount: float) -> str:
    """Refund an order: pay ``amount`` back to the customer."""
    _log(f"refund {order_id} {amount}")
    return f"refunded {amount} on order {order_id}"


if __name__ == "__main__":
    server.run("stdio")
