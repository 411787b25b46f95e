"""A replay gives back what the SDK built: the real openai and anthropic SDKs against
``LlmServer``, recorded to the real control plane and replayed.

A replayed SDK object has exactly the fields the live one had set (``model_dump`` equal, with
``exclude_unset`` too), so code that sends a response's items back (the OpenAI Agents SDK does,
with ``exclude_unset=True``) sends on replay what it sent live, and a strict replay of unchanged
code passes. A replayed ``with_raw_response`` call offers what the SDK's raw response offered.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from typing import Any

import anthropic
import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseFunctionToolCall
from pydantic import BaseModel

import chronicle
from tests.frameworks.quickstart import (
    QUESTION,
    Quickstart,
    Tools,
    check_quickstart,
    script_responses,
)
from tests.support.llm_server import (
    LlmServer,
    Reply,
    chat_text,
    chat_tool_calls,
    messages_tool_use,
    responses_text,
    responses_tool_calls,
    streamed,
    tool_call,
)
from tests.support.recording import Recording

USER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = tool_call("get_weather", {"city": "Paris"})
TOOLS: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def assert_same_build(replayed: object, live: BaseModel) -> None:
    """``replayed`` is the live object's type with the same fields set to the same values."""
    assert type(replayed) is type(live)
    assert isinstance(replayed, BaseModel)
    assert replayed.model_dump(exclude_unset=True) == live.model_dump(exclude_unset=True)
    assert replayed.model_dump() == live.model_dump()


def replay(session: chronicle.Session, *, strict: bool = False) -> Any:
    return chronicle.replay_trace(session.trace_id, session.span_id, strict=strict)


# ---- (a) the objects: live and replayed are built alike ----------------------------------------


def test_a_replayed_response_and_chat_completion_have_the_fields_the_live_ones_had(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(responses_tool_calls(WEATHER, text="Looking it up."))
    llm_server.reply_with(chat_tool_calls(WEATHER))
    llm_server.reply_with(chat_text("Sunny."))
    with chronicle.record("objects") as session:
        response = oai.responses.create(model="gpt-4o-mini", input="Weather?", tools=TOOLS)
        calls = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
        text = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
    # the server did not send these: the live SDK left them unset
    assert "async_" not in response.output[1].model_fields_set
    assert "audio" not in text.choices[0].message.model_fields_set

    envelopes = recording.saved(session.trace_id, 3)
    # output.raw is what the server sent, by its wire names; the canonical fields as before
    assert envelopes[0]["output"]["raw"] == response.model_dump(
        mode="json", exclude_unset=True, by_alias=True
    )
    assert envelopes[0]["output"]["content"][1]["name"] == "get_weather"
    assert envelopes[0]["output"]["finish_reason"] == "tool_calls"
    assert "audio" not in envelopes[2]["output"]["raw"]["choices"][0]["message"]

    before = llm_server.request_count
    with replay(session):
        again = oai.responses.create(model="gpt-4o-mini", input="Weather?", tools=TOOLS)
        calls_again = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
        text_again = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert llm_server.request_count == before
    assert_same_build(again, response)
    assert_same_build(calls_again, calls)
    assert_same_build(text_again, text)
    # what the Agents SDK sends back from it
    assert [item.model_dump(exclude_unset=True) for item in again.output] == [
        item.model_dump(exclude_unset=True) for item in response.output
    ]


def test_a_replayed_anthropic_message_has_the_fields_the_live_one_had(
    claude: anthropic.Anthropic, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(messages_tool_use(WEATHER, text="Looking it up."))
    with chronicle.record("message") as session:
        live = claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=USER)
    recording.saved(session.trace_id, 1)
    with replay(session):
        again = claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=USER)
    assert isinstance(again, Message)
    assert_same_build(again, live)


def test_replayed_stream_events_and_chunks_have_the_fields_the_live_ones_had(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(streamed(responses_tool_calls(WEATHER, text="Looking.")))
    llm_server.reply_with(streamed(chat_tool_calls(WEATHER, text="Looking.")))
    with chronicle.record("streams") as session:
        events = list(oai.responses.create(model="gpt-4o-mini", input="Weather?", stream=True))
        chunks = list(oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True))
    recording.saved(session.trace_id, 2)
    with replay(session):
        events_again = list(
            oai.responses.create(model="gpt-4o-mini", input="Weather?", stream=True)
        )
        chunks_again = list(
            oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        )
    assert len(events_again) == len(events) > 4
    for replayed, live in zip(events_again, events, strict=True):
        assert_same_build(replayed, live)
    assert len(chunks_again) == len(chunks) > 2
    for chunk_again, chunk in zip(chunks_again, chunks, strict=True):
        assert_same_build(chunk_again, chunk)


