"""Streamed model calls: recorded, saved and replayed.

The real ``openai`` and ``anthropic`` clients stream from ``LlmServer`` (their SSE formats); every
envelope is read back from the real control plane, and every replay is checked to send no
request to the model server while the caller's code stays the same. Generator boundaries are in
test_generator_boundaries.py, the assemblers in test_stream_assemblers.py, replay's leniency
with sparse responses in test_stream_replay_leniency.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Generator, Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from chronicle.errors import UnrecordedOutputError
from tests.support.calls import CHAT, MESSAGES, USER, buckets, recorded_tool_call
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    chat_tool_calls,
    chat_usage,
    messages_text,
    messages_tool_use,
    messages_usage,
    responses_text,
    responses_tool_calls,
    streamed,
    tool_call,
)
from tests.support.recording import replay_of

WEATHER = {"city": "Paris", "unit": "celsius"}


def strict_replay(session: chronicle.Session) -> Any:
    return chronicle.replay_trace(session.trace_id, session.span_id, strict=True)


def text_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def streamed_metadata(envelope: dict[str, Any]) -> dict[str, Any]:
    metadata = envelope["metadata"]
    assert metadata["chronicle.streamed"] is True
    assert metadata["chronicle.time_to_first_chunk_ms"] > 0
    return dict(metadata)


# ---- OpenAI Chat Completions ------------------------------------------------------------------


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_chat_stream_is_one_envelope_with_the_assembled_response(
    oai, llm_server, recording, include_usage
):
    usage = chat_usage(12, 6, cached_tokens=4)
    llm_server.reply_with(streamed(chat_text("It is sunny in Paris.", usage=usage), deltas=5))
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    with chronicle.record("chat-stream") as session:
        chunks = list(
            oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True, **options)
        )
    assert text_of(chunks) == "It is sunny in Paris."

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == CHAT
    assert envelope["envelope_status"]["status"] == "success"
    assert envelope["input"]["raw"]["stream"] is True
    output = envelope["output"]
    assert output["content"] == [{"type": "text", "text": "It is sunny in Paris."}]
    assert output["finish_reason"] == "stop"
    assert output["model"] == "gpt-4o-mini"
    assert output["response_id"] == chunks[0].id
    assert output["raw"]["object"] == "chat.completion"
    assert output["raw"]["choices"][0]["message"]["content"] == "It is sunny in Paris."
    if include_usage:
        assert output["usage"] == buckets(input=8, cached_read=4, output=6)
    else:
        assert output.get("usage") is None  # the API sends no usage without include_usage
    metadata = streamed_metadata(envelope)
    assert metadata["chronicle.chunk_count"] == len(chunks)
    assert "chronicle.incomplete" not in metadata
    assert len(metadata["chronicle.chunks"]) == len(chunks)
    shared = metadata["chronicle.shared_chunk_fields"]  # stored once, not in every chunk
    assert (shared["id"], shared["model"]) == (chunks[0].id, "gpt-4o-mini")
    assert "id" not in metadata["chronicle.chunks"][0]

    before = llm_server.request_count
    with replay_of(session) as run:
        again = list(
            oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True, **options)
        )
    assert llm_server.request_count == before
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in again)
    assert [c.model_dump() for c in again] == [c.model_dump() for c in chunks]
    assembled = run.captured_result(CHAT, 1)
    assert isinstance(assembled, ChatCompletion)
    assert assembled.choices[0].message.content == "It is sunny in Paris."


def test_tool_call_argument_deltas_are_assembled_and_the_helper_replays(oai, llm_server, recording):
    calls = (
        tool_call("get_weather", WEATHER, id="call_1"),
        tool_call("get_time", {"tz": "Europe/Paris"}, id="call_2"),
    )
    llm_server.reply_with(streamed(chat_tool_calls(*calls), deltas=6))
    with chronicle.record("chat-tools") as session:
        with oai.chat.completions.stream(model="gpt-4o-mini", messages=USER) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_completion()
    assert kinds.count("tool_calls.function.arguments.delta") >= 12  # six per call
    assert [c.function.name for c in final.choices[0].message.tool_calls or []] == [
        "get_weather",
        "get_time",
    ]

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["input"]["raw"]["stream"] is True  # the helper goes through create()
    assert envelope["output"]["finish_reason"] == "tool_calls"
    assert envelope["output"]["content"] == [
        recorded_tool_call("call_1", "get_weather", WEATHER),
        recorded_tool_call("call_2", "get_time", {"tz": "Europe/Paris"}),
    ]

    before = llm_server.request_count
    with replay_of(session):
        with oai.chat.completions.stream(model="gpt-4o-mini", messages=USER) as stream:
            kinds_again = [event.type for event in stream]
            final_again = stream.get_final_completion()
    assert llm_server.request_count == before
    assert kinds_again == kinds
    assert final_again.choices[0].message.tool_calls == final.choices[0].message.tool_calls


# ---- OpenAI Responses -------------------------------------------------------------------------


def test_a_responses_stream_and_its_helper_are_recorded_and_replayed(oai, llm_server, recording):
    llm_server.reply_with(
        streamed(responses_text("Bonjour à tous."), deltas=4),
        streamed(responses_tool_calls(tool_call("get_weather", WEATHER, id="call_9")), deltas=3),
    )
    with chronicle.record("responses-stream") as session:
        events = list(oai.responses.create(model="gpt-4.1-mini", input="Say hello", stream=True))
        with oai.responses.stream(model="gpt-4.1-mini", input="Weather?") as stream:
            final = stream.get_final_response()
    assert events[-1].type == "response.completed"
    assert final.output[0].type == "function_call"

    text_env, tool_env = recording.saved(session.trace_id, 2)
    assert text_env["output"]["content"] == [{"type": "text", "text": "Bonjour à tous."}]
    assert text_env["output"]["finish_reason"] == "stop"
    assert text_env["output"]["usage"]["input"] == 10
    assert text_env["metadata"]["chronicle.chunk_count"] == len(events)
    assert tool_env["input"]["raw"]["stream"] is True
    assert tool_env["output"]["content"] == [recorded_tool_call("call_9", "get_weather", WEATHER)]

    before = llm_server.request_count
    with replay_of(session):
        events_again = list(
            oai.responses.create(model="gpt-4.1-mini", input="Say hello", stream=True)
        )
        with oai.responses.stream(model="gpt-4.1-mini", input="Weather?") as stream:
            final_again = stream.get_final_response()
    assert llm_server.request_count == before
    assert [type(e) for e in events_again] == [type(e) for e in events]
    assert events_again[-1].response.output_text == "Bonjour à tous."
    assert final_again.output[0].arguments == final.output[0].arguments


# ---- Anthropic --------------------------------------------------------------------------------


def test_anthropic_create_stream_and_messages_stream_are_recorded_and_replayed(
    claude, llm_server, recording
):
    usage = messages_usage(20, 9, cache_read_input_tokens=5)
    llm_server.reply_with(
        streamed(messages_text("Sunny and warm.", usage=usage), deltas=3),
        streamed(messages_tool_use(tool_call("get_weather", WEATHER), text="Checking."), deltas=4),
    )

    def create_then_stream() -> tuple[list[Any], list[str], Any]:
        """A ``create(stream=True)`` read to the end, then a ``messages.stream`` helper's text."""
        events = list(
            claude.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=USER, stream=True
            )
        )
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=USER
        ) as stream:
            return events, list(stream.text_stream), stream.get_final_message()

    with chronicle.record("anthropic-stream") as session:
        events, pieces, final = create_then_stream()
    assert pieces == ["Che", "ck", "in", "g."]
    assert final.content[1].input == WEATHER

    text_env, tool_env = recording.saved(session.trace_id, 2)
    assert text_env["name"] == tool_env["name"] == MESSAGES
    assert text_env["output"]["content"] == [{"type": "text", "text": "Sunny and warm."}]
    assert text_env["output"]["usage"] == buckets(input=20, cached_read=5, output=9)
    assert text_env["metadata"]["chronicle.chunk_count"] == len(events)
    assert tool_env["input"]["raw"]["stream"] is True  # recorded as create(stream=True) is
    assert tool_env["input"]["raw"]["max_tokens"] == 64
    assert tool_env["output"]["finish_reason"] == "tool_calls"
    assert tool_env["output"]["content"][1] == recorded_tool_call(
        final.content[1].id, "get_weather", WEATHER
    )

    before = llm_server.request_count
    with replay_of(session) as run:
        events_again, pieces_again, final_again = create_then_stream()
    assert llm_server.request_count == before
    assert [e.model_dump() for e in events_again] == [e.model_dump() for e in events]
    assert pieces_again == pieces
    assert final_again.content == final.content
    assert isinstance(run.captured_result(MESSAGES, 2), Message)


