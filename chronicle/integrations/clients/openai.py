"""The ``openai`` SDK: ``chat.completions.create`` and ``responses.create`` of an ``OpenAI`` /
``AzureOpenAI`` client (sync or async) or of those resources, and LangChain's ``ChatOpenAI``
(its root clients). The JSON these calls carry is read by ``chronicle.llm.openai``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import JsonValue

from chronicle.integrations.clients.install import sent_body
from chronicle.integrations.clients.streams import StreamTypes, model_restorer, union_restorer
from chronicle.integrations.clients.target import (
    Target,
    client_metadata,
    is_async_resource,
    library_of,
    validates_responses,
)
from chronicle.llm.canonical import LlmAdapter
from chronicle.llm.openai import (
    AZURE_CHAT,
    AZURE_RESPONSES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
)
from chronicle.llm.openai_streams import (
    ChatStreamAssembler,
    ResponsesStreamAssembler,
    chat_chunks,
    responses_events,
)
from chronicle.llm.providers import provider_of_client
from chronicle.recording.failure import sdk_error_restorer

OPENAI_CHAT_NAME = "openai.chat.completions.create"
"""Boundary name of ``chat.completions.create`` on an OpenAI or Azure OpenAI client."""
OPENAI_RESPONSES_NAME = "openai.responses.create"
"""Boundary name of ``responses.create`` on an OpenAI or Azure OpenAI client."""
_OPENAI_DEFAULT_URL = "https://api.openai.com/v1"

OPENAI_ERRORS = sdk_error_restorer("openai", wrapped_body=True)


def _include_usage(arguments: Mapping[str, object]) -> bool:
    options = arguments.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


def chat_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    """The recorded ``ChatCompletion`` as the chunks that would have built it (replayed)."""
    return chat_chunks(raw, include_usage=_include_usage(arguments))


def _responses_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return responses_events(raw)


def openai_targets(obj: object) -> list[Target] | None:
    """An ``OpenAI``/``AzureOpenAI`` client's (sync or async) or a chat/responses resource's
    targets; ``None`` for another object."""
    import openai  # optional: only for an object that comes from the openai SDK
    from openai.resources.chat import AsyncCompletions, Completions  # optional, as above

    responses_types: tuple[type[Any], ...] = ()
    try:
        from openai.resources.responses import AsyncResponses, Responses  # optional

        responses_types = (Responses, AsyncResponses)
    except ImportError:  # an SDK from before the Responses API
        pass

    if isinstance(obj, (openai.OpenAI, openai.AsyncOpenAI)):
        client: object = obj
        chat = getattr(getattr(obj, "chat", None), "completions", None)
        responses = getattr(obj, "responses", None)
    elif isinstance(obj, (Completions, AsyncCompletions)):
        client, chat, responses = getattr(obj, "_client", None), obj, None
    elif responses_types and isinstance(obj, responses_types):
        client, chat, responses = getattr(obj, "_client", None), None, obj
    else:
        return None

    azure = isinstance(client, (openai.AzureOpenAI, openai.AsyncAzureOpenAI))
    base_url = getattr(client, "base_url", None)
    if azure:
        provider = "azure"
        metadata = client_metadata("openai", base_url)
        api_version = getattr(client, "_api_version", None)
        if isinstance(api_version, str):
            metadata["client.api_version"] = api_version
        deployment = getattr(client, "_azure_deployment", None)
        chat_adapter: LlmAdapter = AZURE_CHAT
        responses_adapter: LlmAdapter = AZURE_RESPONSES
        if isinstance(deployment, str) and deployment:
            chat_adapter = OpenAIChatAdapter("azure", azure=True, deployment=deployment)
            responses_adapter = OpenAIResponsesAdapter("azure", azure=True, deployment=deployment)
    else:
        provider = provider_of_client(client, base_url) if client is not None else "openai"
        metadata = client_metadata("openai", base_url, _OPENAI_DEFAULT_URL)
        chat_adapter, responses_adapter = OPENAI_CHAT, OPENAI_RESPONSES
        if provider != "openai":  # a subclass from another package, or another provider's host
            chat_adapter = OpenAIChatAdapter(provider)
            responses_adapter = OpenAIResponsesAdapter(provider)

    strict = validates_responses(client)
    targets: list[Target] = []
    if chat is not None:
        target = chat_target(
            chat, provider, chat_adapter, metadata, strict=strict, is_async=is_async_resource(chat)
        )
        targets.append(replace(target, restore_error=OPENAI_ERRORS))
    if responses is not None:
        from openai.types.responses import (  # optional: openai is installed here
            Response,
            ResponseStreamEvent,
        )

        response = model_restorer(Response, strict=strict)
        event = union_restorer(ResponseStreamEvent, strict=strict)
        responses_streams = StreamTypes(
            ResponsesStreamAssembler, event, response, _responses_rechunk
        )
        targets.append(
            Target(
                owner=responses,
                attr="create",
                name=OPENAI_RESPONSES_NAME,
                provider=provider,
                adapter=responses_adapter,
                restore=response,
                is_async=is_async_resource(responses),
                metadata=metadata,
                streams=responses_streams,
                extract_result=sent_body,
                restore_error=OPENAI_ERRORS,
                path="responses",
            )
        )
    return targets


def chat_target(
    chat: object,
    provider: str,
    adapter: LlmAdapter,
    metadata: Mapping[str, JsonValue],
    *,
    strict: bool,
    is_async: bool,
) -> Target:
    """``chat.completions.create`` of a client built on the openai SDK (its own, a subclass, or
    a resource): recorded as the fields the server sent (``install.sent_body``), replayed as the
    SDK's ``ChatCompletion`` and ``ChatCompletionChunk`` with those fields set."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk  # optional: openai is here

    completion = model_restorer(ChatCompletion, strict=strict)
    chunk = model_restorer(ChatCompletionChunk, strict=strict)
    streams = StreamTypes(ChatStreamAssembler, chunk, completion, chat_rechunk)
    return Target(
        owner=chat,
        attr="create",
        name=OPENAI_CHAT_NAME,
        provider=provider,
        adapter=adapter,
        restore=completion,
        is_async=is_async,
        metadata=metadata,
        streams=streams,
        extract_result=sent_body,
        path="chat/completions",
    )


def langchain_targets(obj: object) -> list[Target] | None:
    """A LangChain ``ChatOpenAI``'s root clients' targets; ``None`` without an OpenAI client."""
    clients = [getattr(obj, attr, None) for attr in ("root_client", "root_async_client")]
    found = [c for c in clients if c is not None and library_of(c) == "openai"]
    if not found:
        return None
    targets: list[Target] = []
    for client in found:
        targets.extend(openai_targets(client) or ())
    return targets
