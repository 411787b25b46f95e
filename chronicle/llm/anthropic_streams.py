"""Anthropic Messages streams (``stream=True``, ``messages.stream(...)``).

``MessagesStreamAssembler`` folds the ``message_start`` ... ``message_stop`` events into the
``Message`` a plain call returns (text, thinking and ``input_json_delta`` deltas joined per
content block, the tool input parsed when its block stops, ``stop_reason`` and the usage counts
from ``message_delta``); ``message_events`` is the reverse, for a replay that must stream a call
recorded without streaming. Bedrock's ``invoke_model_with_response_stream`` carries the same
events. What a plain call returns is read by ``chronicle.llm.anthropic``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from pydantic import JsonValue

from chronicle.llm.canonical import StreamText
from chronicle.llm.lenient import as_int, as_list, as_map, as_str

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