# ---- async ------------------------------------------------------------------------------------


def test_async_streams_are_recorded_and_replayed(llm_server, recording):
    async def consume(oai: openai.AsyncOpenAI, claude: anthropic.AsyncAnthropic) -> Any:
        stream = await oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        async with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=USER
        ) as helper:
            pieces = [piece async for piece in helper.text_stream]
            final = await helper.get_final_message()
        return text, pieces, final.content

    async def main() -> None:
        oai = chronicle.wrap(
            openai.AsyncOpenAI(base_url=llm_server.openai_base_url, api_key="t", max_retries=0)
        )
        claude = chronicle.wrap(
            anthropic.AsyncAnthropic(
                base_url=llm_server.anthropic_base_url, api_key="t", max_retries=0
            )
        )
        llm_server.reply_with(
            streamed(chat_text("async sun"), deltas=3),
            streamed(messages_text("async rain"), deltas=2),
        )
        async with chronicle.record("async-streams") as session:
            live = await consume(oai, claude)
        assert live[0] == "async sun"
        assert live[1] == ["async", " rain"]
        chat_env, message_env = recording.saved(session.trace_id, 2)
        assert chat_env["output"]["content"] == [{"type": "text", "text": "async sun"}]
        assert message_env["output"]["content"] == [{"type": "text", "text": "async rain"}]
        assert streamed_metadata(message_env)["chronicle.chunk_count"] == 7
        before = llm_server.request_count
        async with replay_of(session):
            again = await consume(oai, claude)
        assert llm_server.request_count == before
        assert again == live
        await oai.close()
        await claude.close()

    asyncio.run(main())


