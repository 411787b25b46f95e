"""Anthropic Messages API adapter.

Adapter (``chronicle.llm.canonical.LlmAdapter``): ``ANTHROPIC_MESSAGES`` for
``client.messages.create(...)``, provider ``anthropic``.

Conventions:

- ``system`` (a string, or a list of text blocks joined with newlines) is ``system``.
- A user message's ``tool_result`` blocks become separate ``tool`` messages, in place, with
  ``tool_call_id`` = ``tool_use_id``; the message's other blocks stay in ``user`` messages around
  them (a user message holding only tool results leaves no user message). A tool result's
  content is a string as is, or its text blocks.
- ``tool_use`` blocks are ``tool_call`` blocks; ``thinking`` blocks are ``reasoning`` blocks.
  ``redacted_thinking`` (no readable text), server tool blocks (``server_tool_use``, web search
  results, ...), images and documents are skipped; ``raw`` keeps them.
- Finish reason: ``end_turn`` and ``stop_sequence`` are ``stop``, ``max_tokens`` and
  ``model_context_window_exceeded`` are ``length``, ``tool_use`` is ``tool_calls``, ``refusal`` is
  ``content_filter``, anything else (``pause_turn``, ...) is ``other``.
- Usage is reported in separate buckets: ``input_tokens``, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens`` (or the sum of the ``cache_creation`` breakdown). Output is
  ``output_tokens``; when the API breaks out ``output_tokens_details.thinking_tokens`` (a part of
  ``output_tokens``), that part is ``reasoning`` and the rest ``output``, else ``reasoning`` is 0.
- Params: ``temperature``, ``top_p``, ``max_tokens``, ``stop_sequences`` (``top_k`` has no
  canonical home). ``output_config.format`` (or the older ``output_format``) is
  ``response_format``.

Streams (``stream=True``, ``messages.stream(...)``): ``MessagesStreamAssembler`` folds the
``message_start`` ... ``message_stop`` events into the ``Message`` a plain call returns (text,
thinking and ``input_json_delta`` deltas joined per content block, the tool input parsed when its
block stops, ``stop_reason`` and the usage counts from ``message_delta``); ``message_events`` is
the reverse, for a replay that must stream a call recorded without streaming.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence

from agentplane_primitives.enums import FinishReason, MessageRole
from agentplane_primitives.models import (
    ContentBlock,
    LlmInput,
    LlmOutput,
    Message,
    ReasoningBlock,
    TextBlock,
    Usage,
)
from pydantic import JsonValue

from chronicle.llm.canonical import (
    BaseAdapter,
    StreamText,
    as_int,
    as_list,
    as_map,
    as_str,
    build_input,
    build_output,
    exclusive_usage,
    map_finish_reason,
    nonempty_str,
    normalize_tool_choice,
    normalize_tools,
    read_params,
    tool_call_block,
)

STOP_REASONS: Mapping[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}

_ROLES: Mapping[str, MessageRole] = {
    "user": MessageRole.USER,
    "assistant": MessageRole.ASSISTANT,
    "system": MessageRole.SYSTEM,  # not an Anthropic role; read leniently for generic input
}


def read_system(value: JsonValue) -> str | None:
    """The ``system`` parameter: a string, or a list of text blocks joined with newlines."""
    if isinstance(value, str):
        return value
    blocks = as_list(value)
    if not blocks:
        return None
    texts = [as_str((as_map(block) or {}).get("text")) for block in blocks]
    kept = [text for text in texts if text is not None]
    return "\n".join(kept) if kept else None


def read_block(block: JsonValue) -> ContentBlock | None:
    """One Anthropic content block as a canonical block, or ``None`` when not representable."""
    if isinstance(block, str):
        return TextBlock(text=block)
    spec = as_map(block)
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "text":
        text = as_str(spec.get("text"))
        return TextBlock(text=text) if text is not None else None
    if kind == "thinking":
        thinking = as_str(spec.get("thinking"))
        return ReasoningBlock(text=thinking) if thinking else None
    if kind == "tool_use":
        return tool_call_block(spec.get("id"), spec.get("name"), spec.get("input"))
    return None


def _blocks(parts: Sequence[JsonValue]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for part in parts:
        block = read_block(part)
        if block is not None:
            blocks.append(block)
    return blocks


def _tool_result_content(value: JsonValue) -> str | list[ContentBlock]:
    if isinstance(value, str):
        return value
    parts = as_list(value)
    if parts is None:
        return ""
    return [block for block in _blocks(parts) if block.type == "text"]


def read_messages(messages: Sequence[JsonValue]) -> list[Message]:
    """Messages API ``messages`` as canonical messages (see the module docstring)."""
    result: list[Message] = []
    for item in messages:
        message = as_map(item)
        if message is None:
            continue
        role = _ROLES.get(as_str(message.get("role")) or "")
        if role is None:
            continue
        content = message.get("content")
        if isinstance(content, str):
            result.append(Message(role=role, content=content))
            continue
        parts = as_list(content)
        if parts is None:
            result.append(Message(role=role, content=""))
            continue
        if role is not MessageRole.USER:
            result.append(Message(role=role, content=_blocks(parts)))
            continue
        result.extend(_split_user_message(parts))
    return result


def _split_user_message(parts: Sequence[JsonValue]) -> list[Message]:
    """A user message's blocks, with each ``tool_result`` moved out into a ``tool`` message."""
    result: list[Message] = []
    pending: list[ContentBlock] = []
    has_pending = not parts  # an empty user message is still a message
    for part in parts:
        spec = as_map(part)
        if spec is not None and spec.get("type") == "tool_result":
            if has_pending:
                result.append(Message(role=MessageRole.USER, content=pending))
                pending, has_pending = [], False
            result.append(
                Message(
                    role=MessageRole.TOOL,
                    content=_tool_result_content(spec.get("content")),
                    tool_call_id=nonempty_str(spec.get("tool_use_id")),
                )
            )
            continue
        has_pending = True
        block = read_block(part)
        if block is not None:
            pending.append(block)
    if has_pending:
        result.append(Message(role=MessageRole.USER, content=pending))
    return result


