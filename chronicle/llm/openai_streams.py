"""OpenAI streams (``stream=True``, the ``.stream(...)`` helpers), for Chat Completions and
Responses alike (Azure OpenAI and OpenAI-compatible servers send the same).

- ``ChatStreamAssembler`` folds ``ChatCompletionChunk`` JSON into the ``ChatCompletion`` JSON a
  plain call returns, and ``chat_chunks`` does the reverse (one delta per part) for a replay that
  must stream a call recorded without ``stream=True``.
- ``ResponsesStreamAssembler`` folds Responses events into the ``Response``: the final
  ``response.completed`` (or ``.incomplete``/``.failed``) event carries it whole; before that,
  the output items are built from their ``added``/``delta``/``done`` events. ``responses_events``
  is the reverse.

What a plain call returns is read by ``chronicle.llm.openai``; this module only turns a stream
into that and back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pydantic import JsonValue

from chronicle.llm.canonical import StreamText
from chronicle.llm.lenient import as_int, as_list, as_map, as_str

# --------------------------------------------------------------------------------------------
# Streams: Chat Completions chunks

_CHUNK_HEAD = ("id", "created", "model", "service_tier", "system_fingerprint")
_DELTA_TEXTS = frozenset({"content", "refusal", "reasoning_content", "reasoning"})
"""The texts a delta carries in pieces (each concatenated into the message)."""
_MAX_LOGPROBS = 10_000
"""Token log-probabilities kept per choice of a stream (they come one or a few per chunk)."""


class _ChatChoice:
    """One choice of a streamed chat completion, as its deltas arrive."""

    def __init__(self, index: int, limit: int | None) -> None:
        self.index = index
        self.limit = limit
        self.role: JsonValue = None
        self.texts: dict[str, StreamText] = {}
        self.tool_calls: dict[int, dict[str, JsonValue]] = {}
        self.arguments: dict[int, StreamText] = {}
        self.function_call: dict[str, StreamText] | None = None
        self.finish_reason: JsonValue = None
        self.logprobs: dict[str, list[JsonValue]] | None = None

    def add(self, choice: Mapping[str, JsonValue]) -> None:
        # Once per chunk of every recorded stream: plain dict checks, not the ABC ones, and only
        # the keys the delta has (each updates its own part of the state, so their order does
        # not matter).
        delta = choice.get("delta")
        for key, value in delta.items() if isinstance(delta, dict) else ():
            if key in _DELTA_TEXTS:
                if type(value) is str:
                    text = self.texts.get(key)
                    if text is None:
                        self.texts[key] = StreamText(self.limit, value)
                    else:
                        text.add(value)
            elif key == "role":
                if value is not None:
                    self.role = value
            elif key == "tool_calls":
                for raw_call in value if isinstance(value, list) else ():
                    self._tool_call(as_map(raw_call) or {})
            elif key == "function_call":
                legacy = as_map(value)
                if legacy is not None:
                    if self.function_call is None:
                        self.function_call = {
                            "name": StreamText(None),
                            "arguments": StreamText(self.limit),
                        }
                    self.function_call["name"].add(legacy.get("name"))
                    self.function_call["arguments"].add(legacy.get("arguments"))
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            kept = self.logprobs if self.logprobs is not None else {}
            self.logprobs = kept
            for key in ("content", "refusal"):
                items = as_list(logprobs.get(key))
                if items:
                    bucket = kept.setdefault(key, [])
                    bucket.extend(items[: max(_MAX_LOGPROBS - len(bucket), 0)])

    def _tool_call(self, delta: Mapping[str, JsonValue]) -> None:
        position = as_int(delta.get("index"))
        if position is None:
            position = len(self.tool_calls)
        call = self.tool_calls.get(position)
        if call is None:
            call = self.tool_calls[position] = {"id": None, "type": "function"}
            self.arguments[position] = StreamText(self.limit)
        for key in ("id", "type"):
            if delta.get(key) is not None:
                call[key] = delta[key]
        function = as_map(delta.get("function")) or {}
        name = as_str(function.get("name"))
        if name:
            call["name"] = (as_str(call.get("name")) or "") + name
        self.arguments[position].add(function.get("arguments"))

    def result(self) -> dict[str, JsonValue]:
        message: dict[str, JsonValue] = {"role": self.role or "assistant"}
        for key in ("content", "refusal"):
            text = self.texts.get(key)
            message[key] = text.text() if text is not None else None
        for key in ("reasoning_content", "reasoning"):
            if key in self.texts:
                message[key] = self.texts[key].text()
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "type": call.get("type"),
                    "function": {
                        "name": call.get("name"),
                        "arguments": self.arguments[position].text(),
                    },
                }
                for position, call in sorted(self.tool_calls.items())
            ]
        if self.function_call is not None:
            message["function_call"] = {
                "name": self.function_call["name"].text(),
                "arguments": self.function_call["arguments"].text(),
            }
        logprobs: JsonValue = None
        if self.logprobs is not None:
            logprobs = {key: list(values) for key, values in self.logprobs.items()}
        return {
            "index": self.index,
            "message": message,
            "finish_reason": self.finish_reason,
            "logprobs": logprobs,
        }


class ChatStreamAssembler:
    """``ChatCompletionChunk`` JSON, in order, into the ``ChatCompletion`` a plain call returns.

    Per choice ``index``: ``content``, ``refusal`` and an OpenAI-compatible ``reasoning_content``
    are concatenated (``None`` when no delta carried one); tool calls are gathered by their
    ``index``, with ``id``, ``type`` and the name from the deltas that carry them and
    ``function.arguments`` concatenated; ``finish_reason`` and ``logprobs`` come from the chunks
    that carry them. ``id``, ``created``, ``model``, ``system_fingerprint`` and ``service_tier``
    are the first ones sent; ``usage`` is the last one sent (the final chunk's, with
    ``stream_options={"include_usage": True}``; without it the response has no usage). Text is
    kept up to ``limit`` characters per part.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._head: dict[str, JsonValue] = {}
        self._unsent = list(_CHUNK_HEAD)  # the head keys no chunk has carried yet
        self._choices: dict[int, _ChatChoice] = {}
        self._usage: JsonValue = None

    def add(self, chunk: JsonValue) -> None:
        """Fold in the next chunk."""
        if not isinstance(chunk, dict):
            return
        data = chunk
        unsent = self._unsent
        if unsent:
            head, found = self._head, False
            for key in unsent:
                value = data.get(key)
                if value is not None:
                    head[key], found = value, True
            if found:
                self._unsent = [key for key in unsent if key not in head]
        if data.get("usage") is not None:
            self._usage = data["usage"]
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index")
            if type(index) is not int:  # (as_int reads an exact int as itself)
                index = as_int(index) or 0
            state = self._choices.get(index)
            if state is None:
                state = self._choices[index] = _ChatChoice(index, self._limit)
            state.add(choice)

    def result(self) -> JsonValue:
        """The ``ChatCompletion`` so far."""
        response: dict[str, JsonValue] = {"id": self._head.get("id"), "object": "chat.completion"}
        for key in _CHUNK_HEAD[1:]:
            response[key] = self._head.get(key)
        response["choices"] = [choice.result() for _, choice in sorted(self._choices.items())]
        response["usage"] = self._usage
        return response


