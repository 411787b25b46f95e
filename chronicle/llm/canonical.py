"""Canonical ``llm`` fields: the adapter protocol, shared helpers, the generic adapter, and the
OpenInference attributes of an LLM span.

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
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from openinference.semconv.trace import (
    MessageAttributes,
    MessageContentAttributes,
    SpanAttributes,
    ToolAttributes,
    ToolCallAttributes,
)
from pydantic import JsonValue

__all__ = [
    "MAX_SPAN_MESSAGES",
    "RAW_ARGUMENTS_KEY",
    "UNKNOWN_MODEL",
    "AttributeValue",
    "BaseAdapter",
    "GenericAdapter",
    "LlmAdapter",
    "as_float",
    "as_int",
    "as_list",
    "as_map",
    "as_str",
    "build_input",
    "build_output",
    "content_value",
    "exclusive_usage",
    "generic_adapter",
    "inclusive_usage",
    "llm_span_attributes",
    "map_finish_reason",
    "model_of",
    "nonempty_str",
    "normalize_tool_choice",
    "normalize_tools",
    "parse_arguments",
    "read_params",
    "requested_model",
    "text_of_blocks",
    "tool_call_block",
]

_log = logging.getLogger("chronicle.llm")

UNKNOWN_MODEL = "unknown"
"""``LlmInput.model`` when the call named no model (the field may not be empty)."""

RAW_ARGUMENTS_KEY = "_raw"
"""Key holding tool call arguments that are not a JSON object, as the provider sent them."""

MAX_SPAN_MESSAGES = 32
"""Most input messages (the system text counts as one) put on a span as attributes."""

_MAX_SPAN_ITEMS = 32  # tool calls per message, content parts per message, tools

AttributeValue = str | int | float | bool


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

    def to_input(self, raw: Mapping[str, JsonValue]) -> LlmInput: ...

    def to_output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput: ...


class BaseAdapter:
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

    def to_input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        arguments: Mapping[str, JsonValue] = raw if isinstance(raw, Mapping) else {}
        try:
            return self._input(arguments)
        except Exception:
            _log.debug("adapter %s could not read the call's input", self.name, exc_info=True)
            return _minimal_input(arguments)

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


# --------------------------------------------------------------------------------------------
# Reading JSON leniently


def as_map(value: object) -> Mapping[str, JsonValue] | None:
    """``value`` if it is a JSON object, else ``None``."""
    if isinstance(value, Mapping):
        return cast("Mapping[str, JsonValue]", value)
    return None


def as_list(value: object) -> list[JsonValue] | None:
    """``value`` if it is a JSON array, else ``None``."""
    if isinstance(value, list):
        return cast("list[JsonValue]", value)
    return None


def as_str(value: object) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def nonempty_str(value: object) -> str | None:
    """``value`` if it is a string with at least one non-blank character, else ``None``."""
    return value if isinstance(value, str) and value.strip() else None


def as_int(value: object) -> int | None:
    """An integer (a float with no fraction counts; a bool does not), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def as_float(value: object) -> float | None:
    """A finite number as a float (a bool is not a number here), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def model_of(raw: Mapping[str, JsonValue]) -> str:
    """The requested model: ``raw["model"]`` when it is a non-empty string, else ``unknown``."""
    return nonempty_str(raw.get("model")) or UNKNOWN_MODEL


def requested_model(llm_input: LlmInput) -> str | None:
    """The model the caller asked for, or ``None`` when the call named none."""
    return None if llm_input.model == UNKNOWN_MODEL else llm_input.model


# --------------------------------------------------------------------------------------------
# Usage


def _clamp(value: int | None) -> int:
    return max(value or 0, 0)


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
    tools: list[dict[str, JsonValue]] = []
    for item in items:
        tool = _normalize_tool(item)
        if tool is not None:
            tools.append(tool)
    return tools


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


def _stop_list(value: JsonValue) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    items = as_list(value)
    if items is None:
        return None
    return [item for item in items if isinstance(item, str)]


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
        count = as_int(raw.get(key))
        if count is not None:
            max_tokens = count if count >= 0 else None
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
) -> LlmInput:
    """An ``LlmInput`` with the requested model read from ``raw`` and ``raw`` kept whole."""
    return LlmInput(
        model=model_of(raw),
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
# The generic adapter


def _normalize_provider(provider: str | None) -> str | None:
    if provider is None:
        return None
    cleaned = provider.strip().lower()
    return cleaned if cleaned and cleaned != UNKNOWN_PROVIDER else None


def _looks_anthropic_messages(messages: Sequence[JsonValue]) -> bool:
    for message in messages:
        item = as_map(message)
        parts = as_list(item.get("content")) if item is not None else None
        for part in parts or ():
            block = as_map(part)
            if block is None:
                continue
            kind = block.get("type")
            if kind in ("tool_use", "tool_result", "thinking", "redacted_thinking"):
                return True
            if kind in ("image", "document") and "source" in block:
                return True
    return False


_OutputParser = Callable[[Mapping[str, JsonValue], LlmInput, str], LlmOutput]


def _detect_output(raw: Mapping[str, JsonValue]) -> tuple[str, _OutputParser] | None:
    """The provider family and output parser for a provider-shaped response, if it is one."""
    from chronicle.llm import anthropic as anthropic_adapter
    from chronicle.llm import openai as openai_adapter

    if as_list(raw.get("choices")) is not None:
        return "openai", openai_adapter.chat_output
    if raw.get("object") == "response" and as_list(raw.get("output")) is not None:
        return "openai", openai_adapter.responses_output
    content = as_list(raw.get("content"))
    if content is not None and (
        raw.get("type") == "message" or "stop_reason" in raw or raw.get("role") == "assistant"
    ):
        return "anthropic", anthropic_adapter.message_output
    return None


class GenericAdapter(BaseAdapter):
    """For ``@boundary(kind="llm")`` and ``wrap_llm`` on any function that calls a model.

    Input: the model from ``raw["model"]``; messages when ``raw["messages"]`` looks like OpenAI
    or Anthropic messages (else ``[]``); ``system`` from a ``system`` argument (a string, or a list
    of text blocks joined with newlines); tools, tool choice and sampling settings when arguments
    of those names are given.

    Output: a string is one text block. An OpenAI ChatCompletion, an OpenAI Responses ``Response``
    or an Anthropic ``Message`` (as JSON) is read by that provider's adapter (content, usage,
    finish reason, served model), and ``provider`` is the one given, else the one detected. A
    single OpenAI-shaped assistant message (``choices[0].message``) gives its content only.
    Anything else has no content and ``usage = None``; with no provider given and none detected,
    ``provider = "unknown"`` and ``usage = None``.
    """

    def __init__(self, provider: str | None = None) -> None:
        given = _normalize_provider(provider)
        super().__init__(f"generic.{given or UNKNOWN_PROVIDER}", given or UNKNOWN_PROVIDER)
        self._given = given

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        from chronicle.llm import anthropic as anthropic_adapter
        from chronicle.llm import openai as openai_adapter

        messages: list[Message] = []
        listed = as_list(raw.get("messages"))
        if listed is not None:
            if _looks_anthropic_messages(listed):
                messages = anthropic_adapter.read_messages(listed)
            else:
                messages = openai_adapter.read_chat_messages(listed)
        response_format = as_map(raw.get("response_format"))
        return build_input(
            raw,
            messages=messages,
            system=anthropic_adapter.read_system(raw.get("system")),
            tools=normalize_tools(raw.get("tools")),
            tool_choice=normalize_tool_choice(raw.get("tool_choice")),
            response_format=response_format,
            params=read_params(
                raw,
                max_tokens_keys=("max_tokens", "max_completion_tokens", "max_output_tokens"),
                stop_keys=("stop", "stop_sequences"),
            ),
        )

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        from chronicle.llm import openai as openai_adapter

        if isinstance(raw, str):
            return build_output(
                raw, llm_input, provider=self.provider, content=[TextBlock(text=raw)]
            )
        response = as_map(raw)
        if response is not None:
            detected = _detect_output(response)
            if detected is not None:
                family, parse = detected
                return parse(response, llm_input, self._given or family)
            if response.get("role") == "assistant":
                return build_output(
                    raw,
                    llm_input,
                    provider=self.provider,
                    content=openai_adapter.assistant_blocks(response),
                )
        return build_output(raw, llm_input, provider=self.provider)


def generic_adapter(provider: str | None) -> LlmAdapter:
    """The adapter for an arbitrary function that calls a model; see ``GenericAdapter``.

    ``provider`` is recorded as given (trimmed, lower case); ``None``, blank or ``unknown`` means
    detect it from the response shape, else ``unknown``.
    """
    return GenericAdapter(provider)


# --------------------------------------------------------------------------------------------
# OpenInference attributes

_OI_PROVIDER: Mapping[str, str] = {"bedrock": "aws"}
_OI_SYSTEM: Mapping[str, str] = {
    "openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
    "google": "vertexai",
}
_SYSTEM_BY_MODEL: tuple[tuple[tuple[str, ...], str], ...] = (
    (("claude", "anthropic."), "anthropic"),
    (("gpt-", "chatgpt", "o1", "o3", "o4", "openai"), "openai"),
    (("gemini", "vertex"), "vertexai"),
    (("mistral", "mixtral", "codestral"), "mistralai"),
    (("command", "cohere"), "cohere"),
)


def _oi_system(provider: str, model: str) -> str | None:
    """The API family for ``llm.system``: by provider, else guessed from the model name."""
    if provider in _OI_SYSTEM:
        return _OI_SYSTEM[provider]
    name = model.lower().rsplit("/", 1)[-1]
    for prefixes, system in _SYSTEM_BY_MODEL:
        if name.startswith(prefixes) or any(f".{p}" in name for p in prefixes):
            return system
    return None if provider == UNKNOWN_PROVIDER else provider


def _arguments_text(arguments: Mapping[str, JsonValue]) -> str:
    if set(arguments) == {RAW_ARGUMENTS_KEY} and isinstance(arguments[RAW_ARGUMENTS_KEY], str):
        return cast(str, arguments[RAW_ARGUMENTS_KEY])
    return json.dumps(arguments, ensure_ascii=False, default=str)


def _message_attributes(
    prefix: str,
    role: str,
    content: str | Sequence[ContentBlock],
    tool_call_id: str | None,
    attributes: dict[str, AttributeValue],
) -> None:
    attributes[f"{prefix}.{MessageAttributes.MESSAGE_ROLE}"] = role
    if tool_call_id is not None:
        attributes[f"{prefix}.{MessageAttributes.MESSAGE_TOOL_CALL_ID}"] = tool_call_id
    if isinstance(content, str):
        attributes[f"{prefix}.{MessageAttributes.MESSAGE_CONTENT}"] = content
        return
    text = text_of_blocks(content, kinds=("text", "refusal"))
    if text:
        attributes[f"{prefix}.{MessageAttributes.MESSAGE_CONTENT}"] = text
    part_index = 0
    call_index = 0
    for block in content:
        if isinstance(block, ToolCallBlock):
            if call_index >= _MAX_SPAN_ITEMS:
                continue
            call = f"{prefix}.{MessageAttributes.MESSAGE_TOOL_CALLS}.{call_index}"
            if block.id is not None:
                attributes[f"{call}.{ToolCallAttributes.TOOL_CALL_ID}"] = block.id
            attributes[f"{call}.{ToolCallAttributes.TOOL_CALL_FUNCTION_NAME}"] = block.name
            attributes[f"{call}.{ToolCallAttributes.TOOL_CALL_FUNCTION_ARGUMENTS_JSON}"] = (
                _arguments_text(block.arguments)
            )
            call_index += 1
        elif part_index < _MAX_SPAN_ITEMS:
            part = f"{prefix}.{MessageAttributes.MESSAGE_CONTENTS}.{part_index}"
            kind = "reasoning" if block.type == "reasoning" else "text"
            attributes[f"{part}.{MessageContentAttributes.MESSAGE_CONTENT_TYPE}"] = kind
            attributes[f"{part}.{MessageContentAttributes.MESSAGE_CONTENT_TEXT}"] = block.text
            part_index += 1


def _tool_schema(tool: Mapping[str, JsonValue]) -> str:
    function: dict[str, JsonValue] = {"name": tool.get("name")}
    for key in ("description", "parameters"):
        if key in tool:
            function[key] = tool[key]
    return json.dumps({"type": "function", "function": function}, ensure_ascii=False, default=str)


def llm_span_attributes(
    llm_input: LlmInput,
    llm_output: LlmOutput | None,
    *,
    provider: str | None = None,
) -> dict[str, AttributeValue]:
    """OpenInference attributes of an LLM span, for display in other OTel backends.

    Model (served if known, else requested), provider and API family, invocation parameters,
    input messages (the ``system`` text first, as a system message; at most
    ``MAX_SPAN_MESSAGES``, keeping the system text and the latest messages), the output message,
    token counts (prompt = input + cached_read + cache_write, completion = output + reasoning) and
    tool schemas. ``provider`` is used when there is no output yet. Bedrock is reported as
    OpenInference's ``aws``; an unknown provider is left out.
    """
    attributes: dict[str, AttributeValue] = {}
    served = llm_output.model if llm_output is not None else None
    model = served or llm_input.model
    attributes[SpanAttributes.LLM_MODEL_NAME] = model
    attributes[SpanAttributes.LLM_REQUEST_MODEL_NAME] = llm_input.model
    if llm_output is not None and served and llm_output.model_source is ModelSource.SERVED:
        attributes[SpanAttributes.LLM_RESPONSE_MODEL_NAME] = served

    who = llm_output.provider if llm_output is not None else _normalize_provider(provider)
    if who and who != UNKNOWN_PROVIDER:
        attributes[SpanAttributes.LLM_PROVIDER] = _OI_PROVIDER.get(who, who)
    system_name = _oi_system(who or UNKNOWN_PROVIDER, model)
    if system_name is not None:
        attributes[SpanAttributes.LLM_SYSTEM] = system_name

    attributes[SpanAttributes.LLM_INVOCATION_PARAMETERS] = json.dumps(
        llm_input.params.model_dump(mode="json", exclude_none=True), ensure_ascii=False
    )

    shown: list[tuple[str, str | Sequence[ContentBlock], str | None]] = []
    budget = MAX_SPAN_MESSAGES
    if llm_input.system is not None:
        shown.append((MessageRole.SYSTEM.value, llm_input.system, None))
        budget -= 1
    recent = llm_input.messages[-budget:] if budget > 0 else []
    shown.extend((m.role.value, m.content, m.tool_call_id) for m in recent)
    for index, (role, content, call_id) in enumerate(shown):
        prefix = f"{SpanAttributes.LLM_INPUT_MESSAGES}.{index}"
        _message_attributes(prefix, role, content, call_id, attributes)

    if llm_output is not None and llm_output.error is None:
        prefix = f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0"
        _message_attributes(
            prefix, MessageRole.ASSISTANT.value, llm_output.content, None, attributes
        )
        if llm_output.finish_reason is not None:
            attributes[SpanAttributes.LLM_FINISH_REASON] = llm_output.finish_reason.value

    usage = llm_output.usage if llm_output is not None else None
    if usage is not None:
        prompt = usage.input + usage.cached_read + usage.cache_write
        completion = usage.output + usage.reasoning
        attributes[SpanAttributes.LLM_TOKEN_COUNT_PROMPT] = prompt
        attributes[SpanAttributes.LLM_TOKEN_COUNT_COMPLETION] = completion
        attributes[SpanAttributes.LLM_TOKEN_COUNT_TOTAL] = prompt + completion
        attributes[SpanAttributes.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ] = usage.cached_read
        attributes[SpanAttributes.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE] = usage.cache_write
        attributes[SpanAttributes.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING] = usage.reasoning

    for index, tool in enumerate((llm_input.tools or [])[:_MAX_SPAN_ITEMS]):
        key = f"{SpanAttributes.LLM_TOOLS}.{index}.{ToolAttributes.TOOL_JSON_SCHEMA}"
        attributes[key] = _tool_schema(tool)
    return attributes