def test_an_azure_stream_records_the_deployment(llm_server, recording):
    client = chronicle.wrap(
        openai.AzureOpenAI(
            azure_endpoint=llm_server.azure_endpoint,
            api_key="t",
            api_version="2024-10-21",
            max_retries=0,
        )
    )
    llm_server.reply_with(streamed(chat_text("azure sun"), deltas=2))
    with chronicle.record("azure-stream") as session:
        chunks = list(client.chat.completions.create(model="my-gpt", messages=USER, stream=True))
    assert llm_server.last_request.deployment == "my-gpt"
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["provider"] == "azure"
    assert envelope["output"]["deployment_id"] == "my-gpt"
    assert envelope["output"]["content"] == [{"type": "text", "text": "azure sun"}]
    before = llm_server.request_count
    with replay_of(session):
        again = list(client.chat.completions.create(model="my-gpt", messages=USER, stream=True))
    assert llm_server.request_count == before
    assert text_of(again) == text_of(chunks) == "azure sun"
    client.close()


# ---- ends that are not clean ------------------------------------------------------------------


def test_a_consumer_that_breaks_after_two_chunks(oai, llm_server, recording):
    llm_server.reply_with(
        streamed(chat_text("abcdefghijkl"), deltas=6), streamed(chat_text("mnopqr"), deltas=3)
    )
    with chronicle.record("early-stop") as session:
        with oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True) as stream:
            for position, _ in enumerate(stream):
                if position == 1:
                    break
        dropped = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        for position, _ in enumerate(dropped):
            if position == 1:
                break
        del dropped  # never closed: garbage collection ends the call
        gc.collect()
    closed, abandoned = recording.saved(session.trace_id, 2)
    for envelope, text in ((closed, "ab"), (abandoned, "mn")):
        assert envelope["envelope_status"]["status"] == "success"
        assert envelope["output"]["content"] == [{"type": "text", "text": text}]
        assert envelope["output"].get("finish_reason") is None
        metadata = streamed_metadata(envelope)
        assert metadata["chronicle.incomplete"] is True
        assert metadata["chronicle.chunk_count"] == 2
    span = next(
        s
        for s in recording.control_plane.trace(session.trace_id)["spans"]
        if s["span_id"] == session.span_id
    )
    assert span["state"] == "closed"

    before = llm_server.request_count
    with replay_of(session):
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        first_two = [next(stream), next(stream)]  # the same consumer code works
        with pytest.raises(chronicle.ReplayError, match="stopped after 2 item"):
            next(stream)  # reading past what was recorded says so
    assert llm_server.request_count == before
    assert first_two[1].choices[0].delta.content == "ab"


