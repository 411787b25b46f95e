"""smolagents' quickstart agents, recorded and replayed with ``chronicle.instrument_smolagents()``.

The tools are plain ``@tool`` functions with no Chronicle decorator. smolagents' quickstart does
not end the way ``quickstart.py``'s script does: a ``ToolCallingAgent`` answers by calling its
``final_answer`` tool, and a ``CodeAgent`` answers with code, so this module scripts its own three
model replies (same tools, arguments, tokens and answer) and hands them to ``check_quickstart``.
``final_answer`` is not a boundary (see the module), so the recording still holds three model
calls and two tool calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from smolagents import (  # type: ignore[import-untyped]
    CodeAgent,
    OpenAIServerModel,
    Tool,
    ToolCallingAgent,
    tool,
)

import chronicle
from chronicle.integrations.frameworks.patching import FRAMEWORK
from tests.frameworks import quickstart
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    chat_tool_calls,
    chat_usage,
    tool_call,
)
from tests.support.recording import Recording

instrumented = quickstart.instrumenting(
    chronicle.instrument_smolagents, chronicle.uninstrument_smolagents
)


def smol_tools(counts: quickstart.Tools) -> list[Tool]:
    """The quickstart's two tools, as smolagents' docs write them: ``@tool`` and nothing else."""

    @tool  # type: ignore[untyped-decorator]
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city to look up.
        """
        return counts.get_weather(city)

    @tool  # type: ignore[untyped-decorator]
    def get_time(city: str) -> str:
        """Get the local time in a city.

        Args:
            city: The city to look up.
        """
        return counts.get_time(city)

    return [get_weather, get_time]


def script_tool_calling(server: LlmServer) -> None:
    """The three replies a ``ToolCallingAgent`` needs: two tool calls, then ``final_answer``."""
    server.reply_with(
        chat_tool_calls(
            tool_call("get_weather", {"city": "Paris"}), usage=chat_usage(*quickstart.USAGE[0])
        ),
        chat_tool_calls(
            tool_call("get_time", {"city": "Paris"}), usage=chat_usage(*quickstart.USAGE[1])
        ),
        chat_tool_calls(
            tool_call("final_answer", {"answer": quickstart.ANSWER}),
            usage=chat_usage(*quickstart.USAGE[2]),
        ),
    )


def script_code(server: LlmServer) -> None:
    """The three replies a ``CodeAgent`` needs: code calling each tool (one positionally), then
    code calling ``final_answer``."""
    server.reply_with(
        chat_text(
            "Thought: weather first.\n<code>\nprint(get_weather(city='Paris'))\n</code>",
            usage=chat_usage(*quickstart.USAGE[0]),
        ),
        chat_text(
            "Thought: now the time.\n<code>\nprint(get_time('Paris'))\n</code>",
            usage=chat_usage(*quickstart.USAGE[1]),
        ),
        chat_text(
            f"Thought: done.\n<code>\nfinal_answer({quickstart.ANSWER!r})\n</code>",
            usage=chat_usage(*quickstart.USAGE[2]),
        ),
    )


def model(server: LlmServer) -> OpenAIServerModel:
    return OpenAIServerModel(model_id="gpt-4o", api_base=server.openai_base_url, api_key="t")


def tool_calling_run(
    server: LlmServer,
    counts: quickstart.Tools,
    question: str = quickstart.QUESTION,
    *,
    stream: bool = False,
) -> Callable[[], str]:
    """A fresh quickstart ``ToolCallingAgent`` run once on ``question`` (``stream``: with
    ``stream_outputs=True``, so the model streams)."""

    def run() -> str:
        agent = ToolCallingAgent(
            tools=smol_tools(counts), model=model(server), stream_outputs=stream
        )
        return str(agent.run(question))

    return run


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream_outputs"])
def test_tool_calling_agent_quickstart(
    llm_server: LlmServer, recording: Recording, stream: bool
) -> None:
    run = functools.partial(tool_calling_run, llm_server, stream=stream)
    quickstart.check_quickstart_of(run, script_tool_calling, llm_server, recording, "smolagents")


def test_code_agent_quickstart(llm_server: LlmServer, recording: Recording) -> None:
    """A tool called from the model's code is a boundary too, its positional argument named."""

    def code_agent(tools: quickstart.Tools) -> Callable[[], str]:
        def run() -> str:
            agent = CodeAgent(tools=smol_tools(tools), model=model(llm_server))
            return str(agent.run(quickstart.QUESTION))

        return run

    quickstart.check_quickstart_of(code_agent, script_code, llm_server, recording)


def test_a_changed_prompt_is_caught(llm_server: LlmServer, recording: Recording) -> None:
    failed = quickstart.check_a_change_is_caught(
        lambda counts: tool_calling_run(llm_server, counts),
        lambda counts: tool_calling_run(llm_server, counts, "What is the weather in Lyon?"),
        script_tool_calling,
        llm_server,
        recording,
        strict_raises=Exception,
    )
    # Strict: the run fails on it, even though smolagents wraps the error it raised.
    assert "diverged" in str(failed.value)
    assert _chain_has(failed.value, chronicle.ReplayDivergenceError), failed.value


def test_instrument_is_idempotent_and_undone(llm_server: LlmServer, recording: Recording) -> None:
    quickstart.check_twice_and_undone(
        chronicle.instrument_smolagents,
        chronicle.uninstrument_smolagents,
        lambda counts: tool_calling_run(llm_server, counts),
        script_tool_calling,
        llm_server,
        recording,
    )


def test_the_documented_example_runs(
    recording: Recording, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # @tool reads its function's source: quickstart.documented_example gives it the example's lines.
    page, script = "smolagents.md", script_tool_calling
    with quickstart.openai_example(page, recording, llm_server, monkeypatch, script) as example:
        quickstart.assert_example_ran(example["main"](), recording, llm_server)


def _chain_has(error: BaseException | None, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


@pytest.mark.filterwarnings("ignore:Function 'get_weather' has decorators other than @tool")
def test_a_boundary_under_tool_is_recorded_once(
    llm_server: LlmServer, recording: Recording
) -> None:
    """``@chronicle.boundary`` under ``@tool`` (the README's way before the instrumentor) keeps
    working: that tool is recorded once, by its own boundary."""
    counts = quickstart.Tools()

    @tool  # type: ignore[untyped-decorator]
    @chronicle.boundary("get_weather")
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city to look up.
        """
        return counts.get_weather(city)

    def run() -> str:
        _, get_time = smol_tools(counts)
        agent = ToolCallingAgent(tools=[get_weather, get_time], model=model(llm_server))
        answer = str(agent.run(quickstart.QUESTION))
        assert answer == quickstart.ANSWER
        return answer

    quickstart.check_a_boundary_tool_is_recorded_once(
        lambda _: run, script_tool_calling, llm_server, recording, FRAMEWORK
    )
