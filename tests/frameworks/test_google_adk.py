"""Google ADK's quickstart agent (an ``Agent`` with two function tools, run by a runner) under
``chronicle.instrument_google_adk()``, with plain functions as tools and no decorator, against a
local server speaking Gemini's wire format.

Runs in an environment of its own (``make test-frameworks``): ADK pins an older google-genai.
No ``from __future__ import annotations``: ADK reads a tool's annotations at run time.
"""

import asyncio
import gc
import re
from collections.abc import Iterator

import pytest

import chronicle
from tests.frameworks import quickstart
from tests.support.llm_server import LlmServer
from tests.support.recording import Recording

pytest.importorskip("google.adk", reason="make test-frameworks runs this module")
# ADK keeps a google-genai client per event loop and never closes it: its kept-alive connection
# to the model server is closed when the collector finalizes it (``_instrumented`` collects after
# each test, so it happens here, not at the session's end), which warns (Chronicle off too).
pytestmark = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")

from google.adk.agents import Agent  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.adk.tools import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

GENERATE = "genai.models.generate_content"


@pytest.fixture(autouse=True)
def _instrumented(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", llm_server.gemini_base_url)
    monkeypatch.setenv("GOOGLE_API_KEY", "t")
    chronicle.instrument_google_adk()
    yield
    chronicle.uninstrument_google_adk()
    gc.collect()


def _ask(agent: Agent, question: str = quickstart.QUESTION) -> str:
    async def main() -> str:
        runner = InMemoryRunner(agent=agent, app_name="weather_app")
        session = await runner.session_service.create_session(app_name="weather_app", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text=question)])
        answer = ""
        async for event in runner.run_async(
            user_id="u", session_id=session.id, new_message=message
        ):
            if event.is_final_response() and event.content and event.content.parts:
                answer = event.content.parts[0].text or ""
        await runner.close()
        return answer

    return asyncio.run(main())


def test_quickstart_records_and_replays(llm_server: LlmServer, recording: Recording) -> None:
    tools = quickstart.Tools()

    def run() -> str:
        agent = Agent(
            name="weather_time_agent",
            model="gemini-2.0-flash",
            description="Answers questions about the time and weather in a city.",
            instruction="You are a helpful agent who can answer about the time and weather.",
            tools=[tools.get_weather, tools.get_time],
        )
        return _ask(agent)

    quickstart.check_quickstart(
        quickstart.Quickstart(
            run, quickstart.script_gemini, tools, llm_server, model_boundary=GENERATE
        ),
        recording,
    )


def test_a_changed_instruction_is_caught(llm_server: LlmServer, recording: Recording) -> None:
    tools = quickstart.Tools()
    instruction = ["You answer questions about cities."]

    def run() -> str:
        agent = Agent(
            name="weather_time_agent",
            model="gemini-2.0-flash",
            instruction=instruction[0],
            tools=[tools.get_weather, tools.get_time],
        )
        return _ask(agent)

    quickstart.script_gemini(llm_server)
    with chronicle.record("quickstart") as session:
        assert run().strip() == quickstart.ANSWER
    recording.saved(session.trace_id, 5)
    instruction[0] = "You answer questions about cities, briefly."
    with pytest.raises(chronicle.ReplayDivergenceError, match=re.escape(GENERATE)):
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
            run()


def test_the_tool_context_is_left_out(llm_server: LlmServer, recording: Recording) -> None:
    runs: list[str] = []

    def get_weather(city: str, tool_context: ToolContext) -> str:
        """Get the current weather in a city."""
        runs.append(city)
        tool_context.state["last_city"] = city
        return f"Sunny and 21C in {city}"

    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return f"14:05 in {city}"

    def run() -> str:
        agent = Agent(name="a", model="gemini-2.0-flash", tools=[get_weather, get_time])
        return _ask(agent)

    quickstart.check_a_context_tool_replays_strictly(
        run, quickstart.script_gemini, llm_server, recording, runs, ["tool_context"]
    )


def test_the_documented_example_runs(recording: Recording, llm_server: LlmServer) -> None:
    quickstart.script_gemini(llm_server)
    with quickstart.documented_example("google-adk.md", recording) as example:
        quickstart.assert_example_ran(
            asyncio.run(example["main"]()), recording, llm_server, GENERATE
        )
