"""The OpenAI Agents SDK's quickstart agent under ``chronicle.instrument_openai_agents()``.

No Chronicle decorator on any tool, and the model client built the way the SDK's docs show
(``set_default_openai_client``, or an ``OpenAIChatCompletionsModel`` given its client); the client
points at the scripted ``LlmServer``, the recordings go to the real control plane.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models import _openai_shared
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

import chronicle
from tests.frameworks import quickstart
from tests.support.llm_server import LlmServer
from tests.support.recording import Recording

SEAM = "_invoke_function_tool_with_metadata"
"""The SDK function every ``FunctionTool`` run goes through (the instrumentor wraps it)."""

INSTRUCTIONS = "You are a helpful assistant. Use the tools to answer."


class Sdk:
    """One test's event loop and the clients built on it (closed on it at the test's end).

    The quickstart runs with ``await Runner.run(...)`` on one loop for the whole test: the
    ``AsyncOpenAI`` connections it pools belong to that loop.
    """

    def __init__(self, server: LlmServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.clients: list[AsyncOpenAI] = []

    def client(self) -> AsyncOpenAI:
        """A client for the scripted server, as the SDK's docs build one for an endpoint."""
        client = AsyncOpenAI(base_url=self.server.openai_base_url, api_key="t", max_retries=0)
        self.clients.append(client)
        return client

    def runner(self, agent: Agent[Any], **options: Any) -> Callable[[], str]:
        """Run ``agent`` on ``quickstart.QUESTION`` to its final output."""
        return lambda: str(self.run(Runner.run(agent, quickstart.QUESTION, **options)).final_output)

    def run(self, work: Any) -> Any:
        return self.loop.run_until_complete(work)

    def close(self) -> None:
        for client in self.clients:
            self.run(client.close())
        self.run(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture
def sdk(llm_server: LlmServer) -> Iterator[Sdk]:
    """The SDK's own trace export off (it would post to api.openai.com), its default client
    restored, the instrumentation undone and the clients closed after each test."""
    default = _openai_shared.get_default_openai_client()
    set_tracing_disabled(True)
    sdk = Sdk(llm_server)
    try:
        yield sdk
    finally:
        chronicle.uninstrument_openai_agents()
        _openai_shared.set_default_openai_client(default)  # type: ignore[arg-type]
        set_tracing_disabled(False)
        sdk.close()


def _agent(
    tools: quickstart.Tools, *, instructions: str = INSTRUCTIONS, model: Any = None
) -> Agent[Any]:
    extra = {} if model is None else {"model": model}
    return Agent(
        name="Assistant",
        instructions=instructions,
        tools=[function_tool(tools.get_weather), function_tool(tools.get_time)],
        **extra,
    )


def _on_the_default_model(sdk: Sdk, tools: quickstart.Tools) -> quickstart.Quickstart:
    set_default_openai_client(sdk.client())
    return quickstart.Quickstart.on_responses(sdk.runner(_agent(tools)), tools, sdk.server)


def _on_a_chat_completions_model(sdk: Sdk, tools: quickstart.Tools) -> quickstart.Quickstart:
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=sdk.client())
    run = sdk.runner(_agent(tools, model=model))
    return quickstart.Quickstart(run, quickstart.script_chat, tools, sdk.server)


def _streamed(sdk: Sdk, tools: quickstart.Tools) -> quickstart.Quickstart:
    set_default_openai_client(sdk.client())
    agent = _agent(tools)

    async def streamed() -> str:
        result = Runner.run_streamed(agent, quickstart.QUESTION)
        async for _event in result.stream_events():
            pass
        return str(result.final_output)

    return quickstart.Quickstart.on_responses(lambda: sdk.run(streamed()), tools, sdk.server)


@pytest.mark.parametrize(
    "quickstart_of",
    [_on_the_default_model, _on_a_chat_completions_model, _streamed],
    ids=["default-model", "chat-completions-model", "streamed"],
)
def test_the_quickstart_records_and_replays(
    recording: Recording,
    sdk: Sdk,
    quickstart_of: Callable[[Sdk, quickstart.Tools], quickstart.Quickstart],
) -> None:
    """The quickstart agent on the default (Responses) model, on a Chat Completions model and
    run streamed: recorded, then replayed as ``check_quickstart`` says."""
    chronicle.instrument_openai_agents()
    quickstart.check_quickstart(quickstart_of(sdk, quickstart.Tools()), recording)


