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

Streams (``stream=True``, ``messages.stream(...)``) are folded into what a plain call returns
(and back) by ``chronicle.llm.anthropic_streams``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
    build_input,
    build_output,
    exclusive_usage,
    map_finish_reason,
    normalize_tool_choice,
    normalize_tools,
    read_blocks,
    read_params,
    reported_sum,
    tool_call_block,
    tool_results_apart,
    with_roles,
)
from chronicle.llm.lenient import as_int, as_list, as_map, as_str, nonempty_str

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


def _tool_result_content(value: JsonValue) -> str | list[ContentBlock]:
    if isinstance(value, str):
        return value
    parts = as_list(value)
    if parts is None:
        return ""
    return [block for block in read_blocks(parts, read_block) if block.type == "text"]


def read_messages(messages: Sequence[JsonValue]) -> list[Message]:
    """Messages API ``messages`` as canonical messages (see the module docstring)."""
    result: list[Message] = []
    for message, role in with_roles(messages, _ROLES):
        content = message.get("content")
        if isinstance(content, str):
            result.append(Message(role=role, content=content))
            continue
        parts = as_list(content)
        if parts is None:
            result.append(Message(role=role, content=""))
        elif role is MessageRole.USER:
            result.extend(tool_results_apart(role, parts, read_block, _tool_result))
        else:
            result.append(Message(role=role, content=read_blocks(parts, read_block)))
    return result


def _tool_result(part: JsonValue) -> Message | None:
    """A ``tool_result`` block as the ``tool`` message it answers, else ``None``."""
    spec = as_map(part)
    if spec is None or spec.get("type") != "tool_result":
        return None
    return Message(
        role=MessageRole.TOOL,
        content=_tool_result_content(spec.get("content")),
        tool_call_id=nonempty_str(spec.get("tool_use_id")),
    )


def message_usage(value: JsonValue) -> Usage | None:
    """Messages API ``usage`` as exclusive buckets (cache counts are reported separately)."""
    usage = as_map(value)
    if usage is None:
        return None
    cache_write = as_int(usage.get("cache_creation_input_tokens"))
    if cache_write is None:
        breakdown = as_map(usage.get("cache_creation"))
        if breakdown is not None:
            cache_write = reported_sum(as_int(count) for count in breakdown.values())
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
        content=read_blocks(as_list(response.get("content")) or [], read_block),
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
