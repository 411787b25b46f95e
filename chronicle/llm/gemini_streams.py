"""google-genai streams (``generate_content_stream``): each chunk is a ``GenerateContentResponse``.

``GeminiStreamAssembler`` folds the chunks (in their recorded form, ``gemini.chunk_json``) into
the response a plain call returns, and ``response_chunks`` gives the chunks of a plain response
(one chunk: the response itself). What a plain call returns is read by ``chronicle.llm.gemini``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from chronicle.llm.canonical import StreamText
from chronicle.llm.gemini import snake_case
from chronicle.llm.lenient import as_int, as_list, as_map

__all__ = [
    "GeminiStreamAssembler",
    "response_chunks",
]

# --------------------------------------------------------------------------------------------
# Streams

_FIRST_SENT = frozenset({"model_version", "response_id", "create_time"})
_TEXT_PART_KEYS = frozenset({"text", "thought", "thought_signature"})


class _StreamedCandidate:
    """One candidate of a stream: its parts joined, its other fields as last sent."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._role: JsonValue = None
        self._parts: list[dict[str, JsonValue]] = []
        self._texts: dict[int, StreamText] = {}
        self._fields: dict[str, JsonValue] = {}

    def add(self, candidate: Mapping[str, JsonValue]) -> None:
        for key, value in candidate.items():
            name = snake_case(key)
            if name == "content":
                content = as_map(value) or {}
                if self._role is None:
                    self._role = content.get("role")
                for part in as_list(content.get("parts")) or ():
                    self._part(part)
            elif value is not None:
                self._fields[name] = value

    def _part(self, raw: JsonValue) -> None:
        part = as_map(raw)
        if part is None:
            return
        text = part.get("text")
        if isinstance(text, str) and set(map(snake_case, part)) <= _TEXT_PART_KEYS:
            last = len(self._parts) - 1
            if last in self._texts and bool(self._parts[last].get("thought")) == bool(
                part.get("thought")
            ):
                self._texts[last].add(text)  # the next piece of the same text part
                for key, value in part.items():
                    if key != "text" and value is not None:
                        self._parts[last][key] = value  # a signature sent with a later piece
                return
            self._texts[len(self._parts)] = StreamText(self._limit, text)
        self._parts.append(dict(part))

    def result(self) -> dict[str, JsonValue]:
        parts: list[JsonValue] = []
        for position, part in enumerate(self._parts):
            text = self._texts.get(position)
            parts.append({**part, "text": text.text()} if text is not None else dict(part))
        content: dict[str, JsonValue] = {"parts": parts}
        if self._role is not None:
            content["role"] = self._role
        return {"content": content, **self._fields}


class GeminiStreamAssembler:
    """``GenerateContentResponse`` chunks (JSON, in order) into the response a plain call returns.

    Per candidate ``index``: consecutive text pieces of the same kind (thought or not) are joined
    into one text part (a ``thought_signature`` sent with any piece kept on it), other parts
    (function calls, ...) are kept whole, and ``finish_reason``, safety ratings and the other
    candidate fields are the last ones sent. ``model_version``, ``response_id`` and
    ``create_time`` are the first ones sent; ``usage_metadata``, ``prompt_feedback`` and the rest
    the last. Keys are read in either spelling and kept in the SDK's Python names. Text is kept
    up to ``limit`` characters per part.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._fields: dict[str, JsonValue] = {}
        self._candidates: dict[int, _StreamedCandidate] = {}

    def add(self, chunk: JsonValue) -> None:
        """Fold in the next chunk."""
        data = as_map(chunk)
        if data is None:
            return
        for key, value in data.items():
            name = snake_case(key)
            if name == "candidates":
                for raw in as_list(value) or ():
                    candidate = as_map(raw)
                    if candidate is not None:
                        index = as_int(candidate.get("index")) or 0
                        if index not in self._candidates:
                            self._candidates[index] = _StreamedCandidate(self._limit)
                        self._candidates[index].add(candidate)
            elif value is not None and not (name in _FIRST_SENT and name in self._fields):
                self._fields[name] = value

    def result(self) -> JsonValue:
        """The response so far."""
        response: dict[str, JsonValue] = {}
        if self._candidates:
            response["candidates"] = [
                {**self._candidates[index].result(), "index": index}
                for index in sorted(self._candidates)
            ]
        response.update(self._fields)
        return response


def response_chunks(response: JsonValue) -> list[JsonValue] | None:
    """The chunks a stream would have sent for a plain ``response``: the response itself, one
    chunk (the SDK and the assembler read it as the same response); ``None`` when it is not one."""
    return [response] if isinstance(response, dict) else None
