"""OpenTelemetry GenAI semantic-convention attributes of Chronicle's spans.

Chronicle's spans carry these next to the OpenInference ones, so backends that read the GenAI
conventions (Langfuse's default span filter, Logfire's LLM views, Datadog, Grafana) recognise
them. Every attribute name comes from ``opentelemetry-semantic-conventions``; none is written
here by hand.

- An ``llm`` boundary is a ``chat`` operation (``generate_content`` for Gemini's API, as the
  convention names it), a span of kind ``CLIENT`` named ``{operation} {model}`` (the operation
  alone when no model is known): provider, requested and served model, response id,
  finish reason, sampling parameters and token usage (input counts include the cached tokens, as
  the convention asks; the cache and reasoning counts are also given apart).
- A ``tool`` boundary is an ``execute_tool`` operation, a span of kind ``INTERNAL`` named
  ``execute_tool {tool}``.
- A request span is an ``invoke_agent`` operation of the agent (the ``AgentProfile``'s name, else
  the service), with the trace's ``session_id`` label as the conversation id; with a profile it
  is named ``invoke_agent {agent}``.
- The boundary's own name (the envelope's ``name``) is in ``chronicle.boundary`` on every
  boundary span, whatever the span is named.
- Message content (system instructions, input and output messages, tool definitions, tool
  arguments and results) follows the convention's opt-in rule: it is added only when
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true`` (or ``span_only`` /
  ``span_and_event``). The OpenInference attributes carry the content either way.

The inputs are the redacted canonical records, so redaction applies here as everywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Final

from agentplane_primitives.enums import MessageRole, ModelSource
from agentplane_primitives.models import ContentBlock, LlmInput, LlmOutput, Message, ToolCallBlock
from agentplane_primitives.types import UNKNOWN_PROVIDER
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from pydantic import JsonValue

__all__ = [
    "BOUNDARY",
    "CAPTURE_CONTENT_ENV",
    "TRACE_NAME",
    "AttributeValue",
    "agent_attributes",
    "agent_span_name",
    "content_capture_enabled",
    "llm_attributes",
    "llm_span_name",
    "operation_for",
    "llm_start_attributes",
    "requested_tool_calls",
    "tool_attributes",
    "tool_span_name",
    "tool_start_attributes",
    "with_tool_call_id",
]

AttributeValue = str | int | float | bool | Sequence[str]

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' opt-in switch for message content."""

BOUNDARY: Final = "chronicle.boundary"
"""The boundary's name on its span (the span itself is named by the convention)."""

TRACE_NAME: Final = "chronicle.trace_name"
"""The trace's name on its request span, when one was given (``record("chat")``)."""

_CONTENT_ON = frozenset({"true", "1", "span_only", "span_and_event"})

_OPERATION = gen_ai.GenAiOperationNameValues
_CHAT: Final = _OPERATION.CHAT.value
_GENERATE: Final = _OPERATION.GENERATE_CONTENT.value
_GENERATING: Final = frozenset({"google"})
"""Chronicle's providers whose API the convention names ``generate_content`` (Gemini's)."""
_TOOL_PREFIX: Final = f"{_OPERATION.EXECUTE_TOOL.value} "
_AGENT_PREFIX: Final = f"{_OPERATION.INVOKE_AGENT.value} "
_PROVIDERS: Mapping[str, str] = {
    "openai": gen_ai.GenAiProviderNameValues.OPENAI.value,
    "anthropic": gen_ai.GenAiProviderNameValues.ANTHROPIC.value,
    "azure": gen_ai.GenAiProviderNameValues.AZURE_AI_OPENAI.value,
    "google": gen_ai.GenAiProviderNameValues.GCP_GEN_AI.value,
    "bedrock": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
}
_FINISH_REASONS: Mapping[str, str] = {"tool_calls": "tool_call"}

# Added to the conventions after the oldest version Chronicle supports (0.58b0): used when known.
_CACHE_READ: str | None = getattr(gen_ai, "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS", None)
_CACHE_WRITE: str | None = getattr(gen_ai, "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS", None)
_REASONING: str | None = getattr(gen_ai, "GEN_AI_USAGE_REASONING_OUTPUT_TOKENS", None)
_TOOL_DEFINITIONS: str | None = getattr(gen_ai, "GEN_AI_TOOL_DEFINITIONS", None)
_TOOL_ARGUMENTS: str | None = getattr(gen_ai, "GEN_AI_TOOL_CALL_ARGUMENTS", None)
_TOOL_RESULT: str | None = getattr(gen_ai, "GEN_AI_TOOL_CALL_RESULT", None)
_AGENT_VERSION: str | None = getattr(gen_ai, "GEN_AI_AGENT_VERSION", None)


