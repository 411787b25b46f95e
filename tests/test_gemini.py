"""``chronicle.wrap(genai.Client(...))``: the real ``google-genai`` client against ``LlmServer``.

Every call is recorded to the real control plane and replayed with no request to the model
server, as the SDK's own ``GenerateContentResponse``. ``generate_content_stream`` is tested in
``test_provider_streams.py``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import errors, types
from pydantic import JsonValue

import chronicle
from chronicle.llm.gemini_streams import GeminiStreamAssembler, response_chunks
from tests.support.calls import buckets, client_of, recorded_tool_call
from tests.support.llm_server import (
    LlmServer,
    gemini_blocked,
    gemini_error,
    gemini_function_calls,
    gemini_text,
    gemini_usage,
    streamed,
    tool_call,
)
from tests.support.recording import drain, only, replay_of, streamed_metadata

NAME = "genai.models.generate_content"
MODEL = "gemini-2.5-flash"


@pytest.fixture
def client(llm_server: LlmServer) -> Iterator[genai.Client]:
    options = types.HttpOptions(base_url=llm_server.gemini_base_url)
    with genai.Client(api_key="test-key", http_options=options) as made:
        yield made


def sdk_fields(response: types.GenerateContentResponse) -> dict[str, Any]:
    """What the SDK parsed, less the transport headers (not recorded)."""
    return response.model_dump(exclude={"sdk_http_response"})


def test_wrap_replaces_generate_content_in_place_sync_and_aio(client):
    assert chronicle.wrap(client) is client
    for models in (client.models, client.aio.models):
        spec = models.generate_content.__chronicle_boundary__
        assert (spec.name, spec.kind, spec.provider) == (NAME, "llm", "google")
        streaming = models.generate_content_stream.__chronicle_boundary__
        assert (streaming.name, streaming.kind) == (NAME, "llm")  # one name for both forms
    assert chronicle.wrap(client.models) is client.models  # a wrapped resource: unchanged
    fresh = genai.Client(api_key="test-key")
    assert not hasattr(fresh.models.generate_content, "__chronicle_boundary__")


def thinking_usage() -> dict[str, Any]:
    """Gemini usage with cached and thinking tokens (canonical: ``THINKING_BUCKETS``)."""
    return gemini_usage(120, 8, cached_tokens=100, thoughts_tokens=30)


THINKING_BUCKETS = buckets(input=20, cached_read=100, output=8, reasoning=30)
"""``thinking_usage`` in Chronicle's buckets: the 100 cached tokens come out of the 120 input."""


def test_text_with_thoughts_and_cached_tokens_is_recorded_and_replayed(
    client, llm_server, recording
):
    chronicle.wrap(client)
    usage = thinking_usage()
    llm_server.reply_with(gemini_text("It is sunny.", thought="Look at the sky.", usage=usage))
    config = types.GenerateContentConfig(
        system_instruction="Be brief.", temperature=0.2, max_output_tokens=64
    )
    with chronicle.record("gemini") as session:
        live = client.models.generate_content(
            model=MODEL, contents="Weather in Paris?", config=config
        )
    assert live.text == "It is sunny."

    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == NAME
    assert envelope["input"]["raw"] == {
        "model": MODEL,
        "contents": "Weather in Paris?",
        "config": {"system_instruction": "Be brief.", "temperature": 0.2, "max_output_tokens": 64},
    }
    assert envelope["input"]["system"] == "Be brief."
    assert envelope["input"]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert envelope["input"]["params"] == {"temperature": 0.2, "max_tokens": 64}
    output = envelope["output"]
    assert output["provider"] == "google"
    assert (output["model"], output["model_source"]) == (MODEL, "served")
    assert output["finish_reason"] == "stop"
    assert output["content"] == [
        {"type": "reasoning", "text": "Look at the sky."},
        {"type": "text", "text": "It is sunny."},
    ]
    assert output["usage"] == THINKING_BUCKETS
    assert output["response_id"] == live.response_id
    assert output["raw"] == live.model_dump(
        mode="json", exclude_none=True, exclude={"sdk_http_response"}
    )
    assert client_of(envelope) == ("google-genai", genai.__version__, llm_server.url)

    before = llm_server.request_count
    with replay_of(session) as run:
        replayed = client.models.generate_content(
            model=MODEL, contents="Weather in Paris?", config=config
        )
    assert llm_server.request_count == before  # no HTTP request
    assert isinstance(replayed, types.GenerateContentResponse)
    assert replayed.text == "It is sunny."  # an SDK helper on the rebuilt type
    assert sdk_fields(replayed) == sdk_fields(live)
    assert [(c.name, c.mode) for c in run.call_log()] == [(NAME, "stub")]