def test_a_long_stream_dropped_midway_records_every_chunk_it_passed(oai, llm_server, recording):
    # Chunks are converted in batches as they pass; a stream left between two batches still
    # records each chunk the caller got, and no more.
    text = "".join(f"{n:03d}" for n in range(150))
    llm_server.reply_with(streamed(chat_text(text), deltas=150))
    with chronicle.record("long-drop") as session:
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        got = [next(stream) for _ in range(100)]
        del stream  # never closed: garbage collection ends the call
        gc.collect()
    (envelope,) = recording.saved(session.trace_id, 1)
    metadata = streamed_metadata(envelope)
    assert metadata["chronicle.chunk_count"] == 100
    assert len(metadata["chronicle.chunks"]) == 100
    assert metadata["chronicle.incomplete"] is True
    assert envelope["output"]["content"] == [{"type": "text", "text": text_of(got)}]
    assert 200 < len(text_of(got)) < len(text)


def test_a_generator_item_changed_after_it_was_yielded_is_recorded_as_yielded(recording):
    @chronicle.boundary("grow")
    def grow(n: int) -> Generator[list[int], None, None]:
        items: list[int] = []
        for k in range(n):
            items.append(k)
            yield items  # the same list each time, changed after it was yielded

    with chronicle.record("generator-mutates") as session:
        assert list(grow(3))[-1] == [0, 1, 2]
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["raw"] == [[0], [0, 1], [0, 1, 2]]


def drain(stream: Any, into: list[Any]) -> None:
    """Read ``stream`` into ``into`` until it ends or raises."""
    for item in stream:
        into.append(item)


def read_text(claude: Any, into: list[str]) -> None:
    """Read a ``messages.stream`` helper's ``text_stream`` into ``into``."""
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=USER) as stream:
        drain(stream.text_stream, into)


def test_a_stream_that_fails_mid_way_is_recorded_with_what_was_received(
    oai, claude, llm_server, recording
):
    llm_server.reply_with(
        streamed(chat_text("abcdefgh"), deltas=4, fail_after=3),
        streamed(messages_text("ijklmn"), deltas=3, fail_after=5),
    )
    received: list[ChatCompletionChunk] = []
    pieces: list[str] = []
    with chronicle.record("failure") as session:
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        with pytest.raises(openai.APIError, match="stream interrupted"):
            drain(stream, received)
        with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
            read_text(claude, pieces)
    assert text_of(received) == "abcd"
    assert pieces == ["ij", "kl"]
    chat_env, message_env = recording.saved(session.trace_id, 2)
    for envelope, error_type, text in (
        (chat_env, "APIError", "abcd"),
        (message_env, "APIStatusError", "ijkl"),
    ):
        assert envelope["envelope_status"]["status"] == "failure"
        assert envelope["output"]["error"]["type"] == error_type
        assert envelope["output"]["content"] == [{"type": "text", "text": text}]
        assert streamed_metadata(envelope)["chronicle.incomplete"] is True
    assert chat_env["metadata"]["chronicle.chunk_count"] == 3

    before = llm_server.request_count
    replayed: list[ChatCompletionChunk] = []
    replayed_pieces: list[str] = []
    with replay_of(session):
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        with pytest.raises(openai.APIError, match="stream interrupted") as raised:
            drain(stream, replayed)
        with pytest.raises(anthropic.APIStatusError, match="Overloaded") as overloaded:
            read_text(claude, replayed_pieces)
    assert llm_server.request_count == before
    # The SDKs' own exceptions, as recorded (the agent's except clauses run), saying they replayed.
    assert type(raised.value) is openai.APIError
    assert raised.value.type == "server_error"
    assert isinstance(raised.value.__cause__, chronicle.RecordedCallError)
    assert overloaded.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert text_of(replayed) == "abcd"  # what was received, then the failure where it happened
    assert replayed_pieces == ["ij", "kl"]


