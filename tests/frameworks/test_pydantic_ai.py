"""Pydantic AI's quickstart agent under ``chronicle.instrument_pydantic_ai()``.

No Chronicle decorator on any tool, and the model built the way Pydantic AI's docs show for an
OpenAI-compatible endpoint (``OpenAIChatModel(..., provider=OpenAIProvider(base_url=...,
api_key=...))``), pointed at the scripted ``LlmServer``; the recordings go to the real control
plane.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.toolsets.function import FunctionToolset

import chronicle
from tests.frameworks import quickstart
from tests.support.llm_server import LlmServer
from tests.support.recording import Recording

INSTRUCTIONS = "You are a helpful assistant. Use the tools to answer."


class Setup:
    """One test's event loop and the providers built on it (closed on it at the test's end).

    The agent runs with ``await agent.run(...)`` on one loop for the whole test: the
    ``AsyncOpenAI`` connections its provider pools belong to that loop.
    """

    def __init__(self, server: LlmServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.providers: list[OpenAIProvider] = []

    def provider(self) -> OpenAIProvider:
        """The provider for the scripted server, as Pydantic AI's docs build one."""
        provider = OpenAIProvider(base_url=self.server.openai_base_url, api_key="t")
        self.providers.append(provider)
        return provider

    def chat_model(self) -> OpenAIChatModel:
        return OpenAIChatModel("gpt-4o-mini", provider=self.provider())

    def runner(self, agent: Agent[Any, str], **options: Any) -> Callable[[], str]:
        """Run ``agent`` on ``quickstart.QUESTION`` to its output."""
        return lambda: (
            self.loop.run_until_complete(agent.run(quickstart.QUESTION, **options)).output
        )

    def close(self) -> None:
        for provider in self.providers:
            self.loop.run_until_complete(provider.client.close())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture
def setup(llm_server: LlmServer) -> Iterator[Setup]:
    """The instrumentation undone and the providers' clients closed after each test."""
    setup = Setup(llm_server)
    try:
        yield setup
    finally:
        chronicle.uninstrument_pydantic_ai()
        setup.close()


def _agent(
    tools: quickstart.Tools, model: Any, *, instructions: str = INSTRUCTIONS
) -> Agent[Any, str]:
    agent: Agent[Any, str] = Agent(model, instructions=instructions)
    agent.tool_plain(tools.get_weather)
    agent.tool_plain(tools.get_time)
    return agent


def _on_chat_completions(setup: Setup, tools: quickstart.Tools) -> quickstart.Quickstart:
    run = setup.runner(_agent(tools, setup.chat_model()))
    return quickstart.Quickstart(run, quickstart.script_chat, tools, setup.server)


def _streamed(setup: Setup, tools: quickstart.Tools) -> quickstart.Quickstart:
    agent = _agent(tools, setup.chat_model())

    async def streamed() -> str:
        async with agent.run_stream(quickstart.QUESTION) as result:
            return await result.get_output()

    def run() -> str:
        return setup.loop.run_until_complete(streamed())

    return quickstart.Quickstart(run, quickstart.script_chat, tools, setup.server)


def _on_the_responses_api(setup: Setup, tools: quickstart.Tools) -> quickstart.Quickstart:
    # The tools given as a toolset of their own rather than registered on the agent.
    toolset: FunctionToolset[Any] = FunctionToolset([tools.get_weather, tools.get_time])
    model = OpenAIResponsesModel("gpt-4o-mini", provider=setup.provider())
    agent: Agent[Any, str] = Agent(model, instructions=INSTRUCTIONS, toolsets=[toolset])
    return quickstart.Quickstart.on_responses(setup.runner(agent), tools, setup.server)


@pytest.mark.parametrize(
    "quickstart_of",
    [_on_chat_completions, _streamed, _on_the_responses_api],
    ids=["chat-completions", "streamed", "responses-toolset"],
)
def test_the_quickstart_records_and_replays(
    recording: Recording,
    setup: Setup,
    quickstart_of: Callable[[Setup, quickstart.Tools], quickstart.Quickstart],
) -> None:
    """The quickstart agent on a Chat Completions model, run streamed, and on the Responses API
    with its tools as a toolset: recorded, then replayed as ``check_quickstart`` says."""
    chronicle.instrument_pydantic_ai()
    quickstart.check_quickstart(quickstart_of(setup, quickstart.Tools()), recording)