def test_async_client_is_recorded_and_replayed(client, llm_server, recording):
    chronicle.wrap(client)
    llm_server.reply_with(gemini_text("async hello"))

    async def record() -> tuple[Any, chronicle.Session]:
        try:
            async with chronicle.record("gemini-aio") as session:
                live = await client.aio.models.generate_content(model=MODEL, contents="hi")
        finally:
            await client.aio.aclose()  # its connections belong to this event loop
        return live, session

    live, session = asyncio.run(record())
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == NAME  # the same name as the sync form: either replays the other
    assert envelope["output"]["content"] == [{"type": "text", "text": "async hello"}]

    async def replay() -> Any:
        async with replay_of(session):
            return await client.aio.models.generate_content(model=MODEL, contents="hi")

    before = llm_server.request_count
    replayed = asyncio.run(replay())
    assert llm_server.request_count == before
    assert isinstance(replayed, types.GenerateContentResponse)
    assert replayed.text == live.text == "async hello"
    assert sdk_fields(replayed) == sdk_fields(live)


def test_function_calls_and_responses_round_trip(client, llm_server, recording):
    chronicle.wrap(client)
    weather = types.FunctionDeclaration(
        name="get_weather",
        description="Weather for a city",
        parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[weather])],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get_weather"]
            )
        ),
    )
    llm_server.reply_with(
        gemini_function_calls(tool_call("get_weather", {"city": "Paris"}, id="fc-1")),
        gemini_text("Sunny, 24C."),
    )
    question = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    with chronicle.record("gemini-tools") as session:
        first = client.models.generate_content(model=MODEL, contents=[question], config=config)
        call = first.function_calls[0]
        answer = types.Part(
            function_response=types.FunctionResponse(
                id=call.id, name=call.name, response={"temp_c": 24}
            )
        )
        history = [
            question,
            first.candidates[0].content,
            types.Content(role="user", parts=[answer]),
        ]
        second = client.models.generate_content(model=MODEL, contents=history)
    assert second.text == "Sunny, 24C."

    asked, answered = recording.saved(session.trace_id, 2)
    assert asked["input"]["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert asked["input"]["tool_choice"] == {"name": "get_weather"}
    assert asked["output"]["finish_reason"] == "tool_calls"
    assert asked["output"]["content"] == [
        recorded_tool_call("fc-1", "get_weather", {"city": "Paris"})
    ]
    assert answered["input"]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [recorded_tool_call("fc-1", "get_weather", {"city": "Paris"})],
        },
        {"role": "tool", "content": '{"temp_c": 24}', "tool_call_id": "fc-1"},
    ]

    before = llm_server.request_count
    with replay_of(session):
        again = client.models.generate_content(model=MODEL, contents=[question], config=config)
    assert llm_server.request_count == before
    assert again.function_calls[0].args == {"city": "Paris"}
    assert again.function_calls[0].id == "fc-1"


def test_a_chat_session_is_recorded_through_the_wrapped_models(client, llm_server, recording):
    chronicle.wrap(client)
    with chronicle.record("gemini-chat") as session:
        chat = client.chats.create(model=MODEL)
        assert chat.send_message("hello").text == "echo: hello"
        assert chat.send_message("again").text == "echo: again"
    first, second = recording.saved(session.trace_id, 2)
    assert first["name"] == second["name"] == NAME
    assert [m["role"] for m in second["input"]["messages"]] == ["user", "assistant", "user"]


def test_a_blocked_prompt_is_a_content_filter_finish(client, llm_server, recording):
    chronicle.wrap(client)
    llm_server.reply_with(gemini_blocked("PROHIBITED_CONTENT"))
    with chronicle.record("gemini-blocked") as session:
        live = client.models.generate_content(model=MODEL, contents="something harmful")
    assert live.text is None
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["envelope_status"]["status"] == "success"
    assert envelope["output"]["finish_reason"] == "content_filter"
    assert envelope["output"]["content"] == []
    with replay_of(session):
        replayed = client.models.generate_content(model=MODEL, contents="something harmful")
    assert replayed.prompt_feedback.block_reason == types.BlockedReason.PROHIBITED_CONTENT


