"""Google Gemini adapter (``google-genai``): ``client.models.generate_content``.

Adapter (``chronicle.llm.canonical.LlmAdapter``): ``GEMINI_GENERATE_CONTENT``, provider
``google`` (the Gemini API and Vertex AI alike), for the sync and the ``client.aio`` forms.

The raw forms: the input is the call's arguments by name (``model``, ``contents``, ``config``) as
JSON, the output the JSON of the ``GenerateContentResponse``. The SDK takes both its Python field
names (``system_instruction``) and the REST names (``systemInstruction``) in dicts, and its own
models dump with the Python names, so every key is read in either spelling.

Conventions (on top of those in ``chronicle.llm.canonical``):

- ``contents`` as messages, grouped as the SDK groups them: a string is one user message; a
  content (``role`` and ``parts``) is one message, ``user`` or ``model`` (``assistant``), user
  when no role is given; loose parts in a list (strings, part objects) are gathered into one
  message per run of consecutive parts, ``assistant`` for a run of function calls, else
  ``user``; a list inside the list is one user message.
- Parts: ``text`` is a ``text`` block (a ``thought: true`` text part is ``reasoning``),
  ``function_call`` a ``tool_call`` (its ``id`` when it has one; ``args``). A
  ``function_response`` part becomes a separate ``tool`` message in place (``tool_call_id`` its
  ``id``, else ``None``; content its ``response`` as JSON text), the message's other parts staying
  in messages around it. Inline data, files, executable code and other parts are skipped.
- ``system`` is ``config.system_instruction`` (a string, a content, or parts): its text parts
  joined with newlines.
- ``tools``: each function declaration is ``{name, description?, parameters?}`` (``parameters``,
  else ``parameters_json_schema``); a built-in tool (``google_search``, ``code_execution``, ...)
  is named by its key; a Python function given as a tool (recorded as its ``repr``) is skipped.
- ``tool_choice`` from ``config.tool_config.function_calling_config.mode``: ``AUTO`` and
  ``VALIDATED`` are ``auto``, ``NONE`` ``none``, ``ANY`` ``required`` (``{"name": X}`` when it
  allows exactly one function).
- Params: ``temperature``, ``top_p``, ``max_output_tokens``, ``seed``, ``stop_sequences``.
  ``response_format`` is ``{response_mime_type?, response_schema? | response_json_schema?}`` as
  given, when any of them is set.
- Output: the first candidate's parts. Finish reason: ``STOP`` is ``stop`` (``tool_calls`` when
  the candidate holds a function call), ``MAX_TOKENS`` ``length``, the safety, recitation,
  blocklist, prohibited-content, SPII and Model Armor reasons ``content_filter``, anything else
  ``other``; a prompt blocked before any candidate (``prompt_feedback.block_reason``) is
  ``content_filter`` with no content.
- Usage: ``prompt_token_count`` includes ``cached_content_token_count``; the candidates count
  leaves out ``thoughts_token_count`` and the tool-use prompt count is reported beside the
  prompt. So ``input`` = prompt + tool-use prompt - cached, ``cached_read`` = cached,
  ``output`` = candidates, ``reasoning`` = thoughts, ``cache_write`` = 0.
- The served model is ``model_version``; ``response_id`` is the response's id.

``compact_arguments`` and ``response_json`` give the raw forms Chronicle records for the SDK's
pydantic objects (no ``None`` fields, no ``sdk_http_response`` transport headers).

Streams (``generate_content_stream``): each chunk is a ``GenerateContentResponse``;
``chunk_json`` is a chunk's recorded form; ``chronicle.llm.gemini_streams`` folds the chunks into
the response a plain call returns (and back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from agentplane_primitives.enums import FinishReason, MessageRole
from agentplane_primitives.models import (
    ContentBlock,
    LlmInput,
    LlmOutput,
    LlmParams,
    Message,
    ReasoningBlock,
    TextBlock,
    Usage,
)
from pydantic import BaseModel, JsonValue

from chronicle.llm.canonical import (
    BaseAdapter,
    build_input,
    build_output,
    inclusive_usage,
    map_finish_reason,
    read_blocks,
    reported_sum,
    stop_sequences,
    token_limit,
    tool_call_block,
    tool_results_apart,
)
from chronicle.llm.lenient import as_float, as_int, as_list, as_map, as_str, nonempty_str

__all__ = [
    "FINISH_REASONS",
    "GEMINI_GENERATE_CONTENT",
    "GeminiGenerateContentAdapter",
    "chunk_json",
    "compact_arguments",
    "gemini_usage",
    "read_contents",
    "response_json",
]

FINISH_REASONS: Mapping[str, FinishReason] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "IMAGE_RECITATION": FinishReason.CONTENT_FILTER,
    "MODEL_ARMOR": FinishReason.CONTENT_FILTER,
}

_ROLES: Mapping[str, MessageRole] = {"user": MessageRole.USER, "model": MessageRole.ASSISTANT}
_TOOL_CHOICE: Mapping[str, JsonValue] = {
    "AUTO": "auto",
    "VALIDATED": "auto",
    "NONE": "none",
    "ANY": "required",
}
_PART_KEYS = frozenset(
    {
        "text",
        "thought",
        "thought_signature",
        "function_call",
        "function_response",
        "inline_data",
        "file_data",
        "executable_code",
        "code_execution_result",
        "video_metadata",
        "media_resolution",
        "tool_call",
        "tool_response",
        "part_metadata",
    }
)


# --------------------------------------------------------------------------------------------
# Raw forms


def compact_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """The call's arguments with each SDK pydantic object dumped without its ``None`` fields, and
    the config's per-request transport options (``http_options``) left out.

    A model that cannot be dumped to JSON (a config holding a Python function as a tool) is
    dumped as Python values, for the recorder's JSON form to handle what is left (the function
    is recorded as its ``repr``, and the input flagged lossy).
    """
    compacted = {key: _compact(value) for key, value in arguments.items()}
    config = compacted.get("config")
    if isinstance(config, Mapping) and ("http_options" in config or "httpOptions" in config):
        compacted["config"] = {
            key: value
            for key, value in config.items()
            if key not in ("http_options", "httpOptions")
        }
    return compacted


def _compact(value: object) -> object:
    if isinstance(value, BaseModel):
        try:
            return value.model_dump(mode="json", exclude_none=True)
        except Exception:
            try:
                return value.model_dump(exclude_none=True)
            except Exception:
                return value
    if isinstance(value, list):
        return [_compact(item) for item in value]
    return value


def response_json(result: object) -> object:
    """A ``GenerateContentResponse`` as JSON, without ``None`` fields and transport headers
    (``sdk_http_response``); anything else unchanged."""
    if isinstance(result, BaseModel):
        try:
            return result.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
        except Exception:
            return result
    return result


def chunk_json(chunk: object) -> JsonValue | None:
    """A streamed ``GenerateContentResponse`` chunk as recorded: the fields the SDK set from what
    the server sent, without the transport headers (``sdk_http_response``); ``None`` if it is
    not a pydantic model. (A chunk rebuilt from it has the same fields set.)"""
    if not isinstance(chunk, BaseModel):
        return None
    value: JsonValue = type(chunk).__pydantic_serializer__.to_python(
        chunk, mode="json", exclude_unset=True, exclude={"sdk_http_response"}
    )
    return value


# --------------------------------------------------------------------------------------------
# Reading either spelling


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _get(item: Mapping[str, JsonValue], name: str) -> JsonValue:
    """``item[name]``, else ``item[<name in camelCase>]``, else ``None``."""
    value = item.get(name)
    return value if value is not None else item.get(_camel(name))


def snake_case(name: str) -> str:
    """A camelCase field name (as Gemini's REST JSON spells it) in snake_case, as the SDK does."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


_ANY_PART_KEY = _PART_KEYS | {_camel(key) for key in _PART_KEYS}


# --------------------------------------------------------------------------------------------
# Input


def _is_content(item: Mapping[str, JsonValue]) -> bool:
    return "parts" in item or "role" in item


def _is_function_call(part: JsonValue) -> bool:
    spec = as_map(part)
    return spec is not None and as_map(_get(spec, "function_call")) is not None


def _part_block(part: JsonValue) -> ContentBlock | None:
    if isinstance(part, str):
        return TextBlock(text=part)
    spec = as_map(part)
    if spec is None:
        return None
    call = as_map(_get(spec, "function_call"))
    if call is not None:
        return tool_call_block(call.get("id"), call.get("name"), call.get("args"))
    text = as_str(spec.get("text"))
    if text is None:
        return None
    if spec.get("thought") is True:
        return ReasoningBlock(text=text) if text else None
    return TextBlock(text=text)


def _tool_message(part: JsonValue) -> Message | None:
    """A ``function_response`` part as the ``tool`` message it answers, else ``None``."""
    spec = as_map(part)
    response = as_map(_get(spec, "function_response")) if spec is not None else None
    if response is None:
        return None
    body = response.get("response")
    content = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, default=str)
    return Message(
        role=MessageRole.TOOL, content=content, tool_call_id=nonempty_str(response.get("id"))
    )


