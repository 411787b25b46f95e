"""What every framework module checks, on the framework's own quickstart agent.

The quickstart: an agent with two tools, ``get_weather(city)`` and ``get_time(city)``, asked
"What is the weather and the time in Paris?", answered by a scripted model in three calls (ask
for ``get_weather``, ask for ``get_time``, say the answer). ``script_chat(server)`` and
``script_responses(server)`` queue those three replies on an ``LlmServer`` in the Chat
Completions or the Responses wire format; ``Tools`` holds the two tool functions (plain, with no
Chronicle decorator) and counts their runs.

A framework module builds its agent from these, with ``chronicle.instrument_<framework>()`` on
(``instrumenting`` makes the autouse fixture), and calls ``check_quickstart(...)`` (or
``check_quickstart_of``, which also builds the tools and checks the instrumentor recorded them),
which records one run, then replays it four ways, asserting what a user relies on at each step
(see its docstring). The checks every module shares are here too: ``check_a_change_is_caught``,
``check_twice_and_undone``, ``check_a_boundary_tool_is_recorded_once``,
``check_a_context_tool_replays_strictly``, and ``documented_example``/``openai_example`` for the
example of ``docs/frameworks/<page>``.
"""

from __future__ import annotations

import contextlib
import json
import linecache
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.integrations.frameworks.patching import FRAMEWORK
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    chat_tool_calls,
    chat_usage,
    gemini_function_calls,
    gemini_text,
    gemini_usage,
    responses_text,
    responses_tool_calls,
    responses_usage,
    tool_call,
)
from tests.support.recording import Recording

QUESTION = "What is the weather and the time in Paris?"
ANSWER = "It is sunny and 21C in Paris, and the time there is 14:05."
TOOL_NAMES = ("get_weather", "get_time")
PAGES = Path(__file__).resolve().parents[2] / "docs" / "frameworks"
EXAMPLE_CONTROL_PLANE = "http://127.0.0.1:8800"
"""The control plane a page's example saves to; the test's takes its place."""
USAGE = ((31, 7), (52, 9), (75, 18))
"""(input, output) tokens of the three model calls, as the scripted server bills them."""
CHAT_CALL = "openai.chat.completions.create"
RESPONSES_CALL = "openai.responses.create"
"""The names of the ``llm`` boundaries of a Chat Completions and of a Responses API call."""


def _script(
    server: LlmServer,
    asks: Callable[..., Any],
    says: Callable[..., Any],
    usage: Callable[..., Any],
    **reply: Any,
) -> None:
    """Queue the quickstart's three replies built by one wire format's builders: ``asks`` for
    ``get_weather``, then ``get_time``, then ``says`` the answer, each billed ``usage(*USAGE[i])``
    and given ``reply`` (``model=...``)."""
    weather, time = (tool_call(name, {"city": "Paris"}) for name in TOOL_NAMES)
    server.reply_with(asks(weather, usage=usage(*USAGE[0]), **reply))
    server.reply_with(asks(time, usage=usage(*USAGE[1]), **reply))
    server.reply_with(says(ANSWER, usage=usage(*USAGE[2]), **reply))


def instrumenting(
    instrument: Callable[[], object], uninstrument: Callable[[], object]
) -> Callable[[], Iterator[None]]:
    """An autouse fixture for a framework's module: ``instrument()`` before each test,
    ``uninstrument()`` after it, even when it failed (the instrumentation is process-wide)."""

    @pytest.fixture(autouse=True)
    def instrumented() -> Iterator[None]:
        instrument()
        try:
            yield
        finally:
            uninstrument()

    return instrumented


def script_chat(server: LlmServer, **reply: Any) -> None:
    """Queue the quickstart's three Chat Completions replies (given ``reply``: ``model=...``)."""
    _script(server, chat_tool_calls, chat_text, chat_usage, **reply)