def message_usage(value: JsonValue) -> Usage | None:
    """Messages API ``usage`` as exclusive buckets (cache counts are reported separately)."""
    usage = as_map(value)
    if usage is None:
        return None
    cache_write = as_int(usage.get("cache_creation_input_tokens"))
    if cache_write is None:
        breakdown = as_map(usage.get("cache_creation"))
        if breakdown is not None:
            counts = [as_int(count) for count in breakdown.values()]
            known = [count for count in counts if count is not None]
            cache_write = sum(known) if known else None
    output_details = as_map(usage.get("output_tokens_details")) or {}
    return exclusive_usage(
        input_tokens=as_int(usage.get("input_tokens")),
        cached_read=as_int(usage.get("cache_read_input_tokens")),
        cache_write=cache_write,
        output_total=as_int(usage.get("output_tokens")),
        reasoning=as_int(output_details.get("thinking_tokens")),
    )


def message_output(
    response: Mapping[str, JsonValue], llm_input: LlmInput, provider: str
) -> LlmOutput:
    """An Anthropic ``Message`` (as JSON) as an ``LlmOutput`` recorded for ``provider``."""
    return build_output(
        dict(response),
        llm_input,
        provider=provider,
        content=_blocks(as_list(response.get("content")) or []),
        finish_reason=map_finish_reason(response.get("stop_reason"), STOP_REASONS),
        served_model=nonempty_str(response.get("model")),
        usage=message_usage(response.get("usage")),
        response_id=nonempty_str(response.get("id")),
    )


def _response_format(raw: Mapping[str, JsonValue]) -> Mapping[str, JsonValue] | None:
    config = as_map(raw.get("output_config"))
    found = as_map(config.get("format")) if config is not None else None
    return found if found is not None else as_map(raw.get("output_format"))


class AnthropicMessagesAdapter(BaseAdapter):
    """The Messages API (``messages.create``); see the module docstring."""

    def __init__(self, provider: str = "anthropic", *, name: str | None = None) -> None:
        super().__init__(name or f"{provider}.messages", provider)

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        messages = as_list(raw.get("messages"))
        return build_input(
            raw,
            messages=read_messages(messages) if messages is not None else [],
            system=read_system(raw.get("system")),
            tools=normalize_tools(raw.get("tools")),
            tool_choice=normalize_tool_choice(raw.get("tool_choice")),
            response_format=_response_format(raw),
            params=read_params(raw, stop_keys=("stop_sequences",)),
        )

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        response = as_map(raw)
        if response is None:
            return build_output(raw, llm_input, provider=self.provider)
        return message_output(response, llm_input, self.provider)


ANTHROPIC_MESSAGES = AnthropicMessagesAdapter("anthropic")
"""``client.messages.create`` on an Anthropic client."""


# --------------------------------------------------------------------------------------------
# Streams

_BLOCK_TEXT = {"text_delta": "text", "thinking_delta": "thinking"}


