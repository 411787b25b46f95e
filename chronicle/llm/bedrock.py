"""AWS Bedrock adapters (``boto3`` ``bedrock-runtime``): ``converse``, Anthropic ``invoke_model``.

Adapters (``chronicle.llm.canonical.LlmAdapter``), provider ``bedrock``:

- ``BEDROCK_CONVERSE`` for ``client.converse(modelId=..., messages=..., ...)``. The raw input is
  the call's keyword arguments, the raw output the dict boto3 returns (``ResponseMetadata``
  included).
- ``BEDROCK_INVOKE_ANTHROPIC`` for ``client.invoke_model(modelId=..., body=...)`` when the body
  is an Anthropic Messages request (it names ``anthropic_version``, which Bedrock requires of
  every Claude body). The raw input holds ``body`` as the parsed JSON; the raw output is
  ``{"body": <the Messages response JSON>, "contentType": ..., "ResponseMetadata": ...}``. The
  body is read as the Anthropic Messages API (``chronicle.llm.anthropic``). Other
  ``invoke_model`` bodies (Titan, Llama, Mistral, ...) each have a format of their own and are
  not recorded.

Converse conventions (on top of those in ``chronicle.llm.canonical``):

- The requested model is ``modelId``; a Converse response names no model, so the output model is
  the requested one (``model_source="requested"``). There is no response id.
- Messages: ``text`` blocks are ``text``, ``toolUse`` blocks ``tool_call`` (``toolUseId``,
  ``name``, ``input``), ``reasoningContent.reasoningText`` ``reasoning``. A user message's
  ``toolResult`` blocks become separate ``tool`` messages in place (``tool_call_id`` =
  ``toolUseId``; content the result's text blocks, its ``json`` blocks as JSON text), its other
  blocks staying in ``user`` messages around them. Images, documents, videos, cache points,
  guard content and redacted reasoning are skipped; ``raw`` keeps them.
- ``system`` is the text of the ``system`` blocks joined with newlines.
- ``tools`` from ``toolConfig.tools[].toolSpec`` (``inputSchema.json`` is ``parameters``);
  ``tool_choice`` from ``toolConfig.toolChoice``: ``auto`` is ``auto``, ``any`` ``required``,
  ``{"tool": {"name": X}}`` ``{"name": X}``.
- Params from ``inferenceConfig``: ``temperature``, ``topP``, ``maxTokens``, ``stopSequences``.
- Finish reason: ``end_turn`` and ``stop_sequence`` are ``stop``, ``max_tokens`` and
  ``model_context_window_exceeded`` ``length``, ``tool_use`` ``tool_calls``,
  ``guardrail_intervened`` and ``content_filtered`` ``content_filter``, anything else ``other``.
- Usage is reported in separate buckets (as Anthropic does): ``inputTokens``,
  ``cacheReadInputTokens``, ``cacheWriteInputTokens``, ``outputTokens``; ``reasoning`` is 0
  (Bedrock does not break it out).

``invoke_arguments``, ``buffered_invoke_response``, ``invoke_response_json`` and
``restore_invoke_response`` are the ``invoke_model`` plumbing: the request body parsed for the
record, the response body read once and handed back re-readable, its JSON for the record, and a
recorded response rebuilt with a ``StreamingBody`` (``botocore`` is imported only by those last
two, when a Bedrock client is in use).

Streams (``converse_stream``, ``invoke_model_with_response_stream``) are folded into what a plain
call returns (and back) by ``chronicle.llm.bedrock_streams``.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentplane_primitives.enums import FinishReason, MessageRole
from agentplane_primitives.models import (
    ContentBlock,
    LlmInput,
    LlmOutput,
    LlmParams,
    Message,
    ReasoningBlock,
    TextBlock,
    Usage,
)
from pydantic import JsonValue

from chronicle.llm import anthropic
from chronicle.llm.anthropic import AnthropicMessagesAdapter, message_output
from chronicle.llm.canonical import (
    BaseAdapter,
    build_input,
    build_output,
    exclusive_usage,
    map_finish_reason,
    read_blocks,
    stop_sequences,
    token_limit,
    tool_call_block,
    tool_results_apart,
    with_roles,
)
from chronicle.llm.lenient import as_float, as_int, as_list, as_map, as_str, nonempty_str

__all__ = [
    "BEDROCK_CONVERSE",
    "BEDROCK_INVOKE_ANTHROPIC",
    "STOP_REASONS",
    "BedrockConverseAdapter",
    "BedrockInvokeAnthropicAdapter",
    "buffered_invoke_response",
    "converse_usage",
    "invoke_arguments",
    "invoke_response_json",
    "is_anthropic_body",
    "read_messages",
    "restore_invoke_response",
]

STOP_REASONS: Mapping[str, FinishReason] = {
    **anthropic.STOP_REASONS,  # Converse's are the Messages API's, and two of Bedrock's own:
    "guardrail_intervened": FinishReason.CONTENT_FILTER,
    "content_filtered": FinishReason.CONTENT_FILTER,
}

_ROLES: Mapping[str, MessageRole] = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}


# --------------------------------------------------------------------------------------------
# Converse input


def _block(block: JsonValue) -> ContentBlock | None:
    spec = as_map(block)
    if spec is None:
        return None
    text = as_str(spec.get("text"))
    if text is not None:
        return TextBlock(text=text)
    use = as_map(spec.get("toolUse"))
    if use is not None:
        return tool_call_block(use.get("toolUseId"), use.get("name"), use.get("input"))
    reasoning = as_map(spec.get("reasoningContent"))
    if reasoning is not None:
        thought = as_str((as_map(reasoning.get("reasoningText")) or {}).get("text"))
        return ReasoningBlock(text=thought) if thought else None
    return None


def _tool_result(part: JsonValue) -> Message | None:
    """A ``toolResult`` block as the ``tool`` message it answers, else ``None``."""
    result = as_map((as_map(part) or {}).get("toolResult"))
    if result is None:
        return None
    texts: list[ContentBlock] = []
    for item in as_list(result.get("content")) or ():
        spec = as_map(item) or {}
        text = as_str(spec.get("text"))
        if text is None and "json" in spec:
            text = json.dumps(spec["json"], ensure_ascii=False, default=str)
        if text is not None:
            texts.append(TextBlock(text=text))
    return Message(
        role=MessageRole.TOOL, content=texts, tool_call_id=nonempty_str(result.get("toolUseId"))
    )


def read_messages(messages: Sequence[JsonValue]) -> list[Message]:
    """Converse ``messages`` as canonical messages (see the module docstring)."""
    result: list[Message] = []
    for message, role in with_roles(messages, _ROLES):
        parts = as_list(message.get("content")) or []
        if role is MessageRole.USER:
            result.extend(tool_results_apart(role, parts, _block, _tool_result))
        else:
            result.append(Message(role=role, content=read_blocks(parts, _block)))
    return result


def _system(value: JsonValue) -> str | None:
    texts = [as_str((as_map(block) or {}).get("text")) for block in as_list(value) or ()]
    kept = [text for text in texts if text is not None]
    return "\n".join(kept) if kept else None


def _tools(config: Mapping[str, JsonValue]) -> list[dict[str, JsonValue]] | None:
    items = as_list(config.get("tools"))
    if items is None:
        return None
    tools: list[dict[str, JsonValue]] = []
    for item in items:
        spec = as_map((as_map(item) or {}).get("toolSpec"))
        name = nonempty_str(spec.get("name")) if spec is not None else None
        if spec is None or name is None:
            continue  # a cache point
        tool: dict[str, JsonValue] = {"name": name}
        description = as_str(spec.get("description"))
        if description is not None:
            tool["description"] = description
        schema = as_map(spec.get("inputSchema"))
        if schema is not None and "json" in schema:
            tool["parameters"] = schema["json"]
        tools.append(tool)
    return tools


def _tool_choice(config: Mapping[str, JsonValue]) -> JsonValue:
    choice = as_map(config.get("toolChoice"))
    if choice is None:
        return None
    if "auto" in choice:
        return "auto"
    if "any" in choice:
        return "required"
    name = nonempty_str((as_map(choice.get("tool")) or {}).get("name"))
    return {"name": name} if name is not None else None


def _params(config: Mapping[str, JsonValue]) -> LlmParams:
    return LlmParams(
        temperature=as_float(config.get("temperature")),
        top_p=as_float(config.get("topP")),
        max_tokens=token_limit(config.get("maxTokens")),
        stop=stop_sequences(config.get("stopSequences")),
    )


# --------------------------------------------------------------------------------------------
# Converse output


def converse_usage(value: JsonValue) -> Usage | None:
    """Converse ``usage`` as exclusive buckets (the cache counts are reported separately)."""
    usage = as_map(value)
    if usage is None:
        return None
    return exclusive_usage(
        input_tokens=as_int(usage.get("inputTokens")),
        cached_read=as_int(usage.get("cacheReadInputTokens")),
        cache_write=as_int(usage.get("cacheWriteInputTokens")),
        output_total=as_int(usage.get("outputTokens")),
    )


class BedrockConverseAdapter(BaseAdapter):
    """``bedrock-runtime`` ``converse``; see the module docstring."""

    def __init__(self) -> None:
        super().__init__("bedrock.converse", "bedrock")

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        messages = as_list(raw.get("messages"))
        tool_config = as_map(raw.get("toolConfig")) or {}
        return build_input(
            raw,
            model=nonempty_str(raw.get("modelId")),
            messages=read_messages(messages) if messages is not None else [],
            system=_system(raw.get("system")),
            tools=_tools(tool_config),
            tool_choice=_tool_choice(tool_config),
            params=_params(as_map(raw.get("inferenceConfig")) or {}),
        )

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        response = as_map(raw)
        if response is None:
            return build_output(raw, llm_input, provider=self.provider)
        message = as_map((as_map(response.get("output")) or {}).get("message")) or {}
        return build_output(
            raw,
            llm_input,
            provider=self.provider,
            content=read_blocks(as_list(message.get("content")) or [], _block),
            finish_reason=map_finish_reason(response.get("stopReason"), STOP_REASONS),
            usage=converse_usage(response.get("usage")),
        )


BEDROCK_CONVERSE = BedrockConverseAdapter()
"""``client.converse`` on a ``bedrock-runtime`` client."""


# --------------------------------------------------------------------------------------------
# invoke_model with an Anthropic body


class BedrockInvokeAnthropicAdapter(BaseAdapter):
    """``invoke_model`` with an Anthropic Messages body; see the module docstring."""

    def __init__(self) -> None:
        super().__init__("bedrock.invoke_model.anthropic", "bedrock")
        self._messages = AnthropicMessagesAdapter("bedrock")

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        body = as_map(raw.get("body")) or {}
        read = self._messages.to_input(body)
        return build_input(
            raw,
            model=nonempty_str(raw.get("modelId")),
            messages=read.messages,
            system=read.system,
            tools=read.tools,
            tool_choice=read.tool_choice,
            response_format=read.response_format,
            params=read.params,
        )

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        response = as_map(raw)
        body = as_map(response.get("body")) if response is not None else None
        if body is None:
            return build_output(raw, llm_input, provider=self.provider)
        output = message_output(body, llm_input, self.provider)
        output.raw = raw
        return output


BEDROCK_INVOKE_ANTHROPIC = BedrockInvokeAnthropicAdapter()
"""``client.invoke_model`` on a ``bedrock-runtime`` client, with an Anthropic body."""


def json_body(body: object) -> object:
    """A JSON request or response body (bytes or text) parsed, else ``None``."""
    if isinstance(body, bytes | bytearray | memoryview):
        body = bytes(body).decode("utf-8", errors="strict")
    if not isinstance(body, str):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def is_anthropic_body(arguments: Mapping[str, object]) -> bool:
    """The ``invoke_model`` call sends an Anthropic Messages body (bytes or text JSON naming
    ``anthropic_version``); a file-like body is not read, so it does not count."""
    try:
        body = json_body(arguments.get("body"))
    except UnicodeDecodeError:
        return False
    return isinstance(body, dict) and "anthropic_version" in body


def invoke_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """The recorded input of ``invoke_model``: the arguments by name, ``body`` parsed."""
    recorded = dict(arguments)
    try:
        body = json_body(arguments.get("body"))
    except UnicodeDecodeError:
        body = None
    if body is not None:
        recorded["body"] = body
    return recorded


@functools.cache
def _buffered_body_type() -> type[Any]:
    from botocore.response import StreamingBody  # optional: only with a boto3 client

    class BufferedBody(StreamingBody):  # type: ignore[misc]  # botocore has no type hints
        """A ``StreamingBody`` over bytes already read; ``data`` keeps them for the record."""

        def __init__(self, data: bytes) -> None:
            super().__init__(io.BytesIO(data), len(data))
            self.data = data

    return BufferedBody


def buffered_invoke_response(response: object) -> object:
    """``invoke_model``'s response with its body read once and replaced by a re-readable one
    (the caller reads it as before; the recorder reads ``data``)."""
    if not isinstance(response, dict):
        return response
    body = response.get("body")
    read = getattr(body, "read", None)
    if not callable(read):
        return response
    data = read()
    buffered = dict(response)
    buffered["body"] = _buffered_body_type()(data if isinstance(data, bytes) else bytes(data))
    return buffered


def invoke_response_json(response: object) -> object:
    """The recorded output of ``invoke_model``: the response with ``body`` as parsed JSON (or
    text, when it is not JSON)."""
    if not isinstance(response, dict):
        return response
    data = getattr(response.get("body"), "data", None)
    if not isinstance(data, bytes):
        return response
    recorded = dict(response)
    try:
        parsed = json_body(data)
    except UnicodeDecodeError:
        parsed = None
    recorded["body"] = parsed if parsed is not None else data.decode("utf-8", errors="replace")
    return recorded


def restore_invoke_response(raw: JsonValue) -> object:
    """A recorded ``invoke_model`` response as boto3 returns it: ``body`` a ``StreamingBody``
    over the recorded JSON; ``None`` when ``raw`` is not a recorded response."""
    if not isinstance(raw, dict) or "body" not in raw:
        return None
    body = raw["body"]
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    response: dict[str, object] = dict(raw)
    response["body"] = _buffered_body_type()(data)
    return response
