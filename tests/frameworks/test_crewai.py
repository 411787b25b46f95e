"""CrewAI's quickstart crew, recorded and replayed: ``chronicle.instrument_crewai()``.

The crew is CrewAI's documented shape: one ``Agent(role, goal, backstory, tools=[...], llm=LLM(
model="gpt-4o", ...))`` given two plain ``@tool`` functions (no Chronicle decorator), one
``Task(description, expected_output, agent)`` and ``Crew(...).kickoff()``. ``gpt-4o`` calls its
tools natively (the scripted replies are ``quickstart.py``'s); an ``o1`` model has no function
calling, so CrewAI falls back to its ReAct text format, scripted here in CrewAI's own words
(``Action:``/``Action Input:``, then ``Final Answer:``).

Offline: CrewAI's anonymous telemetry (an OTLP exporter to telemetry.crewai.com) is turned off with
``CREWAI_DISABLE_TELEMETRY`` (not ``OTEL_SDK_DISABLED``, which would turn off the OpenTelemetry SDK
Chronicle records with), its trace upload with ``CREWAI_TRACING_ENABLED=false``, and the
files it writes go to temporary directories: what importing it writes under the home directory
(a settings folder, a secret key) and each kickoff's output database (``CREWAI_STORAGE_DIR``).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import gc
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

_HOME = tempfile.mkdtemp(prefix="crewai-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
for _variable, _folder in (("HOME", ""), ("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config")):
    os.environ[_variable] = os.path.join(_HOME, _folder)

with warnings.catch_warnings():
    # CrewAI's own import order: "Cannot set an attribute on 'crewai.rag' for child module".
    warnings.simplefilter("ignore", ImportWarning)
    from crewai import LLM, Agent, Crew, Task  # type: ignore[import-not-found,unused-ignore]
    from crewai.llms.hooks.base import (  # type: ignore[import-not-found,unused-ignore]
        BaseInterceptor,
    )
    from crewai.tools import BaseTool, tool  # type: ignore[import-not-found,unused-ignore]
    from crewai.tools.structured_tool import (  # type: ignore[import-not-found,unused-ignore]
        CrewStructuredTool,
    )

import chronicle  # noqa: E402
from chronicle.integrations.frameworks.crewai import TOKEN_COUNT  # noqa: E402
from chronicle.integrations.frameworks.patching import FRAMEWORK, LEFT_OUT  # noqa: E402
from tests.frameworks import quickstart  # noqa: E402
from tests.support.llm_server import (  # noqa: E402
    LlmServer,
    chat_text,
    chat_tool_calls,
    chat_usage,
    tool_call,
)
from tests.support.recording import Recording  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    # CrewAI reads its own deprecated fields (function_calling_llm, allow_code_execution) as it
    # builds and runs a crew
    "ignore::DeprecationWarning:crewai.*",
    # CrewAI never closes the HTTP clients its LLMs build: a kept-alive connection is closed when
    # the garbage collector finalizes the client (see ``offline``), which warns
    "ignore:unclosed <socket:ResourceWarning",
)

CHAT = "openai.chat.completions.create"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """CrewAI with no telemetry, no trace upload, its kickoff database under ``tmp_path``; the
    test's unused crews and clients collected at its end, while their warning is ignored."""
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    chronicle.instrument_crewai()
    yield
    chronicle.uninstrument_crewai()
    gc.collect()


def script_react(server: LlmServer) -> None:
    """The quickstart's three replies in CrewAI's ReAct text format (a model without function
    calling): an action for each tool, then the final answer."""
    for name, (tokens_in, tokens_out) in zip(
        ("get_weather", "get_time"), quickstart.USAGE, strict=False
    ):
        server.reply_with(
            chat_text(
                f'Thought: I need {name}.\nAction: {name}\nAction Input: {{"city": "Paris"}}',
                usage=chat_usage(tokens_in, tokens_out),
            )
        )
    server.reply_with(
        chat_text(
            f"Thought: I now know the final answer\nFinal Answer: {quickstart.ANSWER}",
            usage=chat_usage(*quickstart.USAGE[2]),
        )
    )


