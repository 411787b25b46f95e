"""Counted once when the framework traces itself: its span is the parent of Chronicle's.

Pydantic AI's own instrumentation (``Agent.instrument_all()``, or Logfire's
``instrument_pydantic_ai()``) opens a ``chat`` span around each model request and an
``execute_tool`` span around each tool run; Chronicle's wrapped client and decorated tools start
their spans inside those. The quickstart (two tools, three scripted model calls) runs for real
against the local model server, with every span exported to memory beside Chronicle on the same
provider: the token totals must match the bill (3 spans with usage for 3 calls) and the tool
runs must be counted as run (2 ``execute_tool`` spans for 2 runs), while the control plane gets
the same envelopes as always. Where the other span is the child (Logfire's ``instrument_openai``
on a wrapped client), that one keeps the usage, as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import logfire
import openai
import pytest
from openinference.semconv.trace import SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import SpanKind
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import chronicle
from chronicle.testing import LocalControlPlane
from tests.frameworks.quickstart import ANSWER, QUESTION, TOOL_NAMES, USAGE, Tools, script_chat
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, chat_usage, tool_call
from tests.support.logfire_local import offline_logfire
from tests.support.recording import Recording

LLM_SPAN = "openai.chat.completions.create"
BOUNDARY = "chronicle.boundary"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
OPERATION = gen_ai.GEN_AI_OPERATION_NAME
INPUT_TOKENS = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
OUTPUT_TOKENS = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS


@pytest.fixture(autouse=True)
def _no_instrumented_agents() -> Iterator[None]:
    """``Agent.instrument_all`` is process-wide: every test leaves it off."""
    yield
    Agent.instrument_all(False)


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exported: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    yield provider
    provider.shutdown()


def configure(control_plane: LocalControlPlane, provider: object) -> Recording:
    """Chronicle saving to the control plane, recording through ``provider``."""
    chronicle.configure(
        control_plane_url=control_plane.url, tracer_provider=provider, flush_interval=0.05
    )
    return Recording(control_plane)


class Quickstart:
    """The quickstart as Pydantic AI builds it, its model client wrapped by Chronicle and (with
    ``decorated``) each tool a ``@chronicle.boundary`` under Pydantic AI's decorator."""

    def __init__(self, llm_server: LlmServer, tools: Tools, *, decorated: bool = True) -> None:
        self.client = chronicle.wrap(
            openai.AsyncOpenAI(base_url=llm_server.openai_base_url, api_key="t", max_retries=0)
        )
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=self.client))
        self.agent = quickstart_agent(model, tools, decorated=decorated)

    def run(self, question: str = QUESTION) -> str:
        """One run of the agent; the client's connections are closed in the run's own loop."""

        async def run() -> str:
            async with self.client:
                return (await self.agent.run(question)).output

        return asyncio.run(run())


def quickstart_agent(model: OpenAIChatModel, tools: Tools, *, decorated: bool) -> Agent[None, str]:
    """The quickstart's agent and its two tools."""
    agent = Agent(model, instructions="Answer with the tools.")
    boundary: Callable[[Callable[[str], str]], Callable[[str], str]] = (
        chronicle.boundary(kind="tool") if decorated else (lambda fn: fn)
    )

    @agent.tool_plain
    @boundary
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return tools.get_weather(city)

    @agent.tool_plain
    @boundary
    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return tools.get_time(city)

    return agent