def chat_chunks(completion: JsonValue, *, include_usage: bool = False) -> list[JsonValue] | None:
    """The ``ChatCompletionChunk`` JSON a streamed call would have sent for ``completion``.

    One chunk opens each choice (its role), then one per part (the whole content, refusal,
    reasoning, each tool call), then one with the finish reason; with ``include_usage`` a last
    chunk with no choices carries the usage, as the API sends it. ``None`` when ``completion`` is
    not a ChatCompletion.
    """
    response = as_map(completion)
    choices = as_list(response.get("choices")) if response is not None else None
    if response is None or choices is None:
        return None
    base: dict[str, JsonValue] = {"id": response.get("id"), "object": "chat.completion.chunk"}
    for key in _CHUNK_HEAD[1:]:
        if response.get(key) is not None:
            base[key] = response[key]
    if include_usage:
        base["usage"] = None
    chunks: list[JsonValue] = []

    def chunk(index: int, delta: dict[str, JsonValue], **fields: JsonValue) -> None:
        choice: dict[str, JsonValue] = {"index": index, "delta": delta, "finish_reason": None}
        choice.update(fields)
        chunks.append({**base, "choices": [choice]})

    for raw_choice in choices:
        choice = as_map(raw_choice) or {}
        index = as_int(choice.get("index")) or 0
        message = as_map(choice.get("message")) or {}
        content = message.get("content")
        chunk(
            index, {"role": message.get("role") or "assistant", "content": "" if content else None}
        )
        for key in ("reasoning_content", "reasoning", "content", "refusal"):
            if isinstance(message.get(key), str) and message.get(key):
                chunk(index, {key: message[key]})
        for position, raw_call in enumerate(as_list(message.get("tool_calls")) or ()):
            call = as_map(raw_call) or {}
            chunk(index, {"tool_calls": [{"index": position, **call}]})
        if as_map(message.get("function_call")) is not None:
            chunk(index, {"function_call": message["function_call"]})
        chunk(
            index,
            {},
            finish_reason=choice.get("finish_reason"),
            logprobs=choice.get("logprobs"),
        )
    if include_usage:
        chunks.append({**base, "choices": [], "usage": response.get("usage")})
    return chunks


