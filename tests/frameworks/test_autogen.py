"""AutoGen AgentChat's quickstart agent, recorded and replayed: ``chronicle.instrument_autogen()``.

The agent is the quickstart's ``AssistantAgent`` with ``reflect_on_tool_use=True``, given the two
tools as plain functions (AutoGen makes each a ``FunctionTool``; no Chronicle decorator) and
``max_tool_iterations=2`` so it asks for ``get_weather``, then ``get_time``, then reflects: the
reflection is the quickstart's third model call. The replies are ``quickstart.py``'s three, naming
the model snapshot OpenAI answers ``gpt-4o`` with (``gpt-4o-2024-08-06``), as AutoGen expects
(it warns when the answering model is not the one it resolved).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent  # type: ignore[import-not-found,unused-ignore]
from autogen_agentchat.messages import TextMessage  # type: ignore[import-not-found,unused-ignore]
from autogen_ext.models.openai import (  # type: ignore[import-not-found,unused-ignore]
    OpenAIChatCompletionClient,
)

import chronicle
from chronicle.integrations.frameworks.patching import FRAMEWORK, LEFT_OUT
from tests.frameworks import quickstart
from tests.support.llm_server import LlmServer
from tests.support.recording import Recording

instrumented = quickstart.instrumenting(
    chronicle.instrument_autogen, chronicle.uninstrument_autogen
)


SNAPSHOT = "gpt-4o-2024-08-06"


def script_chat(server: LlmServer) -> None:
    """The quickstart's three Chat Completions replies, from the model ``gpt-4o`` resolves to."""
    quickstart.script_chat(server, model=SNAPSHOT)


def agent_run(
    server: LlmServer,
    counts: quickstart.Tools,
    question: str = quickstart.QUESTION,
    *,
    stream: bool = False,
    decorated: bool = False,
) -> Callable[[], str]:
    """Build the quickstart agent and run it once on ``question``; its last message's text.

    ``stream``: the model client streams (``model_client_stream=True``), asking for the usage
    chunk the way AutoGen's docs say to (``stream_options``), so tokens are counted.
    ``decorated``: ``get_weather`` is a ``@chronicle.boundary`` of its own.
    """

    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return counts.get_weather(city)

    if decorated:
        get_weather = chronicle.boundary("get_weather")(get_weather)

    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return counts.get_time(city)

    async def main() -> str:
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
        model_client = OpenAIChatCompletionClient(
            model="gpt-4o", base_url=server.openai_base_url, api_key="t", **extra
        )
        agent = AssistantAgent(
            name="assistant",
            model_client=model_client,
            tools=[get_weather, get_time],
            system_message="You are a helpful assistant.",
            reflect_on_tool_use=True,
            max_tool_iterations=2,
            model_client_stream=stream,
        )
        try:
            result = await agent.run(task=question)
        finally:
            await model_client.close()
        last = result.messages[-1]
        assert isinstance(last, TextMessage), result.messages
        return str(last.content)

    return lambda: asyncio.run(main())


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "model_client_stream"])
def test_assistant_agent_quickstart(
    llm_server: LlmServer, recording: Recording, stream: bool
) -> None:
    run = functools.partial(agent_run, llm_server, stream=stream)
    tools = quickstart.check_quickstart_of(run, script_chat, llm_server, recording, "autogen")
    for envelope in tools:
        assert envelope["metadata"][LEFT_OUT] == ["cancellation_token", "call_id"]


def test_a_changed_prompt_is_caught(llm_server: LlmServer, recording: Recording) -> None:
    quickstart.check_a_change_is_caught(
        lambda counts: agent_run(llm_server, counts),
        lambda counts: agent_run(llm_server, counts, "What is the weather in Lyon?"),
        script_chat,
        llm_server,
        recording,
    )


def test_instrument_is_idempotent_and_undone(llm_server: LlmServer, recording: Recording) -> None:
    quickstart.check_twice_and_undone(
        chronicle.instrument_autogen,
        chronicle.uninstrument_autogen,
        lambda counts: agent_run(llm_server, counts),
        script_chat,
        llm_server,
        recording,
    )


def test_the_documented_example_runs(
    recording: Recording, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quickstart.openai_example(
        "autogen.md", recording, llm_server, monkeypatch, script_chat
    ) as example:
        quickstart.assert_example_ran(asyncio.run(example["main"]()), recording, llm_server)


def test_a_boundary_tool_is_recorded_once(llm_server: LlmServer, recording: Recording) -> None:
    """A tool function that is a ``@chronicle.boundary`` already records itself, once."""
    quickstart.check_a_boundary_tool_is_recorded_once(
        lambda tools: agent_run(llm_server, tools, decorated=True),
        script_chat,
        llm_server,
        recording,
        FRAMEWORK,
    )