def _messages_of(role: MessageRole, parts: Sequence[JsonValue]) -> list[Message]:
    """One content's parts as messages: function responses moved out into ``tool`` messages."""
    return tool_results_apart(role, parts, _part_block, _tool_message)


def _content_messages(content: Mapping[str, JsonValue]) -> list[Message]:
    role = _ROLES.get(as_str(content.get("role")) or "user")
    if role is None:
        return []
    parts = as_list(content.get("parts"))
    return _messages_of(role, parts if parts is not None else [])


def _loose_role(parts: Sequence[JsonValue]) -> MessageRole:
    if parts and all(_is_function_call(part) for part in parts):
        return MessageRole.ASSISTANT
    return MessageRole.USER


def read_contents(contents: JsonValue) -> list[Message]:
    """``contents`` (any form the SDK takes, as JSON) as canonical messages."""
    if isinstance(contents, str):
        return [Message(role=MessageRole.USER, content=contents)]
    single = as_map(contents)
    if single is not None:
        if _is_content(single):
            return _content_messages(single)
        return _messages_of(_loose_role([contents]), [contents])
    items = as_list(contents)
    if items is None:
        return []
    messages: list[Message] = []
    run: list[JsonValue] = []

    def close_run() -> None:
        if run:
            messages.extend(_messages_of(_loose_role(run), run))
            run.clear()

    for item in items:
        nested = as_list(item)
        spec = as_map(item)
        if nested is not None:
            close_run()
            messages.extend(_messages_of(MessageRole.USER, nested))
        elif spec is not None and _is_content(spec):
            close_run()
            messages.extend(_content_messages(spec))
        elif isinstance(item, str) or (spec is not None and spec.keys() & _ANY_PART_KEY):
            if run and _is_function_call(item) != _is_function_call(run[0]):
                close_run()
            run.append(item)
    close_run()
    return messages