def test_an_api_error_is_a_recorded_failure_and_replays_as_the_sdk_exception(
    client, llm_server, recording
):
    chronicle.wrap(client)

    def agent(model: str) -> tuple[Any, ...]:
        try:
            client.models.generate_content(model=model, contents="hi")
        except errors.ClientError as error:  # the agent's own except clause
            return ("client error", error.code, error.status, error.message, str(error))
        except errors.ServerError as error:
            return ("server error", error.code, error.status, error.message, error.details)
        return ("no error",)

    llm_server.reply_with(gemini_error(400, "model not found: nope"), gemini_error(503, "busy"))
    with chronicle.record("gemini-error") as session:
        live = [agent("nope"), agent("gemini-2.5-flash")]
        llm_server.reply_with(gemini_error(400, "model not found: nope"))
        with pytest.raises(errors.ClientError) as raised_live:
            client.models.generate_content(model="nope", contents="hi")
    assert live[0][:4] == ("client error", 400, "INVALID_ARGUMENT", "model not found: nope")
    assert live[1][:3] == ("server error", 503, "UNAVAILABLE")
    envelope, _, _ = recording.saved(session.trace_id, 3)
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "ClientError"
    assert "model not found: nope" in envelope["output"]["error"]["message"]
    before = llm_server.request_count
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        assert [agent("nope"), agent("gemini-2.5-flash")] == live
        with pytest.raises(errors.ClientError) as raised:
            client.models.generate_content(model="nope", contents="hi")
    assert llm_server.request_count == before
    assert raised.value.response.status_code == raised_live.value.response.status_code == 400
    assert raised.value.details == raised_live.value.details
    assert isinstance(raised.value.__cause__, chronicle.RecordedCallError)  # says it replayed


def test_automatic_function_calling_is_one_call_and_replays_without_the_function(
    client, llm_server, recording
):
    chronicle.wrap(client)
    ran: list[str] = []

    def get_weather(city: str) -> dict[str, int]:
        """Weather for a city."""
        ran.append(city)
        return {"temp_c": 21}

    config = types.GenerateContentConfig(tools=[get_weather])
    llm_server.reply_with(
        gemini_function_calls(tool_call("get_weather", {"city": "Paris"})), gemini_text("21C.")
    )
    with chronicle.record("gemini-afc") as session:
        live = client.models.generate_content(model=MODEL, contents="Weather?", config=config)
    assert (live.text, ran, llm_server.request_count) == ("21C.", ["Paris"], 2)

    (envelope,) = recording.saved(session.trace_id, 1)  # the SDK's whole loop: one call
    assert envelope["metadata"]["chronicle.lossy_input"] is True  # the function, as its repr
    (tool,) = envelope["input"]["raw"]["config"]["tools"]
    assert "get_weather" in tool["$repr"]
    assert envelope["output"]["content"] == [{"type": "text", "text": "21C."}]

    with replay_of(session):
        replayed = client.models.generate_content(model=MODEL, contents="Weather?", config=config)
    assert replayed.text == "21C."
    assert ran == ["Paris"]  # the stub returned the loop's answer: the function did not run
    assert llm_server.request_count == 2


# ---- generate_content_stream ------------------------------------------------------------------

WEATHER: dict[str, JsonValue] = {"city": "Paris", "unit": "celsius"}


@pytest.fixture
def gemini(client: genai.Client) -> genai.Client:
    return chronicle.wrap(client)