def crew_run(
    server: LlmServer,
    counts: quickstart.Tools,
    description: str = quickstart.QUESTION,
    *,
    model: str = "gpt-4o",
    api: str = "completions",
    asynchronous: bool = False,
    subclass: bool = False,
    decorated: bool = False,
    weather_limit: int | None = None,
    cache: bool = False,
    interceptor: Any = None,
) -> Callable[[], str]:
    """Build the quickstart crew and kick it off once; its final answer.

    ``subclass``: ``get_time`` is a ``BaseTool`` subclass with ``_run`` instead of a ``@tool``.
    ``decorated``: ``get_weather``'s function is a ``@chronicle.boundary`` of its own.
    ``weather_limit``: ``get_weather``'s ``max_usage_count``; ``cache``: the crew caches tool
    results (``Crew(cache=True)``, CrewAI's opt-in).
    """

    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return counts.get_weather(city)

    if decorated:
        get_weather = chronicle.boundary("get_weather")(get_weather)
    weather_tool = tool(max_usage_count=weather_limit)(get_weather)

    @tool  # type: ignore[untyped-decorator,unused-ignore]
    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return counts.get_time(city)

    class GetTime(BaseTool):  # type: ignore[misc]
        name: str = "get_time"
        description: str = "Get the local time in a city."

        def _run(self, city: str) -> str:
            return counts.get_time(city)

    def run() -> str:
        llm = LLM(
            model=model,
            api=api,
            base_url=server.openai_base_url,
            api_key="t",
            interceptor=interceptor,
        )
        agent = Agent(
            role="Travel assistant",
            goal="Answer questions about cities",
            backstory="You know the weather and the local time everywhere.",
            tools=[weather_tool, GetTime() if subclass else get_time],
            llm=llm,
        )
        task = Task(
            description=description,
            expected_output="One sentence with the weather and the time.",
            agent=agent,
        )
        crew = Crew(agents=[agent], tasks=[task], cache=cache)
        output = asyncio.run(crew.akickoff()) if asynchronous else crew.kickoff()
        return str(output.raw)

    return run


@pytest.mark.parametrize(
    ("options", "script"),
    [
        ({}, quickstart.script_chat),
        ({"asynchronous": True}, quickstart.script_chat),
        ({"api": "responses"}, quickstart.script_responses),
        ({"subclass": True}, quickstart.script_chat),
        ({"model": "o1-mini"}, script_react),
        ({"model": "o1-mini", "asynchronous": True}, script_react),
    ],
    ids=[
        "native",
        "akickoff",
        "responses_api",
        "basetool_subclass",
        "react_text",
        "react_akickoff",
    ],
)
def test_crew_quickstart(
    llm_server: LlmServer,
    recording: Recording,
    options: dict[str, Any],
    script: Callable[[LlmServer], None],
) -> None:
    tools = quickstart.check_quickstart_of(
        functools.partial(crew_run, llm_server, **options),
        script,
        llm_server,
        recording,
        "crewai",
        model_boundary=quickstart.RESPONSES_CALL if options.get("api") == "responses" else CHAT,
    )
    for envelope in tools:
        if options.get("model") == "o1-mini":  # the ReAct path: CrewAI's config is left out
            assert envelope["metadata"][LEFT_OUT] == ["config"]
        else:
            assert LEFT_OUT not in envelope["metadata"]


def test_a_changed_task_description_is_caught(llm_server: LlmServer, recording: Recording) -> None:
    quickstart.check_a_change_is_caught(
        lambda counts: crew_run(llm_server, counts),
        lambda counts: crew_run(llm_server, counts, "What is the weather and the time in Lyon?"),
        quickstart.script_chat,
        llm_server,
        recording,
    )