class MessagesStreamAssembler:
    """Messages API stream events (JSON), in order, into the ``Message`` JSON a plain call returns.

    ``message_start`` gives the message; each ``content_block_start`` opens a block at its
    ``index``; ``text_delta`` and ``thinking_delta`` grow its text, ``signature_delta`` sets its
    signature, ``citations_delta`` adds a citation, ``input_json_delta`` grows the tool input's
    JSON text, parsed when the block stops (or when the result is read, for a stream cut short;
    input that is not yet valid JSON is kept as the text). ``message_delta`` sets ``stop_reason``
    and ``stop_sequence`` and updates the usage counts it carries. Text is kept up to ``limit``
    characters per block.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._message: dict[str, JsonValue] | None = None
        self._usage: dict[str, JsonValue] = {}
        self._blocks: dict[int, dict[str, JsonValue]] = {}
        self._texts: dict[tuple[int, str], StreamText] = {}
        self._json: dict[int, StreamText] = {}

    def add(self, event: JsonValue) -> None:
        """Fold in the next event."""
        data = as_map(event)
        if data is None:
            return
        kind = data.get("type")
        if kind == "message_start":
            message = as_map(data.get("message"))
            if message is not None:
                self._message = dict(message)
                self._usage = dict(as_map(message.get("usage")) or {})
            return
        if kind == "message_delta":
            delta = as_map(data.get("delta")) or {}
            message = self._message if self._message is not None else {}
            self._message = message
            for key, value in delta.items():
                message[key] = value
            for key, value in (as_map(data.get("usage")) or {}).items():
                if value is not None:
                    self._usage[key] = value
            return
        index = as_int(data.get("index"))
        if index is None:
            return
        if kind == "content_block_start":
            block = as_map(data.get("content_block"))
            if block is not None:
                self._blocks[index] = dict(block)
        elif kind == "content_block_delta":
            self._delta(index, as_map(data.get("delta")) or {})
        elif kind == "content_block_stop":
            self._close(index)

    def _delta(self, index: int, delta: Mapping[str, JsonValue]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = as_str(delta.get("type")) or ""
        if kind in _BLOCK_TEXT:
            field = _BLOCK_TEXT[kind]
            text = self._texts.get((index, field))
            if text is None:
                text = self._texts[index, field] = StreamText(
                    self._limit, as_str(block.get(field)) or ""
                )
            text.add(delta.get(field))
        elif kind == "input_json_delta":
            partial = self._json.get(index)
            if partial is None:
                partial = self._json[index] = StreamText(self._limit)
            partial.add(delta.get("partial_json"))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            citations = list(as_list(block.get("citations")) or [])
            citations.append(delta.get("citation"))
            block["citations"] = citations

    def _close(self, index: int) -> None:
        block = self._blocks.get(index)
        if block is None:
            return
        for position, field in [key for key in self._texts if key[0] == index]:
            block[field] = self._texts.pop((position, field)).text()
        partial = self._json.pop(index, None)
        if partial is not None:
            block["input"] = tool_input(partial.text())

    def result(self) -> JsonValue:
        """The ``Message`` so far."""
        message: dict[str, JsonValue] = dict(self._message or {"type": "message"})
        content: list[JsonValue] = []
        for index, raw_block in sorted(self._blocks.items()):
            block = dict(raw_block)
            for (position, field), text in self._texts.items():
                if position == index:
                    block[field] = text.text()
            if index in self._json:
                block["input"] = tool_input(self._json[index].text())
            content.append(block)
        message["content"] = content
        if self._usage:
            message["usage"] = dict(self._usage)
        return message


def tool_input(text: str) -> JsonValue:
    """A tool input's JSON text, streamed in pieces, parsed (``{}`` when empty); the text as is
    when it does not parse (a stream cut short)."""
    if not text.strip():
        return {}
    try:
        value: JsonValue = json.loads(text)
    except ValueError:
        return text
    return value


def message_events(message: JsonValue) -> list[JsonValue] | None:
    """The stream events a streamed call would have sent for ``message``.

    ``message_start`` (the message with no content, no stop reason and no output tokens yet),
    per block ``content_block_start``, one delta with its whole text, thinking or tool input, and
    ``content_block_stop``, then ``message_delta`` (stop reason and usage) and ``message_stop``.
    ``None`` when ``message`` is not a Message.
    """
    body = as_map(message)
    if body is None or as_list(body.get("content")) is None:
        return None
    return list(_message_event_stream(body))


def _message_event_stream(body: Mapping[str, JsonValue]) -> Iterator[JsonValue]:
    usage = dict(as_map(body.get("usage")) or {})
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 0} if usage else usage,
    }
    yield {"type": "message_start", "message": start}
    for index, raw_block in enumerate(as_list(body.get("content")) or ()):
        block = as_map(raw_block) or {}
        kind = block.get("type")
        delta: dict[str, JsonValue] | None = None
        opened = dict(block)
        if kind == "text":
            opened["text"] = ""
            delta = {"type": "text_delta", "text": block.get("text")}
        elif kind == "thinking":
            opened["thinking"] = ""
            delta = {"type": "thinking_delta", "thinking": block.get("thinking")}
        elif kind == "tool_use":
            opened["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input"))}
        yield {"type": "content_block_start", "index": index, "content_block": opened}
        if delta is not None:
            yield {"type": "content_block_delta", "index": index, "delta": delta}
        if kind == "thinking" and block.get("signature") is not None:
            signature = {"type": "signature_delta", "signature": block["signature"]}
            yield {"type": "content_block_delta", "index": index, "delta": signature}
        yield {"type": "content_block_stop", "index": index}
    stop = {"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")}
    yield {"type": "message_delta", "delta": stop, "usage": usage}
    yield {"type": "message_stop"}
