"""Bedrock streams: ``converse_stream`` and ``invoke_model_with_response_stream``.

``converse_stream`` returns ``{"stream": EventStream, ...}`` whose events are dicts
(``messageStart``, ``contentBlockStart``, ``contentBlockDelta``, ``contentBlockStop``,
``messageStop``, ``metadata``): ``ConverseStreamAssembler`` folds them into the ``converse``
response (without ``ResponseMetadata``, which no event carries) and ``converse_events`` gives the
events of a ``converse`` response. ``invoke_model_with_response_stream`` with an Anthropic body
returns ``{"body": EventStream, ...}`` whose ``chunk`` events hold Anthropic's stream events as
JSON ``bytes``: recorded with those bytes parsed (``invoke_chunk_json``, ``restore_invoke_chunk``),
folded by ``InvokeStreamAssembler`` (Anthropic's ``MessagesStreamAssembler``) into the recorded
``invoke_model`` response, and rebuilt by ``invoke_events``. What a plain call returns is read
by ``chronicle.llm.bedrock``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import JsonValue

from chronicle.llm.anthropic_streams import MessagesStreamAssembler, message_events, tool_input
from chronicle.llm.bedrock import json_body
from chronicle.llm.canonical import StreamText
from chronicle.llm.lenient import as_int, as_list, as_map

__all__ = [
    "ConverseStreamAssembler",
    "InvokeStreamAssembler",
    "converse_events",
    "invoke_chunk_json",
    "invoke_events",
    "restore_invoke_chunk",
]

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
        parsed = json_body(data)
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