def _script_twice(server: LlmServer, second_city: str) -> None:
    """The model asks for ``get_weather`` in Paris, then in ``second_city``, then answers."""
    server.reply_with(
        chat_tool_calls(
            tool_call("get_weather", {"city": "Paris"}), usage=chat_usage(*quickstart.USAGE[0])
        ),
        chat_tool_calls(
            tool_call("get_weather", {"city": second_city}), usage=chat_usage(*quickstart.USAGE[1])
        ),
        chat_text(quickstart.ANSWER, usage=chat_usage(*quickstart.USAGE[2])),
    )


@pytest.mark.parametrize(
    ("second_city", "limit"), [("Paris", None), ("Lyon", 1)], ids=["cached", "usage_limit"]
)
def test_cache_and_usage_limit_replay_as_they_ran(
    llm_server: LlmServer, recording: Recording, second_city: str, limit: int | None
) -> None:
    """A second ``get_weather`` call served from CrewAI's tool cache (``Crew(cache=True)``, same
    arguments), or refused by ``max_usage_count=1`` (other arguments), is no tool run live, and
    none in a strict replay: the stubbed first run fills the cache and counts towards the limit
    as a live one does."""
    counts = quickstart.Tools()
    _script_twice(llm_server, second_city)
    run = crew_run(llm_server, counts, weather_limit=limit, cache=limit is None)
    with chronicle.record("quickstart") as session:
        assert run().strip() == quickstart.ANSWER
    assert counts.runs == ["get_weather"]
    envelopes = recording.saved(session.trace_id, 4)
    assert [e["name"] for e in envelopes if e["kind"] == "tool"] == ["get_weather"]
    refusal = str(llm_server.requests[2].body["messages"][-1]["content"])
    if limit:
        assert "usage limit" in refusal, refusal
    else:
        assert "sunny" in refusal, refusal

    requests = len(llm_server.requests)
    counts.runs.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as replay:
        assert run().strip() == quickstart.ANSWER
    assert replay.divergences() == []
    assert counts.runs == []
    assert len(llm_server.requests) == requests


def test_instrument_is_idempotent_and_undone(llm_server: LlmServer, recording: Recording) -> None:
    quickstart.check_twice_and_undone(
        chronicle.instrument_crewai,
        chronicle.uninstrument_crewai,
        lambda counts: crew_run(llm_server, counts),
        quickstart.script_chat,
        llm_server,
        recording,
    )


def test_an_llm_built_before_instrument_is_recorded(
    llm_server: LlmServer, recording: Recording
) -> None:
    """The client of an ``LLM`` made before ``instrument_crewai()`` is wrapped at its first call."""
    chronicle.uninstrument_crewai()
    llm = LLM(model="gpt-4o", base_url=llm_server.openai_base_url, api_key="t")
    chronicle.instrument_crewai()
    llm_server.reply_with(chat_text(quickstart.ANSWER, usage=chat_usage(*quickstart.USAGE[2])))
    with chronicle.record("one call") as session:
        assert llm.call("Say the answer.") == quickstart.ANSWER
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == CHAT
    assert (
        envelope["output"]["usage"]["input"],
        envelope["output"]["usage"]["output"],
    ) == quickstart.USAGE[2]


