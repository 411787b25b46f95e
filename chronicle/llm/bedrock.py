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

Streams: ``converse_stream`` returns ``{"stream": EventStream, ...}`` whose events are dicts
(``messageStart``, ``contentBlockStart``, ``contentBlockDelta``, ``contentBlockStop``,
``messageStop``, ``metadata``): ``ConverseStreamAssembler`` folds them into the ``converse``
response (without ``ResponseMetadata``, which no event carries) and ``converse_events`` gives the
events of a ``converse`` response. ``invoke_model_with_response_stream`` with an Anthropic body
returns ``{"body": EventStream, ...}`` whose ``chunk`` events hold Anthropic's stream events as
JSON ``bytes``: recorded with those bytes parsed (``invoke_chunk_json``, ``restore_invoke_chunk``),
folded by ``InvokeStreamAssembler`` (Anthropic's ``MessagesStreamAssembler``) into the recorded
``invoke_model`` response, and rebuilt by ``invoke_events``.
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

from chronicle.llm.anthropic import (
    AnthropicMessagesAdapter,
    MessagesStreamAssembler,
    message_events,
    message_output,
    tool_input,
)
from chronicle.llm.canonical import (
    BaseAdapter,
    StreamText,
    as_float,
    as_int,
    as_list,
    as_map,
    as_str,
    build_input,
    build_output,
    exclusive_usage,
    map_finish_reason,
    nonempty_str,
    tool_call_block,
)

__all__ = [
    "BEDROCK_CONVERSE",
    "BEDROCK_INVOKE_ANTHROPIC",
    "STOP_REASONS",
    "BedrockConverseAdapter",
    "BedrockInvokeAnthropicAdapter",
    "ConverseStreamAssembler",
    "InvokeStreamAssembler",
    "buffered_invoke_response",
    "converse_events",
    "converse_usage",
    "invoke_arguments",
    "invoke_chunk_json",
    "invoke_events",
    "invoke_response_json",
    "is_anthropic_body",
    "read_messages",
    "restore_invoke_chunk",
    "restore_invoke_response",
]

STOP_REASONS: Mapping[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
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


def _blocks(parts: Sequence[JsonValue]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for part in parts:
        block = _block(part)
        if block is not None:
            blocks.append(block)
    return blocks


def _tool_result(result: Mapping[str, JsonValue]) -> Message:
    texts: list[ContentBlock] = []
    for part in as_list(result.get("content")) or ():
        spec = as_map(part) or {}
        text = as_str(spec.get("text"))
        if text is None and "json" in spec:
            text = json.dumps(spec["json"], ensure_ascii=False, default=str)
        if text is not None:
            texts.append(TextBlock(text=text))
    return Message(
        role=MessageRole.TOOL, content=texts, tool_call_id=nonempty_str(result.get("toolUseId"))
    )


def _user_messages(parts: Sequence[JsonValue]) -> list[Message]:
    """A user message's blocks, with each ``toolResult`` moved out into a ``tool`` message."""
    result: list[Message] = []
    pending: list[ContentBlock] = []
    has_pending = not parts
    for part in parts:
        tool_result = as_map((as_map(part) or {}).get("toolResult"))
        if tool_result is not None:
            if has_pending:
                result.append(Message(role=MessageRole.USER, content=pending))
                pending, has_pending = [], False
            result.append(_tool_result(tool_result))
            continue
        has_pending = True
        block = _block(part)
        if block is not None:
            pending.append(block)
    if has_pending:
        result.append(Message(role=MessageRole.USER, content=pending))
    return result


def read_messages(messages: Sequence[JsonValue]) -> list[Message]:
    """Converse ``messages`` as canonical messages (see the module docstring)."""
    result: list[Message] = []
    for item in messages:
        message = as_map(item)
        role = _ROLES.get(as_str(message.get("role")) or "") if message is not None else None
        if message is None or role is None:
            continue
        parts = as_list(message.get("content")) or []
        if role is MessageRole.USER:
            result.extend(_user_messages(parts))
        else:
            result.append(Message(role=role, content=_blocks(parts)))
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
    max_tokens = as_int(config.get("maxTokens"))
    stops = as_list(config.get("stopSequences"))
    return LlmParams(
        temperature=as_float(config.get("temperature")),
        top_p=as_float(config.get("topP")),
        max_tokens=max_tokens if max_tokens is not None and max_tokens >= 0 else None,
        stop=[s for s in stops if isinstance(s, str)] if stops is not None else None,
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
            content=_blocks(as_list(message.get("content")) or []),
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


def _parsed(body: object) -> object:
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
        body = _parsed(arguments.get("body"))
    except UnicodeDecodeError:
        return False
    return isinstance(body, dict) and "anthropic_version" in body


def invoke_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """The recorded input of ``invoke_model``: the arguments by name, ``body`` parsed."""
    recorded = dict(arguments)
    try:
        body = _parsed(arguments.get("body"))
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
        parsed = _parsed(data)
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


# --------------------------------------------------------------------------------------------
# Streams


class _StreamedBlock:
    """One content block of a Converse stream: its start and the text of its deltas."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.start: dict[str, JsonValue] = {}
        self.text: StreamText | None = None
        self.tool_input: StreamText | None = None
        self.reasoning: StreamText | None = None
        self.reasoning_fields: dict[str, JsonValue] = {}

    def add(self, delta: Mapping[str, JsonValue]) -> None:
        if "text" in delta:
            if self.text is None:
                self.text = StreamText(self.limit)
            self.text.add(delta["text"])
        use = as_map(delta.get("toolUse"))
        if use is not None:
            if self.tool_input is None:
                self.tool_input = StreamText(self.limit)
            self.tool_input.add(use.get("input"))
        reasoning = as_map(delta.get("reasoningContent"))
        if reasoning is not None:
            if self.reasoning is None:
                self.reasoning = StreamText(self.limit)
            self.reasoning.add(reasoning.get("text"))
            for key, value in reasoning.items():
                if key != "text" and value is not None:
                    self.reasoning_fields[key] = value  # signature, redactedContent

    def result(self) -> dict[str, JsonValue]:
        use = as_map(self.start.get("toolUse"))
        if use is not None or self.tool_input is not None:
            text = self.tool_input.text() if self.tool_input is not None else ""
            return {"toolUse": {**(use or {}), "input": tool_input(text)}}
        if self.reasoning is not None:
            fields = dict(self.reasoning_fields)
            redacted = fields.pop("redactedContent", None)
            if redacted is not None and not self.reasoning.text():
                return {"reasoningContent": {"redactedContent": redacted}}
            return {
                "reasoningContent": {"reasoningText": {"text": self.reasoning.text(), **fields}}
            }
        if self.text is not None:
            return {"text": self.text.text()}
        return dict(self.start)


class ConverseStreamAssembler:
    """``converse_stream`` events (dicts, in order) into the response ``converse`` returns.

    ``messageStart`` gives the role; each ``contentBlockStart`` opens a block at its
    ``contentBlockIndex`` (a tool use's id and name); ``contentBlockDelta`` grows its ``text``,
    its tool input's JSON text (parsed when the result is read; kept as the text while it does
    not parse, for a stream cut short) or its reasoning text (with its signature);
    ``messageStop`` sets ``stopReason`` (and ``additionalModelResponseFields``); ``metadata``
    sets ``usage``, ``metrics`` and whatever else it carries. Text is kept up to ``limit``
    characters per block.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._role: JsonValue = None
        self._blocks: dict[int, _StreamedBlock] = {}
        self._fields: dict[str, JsonValue] = {}

    def _block(self, event: Mapping[str, JsonValue]) -> _StreamedBlock:
        index = as_int(event.get("contentBlockIndex")) or 0
        block = self._blocks.get(index)
        if block is None:
            block = self._blocks[index] = _StreamedBlock(self._limit)
        return block

    def add(self, event: JsonValue) -> None:
        """Fold in the next event."""
        data = as_map(event)
        if data is None:
            return
        for kind, raw in data.items():
            body = as_map(raw)
            if body is None:
                continue
            if kind == "messageStart":
                self._role = body.get("role")
            elif kind == "contentBlockStart":
                self._block(body).start.update(as_map(body.get("start")) or {})
            elif kind == "contentBlockDelta":
                self._block(body).add(as_map(body.get("delta")) or {})
            elif kind == "contentBlockStop":
                self._block(body)
            elif kind in ("messageStop", "metadata"):
                self._fields.update({k: v for k, v in body.items() if v is not None})

    def result(self) -> JsonValue:
        """The ``converse`` response so far."""
        content: list[JsonValue] = [self._blocks[index].result() for index in sorted(self._blocks)]
        message: dict[str, JsonValue] = {"role": self._role or "assistant", "content": content}
        return {"output": {"message": message}, **self._fields}


def converse_events(response: JsonValue) -> list[JsonValue] | None:
    """The ``converse_stream`` events for a ``converse`` response: ``messageStart``; per block
    its start (a tool use's id and name), one delta with its whole text, tool input or reasoning
    (then its signature), and its stop; ``messageStop`` and ``metadata``. ``None`` when
    ``response`` is not a Converse response."""
    body = as_map(response)
    message = as_map((as_map(body.get("output")) or {}).get("message")) if body else None
    content = as_list(message.get("content")) if message is not None else None
    if body is None or message is None or content is None:
        return None
    events: list[JsonValue] = [{"messageStart": {"role": message.get("role") or "assistant"}}]
    for index, raw_block in enumerate(content):
        block = as_map(raw_block) or {}
        deltas: list[JsonValue] = []
        use = as_map(block.get("toolUse"))
        reasoning = as_map(block.get("reasoningContent"))
        if use is not None:
            start = {k: v for k, v in use.items() if k != "input"}
            events.append(
                {"contentBlockStart": {"start": {"toolUse": start}, "contentBlockIndex": index}}
            )
            deltas.append({"toolUse": {"input": json.dumps(use.get("input", {}))}})
        elif reasoning is not None:
            thought = as_map(reasoning.get("reasoningText")) or {}
            deltas.append({"reasoningContent": {"text": thought.get("text") or ""}})
            if thought.get("signature") is not None:
                deltas.append({"reasoningContent": {"signature": thought["signature"]}})
            if reasoning.get("redactedContent") is not None:
                deltas = [{"reasoningContent": {"redactedContent": reasoning["redactedContent"]}}]
        elif "text" in block:
            deltas.append({"text": block["text"]})
        for delta in deltas:
            events.append({"contentBlockDelta": {"delta": delta, "contentBlockIndex": index}})
        events.append({"contentBlockStop": {"contentBlockIndex": index}})
    stop: dict[str, JsonValue] = {"stopReason": body.get("stopReason")}
    if body.get("additionalModelResponseFields") is not None:
        stop["additionalModelResponseFields"] = body["additionalModelResponseFields"]
    events.append({"messageStop": stop})
    metadata = {
        key: value
        for key, value in body.items()
        if key not in ("output", "stopReason", "additionalModelResponseFields", "ResponseMetadata")
    }
    events.append({"metadata": metadata})
    return events


def invoke_chunk_json(event: object) -> JsonValue | None:
    """A live ``invoke_model_with_response_stream`` event as recorded: a ``chunk``'s JSON
    ``bytes`` parsed (``{"chunk": {"bytes": <the Anthropic event>}}``); ``None`` for anything else
    (recorded as any value is)."""
    chunk = event.get("chunk") if isinstance(event, dict) else None
    data = chunk.get("bytes") if isinstance(chunk, dict) else None
    if not isinstance(data, bytes):
        return None
    try:
        parsed = _parsed(data)
    except UnicodeDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    return {"chunk": {"bytes": parsed}}


def restore_invoke_chunk(raw: JsonValue) -> object:
    """A recorded ``invoke_model_with_response_stream`` event as boto3 yields it: the
    ``chunk``'s event encoded back to JSON ``bytes``; anything else as recorded."""
    chunk = as_map(raw.get("chunk")) if isinstance(raw, dict) else None
    event = as_map(chunk.get("bytes")) if chunk is not None else None
    if event is None:
        return json.loads(json.dumps(raw))  # a deep copy of plain JSON
    return {"chunk": {"bytes": json.dumps(event).encode()}}


class InvokeStreamAssembler:
    """``invoke_model_with_response_stream`` events (recorded JSON, in order) into the response
    recorded for ``invoke_model``: ``{"body": <the Message>, "contentType": "application/json"}``,
    the ``chunk`` events folded by Anthropic's ``MessagesStreamAssembler``."""

    def __init__(self, limit: int | None = None) -> None:
        self._messages = MessagesStreamAssembler(limit)

    def add(self, event: JsonValue) -> None:
        """Fold in the next event."""
        chunk = as_map(event.get("chunk")) if isinstance(event, dict) else None
        if chunk is not None:
            self._messages.add(chunk.get("bytes"))

    def result(self) -> JsonValue:
        """The response so far."""
        return {"body": self._messages.result(), "contentType": "application/json"}


def invoke_events(response: JsonValue) -> list[JsonValue] | None:
    """The recorded events of ``invoke_model_with_response_stream`` for a recorded
    ``invoke_model`` response (Anthropic's events for its body); ``None`` when it has none."""
    body = response.get("body") if isinstance(response, dict) else None
    events = message_events(body) if isinstance(body, dict) else None
    if events is None:
        return None
    return [{"chunk": {"bytes": event}} for event in events]