def test_context_tools_and_hand_made_tools_record_only_their_own_arguments(
    recording: Recording, llm_server: LlmServer, sdk: Sdk
) -> None:
    chronicle.instrument_openai_agents()
    tools = quickstart.Tools()
    seen: list[object] = []

    def get_weather(ctx: RunContextWrapper[Any], city: str) -> str:
        """Get the current weather in a city."""
        seen.append(ctx.context)
        return tools.get_weather(city)

    async def invoke_get_time(ctx: ToolContext[Any], input_json: str) -> str:
        return tools.get_time(**json.loads(input_json))

    get_time = FunctionTool(  # built by hand, as the SDK builds an MCP server's tools
        name="get_time",
        description="Get the local time in a city.",
        params_json_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        on_invoke_tool=invoke_get_time,
    )
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=sdk.client())
    agent = Agent(
        name="Assistant",
        instructions=INSTRUCTIONS,
        tools=[function_tool(get_weather), get_time],
        model=model,
    )
    context = {"user": "ada"}
    qs = quickstart.Quickstart(
        sdk.runner(agent, context=context),
        quickstart.script_chat,
        tools,
        llm_server,
    )
    session = quickstart.check_quickstart(qs, recording)  # its strict replay passes with no ignore=
    saved = {e["name"]: e for e in recording.saved(session.trace_id, 5)}
    assert saved["get_weather"]["metadata"]["chronicle.left_out"] == ["ctx"]
    assert "chronicle.left_out" not in saved["get_time"]["metadata"]
    assert saved["get_time"]["metadata"]["chronicle.framework"] == "openai-agents"
    assert seen == [context]  # the recorded run only: every replay stubbed get_weather


def test_a_changed_prompt_is_caught_by_a_strict_replay(
    recording: Recording, llm_server: LlmServer, sdk: Sdk
) -> None:
    chronicle.instrument_openai_agents()
    set_default_openai_client(sdk.client())
    terse = "You are a terse assistant. Use the tools to answer."
    quickstart.check_a_change_is_caught(
        lambda tools: sdk.runner(_agent(tools)),
        lambda tools: sdk.runner(_agent(tools, instructions=terse)),
        quickstart.script_responses,
        llm_server,
        recording,
        model_call="openai.responses.create",
        match="terse",
    )


def test_a_boundary_under_function_tool_records_each_run_once(
    recording: Recording, llm_server: LlmServer, sdk: Sdk
) -> None:
    chronicle.instrument_openai_agents()
    tools = quickstart.Tools()
    get_weather = function_tool(chronicle.boundary(tools.get_weather))
    get_time = function_tool(chronicle.boundary(tools.get_time))
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=sdk.client())
    agent = Agent(name="Assistant", instructions=INSTRUCTIONS, tools=[get_weather, get_time])
    agent.model = model
    quickstart.script_chat(llm_server)
    with chronicle.record("quickstart") as session:
        assert sdk.runner(agent)() == quickstart.ANSWER
    chronicle.flush(10)
    envelopes = recording.control_plane.trace_envelopes(session.trace_id)
    # The user's own boundaries (named after the methods), not a second one by the tool's name.
    assert sorted(e["name"] for e in envelopes if e["kind"] == "tool") == [
        "Tools.get_time",
        "Tools.get_weather",
    ]
    assert len(envelopes) == 5


@pytest.mark.parametrize("named", [False, True])
def test_a_boundary_over_function_tool_says_to_move_it_below(named: bool) -> None:
    tool: Any = function_tool(quickstart.Tools().get_weather)
    moved = r"got FunctionTool: put @chronicle\.boundary below the framework's decorator"
    with pytest.raises(TypeError, match=moved) as raised:
        chronicle.boundary("get_weather")(tool) if named else chronicle.boundary(tool)
    assert "chronicle.instrument_openai_agents()" in str(raised.value)


def test_uninstrument_restores_the_sdk(
    recording: Recording, llm_server: LlmServer, sdk: Sdk
) -> None:
    import agents.tool
    from agents.models.openai_responses import OpenAIResponsesModel
    from agents.run_internal import tool_execution

    before = (
        getattr(agents.tool, SEAM),
        getattr(tool_execution, SEAM),
        OpenAIResponsesModel._get_client,
    )
    chronicle.instrument_openai_agents()
    chronicle.instrument_openai_agents()  # idempotent: one set of patches
    assert getattr(tool_execution, SEAM) is not before[1]
    chronicle.uninstrument_openai_agents()
    after = (
        getattr(agents.tool, SEAM),
        getattr(tool_execution, SEAM),
        OpenAIResponsesModel._get_client,
    )
    assert after == before
    set_default_openai_client(sdk.client())
    tools = quickstart.Tools()
    quickstart.script_responses(llm_server)
    with chronicle.record("quickstart") as session:
        assert sdk.runner(_agent(tools))() == quickstart.ANSWER
    assert chronicle.flush(10)
    assert recording.control_plane.trace_envelopes(session.trace_id) == []


def test_the_documented_example_runs(recording: Recording, llm_server: LlmServer, sdk: Sdk) -> None:
    set_default_openai_client(sdk.client())  # what OPENAI_API_KEY would give, at the server
    quickstart.script_responses(llm_server)
    with quickstart.documented_example("openai-agents.md", recording) as example:
        result = sdk.run(example["main"]())
    quickstart.assert_example_ran(result, recording, llm_server, "openai.responses.create")