def _async_call() -> Reply:
    """A function call the server marks ``"async": false``: a field the SDK names ``async_``."""
    reply = responses_tool_calls(WEATHER)
    body = copy.deepcopy(dict(reply.body))
    body["output"][0]["async"] = False
    return dataclasses.replace(reply, body=body)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_field_sent_under_its_wire_name_replays_set(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording, stream: bool
) -> None:
    llm_server.reply_with(streamed(_async_call()) if stream else _async_call())
    with chronicle.record("wire-name") as session:
        live = _final(oai.responses.create(model="gpt-4o-mini", input="Weather?", stream=stream))
    call = live.output[0]
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.async_ is False
    envelope = recording.saved(session.trace_id, 1)[0]
    assert envelope["output"]["raw"]["output"][0]["async"] is False
    with replay(session):
        again = _final(oai.responses.create(model="gpt-4o-mini", input="Weather?", stream=stream))
    call_again = again.output[0]
    assert isinstance(call_again, ResponseFunctionToolCall)
    assert call_again.async_ is False
    assert "async_" not in (call_again.model_extra or {})
    assert_same_build(again, live)


def _final(result: Any) -> Response:
    """A response, or the one a stream's last event carries."""
    if isinstance(result, Response):
        return result
    response: Response = list(result)[-1].response
    return response


# ---- (b) sending the output back: a strict replay of unchanged code passes --------------------


def _two_turns(client: openai.OpenAI) -> str:
    """What the Agents SDK does with the Responses API: the previous response's output items go
    back as input (``model_dump(exclude_unset=True)``), with the tool's output."""
    conversation: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.responses.create(model="gpt-4o-mini", input=conversation, tools=TOOLS)
    conversation += [item.model_dump(exclude_unset=True) for item in first.output]
    call = next(item for item in first.output if item.type == "function_call")
    conversation.append(
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"}
    )
    second = client.responses.create(model="gpt-4o-mini", input=conversation, tools=TOOLS)
    return second.output_text


def test_a_strict_replay_of_a_conversation_sending_the_output_back_has_no_divergence(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(responses_tool_calls(WEATHER, text="Looking it up."))
    llm_server.reply_with(responses_text("It is sunny in Paris."))
    with chronicle.record("two-turns") as session:
        assert _two_turns(oai) == "It is sunny in Paris."
    sent = llm_server.requests[-1].body["input"]
    assert sent[2]["type"] == "function_call"
    assert "async" not in sent[2] and "caller" not in sent[2]  # what the live SDK sent back
    recording.saved(session.trace_id, 2)

    before = llm_server.request_count
    with replay(session, strict=True) as run:
        assert _two_turns(oai) == "It is sunny in Paris."
    assert run.divergences() == []
    assert llm_server.request_count == before


# ---- (c) with_raw_response: what the SDK's raw response offers ---------------------------------


def _raw_chat(client: openai.OpenAI) -> Any:
    return client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=USER)


def assert_replayed_exchange(raw: Any, live: Any, path: str) -> None:
    """A replayed raw response reads like the live one: status, headers, body, request."""
    http_response = raw.http_response
    assert type(http_response) is type(live.http_response)  # the SDK's own HTTP library
    assert http_response.status_code == raw.status_code == 200
    assert raw.headers["content-type"] == "application/json"
    assert int(raw.headers["content-length"]) == len(http_response.content)
    assert http_response.request is raw.http_request
    assert (raw.method, str(raw.url)) == ("POST", str(live.url))
    assert str(live.url).endswith(path)
    assert raw.is_closed and raw.retries_taken == 0 and raw.elapsed.total_seconds() == 0
    assert raw.http_version == "HTTP/1.1"


def test_a_replayed_raw_response_offers_the_http_response_status_headers_and_body(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording
) -> None:
    llm_server.reply_with(chat_tool_calls(WEATHER, text="Looking it up."))
    with chronicle.record("raw") as session:
        live = _raw_chat(oai)
        completion = live.parse()
    recording.saved(session.trace_id, 1)

    before = llm_server.request_count
    with replay(session):
        raw = _raw_chat(oai)
    assert llm_server.request_count == before
    assert_replayed_exchange(raw, live, "/v1/chat/completions")
    parsed = raw.parse()
    assert isinstance(parsed, ChatCompletion)
    assert_same_build(parsed, completion)
    # the body is what the server sent, as the live body was
    assert raw.http_response.json() == live.http_response.json()
    assert json.loads(raw.text) == json.loads(raw.content) == json.loads(live.text)
    assert raw.parse(to=dict) == live.http_response.json()
    assert raw.request_id is None  # the live headers were not recorded


