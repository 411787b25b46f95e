"""``wire.envelope_json`` sends what the validated builder would, for every shape recording makes.

Delivery sends ``envelope_json`` (the envelope's JSON built straight from the record, without a
pydantic round trip per envelope). These tests prove, over the shapes the recording side
produces (tool and llm, open and closed, success and failure, retries, parents, user metadata,
lossy and cut payloads, any text), that its JSON parses to exactly what
``envelope_entity(...).model_dump_json(exclude_none=True)`` gives and validates against
``agentplane_primitives``' ``Envelope``; and that whatever Chronicle does not control (a user's
metadata key, the name) still goes through validation and is rejected as before.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import math
import uuid
from decimal import Decimal
from enum import Enum
from typing import Any, cast

import pytest
from agentplane_primitives.models import Envelope
from pydantic import BaseModel, JsonValue, ValidationError

from chronicle import wire
from chronicle.llm import bedrock, bedrock_streams, gemini, gemini_streams
from chronicle.llm.anthropic import AnthropicMessagesAdapter
from chronicle.llm.canonical import LlmAdapter
from chronicle.llm.generic import GenericAdapter
from chronicle.llm.openai import OPENAI_CHAT
from chronicle.recording.capture import json_arguments, json_form
from chronicle.redaction import Redaction
from chronicle.wire import (
    LOSSY_INPUT,
    LOSSY_OUTPUT,
    TRUNCATED,
    CallRecord,
    envelope_entity,
    envelope_json,
)

REDACTION = Redaction.default()


@pytest.fixture(autouse=True, params=["stdlib json", "orjson"])
def encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with each encoder: the plain install's and the ``fast`` extra's."""
    chosen = wire._dumps_stdlib if request.param == "stdlib json" else wire._dumps_orjson
    monkeypatch.setattr(wire, "_dumps", chosen)


LIMIT = 2_000
T0 = 1_733_000_000_123_456_789


class Color(Enum):
    RED = "red"


class Point(BaseModel):
    x: float
    label: str | None = None


@dataclasses.dataclass
class Hit:
    title: str
    score: float


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


def _cycle() -> list[Any]:
    items: list[Any] = [1]
    items.append(items)
    return items


ARGUMENTS: list[dict[str, object]] = [
    {},
    {"query": "weather in Paris", "limit": 5},
    {"messages": [{"role": "user", "content": "hi", "name": None}], "temperature": 0.2},
    {"text": "café ☕ 日本語 😀", "flag": True, "nothing": None, "big": 2**70},
    {"nan": math.nan, "inf": -math.inf, "raw": b"\x00\xffbytes", "when": datetime.date(2026, 1, 2)},
    {"ids": {1, 2, 3}, "uuid": uuid.UUID(int=7), "price": Decimal("1.10"), "color": Color.RED},
    {"point": Point(x=1.5), "hit": Hit("a", 0.5), "thing": Opaque(), "cycle": _cycle()},
    {"long": "x" * (LIMIT * 2), "deep": [[[[["down"]]]]], "empty": {"list": [], "dict": {}}},
    {"password": "hunter2", "note": "key sk-proj-abcdefghijklmnopqrstuvwxyz0123 here"},
    {"surrogate": "bad \ud800 text", "keys": {1: "one", Color.RED: "two"}},
]
RESULTS: list[object] = [
    None,
    "plain text",
    42,
    [1, 2.5, None, "x"],
    {"results": [{"title": "Paris", "temp_c": 18}], "count": 1, "next": None},
    {"nested": {"deeper": {"value": math.nan}}, "model": Point(x=2.0, label="p")},
    {"secret": "Bearer abcdefghijklmnop1234", "items": list(range(50))},
]
ERRORS: list[tuple[str, str] | None] = [
    None,
    ("ValueError", "boom"),
    ("AbortCall", "blocked by policy"),
    ("RateLimitError", ""),
]

OPENAI_INPUT = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
    ],
    "temperature": 0.2,
    "tools": [{"type": "function", "function": {"name": "search", "parameters": {}}}],
}
OPENAI_OUTPUT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "Paris"}'},
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}
ANTHROPIC_INPUT = {
    "model": "claude-sonnet-4",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "hi"}],
}
ANTHROPIC_OUTPUT = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4",
    "content": [{"type": "text", "text": "Hello"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 1},
}
LLM_CASES: list[tuple[LlmAdapter, object, object]] = [
    (OPENAI_CHAT, OPENAI_INPUT, OPENAI_OUTPUT),
    (OPENAI_CHAT, {"model": "gpt-4o", "messages": "not a list"}, {"choices": "garbage"}),
    (AnthropicMessagesAdapter("anthropic"), ANTHROPIC_INPUT, ANTHROPIC_OUTPUT),
    (GenericAdapter(None), {"prompt": "hi"}, "a string answer"),
    (GenericAdapter("acme"), {}, None),
]