def test_a_gemini_stream_is_one_envelope_with_the_assembled_response(gemini, llm_server, recording):
    usage = thinking_usage()
    reply = gemini_text("It is sunny in Paris.", thought="Look at the sky.", usage=usage)
    llm_server.reply_with(streamed(reply, deltas=4))
    config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.2)
    with chronicle.record("gemini-stream") as session:
        chunks = list(
            gemini.models.generate_content_stream(
                model=MODEL, contents="Weather in Paris?", config=config
            )
        )
    assert len(chunks) == 8  # four pieces of the thought, four of the answer
    assert "".join(c.text or "" for c in chunks) == "It is sunny in Paris."

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == NAME  # the name of generate_content: either replays the other
    assert envelope["envelope_status"]["status"] == "success"
    assert envelope["input"]["raw"] == {
        "model": MODEL,
        "contents": "Weather in Paris?",
        "config": {"system_instruction": "Be brief.", "temperature": 0.2},
    }
    output = envelope["output"]
    assert output["content"] == [
        {"type": "reasoning", "text": "Look at the sky."},
        {"type": "text", "text": "It is sunny in Paris."},
    ]
    assert output["finish_reason"] == "stop"
    assert (output["model"], output["model_source"]) == (MODEL, "served")
    assert output["response_id"] == chunks[0].response_id
    assert output["usage"] == THINKING_BUCKETS
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
                model=MODEL, contents="Weather in Paris?", config=config
            )
        )
    assert llm_server.request_count == before
    assert all(isinstance(c, types.GenerateContentResponse) for c in again)
    assert [sdk_fields(c) for c in again] == [sdk_fields(c) for c in chunks]
    assembled = run.captured_result(NAME, 1)
    assert isinstance(assembled, types.GenerateContentResponse)
    assert assembled.text == "It is sunny in Paris."


def test_an_async_gemini_stream_assembles_a_function_call_and_replays(
    gemini, llm_server, recording
):
    llm_server.reply_with(
        streamed(gemini_function_calls(tool_call("get_weather", WEATHER, id="fc-1")))
    )

    async def consume() -> list[types.GenerateContentResponse]:
        stream = await gemini.aio.models.generate_content_stream(model=MODEL, contents="Weather?")
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
    assert envelope["name"] == NAME
    assert envelope["output"]["finish_reason"] == "tool_calls"
    assert envelope["output"]["content"] == [recorded_tool_call("fc-1", "get_weather", WEATHER)]
    streamed_metadata(envelope, len(chunks))

    async def replay() -> list[types.GenerateContentResponse]:
        async with replay_of(session):
            return await consume()

    before = llm_server.request_count
    again = asyncio.run(replay())
    assert llm_server.request_count == before
    assert [sdk_fields(c) for c in again] == [sdk_fields(c) for c in chunks]


def test_a_gemini_stream_stopped_early_or_failing_keeps_what_was_received(
    gemini, llm_server, recording
):
    llm_server.reply_with(
        streamed(gemini_text("abcdefgh"), deltas=4),
        streamed(gemini_text("ijklmnop"), deltas=4, fail_after=2),
    )
    with chronicle.record("gemini-early") as session:
        stream = gemini.models.generate_content_stream(model=MODEL, contents="one")
        first_two = [next(stream), next(stream)]
        stream.close()
        received: list[Any] = []
        stream = gemini.models.generate_content_stream(model=MODEL, contents="two")
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
        stream = gemini.models.generate_content_stream(model=MODEL, contents="one")
        assert [next(stream).text, next(stream).text] == ["ab", "cd"]
        with pytest.raises(chronicle.ReplayError, match="stopped after 2 item"):
            next(stream)
        replayed: list[Any] = []
        stream = gemini.models.generate_content_stream(model=MODEL, contents="two")
        with pytest.raises(errors.APIError, match="stream interrupted") as raised:
            drain(stream, replayed)
    assert llm_server.request_count == before
    assert [c.text for c in replayed] == ["ij", "kl"]
    assert (type(raised.value), raised.value.code) == (errors.ServerError, 500)


def test_gemini_replay_serves_each_call_in_the_shape_it_asks_for(gemini, llm_server, recording):
    llm_server.reply_with(gemini_text("recorded whole"), streamed(gemini_text("recorded streamed")))
    with chronicle.record("gemini-shapes") as session:
        whole = gemini.models.generate_content(model=MODEL, contents="a")
        list(gemini.models.generate_content_stream(model=MODEL, contents="b"))
        chat = gemini.chats.create(model=MODEL)  # the SDK's chat goes through the stream
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
        (chunk,) = gemini.models.generate_content_stream(model=MODEL, contents="a")
        # recorded as a stream, asked whole: the assembled response
        assembled = gemini.models.generate_content(model=MODEL, contents="b")
        chat = gemini.chats.create(model=MODEL)
        said_again = "".join(chunk.text or "" for chunk in chat.send_message_stream("hello"))
    assert llm_server.request_count == before
    assert isinstance(chunk, types.GenerateContentResponse)
    assert sdk_fields(chunk) == sdk_fields(whole)
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
        "model_version": MODEL,
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