def attributes(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


def scope(span: ReadableSpan) -> str:
    """The name of the instrumentation that made ``span``."""
    return span.instrumentation_scope.name if span.instrumentation_scope is not None else ""


def with_usage(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The spans a backend adds up tokens from (either vocabulary)."""
    return [
        span
        for span in spans
        if any(key.startswith(("gen_ai.usage.", "llm.token_count.")) for key in attributes(span))
    ]


def tool_runs(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The spans a backend counts as tool runs (either vocabulary)."""
    return [
        span
        for span in spans
        if attributes(span).get(OPERATION) == "execute_tool" or attributes(span).get(KIND) == "TOOL"
    ]


def assert_counted_once(spans: list[ReadableSpan], framework_scope: str) -> None:
    """3 model calls: 3 spans with their tokens; 2 tool runs: 2 spans saying so; and Chronicle's
    spans still there, demoted, each inside the framework's span of the same call."""
    by_id = {span.context.span_id: span for span in spans}

    def parent_of(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None
        parent = by_id[span.parent.span_id]
        if scope(parent) == "chronicle" and parent.name == "chronicle.request":
            assert span.parent is not None
            return parent_of(parent)  # a boundary outside record() opens a request of its own
        return parent

    counted = with_usage(spans)
    assert len(counted) == 3, [(s.name, dict(attributes(s))) for s in counted]
    for span in counted:
        assert scope(span) == framework_scope
        assert attributes(span)[OPERATION] == "chat"
    billed = sorted((attributes(s)[INPUT_TOKENS], attributes(s)[OUTPUT_TOKENS]) for s in counted)
    assert billed == sorted(USAGE)

    runs = tool_runs(spans)
    assert sorted(attributes(s)[gen_ai.GEN_AI_TOOL_NAME] for s in runs) == sorted(TOOL_NAMES)
    assert {scope(s) for s in runs} == {framework_scope}

    calls = [s for s in spans if attributes(s).get(BOUNDARY) == LLM_SPAN]
    assert len(calls) == 3
    for call in calls:
        shown = attributes(call)
        # No model call of its own: no GenAI operation, named by its boundary, not a client.
        assert (call.name, call.kind) == (LLM_SPAN, SpanKind.INTERNAL)
        assert shown[KIND] == "CHAIN"
        assert OPERATION not in shown
        assert shown[gen_ai.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"  # the model stays
        assert shown[SpanAttributes.LLM_MODEL_NAME] == "gpt-4o-mini"
        assert QUESTION in shown[SpanAttributes.INPUT_VALUE]  # and the messages
        assert parent_of(call) in counted
    for name in TOOL_NAMES:
        # @chronicle.boundary names a nested function by its qualified name; an instrumentor's
        # boundary is named after the tool.
        (tool,) = [
            s
            for s in spans
            if scope(s) == "chronicle"
            and str(attributes(s).get(BOUNDARY, "")).rpartition(".")[2] == name
        ]
        assert tool.name == attributes(tool)[BOUNDARY]  # named by its boundary again
        assert attributes(tool)[KIND] == "CHAIN"
        assert OPERATION not in attributes(tool)
        assert attributes(parent_of(tool))[gen_ai.GEN_AI_TOOL_NAME] == name


def assert_envelopes_unchanged(recording: Recording, session: chronicle.Session) -> None:
    """What the control plane gets does not depend on the span attributes."""
    envelopes = recording.saved(session.trace_id, 5)
    llm = [e for e in envelopes if e["kind"] == "llm"]
    tools = [e for e in envelopes if e["kind"] == "tool"]
    assert [e["name"] for e in llm] == [LLM_SPAN] * 3
    tokens = [(e["output"]["usage"]["input"], e["output"]["usage"]["output"]) for e in llm]
    assert tokens == list(USAGE)
    assert [e["name"].rpartition(".")[2] for e in tools] == list(TOOL_NAMES)
    assert [e["input"]["raw"] for e in tools] == [{"city": "Paris"}] * 2
    assert "14:05" in json.dumps(tools[1]["output"]["raw"])


# ---- Pydantic AI's own instrumentation ------------------------------------------------------


def test_pydantic_ai_instrumented_counts_each_call_and_tool_run_once(
    control_plane, llm_server, provider, exported
):
    recording = configure(control_plane, provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    tools = Tools()
    quickstart = Quickstart(llm_server, tools)
    script_chat(llm_server)

    with chronicle.record("quickstart") as session:
        answer = quickstart.run()

    assert answer == ANSWER
    assert tools.runs == ["get_weather", "get_time"]
    assert_counted_once(list(exported.get_finished_spans()), "pydantic-ai")
    assert_envelopes_unchanged(recording, session)


def test_with_the_instrumentor_and_no_decorator_each_is_counted_once(
    control_plane, llm_server, provider, exported
):
    """``instrument_pydantic_ai()`` beside ``Agent.instrument_all()``: the tools carry no
    decorator and the client is the one the provider builds, and each is still counted once."""
    recording = configure(control_plane, provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    chronicle.instrument_pydantic_ai()
    try:
        tools = Tools()
        provider_ = OpenAIProvider(base_url=llm_server.openai_base_url, api_key="t")
        agent = quickstart_agent(
            OpenAIChatModel("gpt-4o-mini", provider=provider_), tools, decorated=False
        )
        script_chat(llm_server)

        async def run() -> str:
            async with provider_.client:
                return (await agent.run(QUESTION)).output

        with chronicle.record("quickstart") as session:
            assert asyncio.run(run()) == ANSWER
    finally:
        chronicle.uninstrument_pydantic_ai()
    assert tools.runs == ["get_weather", "get_time"]
    assert_counted_once(list(exported.get_finished_spans()), "pydantic-ai")
    assert_envelopes_unchanged(recording, session)


def test_outside_a_request_the_framework_span_is_seen_through_chronicles_own(
    control_plane, llm_server, provider, exported
):
    # No record(): each boundary opens an implicit request span, which sits between the
    # framework's span and Chronicle's.
    configure(control_plane, provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    tools = Tools()
    quickstart = Quickstart(llm_server, tools)
    script_chat(llm_server)

    assert quickstart.run() == ANSWER

    spans = list(exported.get_finished_spans())
    assert sum(s.name == "chronicle.request" for s in spans) == 5
    assert_counted_once(spans, "pydantic-ai")


def test_a_boundary_the_framework_tool_calls_is_a_tool_run_of_its_own(
    control_plane, llm_server, provider, exported
):
    """A differently named tool boundary inside the framework's tool is another run: it counts."""
    configure(control_plane, provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    tools = Tools()
    quickstart = Quickstart(llm_server, tools, decorated=False)

    @chronicle.boundary(kind="tool")
    def clock(city: str) -> str:
        return f"clock of {city}"

    @quickstart.agent.tool_plain
    def get_date(city: str) -> str:
        """Get the local date in a city."""
        return clock(city)

    llm_server.reply_with(
        chat_tool_calls(tool_call("get_date", {"city": "Paris"}), usage=chat_usage(10, 2))
    )
    llm_server.reply_with(chat_text("Today.", usage=chat_usage(20, 3)))

    with chronicle.record("dated"):
        assert quickstart.run("What is the date in Paris?") == "Today."

    runs = tool_runs(list(exported.get_finished_spans()))
    assert sorted(s.name.rpartition(".")[2] for s in runs) == ["clock", "execute_tool get_date"]


# ---- Logfire ----------------------------------------------------------------------------------


@pytest.fixture
def logfire_local(exported: InMemorySpanExporter) -> Iterator[logfire.Logfire]:
    """Logfire configured offline (nothing sent, no console), its spans exported to memory; a
    local instance, so the process's global provider stays as it was."""
    with offline_logfire(SimpleSpanProcessor(exported)) as instance:
        yield instance


def test_logfire_instrumented_pydantic_ai_counts_each_call_and_tool_run_once(
    control_plane, llm_server, logfire_local, exported
):
    recording = configure(control_plane, logfire_local.config.get_tracer_provider())
    logfire_local.instrument_pydantic_ai()
    tools = Tools()
    quickstart = Quickstart(llm_server, tools)
    script_chat(llm_server)

    with chronicle.record("quickstart") as session:
        assert quickstart.run() == ANSWER

    assert tools.runs == ["get_weather", "get_time"]
    assert_counted_once(list(exported.get_finished_spans()), "pydantic-ai")
    assert_envelopes_unchanged(recording, session)


def test_logfire_openai_span_inside_chronicles_keeps_the_usage(
    control_plane, llm_server, logfire_local, exported
):
    """The other side: Logfire's span of the request is the child; it counts, Chronicle's gives
    way at its end: named by its boundary, with no GenAI operation."""
    configure(control_plane, logfire_local.config.get_tracer_provider())
    client = chronicle.wrap(
        openai.OpenAI(base_url=llm_server.openai_base_url, api_key="t", max_retries=0)
    )
    logfire_local.instrument_openai(client)
    llm_server.reply_with(chat_text("hi", usage=chat_usage(12, 3)))

    with client, chronicle.record("one call"):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
        )

    spans = list(exported.get_finished_spans())
    (counted,) = with_usage(spans)
    (chronicles,) = [s for s in spans if attributes(s).get(BOUNDARY) == LLM_SPAN]
    assert scope(counted).startswith("logfire")
    assert counted.parent is not None and counted.parent.span_id == chronicles.context.span_id
    assert attributes(counted)[INPUT_TOKENS] == 12
    assert attributes(counted)[OPERATION] == "chat"
    assert chronicles.name == LLM_SPAN
    assert attributes(chronicles)[KIND] == "CHAIN"
    assert OPERATION not in attributes(chronicles)


def test_a_tool_span_named_by_the_convention_counts_before_its_attributes_come(
    control_plane, provider, exported
):
    """Google ADK's way: ``execute_tool {name}`` opens bare and gets its GenAI attributes once the
    tool returned; Chronicle's tool span inside it gives way all the same."""
    configure(control_plane, provider)
    framework = provider.get_tracer("framework")

    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: str) -> str:
        return key * 2

    with chronicle.record("adk-like"):
        with framework.start_as_current_span("execute_tool lookup") as span:
            lookup("ab")
            span.set_attributes({OPERATION: "execute_tool", gen_ai.GEN_AI_TOOL_NAME: "lookup"})
        with framework.start_as_current_span("execute_tool other"):
            lookup("cd")  # another tool's span: this run is one of its own

    runs = tool_runs(list(exported.get_finished_spans()))
    assert sorted((scope(s), s.name) for s in runs) == [
        ("chronicle", "execute_tool lookup"),  # the run under another tool's span
        ("framework", "execute_tool lookup"),
    ]