def test_the_payload_limit_bounds_what_a_long_stream_keeps(oai, llm_server, control_plane):
    chronicle.configure(control_plane_url=control_plane.url, max_payload_bytes=2_000)
    try:
        text = "".join(f"{n:04d} " for n in range(800))  # 4,000 characters
        llm_server.reply_with(streamed(chat_text(text), deltas=400))
        with chronicle.record("long") as session:
            chunks = list(oai.chat.completions.create(model="m", messages=USER, stream=True))
        assert text_of(chunks) == text
        assert chronicle.flush(10)
        (envelope,) = control_plane.wait_for_envelopes(session.trace_id, 1)
        metadata = envelope["metadata"]
        assert metadata["chronicle.chunk_count"] == len(chunks) == 402
        assert "chronicle.chunks" not in metadata  # they outgrew the limit and were let go
        assert metadata["chronicle.truncated"] is True
        kept = envelope["output"]["content"][0]["text"]
        assert kept.startswith(text[:1_500])  # the whole output is bounded, not only its strings
        assert len(kept.encode()) < 2_100

        assert metadata["chronicle.truncated_output"] is True
        before = llm_server.request_count
        with (
            replay_of(session),
            pytest.raises(UnrecordedOutputError, match="cut to max_payload_bytes"),
        ):
            list(oai.chat.completions.create(model="m", messages=USER, stream=True))
        assert llm_server.request_count == before  # a cut answer is refused, never replayed
    finally:
        chronicle.reset()


# ---- hooks ------------------------------------------------------------------------------------


class Watcher(chronicle.Hook):
    def __init__(self, server: LlmServer) -> None:
        self.server = server
        self.events: list[Any] = []

    def enter(self, call: chronicle.CallInfo) -> None:
        self.events.append(("enter", self.server.request_count))

    def crossing(self, call: chronicle.CallInfo, result: object) -> None:
        self.events.append(("crossing", result))

    def record(self, call: chronicle.CallInfo, envelope: Any) -> None:
        self.events.append(("record", envelope))

    def leave(self, call: chronicle.CallInfo) -> None:
        self.events.append(("leave",))


def test_hooks_run_before_the_request_and_after_the_stream_ends(oai, llm_server, recording):
    watcher = Watcher(llm_server)
    chronicle.default_hooks.register(watcher)
    llm_server.reply_with(streamed(chat_text("hooked"), deltas=2))
    with chronicle.record("hooks"):
        before = llm_server.request_count
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        for chunk in stream:
            watcher.events.append(
                ("chunk", chunk.choices[0].delta.content if chunk.choices else "")
            )
    names = [event[0] for event in watcher.events]
    assert names == ["enter", "chunk", "chunk", "chunk", "chunk", "crossing", "record", "leave"]
    assert watcher.events[0] == ("enter", before)  # before the request was sent
    crossing = watcher.events[5][1]
    assert isinstance(crossing, ChatCompletion)  # the assembled output, as the SDK's type
    assert crossing.choices[0].message.content == "hooked"
    envelope = watcher.events[6][1]
    assert envelope.metadata["chronicle.chunk_count"] == 4
    assert envelope.output.content[0].text == "hooked"


