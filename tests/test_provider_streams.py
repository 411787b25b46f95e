"""Streams of the other model clients: Gemini, Bedrock, and OpenAI-compatible clients by shape.

The real ``google-genai`` and ``boto3`` clients (and a small OpenAI-compatible client of its own)
stream from ``LlmServer`` (Gemini's ``alt=sse`` chunks, Bedrock's binary event stream). Each
streamed call is one envelope with the assembled response, read back from the real control
plane, and every replay is checked to send no request to the model server and to hand back the
SDK's own chunk types.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import EventStreamError
from google import genai
from google.genai import errors, types
from pydantic import JsonValue

import chronicle
from chronicle.llm.bedrock import (
    ConverseStreamAssembler,
    InvokeStreamAssembler,
    converse_events,
    invoke_events,
)
from chronicle.llm.gemini import GeminiStreamAssembler, response_chunks
from tests.support.llm_server import (
    LlmServer,
    chat_tool_calls,
    chat_usage,
    converse_text,
    converse_tool_use,
    converse_usage,
    gemini_function_calls,
    gemini_text,
    gemini_usage,
    messages_text,
    messages_tool_use,
    messages_usage,
    streamed,
    tool_call,
)

GEMINI = "genai.models.generate_content"
CONVERSE = "bedrock.converse"
INVOKE = "bedrock.invoke_model"
CHAT = "openai.chat.completions.create"
MESSAGES = "anthropic.messages.create"
USER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
GEMINI_MODEL = "gemini-2.5-flash"
BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
BEDROCK_USER = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]
WEATHER: dict[str, JsonValue] = {"city": "Paris", "unit": "celsius"}


def replay_of(session: chronicle.Session, plan: chronicle.ReplayPlan | None = None) -> Any:
    return chronicle.replay_trace(session.trace_id, session.span_id, plan)


def drain(stream: Any, into: list[Any]) -> None:
    """Read ``stream`` into ``into`` until it ends or raises."""
    for item in stream:
        into.append(item)


def streamed_metadata(envelope: dict[str, Any], chunks: int) -> dict[str, Any]:
    metadata = envelope["metadata"]
    assert metadata["chronicle.streamed"] is True
    assert metadata["chronicle.chunk_count"] == chunks
    assert metadata["chronicle.time_to_first_chunk_ms"] > 0
    assert "chronicle.lossy_output" not in metadata
    return dict(metadata)


# ---- Gemini -----------------------------------------------------------------------------------


@pytest.fixture
def gemini(llm_server: LlmServer) -> Iterator[genai.Client]:
    options = types.HttpOptions(base_url=llm_server.gemini_base_url)
    with genai.Client(api_key="test-key", http_options=options) as made:
        yield chronicle.wrap(made)


def gemini_fields(chunk: types.GenerateContentResponse) -> dict[str, Any]:
    """What the SDK parsed, less the transport headers (not recorded)."""
    return chunk.model_dump(exclude={"sdk_http_response"})


def test_a_gemini_stream_is_one_envelope_with_the_assembled_response(gemini, llm_server, recording):
    usage = gemini_usage(120, 8, cached_tokens=100, thoughts_tokens=30)
    reply = gemini_text("It is sunny in Paris.", thought="Look at the sky.", usage=usage)
    llm_server.reply_with(streamed(reply, deltas=4))
    config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.2)
    with chronicle.record("gemini-stream") as session:
        chunks = list(
            gemini.models.generate_content_stream(
                model=GEMINI_MODEL, contents="Weather in Paris?", config=config
            )
        )
    assert len(chunks) == 8  # four pieces of the thought, four of the answer
    assert "".join(c.text or "" for c in chunks) == "It is sunny in Paris."

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == GEMINI  # the name of generate_content: either replays the other
    assert envelope["envelope_status"]["status"] == "success"
    assert envelope["input"]["raw"] == {
        "model": GEMINI_MODEL,
        "contents": "Weather in Paris?",
        "config": {"system_instruction": "Be brief.", "temperature": 0.2},
    }
    output = envelope["output"]
    assert output["content"] == [
        {"type": "reasoning", "text": "Look at the sky."},
        {"type": "text", "text": "It is sunny in Paris."},
    ]
    assert output["finish_reason"] == "stop"
    assert (output["model"], output["model_source"]) == (GEMINI_MODEL, "served")
    assert output["response_id"] == chunks[0].response_id
    assert output["usage"] == {
        "input": 20,
        "cached_read": 100,
        "cache_write": 0,
        "output": 8,
        "reasoning": 30,
    }
    # the same raw response a plain generate_content call records
    assert output["raw"]["candidates"][0]["content"]["parts"] == [
        {"text": "Look at the sky.", "thought": True},
        {"text": "It is sunny in Paris."},
    ]
    assert output["raw"]["usage_metadata"] == chunks[-1].usage_metadata.model_dump(
        mode="json", exclude_none=True
    )
    metadata = streamed_metadata(envelope, 8)
    assert "chronicle.incomplete" not in metadata
    assert metadata["chronicle.shared_chunk_fields"]["response_id"] == chunks[0].response_id
    assert not any("sdk_http_response" in chunk for chunk in metadata["chronicle.chunks"])

    before = llm_server.request_count
    with replay_of(session) as run:
        again = list(
            gemini.models.generate_content_stream(
                model=GEMINI_MODEL, contents="Weather in Paris?", config=config
            )
        )
    assert llm_server.request_count == before
    assert all(isinstance(c, types.GenerateContentResponse) for c in again)
    assert [gemini_fields(c) for c in again] == [gemini_fields(c) for c in chunks]
    assembled = run.captured_result(GEMINI, 1)
    assert isinstance(assembled, types.GenerateContentResponse)
    assert assembled.text == "It is sunny in Paris."


def test_an_async_gemini_stream_assembles_a_function_call_and_replays(
    gemini, llm_server, recording
):
    llm_server.reply_with(
        streamed(gemini_function_calls(tool_call("get_weather", WEATHER, id="fc-1")))
    )

    async def consume() -> list[types.GenerateContentResponse]:
        stream = await gemini.aio.models.generate_content_stream(
            model=GEMINI_MODEL, contents="Weather?"
        )
        return [chunk async for chunk in stream]

    async def record() -> tuple[list[types.GenerateContentResponse], chronicle.Session]:
        try:
            async with chronicle.record("gemini-aio-stream") as session:
                return await consume(), session
        finally:
            await gemini.aio.aclose()  # its connections belong to this event loop

    chunks, session = asyncio.run(record())
    assert [call.args for call in chunks[-1].function_calls or []] == [WEATHER]
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == GEMINI
    assert envelope["output"]["finish_reason"] == "tool_calls"
    assert envelope["output"]["content"] == [
        {"type": "tool_call", "id": "fc-1", "name": "get_weather", "arguments": WEATHER}
    ]
    streamed_metadata(envelope, len(chunks))

    async def replay() -> list[types.GenerateContentResponse]:
        async with replay_of(session):
            return await consume()

    before = llm_server.request_count
    again = asyncio.run(replay())
    assert llm_server.request_count == before
    assert [gemini_fields(c) for c in again] == [gemini_fields(c) for c in chunks]


def test_a_gemini_stream_stopped_early_or_failing_keeps_what_was_received(
    gemini, llm_server, recording
):
    llm_server.reply_with(
        streamed(gemini_text("abcdefgh"), deltas=4),
        streamed(gemini_text("ijklmnop"), deltas=4, fail_after=2),
    )
    with chronicle.record("gemini-early") as session:
        stream = gemini.models.generate_content_stream(model=GEMINI_MODEL, contents="one")
        first_two = [next(stream), next(stream)]
        stream.close()
        received: list[Any] = []
        stream = gemini.models.generate_content_stream(model=GEMINI_MODEL, contents="two")
        with pytest.raises(errors.APIError, match="stream interrupted"):
            drain(stream, received)
    assert [c.text for c in first_two] == ["ab", "cd"]
    assert [c.text for c in received] == ["ij", "kl"]

    stopped, failed = recording.saved(session.trace_id, 2)
    assert stopped["envelope_status"]["status"] == "success"
    assert stopped["output"]["content"] == [{"type": "text", "text": "abcd"}]
    assert stopped["output"].get("finish_reason") is None
    assert streamed_metadata(stopped, 2)["chronicle.incomplete"] is True
    assert failed["envelope_status"]["status"] == "failure"
    assert failed["output"]["content"] == [{"type": "text", "text": "ijkl"}]
    assert streamed_metadata(failed, 2)["chronicle.incomplete"] is True

    before = llm_server.request_count
    with replay_of(session):
        stream = gemini.models.generate_content_stream(model=GEMINI_MODEL, contents="one")
        assert [next(stream).text, next(stream).text] == ["ab", "cd"]
        with pytest.raises(chronicle.ReplayError, match="stopped after 2 item"):
            next(stream)
        replayed: list[Any] = []
        stream = gemini.models.generate_content_stream(model=GEMINI_MODEL, contents="two")
        with pytest.raises(chronicle.RecordedCallError, match="stream interrupted"):
            drain(stream, replayed)
    assert llm_server.request_count == before
    assert [c.text for c in replayed] == ["ij", "kl"]


def test_gemini_replay_serves_each_call_in_the_shape_it_asks_for(gemini, llm_server, recording):
    llm_server.reply_with(gemini_text("recorded whole"), streamed(gemini_text("recorded streamed")))
    with chronicle.record("gemini-shapes") as session:
        whole = gemini.models.generate_content(model=GEMINI_MODEL, contents="a")
        list(gemini.models.generate_content_stream(model=GEMINI_MODEL, contents="b"))
        chat = gemini.chats.create(model=GEMINI_MODEL)  # the SDK's chat goes through the stream
        said = "".join(chunk.text or "" for chunk in chat.send_message_stream("hello"))
        history = chat.get_history()
    assert said == "echo: hello"
    (_, _, chatted) = recording.saved(session.trace_id, 3)
    assert chatted["input"]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    ]

    before = llm_server.request_count
    with replay_of(session):
        # recorded whole, asked as a stream: one chunk, the response itself
        (chunk,) = gemini.models.generate_content_stream(model=GEMINI_MODEL, contents="a")
        # recorded as a stream, asked whole: the assembled response
        assembled = gemini.models.generate_content(model=GEMINI_MODEL, contents="b")
        chat = gemini.chats.create(model=GEMINI_MODEL)
        said_again = "".join(chunk.text or "" for chunk in chat.send_message_stream("hello"))
    assert llm_server.request_count == before
    assert isinstance(chunk, types.GenerateContentResponse)
    assert gemini_fields(chunk) == gemini_fields(whole)
    assert isinstance(assembled, types.GenerateContentResponse)
    assert assembled.text == "recorded streamed"
    assert said_again == said
    assert chat.get_history() == history


def test_gemini_chunks_and_the_gemini_assembler_agree() -> None:
    response: JsonValue = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Hi."}], "role": "model"},
                "finish_reason": "STOP",
                "index": 0,
            }
        ],
        "model_version": GEMINI_MODEL,
        "usage_metadata": {"prompt_token_count": 3},
    }
    assembler = GeminiStreamAssembler(limit=100)
    for chunk in response_chunks(response) or []:
        assembler.add(chunk)
    assert assembler.result() == response
    # camelCase chunks (the REST names) are read too; text pieces join, calls stay whole
    cut = GeminiStreamAssembler(limit=5)
    for piece in ("abc", "defgh"):
        cut.add({"candidates": [{"content": {"parts": [{"text": piece}], "role": "model"}}]})
    cut.add(
        {
            "candidates": [
                {
                    "content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]},
                    "finishReason": "STOP",
                }
            ],
            "modelVersion": "first",
        }
    )
    cut.add({"modelVersion": "second", "usageMetadata": {"promptTokenCount": 1}})
    assert cut.result() == {
        "candidates": [
            {
                "content": {
                    "parts": [{"text": "abcde"}, {"functionCall": {"name": "f", "args": {}}}],
                    "role": "model",
                },
                "finish_reason": "STOP",
                "index": 0,
            }
        ],
        "model_version": "first",
        "usage_metadata": {"promptTokenCount": 1},
    }


# ---- Bedrock ----------------------------------------------------------------------------------


@pytest.fixture
def bedrock(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=llm_server.bedrock_endpoint_url,
        config=Config(retries={"total_max_attempts": 1}),
    )
    yield chronicle.wrap(client)
    client.close()


def test_a_converse_stream_is_one_envelope_with_the_converse_response(
    bedrock, llm_server, recording
):
    usage = converse_usage(40, 6, cache_read_input_tokens=300, cache_write_input_tokens=20)
    reply = converse_text("Sunny, 24C.", reasoning="Check the sky.", usage=usage)
    llm_server.reply_with(streamed(reply, deltas=3), reply)
    arguments: dict[str, Any] = {
        "modelId": BEDROCK_MODEL,
        "messages": BEDROCK_USER,
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 256},
    }
    with chronicle.record("converse-stream") as session:
        response = bedrock.converse_stream(**arguments)
        events = list(response["stream"])
        plain = bedrock.converse(**arguments)  # the same reply, not streamed
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    assert "".join(d.get("text", "") for d in deltas) == "Sunny, 24C."
    assert len(deltas) == 7  # really streamed, in pieces (and the signature)

    streamed_env, plain_env = recording.saved(session.trace_id, 2)
    assert streamed_env["name"] == plain_env["name"] == CONVERSE
    assert streamed_env["input"]["raw"] == arguments
    output = streamed_env["output"]
    for key in ("content", "finish_reason", "usage", "model", "provider"):
        assert output[key] == plain_env["output"][key], key
    assert output["content"] == [
        {"type": "reasoning", "text": "Check the sky."},
        {"type": "text", "text": "Sunny, 24C."},
    ]
    assert output["usage"] == {
        "input": 40,
        "cached_read": 300,
        "cache_write": 20,
        "output": 6,
        "reasoning": 0,
    }
    # the converse response, less ResponseMetadata (no event carries it)
    assert output["raw"] == {k: v for k, v in plain.items() if k != "ResponseMetadata"}
    metadata = streamed_metadata(streamed_env, len(events))
    assert metadata["chronicle.chunks"] == events

    before = llm_server.request_count
    with replay_of(session) as run:
        replayed = bedrock.converse_stream(**arguments)
        again = list(replayed["stream"])
        plain_again = bedrock.converse(**arguments)
    assert llm_server.request_count == before
    assert type(replayed) is dict
    assert replayed["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert again == events  # the same event dicts, in order
    assert plain_again == plain
    assert run.captured_result(CONVERSE, 1) == output["raw"]


def test_converse_stream_tool_input_deltas_are_assembled_and_shapes_are_served(
    bedrock, llm_server, recording
):
    tool_config = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}}]}
    llm_server.reply_with(
        streamed(converse_tool_use(tool_call("get_weather", WEATHER, id="tooluse_1")), deltas=5),
        converse_text("Recorded whole."),
    )
    with chronicle.record("converse-tools") as session:
        events = list(
            bedrock.converse_stream(
                modelId=BEDROCK_MODEL, messages=BEDROCK_USER, toolConfig=tool_config
            )["stream"]
        )
        whole = bedrock.converse(modelId=BEDROCK_MODEL, messages=BEDROCK_USER)
    pieces = [e for e in events if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})]
    assert len(pieces) == 5
    tools_env, _ = recording.saved(session.trace_id, 2)
    assert tools_env["output"]["finish_reason"] == "tool_calls"
    assert tools_env["output"]["content"] == [
        {"type": "tool_call", "id": "tooluse_1", "name": "get_weather", "arguments": WEATHER}
    ]

    before = llm_server.request_count
    with replay_of(session):
        # recorded as a stream, asked whole: the assembled converse response
        assembled = bedrock.converse(
            modelId=BEDROCK_MODEL, messages=BEDROCK_USER, toolConfig=tool_config
        )
        # recorded whole, asked as a stream: the events rebuilt from the response
        rebuilt = list(
            bedrock.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_USER)["stream"]
        )
    assert llm_server.request_count == before
    assert assembled["output"]["message"]["content"] == [
        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": WEATHER}}
    ]
    folded = ConverseStreamAssembler()
    for event in rebuilt:
        folded.add(event)
    assert folded.result() == {k: v for k, v in whole.items() if k != "ResponseMetadata"}


def test_a_converse_stream_closed_or_failing_keeps_what_was_received(
    bedrock, llm_server, recording
):
    llm_server.reply_with(
        streamed(converse_text("abcdef"), deltas=3),
        streamed(converse_text("mnopqr"), deltas=3, fail_after=3),
    )
    received: list[Any] = []
    with chronicle.record("converse-early") as session:
        stream = bedrock.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_USER)["stream"]
        first = [next(iter(stream)), next(iter(stream))]
        stream.close()
        stream = bedrock.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_USER)["stream"]
        with pytest.raises(EventStreamError, match="stream interrupted"):
            drain(stream, received)
    assert first[1]["contentBlockDelta"]["delta"]["text"] == "ab"
    assert len(received) == 3

    closed, failed = recording.saved(session.trace_id, 2)
    assert closed["output"]["content"] == [{"type": "text", "text": "ab"}]
    assert streamed_metadata(closed, 2)["chronicle.incomplete"] is True
    assert failed["envelope_status"]["status"] == "failure"
    assert failed["output"]["error"]["type"] == "EventStreamError"
    assert failed["output"]["content"] == [{"type": "text", "text": "mnop"}]
    assert streamed_metadata(failed, 3)["chronicle.incomplete"] is True
    span = next(
        s
        for s in recording.control_plane.trace(session.trace_id)["spans"]
        if s["span_id"] == session.span_id
    )
    assert span["state"] == "closed"

    before = llm_server.request_count
    replayed: list[Any] = []
    with replay_of(session):
        stream = bedrock.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_USER)["stream"]
        assert [next(stream), next(stream)] == first
        with pytest.raises(chronicle.ReplayError, match="stopped after 2 item"):
            next(stream)
        stream = bedrock.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_USER)["stream"]
        with pytest.raises(chronicle.RecordedCallError, match="EventStreamError"):
            drain(stream, replayed)
    assert llm_server.request_count == before
    assert replayed == received


def anthropic_body(text: str) -> str:
    return json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 128,
            "messages": [{"role": "user", "content": text}],
        }
    )


def test_invoke_model_with_response_stream_of_an_anthropic_body(bedrock, llm_server, recording):
    usage = messages_usage(30, 9, cache_read_input_tokens=12)
    reply = messages_tool_use(tool_call("get_weather", WEATHER, id="toolu_1"), text="Checking.")
    llm_server.reply_with(streamed(replace_usage(reply, usage), deltas=3))
    titan = json.dumps({"inputText": "hello"})
    with chronicle.record("invoke-stream") as session:
        response = bedrock.invoke_model_with_response_stream(
            modelId=BEDROCK_MODEL, body=anthropic_body("Weather?")
        )
        events = list(response["body"])
        list(bedrock.invoke_model_with_response_stream(modelId="titan", body=titan)["body"])
    assert response["contentType"] == "application/json"
    sent = [json.loads(event["chunk"]["bytes"]) for event in events]
    assert sent[0]["type"] == "message_start"
    assert sum(1 for e in sent if e.get("delta", {}).get("type") == "input_json_delta") == 3

    (envelope,) = recording.saved(session.trace_id, 1)  # the Titan body passed through
    assert envelope["name"] == INVOKE
    assert envelope["input"]["raw"]["body"] == json.loads(anthropic_body("Weather?"))
    output = envelope["output"]
    assert output["provider"] == "bedrock"
    assert output["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_call", "id": "toolu_1", "name": "get_weather", "arguments": WEATHER},
    ]
    assert output["finish_reason"] == "tool_calls"
    assert output["usage"] == {
        "input": 30,
        "cached_read": 12,
        "cache_write": 0,
        "output": 9,
        "reasoning": 0,
    }
    assert output["raw"]["body"]["content"][1]["input"] == WEATHER
    assert output["raw"]["contentType"] == "application/json"
    streamed_metadata(envelope, len(events))

    before = llm_server.request_count
    with replay_of(session):
        replayed = bedrock.invoke_model_with_response_stream(
            modelId=BEDROCK_MODEL, body=anthropic_body("Weather?")
        )
        again = list(replayed["body"])
    assert llm_server.request_count == before
    assert replayed["contentType"] == "application/json"
    assert all(isinstance(event["chunk"]["bytes"], bytes) for event in again)
    assert [json.loads(event["chunk"]["bytes"]) for event in again] == sent


def replace_usage(reply: Any, usage: dict[str, Any]) -> Any:
    """``reply`` with ``usage`` in its body."""
    return dataclasses.replace(reply, body={**reply.body, "usage": usage})


def test_bedrock_events_and_the_bedrock_assemblers_are_inverse() -> None:
    response: JsonValue = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "s1"}}},
                    {"text": "Let me look."},
                    {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": WEATHER}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12},
        "metrics": {"latencyMs": 3},
    }
    folded = ConverseStreamAssembler()
    for event in converse_events(response) or []:
        folded.add(event)
    assert folded.result() == response
    cut = ConverseStreamAssembler(limit=4)  # cut short: the tool input kept as its text
    for event in (converse_events(response) or [])[:8]:
        cut.add(event)
    assert cut.result() == {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "s1"}}},
                    {"text": "Let "},
                    {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": '{"ci'}},
                ],
            }
        }
    }
    invoked: JsonValue = {
        "body": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [{"type": "text", "text": "Hi."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 2},
        },
        "contentType": "application/json",
    }
    assembler = InvokeStreamAssembler()
    for event in invoke_events(invoked) or []:
        assembler.add(event)
    assert assembler.result() == invoked


# ---- OpenAI-compatible and Anthropic-style clients, by shape ----------------------------------


class HomeMadeClient:
    """A small OpenAI-compatible client of its own: httpx, dicts back; ``stream=True`` returns a
    generator of the SSE chunks as dicts."""

    class _Completions:
        def __init__(self, base_url: str) -> None:
            self._url = f"{base_url}/chat/completions"

        def create(self, *, model: str, messages: Any, stream: bool = False, **options: Any) -> Any:
            body = {"model": model, "messages": messages, "stream": stream, **options}
            if stream:
                return self._chunks(body)
            reply = httpx.post(self._url, json=body)
            reply.raise_for_status()
            return reply.json()

        def _chunks(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
            with httpx.stream("POST", self._url, json=body) as reply:
                reply.raise_for_status()
                for line in reply.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        yield json.loads(line.removeprefix("data: "))

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.chat = SimpleNamespace(completions=HomeMadeClient._Completions(base_url))


class HomeMadeAsyncAnthropic:
    """A small Anthropic-style async client that only streams: ``await messages.create(...)``
    returns an async generator of the SSE events as dicts."""

    class _Messages:
        def __init__(self, base_url: str) -> None:
            self._url = f"{base_url}/v1/messages"

        async def create(self, **body: Any) -> Any:
            return self._events({**body, "stream": True})

        async def _events(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
            async with httpx.AsyncClient() as http, http.stream("POST", self._url, json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        yield json.loads(line.removeprefix("data: "))

    def __init__(self, base_url: str) -> None:
        self.api_base = base_url
        self.messages = HomeMadeAsyncAnthropic._Messages(base_url)


def test_stream_true_on_an_openai_compatible_client_is_recorded_and_replayed(llm_server, recording):
    client = chronicle.wrap(HomeMadeClient(llm_server.openai_base_url))
    reply = chat_tool_calls(tool_call("get_weather", WEATHER, id="call_1"), text="Let me look.")
    llm_server.reply_with(streamed(replace_usage(reply, chat_usage(20, 3)), deltas=4))
    options = {"stream_options": {"include_usage": True}}
    with chronicle.record("home-made-stream") as session:
        chunks = list(
            client.chat.completions.create(model="llama", messages=USER, stream=True, **options)
        )
    arguments = [
        call["function"]["arguments"]
        for chunk in chunks
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls") or []
    ]
    assert len(arguments) == 5  # the empty head, then four pieces

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == CHAT
    assert envelope["input"]["raw"]["stream"] is True
    output = envelope["output"]
    assert output["provider"] == "unknown"
    assert output["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": WEATHER},
    ]
    assert output["finish_reason"] == "tool_calls"
    assert output["usage"] == {
        "input": 20,
        "cached_read": 0,
        "cache_write": 0,
        "output": 3,
        "reasoning": 0,
    }
    assert output["raw"]["object"] == "chat.completion"
    streamed_metadata(envelope, len(chunks))

    before = llm_server.request_count
    with replay_of(session):
        again = list(
            client.chat.completions.create(model="llama", messages=USER, stream=True, **options)
        )
    assert llm_server.request_count == before
    assert again == chunks  # the recorded dicts ...
    assert again[1].choices[0].delta.content == chunks[1]["choices"][0]["delta"]["content"]


def test_stream_true_on_an_async_anthropic_style_client_is_recorded_and_replayed(
    llm_server, recording
):
    client = chronicle.wrap(HomeMadeAsyncAnthropic(llm_server.anthropic_base_url))
    llm_server.reply_with(streamed(messages_text("Bonjour à tous."), deltas=3))

    async def consume() -> list[dict[str, Any]]:
        events = await client.messages.create(
            model="claude-like", max_tokens=64, messages=USER, stream=True
        )
        return [event async for event in events]

    async def record() -> tuple[list[dict[str, Any]], chronicle.Session]:
        async with chronicle.record("home-made-async-stream") as session:
            return await consume(), session

    events, session = asyncio.run(record())
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == MESSAGES
    assert envelope["output"]["content"] == [{"type": "text", "text": "Bonjour à tous."}]
    assert envelope["output"]["finish_reason"] == "stop"
    streamed_metadata(envelope, len(events))

    async def replay() -> list[dict[str, Any]]:
        async with replay_of(session):
            return await consume()

    before = llm_server.request_count
    assert asyncio.run(replay()) == events
    assert llm_server.request_count == before