def _text_of(value: JsonValue) -> str | None:
    """The text of a system instruction: a string, a content, a part, or a list of parts."""
    if isinstance(value, str):
        return value
    spec = as_map(value)
    if spec is not None:
        if _is_content(spec):
            return _text_of(spec.get("parts"))
        return as_str(spec.get("text"))
    items = as_list(value)
    if not items:
        return None
    texts = [_text_of(item) for item in items]
    kept = [text for text in texts if text is not None]
    return "\n".join(kept) if kept else None


def _tools(value: JsonValue) -> list[dict[str, JsonValue]] | None:
    items = as_list(value)
    if items is None:
        return None
    tools: list[dict[str, JsonValue]] = []
    for item in items:
        spec = as_map(item)
        if spec is None:
            continue  # a Python function given as a tool, recorded as its repr
        declarations = as_list(_get(spec, "function_declarations"))
        if declarations is not None:
            for declaration in declarations:
                tool = _declaration(declaration)
                if tool is not None:
                    tools.append(tool)
        for key, setting in spec.items():
            name = snake_case(key)
            if name != "function_declarations" and setting is not None:
                tools.append({"name": name})  # a built-in tool: {"google_search": {}}
    return tools


def _declaration(value: JsonValue) -> dict[str, JsonValue] | None:
    spec = as_map(value)
    name = nonempty_str(spec.get("name")) if spec is not None else None
    if spec is None or name is None:
        return None
    tool: dict[str, JsonValue] = {"name": name}
    description = as_str(spec.get("description"))
    if description is not None:
        tool["description"] = description
    parameters = _get(spec, "parameters")
    if parameters is None:
        parameters = _get(spec, "parameters_json_schema")
    if parameters is not None:
        tool["parameters"] = parameters
    return tool