def test_an_abort_in_enter_stops_a_stream_before_any_request(oai, llm_server, recording):
    def deny(call: chronicle.CallInfo) -> None:
        raise chronicle.AbortCall("no streaming today")

    chronicle.default_hooks.register(chronicle.FunctionHook(deny))
    with chronicle.record("abort") as session:
        with pytest.raises(chronicle.AbortCall):
            oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
    assert llm_server.request_count == 0
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["error"]["type"] == "AbortCall"


def test_hooks_see_the_assembled_stream_when_recording_is_off(oai, llm_server):
    chronicle.configure(enabled=False)
    watcher = Watcher(llm_server)
    chronicle.default_hooks.register(watcher)
    llm_server.reply_with(streamed(chat_text("unrecorded"), deltas=3))
    text = text_of(list(oai.chat.completions.create(model="m", messages=USER, stream=True)))
    assert text == "unrecorded"
    assert [event[0] for event in watcher.events] == ["enter", "crossing", "leave"]
    assert watcher.events[1][1].choices[0].message.content == "unrecorded"


# ---- replay: shapes, cut-points ---------------------------------------------------------------


def test_replay_serves_each_call_in_the_shape_it_asks_for(oai, claude, llm_server, recording):
    llm_server.reply_with(
        chat_tool_calls(tool_call("get_weather", WEATHER, id="call_1"), text="Let me look."),
        streamed(chat_text("streamed answer"), deltas=3),
        messages_tool_use(tool_call("get_weather", WEATHER, id="toolu_1"), text="Checking."),
    )
    with chronicle.record("shapes") as session:
        plain = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
        list(oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True))
        message = claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=USER)
    recording.saved(session.trace_id, 3)

    before = llm_server.request_count
    with replay_of(session):
        # recorded whole, asked as a stream (with usage): rebuilt as the SDK's chunks
        chunks = list(
            oai.chat.completions.create(
                model="gpt-4o-mini",
                messages=USER,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        # recorded as a stream, asked whole: the assembled response
        whole = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
        # an Anthropic message recorded whole, read through the stream helper
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=USER
        ) as stream:
            final = stream.get_final_message()
    assert llm_server.request_count == before
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert text_of(chunks) == "Let me look."
    tool_deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices]
    (call,) = [calls[0] for calls in tool_deltas if calls]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_1",
        "get_weather",
        WEATHER,
    )
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == plain.usage.total_tokens
    assert isinstance(whole, ChatCompletion)
    assert whole.choices[0].message.content == "streamed answer"
    assert [b.model_dump(exclude={"parsed_output"}) for b in final.content] == [
        b.model_dump() for b in message.content
    ]


def test_a_stream_cut_short_is_not_served_whole_and_odd_shapes_say_what_differs(
    oai, llm_server, recording
):
    @chronicle.boundary("numbers")
    def numbers() -> dict[str, int]:
        return {"one": 1}

    llm_server.reply_with(streamed(chat_text("abcdef"), deltas=3))
    with chronicle.record("cut") as session:
        with oai.chat.completions.create(model="m", messages=USER, stream=True) as stream:
            next(stream)
        numbers()
    recording.saved(session.trace_id, 2)

    @chronicle.boundary("numbers")  # the same boundary, now a generator
    def numbers_streamed() -> Iterator[int]:
        yield 1

    with replay_of(session):
        with pytest.raises(chronicle.ReplayError, match="stopped early"):
            oai.chat.completions.create(model="m", messages=USER)
        with pytest.raises(chronicle.ReplayError, match="recorded without streaming"):
            list(numbers_streamed())
    assert llm_server.request_count == 1


def test_a_cut_point_stream_runs_live_and_is_captured(oai, llm_server, recording):
    llm_server.reply_with(streamed(chat_text("recorded"), deltas=2))
    with chronicle.record("cut-point") as session:
        list(oai.chat.completions.create(model="m", messages=USER, stream=True))
    recording.saved(session.trace_id, 1)

    llm_server.reply_with(streamed(chat_text("live again"), deltas=2))
    with replay_of(session, chronicle.ReplayPlan().run(CHAT)) as run:
        chunks = list(oai.chat.completions.create(model="m", messages=USER, stream=True))
    assert text_of(chunks) == "live again"
    assert llm_server.request_count == 2
    captured = run.captured_result(CHAT, 1)
    assert isinstance(captured, ChatCompletion)
    assert captured.choices[0].message.content == "live again"
    assert [c.mode for c in run.call_log()] == ["run"]


