"""``chronicle.instrument_mcp()`` against a real MCP server (tests/frameworks/mcp_server.py).

The server runs over stdio as a process of its own and writes a line to its log file for every
tool listing and tool call that reaches it (``refund`` is a refund paid), so "the server's tool
never ran" is counted by the server, not by Chronicle. Checked with the plain ``mcp`` client
(``stdio_client`` + ``ClientSession``) and with the OpenAI Agents SDK's ``MCPServerStdio``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio, MCPServerStdioParams
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, ListToolsResult
from openai import AsyncOpenAI

import chronicle
from chronicle.integrations.frameworks.mcp import SERVER
from chronicle.testing import LocalControlPlane
from tests.frameworks import quickstart
from tests.frameworks.mcp_server import LOG, SERVER_NAME
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, tool_call
from tests.support.recording import Recording

SERVER_SCRIPT = Path(__file__).with_name("mcp_server.py")
LIST_TOOLS = f"mcp.list_tools[{SERVER_NAME}]"
PAID = "refunded 12.5 on order A-1001"
_ORIGINAL_CALL_TOOL = ClientSession.call_tool
_ORIGINAL_LIST_TOOLS = ClientSession.list_tools


_instrumented = quickstart.instrumenting(chronicle.instrument_mcp, chronicle.uninstrument_mcp)


@dataclass
class Shop:
    """The MCP server's process parameters, and its log of the requests that reached it."""

    log: Path

    @property
    def env(self) -> dict[str, str]:
        # Without the pydantic plugins of the dev environment (logfire's) the server starts in
        # two thirds of the time.
        return {LOG: str(self.log), "PYDANTIC_DISABLE_PLUGINS": "__all__"}

    @property
    def params(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable, args=[str(SERVER_SCRIPT)], env=self.env
        )

    def reached(self) -> list[str]:
        """The lines the server logged: ``list_tools``, ``get_weather Paris``, ``refund ...``."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def runs(self) -> list[str]:
        """The tool runs the server logged (an mcp 1.x server also lists its tools to itself
        before its first tool call, so its listings are not all the client's)."""
        return [line for line in self.reached() if line != "list_tools"]


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    return Shop(tmp_path / "server.log")


@dataclass
class Calls:
    listed: ListToolsResult
    weather: CallToolResult
    paid: CallToolResult
    refused: CallToolResult


async def _plain_client(shop: Shop, amount: float = 12.5) -> Calls:
    """The plain client: list the tools, ask for the weather, pay a refund, and send a refund
    the server refuses (an amount that is not a number)."""
    async with stdio_client(shop.params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            weather = await session.call_tool("get_weather", {"city": "Paris"})
            paid = await session.call_tool("refund", {"order_id": "A-1001", "amount": amount})
            refused = await session.call_tool("refund", {"order_id": "A-1002", "amount": "all"})
    return Calls(listed, weather, paid, refused)


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert block.type == "text"
    return str(block.text)


def _is_error(result: CallToolResult) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


RECORDED = ["list_tools", "get_weather Paris", "refund A-1001 12.5"]
"""What reached the server while the plain client was recorded (the refused refund never ran)."""


def test_plain_client_tool_calls_are_recorded_and_replayed_without_the_server(
    recording: Recording, shop: Shop
) -> None:
    with chronicle.record("refund") as session:
        live = asyncio.run(_plain_client(shop))
    assert _text(live.paid) == PAID
    assert _is_error(live.refused)
    assert shop.reached() == RECORDED

    envelopes = recording.saved(session.trace_id, 4)
    listing, weather, refund, refused = envelopes
    assert [e["name"] for e in envelopes] == [LIST_TOOLS, "get_weather", "refund", "refund"]
    assert {e["kind"] for e in envelopes} == {"tool"}
    assert listing["input"]["raw"] == {}
    assert weather["input"]["raw"] == {"city": "Paris"}
    assert refund["input"]["raw"] == {"order_id": "A-1001", "amount": 12.5}
    for envelope in envelopes:
        assert envelope["metadata"][SERVER] == SERVER_NAME
        assert envelope["span_id"] == session.span_id
    assert refund["metadata"]["chronicle.left_out"] == [
        "read_timeout_seconds",
        "progress_callback",
        "meta",
    ]
    assert [t["name"] for t in listing["output"]["raw"]["tools"]] == ["get_weather", "refund"]
    assert "sunny" in json.dumps(weather["output"]["raw"])
    assert PAID in json.dumps(refund["output"]["raw"])
    # The server's refusal is the tool's result, not a failure of the call.
    assert refused["envelope_status"]["status"] == "success"
    assert "error" not in refused["output"]
    raw = refused["output"]["raw"]
    assert raw.get("is_error", raw.get("isError")) is True  # mcp 2.x names it is_error
    assert "A-1002" not in "".join(shop.reached())

    # All stubbed, strict: the same results as the SDK's own types; nothing reaches the server.
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        replayed = asyncio.run(_plain_client(shop))
    assert run.divergences() == []
    assert [(c.name, c.mode) for c in run.call_log()] == [
        (LIST_TOOLS, "stub"),
        ("get_weather", "stub"),
        ("refund", "stub"),
        ("refund", "stub"),
    ]
    assert shop.reached() == RECORDED
    assert isinstance(replayed.paid, CallToolResult)
    assert isinstance(replayed.listed, ListToolsResult)
    assert replayed == live
    assert _is_error(replayed.refused)

    # A cut-point: the refunds run live (paid a second time), the rest is still the recording.
    plan = chronicle.ReplayPlan().run("refund")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        again = asyncio.run(_plain_client(shop))
    assert run.divergences() == []
    assert [(c.name, c.mode) for c in run.call_log()][2:] == [("refund", "run")] * 2
    paid_twice = ["get_weather Paris", "refund A-1001 12.5", "refund A-1001 12.5"]
    assert shop.runs() == paid_twice
    assert again == live

    # Strict, with a changed amount: a divergence, and still nothing paid.
    with pytest.raises(chronicle.ReplayDivergenceError, match="refund"):
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
            asyncio.run(_plain_client(shop, amount=13))
    assert shop.runs() == paid_twice


QUESTION = "What is the weather in Paris? And refund 12.5 on order A-1001."
ANSWER = "It is sunny in Paris, and order A-1001 was refunded 12.5."


def _script_agent(server: LlmServer) -> None:
    """The model asks for the weather, then for the refund, then answers."""
    server.reply_with(chat_tool_calls(tool_call("get_weather", {"city": "Paris"})))
    server.reply_with(chat_tool_calls(tool_call("refund", {"order_id": "A-1001", "amount": 12.5})))
    server.reply_with(chat_text(ANSWER))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for the whole test: the ``AsyncOpenAI`` client's connections belong to it.

    (Not an ``asyncio.Runner``: it runs everything in a context of its own, made before
    ``chronicle.record`` opened its session.)
    """
    set_tracing_disabled(True)
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        set_tracing_disabled(False)


async def _agent_answer(shop: Shop, client: AsyncOpenAI) -> str:
    """The Agents SDK's MCP quickstart: an agent whose tools come from an ``MCPServerStdio``."""
    params: MCPServerStdioParams = {
        "command": sys.executable,
        "args": [str(SERVER_SCRIPT)],
        "env": shop.env,
    }
    async with MCPServerStdio(params=params, name="Shop") as server:
        agent = Agent(
            name="Support",
            instructions="Use the tools to answer.",
            mcp_servers=[server],
            model=OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        )
        result = await Runner.run(agent, QUESTION)
    return str(result.final_output)


MODEL = "openai.chat.completions.create"


def _check_agent(
    recording: Recording,
    shop: Shop,
    llm_server: LlmServer,
    loop: asyncio.AbstractEventLoop,
    *,
    trace: list[str],
) -> list[dict[str, Any]]:
    """Record the agent's run (the boundaries named ``trace``, in order), then replay it all
    stubbed and strict: the same answer, 0 model requests, nothing reaching the MCP server."""
    client = chronicle.wrap(
        AsyncOpenAI(base_url=llm_server.openai_base_url, api_key="t", max_retries=0)
    )
    try:
        _script_agent(llm_server)
        with chronicle.record("support") as session:
            assert loop.run_until_complete(_agent_answer(shop, client)) == ANSWER
        reached = shop.reached()
        assert reached == [
            "list_tools",
            "get_weather Paris",
            "list_tools",
            "refund A-1001 12.5",
            "list_tools",
        ]
        envelopes = recording.saved(session.trace_id, len(trace))
        assert [e["name"] for e in envelopes] == trace
        assert {e["span_id"] for e in envelopes} == {session.span_id}
        tools = [e for e in envelopes if e["name"] in ("get_weather", "refund")]
        assert [(e["kind"], e["input"]["raw"]) for e in tools] == [
            ("tool", {"city": "Paris"}),
            ("tool", {"order_id": "A-1001", "amount": 12.5}),
        ]
        assert PAID in json.dumps(tools[1]["output"]["raw"])

        requests = len(llm_server.requests)
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
            assert loop.run_until_complete(_agent_answer(shop, client)) == ANSWER
        assert run.divergences() == []
        assert shop.reached() == reached, "a replay reached the MCP server"
        assert len(llm_server.requests) == requests, "a replayed model call reached the server"
    finally:
        loop.run_until_complete(client.close())
    return envelopes


def test_agents_sdk_mcp_tools_are_recorded_and_never_run_in_a_replay(
    recording: Recording, shop: Shop, llm_server: LlmServer, loop: asyncio.AbstractEventLoop
) -> None:
    # Only instrument_mcp(): the SDK lists the server's tools before each model call.
    trace = [LIST_TOOLS, MODEL, "get_weather", LIST_TOOLS, MODEL, "refund", LIST_TOOLS, MODEL]
    envelopes = _check_agent(recording, shop, llm_server, loop, trace=trace)
    for envelope in envelopes:
        if envelope["kind"] == "tool":
            assert envelope["metadata"][SERVER] == SERVER_NAME


def test_an_mcp_tool_under_the_agents_sdk_instrumentor_is_one_boundary(
    recording: Recording, shop: Shop, llm_server: LlmServer, loop: asyncio.AbstractEventLoop
) -> None:
    # The SDK's FunctionTool for an MCP tool is recorded by instrument_openai_agents(); the
    # session's call_tool inside it is the same tool run, not a second envelope.
    chronicle.instrument_openai_agents()
    try:
        trace = [LIST_TOOLS, MODEL, "get_weather", LIST_TOOLS, MODEL, "refund", LIST_TOOLS, MODEL]
        _check_agent(recording, shop, llm_server, loop, trace=trace)
    finally:
        chronicle.uninstrument_openai_agents()


DOC = Path(__file__).resolve().parents[2] / "docs" / "frameworks" / "mcp.md"


def test_the_documented_example_pays_once(
    control_plane: LocalControlPlane, shop: Shop, capsys: pytest.CaptureFixture[str]
) -> None:
    (code,) = [
        block
        for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
        if "chronicle.instrument_mcp()" in block
    ]
    documented = 'StdioServerParameters(command="python", args=["mcp_server.py"])'
    assert documented in code and '"http://127.0.0.1:8800"' in code
    code = code.replace(documented, "SHOP_SERVER").replace(
        '"http://127.0.0.1:8800"', repr(control_plane.url)
    )
    exec(compile(code, str(DOC), "exec"), {"__name__": "example", "SHOP_SERVER": shop.params})
    assert capsys.readouterr().out.splitlines() == [PAID, PAID]
    assert shop.runs() == ["refund A-1001 12.5"]


def test_instrument_mcp_is_idempotent_and_undone_by_its_twin() -> None:
    # The fixture instrumented once already: a second call patches nothing again.
    patched = ClientSession.call_tool
    assert patched is not _ORIGINAL_CALL_TOOL
    chronicle.instrument_mcp()
    assert ClientSession.call_tool is patched
    chronicle.uninstrument_mcp()
    assert ClientSession.call_tool is _ORIGINAL_CALL_TOOL
    assert ClientSession.list_tools is _ORIGINAL_LIST_TOOLS
    chronicle.uninstrument_mcp()  # twice is harmless too
    assert ClientSession.call_tool is _ORIGINAL_CALL_TOOL
