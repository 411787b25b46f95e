"""What ``LlmServer`` answers with: its scripted replies, and the builders that make them.

One builder family per wire format (OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages, Google Gemini, AWS Bedrock Converse): ``*_text``, ``*_tool_calls``/``*_tool_use``,
``*_usage``, ``*_refusal``/``gemini_blocked`` and ``*_error`` each return a ``Reply`` (a status
and the JSON body the real API sends), which ``streamed`` and ``without`` adjust. Import them
from ``tests.support.llm_server``, which re-exports them beside the server.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Api = Literal["chat", "responses", "messages", "gemini", "converse"]
"""Which wire format: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini
``generateContent`` or Bedrock Converse."""

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
DEFAULT_GEMINI_MODEL = "gemini-2.5-flash"

# ---- data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model makes: ``arguments`` is sent JSON-encoded (OpenAI) or as ``input``."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    """The call id; generated (``call_...`` / ``toolu_...``) when ``None``."""


def tool_call(
    name: str, arguments: Mapping[str, Any] | None = None, *, id: str | None = None
) -> ToolCall:
    """Shorthand for ``ToolCall(name, arguments or {}, id)``."""
    return ToolCall(name=name, arguments=dict(arguments or {}), id=id)


def streamed(
    reply: Reply,
    *,
    deltas: int | None = None,
    fail_after: int | None = None,
    failure: Literal["error", "disconnect"] = "error",
) -> Reply:
    """``reply`` streamed in ``deltas`` deltas per text, failing after ``fail_after`` events."""
    return replace(
        reply,
        deltas=reply.deltas if deltas is None else deltas,
        fail_after=fail_after,
        failure=failure,
    )


def without(reply: Reply, *paths: str) -> Reply:
    """``reply`` sent without the fields at ``paths`` (dotted, into nested objects), the way an
    OpenAI- or Anthropic-compatible server may leave out fields the SDKs tolerate missing
    (``without(chat_text("hi"), "object", "created")``). A streamed reply's chunks and events
    leave them out too; a path that is not in the body is ignored."""
    return replace(reply, omit=reply.omit + paths)


@dataclass(frozen=True)
class Reply:
    """One scripted answer for ``api``: a JSON ``body`` with an HTTP ``status``.

    In a 2xx body, ``id``, ``model`` and the creation time may be ``None``: they are filled in
    when the reply is sent (``model`` from the request, else the Azure deployment, else a
    default). A ``stream: true`` request gets a 2xx body converted into that API's SSE stream;
    an error reply is always sent as JSON with its status. ``delay`` seconds pass before it is
    sent.
    """

    api: Api
    body: Mapping[str, Any]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    deltas: int = 2
    """Streamed: each text (content, refusal, tool arguments) is sent in this many deltas."""
    fail_after: int | None = None
    """Streamed: the stream fails after this many events (``None``: it runs to its end)."""
    failure: Literal["error", "disconnect"] = "error"
    """How a stream fails: the API's error event (the SDKs raise it), or a dropped connection."""
    omit: tuple[str, ...] = ()
    """Dotted paths (``"created"``, ``"usage.input_tokens_details.cache_write_tokens"``) left out
    of the body as sent, and so of every streamed chunk or event built from it (see
    ``without``)."""

    @property
    def is_error(self) -> bool:
        """The status is 4xx or 5xx."""
        return self.status >= 400


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received. ``headers`` keys are lower-case; ``body`` is parsed JSON."""

    method: str
    path: str
    """The path without the query string."""
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: Any
    """The parsed JSON body, or ``None`` when there was none or it was not JSON."""
    api: Api | None
    """The API the path belongs to, or ``None`` for an unknown path (answered 404)."""
    deployment: str | None = None
    """The Azure deployment named in the path, if any."""
    path_model: str | None = None
    """The model named in the path (Gemini, Bedrock), URL-decoded, if any."""
    path_stream: bool = False
    """The path asked for a stream (Gemini ``streamGenerateContent``, Bedrock
    ``converse-stream``)."""

    @property
    def stream(self) -> bool:
        """The path or the body (``stream: true``) asked for a stream."""
        return self.path_stream or (isinstance(self.body, dict) and self.body.get("stream") is True)

    @property
    def model(self) -> str | None:
        """The body's ``model``, else the model named in the path, if any."""
        model = self.body.get("model") if isinstance(self.body, dict) else None
        return model if isinstance(model, str) else self.path_model


