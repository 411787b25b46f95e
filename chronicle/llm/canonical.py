"""Canonical ``llm`` fields: the adapter protocol and the helpers every provider adapter shares.

An adapter turns the raw JSON of one model call into the canonical fields of the shared entities
(``LlmInput`` and ``LlmOutput`` from ``agentplane_primitives``). The raw form is always kept as
given; the canonical fields are derived from it one way, and cost consumers (TokenOps) read only
them, so the rules below are exact and the same for every provider.

Conventions every adapter follows:

- **Total.** Any JSON gives a valid ``LlmInput``/``LlmOutput``; odd input only means fewer
  canonical fields. ``LlmInput.model`` is ``"unknown"`` when the call named no model.
- **Usage** is split into exclusive, additive buckets (``input``, ``cached_read``,
  ``cache_write``, ``output``, ``reasoning``). Providers that count cache and reasoning tokens
  *inside* their totals (OpenAI) are split with ``inclusive_usage``; providers that report them
  separately (Anthropic) use ``exclusive_usage``. No bucket is negative, and when a provider's
  details exceed its total, the total wins (the details are cut to fit), so the buckets always sum
  to what the provider billed. No usage in the response gives ``usage = None``.
- **Finish reasons** map onto the closed ``FinishReason`` set; the provider's own value stays in
  ``raw``. A value the map does not know is ``other``; no value is ``None``.
- **Content**: ``text``, ``tool_call``, ``reasoning`` and ``refusal`` blocks. Tool call arguments
  are parsed from the provider's JSON text; arguments that are not a JSON object are kept as
  ``{"_raw": <the original value>}`` (``RAW_ARGUMENTS_KEY``), and empty arguments are ``{}``.
  Parts that are not representable (images, audio, files, server-side tool results) are skipped;
  ``raw`` keeps them.
- **Message content**: a string stays a string; a list of parts becomes a list of blocks (so an
  empty list of representable parts is ``[]``). Roles are ``system`` (also ``developer``),
  ``user``, ``assistant`` and ``tool``; a message with any other role is skipped.
- **system** is the provider's *separate* instructions parameter (Anthropic ``system``, Responses
  ``instructions``). System or developer messages inside ``messages`` (OpenAI chat) stay there
  as ``role="system"`` messages, and ``system`` is then ``None``: the canonical messages keep the
  caller's order, and nothing is counted twice.
- **tools** are ``[{"name", "description"?, "parameters"?}]``. A hosted tool without a name (for
  example Responses ``{"type": "web_search"}``) is named by its ``type``.
- **tool_choice** is ``"auto"``, ``"none"``, ``"required"`` or ``{"name": X}``; a hosted tool is
  named by its type, as in ``tools``. A value that fits none of these is ``None`` (raw keeps it).
- **Output model**: the response's own ``model`` with ``model_source="served"``; when the
  response names none, the requested model with ``"requested"``; neither when the call named no
  model either.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol, cast, runtime_checkable

from agentplane_primitives.enums import FinishReason, MessageRole, ModelSource
from agentplane_primitives.models import (
    ContentBlock,
    LlmInput,
    LlmOutput,
    LlmParams,
    Message,
    RefusalBlock,
    TextBlock,
    ToolCallBlock,
    Usage,
)
from agentplane_primitives.types import UNKNOWN_PROVIDER
from pydantic import JsonValue
from typing_extensions import override

from chronicle.llm.lenient import as_float, as_int, as_list, as_map, as_str, nonempty_str

_log = logging.getLogger("chronicle.llm")

UNKNOWN_MODEL = "unknown"
"""``LlmInput.model`` when the call named no model (the field may not be empty)."""

RAW_ARGUMENTS_KEY = "_raw"
"""Key holding tool call arguments that are not a JSON object, as the provider sent them."""


# --------------------------------------------------------------------------------------------
# The protocol


@runtime_checkable
class LlmAdapter(Protocol):
    """Derives the canonical ``llm`` fields of one kind of call from its raw JSON.

    ``to_input`` gets the call's arguments by name as JSON (only what the caller passed);
    ``to_output`` gets the JSON form of the return value and the input already derived. Both are
    total: they never raise on odd input.
    """

    provider: str

    def to_input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        """The canonical ``LlmInput`` of a request body (``input.raw``)."""
        ...

    def to_output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        """The canonical ``LlmOutput`` of a response (``output.raw``), given its input."""
        ...


class BaseAdapter(LlmAdapter):
    """The shared frame of every adapter: a name, a provider, and totality.

    Subclasses implement ``_input`` and ``_output``. Should one of them fail on a shape nobody
    foresaw, the public methods log it at debug level and return the minimal valid value (the
    model and ``raw``, no other canonical field) instead of raising.
    """

    name: str
    """A stable name for the adapter, e.g. ``openai.chat`` (used by the golden tests)."""
    provider: str
    """The provider this adapter records (a detecting adapter may record another per call)."""

    def __init__(self, name: str, provider: str) -> None:
        self.name = name
        self.provider = provider

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} provider={self.provider!r}>"

    @override
    def to_input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        arguments: Mapping[str, JsonValue] = raw if isinstance(raw, Mapping) else {}
        try:
            return self._input(arguments)
        except Exception:
            _log.debug("adapter %s could not read the call's input", self.name, exc_info=True)
            return _minimal_input(arguments)

    @override
    def to_output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        try:
            return self._output(raw, llm_input)
        except Exception:
            _log.debug("adapter %s could not read the call's output", self.name, exc_info=True)
            return _minimal_output(self.provider, raw, llm_input)

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        raise NotImplementedError

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        raise NotImplementedError


def _minimal_input(raw: Mapping[str, JsonValue]) -> LlmInput:
    model = model_of(raw)
    try:
        return LlmInput(model=model, messages=[], raw=dict(raw))
    except Exception:
        return LlmInput(model=model, messages=[], raw={})


def _minimal_output(provider: str, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
    requested = requested_model(llm_input)
    source = ModelSource.REQUESTED if requested is not None else None
    try:
        return LlmOutput(
            provider=provider or UNKNOWN_PROVIDER, model=requested, model_source=source, raw=raw
        )
    except Exception:
        return LlmOutput(
            provider=provider or UNKNOWN_PROVIDER, model=requested, model_source=source
        )


def model_of(raw: Mapping[str, JsonValue]) -> str:
    """The requested model: ``raw["model"]`` when it is a non-empty string, else ``unknown``."""
    return nonempty_str(raw.get("model")) or UNKNOWN_MODEL


def normalize_provider(provider: str | None) -> str | None:
    """A provider name as recorded (trimmed, lower case); ``None`` when blank or ``unknown``."""
    if provider is None:
        return None
    cleaned = provider.strip().lower()
    return cleaned if cleaned and cleaned != UNKNOWN_PROVIDER else None


def requested_model(llm_input: LlmInput) -> str | None:
    """The model the caller asked for, or ``None`` when the call named none."""
    return None if llm_input.model == UNKNOWN_MODEL else llm_input.model


# --------------------------------------------------------------------------------------------
# Usage


def _clamp(value: int | None) -> int:
    return max(value or 0, 0)


def reported_sum(counts: Iterable[int | None]) -> int | None:
    """The sum of the token counts a provider reported (``None`` for one it left out); ``None``
    when it reported none of them."""
    known = [count for count in counts if count is not None]
    return sum(known) if known else None


def _split(total: int | None, parts: Sequence[int | None]) -> tuple[int, list[int]]:
    """Split ``total`` into ``parts`` (each cut to what is left) and the remainder.

    With no total, the parts are taken as given and the remainder is 0.
    """
    clean = [_clamp(part) for part in parts]
    left = sum(clean) if total is None else _clamp(total)
    taken: list[int] = []
    for part in clean:
        share = min(part, left)
        taken.append(share)
        left -= share
    return left, taken


def inclusive_usage(
    *,
    input_total: int | None,
    cached_read: int | None = None,
    cache_write: int | None = None,
    output_total: int | None,
    reasoning: int | None = None,
) -> Usage | None:
    """Buckets for a provider whose totals *include* the cache and reasoning counts (OpenAI).

    ``input = input_total - cached_read - cache_write`` and ``output = output_total - reasoning``,
    never negative: details larger than their total are cut to the total. ``None`` when nothing
    was reported.
    """
    if all(v is None for v in (input_total, cached_read, cache_write, output_total, reasoning)):
        return None
    fresh_input, (read, write) = _split(input_total, (cached_read, cache_write))
    fresh_output, (thinking,) = _split(output_total, (reasoning,))
    return Usage(
        input=fresh_input,
        cached_read=read,
        cache_write=write,
        output=fresh_output,
        reasoning=thinking,
    )


def exclusive_usage(
    *,
    input_tokens: int | None,
    cached_read: int | None = None,
    cache_write: int | None = None,
    output_total: int | None,
    reasoning: int | None = None,
) -> Usage | None:
    """Buckets for a provider that reports cache counts *next to* the input count (Anthropic).

    The input buckets are taken as reported; ``reasoning`` (if the provider breaks it out) is
    inside ``output_total`` and is split off as in ``inclusive_usage``.
    """
    if all(v is None for v in (input_tokens, cached_read, cache_write, output_total, reasoning)):
        return None
    fresh_output, (thinking,) = _split(output_total, (reasoning,))
    return Usage(
        input=_clamp(input_tokens),
        cached_read=_clamp(cached_read),
        cache_write=_clamp(cache_write),
        output=fresh_output,
        reasoning=thinking,
    )


# --------------------------------------------------------------------------------------------
# Finish reasons


def map_finish_reason(value: object, mapping: Mapping[str, FinishReason]) -> FinishReason | None:
    """The canonical reason for a provider value: ``None`` when absent, ``other`` when unknown."""
    if value is None:
        return None
    if not isinstance(value, str):
        return FinishReason.OTHER
    return mapping.get(value, FinishReason.OTHER)


# --------------------------------------------------------------------------------------------
# Content blocks


def parse_arguments(value: JsonValue) -> dict[str, JsonValue]:
    """Tool call arguments as a JSON object.

    A JSON object (or JSON text of one) is used as is; no or blank arguments give ``{}``; anything
    else (text that does not parse, or parses to something other than an object) is kept under
    ``RAW_ARGUMENTS_KEY`` exactly as sent. ``NaN`` and ``Infinity`` do not count as JSON.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            parsed = json.loads(value, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return {RAW_ARGUMENTS_KEY: value}
        if isinstance(parsed, dict):
            return cast("dict[str, JsonValue]", parsed)
        return {RAW_ARGUMENTS_KEY: value}
    return {RAW_ARGUMENTS_KEY: value}


def _reject_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not JSON")


def tool_call_block(call_id: object, name: object, arguments: JsonValue) -> ToolCallBlock | None:
    """A ``tool_call`` block, or ``None`` when the call has no name (raw keeps it)."""
    tool_name = nonempty_str(name)
    if tool_name is None:
        return None
    return ToolCallBlock(
        id=as_str(call_id) or None, name=tool_name, arguments=parse_arguments(arguments)
    )


def text_of_blocks(blocks: Iterable[ContentBlock], *, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of the blocks of the given kinds, joined with newlines."""
    parts: list[str] = []
    for block in blocks:
        if block.type in kinds and not isinstance(block, ToolCallBlock):
            parts.append(block.text)
    return "\n".join(parts)


def _text_part_blocks(parts: Sequence[JsonValue]) -> list[ContentBlock]:
    """Text-like parts of a message (OpenAI chat and Responses part types) as blocks."""
    blocks: list[ContentBlock] = []
    for part in parts:
        if isinstance(part, str):
            blocks.append(TextBlock(text=part))
            continue
        item = as_map(part)
        if item is None:
            continue
        kind = item.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = as_str(item.get("text"))
            if text is not None:
                blocks.append(TextBlock(text=text))
        elif kind == "refusal":
            text = as_str(item.get("refusal"))
            if text is not None:
                blocks.append(RefusalBlock(text=text))
    return blocks


def read_blocks(
    parts: Iterable[JsonValue], read: Callable[[JsonValue], ContentBlock | None]
) -> list[ContentBlock]:
    """The blocks ``read`` makes of ``parts``, in order; a part it returns ``None`` for is
    skipped (raw keeps it)."""
    return [block for block in map(read, parts) if block is not None]


def with_roles(
    messages: Iterable[JsonValue], roles: Mapping[str, MessageRole]
) -> Iterator[tuple[Mapping[str, JsonValue], MessageRole]]:
    """Each message that is a JSON object with a ``role`` that ``roles`` maps, with that role;
    any other message is skipped (the module docstring's "Message content")."""
    for item in messages:
        message = as_map(item)
        if message is not None:
            role = roles.get(as_str(message.get("role")) or "")
            if role is not None:
                yield message, role


def tool_results_apart(
    role: MessageRole,
    parts: Sequence[JsonValue],
    read: Callable[[JsonValue], ContentBlock | None],
    tool_message: Callable[[JsonValue], Message | None],
) -> list[Message]:
    """One message's parts as canonical messages: a part ``tool_message`` answers (a tool's
    result, as Anthropic, Converse and Gemini put them in a user turn) becomes that ``tool``
    message, in place; the parts between such parts one message of ``role`` each, read into
    blocks by ``read``. A message with no parts is still one (empty) message."""
    result: list[Message] = []
    pending: list[ContentBlock] = []
    has_pending = not parts
    for part in parts:
        answer = tool_message(part)
        if answer is not None:
            if has_pending:
                result.append(Message(role=role, content=pending))
                pending, has_pending = [], False
            result.append(answer)
            continue
        has_pending = True
        block = read(part)
        if block is not None:
            pending.append(block)
    if has_pending:
        result.append(Message(role=role, content=pending))
    return result


def content_value(content: JsonValue) -> str | list[ContentBlock]:
    """Message content: a string as is, a list of parts as text blocks, anything else ``""``."""
    if isinstance(content, str):
        return content
    parts = as_list(content)
    if parts is not None:
        return _text_part_blocks(parts)
    return ""


# --------------------------------------------------------------------------------------------
# Tools and tool choice


def normalize_tools(value: JsonValue) -> list[dict[str, JsonValue]] | None:
    """Tool definitions as ``[{"name", "description"?, "parameters"?}]``; ``None`` if not a list.

    Reads OpenAI chat ``{"type": "function", "function": {...}}`` (and ``custom`` tools), the
    Responses flat ``{"type": "function", "name": ...}``, and Anthropic ``input_schema``. A tool
    with neither a name nor a type is skipped.
    """
    items = as_list(value)
    if items is None:
        return None
    return [tool for tool in map(_normalize_tool, items) if tool is not None]


def _normalize_tool(item: JsonValue) -> dict[str, JsonValue] | None:
    spec = as_map(item)
    if spec is None:
        return None
    kind = nonempty_str(spec.get("type"))
    source = spec
    for key in ("function", "custom"):
        nested = as_map(spec.get(key))
        if nested is not None and kind in (None, key):
            source = nested
            break
    name = nonempty_str(source.get("name"))
    if name is None:
        if kind is None or kind in ("function", "custom"):
            return None
        name = kind  # a hosted tool: {"type": "web_search"}
    tool: dict[str, JsonValue] = {"name": name}
    description = as_str(source.get("description"))
    if description is not None:
        tool["description"] = description
    for key in ("parameters", "input_schema"):
        schema = as_map(source.get(key))
        if schema is not None:
            tool["parameters"] = dict(schema)
            break
    return tool


_CHOICE_WORDS: Mapping[str, str] = {
    "auto": "auto",
    "none": "none",
    "required": "required",
    "any": "required",  # Anthropic
}


def normalize_tool_choice(value: JsonValue) -> JsonValue:
    """``"auto"``, ``"none"``, ``"required"`` or ``{"name": X}``; ``None`` when it fits none.

    Reads OpenAI chat (``{"type": "function", "function": {"name": X}}``, ``allowed_tools``,
    legacy ``function_call``), Responses (``{"type": "function", "name": X}``, hosted tool types)
    and Anthropic (``{"type": "auto" | "any" | "tool" | "none"}``, ``any`` meaning required).
    """
    if isinstance(value, str):
        return _CHOICE_WORDS.get(value)
    spec = as_map(value)
    if spec is None:
        return None
    kind = nonempty_str(spec.get("type"))
    if kind is not None and kind in _CHOICE_WORDS:
        return _CHOICE_WORDS[kind]
    if kind == "allowed_tools":
        allowed = as_map(spec.get("allowed_tools")) or spec
        mode = as_str(allowed.get("mode"))
        return _CHOICE_WORDS.get(mode) if mode is not None else None
    for key in ("function", "custom"):
        nested = as_map(spec.get(key))
        if nested is not None:
            nested_name = nonempty_str(nested.get("name"))
            if nested_name is not None:
                return {"name": nested_name}
    name = nonempty_str(spec.get("name"))
    if name is not None:
        return {"name": name}
    if kind is not None and kind not in ("function", "custom", "tool"):
        return {"name": kind}  # a hosted tool, named by its type as in ``tools``
    return None


# --------------------------------------------------------------------------------------------
# Params


def stop_sequences(value: JsonValue) -> list[str] | None:
    """A list of stop sequences: its strings (an item of another type is left out); ``None``
    when ``value`` is not a list."""
    items = as_list(value)
    if items is None:
        return None
    return [item for item in items if isinstance(item, str)]


def _stop_list(value: JsonValue) -> list[str] | None:
    return [value] if isinstance(value, str) else stop_sequences(value)


def token_limit(value: JsonValue) -> int | None:
    """A max-tokens setting as a count: a whole number from 0, else ``None`` (a negative count,
    or a value of another type, is left out)."""
    count = as_int(value)
    return count if count is not None and count >= 0 else None


def read_params(
    raw: Mapping[str, JsonValue],
    *,
    max_tokens_keys: Sequence[str] = ("max_tokens",),
    stop_keys: Sequence[str] = ("stop",),
) -> LlmParams:
    """Sampling settings the caller passed; a value of the wrong type is left out.

    ``max_tokens`` is the first of ``max_tokens_keys`` present (a negative count is left out);
    ``stop`` is the first of ``stop_keys`` present, a string becoming a one-item list.
    """
    max_tokens: int | None = None
    for key in max_tokens_keys:
        if as_int(raw.get(key)) is not None:
            max_tokens = token_limit(raw.get(key))
            break
    stop: list[str] | None = None
    for key in stop_keys:
        if raw.get(key) is not None:
            stop = _stop_list(raw.get(key))
            break
    return LlmParams(
        temperature=as_float(raw.get("temperature")),
        top_p=as_float(raw.get("top_p")),
        max_tokens=max_tokens,
        seed=as_int(raw.get("seed")),
        stop=stop,
    )


# --------------------------------------------------------------------------------------------
# Building the models


def build_input(
    raw: Mapping[str, JsonValue],
    *,
    messages: list[Message],
    system: str | None = None,
    tools: list[dict[str, JsonValue]] | None = None,
    tool_choice: JsonValue = None,
    response_format: Mapping[str, JsonValue] | None = None,
    params: LlmParams | None = None,
    model: str | None = None,
) -> LlmInput:
    """An ``LlmInput`` with ``raw`` kept whole; the requested model is ``model`` when given
    (a provider that names it otherwise, as Bedrock's ``modelId``), else read from ``raw``."""
    return LlmInput(
        model=model or model_of(raw),
        messages=messages,
        system=system,
        tools=tools,
        tool_choice=tool_choice,
        response_format=dict(response_format) if response_format is not None else None,
        params=params if params is not None else LlmParams(),
        raw=dict(raw),
    )


def build_output(
    raw: JsonValue,
    llm_input: LlmInput,
    *,
    provider: str,
    content: list[ContentBlock] | None = None,
    finish_reason: FinishReason | None = None,
    served_model: str | None = None,
    usage: Usage | None = None,
    response_id: str | None = None,
    deployment_id: str | None = None,
) -> LlmOutput:
    """An ``LlmOutput``; the model is the served one, else the requested one, else none."""
    model: str | None
    source: ModelSource | None
    if served_model:
        model, source = served_model, ModelSource.SERVED
    else:
        model = requested_model(llm_input)
        source = ModelSource.REQUESTED if model is not None else None
    return LlmOutput(
        content=content or [],
        finish_reason=finish_reason,
        provider=provider or UNKNOWN_PROVIDER,
        model=model,
        model_source=source,
        usage=usage,
        response_id=response_id,
        deployment_id=deployment_id,
        raw=raw,
    )


# --------------------------------------------------------------------------------------------
# Streams


class StreamText:
    """A string assembled from a stream's deltas, keeping at most ``limit`` characters.

    Deltas past the limit are dropped (``cut`` says so), so a very long stream holds a bounded
    amount of text; the recording cuts strings to ``max_payload_bytes`` anyway.
    """

    __slots__ = ("_length", "_limit", "_parts", "cut")

    def __init__(self, limit: int | None, first: str = "") -> None:
        self._limit = limit
        self._parts: list[str] = []
        self._length = 0
        self.cut = False
        self.add(first)

    def add(self, delta: object) -> None:
        """Append ``delta`` when it is a string and the limit is not reached."""
        if not isinstance(delta, str) or not delta:
            return
        if self._limit is not None and self._length + len(delta) > self._limit:
            room = self._limit - self._length
            if room <= 0:
                self.cut = True
                return
            delta, self.cut = delta[:room], True
        self._parts.append(delta)
        self._length += len(delta)

    def text(self) -> str:
        """The text so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""