# --------------------------------------------------------------------------------------------
# Streams: Responses events

_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesStreamAssembler:
    """Responses API events (JSON), in order, into the ``Response`` JSON a plain call returns.

    The final event (``response.completed``, ``.incomplete`` or ``.failed``) carries the whole
    response, which is then the result. Before it (a stream that stopped early), the result is
    the last ``response.created``/``.in_progress`` snapshot with the output items built so far:
    each item as ``output_item.added`` (or ``.done``) gave it, text, refusal and function call
    arguments grown from their deltas.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._response: dict[str, JsonValue] | None = None
        self._final = False
        self._items: dict[int, dict[str, JsonValue]] = {}
        self._parts: dict[tuple[int, int], dict[str, JsonValue]] = {}
        self._texts: dict[tuple[int, int], StreamText] = {}
        self._arguments: dict[int, StreamText] = {}

    def add(self, event: JsonValue) -> None:
        """Fold in the next event."""
        data = as_map(event)
        if data is None:
            return
        kind = data.get("type")
        response = as_map(data.get("response"))
        if kind in _FINAL_EVENTS and response is not None:
            self._response, self._final = dict(response), True
            self._items, self._parts, self._texts, self._arguments = {}, {}, {}, {}
            return
        if self._final:
            return
        if response is not None:  # response.created, .in_progress, .queued
            self._response = dict(response)
            return
        out = as_int(data.get("output_index"))
        if out is None:
            return
        part_key = (out, as_int(data.get("content_index")) or 0)
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = as_map(data.get("item"))
            if item is not None:
                self._items[out] = dict(item)
                if kind.endswith(".done"):
                    self._drop(out)
        elif kind in ("response.content_part.added", "response.content_part.done"):
            part = as_map(data.get("part"))
            if part is not None:
                self._parts[part_key] = dict(part)
                self._texts.pop(part_key, None)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            text = self._texts.get(part_key)
            if text is None:
                text = self._texts[part_key] = StreamText(self._limit)
            text.add(data.get("delta"))
        elif kind == "response.function_call_arguments.delta":
            arguments = self._arguments.get(out)
            if arguments is None:
                arguments = self._arguments[out] = StreamText(self._limit)
            arguments.add(data.get("delta"))

    def _drop(self, out: int) -> None:
        for key in [key for key in self._parts if key[0] == out]:
            del self._parts[key]
            self._texts.pop(key, None)
        self._arguments.pop(out, None)

    def result(self) -> JsonValue:
        """The ``Response`` so far."""
        if self._final:
            return self._response
        response: dict[str, JsonValue] = dict(self._response or {"object": "response"})
        output: list[JsonValue] = []
        for out, raw_item in sorted(self._items.items()):
            item = dict(raw_item)
            if out in self._arguments:
                item["arguments"] = self._arguments[out].text()
            parts = sorted((c, part) for (o, c), part in self._parts.items() if o == out)
            if parts:
                content = list(as_list(item.get("content")) or [])
                for position, raw_part in parts:
                    part = dict(raw_part)
                    text = self._texts.get((out, position))
                    if text is not None:
                        part["refusal" if part.get("type") == "refusal" else "text"] = text.text()
                    while len(content) <= position:
                        content.append({})
                    content[position] = part
                item["content"] = content
            output.append(item)
        response["output"] = output
        return response


def responses_events(response: JsonValue) -> list[JsonValue] | None:
    """The Responses API events a streamed call would have sent for ``response``.

    ``response.created`` and ``.in_progress`` (the response with no output yet), then each output
    item opened, its text, refusal or arguments sent whole as one delta, and closed, then
    ``response.completed`` with the whole response. ``None`` when ``response`` is not a Response.
    """
    body = as_map(response)
    if body is None or as_list(body.get("output")) is None:
        return None
    return list(_responses_event_stream(body))


def _responses_event_stream(body: Mapping[str, JsonValue]) -> Iterator[JsonValue]:
    sequence = 0

    def event(kind: str, **fields: JsonValue) -> JsonValue:
        nonlocal sequence
        sequence += 1
        return {"type": kind, "sequence_number": sequence - 1, **fields}

    start = {**body, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for out, raw_item in enumerate(as_list(body.get("output")) or ()):
        item = as_map(raw_item) or {}
        item_id = item.get("id")
        kind = item.get("type")
        if kind == "message":
            opened = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=out, item=opened)
            for position, raw_part in enumerate(as_list(item.get("content")) or ()):
                part = as_map(raw_part) or {}
                where: dict[str, JsonValue] = {
                    "item_id": item_id,
                    "output_index": out,
                    "content_index": position,
                }
                if part.get("type") == "output_text":
                    text = as_str(part.get("text")) or ""
                    empty = {**part, "text": "", "annotations": []}
                    yield event("response.content_part.added", **where, part=empty)
                    yield event("response.output_text.delta", **where, delta=text, logprobs=[])
                    yield event("response.output_text.done", **where, text=text, logprobs=[])
                elif part.get("type") == "refusal":
                    refusal = as_str(part.get("refusal")) or ""
                    empty = {**part, "refusal": ""}
                    yield event("response.content_part.added", **where, part=empty)
                    yield event("response.refusal.delta", **where, delta=refusal)
                    yield event("response.refusal.done", **where, refusal=refusal)
                else:
                    yield event("response.content_part.added", **where, part=dict(part))
                yield event("response.content_part.done", **where, part=dict(part))
        elif kind == "function_call":
            arguments = as_str(item.get("arguments")) or ""
            opened = {**item, "arguments": "", "status": "in_progress"}
            yield event("response.output_item.added", output_index=out, item=opened)
            where = {"item_id": item_id, "output_index": out}
            yield event("response.function_call_arguments.delta", **where, delta=arguments)
            yield event(
                "response.function_call_arguments.done",
                **where,
                arguments=arguments,
                name=item.get("name"),
            )
        else:
            yield event("response.output_item.added", output_index=out, item=dict(item))
        yield event("response.output_item.done", output_index=out, item=dict(item))
    final = {
        "completed": "response.completed",
        "incomplete": "response.incomplete",
        "failed": "response.failed",
    }.get(as_str(body.get("status")) or "", "response.completed")
    yield event(final, response=dict(body))