def script_responses(server: LlmServer) -> None:
    """Queue the quickstart's three Responses API replies."""
    _script(server, responses_tool_calls, responses_text, responses_usage)


def script_gemini(server: LlmServer) -> None:
    """Queue the quickstart's three Gemini ``generateContent`` replies."""
    _script(server, gemini_function_calls, gemini_text, gemini_usage)


@dataclass
class Tools:
    """The quickstart's two tools as plain functions, counting their runs."""

    runs: list[str] = field(default_factory=list)

    def get_weather(self, city: str) -> str:
        """Get the current weather in a city."""
        self.runs.append("get_weather")
        return json.dumps({"city": city, "sky": "sunny", "celsius": 21})

    def get_time(self, city: str) -> str:
        """Get the local time in a city."""
        self.runs.append("get_time")
        return f"14:05 in {city}"


@dataclass
class Quickstart:
    """One framework's quickstart, as ``check_quickstart`` drives it.

    ``run()`` runs the agent once on ``QUESTION`` and returns its final text; ``script(server)``
    queues the three model replies; ``tools`` counts tool runs; ``server`` counts model requests.
    ``model_boundary`` is the name of the ``llm`` boundaries the model calls make.
    """

    run: Callable[[], str]
    script: Callable[[LlmServer], None]
    tools: Tools
    server: LlmServer
    model_boundary: str = CHAT_CALL
    usage: bool = True
    """Whether the model calls report their tokens (a chat stream does only when the framework
    asks for ``stream_options={"include_usage": True}``)."""

    @classmethod
    def on_responses(cls, run: Callable[[], str], tools: Tools, server: LlmServer) -> Quickstart:
        """The quickstart of an agent on the Responses API: ``script_responses`` queues its
        replies and its model calls are ``openai.responses.create`` boundaries."""
        return cls(run, script_responses, tools, server, model_boundary=RESPONSES_CALL)


def _saved_calls(recording: Recording, trace_id: str, count: int) -> list[dict[str, Any]]:
    return recording.saved(trace_id, count)


def check_quickstart(qs: Quickstart, recording: Recording) -> chronicle.Session:
    """Record one run, then replay it; every step asserts what a user relies on.

    1. Recorded: three ``llm`` envelopes and two ``tool`` envelopes named ``get_weather`` and
       ``get_time``, each tool with ``{"city": "Paris"}`` as its input and its result as output,
       each model call with its tokens, every one of them inside the request span.
    2. All stubbed: the agent gives the same answer with 0 model requests and 0 tool runs.
    3. ``ReplayPlan().run("get_time")``: only that tool runs, once.
    4. Strict replay of unchanged code: no divergence.
    Returns the recorded session (its ``trace_id`` and ``span_id``).
    """
    qs.script(qs.server)
    with chronicle.record("quickstart") as session:
        answer = qs.run()
    assert answer.strip() == ANSWER
    assert qs.tools.runs == ["get_weather", "get_time"]
    envelopes = _saved_calls(recording, session.trace_id, 5)
    llm = [e for e in envelopes if e["kind"] == "llm"]
    tools = [e for e in envelopes if e["kind"] == "tool"]
    assert [e["name"] for e in llm] == [qs.model_boundary] * 3, envelopes
    assert [e["name"] for e in tools] == list(TOOL_NAMES), envelopes
    for envelope in tools:
        assert envelope["input"]["raw"] == {"city": "Paris"}, envelope["input"]
    assert "sunny" in json.dumps(tools[0]["output"]["raw"])
    assert "14:05" in json.dumps(tools[1]["output"]["raw"])
    if qs.usage:
        tokens = [(e["output"]["usage"]["input"], e["output"]["usage"]["output"]) for e in llm]
        assert tokens == list(USAGE), tokens
    assert {e["span_id"] for e in envelopes} == {session.span_id}

    def replay(plan: chronicle.ReplayPlan | None = None, *, strict: bool = False) -> str:
        requests = len(qs.server.requests)
        qs.tools.runs.clear()
        with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=strict):
            answer = qs.run()
        assert len(qs.server.requests) == requests, "a replayed model call reached the server"
        return answer

    assert replay().strip() == ANSWER
    assert qs.tools.runs == [], "a stubbed tool ran"
    assert replay(chronicle.ReplayPlan().run("get_time")).strip() == ANSWER
    assert qs.tools.runs == ["get_time"]
    assert replay(strict=True).strip() == ANSWER
    return session


