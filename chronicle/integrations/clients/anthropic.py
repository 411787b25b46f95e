"""The ``anthropic`` SDK: ``messages.create`` and the ``messages.stream(...)`` helper of an
``Anthropic`` client (sync or async) or of its ``messages`` resource. The JSON is read by
``chronicle.llm.anthropic``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pydantic import JsonValue

from chronicle.integrations.clients.install import sent_body
from chronicle.integrations.clients.streams import StreamTypes, model_restorer, union_restorer
from chronicle.integrations.clients.target import (
    Target,
    client_metadata,
    is_async_resource,
    validates_responses,
)
from chronicle.llm.anthropic import ANTHROPIC_MESSAGES, AnthropicMessagesAdapter
from chronicle.llm.anthropic_streams import MessagesStreamAssembler, message_events
from chronicle.llm.canonical import LlmAdapter
from chronicle.llm.providers import provider_of_client
from chronicle.recording.failure import sdk_error_restorer

ANTHROPIC_MESSAGES_NAME = "anthropic.messages.create"
"""Boundary name of ``messages.create`` on an Anthropic client."""
_ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
ANTHROPIC_ERRORS = sdk_error_restorer("anthropic", wrapped_body=False)


def messages_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    """The recorded ``Message`` as the events that would have built it (a replayed stream)."""
    return message_events(raw)


def anthropic_targets(obj: object) -> list[Target] | None:
    """An ``Anthropic``/``AsyncAnthropic`` client's (or ``messages`` resource's) targets; ``None``
    for another object (``AnthropicBedrock``, ``AnthropicVertex``: found by their shape)."""
    import anthropic  # optional: only for an object that comes from the anthropic SDK
    from anthropic.resources.messages import AsyncMessages, Messages  # optional, as above

    if isinstance(obj, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        client: object = obj
        messages = getattr(obj, "messages", None)
    elif isinstance(obj, (Messages, AsyncMessages)):
        client, messages = getattr(obj, "_client", None), obj
        if not isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
            return None  # Bedrock, Vertex, ...: another provider, detected by shape
    else:
        return None  # AnthropicBedrock, AnthropicVertex, ...: detected by shape
    if messages is None:
        return []
    base_url = getattr(client, "base_url", None)
    metadata = client_metadata("anthropic", base_url, _ANTHROPIC_DEFAULT_URL)
    provider = provider_of_client(client, base_url)
    adapter = ANTHROPIC_MESSAGES if provider == "anthropic" else AnthropicMessagesAdapter(provider)
    target = messages_target(
        messages,
        provider,
        adapter,
        metadata,
        strict=validates_responses(client),
        is_async=is_async_resource(messages),
    )
    return [replace(target, restore_error=ANTHROPIC_ERRORS)]


def messages_target(
    messages: object,
    provider: str,
    adapter: LlmAdapter,
    metadata: Mapping[str, JsonValue],
    *,
    strict: bool,
    is_async: bool,
) -> Target:
    """``messages.create`` of a client built on the anthropic SDK (its own, or another
    provider's such as ``AnthropicBedrock``): recorded as the fields the server sent
    (``install.sent_body``), replayed as the SDK's ``Message`` and stream events with those set,
    the ``messages.stream(...)`` helper recorded as the same boundary."""
    from anthropic.types import Message, RawMessageStreamEvent  # optional: an anthropic client

    message = model_restorer(Message, strict=strict)
    event = union_restorer(RawMessageStreamEvent, strict=strict)
    streams = StreamTypes(MessagesStreamAssembler, event, message, messages_rechunk)
    return Target(
        owner=messages,
        attr="create",
        name=ANTHROPIC_MESSAGES_NAME,
        provider=provider,
        adapter=adapter,
        restore=message,
        is_async=is_async,
        metadata=metadata,
        streams=streams,
        helper="stream",
        extract_result=sent_body,
        path="v1/messages",
    )
