"""Any other client, by its shape: ``chat.completions.create`` is recorded as OpenAI chat and
``messages.create`` as Anthropic Messages (``AnthropicBedrock``, ``AnthropicVertex`` and
OpenAI-compatible SDKs of other packages)."""

from __future__ import annotations

import inspect

from chronicle.integrations.clients.anthropic import (
    ANTHROPIC_MESSAGES_NAME,
    messages_rechunk,
    messages_target,
)
from chronicle.integrations.clients.openai import OPENAI_CHAT_NAME, chat_rechunk, chat_target
from chronicle.integrations.clients.streams import StreamTypes
from chronicle.integrations.clients.target import (
    Target,
    client_metadata,
    is_async_resource,
    validates_responses,
)
from chronicle.llm.anthropic import AnthropicMessagesAdapter
from chronicle.llm.anthropic_streams import MessagesStreamAssembler
from chronicle.llm.canonical import LlmAdapter
from chronicle.llm.openai import OpenAIChatAdapter
from chronicle.llm.openai_streams import ChatStreamAssembler
from chronicle.llm.providers import provider_of_client
from chronicle.replay.recorded import restore_plain


def _create_of(obj: object, *path: str) -> object | None:
    """``obj.<path>`` when it has a callable ``create``, else ``None``."""
    resource: object = obj
    try:  # an arbitrary object: its attributes may be properties that raise
        for name in path:
            resource = getattr(resource, name)
        return resource if callable(getattr(resource, "create", None)) else None
    except Exception:
        return None


def _create_is_async(resource: object) -> bool:
    create = getattr(resource, "create", None)
    return is_async_resource(resource) or inspect.iscoroutinefunction(create)


def shaped_targets(obj: object) -> list[Target] | None:
    """Targets for a client of no known type that has ``chat.completions.create`` (OpenAI chat)
    or ``messages.create`` (Anthropic Messages). Its ``stream=True`` calls are recorded when
    they return an iterator (an async one for an async client) of chunks or events in that API's
    shape (SDK objects or dicts), replayed as the recorded JSON with attribute access; the
    Anthropic SDK's own clients (``AnthropicBedrock``, ``AnthropicVertex``) are recorded and
    replayed as ``anthropic.Anthropic``'s are, with ``messages.stream()``."""
    chat = _create_of(obj, "chat", "completions")
    messages = _create_of(obj, "messages")
    if chat is None and messages is None:
        return None
    base_url = next(
        (url for url in (getattr(obj, a, None) for a in ("base_url", "api_base")) if url), None
    )
    provider = provider_of_client(obj, base_url)
    library = (type(obj).__module__ or "").partition(".")[0]
    metadata = client_metadata(library, base_url)
    targets: list[Target] = []
    if chat is not None:
        adapter: LlmAdapter = OpenAIChatAdapter(provider)
        chat_async = _create_is_async(chat)
        if library == "openai":
            strict = validates_responses(obj)
            targets.append(
                chat_target(chat, provider, adapter, metadata, strict=strict, is_async=chat_async)
            )
        else:
            streams = StreamTypes(ChatStreamAssembler, restore_plain, restore_plain, chat_rechunk)
            targets.append(
                Target(
                    owner=chat,
                    attr="create",
                    name=OPENAI_CHAT_NAME,
                    provider=provider,
                    adapter=adapter,
                    restore=restore_plain,
                    is_async=chat_async,
                    metadata=metadata,
                    streams=streams,
                )
            )
    if messages is not None:
        adapter = AnthropicMessagesAdapter(provider)
        messages_async = _create_is_async(messages)
        if library == "anthropic":
            strict = validates_responses(obj)
            targets.append(
                messages_target(
                    messages, provider, adapter, metadata, strict=strict, is_async=messages_async
                )
            )
        else:
            streams = StreamTypes(
                MessagesStreamAssembler, restore_plain, restore_plain, messages_rechunk
            )
            targets.append(
                Target(
                    owner=messages,
                    attr="create",
                    name=ANTHROPIC_MESSAGES_NAME,
                    provider=provider,
                    adapter=adapter,
                    restore=restore_plain,
                    is_async=messages_async,
                    metadata=metadata,
                    streams=streams,
                )
            )
    return targets
