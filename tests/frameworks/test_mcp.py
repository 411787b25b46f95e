"""``chronicle.instrument_mcp()`` against a real MCP server (tests/frameworks/mcp_server.py).

The server runs over stdio as a process of its own and writes a line to its log file for every
tool listing and tool call that reaches it (``refund`` is a refund paid), so "the server's tool
never ran" is counted by the server, not by Chronicle. Checked with the plain ``mcp`` client
(``stdio_client`` + ``ClientSession``) and with the OpenAI Agents SDK's ``MCPServerStdio``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, ListToolsResult

import chronicle
from chronicle.integrations.frameworks.mcp import SERVER
from tests.frameworks.mcp_server import LOG, SERVER_NAME
from tests.support.recording import Recording

SERVER_SCRIPT = Path(__file__).with_name("mcp_server.py")
LIST_TOOLS = f"mcp.list_tools[{SERVER_NAME}]"
PAID = "refunded 12.5 on order A-1001"


@pytest.fixture(autouse=True)
def _instrumented() -> Iterator[None]:
    chronicle.instrument_mcp()
    try:
        yield
    finally:
        chronicle.uninstrument_mcp()


@dataclass
class Shop:
    """The MCP server's process parameters, and its log of the requests that reached it."""

    log: Path

    @property
    def params(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable, args=[str(SERVER_SCRIPT)], env={LOG: str(self.log)}
        )

    def reached(self) -> list[str]:
        """The lines the server logged: ``list_tools``, ``get_weather Paris``, ``refund ...``."""
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    return Shop(tmp_path / "server.log")


@dataclass
class Calls:
    listed: ListToolsResult
    weather: CallToolResult
    paid: CallToolResult


async def _plain_client(shop: Shop) -> Calls:
    """The plain client: list the tools, ask for the weather, pay a refund."""
    async with stdio_client(shop.params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            weather = await session.call_tool("get_weather", {"city": "Paris"})
            paid = await session.call_tool("refund", {"order_id": "A-1001", "amount": 12.5})
    return Calls(listed, weather, paid)


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert block.type == "text"
    return str(block.text)


def test_plain_client_tool_calls_are_recorded_and_replayed_without_the_server(
    recording: Recording, shop: Shop
) -> None:
    with chronicle.record("refund") as session:
        live = asyncio.run(_plain_client(shop))
    assert _text(live.paid) == PAID
    assert shop.reached() == ["list_tools", "get_weather Paris", "refund A-1001 12.5"]

    listing, weather, refund = recording.saved(session.trace_id, 3)
    assert [e["name"] for e in (listing, weather, refund)] == [LIST_TOOLS, "get_weather", "refund"]
    assert {e["kind"] for e in (listing, weather, refund)} == {"tool"}
    assert weather["input"]["raw"] == {"city": "Paris"}
    assert refund["input"]["raw"] == {"order_id": "A-1001", "amount": 12.5}
    assert listing["input"]["raw"] == {}
    for envelope in (listing, weather, refund):
        assert envelope["metadata"][SERVER] == SERVER_NAME
        assert envelope["span_id"] == session.span_id
    assert refund["metadata"]["chronicle.left_out"] == [
        "read_timeout_seconds",
        "progress_callback",
        "meta",
    ]
    assert PAID in json.dumps(refund["output"]["raw"])
    assert "sunny" in json.dumps(weather["output"]["raw"])
    assert [t["name"] for t in listing["output"]["raw"]["tools"]] == ["get_weather", "refund"]

    # All stubbed, strict: the same results as the SDK's own types; nothing reaches the server.
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        replayed = asyncio.run(_plain_client(shop))
    assert run.divergences() == []
    assert [(c.name, c.mode) for c in run.call_log()] == [
        (LIST_TOOLS, "stub"),
        ("get_weather", "stub"),
        ("refund", "stub"),
    ]
    assert shop.reached() == ["list_tools", "get_weather Paris", "refund A-1001 12.5"]
    assert isinstance(replayed.paid, CallToolResult)
    assert isinstance(replayed.listed, ListToolsResult)
    assert replayed.paid == live.paid
    assert replayed.weather == live.weather
    assert replayed.listed == live.listed

    # A cut-point: the refund runs live (paid a second time), the rest is still the recording.
    plan = chronicle.ReplayPlan().run("refund")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        again = asyncio.run(_plain_client(shop))
    assert run.divergences() == []
    assert shop.reached()[3:] == ["refund A-1001 12.5"]
    assert again.paid == live.paid
