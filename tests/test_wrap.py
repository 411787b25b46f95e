"""``chronicle.wrap(client)``: the real OpenAI and Anthropic SDK clients against ``LlmServer``.

Every call is recorded to the real control plane (fixture ``recording``) and replayed with no
request to the model server. The other clients have files of their own: ``test_gemini.py``,
``test_bedrock.py``, ``test_litellm.py`` (the real LiteLLM) and ``test_wrap_by_shape.py``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from chronicle.integrations.clients import RecordedRawResponse, wrap
from tests.support.calls import (
    CHAT,
    MESSAGES,
    RESPONSES,
    USER,
    buckets,
    client_of,
    recorded_tool_call,
)
from tests.support.llm_server import (
    LlmServer,
    chat_error,
    chat_text,
    chat_tool_calls,
    chat_usage,
    messages_error,
    messages_text,
    messages_tool_use,
    messages_usage,
    responses_text,
    responses_tool_calls,
    tool_call,
)
from tests.support.recording import only, replay_of


def boundary_of(method: Any) -> Any:
    """The ``BoundarySpec`` that ``wrap`` attached to a method it replaced."""
    return method.__chronicle_boundary__


# ---- clients ----------------------------------------------------------------------------------


@pytest.fixture
def oai(llm_server: LlmServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=llm_server.openai_base_url, api_key="test-key", max_retries=0
    ) as client:
        yield client


@pytest.fixture
def claude(llm_server: LlmServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=llm_server.anthropic_base_url, api_key="test-key", max_retries=0
    ) as client:
        yield client


def azure_client(llm_server: LlmServer, **options: Any) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=llm_server.azure_endpoint,
        api_key="test-key",
        api_version="2024-10-21",
        max_retries=0,
        **options,
    )


# ---- OpenAI -----------------------------------------------------------------------------------


def test_wrap_replaces_the_methods_in_place_and_returns_the_client(oai):
    assert wrap(oai) is oai
    assert boundary_of(oai.chat.completions.create).name == CHAT
    assert boundary_of(oai.responses.create).name == RESPONSES
    spec = boundary_of(oai.chat.completions.create)
    assert spec.kind == "llm"
    assert spec.provider == "openai"
    fresh = openai.OpenAI(api_key="test-key")
    assert not hasattr(fresh.chat.completions.create, "__chronicle_boundary__")  # only in place
    fresh.close()


def test_openai_chat_is_recorded_and_replayed_as_a_chat_completion(oai, llm_server, recording):
    wrap(oai)
    llm_server.reply_with(chat_text("It is sunny.", usage=chat_usage(12, 4)))
    with chronicle.record("openai-chat") as session:
        live = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, temperature=0.2)
    assert isinstance(live, ChatCompletion)
    assert live.choices[0].message.content == "It is sunny."

    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == CHAT
    assert envelope["kind"] == "llm"
    assert envelope["envelope_status"]["status"] == "success"
    assert envelope["input"]["raw"] == {
        "model": "gpt-4o-mini",
        "messages": USER,
        "temperature": 0.2,
    }
    assert envelope["input"]["model"] == "gpt-4o-mini"
    assert envelope["input"]["params"]["temperature"] == 0.2
    output = envelope["output"]
    assert output["provider"] == "openai"
    assert output["model"] == "gpt-4o-mini"
    assert output["finish_reason"] == "stop"
    assert output["content"] == [{"type": "text", "text": "It is sunny."}]
    assert output["raw"] == live.model_dump(mode="json", exclude_unset=True, by_alias=True)
    assert output["response_id"] == live.id
    assert client_of(envelope) == ("openai", openai.__version__, llm_server.openai_base_url)

    before = llm_server.request_count
    with replay_of(session) as run:
        replayed = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, temperature=0.2)
    assert llm_server.request_count == before  # no HTTP request
    assert isinstance(replayed, ChatCompletion)
    assert replayed.model_dump() == live.model_dump()
    assert replayed.choices[0].message.content == "It is sunny."
    assert [(c.name, c.invocation_index, c.mode) for c in run.call_log()] == [(CHAT, 1, "stub")]
    assert run.captured_result(CHAT, 1) is replayed


def test_async_openai_chat_is_recorded_and_replayed(llm_server, recording):
    async def main() -> None:
        async with openai.AsyncOpenAI(
            base_url=llm_server.openai_base_url, api_key="test-key", max_retries=0
        ) as client:
            assert wrap(client) is client
            llm_server.reply_with(chat_text("async hello"))
            async with chronicle.record("openai-async") as session:
                live = await client.chat.completions.create(model="gpt-4o-mini", messages=USER)
            assert isinstance(live, ChatCompletion)
            envelope = only(recording.saved(session.trace_id, 1))
            assert envelope["name"] == CHAT
            assert envelope["output"]["raw"] == live.model_dump(
                mode="json", exclude_unset=True, by_alias=True
            )
            assert envelope["output"]["content"] == [{"type": "text", "text": "async hello"}]
            before = llm_server.request_count
            async with replay_of(session):
                replayed = await client.chat.completions.create(model="gpt-4o-mini", messages=USER)
            assert llm_server.request_count == before
            assert isinstance(replayed, ChatCompletion)
            assert replayed.choices[0].message.content == "async hello"

    asyncio.run(main())


def test_openai_responses_is_recorded_and_replayed_as_a_response(oai, llm_server, recording):
    wrap(oai)
    llm_server.reply_with(responses_text("Bonjour."))
    with chronicle.record("responses") as session:
        live = oai.responses.create(
            model="gpt-4.1-mini", input="Say hello in French", instructions="Be brief"
        )
    assert live.output_text == "Bonjour."
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == RESPONSES
    assert envelope["input"]["system"] == "Be brief"
    assert envelope["input"]["messages"] == [{"role": "user", "content": "Say hello in French"}]
    assert envelope["output"]["provider"] == "openai"
    assert envelope["output"]["content"] == [{"type": "text", "text": "Bonjour."}]
    assert envelope["output"]["finish_reason"] == "stop"
    assert envelope["output"]["raw"] == live.model_dump(
        mode="json", exclude_unset=True, by_alias=True
    )

    before = llm_server.request_count
    with replay_of(session):
        replayed = oai.responses.create(
            model="gpt-4.1-mini", input="Say hello in French", instructions="Be brief"
        )
    assert llm_server.request_count == before
    assert isinstance(replayed, Response)
    assert replayed.output_text == "Bonjour."  # an SDK helper on the rebuilt type
    assert replayed.model_dump() == live.model_dump()


def test_openai_tool_calls_are_recorded_and_replayed(oai, llm_server, recording):
    wrap(oai)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    llm_server.reply_with(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"}, id="call_1")),
        responses_tool_calls(tool_call("get_weather", {"city": "Rome"}, id="call_2")),
    )
    with chronicle.record("tools") as session:
        chat = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, tools=tools)
        resp = oai.responses.create(
            model="gpt-4.1-mini",
            input="Weather in Rome?",
            tools=[{"type": "function", "name": "get_weather", "parameters": {}}],
        )
    assert chat.choices[0].message.tool_calls[0].function.name == "get_weather"
    chat_env, resp_env = recording.saved(session.trace_id, 2)
    assert chat_env["input"]["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert chat_env["output"]["finish_reason"] == "tool_calls"
    assert chat_env["output"]["content"] == [
        recorded_tool_call("call_1", "get_weather", {"city": "Paris"})
    ]
    assert resp_env["output"]["finish_reason"] == "tool_calls"
    assert resp_env["output"]["content"] == [
        recorded_tool_call("call_2", "get_weather", {"city": "Rome"})
    ]

    before = llm_server.request_count
    with replay_of(session):
        chat_again = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, tools=tools)
        resp_again = oai.responses.create(model="gpt-4.1-mini", input="Weather in Rome?")
    assert llm_server.request_count == before
    call = chat_again.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_1",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert resp_again.output[0].type == "function_call"
    assert resp_again.output[0].name == "get_weather"
    assert resp.output[0].call_id == resp_again.output[0].call_id == "call_2"


def test_a_provider_error_is_a_recorded_failure_and_replays_as_the_sdk_exception(
    oai, llm_server, recording
):
    wrap(oai)
    llm_server.reply_with(chat_error(400, "model 'nope' does not exist"))
    with chronicle.record("error") as session, pytest.raises(openai.BadRequestError) as raised:
        oai.chat.completions.create(model="nope", messages=USER)
    assert raised.value.status_code == 400  # the SDK's own exception, unchanged
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "BadRequestError"
    assert "model 'nope' does not exist" in envelope["output"]["error"]["message"]
    assert envelope["metadata"]["client.library"] == "openai"

    before = llm_server.request_count
    with replay_of(session), pytest.raises(openai.BadRequestError) as replayed:
        oai.chat.completions.create(model="nope", messages=USER)
    assert llm_server.request_count == before
    assert replayed.value.status_code == 400
    assert str(replayed.value) == str(raised.value)
    cause = replayed.value.__cause__
    assert isinstance(cause, chronicle.RecordedCallError)
    assert cause.original_type == "BadRequestError"
    assert f"ReplayPlan().run({CHAT!r}, 1)" in str(cause)


def test_openai_usage_buckets_on_the_control_plane(oai, llm_server, recording):
    wrap(oai)
    usage = chat_usage(100, 30, cached_tokens=20, reasoning_tokens=5)
    llm_server.reply_with(chat_text("thought about it", usage=usage))
    with chronicle.record("usage") as session:
        oai.chat.completions.create(model="o4-mini", messages=USER)
    envelope = only(recording.saved(session.trace_id, 1))
    stored = recording.control_plane.span_envelopes(
        session.trace_id, session.span_id
    )  # replay's read
    assert only(stored)["output"]["usage"] == buckets(
        input=80, cached_read=20, output=25, reasoning=5
    )
    assert envelope["output"]["raw"]["usage"]["prompt_tokens"] == 100


def test_client_metadata_base_url_only_when_not_the_default_and_without_credentials():
    default = openai.OpenAI(api_key="test-key")
    proxied = openai.OpenAI(
        api_key="test-key", base_url="https://user:pa55word@proxy.example:8443/llm/v1?key=abc#x"
    )
    claude_default = anthropic.Anthropic(api_key="test-key")
    try:
        for client in (default, proxied, claude_default):
            wrap(client)
        assert boundary_of(default.chat.completions.create).static_metadata == {
            "client.library": "openai",
            "client.version": openai.__version__,
        }
        assert boundary_of(proxied.responses.create).static_metadata == {
            "client.library": "openai",
            "client.version": openai.__version__,
            "client.base_url": "https://proxy.example:8443/llm/v1",
        }
        assert boundary_of(claude_default.messages.create).static_metadata == {
            "client.library": "anthropic",
            "client.version": anthropic.__version__,
        }
    finally:
        for client in (default, proxied, claude_default):
            client.close()


def test_wrapping_twice_records_once(oai, llm_server, recording):
    wrap(oai)
    wrapped = oai.chat.completions.create
    wrap(oai)
    wrap(oai.chat.completions)  # the resource of a wrapped client
    assert oai.chat.completions.create is wrapped
    assert not hasattr(wrapped.__wrapped__, "__chronicle_boundary__")
    with chronicle.record("twice") as session:
        oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
    only(recording.saved(session.trace_id, 1))
    assert chronicle.flush(10)
    assert len(recording.control_plane.trace_envelopes(session.trace_id)) == 1


def test_an_unknown_client_is_a_type_error_naming_the_alternatives():
    class HomeMadeClient:
        pass

    with pytest.raises(TypeError) as caught:
        wrap(HomeMadeClient())
    message = str(caught.value)
    assert "HomeMadeClient" in message
    assert "chronicle.wrap_llm" in message
    assert '@chronicle.boundary("my_model", kind="llm")' in message
    assert "openai.OpenAI" in message and "anthropic.Anthropic" in message
    with pytest.raises(TypeError, match="pass an instance"):
        wrap(openai.OpenAI)
    with pytest.raises(TypeError, match="the module json"):
        wrap(sys.modules["json"])
    with pytest.raises(TypeError, match="does not know how to wrap"):
        wrap(openai.OpenAI(api_key="test-key").embeddings)


def test_every_streamed_form_is_one_envelope(oai, claude, llm_server, recording):
    wrap(oai)
    wrap(claude)
    with chronicle.record("streams") as session:
        chunks = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.startswith("echo: What is the weather")
        with oai.chat.completions.stream(model="gpt-4o-mini", messages=USER) as stream:
            final = stream.get_final_completion()
        assert final.choices[0].message.content.startswith("echo: ")
        events = list(oai.responses.create(model="gpt-4.1-mini", input="hi", stream=True))
        assert events[-1].type == "response.completed"
        with oai.responses.stream(model="gpt-4.1-mini", input="hi") as stream:
            assert stream.get_final_response().output_text == "echo: hi"
        with oai.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=USER
        ) as response:
            assert response.parse().choices[0].message.content.startswith("echo: ")
        kinds = [
            e.type
            for e in claude.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=USER, stream=True
            )
        ]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=USER
        ) as stream:
            assert stream.get_final_text().startswith("echo: ")
        oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert llm_server.request_count == 8
    envelopes = recording.saved(session.trace_id, 8)
    names = [CHAT, CHAT, RESPONSES, RESPONSES, CHAT, MESSAGES, MESSAGES, CHAT]
    assert [e["name"] for e in envelopes] == names
    streamed = [bool(e["metadata"].get("chronicle.streamed")) for e in envelopes]
    assert streamed == [True, True, True, True, False, True, True, False]
    for envelope in envelopes:
        assert envelope["output"]["content"][0]["text"].startswith("echo: ")


def test_with_raw_response_is_recorded_and_replays_a_raw_response(oai, llm_server, recording):
    wrap(oai)
    llm_server.reply_with(chat_text("raw hello"))
    with chronicle.record("raw") as session:
        raw = oai.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=USER)
    assert raw.headers["x-request-id"].startswith("req_")  # the SDK's own raw response
    parsed = raw.parse()
    assert isinstance(parsed, ChatCompletion)
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["output"]["raw"] == parsed.model_dump(
        mode="json", exclude_unset=True, by_alias=True
    )
    assert "extra_headers" not in envelope["input"]["raw"]

    before = llm_server.request_count
    with replay_of(session):
        again = oai.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=USER)
    assert llm_server.request_count == before
    assert isinstance(again, RecordedRawResponse)
    assert isinstance(again.parse(), ChatCompletion)
    assert again.parse().choices[0].message.content == "raw hello"
    assert again.headers.get("x-request-id") is None


def test_a_streaming_response_whose_body_read_fails_is_recorded_as_that_failure(
    oai, llm_server, recording
):
    # with_streaming_response reads the body after create returned: the call ends at that read
    wrap(oai)
    llm_server.reply_with(chat_text("late hello"))
    with chronicle.record("late-fails") as session:
        with oai.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=USER
        ) as response:
            with pytest.raises(ValueError, match="invalid literal"):
                response.parse(to=int)  # the SDK's own error reaches the caller unchanged
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["output"]["error"]["type"] == "ValueError"
    assert envelope["metadata"]["chronicle.incomplete"] is True


def test_the_raw_wrapper_built_before_wrap_is_rebuilt(oai, llm_server, recording):
    _ = oai.chat.completions.with_raw_response  # cached with the unwrapped create
    wrap(oai)
    with chronicle.record("raw-before") as session:
        oai.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=USER).parse()
    assert only(recording.saved(session.trace_id, 1))["name"] == CHAT


# ---- Azure ------------------------------------------------------------------------------------


def test_azure_chat_records_provider_azure_and_the_deployment(llm_server, recording):
    with azure_client(llm_server) as client:
        wrap(client)
        llm_server.reply_with(chat_text("from azure"))
        with chronicle.record("azure") as session:
            live = client.chat.completions.create(model="prod-gpt4o", messages=USER)
        assert llm_server.last_request.deployment == "prod-gpt4o"
        envelope = only(recording.saved(session.trace_id, 1))
        assert envelope["name"] == CHAT
        assert envelope["output"]["provider"] == "azure"
        assert envelope["output"]["deployment_id"] == "prod-gpt4o"
        assert envelope["metadata"]["client.base_url"] == llm_server.azure_endpoint + "/openai"
        assert envelope["metadata"]["client.api_version"] == "2024-10-21"
        assert boundary_of(client.chat.completions.create).provider == "azure"

        before = llm_server.request_count
        with replay_of(session):
            replayed = client.chat.completions.create(model="prod-gpt4o", messages=USER)
        assert llm_server.request_count == before
        assert isinstance(replayed, ChatCompletion)
        assert replayed.model_dump() == live.model_dump()


def test_azure_client_with_a_fixed_deployment_records_that_deployment(llm_server, recording):
    with azure_client(llm_server, azure_deployment="fixed-dep") as client:
        wrap(client)
        with chronicle.record("azure-fixed") as session:
            client.chat.completions.create(model="gpt-4o", messages=USER)
            client.responses.create(model="gpt-4o", input="hi")
        assert llm_server.requests[0].deployment == "fixed-dep"
        chat_env, resp_env = recording.saved(session.trace_id, 2)
    assert chat_env["output"]["deployment_id"] == "fixed-dep"
    assert resp_env["name"] == RESPONSES
    assert resp_env["output"]["provider"] == "azure"
    assert resp_env["output"]["deployment_id"] == "fixed-dep"


# ---- Anthropic --------------------------------------------------------------------------------


def test_anthropic_messages_are_recorded_and_replayed_as_a_message(claude, llm_server, recording):
    assert wrap(claude) is claude
    llm_server.reply_with(
        messages_text("Sunny, 24C.", usage=messages_usage(50, 7, cache_read_input_tokens=30))
    )
    with chronicle.record("anthropic") as session:
        live = claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=256, system="Be brief", messages=USER
        )
    assert isinstance(live, Message)
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == MESSAGES
    assert envelope["input"]["system"] == "Be brief"
    assert envelope["input"]["params"]["max_tokens"] == 256
    output = envelope["output"]
    assert output["provider"] == "anthropic"
    assert output["finish_reason"] == "stop"
    assert output["content"] == [{"type": "text", "text": "Sunny, 24C."}]
    assert output["usage"] == buckets(input=50, cached_read=30, output=7)
    assert output["raw"] == live.model_dump(mode="json", exclude_unset=True, by_alias=True)
    assert client_of(envelope) == ("anthropic", anthropic.__version__, llm_server.url)

    before = llm_server.request_count
    with replay_of(session):
        replayed = claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=256, system="Be brief", messages=USER
        )
    assert llm_server.request_count == before
    assert isinstance(replayed, Message)
    block = replayed.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    assert block.text == "Sunny, 24C."
    assert replayed.model_dump() == live.model_dump()


def test_async_anthropic_tool_use_is_recorded_and_replayed(llm_server, recording):
    async def main() -> None:
        async with anthropic.AsyncAnthropic(
            base_url=llm_server.anthropic_base_url, api_key="test-key", max_retries=0
        ) as client:
            wrap(client)
            llm_server.reply_with(
                messages_tool_use(tool_call("get_weather", {"city": "Paris"}, id="toolu_1"))
            )
            async with chronicle.record("anthropic-async") as session:
                live = await client.messages.create(
                    model="claude-sonnet-4-5", max_tokens=128, messages=USER
                )
            assert live.stop_reason == "tool_use"
            envelope = only(recording.saved(session.trace_id, 1))
            assert envelope["output"]["finish_reason"] == "tool_calls"
            assert envelope["output"]["content"] == [
                recorded_tool_call("toolu_1", "get_weather", {"city": "Paris"})
            ]
            before = llm_server.request_count
            async with replay_of(session):
                replayed = await client.messages.create(
                    model="claude-sonnet-4-5", max_tokens=128, messages=USER
                )
            assert llm_server.request_count == before
            assert isinstance(replayed, Message)
            assert replayed.content[0].type == "tool_use"
            assert replayed.content[0].input == {"city": "Paris"}

    asyncio.run(main())


def test_anthropic_error_is_recorded_with_the_sdk_exception_name(claude, llm_server, recording):
    wrap(claude)
    llm_server.reply_with(messages_error(429, "slow down"))
    with chronicle.record("anthropic-error") as session, pytest.raises(anthropic.RateLimitError):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=USER)
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "RateLimitError"
    with replay_of(session), pytest.raises(anthropic.RateLimitError, match="slow down"):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=USER)


def test_a_resource_can_be_wrapped_on_its_own(claude, oai, llm_server, recording):
    assert wrap(claude.messages) is claude.messages
    assert wrap(oai.responses) is oai.responses
    assert not hasattr(oai.chat.completions.create, "__chronicle_boundary__")
    with chronicle.record("resources") as session:
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=USER)
        oai.responses.create(model="gpt-4.1-mini", input="hi")
        oai.chat.completions.create(model="gpt-4o-mini", messages=USER)  # not wrapped
    names = [e["name"] for e in recording.saved(session.trace_id, 2)]
    assert names == [MESSAGES, RESPONSES]


# ---- OpenTelemetry ----------------------------------------------------------------------------


def test_a_wrapped_call_span_has_openinference_llm_attributes(oai, llm_server, control_plane):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)
    wrap(oai)
    llm_server.reply_with(chat_text("ok", usage=chat_usage(100, 30, cached_tokens=20)))
    with chronicle.record("otel"):
        oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert chronicle.flush(10)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    attributes: Any = spans["chat gpt-4o-mini"].attributes  # the GenAI convention's name
    assert attributes["chronicle.boundary"] == CHAT
    assert attributes["openinference.span.kind"] == "LLM"
    assert attributes["llm.model_name"] == "gpt-4o-mini"
    assert attributes["llm.provider"] == "openai"
    assert attributes["llm.token_count.prompt"] == 100
    assert attributes["llm.token_count.completion"] == 30
    assert attributes["llm.token_count.total"] == 130
    assert attributes["llm.token_count.prompt_details.cache_read"] == 20
    assert attributes["llm.input_messages.0.message.content"] == USER[0]["content"]


def test_wrapped_clients_work_with_chronicle_unconfigured(oai, llm_server):
    wrap(oai)
    reply = oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert isinstance(reply, ChatCompletion)
    assert (reply.choices[0].message.content or "").startswith("echo: ")


# ---- LangChain (optional) ---------------------------------------------------------------------


def test_langchain_chat_openai_client_can_be_wrapped(llm_server, recording):
    langchain_openai = pytest.importorskip("langchain_openai")
    chat = langchain_openai.ChatOpenAI(
        model="gpt-4o-mini", api_key="test-key", base_url=llm_server.openai_base_url, max_retries=0
    )
    assert chronicle_wrap(chat.client) is chat.client
    llm_server.reply_with(chat_text("from langchain"))
    with chronicle.record("langchain") as session:
        answer = chat.invoke("What is the weather in Paris?")
    assert answer.content == "from langchain"
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == CHAT
    assert envelope["input"]["messages"] == USER

    before = llm_server.request_count
    with replay_of(session):
        again = chat.invoke("What is the weather in Paris?")
    assert llm_server.request_count == before
    assert again.content == "from langchain"


def test_langchain_chat_openai_itself_can_be_wrapped_async_too(llm_server, recording):
    langchain_openai = pytest.importorskip("langchain_openai")
    chat = langchain_openai.ChatOpenAI(
        model="gpt-4o-mini", api_key="test-key", base_url=llm_server.openai_base_url, max_retries=0
    )
    assert chronicle_wrap(chat) is chat

    async def main() -> str:
        try:
            async with chronicle.record("langchain-async") as session:
                answer = await chat.ainvoke("hi")
        finally:
            await chat.root_async_client.close()  # its connection belongs to this event loop
        only(recording.saved(session.trace_id, 1))
        return str(answer.content)

    assert asyncio.run(main()) == "echo: hi"


def chronicle_wrap(obj: Any) -> Any:
    """``chronicle.wrap`` once the package exports it, this module's ``wrap`` until then."""
    return getattr(chronicle, "wrap", wrap)(obj)
