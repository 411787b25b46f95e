"""The OpenTelemetry GenAI attributes on Chronicle's spans, next to the OpenInference ones.

Through a real OpenAI client and the local model server, on a provider of the test's own with an
in-memory exporter: what a GenAI-reading backend (Langfuse, Logfire, Datadog) gets, the opt-in
message content, redaction of that content, and the tool call ids linking a tool span to the
model's request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openinference.semconv.trace import SpanAttributes
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

import chronicle
from chronicle.otel.genai import CAPTURE_CONTENT_ENV
from tests.support.llm_server import LlmServer, chat_tool_calls, chat_usage, tool_call

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
CONTENT_KEYS = {
    gen_ai.GEN_AI_INPUT_MESSAGES,
    gen_ai.GEN_AI_OUTPUT_MESSAGES,
    gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS,
    gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS,
    gen_ai.GEN_AI_TOOL_CALL_RESULT,
    gen_ai.GEN_AI_TOOL_DEFINITIONS,
}


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(tracer_provider=provider)
    yield exporter
    chronicle.reset()


def run_agent(llm_server: LlmServer) -> None:
    """One turn: the model asks for ``lookup`` (with a usage that has cached tokens); it runs."""
    llm_server.reply_with(
        chat_tool_calls(
            tool_call("lookup", {"query": "refunds"}, id="call_7"),
            usage=chat_usage(120, 30, cached_tokens=100, reasoning_tokens=10),
            model="gpt-4o-mini-2024-07-18",
        )
    )
    client = chronicle.wrap(
        openai.OpenAI(base_url=llm_server.openai_base_url, api_key="test", max_retries=0)
    )

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str) -> dict[str, list[str]]:
        return {"hits": [query]}

    with client, chronicle.record("turn", labels={"session_id": "conv-9"}):
        client.chat.completions.create(
            model="gpt-4o-mini",
            temperature=0.2,
            messages=[
                {"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": f"my key is {SECRET}, refunds?"},
            ],
            tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        )
        lookup("refunds")


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, dict[str, Any]]:
    """Each span's attributes by its boundary's name (``chronicle.boundary``: the span itself is
    named by the GenAI convention), or by its span name (a request span)."""
    spans = {}
    for span in exporter.get_finished_spans():
        attributes = dict(span.attributes or {})
        spans[str(attributes.get("chronicle.boundary", span.name))] = attributes
    return spans


def test_llm_tool_and_request_spans_carry_the_genai_conventions(exported, llm_server):
    run_agent(llm_server)
    spans = spans_by_name(exported)
    llm = spans["openai.chat.completions.create"]
    assert llm[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert llm[gen_ai.GEN_AI_PROVIDER_NAME] == "openai"
    assert llm[gen_ai.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert llm[gen_ai.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024-07-18"
    assert llm[gen_ai.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert llm[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_call",)
    assert llm[gen_ai.GEN_AI_RESPONSE_ID].startswith("chatcmpl-")
    # Input tokens include the cached ones (the convention's rule); details given apart.
    assert llm[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert llm[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert llm[gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 100
    assert llm[gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 10
    # ... beside the same call in OpenInference terms.
    assert llm[SpanAttributes.LLM_TOKEN_COUNT_PROMPT] == 120
    assert llm[SpanAttributes.OPENINFERENCE_SPAN_KIND] == "LLM"

    tool = spans["lookup"]
    assert tool[gen_ai.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool[gen_ai.GEN_AI_TOOL_NAME] == "lookup"
    assert tool[gen_ai.GEN_AI_TOOL_CALL_ID] == "call_7"  # the model's call this tool answered

    request = spans["turn"]
    assert request[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert request[gen_ai.GEN_AI_CONVERSATION_ID] == "conv-9"

    # Message content is opt-in under the GenAI conventions: off by default.
    for attributes in spans.values():
        assert not CONTENT_KEYS & attributes.keys()


def test_opted_in_message_content_is_there_and_redacted(monkeypatch, llm_server):
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(tracer_provider=provider)
    run_agent(llm_server)
    spans = spans_by_name(exporter)
    llm = spans["openai.chat.completions.create"]

    # OpenAI's system message is part of the chat history, so it stays among the messages
    # (gen_ai.system_instructions is for instructions given apart, as Anthropic's ``system``).
    assert gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS not in llm
    (system, user) = json.loads(llm[gen_ai.GEN_AI_INPUT_MESSAGES])
    assert system == {
        "role": "system",
        "parts": [{"type": "text", "content": "You are a support agent."}],
    }
    assert user["role"] == "user"
    (text,) = user["parts"]
    assert text["type"] == "text" and "refunds?" in text["content"]
    assert SECRET not in json.dumps([dict(s) for s in spans.values()])  # redacted everywhere
    (output,) = json.loads(llm[gen_ai.GEN_AI_OUTPUT_MESSAGES])
    assert output["finish_reason"] == "tool_call"
    assert output["parts"] == [
        {"type": "tool_call", "name": "lookup", "arguments": {"query": "refunds"}, "id": "call_7"}
    ]
    assert json.loads(llm[gen_ai.GEN_AI_TOOL_DEFINITIONS])[0]["name"] == "lookup"

    tool = spans["lookup"]
    assert json.loads(tool[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"query": "refunds"}
    assert json.loads(tool[gen_ai.GEN_AI_TOOL_CALL_RESULT]) == {"hits": ["refunds"]}