def test_the_documented_example_runs(
    recording: Recording, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quickstart.openai_example("crewai.md", recording, llm_server, monkeypatch) as example:
        quickstart.assert_example_ran(example["main"](), recording, llm_server, CHAT)


def test_a_boundary_tool_is_recorded_once(llm_server: LlmServer, recording: Recording) -> None:
    """A ``@tool`` whose function is a ``@chronicle.boundary`` already records itself, once."""
    quickstart.check_a_boundary_tool_is_recorded_once(
        lambda tools: crew_run(llm_server, tools, decorated=True),
        quickstart.script_chat,
        llm_server,
        recording,
        FRAMEWORK,
    )


class OpenAICounts(BaseInterceptor[httpx.Request, httpx.Response]):  # type: ignore[misc]
    """A CrewAI interceptor answering OpenAI's token count endpoint (``POST
    /v1/responses/input_tokens``, which the scripted server does not serve) as OpenAI does, with
    ``COUNT`` tokens; every other response is left as it came. (CrewAI counts on the thread
    that makes the request, one at a time.) Each request asks for its connection to be closed:
    the HTTP client CrewAI builds for an interceptor is never closed, and would leave its pooled
    connection open."""

    counting = False

    def on_outbound(self, message: httpx.Request) -> httpx.Request:
        self.counting = message.url.path.endswith("/responses/input_tokens")
        message.headers["Connection"] = "close"
        return message

    def on_inbound(self, message: httpx.Response) -> httpx.Response:
        if not self.counting:
            return message
        message.close()
        body = {"object": "response.input_tokens", "input_tokens": COUNT}
        return httpx.Response(200, json=body)


COUNT = 1234


def test_token_counts_against_openai_are_recorded(
    llm_server: LlmServer, recording: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pointed at OpenAI itself, CrewAI asks it for each request's token count before each model
    call and after each tool result (the agent respects its context window): each count is an
    ``llm`` boundary, so a replay gives the recorded count back and calls nothing."""
    from crewai.llms.providers.openai.completion import OpenAICompletion

    monkeypatch.setattr(OpenAICompletion, "_on_compatible_server", lambda self: False)
    seen: list[int] = []
    counted = OpenAICompletion.get_input_tokens_count

    def count(self: Any, *args: Any, **kwargs: Any) -> int:
        seen.append(counted(self, *args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(OpenAICompletion, "get_input_tokens_count", count)
    counts = quickstart.Tools()
    run = crew_run(llm_server, counts, interceptor=OpenAICounts())
    quickstart.script_chat(llm_server)
    with chronicle.record("quickstart") as session:
        assert run().strip() == quickstart.ANSWER
    assert seen == [COUNT] * 5
    envelopes = recording.saved(session.trace_id, 10)
    names = [e["name"] for e in envelopes]
    assert names.count(TOKEN_COUNT) == 5 and names.count(CHAT) == 3, names
    for envelope in envelopes:  # a count bills no tokens: only the model calls carry usage
        assert ("usage" in envelope["output"]) == (envelope["name"] == CHAT), envelope

    requests = len(llm_server.requests)
    counts.runs.clear()
    seen.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as replay:
        assert run().strip() == quickstart.ANSWER
    assert replay.divergences() == []
    assert (counts.runs, seen) == ([], [COUNT] * 5)
    assert len(llm_server.requests) == requests


def test_awaited_tool_runs_are_boundaries(recording: Recording) -> None:
    """CrewAI 1.15's crews call tools synchronously (``akickoff`` too); an ``async`` tool awaited
    through ``arun``, or through ``ainvoke`` (the async ReAct path) of a structured tool made
    from the function, is recorded and replayed the same way. (``ainvoke`` of a structured tool
    converted from an async ``@tool`` returns an unawaited coroutine in CrewAI itself.)"""
    runs: list[str] = []

    async def get_time(city: str) -> str:
        """Get the local time in a city."""
        runs.append(city)
        return f"14:05 in {city}"

    async def both() -> list[str]:
        return [
            await tool(get_time).arun(city="Paris"),
            await CrewStructuredTool.from_function(get_time).ainvoke({"city": "Lyon"}),
        ]

    with chronicle.record("awaited") as session:
        assert asyncio.run(both()) == ["14:05 in Paris", "14:05 in Lyon"]
    envelopes = recording.saved(session.trace_id, 2)
    assert [(e["name"], e["input"]["raw"]) for e in envelopes] == [
        ("get_time", {"city": "Paris"}),
        ("get_time", {"city": "Lyon"}),
    ]
    assert [e["metadata"].get(LEFT_OUT) for e in envelopes] == [None, ["config"]]
    runs.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        assert asyncio.run(both()) == ["14:05 in Paris", "14:05 in Lyon"]
    assert runs == []