def test_a_tool_taking_the_run_context_replays_strictly_without_ignore(
    recording: Recording, llm_server: LlmServer, setup: Setup
) -> None:
    chronicle.instrument_pydantic_ai()
    tools = quickstart.Tools()
    agent: Agent[str, str] = Agent(setup.chat_model(), deps_type=str, instructions=INSTRUCTIONS)
    users: list[str] = []

    @agent.tool
    def get_weather(ctx: RunContext[str], city: str) -> str:
        """Get the current weather in a city."""
        users.append(ctx.deps)
        return tools.get_weather(city)

    agent.tool_plain(tools.get_time)
    qs = quickstart.Quickstart(
        setup.runner(agent, deps="ada"), quickstart.script_chat, tools, llm_server
    )
    session = quickstart.check_quickstart(qs, recording)  # its strict replay passes with no ignore=
    saved = {e["name"]: e for e in recording.saved(session.trace_id, 5)}
    assert saved["get_weather"]["metadata"]["chronicle.left_out"] == ["ctx"]
    assert "chronicle.left_out" not in saved["get_time"]["metadata"]
    assert saved["get_time"]["metadata"]["chronicle.framework"] == "pydantic-ai"
    assert users == ["ada"]  # the recorded run only: every replay stubbed get_weather


def test_a_changed_prompt_is_caught_by_a_strict_replay(
    recording: Recording, llm_server: LlmServer, setup: Setup
) -> None:
    chronicle.instrument_pydantic_ai()
    model = setup.chat_model()
    terse = "You are a terse assistant. Use the tools."
    quickstart.check_a_change_is_caught(
        lambda tools: setup.runner(_agent(tools, model)),
        lambda tools: setup.runner(_agent(tools, model, instructions=terse)),
        quickstart.script_chat,
        llm_server,
        recording,
        match="terse",
    )


def test_a_boundary_under_the_tool_decorator_records_each_run_once(
    recording: Recording, llm_server: LlmServer, setup: Setup
) -> None:
    chronicle.instrument_pydantic_ai()
    tools = quickstart.Tools()
    agent: Agent[Any, str] = Agent(setup.chat_model(), instructions=INSTRUCTIONS)
    agent.tool_plain(chronicle.boundary(tools.get_weather))
    agent.tool_plain(chronicle.boundary(tools.get_time))
    quickstart.script_chat(llm_server)
    with chronicle.record("quickstart") as session:
        assert setup.runner(agent)() == quickstart.ANSWER
    assert chronicle.flush(10)
    envelopes = recording.control_plane.trace_envelopes(session.trace_id)
    # The user's own boundaries (named after the methods), not a second one by the tool's name.
    assert sorted(e["name"] for e in envelopes if e["kind"] == "tool") == [
        "Tools.get_time",
        "Tools.get_weather",
    ]
    assert len(envelopes) == 5


def test_uninstrument_restores_pydantic_ai(
    recording: Recording, llm_server: LlmServer, setup: Setup
) -> None:
    before = (FunctionToolset.call_tool, vars(OpenAIChatModel)["client"])
    chronicle.instrument_pydantic_ai()
    chronicle.instrument_pydantic_ai()  # idempotent: one set of patches
    assert FunctionToolset.call_tool is not before[0]
    chronicle.uninstrument_pydantic_ai()
    assert (FunctionToolset.call_tool, vars(OpenAIChatModel)["client"]) == before
    tools = quickstart.Tools()
    quickstart.script_chat(llm_server)
    with chronicle.record("quickstart") as session:
        assert setup.runner(_agent(tools, setup.chat_model()))() == quickstart.ANSWER
    assert chronicle.flush(10)
    assert recording.control_plane.trace_envelopes(session.trace_id) == []


def test_the_documented_example_runs(
    recording: Recording, llm_server: LlmServer, setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "t")
    quickstart.script_responses(llm_server)
    with quickstart.documented_example("pydantic-ai.md", recording) as example:
        try:
            result = setup.loop.run_until_complete(example["main"]())
        finally:
            setup.loop.run_until_complete(example["agent"].model.client.close())
    quickstart.assert_example_ran(result, recording, llm_server, "openai.responses.create")
