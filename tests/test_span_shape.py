"""Every span Chronicle makes, by the OpenTelemetry GenAI semantic conventions.

One span of each kind (a model call through a wrapped OpenAI client, a streamed call, a tool, a
request span with and without an ``AgentProfile``, and a span demoted beside another
instrumentation's span of the same call) is exported to memory from a provider of the test's own
and compared with the convention's table below: its name, its kind, and the attributes the
convention requires or asks for at the span's start (a sampler sees only those). The boundary's
own name stays in ``chronicle.boundary``, and the envelope saved to the control plane keeps it as
its ``name``.

The table is the convention's current text (semantic-conventions-genai, ``gen-ai-spans.md``,
``execute-tool.md`` and ``gen-ai-agent-spans.md``, status Development, spec v1.41): the
inference span ("Span name SHOULD be ``{gen_ai.operation.name} {gen_ai.request.model}``", kind
``CLIENT``), the execute-tool span (``execute_tool {gen_ai.tool.name}``, kind ``INTERNAL``) and
the invoke-agent internal span (``invoke_agent {gen_ai.agent.name}`` if the agent's name is
readily available, kind ``INTERNAL``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import logfire
import openai
import pytest
from openinference.semconv.trace import SpanAttributes
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support.llm_server import LlmServer, chat_text, chat_usage, streamed
from tests.support.logfire_local import offline_logfire
from tests.support.recording import Recording

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
TOOL_NAME = "gen_ai.tool.name"
AGENT_NAME = "gen_ai.agent.name"
BOUNDARY = "chronicle.boundary"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
CREATE = "openai.chat.completions.create"
MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class Shape:
    """One span of the convention: how it is named, its kind, the attributes it requires, and
    those it asks for when the span is created ("important for sampling decisions")."""

    name: str
    kind: SpanKind
    required: frozenset[str]
    at_start: frozenset[str]

    def named(self, attributes: Mapping[str, Any]) -> str:
        """The span name the convention gives a span with these attributes."""
        return self.name.format_map({key.replace(".", "_"): v for key, v in attributes.items()})


CONVENTION: Mapping[str, Shape] = {
    # Inference: "{gen_ai.operation.name} {gen_ai.request.model}", CLIENT; operation and
    # provider Required, the requested model Conditionally Required (if available).
    "inference": Shape(
        "{gen_ai_operation_name} {gen_ai_request_model}",
        SpanKind.CLIENT,
        frozenset({OPERATION, PROVIDER}),
        frozenset({OPERATION, PROVIDER, REQUEST_MODEL}),
    ),
    # Execute tool: "execute_tool {gen_ai.tool.name}", INTERNAL; the operation Required, the
    # tool's name and type Recommended.
    "execute_tool": Shape(
        "execute_tool {gen_ai_tool_name}",
        SpanKind.INTERNAL,
        frozenset({OPERATION}),
        frozenset({OPERATION, TOOL_NAME, "gen_ai.tool.type"}),
    ),
    # Invoke agent (in the same process): "invoke_agent {gen_ai.agent.name}", INTERNAL; the
    # operation Required, the agent's name, version and description and the conversation id
    # Conditionally Required when available. (gen_ai.provider.name is Required too; a request
    # span may call several providers, and none is known when it starts, so Chronicle gives
    # none there: the model-call spans inside it carry theirs.)
    "invoke_agent": Shape(
        "invoke_agent {gen_ai_agent_name}",
        SpanKind.INTERNAL,
        frozenset({OPERATION}),
        frozenset({OPERATION, AGENT_NAME}),
    ),
}


class SeenAtStart(SpanProcessor):
    """What a sampler or an on-start processor sees: each span's name, kind and attributes when
    it starts."""

    def __init__(self) -> None:
        self.started: dict[int, tuple[str, SpanKind, dict[str, Any]]] = {}

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self.started[span.context.span_id] = (span.name, span.kind, dict(span.attributes or {}))


@dataclass
class Exported:
    exporter: InMemorySpanExporter
    seen: SeenAtStart
    provider: TracerProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def by_boundary(self, boundary: str) -> ReadableSpan:
        """The one finished span of the boundary named ``boundary`` (``chronicle.boundary``)."""
        (span,) = [s for s in self.spans() if attributes(s).get(BOUNDARY) == boundary]
        return span

    def request(self) -> ReadableSpan:
        (span,) = [s for s in self.spans() if attributes(s).get(OPERATION) == "invoke_agent"]
        return span

    def at_start(self, span: ReadableSpan) -> tuple[str, SpanKind, dict[str, Any]]:
        assert span.context is not None
        return self.seen.started[span.context.span_id]


def attributes(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


def assert_shape(exported: Exported, span: ReadableSpan, shape: Shape) -> None:
    """``span`` is named and kinded as ``shape`` says, carries what it requires, and already
    carried its sampling attributes and its final name when it started."""
    shown = attributes(span)
    assert span.name == shape.named(shown)
    assert span.kind is shape.kind
    assert shape.required <= shown.keys(), shape.required - shown.keys()
    name, kind, started = exported.at_start(span)
    assert (name, kind) == (span.name, span.kind)
    expected = {key for key in shape.at_start if key in shown}
    assert {key: started.get(key) for key in expected} == {key: shown[key] for key in expected}


@pytest.fixture
def exported() -> Iterator[Exported]:
    exporter, seen = InMemorySpanExporter(), SeenAtStart()
    provider = TracerProvider()
    provider.add_span_processor(seen)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Exported(exporter, seen, provider)
    provider.shutdown()


def configure(control_plane: LocalControlPlane, provider: object, **settings: Any) -> Recording:
    chronicle.configure(
        control_plane_url=control_plane.url,
        tracer_provider=provider,
        flush_interval=0.05,
        **settings,
    )
    return Recording(control_plane)


def client_of(llm_server: LlmServer) -> openai.OpenAI:
    return chronicle.wrap(
        openai.OpenAI(base_url=llm_server.openai_base_url, api_key="t", max_retries=0)
    )


# ---- a model call, a streamed call, a tool, a request --------------------------------------------


def test_a_model_call_is_chat_model_a_client_span_and_its_envelope_keeps_the_boundary(
    control_plane, llm_server, exported
):
    recording = configure(control_plane, exported.provider)
    llm_server.reply_with(chat_text("hi", usage=chat_usage(12, 3)))

    with client_of(llm_server) as client, chronicle.record("turn") as session:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])

    span = exported.by_boundary(CREATE)
    assert span.name == f"chat {MODEL}"
    assert_shape(exported, span, CONVENTION["inference"])
    shown = attributes(span)
    assert (shown[OPERATION], shown[PROVIDER], shown[REQUEST_MODEL]) == ("chat", "openai", MODEL)
    assert shown["gen_ai.usage.input_tokens"] == 12
    assert shown[KIND] == "LLM"  # OpenInference's view of the same call
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == CREATE  # replay, plans and `chronicle show` read this name


def test_a_streamed_call_has_the_same_shape(control_plane, llm_server, exported):
    configure(control_plane, exported.provider)
    llm_server.reply_with(streamed(chat_text("one two three", usage=chat_usage(5, 3)), deltas=3))

    with client_of(llm_server) as client, chronicle.record("turn"):
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "count"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    assert text == "one two three"
    span = exported.by_boundary(CREATE)
    assert span.name == f"chat {MODEL}"
    assert_shape(exported, span, CONVENTION["inference"])
    assert attributes(span)["gen_ai.usage.output_tokens"] == 3


def test_a_gemini_call_is_generate_content_model(control_plane, llm_server, exported):
    """Gemini's API is the convention's ``generate_content`` operation, by its name and span."""
    from google import genai
    from google.genai import types

    from tests.support.llm_server import gemini_text, gemini_usage

    configure(control_plane, exported.provider)
    llm_server.reply_with(gemini_text("hi", usage=gemini_usage(7, 2)))
    options = types.HttpOptions(base_url=llm_server.gemini_base_url)
    with genai.Client(api_key="t", http_options=options) as client, chronicle.record("turn"):
        chronicle.wrap(client).models.generate_content(model="gemini-2.5-flash", contents="hi")

    span = exported.by_boundary("genai.models.generate_content")
    assert span.name == "generate_content gemini-2.5-flash"
    assert_shape(exported, span, CONVENTION["inference"])
    shown = attributes(span)
    assert (shown[OPERATION], shown[PROVIDER]) == ("generate_content", "gcp.gen_ai")


def test_a_model_call_with_no_model_known_is_named_by_its_operation(control_plane, exported):
    configure(control_plane, exported.provider)

    def complete(prompt: str) -> str:
        return prompt.upper()

    def complete_with(model: str, prompt: str) -> str:
        return f"{model}: {prompt}"

    unnamed = chronicle.wrap_llm("complete", complete)
    named = chronicle.wrap_llm("complete_with", complete_with, provider="anthropic")
    with chronicle.record("turn"):
        unnamed("hi")
        named("claude-sonnet-4", "hi")  # the model passed by position is known too

    span = exported.by_boundary("complete")
    assert (span.name, span.kind) == ("chat", SpanKind.CLIENT)
    assert REQUEST_MODEL not in attributes(span)
    span = exported.by_boundary("complete_with")
    assert span.name == "chat claude-sonnet-4"
    assert_shape(exported, span, CONVENTION["inference"])


def test_a_tool_is_execute_tool_and_keeps_its_name_for_both_vocabularies(control_plane, exported):
    recording = configure(control_plane, exported.provider)

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str) -> list[str]:
        return [query]

    with chronicle.record("turn") as session:
        lookup("refunds")

    span = exported.by_boundary("lookup")
    assert span.name == "execute_tool lookup"
    assert_shape(exported, span, CONVENTION["execute_tool"])
    shown = attributes(span)
    assert (shown[OPERATION], shown[TOOL_NAME], shown["gen_ai.tool.type"]) == (
        "execute_tool",
        "lookup",
        "function",
    )
    assert (shown[SpanAttributes.TOOL_NAME], shown[KIND]) == ("lookup", "TOOL")
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == "lookup"


def test_a_request_span_with_no_profile_keeps_its_name(control_plane, exported):
    configure(control_plane, exported.provider, service_name="support")

    with chronicle.record("turn", labels={"session_id": "conv-1"}):
        pass

    span = exported.request()
    assert (span.name, span.kind) == ("turn", SpanKind.INTERNAL)
    shown = attributes(span)
    assert shown[OPERATION] == "invoke_agent"
    assert shown[AGENT_NAME] == "support"  # the service stands for the agent
    assert shown["gen_ai.conversation.id"] == "conv-1"
    assert shown["chronicle.trace_name"] == "turn"


def test_a_request_span_is_invoke_agent_when_a_profile_names_the_agent(control_plane, exported):
    profile = chronicle.AgentProfile(
        "Refund Agent", "Refund what policy allows", metadata={"version": "2.1"}
    )
    configure(control_plane, exported.provider, service_name="support", agent=profile)

    with chronicle.record("turn", labels={"session_id": "conv-2"}):
        pass

    span = exported.request()
    assert span.name == "invoke_agent Refund Agent"
    assert_shape(exported, span, CONVENTION["invoke_agent"])
    shown = attributes(span)
    assert shown[AGENT_NAME] == "Refund Agent"
    assert shown["gen_ai.agent.version"] == "2.1"
    assert shown["gen_ai.agent.description"] == "Refund what policy allows"
    assert shown["gen_ai.conversation.id"] == "conv-2"
    assert shown["chronicle.trace_name"] == "turn"  # the name it would have had


# ---- demoted: another instrumentation's span counts the call ------------------------------------


def assert_demoted(span: ReadableSpan, boundary: str) -> None:
    """A span that is no model call or tool run of its own: named by its boundary, ``INTERNAL``,
    no GenAI operation, OpenInference ``CHAIN``, no token counts in either vocabulary."""
    shown = attributes(span)
    assert (span.name, span.kind) == (boundary, SpanKind.INTERNAL)
    assert OPERATION not in shown
    assert shown[BOUNDARY] == boundary
    assert shown[KIND] == "CHAIN"
    assert not [key for key in shown if key.startswith(("gen_ai.usage.", "llm.token_count."))]


def test_a_span_demoted_under_a_frameworks_span_of_the_call_is_no_operation(
    control_plane, llm_server, exported
):
    """A framework that traces itself (pydantic-ai, AutoGen) opens the convention's span around
    the call: Chronicle's span inside it gives way from its start."""
    recording = configure(control_plane, exported.provider)
    framework = exported.provider.get_tracer("framework")
    llm_server.reply_with(chat_text("hi", usage=chat_usage(12, 3)))

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str) -> list[str]:
        return [query]

    with client_of(llm_server) as client, chronicle.record("turn") as session:
        with framework.start_as_current_span(
            f"chat {MODEL}", kind=SpanKind.CLIENT, attributes={OPERATION: "chat"}
        ):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
        with framework.start_as_current_span(
            "execute_tool lookup", attributes={OPERATION: "execute_tool", TOOL_NAME: "lookup"}
        ):
            lookup("refunds")

    assert_demoted(exported.by_boundary(CREATE), CREATE)
    assert attributes(exported.by_boundary(CREATE))[REQUEST_MODEL] == MODEL  # the model stays
    assert_demoted(exported.by_boundary("lookup"), "lookup")
    operations = sorted(
        (s.instrumentation_scope.name, attributes(s)[OPERATION], s.name)
        for s in exported.spans()
        if s.instrumentation_scope is not None and OPERATION in attributes(s)
    )
    assert operations == [
        ("chronicle", "invoke_agent", "turn"),
        ("framework", "chat", f"chat {MODEL}"),
        ("framework", "execute_tool", "execute_tool lookup"),
    ]
    envelopes = recording.saved(session.trace_id, 2)
    assert [e["name"] for e in envelopes] == [CREATE, "lookup"]  # saved as always