# ---- raw and streaming responses, LiteLLM, no request span ------------------------------------


def test_with_streaming_response_is_recorded_and_replayed(oai, llm_server, recording):
    llm_server.reply_with(chat_text("read late"), streamed(chat_text("streamed late"), deltas=2))
    with chronicle.record("streaming-response") as session:
        with oai.chat.completions.with_streaming_response.create(
            model="m", messages=USER
        ) as response:
            completion = response.parse()
            assert response.headers.get("x-request-id")
        with oai.chat.completions.with_streaming_response.create(
            model="m", messages=USER, stream=True
        ) as response:
            chunks = list(response.parse())
        raw = oai.chat.completions.with_raw_response.create(model="m", messages=USER, stream=True)
        echoed = text_of(list(raw.parse()))
    assert completion.choices[0].message.content == "read late"
    assert text_of(chunks) == "streamed late"
    whole, streamed_env, raw_env = recording.saved(session.trace_id, 3)
    assert whole["output"]["content"] == [{"type": "text", "text": "read late"}]
    assert "chronicle.streamed" not in whole["metadata"]
    assert streamed_env["output"]["content"] == [{"type": "text", "text": "streamed late"}]
    assert streamed_env["metadata"]["chronicle.streamed"] is True
    assert raw_env["output"]["content"] == [{"type": "text", "text": echoed}]

    before = llm_server.request_count
    with replay_of(session):
        with oai.chat.completions.with_streaming_response.create(
            model="m", messages=USER
        ) as response:
            assert response.parse().choices[0].message.content == "read late"
            assert response.json()["choices"][0]["message"]["content"] == "read late"
        with oai.chat.completions.with_streaming_response.create(
            model="m", messages=USER, stream=True
        ) as response:
            assert text_of(list(response.parse())) == "streamed late"
        raw = oai.chat.completions.with_raw_response.create(model="m", messages=USER, stream=True)
        assert text_of(list(raw.parse())) == echoed
    assert llm_server.request_count == before


def test_a_stream_outside_a_request_span_gets_its_own_and_leaves_the_context_clean(
    oai, llm_server, recording
):
    sent: list[Any] = []
    chronicle.default_hooks.register(chronicle.FunctionHook(record=lambda c, e: sent.append(e)))
    llm_server.reply_with(streamed(chat_text("alone"), deltas=2))
    stream = oai.chat.completions.create(model="m", messages=USER, stream=True)
    assert chronicle.current_session() is None  # the implicit span let go of the context
    assert text_of(list(stream)) == "alone"
    (envelope,) = sent
    (saved,) = recording.saved(envelope.trace_id, 1)
    assert saved["output"]["content"] == [{"type": "text", "text": "alone"}]
    (span,) = recording.control_plane.trace(envelope.trace_id)["spans"]
    assert span["span_id"] == envelope.span_id
    assert span["state"] == "closed"


def test_the_span_shows_the_assembled_output_once_the_stream_ends(oai, llm_server, control_plane):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)
    try:
        llm_server.reply_with(
            streamed(chat_text("displayed", usage=chat_usage(7, 3)), deltas=3),
        )
        with chronicle.record("display"):
            stream = oai.chat.completions.create(
                model="m", messages=USER, stream=True, stream_options={"include_usage": True}
            )
            assert [s.name for s in exporter.get_finished_spans()] == []  # still open
            list(stream)
        (span,) = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
        attributes = dict(span.attributes or {})
        assert attributes["chronicle.boundary"] == CHAT
        assert json.loads(str(attributes["output.value"]))["choices"][0]["message"] == {
            "role": "assistant",
            "content": "displayed",
            "refusal": None,
        }
        assert attributes["llm.token_count.prompt"] == 7
        assert attributes["llm.token_count.completion"] == 3
        assert attributes["llm.output_messages.0.message.content"] == "displayed"
    finally:
        chronicle.reset()
