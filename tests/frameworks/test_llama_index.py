"""LlamaIndex's quickstart agent (``FunctionAgent``, streaming by default) under
``chronicle.instrument_llama_index()``, with plain functions as tools and no decorator.

Runs in an environment of its own (``make test-frameworks``): llama-index-llms-openai pins
``openai<3``. No ``from __future__ import annotations``: LlamaIndex reads a tool's annotations
(``ctx: Context``) at run time.
"""

import asyncio
import json
from typing import Any

import pytest

import chronicle
from tests.frameworks import quickstart
from tests.support.llm_server import LlmServer
from tests.support.recording import Recording

pytest.importorskip("llama_index.core", reason="make test-frameworks runs this module")
# LlamaIndex's workflows read pydantic's deprecated attributes when an agent is built.
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.core.workflow import Context  # noqa: E402
from llama_index.llms.openai import OpenAI  # noqa: E402

_instrumented = quickstart.instrumenting(
    chronicle.instrument_llama_index, chronicle.uninstrument_llama_index
)


def _llm(server: LlmServer) -> OpenAI:
    return OpenAI(model="gpt-4o", api_base=server.openai_base_url, api_key="t", max_retries=0)


def _run(agent: FunctionAgent) -> str:
    async def main() -> str:
        return str(await agent.run(quickstart.QUESTION))

    return asyncio.run(main())


def test_quickstart_records_and_replays(llm_server: LlmServer, recording: Recording) -> None:
    tools = quickstart.Tools()

    def run() -> str:
        agent = FunctionAgent(
            tools=[tools.get_weather, tools.get_time],
            llm=_llm(llm_server),
            system_prompt="You answer questions about cities.",
        )
        return _run(agent)

    session = quickstart.check_quickstart(
        quickstart.Quickstart(run, quickstart.script_chat, tools, llm_server, usage=False),
        recording,
    )
    envelopes = recording.saved(session.trace_id, 5)
    llm = [e for e in envelopes if e["kind"] == "llm"]
    # FunctionAgent streams: each model call is one llm envelope holding the chunks as sent.
    assert all(e["metadata"].get("chronicle.streamed") for e in llm)
    # The tool call as the server sent it, though FunctionAgent grew the first delta in place.
    calls = [b for b in llm[0]["output"]["content"] if b["type"] == "tool_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_a_changed_prompt_is_caught(llm_server: LlmServer, recording: Recording) -> None:
    tools = quickstart.Tools()
    quickstart.script_chat(llm_server)
    prompt = ["You answer questions about cities."]

    def run() -> str:
        agent = FunctionAgent(
            tools=[tools.get_weather, tools.get_time], llm=_llm(llm_server), system_prompt=prompt[0]
        )
        return _run(agent)

    with chronicle.record("quickstart") as session:
        assert run().strip() == quickstart.ANSWER
    recording.saved(session.trace_id, 5)
    prompt[0] = "You answer questions about cities, briefly."
    with pytest.raises(chronicle.ReplayDivergenceError, match=r"openai\.chat\.completions\.create"):
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
            run()


def test_a_context_tool_records_its_own_arguments(
    llm_server: LlmServer, recording: Recording
) -> None:
    """A tool that takes the workflow's ``Context`` replays strictly with no ``ignore=``."""
    runs: list[str] = []

    async def get_weather(ctx: Context, city: str) -> str:
        """Get the current weather in a city."""
        runs.append(city)
        await ctx.store.set("last_city", city)
        return json.dumps({"city": city, "sky": "sunny"})

    async def get_time(city: str) -> str:
        """Get the local time in a city."""
        return f"14:05 in {city}"

    def run() -> str:
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(get_weather), get_time], llm=_llm(llm_server)
        )
        return _run(agent)

    quickstart.check_a_context_tool_replays_strictly(
        run, quickstart.script_chat, llm_server, recording, runs, ["ctx"]
    )


def test_a_direct_tool_call_replays_as_its_tool_output(recording: Recording) -> None:
    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return f"14:05 in {city}"

    tool = FunctionTool.from_defaults(get_time)
    with chronicle.record("direct") as session:
        live: Any = tool.call(city="Paris")
    recording.saved(session.trace_id, 1)
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        replayed: Any = tool.call(city="Paris")
    assert type(replayed) is type(live)
    assert replayed.content == live.content == "14:05 in Paris"


def test_the_documented_example_runs(
    recording: Recording, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", llm_server.openai_base_url)  # LlamaIndex's variable
    monkeypatch.setenv("OPENAI_API_KEY", "t")
    quickstart.script_chat(llm_server)
    with quickstart.documented_example("llama-index.md", recording) as example:
        quickstart.assert_example_ran(asyncio.run(example["main"]()), recording, llm_server)
