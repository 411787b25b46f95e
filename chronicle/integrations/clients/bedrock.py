"""boto3's ``bedrock-runtime`` client: ``converse``/``converse_stream`` and ``invoke_model``/
``invoke_model_with_response_stream`` (Anthropic bodies). botocore builds the client class at run
time, so it is found by its service name. The JSON is read by ``chronicle.llm.bedrock``."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace

from pydantic import JsonValue

from chronicle.integrations.clients.streams import StreamTypes
from chronicle.integrations.clients.target import Target, client_metadata
from chronicle.llm import bedrock, bedrock_streams
from chronicle.llm.providers import provider_of_host
from chronicle.recording.failure import boto_error_restorer
from chronicle.replay.recorded import restore_plain

BEDROCK_CONVERSE_NAME = "bedrock.converse"
"""Boundary name of ``converse`` on a ``bedrock-runtime`` client."""
BEDROCK_INVOKE_MODEL_NAME = "bedrock.invoke_model"
"""Boundary name of ``invoke_model`` (Anthropic bodies) on a ``bedrock-runtime`` client."""


def _boto_dict(raw: JsonValue) -> object:
    """A recorded boto3 response: the plain dict boto3 returns."""
    return copy.deepcopy(raw) if isinstance(raw, dict) else restore_plain(raw)


def _invoke_restorer(raw: JsonValue) -> object:
    restored = bedrock.restore_invoke_response(raw)
    return restored if restored is not None else restore_plain(raw)


def bedrock_targets(obj: object) -> list[Target] | None:
    """A ``bedrock-runtime`` client's targets (``converse``, ``invoke_model`` and their streams);
    ``None`` for another object."""
    meta = getattr(obj, "meta", None)
    if getattr(getattr(meta, "service_model", None), "service_name", None) != "bedrock-runtime":
        return None
    endpoint = getattr(meta, "endpoint_url", None)
    if provider_of_host(endpoint) == "bedrock":
        endpoint = None  # the public regional endpoint: the region says it
    metadata = client_metadata("boto3", endpoint)
    region = getattr(meta, "region_name", None)
    if isinstance(region, str):
        metadata["client.region"] = region
    errors = boto_error_restorer(getattr(obj, "exceptions", None))
    converse_streams = StreamTypes(
        bedrock_streams.ConverseStreamAssembler,
        _boto_dict,
        _boto_dict,
        _converse_rechunk,
        item_json=None,  # plain dicts
        container="stream",
        replay_fields={"ResponseMetadata": _REPLAYED_METADATA},
    )
    invoke_streams = StreamTypes(
        bedrock_streams.InvokeStreamAssembler,
        bedrock_streams.restore_invoke_chunk,
        _invoke_restorer,
        _invoke_rechunk,
        item_json=bedrock_streams.invoke_chunk_json,
        container="body",
        replay_fields={"ResponseMetadata": _REPLAYED_METADATA, "contentType": "application/json"},
    )
    converse = Target(
        owner=obj,
        attr="converse",
        name=BEDROCK_CONVERSE_NAME,  # converse_stream too: either form replays the other
        provider="bedrock",
        adapter=bedrock.BEDROCK_CONVERSE,
        restore=_boto_dict,
        is_async=False,
        metadata=metadata,
        streams=converse_streams,
        extract_input=dict,
        restore_error=errors,
    )
    invoke = Target(
        owner=obj,
        attr="invoke_model",
        name=BEDROCK_INVOKE_MODEL_NAME,  # invoke_model_with_response_stream too
        provider="bedrock",
        adapter=bedrock.BEDROCK_INVOKE_ANTHROPIC,
        restore=_invoke_restorer,
        is_async=False,
        metadata=metadata,
        streams=invoke_streams,
        accepts=bedrock.is_anthropic_body,
        extract_input=bedrock.invoke_arguments,
        prepare=bedrock.buffered_invoke_response,
        extract_result=bedrock.invoke_response_json,
        restore_error=errors,
    )
    return [
        converse,
        replace(converse, attr="converse_stream", always_streams=True),
        invoke,
        replace(
            invoke,
            attr="invoke_model_with_response_stream",
            always_streams=True,
            prepare=None,
            extract_result=None,
        ),
    ]


_REPLAYED_METADATA: dict[str, JsonValue] = {
    "HTTPStatusCode": 200,
    "HTTPHeaders": {},
    "RetryAttempts": 0,
}
"""The ``ResponseMetadata`` of a replayed boto3 stream: no request was sent, so no request id
or headers (a stream's own were not recorded)."""


def _converse_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return bedrock_streams.converse_events(raw)


def _invoke_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return bedrock_streams.invoke_events(raw)