def content_capture_enabled() -> bool:
    """Whether the environment opted in to GenAI message content (read at configure)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CONTENT_ON


def provider_name(provider: str | None) -> str | None:
    """The convention's ``gen_ai.provider.name`` for a Chronicle provider; ``None`` if unknown."""
    if not provider or provider == UNKNOWN_PROVIDER:
        return None
    return _PROVIDERS.get(provider, provider)


# ---- span names ---------------------------------------------------------------------------


def operation_for(provider: str | None) -> str:
    """The convention's operation of a model call to ``provider``: ``generate_content`` for
    Gemini's API, ``chat`` for every other (Chat Completions, Responses, Messages, Converse)."""
    return _GENERATE if provider in _GENERATING else _CHAT


def llm_span_name(model: object, operation: str = _CHAT) -> str:
    """An ``llm`` boundary's span name: ``{operation} {model}``, or the operation alone when
    ``model`` is not a non-empty string (the convention's name when the model is unknown)."""
    if isinstance(model, str) and model and model != "unknown":
        return f"{operation} {model}"
    return operation


def tool_span_name(name: str) -> str:
    """A ``tool`` boundary's span name: ``execute_tool {name}``."""
    return _TOOL_PREFIX + name


def agent_span_name(agent: str) -> str:
    """A request span's name when an ``AgentProfile`` names the agent: ``invoke_agent {agent}``."""
    return _AGENT_PREFIX + agent


# ---- start attributes (fixed per boundary or span) --------------------------------------------


def llm_start_attributes(provider: str | None) -> dict[str, AttributeValue]:
    """What an ``llm`` boundary's span carries from its start."""
    attributes: dict[str, AttributeValue] = {gen_ai.GEN_AI_OPERATION_NAME: operation_for(provider)}
    name = provider_name(provider)
    if name is not None:
        attributes[gen_ai.GEN_AI_PROVIDER_NAME] = name
    return attributes


def tool_start_attributes(name: str) -> dict[str, AttributeValue]:
    """What a ``tool`` boundary's span carries from its start."""
    return {
        gen_ai.GEN_AI_OPERATION_NAME: _OPERATION.EXECUTE_TOOL.value,
        gen_ai.GEN_AI_TOOL_NAME: name,
        gen_ai.GEN_AI_TOOL_TYPE: "function",
    }


def with_tool_call_id(
    attributes: dict[str, AttributeValue], call_id: str | None
) -> dict[str, AttributeValue]:
    """A tool span's start attributes with the id of the model's call it answers, if known."""
    if call_id is None:
        return attributes
    return {**attributes, gen_ai.GEN_AI_TOOL_CALL_ID: call_id}


def requested_tool_calls(llm_output: LlmOutput | None) -> list[tuple[str, str]]:
    """``(name, id)`` of each tool call the model asked for (those with an id)."""
    if llm_output is None:
        return []
    return [
        (block.name, block.id)
        for block in llm_output.content
        if isinstance(block, ToolCallBlock) and block.id is not None
    ]


def agent_attributes(
    agent: str,
    conversation_id: str | None,
    *,
    version: str | None = None,
    description: str | None = None,
) -> dict[str, AttributeValue]:
    """What a request span carries: the invocation of ``agent`` (the profile's name, else the
    service), its version and description when a profile gives them, and its conversation if
    labelled."""
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_OPERATION_NAME: _OPERATION.INVOKE_AGENT.value,
        gen_ai.GEN_AI_AGENT_NAME: agent,
    }
    if version and _AGENT_VERSION is not None:
        attributes[_AGENT_VERSION] = version
    if description:
        attributes[gen_ai.GEN_AI_AGENT_DESCRIPTION] = description
    if conversation_id:
        attributes[gen_ai.GEN_AI_CONVERSATION_ID] = conversation_id
    return attributes


# ---- end attributes (from the call's record) --------------------------------------------------


