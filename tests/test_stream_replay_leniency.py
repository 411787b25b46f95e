"""Replay is never stricter than the SDK: a response with fields left out (as OpenAI- and
Anthropic-compatible servers send) that the live SDK accepted replays strictly, plain and
streamed, as the SDK's own types; a recording that is not even an object is refused by name.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message, RawMessageStartEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseCompletedEvent

import chronicle
from tests.support.calls import CHAT, USER
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    messages_text,
    responses_text,
    responses_usage,
    streamed,
    without,
)
from tests.support.recording import Recording
from tests.test_streams import strict_replay

# ---- never stricter than the SDK ------------------------------------------------------------
# Servers that leave out fields the SDKs tolerate missing (OpenAI- and Anthropic-compatible ones
# do): what the live SDK accepted replays strictly, plain and streamed, as the SDK's own types.


def dumped(items: list[Any]) -> list[dict[str, Any]]:
    return [item.model_dump(warnings=False) for item in items]


def test_a_chat_completion_without_object_or_created_replays_plain_and_streamed(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    # An OpenAI-compatible server that sends neither ``object`` nor ``created``: the SDK accepts it.
    sparse = without(chat_text("It is sunny."), "object", "created")
    llm_server.reply_with(sparse, streamed(sparse, deltas=3))
    with chronicle.record("sparse-chat") as session:
        live = oai.chat.completions.create(model="local-model", messages=USER)
        live_chunks = list(
            oai.chat.completions.create(model="local-model", messages=USER, stream=True)
        )
    assert live.choices[0].message.content == "It is sunny."
    assert "created" not in live.model_fields_set
    assert "".join(c.choices[0].delta.content or "" for c in live_chunks) == "It is sunny."
    recording.saved(session.trace_id, 2)

    before = llm_server.request_count
    with strict_replay(session) as run:
        replayed = oai.chat.completions.create(model="local-model", messages=USER)
        chunks = list(oai.chat.completions.create(model="local-model", messages=USER, stream=True))
    assert llm_server.request_count == before
    assert run.divergences() == []
    assert isinstance(replayed, ChatCompletion)
    assert replayed.choices[0].message.content == "It is sunny."
    assert replayed.model_dump(warnings=False) == live.model_dump(warnings=False)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert dumped(chunks) == dumped(live_chunks)


def test_a_client_that_validates_responses_refuses_at_replay_what_it_refuses_live(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(without(chat_text("It is sunny."), "created"))
    with chronicle.record("sparse-strict") as session:
        oai.chat.completions.create(model="local-model", messages=USER)
    recording.saved(session.trace_id, 1)
    client = openai.OpenAI(
        base_url=llm_server.openai_base_url,
        api_key="test",
        max_retries=0,
        _strict_response_validation=True,
    )
    with client:
        strict = chronicle.wrap(client)
        llm_server.reply_with(without(chat_text("It is sunny."), "created"))
        with pytest.raises(openai.APIResponseValidationError):  # live, it refuses the response
            strict.chat.completions.create(model="local-model", messages=USER)
        with chronicle.replay_trace(session.trace_id, session.span_id):
            with pytest.raises(chronicle.ReplayError, match="not a valid ChatCompletion"):
                strict.chat.completions.create(model="local-model", messages=USER)


def test_a_responses_usage_without_cache_write_tokens_replays_plain_and_streamed(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    sparse = without(
        responses_text("It is sunny.", usage=responses_usage(20, 5, cached_tokens=8)),
        "usage.input_tokens_details.cache_write_tokens",
    )
    llm_server.reply_with(sparse, streamed(sparse, deltas=3))
    with chronicle.record("sparse-responses") as session:
        live = oai.responses.create(model="local-model", input="Weather in Paris?")
        live_events = list(
            oai.responses.create(model="local-model", input="Weather in Paris?", stream=True)
        )
    assert live.output_text == "It is sunny."
    assert live.usage is not None and live.usage.input_tokens_details.cached_tokens == 8
    recording.saved(session.trace_id, 2)

    before = llm_server.request_count
    with strict_replay(session) as run:
        replayed = oai.responses.create(model="local-model", input="Weather in Paris?")
        events = list(
            oai.responses.create(model="local-model", input="Weather in Paris?", stream=True)
        )
    assert llm_server.request_count == before
    assert run.divergences() == []
    assert isinstance(replayed, Response)
    assert replayed.output_text == "It is sunny."
    assert replayed.usage is not None and replayed.usage.input_tokens_details.cached_tokens == 8
    assert [type(e) for e in events] == [type(e) for e in live_events]
    assert dumped(events) == dumped(live_events)
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.response.output_text == "It is sunny."


def test_an_anthropic_compatible_message_without_type_replays_plain_and_streamed(
    claude: anthropic.Anthropic, llm_server: LlmServer, recording: Recording
) -> None:
    sparse = without(messages_text("It is sunny."), "type")
    llm_server.reply_with(sparse, streamed(sparse, deltas=3))
    ask: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": USER}
    with chronicle.record("sparse-messages") as session:
        live = claude.messages.create(**ask)
        with claude.messages.stream(**ask) as stream:
            live_text = list(stream.text_stream)
            live_final = stream.get_final_message()
    assert "".join(live_text) == "It is sunny."
    recording.saved(session.trace_id, 2)

    before = llm_server.request_count
    with strict_replay(session) as run:
        replayed = claude.messages.create(**ask)
        with claude.messages.stream(**ask) as stream:
            text = list(stream.text_stream)
            final = stream.get_final_message()
    assert llm_server.request_count == before
    assert run.divergences() == []
    assert isinstance(replayed, Message) and isinstance(final, Message)
    assert replayed.model_dump(warnings=False) == live.model_dump(warnings=False)
    assert text == live_text
    assert final.model_dump(warnings=False) == live_final.model_dump(warnings=False)


def test_an_async_client_s_sparse_stream_replays_as_the_sdk_event_types(
    llm_server: LlmServer, recording: Recording
) -> None:
    sparse = without(messages_text("It is sunny."), "type")
    llm_server.reply_with(streamed(sparse, deltas=3))
    ask: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": USER}

    async def read(client: anthropic.AsyncAnthropic) -> list[Any]:
        stream = await client.messages.create(**ask, stream=True)
        return [event async for event in stream]

    async def run_twice() -> tuple[list[Any], list[Any]]:
        client = chronicle.wrap(
            anthropic.AsyncAnthropic(
                base_url=llm_server.anthropic_base_url, api_key="test", max_retries=0
            )
        )
        async with client:
            with chronicle.record("sparse-async") as session:
                live = await read(client)
            recording.saved(session.trace_id, 1)
            with strict_replay(session):
                again = await read(client)
        return live, again

    live, again = asyncio.run(run_twice())
    assert [type(e).__name__ for e in again] == [type(e).__name__ for e in live]
    assert type(again[0]) is RawMessageStartEvent
    assert dumped(again) == dumped(live)


def test_a_recording_that_is_not_even_an_object_is_refused_naming_the_call(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(chat_text("It is sunny."), streamed(chat_text("It is sunny.")))
    with chronicle.record("edited") as session:
        oai.chat.completions.create(model="local-model", messages=USER)
        list(oai.chat.completions.create(model="local-model", messages=USER, stream=True))
    envelopes = recording.saved(session.trace_id, 2)
    edited = copy.deepcopy(envelopes)
    edited[0]["output"]["raw"] = "It is sunny."  # hand-edited: not a completion at all
    edited[1]["metadata"]["chronicle.chunks"][1] = ["not", "a", "chunk"]
    with chronicle.replay(edited):
        with pytest.raises(chronicle.ReplayError) as plain:
            oai.chat.completions.create(model="local-model", messages=USER)
        stream = oai.chat.completions.create(model="local-model", messages=USER, stream=True)
        first = next(stream)
        with pytest.raises(chronicle.ReplayError) as chunk:
            next(stream)
    assert isinstance(first, ChatCompletionChunk)
    assert f"{CHAT!r} call 1" in str(plain.value)
    assert "ChatCompletion was recorded as str" in str(plain.value)
    assert "record the call again, or run it live" in str(plain.value)
    assert f"item 1 of the recorded stream of {CHAT!r} call 2" in str(chunk.value)
    assert "record the call again, or run it live" in str(chunk.value)