# ---- reply builders: OpenAI Chat Completions ---------------------------------------------


def chat_usage(
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    *,
    cached_tokens: int | None = None,
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    """A ``CompletionUsage``; the token details appear only when given."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens, "audio_tokens": 0}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {
            "reasoning_tokens": reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        }
    return usage


def _chat_body(
    message: dict[str, Any], finish_reason: str, model: str | None, usage: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": None,
        "object": "chat.completion",
        "created": None,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": dict(usage) if usage is not None else chat_usage(),
        "service_tier": "default",
        "system_fingerprint": "fp_local",
    }


def chat_text(
    text: str,
    *,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
    finish_reason: Literal["stop", "length", "content_filter"] = "stop",
) -> Reply:
    """A ``ChatCompletion`` whose single choice says ``text``."""
    return Reply("chat", _chat_body({"content": text}, finish_reason, model, usage))


def chat_tool_calls(
    *calls: ToolCall,
    text: str | None = None,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """A ``ChatCompletion`` asking for ``calls`` (``finish_reason="tool_calls"``)."""
    tool_calls = [
        {
            "id": call.id or _new_id("call_"),
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
        }
        for call in calls
    ]
    message = {"content": text, "tool_calls": tool_calls}
    return Reply("chat", _chat_body(message, "tool_calls", model, usage))


def chat_refusal(
    refusal: str = "I'm sorry, I can't help with that.",
    *,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """A ``ChatCompletion`` whose message is a ``refusal`` (``content`` is ``None``)."""
    return Reply("chat", _chat_body({"content": None, "refusal": refusal}, "stop", model, usage))


_INVALID = ("invalid_request_error", None)
_OPENAI_ERRORS = {
    400: _INVALID,
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
"""An OpenAI error's ``type`` and ``code`` by status."""


def chat_error(
    status: int,
    message: str = "scripted error",
    *,
    type: str | None = None,
    code: str | None = None,
    param: str | None = None,
) -> Reply:
    """An OpenAI error body with ``status``: 400 raises ``openai.BadRequestError``, 429
    ``RateLimitError``, 5xx ``InternalServerError`` and so on."""
    server = ("server_error", None)
    default_type, default_code = _by_status(status, _OPENAI_ERRORS, server, _INVALID)
    body = {
        "error": {
            "message": message,
            "type": type or default_type,
            "param": param,
            "code": code if code is not None else default_code,
        }
    }
    return Reply("chat", body, status=status)


# ---- reply builders: OpenAI Responses ----------------------------------------------------


def responses_usage(
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """A ``ResponseUsage`` (its detail objects are required by the API, so always present)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def _responses_body(
    output: list[dict[str, Any]], model: str | None, usage: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": None,
        "object": "response",
        "created_at": None,
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "usage": dict(usage) if usage is not None else responses_usage(),
    }


def _output_message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "message",
        "id": _new_id("msg_"),
        "status": "completed",
        "role": "assistant",
        "content": content,
    }


def responses_text(
    text: str, *, model: str | None = None, usage: Mapping[str, Any] | None = None
) -> Reply:
    """A ``Response`` with one assistant message saying ``text`` (``response.output_text``)."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return Reply("responses", _responses_body([_output_message([part])], model, usage))


def responses_tool_calls(
    *calls: ToolCall,
    text: str | None = None,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """A ``Response`` whose output holds a ``function_call`` item per call (after ``text``)."""
    output: list[dict[str, Any]] = []
    if text is not None:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        output.append(_output_message([part]))
    for call in calls:
        output.append(
            {
                "type": "function_call",
                "id": _new_id("fc_"),
                "call_id": call.id or _new_id("call_"),
                "name": call.name,
                "arguments": json.dumps(dict(call.arguments)),
                "status": "completed",
            }
        )
    return Reply("responses", _responses_body(output, model, usage))


def responses_refusal(
    refusal: str = "I'm sorry, I can't help with that.",
    *,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """A ``Response`` whose assistant message holds a ``refusal`` content part."""
    part = {"type": "refusal", "refusal": refusal}
    return Reply("responses", _responses_body([_output_message([part])], model, usage))


def responses_error(status: int, message: str = "scripted error", **details: str | None) -> Reply:
    """An OpenAI error body with ``status`` for the Responses API: ``chat_error``'s (the same
    ``type``, ``code`` and ``param`` keywords), sent on the Responses route."""
    return replace(chat_error(status, message, **details), api="responses")


# ---- reply builders: Anthropic Messages --------------------------------------------------


def messages_usage(
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
) -> dict[str, Any]:
    """An Anthropic ``Usage``; the cache counts appear only when given."""
    return _given(
        {"input_tokens": input_tokens, "output_tokens": output_tokens},
        cache_read_input_tokens=cache_read_input_tokens,
        cache_creation_input_tokens=cache_creation_input_tokens,
    )


def _message_body(
    content: list[dict[str, Any]],
    stop_reason: str,
    model: str | None,
    usage: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return {
        "id": None,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage) if usage is not None else messages_usage(),
    }


def messages_text(
    text: str,
    *,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence"] = "end_turn",
) -> Reply:
    """An Anthropic ``Message`` with one ``text`` block."""
    block = {"type": "text", "text": text}
    return Reply("messages", _message_body([block], stop_reason, model, usage))


def messages_tool_use(
    *calls: ToolCall,
    text: str | None = None,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """An Anthropic ``Message`` with a ``tool_use`` block per call (``stop_reason="tool_use"``)."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    for call in calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.id or _new_id("toolu_"),
                "name": call.name,
                "input": dict(call.arguments),
            }
        )
    return Reply("messages", _message_body(content, "tool_use", model, usage))


def messages_refusal(
    text: str = "",
    *,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """An Anthropic ``Message`` stopped with ``stop_reason="refusal"`` (``text``: any partial
    output before the refusal; empty by default, so ``content`` is ``[]``)."""
    content = [{"type": "text", "text": text}] if text else []
    body = _message_body(content, "refusal", model, usage)
    body["stop_details"] = {"type": "refusal", "category": None, "explanation": None}
    return Reply("messages", body)


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
"""An Anthropic error's ``type`` by status."""


def messages_error(
    status: int, message: str = "scripted error", *, type: str | None = None
) -> Reply:
    """An Anthropic error body with ``status``: 400 raises ``anthropic.BadRequestError``, 429
    ``RateLimitError``, 500 ``InternalServerError``, 529 ``OverloadedError`` and so on."""
    default_type = _by_status(status, _ANTHROPIC_ERRORS, "api_error", "invalid_request_error")
    body = {
        "type": "error",
        "error": {"type": type or default_type, "message": message},
        "request_id": _new_id("req_"),
    }
    return Reply("messages", body, status=status)


# ---- reply builders: Google Gemini (generateContent, REST JSON in camelCase) -------------

_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def gemini_usage(
    prompt_tokens: int = 10,
    candidates_tokens: int = 5,
    *,
    cached_tokens: int | None = None,
    thoughts_tokens: int | None = None,
    tool_use_prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """A ``usageMetadata``: the cached count is part of the prompt count, the thoughts and
    tool-use counts are not (the total adds them); the optional counts appear only when given."""
    total = prompt_tokens + candidates_tokens + (thoughts_tokens or 0)
    total += tool_use_prompt_tokens or 0
    return _given(
        {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": candidates_tokens,
            "totalTokenCount": total,
        },
        cachedContentTokenCount=cached_tokens,
        thoughtsTokenCount=thoughts_tokens,
        toolUsePromptTokenCount=tool_use_prompt_tokens,
    )


def _gemini_body(
    parts: list[dict[str, Any]],
    finish_reason: str,
    model: str | None,
    usage: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": parts, "role": "model"},
                "finishReason": finish_reason,
                "index": 0,
            }
        ],
        "usageMetadata": dict(usage) if usage is not None else gemini_usage(),
        "modelVersion": model,
        "responseId": None,
    }


def gemini_text(
    text: str,
    *,
    thought: str | None = None,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
    finish_reason: str = "STOP",
) -> Reply:
    """A ``GenerateContentResponse`` whose candidate says ``text`` (after a ``thought`` part)."""
    parts: list[dict[str, Any]] = []
    if thought is not None:
        parts.append({"text": thought, "thought": True})
    parts.append({"text": text})
    return Reply("gemini", _gemini_body(parts, finish_reason, model, usage))


def gemini_function_calls(
    *calls: ToolCall,
    text: str | None = None,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """A ``GenerateContentResponse`` with a ``functionCall`` part per call (finish ``STOP``, as
    Gemini sends it); a call's ``id`` is sent only when given."""
    parts: list[dict[str, Any]] = [{"text": text}] if text is not None else []
    for call in calls:
        function_call: dict[str, Any] = {"name": call.name, "args": dict(call.arguments)}
        if call.id is not None:
            function_call["id"] = call.id
        parts.append({"functionCall": function_call})
    return Reply("gemini", _gemini_body(parts, "STOP", model, usage))


def gemini_blocked(
    reason: str = "SAFETY",
    *,
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Reply:
    """A prompt blocked before any candidate: ``promptFeedback.blockReason``, no candidates."""
    body = {
        "promptFeedback": {
            "blockReason": reason,
            "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
            ],
        },
        "usageMetadata": dict(usage) if usage is not None else {"promptTokenCount": 8},
        "modelVersion": model,
        "responseId": None,
    }
    return Reply("gemini", body)


def gemini_error(
    status: int, message: str = "scripted error", *, reason: str | None = None
) -> Reply:
    """A Google API error body with ``status``: 4xx raises ``google.genai.errors.ClientError``,
    5xx ``ServerError``; ``reason`` is the ``status`` string (``INVALID_ARGUMENT``, ...)."""
    name = reason or _by_status(status, _GEMINI_STATUS, "INTERNAL", "FAILED_PRECONDITION")
    return Reply("gemini", {"error": {"code": status, "message": message, "status": name}}, status)


# ---- reply builders: AWS Bedrock Converse ------------------------------------------------


def converse_usage(
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_read_input_tokens: int | None = None,
    cache_write_input_tokens: int | None = None,
) -> dict[str, Any]:
    """A Converse ``usage``: the cache counts are next to ``inputTokens`` (the total adds them)
    and appear only when given."""
    usage = _given(
        {"inputTokens": input_tokens, "outputTokens": output_tokens},
        cacheReadInputTokens=cache_read_input_tokens,
        cacheWriteInputTokens=cache_write_input_tokens,
    )
    usage["totalTokens"] = sum(usage.values())
    return usage


def _converse_body(
    content: list[dict[str, Any]], stop_reason: str, usage: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": dict(usage) if usage is not None else converse_usage(),
        "metrics": {"latencyMs": 42},
    }


def converse_text(
    text: str,
    *,
    reasoning: str | None = None,
    usage: Mapping[str, Any] | None = None,
    stop_reason: str = "end_turn",
) -> Reply:
    """A Converse response whose message says ``text`` (after a ``reasoningContent`` block);
    ``stop_reason`` may be ``max_tokens``, ``guardrail_intervened``, ``content_filtered``, ..."""
    content: list[dict[str, Any]] = []
    if reasoning is not None:
        content.append(
            {"reasoningContent": {"reasoningText": {"text": reasoning, "signature": "sig"}}}
        )
    content.append({"text": text})
    return Reply("converse", _converse_body(content, stop_reason, usage))


def converse_tool_use(
    *calls: ToolCall, text: str | None = None, usage: Mapping[str, Any] | None = None
) -> Reply:
    """A Converse response with a ``toolUse`` block per call (``stopReason="tool_use"``)."""
    content: list[dict[str, Any]] = [{"text": text}] if text is not None else []
    for call in calls:
        content.append(
            {
                "toolUse": {
                    "toolUseId": call.id or _new_id("tooluse_"),
                    "name": call.name,
                    "input": dict(call.arguments),
                }
            }
        )
    return Reply("converse", _converse_body(content, "tool_use", usage))


_BEDROCK_ERRORS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}
"""A Bedrock error's modeled exception by status."""


def converse_error(
    status: int, message: str = "scripted error", *, type: str | None = None
) -> Reply:
    """A Bedrock error with ``status``: boto3 raises the modeled exception named by ``type``
    (``ValidationException`` for 400, ``ThrottlingException`` for 429, ...) as a ``ClientError``."""
    name = type or _by_status(
        status, _BEDROCK_ERRORS, "InternalServerException", "ValidationException"
    )
    return Reply("converse", {"message": message}, status, headers={"x-amzn-ErrorType": name})


def _given(fields: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``fields`` and each of ``optional`` whose value is not ``None`` (a count given)."""
    return {**fields, **{name: value for name, value in optional.items() if value is not None}}


def _by_status(status: int, known: Mapping[int, Any], server: Any, client: Any) -> Any:
    """What ``known`` says for ``status``; else ``server`` for a 5xx, ``client`` otherwise."""
    return known.get(status, server if status >= 500 else client)


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]