def llm_attributes(
    llm_input: LlmInput,
    llm_output: LlmOutput | None,
    *,
    content: bool,
    usage: bool = True,
) -> dict[str, AttributeValue]:
    """The GenAI attributes of a finished ``llm`` boundary.

    ``content`` adds the opt-in message content. ``usage=False`` (another span of the same call
    counts it; see ``chronicle.otel.counted_once``) leaves the token counts out, and the
    operation name too: a demoted span is no model call.
    """
    provider = llm_output.provider if llm_output is not None else None
    attributes: dict[str, AttributeValue] = (
        {gen_ai.GEN_AI_OPERATION_NAME: operation_for(provider)} if usage else {}
    )
    name = provider_name(provider)
    if name is not None:
        attributes[gen_ai.GEN_AI_PROVIDER_NAME] = name
    if llm_input.model and llm_input.model != "unknown":
        attributes[gen_ai.GEN_AI_REQUEST_MODEL] = llm_input.model
    params = llm_input.params
    if params.temperature is not None:
        attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] = params.temperature
    if params.top_p is not None:
        attributes[gen_ai.GEN_AI_REQUEST_TOP_P] = params.top_p
    if params.max_tokens is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = params.max_tokens
    if params.seed is not None:
        attributes[gen_ai.GEN_AI_REQUEST_SEED] = params.seed
    if params.stop:
        attributes[gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES] = list(params.stop)
    if content:
        _input_content(llm_input, attributes)
    if llm_output is None:
        return attributes
    if llm_output.error is not None:
        attributes[ERROR_TYPE] = llm_output.error.type
        return attributes
    if llm_output.model is not None and llm_output.model_source is ModelSource.SERVED:
        attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = llm_output.model
    if llm_output.response_id:
        attributes[gen_ai.GEN_AI_RESPONSE_ID] = llm_output.response_id
    finish = _finish_reason(llm_output)
    if finish is not None:
        attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = [finish]
    if usage and llm_output.usage is not None:
        counts = llm_output.usage
        attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = (
            counts.input + counts.cached_read + counts.cache_write
        )
        attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = counts.output + counts.reasoning
        for key, value in (
            (_CACHE_READ, counts.cached_read),
            (_CACHE_WRITE, counts.cache_write),
            (_REASONING, counts.reasoning),
        ):
            if key is not None:
                attributes[key] = value
    if content:
        output = {
            "role": MessageRole.ASSISTANT.value,
            "parts": _parts(llm_output.content),
            "finish_reason": finish or "stop",
        }
        attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _json([output])
    return attributes


def tool_attributes(
    arguments: JsonValue, result: JsonValue, *, content: bool
) -> dict[str, AttributeValue]:
    """The opt-in content of a finished ``tool`` boundary: its arguments and result as JSON."""
    if not content:
        return {}
    attributes: dict[str, AttributeValue] = {}
    if _TOOL_ARGUMENTS is not None:
        attributes[_TOOL_ARGUMENTS] = _json(arguments)
    if _TOOL_RESULT is not None:
        attributes[_TOOL_RESULT] = _json(result)
    return attributes


# ---- message content ------------------------------------------------------------------------


def _input_content(llm_input: LlmInput, attributes: dict[str, AttributeValue]) -> None:
    if llm_input.system is not None:
        attributes[gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS] = _json(
            [{"type": "text", "content": llm_input.system}]
        )
    attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _json(
        [_message(message) for message in llm_input.messages]
    )
    if llm_input.tools and _TOOL_DEFINITIONS is not None:
        definitions = [{"type": "function", **tool} for tool in llm_input.tools]
        attributes[_TOOL_DEFINITIONS] = _json(definitions)


def _message(message: Message) -> dict[str, JsonValue]:
    if message.role is MessageRole.TOOL:
        response: JsonValue = (
            message.content if isinstance(message.content, str) else _parts(message.content)
        )
        part: dict[str, JsonValue] = {"type": "tool_call_response", "response": response}
        if message.tool_call_id is not None:
            part["id"] = message.tool_call_id
        return {"role": message.role.value, "parts": [part]}
    if isinstance(message.content, str):
        parts: list[JsonValue] = [{"type": "text", "content": message.content}]
    else:
        parts = _parts(message.content)
    return {"role": message.role.value, "parts": parts}


def _parts(blocks: Sequence[ContentBlock]) -> list[JsonValue]:
    parts: list[JsonValue] = []
    for block in blocks:
        if isinstance(block, ToolCallBlock):
            call: dict[str, JsonValue] = {
                "type": "tool_call",
                "name": block.name,
                "arguments": dict(block.arguments),
            }
            if block.id is not None:
                call["id"] = block.id
            parts.append(call)
        else:
            kind = "text" if block.type == "text" else block.type
            parts.append({"type": kind, "content": block.text})
    return parts


def _finish_reason(llm_output: LlmOutput) -> str | None:
    if llm_output.finish_reason is None:
        return None
    value = llm_output.finish_reason.value
    return _FINISH_REASONS.get(value, value)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