def _payloads(
    arguments: dict[str, object], result: object
) -> tuple[JsonValue, JsonValue, dict[str, JsonValue]]:
    """The input and output as ``RecordedCall`` captures them, and the flags it sets."""
    form_in = json_arguments(
        arguments, max_string_bytes=LIMIT, max_total_bytes=LIMIT, redaction=REDACTION
    )
    form_out = json_form(result, max_string_bytes=LIMIT, max_total_bytes=LIMIT, redaction=REDACTION)
    flags: dict[str, JsonValue] = {}
    if form_in.lossy:
        flags[LOSSY_INPUT] = True
    if form_out.lossy:
        flags[LOSSY_OUTPUT] = True
    if form_in.truncated or form_out.truncated:
        flags[TRUNCATED] = True
    return form_in.value, form_out.value, flags


def _record(kind: str, **fields: Any) -> CallRecord:
    base: dict[str, Any] = {
        "name": "search" if kind == "tool" else "chat",
        "kind": kind,
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": "b7ad6b7169203331",
        "parent_envelope_id": None,
        "sequence": 3,
        "invocation": 2,
    }
    base.update(fields)
    return CallRecord(**base)


def _assert_same(record: CallRecord, ended: int | None) -> None:
    envelope_id = "00f067aa0ba902b7"
    built = envelope_json(record, envelope_id, T0, ended)
    # bytes from the direct path, or the validated Envelope when it falls back
    fast = built if isinstance(built, bytes) else built.model_dump_json(exclude_none=True)
    validated = envelope_entity(record, envelope_id, T0, ended).model_dump_json(exclude_none=True)
    assert json.loads(fast) == json.loads(validated)
    assert Envelope.model_validate_json(fast).envelope_id == envelope_id


ENDINGS = [None, T0, T0 + 1_500_000, T0 - 10, T0 + 999]
"""Open; closed at once; 1.5 ms later; an end before the start (clock skew); under 1 µs."""


@pytest.mark.parametrize("arguments", ARGUMENTS, ids=range(len(ARGUMENTS)))
def test_tool_envelopes_match_the_validated_builder(arguments: dict[str, object]) -> None:
    for result, error, ended in itertools.product(RESULTS, ERRORS, ENDINGS):
        input_raw, output_raw, flags = _payloads(arguments, result)
        record = _record("tool", input_raw=input_raw, error=error, metadata=dict(flags))
        record.output_raw = None if error is not None else output_raw
        _assert_same(record, ended)


@pytest.mark.parametrize(
    "fields",
    [
        {"parent_envelope_id": "53995c3f42cd8ad8"},
        {"attempt": 2, "retry_of": "53995c3f42cd8ad8"},
        {"metadata": {"team": "search", "cost.usd": 0.25, "tags": ["a", None], "n_1": {"x": 1}}},
        {"metadata": {"chronicle.agent": {"name": "bot", "tools": []}}},
        {"name": "agent.search/v2 ☕"},
        {"input_raw": "not a dict (an extract_input that returned text)"},
        {"sequence": 10**6, "invocation": 10**5},
        {"metadata": {"ok": math.nan, "when": "x"}},  # not JSON: takes the validated path
        {"error": ("StreamError", "cut"), "output_raw": ["partial", 1]},  # a stream failed late
    ],
)
def test_tool_envelope_variants_match(fields: dict[str, Any]) -> None:
    for ended in ENDINGS:
        record = _record("tool", input_raw={"q": "x"}, output_raw={"ok": True})
        for key, value in fields.items():
            setattr(record, key, value)
        _assert_same(record, ended)


@pytest.mark.parametrize("case", range(len(LLM_CASES)))
def test_llm_envelopes_match_the_validated_builder(case: int) -> None:
    adapter, raw_in, raw_out = LLM_CASES[case]
    # ``partial``: a stream that failed part way keeps what it received beside the error
    for error, ended, partial in itertools.product(ERRORS, ENDINGS, (False, True)):
        input_raw, output_raw, flags = _payloads({"_": raw_in}, raw_out)
        record = _record(
            "llm",
            adapter=adapter,
            input_raw=input_raw["_"] if isinstance(input_raw, dict) else {},
            output_raw=None if error is not None and not partial else output_raw,
            error=error,
            metadata=dict(flags),
        )
        _assert_same(record, ended)


