"""OpenInference attributes of an LLM span, so other OTel backends can show the call.

The attributes are rendered from the canonical ``LlmInput``/``LlmOutput`` (``chronicle.llm``);
Chronicle's own record does not depend on them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import cast

from agentplane_primitives.enums import MessageRole, ModelSource
from agentplane_primitives.models import ContentBlock, LlmInput, LlmOutput, ToolCallBlock
from agentplane_primitives.types import UNKNOWN_PROVIDER
from openinference.semconv.trace import (
    MessageAttributes,
    MessageContentAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolAttributes,
    ToolCallAttributes,
)
from pydantic import JsonValue

from chronicle.llm.canonical import RAW_ARGUMENTS_KEY, normalize_provider, text_of_blocks

SPAN_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
"""The attribute every Chronicle span carries with its OpenInference kind: ``LLM`` or ``TOOL``
for a boundary (``KIND_OF``), ``CHAIN`` for a request span."""
KIND_OF: Mapping[str, str] = {
    "llm": OpenInferenceSpanKindValues.LLM.value,
    "tool": OpenInferenceSpanKindValues.TOOL.value,
}
"""A boundary's kind (``llm``, ``tool``) as its span's ``SPAN_KIND``."""
CHAIN = OpenInferenceSpanKindValues.CHAIN.value
"""A request span's ``SPAN_KIND``."""

MAX_SPAN_MESSAGES = 32
"""Most input messages (the system text counts as one) put on a span as attributes."""

_MAX_SPAN_ITEMS = 32  # tool calls per message, content parts per message, tools

AttributeValue = str | int | float | bool


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

    who = llm_output.provider if llm_output is not None else normalize_provider(provider)
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