@pytest.fixture
def logfire_local(exported: Exported) -> Iterator[logfire.Logfire]:
    """Logfire configured offline (nothing sent, no console), its spans exported to memory."""
    with offline_logfire(exported.seen, SimpleSpanProcessor(exported.exporter)) as instance:
        yield instance


def test_a_span_demoted_beside_logfires_span_of_the_call_is_named_by_its_boundary(
    control_plane, llm_server, exported, logfire_local
):
    """Logfire's ``instrument_openai`` traces the request inside Chronicle's span: Logfire's
    span is the model call (usage and all), Chronicle's gives way at its end, in the message
    Logfire shows too."""
    configure(control_plane, logfire_local.config.get_tracer_provider())
    client = client_of(llm_server)
    logfire_local.instrument_openai(client)
    llm_server.reply_with(chat_text("hi", usage=chat_usage(12, 3)))

    with client, chronicle.record("turn"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])

    chronicles = exported.by_boundary(CREATE)
    assert_demoted(chronicles, CREATE)
    assert attributes(chronicles)["logfire.msg"] == CREATE
    (counted,) = [s for s in exported.spans() if "gen_ai.usage.input_tokens" in attributes(s)]
    assert counted.instrumentation_scope is not None
    assert counted.instrumentation_scope.name.startswith("logfire")
    assert counted.parent is not None and chronicles.context is not None
    assert counted.parent.span_id == chronicles.context.span_id
    assert attributes(counted)[OPERATION] == "chat"