def check_quickstart_of(
    build: Callable[[Tools], Callable[[], str]],
    script: Callable[[LlmServer], None],
    server: LlmServer,
    recording: Recording,
    framework: str | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """``check_quickstart`` of the run ``build(tools)`` makes with the quickstart's ``Tools``,
    its replies queued by ``script`` (``options``: the ``Quickstart``'s ``model_boundary`` and
    ``usage``), each tool call recorded by ``framework``'s instrumentor when it is given
    (``chronicle.framework`` in its metadata); the two tool envelopes saved."""
    tools = Tools()
    qs = Quickstart(build(tools), script, tools, server, **options)
    session = check_quickstart(qs, recording)
    saved = [e for e in recording.saved(session.trace_id, 5) if e["kind"] == "tool"]
    if framework is not None:
        assert [e["metadata"][FRAMEWORK] for e in saved] == [framework] * 2, saved
    return saved


@contextlib.contextmanager
def documented_example(page: str, recording: Recording, **names: Any) -> Iterator[dict[str, Any]]:
    """The names the python example of ``docs/frameworks/<page>`` defines, run as a module.

    The example saves to the test's control plane in place of the one it names; ``names`` are
    set before it runs. While the block lasts its source is in ``linecache`` under the page's
    name, so tracebacks show its lines and a framework that reads a tool's source (smolagents'
    ``@tool``) finds it.
    """
    (code,) = re.findall(r"```python\n(.*?)```", (PAGES / page).read_text(), flags=re.S)
    code = code.replace(EXAMPLE_CONTROL_PLANE, recording.control_plane.url)
    filename = f"<{page}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    try:
        namespace: dict[str, Any] = {"__name__": "example", **names}
        exec(compile(code, filename, "exec"), namespace)
        yield namespace
    finally:
        linecache.cache.pop(filename, None)


def assert_example_ran(
    result: tuple[chronicle.Session, str],
    recording: Recording,
    server: LlmServer,
    model_boundary: str = "openai.chat.completions.create",
) -> list[dict[str, Any]]:
    """The example's ``main()`` answered, recorded the quickstart's five calls, and its replay
    sent the model server nothing; returns the saved envelopes."""
    session, answer = result
    assert answer.strip() == ANSWER
    assert len(server.requests) == 3  # the replay made none
    envelopes = recording.saved(session.trace_id, 5)
    assert sorted(e["name"] for e in envelopes) == sorted([*TOOL_NAMES, *[model_boundary] * 3])
    return envelopes


def openai_example(
    page: str,
    recording: Recording,
    server: LlmServer,
    monkeypatch: pytest.MonkeyPatch,
    script: Callable[[LlmServer], None] = script_chat,
) -> contextlib.AbstractContextManager[dict[str, Any]]:
    """``documented_example(page, recording)`` for an example whose OpenAI client reads its
    server and key from the environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``: set to
    ``server``'s), with the quickstart's replies queued by ``script``."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "t")
    script(server)
    return documented_example(page, recording)


def check_a_boundary_tool_is_recorded_once(
    build: Callable[[Tools], Callable[[], object]],
    script: Callable[[LlmServer], None],
    server: LlmServer,
    recording: Recording,
    framework: str,
) -> None:
    """The run ``build(tools)`` makes, whose tools are ``@chronicle.boundary`` functions, records
    each tool call once, as its own boundary (no ``framework`` metadata key: not the
    instrumentor's), with its arguments."""
    script(server)
    with chronicle.record("quickstart") as session:
        build(Tools())()
    envelopes = recording.saved(session.trace_id, 5)
    tools = [e for e in envelopes if e["kind"] == "tool"]
    assert [e["name"] for e in tools] == list(TOOL_NAMES), envelopes
    assert framework not in tools[0]["metadata"]  # its own boundary, not the instrumentor's
    assert tools[0]["input"]["raw"] == {"city": "Paris"}


def check_a_context_tool_replays_strictly(
    run: Callable[[], str],
    script: Callable[[LlmServer], None],
    server: LlmServer,
    recording: Recording,
    runs: list[str],
    left_out: list[str],
) -> None:
    """A ``get_weather`` tool taking the framework's context beside ``city`` (appending to
    ``runs`` when it runs): recorded with ``{"city": "Paris"}`` as its input and the context's
    parameters named in ``chronicle.left_out`` (``left_out``), and a strict replay of ``run()``
    answers ``ANSWER`` without running it."""
    script(server)
    with chronicle.record("quickstart") as session:
        run()
    envelopes = recording.saved(session.trace_id, 5)
    weather = next(e for e in envelopes if e["name"] == "get_weather")
    assert weather["input"]["raw"] == {"city": "Paris"}
    assert weather["metadata"]["chronicle.left_out"] == left_out
    runs.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        assert run().strip() == ANSWER
    assert runs == []


def check_twice_and_undone(
    instrument: Callable[[], None],
    uninstrument: Callable[[], None],
    build: Callable[[Tools], Callable[[], object]],
    script: Callable[[LlmServer], None],
    server: LlmServer,
    recording: Recording,
) -> None:
    """Instrumenting twice still records each call once (5 envelopes); uninstrumenting (twice,
    harmlessly) records nothing while the tools still run. ``build(tools)`` makes the run."""
    instrument()  # again: still one boundary per call
    counts = Tools()
    script(server)
    with chronicle.record("quickstart") as session:
        build(counts)()
    assert len(recording.saved(session.trace_id, 5)) == 5

    uninstrument()
    uninstrument()  # harmless twice
    script(server)
    with chronicle.record("quickstart") as session:
        build(counts)()
    assert counts.runs == ["get_weather", "get_time"] * 2
    assert chronicle.flush(10)
    assert recording.control_plane.trace_envelopes(session.trace_id) == []


def check_a_change_is_caught(
    build: Callable[[Tools], Callable[[], object]],
    changed: Callable[[Tools], Callable[[], object]],
    script: Callable[[LlmServer], None],
    server: LlmServer,
    recording: Recording,
    *,
    model_call: str = "openai.chat.completions.create",
    strict_raises: type[BaseException] = chronicle.ReplayDivergenceError,
    match: str | None = None,
) -> pytest.ExceptionInfo[BaseException]:
    """One run recorded (``build(tools)``, answering ``ANSWER``); the same agent with what it
    asks changed (``changed(tools)``) replays with its first ``model_call`` as a divergence, and
    fails under a strict replay (raising ``strict_raises``, its message matching ``match``;
    returned for a framework that wraps it); no replayed model call reaches the server."""
    counts = Tools()
    script(server)
    with chronicle.record("quickstart") as session:
        assert ANSWER in str(build(counts)())
    recording.saved(session.trace_id, 5)
    requests = len(server.requests)
    run_changed = changed(counts)

    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        run_changed()
    divergences = run.divergences()
    assert divergences, "a changed agent replayed with no divergence"
    assert divergences[0].name == model_call, divergences

    with (
        pytest.raises(strict_raises, match=match) as failed,
        chronicle.replay_trace(session.trace_id, session.span_id, strict=True),
    ):
        run_changed()
    assert len(server.requests) == requests, "a replayed model call reached the server"
    return failed