def test_hooks_see_the_assembled_stream_and_an_abort_sends_no_request(
    gemini, llm_server, recording
):
    events: list[Any] = []
    block = False

    def enter(call: chronicle.CallInfo) -> None:
        events.append(("enter", llm_server.request_count))
        if block:
            raise chronicle.AbortCall("no streaming today")

    def crossing(call: chronicle.CallInfo, result: object) -> None:
        events.append(("crossing", result))

    chronicle.default_hooks.register(chronicle.FunctionHook(enter, crossing=crossing))
    llm_server.reply_with(streamed(gemini_text("hooked"), deltas=2))
    with chronicle.record("gemini-hooks") as session:
        for chunk in gemini.models.generate_content_stream(model=MODEL, contents="hi"):
            events.append(("chunk", chunk.text))
        block = True
        with pytest.raises(chronicle.AbortCall):
            list(gemini.models.generate_content_stream(model=MODEL, contents="again"))
    assert [event[0] for event in events] == ["enter", "chunk", "chunk", "crossing", "enter"]
    assert events[0][1] == 0 and events[-1][1] == 1  # before any request; the abort sent none
    assembled = events[3][1]
    assert isinstance(assembled, types.GenerateContentResponse)  # as the SDK's type
    assert assembled.text == "hooked"
    assert llm_server.request_count == 1
    _, aborted = recording.saved(session.trace_id, 2)
    assert aborted["output"]["error"]["type"] == "AbortCall"


def test_a_key_split_across_gemini_chunks_is_stored_in_no_chunk(gemini, llm_server, recording):
    key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789"
    llm_server.reply_with(streamed(gemini_text(f"Use {key} here."), deltas=12))
    with chronicle.record("gemini-secret") as session:
        chunks = list(gemini.models.generate_content_stream(model=MODEL, contents="Key?"))
    assert "".join(c.text or "" for c in chunks) == f"Use {key} here."

    (envelope,) = recording.saved(session.trace_id, 1)
    masked = "Use [REDACTED:openai_key] here."
    assert envelope["output"]["content"] == [{"type": "text", "text": masked}]
    metadata = envelope["metadata"]
    assert metadata["chronicle.chunks_rebuilt"] is True
    assert key not in json.dumps(metadata.get("chronicle.chunks") or [])
    assert key not in json.dumps(envelope)

    with replay_of(session) as run:
        again = list(gemini.models.generate_content_stream(model=MODEL, contents="Key?"))
    assert "".join(c.text or "" for c in again) == masked
    assert run.captured_result(NAME, 1).text == masked


def test_a_response_with_a_field_this_sdk_does_not_know_replays_plain_and_streamed(
    client, llm_server, recording
):
    chronicle.wrap(client)
    llm_server.reply_with(gemini_text("It is sunny."), streamed(gemini_text("It is sunny.")))
    with chronicle.record("gemini-newer") as session:
        client.models.generate_content(model=MODEL, contents="Weather?")
        list(client.models.generate_content_stream(model=MODEL, contents="Hi"))
    # What a newer google-genai records: a field this SDK's models do not have. The SDK itself
    # drops the fields it does not know from a response (``_from_response``); so does a replay.
    newer = copy.deepcopy(recording.saved(session.trace_id, 2))
    for envelope in newer:
        envelope["output"]["raw"]["new_field_from_a_newer_sdk"] = {"x": 1}
        for chunk in envelope["metadata"].get("chronicle.chunks") or []:
            chunk["new_field_from_a_newer_sdk"] = 1
    before = llm_server.request_count
    with chronicle.replay(newer, strict=True) as run:
        replayed = client.models.generate_content(model=MODEL, contents="Weather?")
        chunks = list(client.models.generate_content_stream(model=MODEL, contents="Hi"))
    assert llm_server.request_count == before
    assert run.divergences() == []
    assert isinstance(replayed, types.GenerateContentResponse)
    assert replayed.text == "It is sunny."
    assert all(isinstance(c, types.GenerateContentResponse) for c in chunks)
    assert "".join(c.text or "" for c in chunks) == "It is sunny."