def test_an_async_replayed_raw_response_offers_the_same(
    llm_server: LlmServer, recording: Recording
) -> None:
    async def call(client: openai.AsyncOpenAI) -> tuple[Any, ChatCompletion]:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=USER
        )
        return raw, raw.parse()  # the openai SDK's raw response parses without await

    async def main() -> None:
        async with openai.AsyncOpenAI(
            base_url=llm_server.openai_base_url, api_key="test-key", max_retries=0
        ) as client:
            chronicle.wrap(client)
            llm_server.reply_with(chat_text("Sunny."))
            with chronicle.record("raw-async") as session:
                live, completion = await call(client)
            recording.saved(session.trace_id, 1)
            before = llm_server.request_count
            with replay(session):
                raw, parsed = await call(client)
            assert llm_server.request_count == before
            assert_replayed_exchange(raw, live, "/v1/chat/completions")
            assert_same_build(parsed, completion)
            assert raw.http_response.json() == live.http_response.json()

    asyncio.run(main())


def test_a_replayed_anthropic_raw_response_has_the_sdks_methods_sync_and_async(
    claude: anthropic.Anthropic, llm_server: LlmServer, recording: Recording
) -> None:
    def call() -> Any:
        return claude.messages.with_raw_response.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=USER
        )

    llm_server.reply_with(messages_tool_use(WEATHER, text="Looking it up."))
    with chronicle.record("raw-anthropic") as session:
        live = call()
        message = live.parse()
    recording.saved(session.trace_id, 1)
    with replay(session):
        raw = call()
    assert_replayed_exchange(raw, live, "/v1/messages")
    assert_same_build(raw.parse(), message)
    assert raw.json() == live.json() and json.loads(raw.text()) == live.json()
    assert b"".join(raw.iter_bytes()) == raw.read()

    async def main() -> None:
        async with anthropic.AsyncAnthropic(
            base_url=llm_server.anthropic_base_url, api_key="test-key", max_retries=0
        ) as client:
            chronicle.wrap(client)
            llm_server.reply_with(messages_tool_use(WEATHER, text="Looking it up."))
            with chronicle.record("raw-anthropic-async") as session:
                live = await client.messages.with_raw_response.create(
                    model="claude-sonnet-4-5", max_tokens=64, messages=USER
                )
                message = await live.parse()
            envelope = recording.saved(session.trace_id, 1)[0]
            assert envelope["output"]["raw"] == live.http_response.json()  # its body, recorded
            with replay(session):
                raw = await client.messages.with_raw_response.create(
                    model="claude-sonnet-4-5", max_tokens=64, messages=USER
                )
            assert_replayed_exchange(raw, live, "/v1/messages")
            assert_same_build(await raw.parse(), message)
            assert await raw.json() == await live.json()

    asyncio.run(main())


# ---- the OpenAI Agents SDK on its default model (the Responses API) ----------------------------


def test_the_agents_sdk_default_model_replays_strictly_with_a_wrapped_client(
    recording: Recording, llm_server: LlmServer
) -> None:
    """The README's way, no instrumentor: the client wrapped, each tool a ``@chronicle.boundary``
    under ``@function_tool``; ``check_quickstart`` ends with a strict replay of unchanged code,
    which fails on any item field the replay sends back that the live run did not."""
    tools = Tools()

    @function_tool
    @chronicle.boundary("get_weather")
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return tools.get_weather(city)

    @function_tool
    @chronicle.boundary("get_time")
    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return tools.get_time(city)

    loop = asyncio.new_event_loop()
    client = chronicle.wrap(
        openai.AsyncOpenAI(base_url=llm_server.openai_base_url, api_key="test-key", max_retries=0)
    )
    agent = Agent(
        name="Assistant",
        instructions="You are a helpful assistant. Use the tools to answer.",
        model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
        tools=[get_weather, get_time],
    )

    def run() -> str:
        result = loop.run_until_complete(Runner.run(agent, QUESTION))
        return str(result.final_output)

    set_tracing_disabled(True)  # the SDK's own trace export would post to api.openai.com
    try:
        qs = Quickstart(run, script_responses, tools, llm_server, "openai.responses.create")
        check_quickstart(qs, recording)
    finally:
        set_tracing_disabled(False)
        loop.run_until_complete(client.close())
        loop.close()
    sent = [r.body["input"] for r in llm_server.requests if r.api == "responses"]
    assert len(sent) == 3  # the recording only: every replay was served
    call = next(item for item in sent[1] if item.get("type") == "function_call")
    assert "async" not in call and "caller" not in call  # fields the server never sent