def _tool_choice(config: Mapping[str, JsonValue]) -> JsonValue:
    tool_config = as_map(_get(config, "tool_config")) or {}
    calling = as_map(_get(tool_config, "function_calling_config")) or {}
    mode = as_str(calling.get("mode"))
    choice = _TOOL_CHOICE.get(mode.upper()) if mode is not None else None
    allowed = as_list(_get(calling, "allowed_function_names"))
    if choice == "required" and allowed is not None and len(allowed) == 1:
        name = nonempty_str(allowed[0])
        if name is not None:
            return {"name": name}
    return choice


def _response_format(config: Mapping[str, JsonValue]) -> dict[str, JsonValue] | None:
    found: dict[str, JsonValue] = {}
    for key in ("response_mime_type", "response_schema", "response_json_schema"):
        value = _get(config, key)
        if value is not None:
            found[key] = value
    return found or None


def _params(config: Mapping[str, JsonValue]) -> LlmParams:
    return LlmParams(
        temperature=as_float(config.get("temperature")),
        top_p=as_float(_get(config, "top_p")),
        max_tokens=token_limit(_get(config, "max_output_tokens")),
        seed=as_int(config.get("seed")),
        stop=stop_sequences(_get(config, "stop_sequences")),
    )


# --------------------------------------------------------------------------------------------
# Output


def gemini_usage(value: JsonValue) -> Usage | None:
    """``usage_metadata`` as exclusive buckets (see the module docstring)."""
    usage = as_map(value)
    if usage is None:
        return None
    prompt = as_int(_get(usage, "prompt_token_count"))
    tool_use = as_int(_get(usage, "tool_use_prompt_token_count"))
    candidates = as_int(_get(usage, "candidates_token_count"))
    thoughts = as_int(_get(usage, "thoughts_token_count"))
    return inclusive_usage(
        input_total=reported_sum((prompt, tool_use)),
        cached_read=as_int(_get(usage, "cached_content_token_count")),
        output_total=reported_sum((candidates, thoughts)),
        reasoning=thoughts,
    )


def _candidate_output(
    response: Mapping[str, JsonValue], llm_input: LlmInput, provider: str
) -> LlmOutput:
    candidates = as_list(response.get("candidates")) or []
    first = as_map(candidates[0]) if candidates else None
    content: list[ContentBlock] = []
    finish: FinishReason | None = None
    if first is not None:
        parts = as_list((as_map(first.get("content")) or {}).get("parts")) or []
        content = read_blocks(parts, _part_block)
        finish = map_finish_reason(_get(first, "finish_reason"), FINISH_REASONS)
        if finish is FinishReason.STOP and any(block.type == "tool_call" for block in content):
            finish = FinishReason.TOOL_CALLS
    else:
        feedback = as_map(_get(response, "prompt_feedback")) or {}
        if _get(feedback, "block_reason") is not None:
            finish = FinishReason.CONTENT_FILTER
    return build_output(
        dict(response),
        llm_input,
        provider=provider,
        content=content,
        finish_reason=finish,
        served_model=nonempty_str(_get(response, "model_version")),
        usage=gemini_usage(_get(response, "usage_metadata")),
        response_id=nonempty_str(_get(response, "response_id")),
    )


class GeminiGenerateContentAdapter(BaseAdapter):
    """``models.generate_content``; see the module docstring."""

    def __init__(self, provider: str = "google") -> None:
        super().__init__("google.generate_content", provider)

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        config = as_map(raw.get("config")) or {}
        return build_input(
            raw,
            messages=read_contents(raw.get("contents")),
            system=_text_of(_get(config, "system_instruction")),
            tools=_tools(config.get("tools")),
            tool_choice=_tool_choice(config),
            response_format=_response_format(config),
            params=_params(config),
        )

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        response = as_map(raw)
        if response is None:
            return build_output(raw, llm_input, provider=self.provider)
        return _candidate_output(response, llm_input, self.provider)


GEMINI_GENERATE_CONTENT = GeminiGenerateContentAdapter()
"""``client.models.generate_content`` / ``client.aio.models.generate_content``."""
