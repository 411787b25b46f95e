"""``google-genai``: ``models.generate_content`` and ``generate_content_stream`` of a
``Client`` (and its ``aio``) or of a ``Models`` resource. The JSON is read by
``chronicle.llm.gemini``."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from chronicle.integrations.clients.streams import StreamTypes, model_restorer
from chronicle.integrations.clients.target import Target, client_metadata
from chronicle.llm import gemini, gemini_streams
from chronicle.llm.providers import provider_of_host
from chronicle.recording.failure import gemini_error

GEMINI_GENERATE_CONTENT_NAME = "genai.models.generate_content"
"""Boundary name of ``models.generate_content`` on a ``google.genai`` client (sync and aio)."""


def gemini_targets(obj: object) -> list[Target] | None:
    """A google-genai ``Client``'s (sync and ``aio``) or ``Models`` resource's targets; ``None`` for
    another object."""
    from google.genai.client import AsyncClient, Client  # optional: a google.genai object
    from google.genai.models import AsyncModels, Models  # optional, as above
    from google.genai.types import GenerateContentResponse  # optional, as above

    resources: list[object]
    if isinstance(obj, Client):
        resources = [obj.models, obj.aio.models]
    elif isinstance(obj, AsyncClient):
        resources = [obj.models]
    elif isinstance(obj, (Models, AsyncModels)):
        resources = [obj]
    else:
        return None
    api_client = getattr(resources[0], "_api_client", None)
    base_url = getattr(getattr(api_client, "_http_options", None), "base_url", None)
    if provider_of_host(base_url) == "google":
        base_url = None  # the public Gemini or Vertex AI endpoint
    metadata = client_metadata("google-genai", base_url, module="google.genai")
    if getattr(api_client, "vertexai", False):
        metadata["client.vertexai"] = True
    response = model_restorer(GenerateContentResponse)
    streams = StreamTypes(
        gemini_streams.GeminiStreamAssembler,
        response,  # each chunk is a GenerateContentResponse
        response,
        _gemini_rechunk,
        item_json=gemini.chunk_json,
    )
    return [
        Target(
            owner=resource,
            attr=attr,
            name=GEMINI_GENERATE_CONTENT_NAME,  # one name: either form replays the other
            provider="google",
            adapter=gemini.GEMINI_GENERATE_CONTENT,
            restore=response,
            is_async=isinstance(resource, AsyncModels),
            metadata=metadata,
            streams=streams,
            always_streams=attr == "generate_content_stream",
            extract_input=gemini.compact_arguments,
            extract_result=gemini.response_json,
            restore_error=gemini_error,
        )
        for resource in resources
        for attr in ("generate_content", "generate_content_stream")
    ]


def _gemini_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return gemini_streams.response_chunks(raw)
