"""``chronicle.wrap`` on clients it does not know by type: detected by shape, or refused clearly.

An OpenAI-compatible client (``chat.completions.create``) is recorded as OpenAI chat and an
Anthropic-style one (``messages.create``) as Anthropic Messages; the provider is what the client
names (its API host, its package) or ``unknown``. Calls go to ``LlmServer`` over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from pydantic import JsonValue

import chronicle
from chronicle.llm.providers import provider_of_client, provider_of_host
from tests.support.calls import CHAT, MESSAGES, USER, buckets, recorded_tool_call
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    chat_tool_calls,
    chat_usage,
    messages_text,
    messages_tool_use,
    streamed,
    tool_call,
)
from tests.support.recording import only, replay_of, streamed_metadata


def boundary_of(method: Any) -> Any:
    """The ``BoundarySpec`` that ``wrap`` attached to a method it replaced."""
    return method.__chronicle_boundary__


class HomeMadeClient:
    """A small OpenAI-compatible client of its own: plain httpx, JSON dicts back; with
    ``stream=True``, a generator of the SSE chunks as dicts."""

    class _Completions:
        def __init__(self, owner: HomeMadeClient) -> None:
            self._url = f"{owner.base_url}/chat/completions"

        def create(self, *, model: str, messages: list[dict[str, Any]], **options: Any) -> Any:
            body = {"model": model, "messages": messages, **options}
            if options.get("stream"):
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

    class _Chat:
        def __init__(self, owner: HomeMadeClient) -> None:
            self.completions = HomeMadeClient._Completions(owner)

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.chat = HomeMadeClient._Chat(self)


class HomeMadeAsyncAnthropic:
    """A small Anthropic-style async client: ``messages.create`` is ``async def``; with
    ``stream=True`` it returns an async generator of the SSE events as dicts."""

    class _Messages:
        def __init__(self, base_url: str) -> None:
            self._url = f"{base_url}/v1/messages"

        async def create(self, **body: Any) -> Any:
            if body.get("stream"):
                return self._events(body)
            async with httpx.AsyncClient() as http:
                reply = await http.post(self._url, json=body)
            reply.raise_for_status()
            return reply.json()

        async def _events(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
            async with httpx.AsyncClient() as http, http.stream("POST", self._url, json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        yield json.loads(line.removeprefix("data: "))

    def __init__(self, base_url: str) -> None:
        self.api_base = base_url
        self.messages = HomeMadeAsyncAnthropic._Messages(base_url)


def test_a_duck_typed_openai_compatible_client_is_recorded_as_openai_chat(llm_server, recording):
    client = HomeMadeClient(llm_server.openai_base_url)
    assert chronicle.wrap(client) is client
    spec = boundary_of(client.chat.completions.create)
    assert (spec.name, spec.provider) == (CHAT, "unknown")  # a loopback host names nobody
    llm_server.reply_with(chat_text("Sunny.", usage=chat_usage(20, 3, cached_tokens=5)))
    with chronicle.record("home-made") as session:
        live = client.chat.completions.create(model="llama-3.1-8b", messages=USER)
    assert live["choices"][0]["message"]["content"] == "Sunny."

    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == CHAT
    assert envelope["input"]["messages"] == USER
    output = envelope["output"]
    assert output["provider"] == "unknown"
    assert output["content"] == [{"type": "text", "text": "Sunny."}]
    assert output["usage"] == buckets(input=15, cached_read=5, output=3)
    assert envelope["metadata"]["client.base_url"] == llm_server.openai_base_url

    before = llm_server.request_count
    with replay_of(session):
        replayed = client.chat.completions.create(model="llama-3.1-8b", messages=USER)
    assert llm_server.request_count == before
    assert replayed == live  # the recorded JSON, read as the client's dicts ...
    assert replayed.choices[0].message.content == "Sunny."  # ... or with attribute access


def test_a_duck_typed_async_anthropic_style_client_is_recorded_as_messages(llm_server, recording):
    client = HomeMadeAsyncAnthropic(llm_server.url)
    chronicle.wrap(client)
    llm_server.reply_with(messages_tool_use(tool_call("get_weather", {"city": "Paris"}, id="t1")))

    async def main() -> tuple[Any, chronicle.Session]:
        async with chronicle.record("home-made-async") as session:
            reply = await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, system="Be brief.", messages=USER
            )
        return reply, session

    live, session = asyncio.run(main())
    assert live["stop_reason"] == "tool_use"
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == MESSAGES
    assert envelope["input"]["system"] == "Be brief."
    assert envelope["output"]["provider"] == "unknown"
    assert envelope["output"]["finish_reason"] == "tool_calls"
    assert envelope["output"]["content"] == [
        recorded_tool_call("t1", "get_weather", {"city": "Paris"})
    ]


def test_an_openai_subclass_is_recorded_with_the_provider_its_host_names(llm_server, recording):
    class GatewayClient(openai.OpenAI):
        """An OpenAI-compatible SDK built on the OpenAI client, as many vendors ship."""

    local = GatewayClient(base_url=llm_server.openai_base_url, api_key="test-key", max_retries=0)
    groq = GatewayClient(base_url="https://api.groq.com/openai/v1", api_key="test-key")
    plain_groq = openai.OpenAI(base_url="https://api.groq.com/openai/v1", api_key="test-key")
    try:
        for client in (local, groq, plain_groq):
            chronicle.wrap(client)
        assert boundary_of(groq.chat.completions.create).provider == "groq"
        assert boundary_of(groq.responses.create).provider == "groq"
        assert boundary_of(plain_groq.chat.completions.create).provider == "groq"
        assert boundary_of(local.chat.completions.create).provider == "openai"

        llm_server.reply_with(chat_text("from the gateway"))
        with chronicle.record("subclass") as session:
            local.chat.completions.create(model="gpt-4o-mini", messages=USER)
        envelope = only(recording.saved(session.trace_id, 1))
        assert envelope["output"]["provider"] == "openai"
        with replay_of(session):
            replayed = local.chat.completions.create(model="gpt-4o-mini", messages=USER)
        assert isinstance(replayed, ChatCompletion)  # the SDK's own type, as for openai.OpenAI
        assert replayed.choices[0].message.content == "from the gateway"
    finally:
        for client in (local, groq, plain_groq):
            client.close()


def test_anthropic_bedrock_is_recorded_with_provider_bedrock(
    llm_server: LlmServer, recording: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = anthropic.AnthropicBedrock(
        aws_access_key="AKIAIOSFODNN7EXAMPLE",
        aws_secret_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        aws_region="us-east-1",
        base_url=llm_server.url,
        max_retries=0,
    )
    with client:
        assert chronicle.wrap(client) is client
        llm_server.reply_with(messages_text("Bonjour."))
        with chronicle.record("anthropic-bedrock") as session:
            live = client.messages.create(
                model="anthropic.claude-3-5-sonnet-20240620-v1:0", max_tokens=32, messages=USER
            )
        assert llm_server.last_request.path_model == "anthropic.claude-3-5-sonnet-20240620-v1:0"
        envelope = only(recording.saved(session.trace_id, 1))
        assert envelope["name"] == MESSAGES
        assert envelope["output"]["provider"] == "bedrock"
        with replay_of(session):
            replayed = client.messages.create(
                model="anthropic.claude-3-5-sonnet-20240620-v1:0", max_tokens=32, messages=USER
            )
        assert isinstance(replayed, Message)
        assert replayed.model_dump() == live.model_dump()


@pytest.mark.parametrize(
    ("url", "provider"),
    [
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://api.together.xyz/v1", "together"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://my-resource.openai.azure.com/openai", "azure"),
        ("https://bedrock-runtime.eu-west-1.amazonaws.com", "bedrock"),
        ("https://s3.amazonaws.com", None),
        ("https://us-east5-aiplatform.googleapis.com/v1", "google"),
        ("https://api.openai.com.evil.example/v1", None),
        ("http://127.0.0.1:8080/v1", None),
        ("not a url", None),
    ],
)
def test_provider_of_host(url: str, provider: str | None) -> None:
    assert provider_of_host(url) == provider


def test_provider_of_client_by_package_then_unknown() -> None:
    class Groq:
        pass

    Groq.__module__ = "groq._client"
    assert provider_of_client(Groq(), "http://127.0.0.1:9/v1") == "groq"
    assert provider_of_client(Groq(), "https://api.mistral.ai/v1") == "mistral"  # the host first
    assert provider_of_client(HomeMadeClient("x"), None) == "unknown"


def test_a_client_of_no_known_shape_is_a_type_error_listing_what_wrap_supports():
    class Embedder:
        def embed(self, text: str) -> list[float]:
            return [0.0]

    with pytest.raises(TypeError) as caught:
        chronicle.wrap(Embedder())
    message = str(caught.value)
    assert "Embedder" in message
    for supported in (
        "openai.OpenAI",
        "anthropic.Anthropic",
        "google.genai.Client",
        "bedrock-runtime",
        "litellm",
        "chat.completions.create",
        "messages.create",
    ):
        assert supported in message
    assert 'chronicle.wrap_llm("my_model", fn, provider=...)' in message
    with pytest.raises(TypeError, match="pass an instance"):
        chronicle.wrap(HomeMadeClient)


# ---- stream=True ------------------------------------------------------------------------------

WEATHER: dict[str, JsonValue] = {"city": "Paris", "unit": "celsius"}


def test_stream_true_on_an_openai_compatible_client_is_recorded_and_replayed(llm_server, recording):
    client = chronicle.wrap(HomeMadeClient(llm_server.openai_base_url))
    reply = chat_tool_calls(
        tool_call("get_weather", WEATHER, id="call_1"), text="Let me look.", usage=chat_usage(20, 3)
    )
    llm_server.reply_with(streamed(reply, deltas=4))
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
        recorded_tool_call("call_1", "get_weather", WEATHER),
    ]
    assert output["finish_reason"] == "tool_calls"
    assert output["usage"] == buckets(input=20, output=3)
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