GEMINI_OUTPUT: JsonValue = {
    "candidates": [
        {
            "content": {
                "parts": [
                    {"text": "Thinking.", "thought": True},
                    {"text": "Sunny ☀"},
                    {"function_call": {"id": "fc-1", "name": "search", "args": {"q": "Paris"}}},
                ],
                "role": "model",
            },
            "finish_reason": "STOP",
            "index": 0,
        }
    ],
    "model_version": "gemini-2.5-flash",
    "response_id": "resp-1",
    "usage_metadata": {"prompt_token_count": 9, "candidates_token_count": 4},
}
CONVERSE_OUTPUT: JsonValue = {
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "s"}}},
                {"text": "Let me look."},
                {"toolUse": {"toolUseId": "t1", "name": "search", "input": {"q": "Paris"}}},
            ],
        }
    },
    "stopReason": "tool_use",
    "usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12, "cacheReadInputTokens": 2},
    "metrics": {"latencyMs": 3},
}
STREAM_CASES: list[tuple[LlmAdapter, object, Any, Any]] = [
    (
        gemini.GEMINI_GENERATE_CONTENT,
        {"model": "gemini-2.5-flash", "contents": "weather?"},
        gemini_streams.GeminiStreamAssembler,
        gemini_streams.response_chunks(GEMINI_OUTPUT),
    ),
    (
        bedrock.BEDROCK_CONVERSE,
        {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "weather?"}]}]},
        bedrock_streams.ConverseStreamAssembler,
        bedrock_streams.converse_events(CONVERSE_OUTPUT),
    ),
    (
        bedrock.BEDROCK_INVOKE_ANTHROPIC,
        {"modelId": "m", "body": ANTHROPIC_INPUT},
        bedrock_streams.InvokeStreamAssembler,
        bedrock_streams.invoke_events(
            {"body": cast(JsonValue, ANTHROPIC_OUTPUT), "contentType": "json"}
        ),
    ),
]


@pytest.mark.parametrize("case", range(len(STREAM_CASES)))
def test_streamed_llm_envelopes_match_the_validated_builder(case: int) -> None:
    """A streamed Gemini or Bedrock call: the assembled response as output, the chunks (less
    their shared fields) and the stream's keys in metadata, whole, cut short or failed."""
    adapter, raw_in, assembler_of, events = STREAM_CASES[case]
    for error, ended, kept in itertools.product(ERRORS, ENDINGS, (len(events), 2)):
        assembler = assembler_of(LIMIT)
        for event in events[:kept]:
            assembler.add(event)
        input_raw, output_raw, flags = _payloads({"_": raw_in}, assembler.result())
        shared, chunks = wire.shared_fields(events[:kept])
        metadata: dict[str, JsonValue] = {
            **flags,
            wire.STREAMED: True,
            wire.CHUNK_COUNT: kept,
            wire.FIRST_CHUNK_MS: 1.25,
            wire.CHUNKS: REDACTION.json(chunks),
        }
        if shared:
            metadata[wire.SHARED_CHUNK_FIELDS] = REDACTION.json(shared)
        if kept < len(events) or error is not None:
            metadata[wire.INCOMPLETE] = True
        record = _record(
            "llm",
            adapter=adapter,
            input_raw=input_raw["_"] if isinstance(input_raw, dict) else {},
            output_raw=output_raw,
            error=error,
            metadata=metadata,
        )
        _assert_same(record, ended)


@pytest.mark.parametrize(
    "fields",
    [
        {"metadata": {"Not Allowed": 1}},  # user metadata keys must match the models' pattern
        {"name": ""},
    ],
)
def test_what_chronicle_does_not_control_is_still_validated(fields: dict[str, Any]) -> None:
    record = _record("tool", input_raw={"q": "x"}, output_raw=None)
    for key, value in fields.items():
        setattr(record, key, value)
    with pytest.raises(ValidationError):
        envelope_entity(record, "00f067aa0ba902b7", T0, T0)
    with pytest.raises(ValidationError):
        envelope_json(record, "00f067aa0ba902b7", T0, T0)
