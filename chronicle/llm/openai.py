"""OpenAI Chat Completions and Responses API adapters, also for Azure OpenAI (the same shapes).

Adapters (``chronicle.llm.canonical.LlmAdapter``):

- ``OPENAI_CHAT``: ``client.chat.completions.create(...)``, provider ``openai``.
- ``OPENAI_RESPONSES``: ``client.responses.create(...)``, provider ``openai``.
- ``AZURE_CHAT`` and ``AZURE_RESPONSES``: the same calls on an Azure OpenAI client, provider
  ``azure``; the requested ``model`` is the Azure deployment and is also recorded as
  ``deployment_id``. For a client built with ``azure_deployment`` (the URL names the deployment,
  whatever ``model`` says), ``chronicle.wrap`` builds the adapter with ``deployment=`` that name.

Chat Completions conventions:

- ``system``/``developer`` messages stay in ``messages`` as ``role="system"`` and ``system`` is
  ``None`` (there is no separate instructions parameter). ``tool`` messages become ``tool``
  messages with ``tool_call_id``; legacy ``function`` messages become ``tool`` messages without
  one. An assistant message's ``tool_calls`` (and legacy ``function_call``) become ``tool_call``
  blocks, its ``refusal`` a ``refusal`` block, and an OpenAI-compatible ``reasoning_content`` or
  ``reasoning`` string a ``reasoning`` block (first).
- The output is read from the first choice (``n > 1`` choices are in ``raw``). Audio output
  (``message.audio``) and annotations have no canonical block; ``raw`` keeps them.
- Usage: ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens`` (and, when the API
  reports it, ``cache_write_tokens``); ``completion_tokens`` includes
  ``completion_tokens_details.reasoning_tokens``. So ``input = prompt - cached - cache_write``,
  ``output = completion - reasoning``.
- ``max_completion_tokens`` (else ``max_tokens``) is ``params.max_tokens``; legacy ``functions``
  and ``function_call`` are read as ``tools`` and ``tool_choice`` when those are not given.

Responses conventions:

- ``instructions`` is ``system``. ``input`` as a string is one user message; as a list, message
  items keep their role (``developer`` is ``system``), ``function_call`` items are ``tool_call``
  blocks of an assistant message, ``reasoning`` items ``reasoning`` blocks (the summary text, else
  the reasoning text), and ``function_call_output`` items ``tool`` messages. Consecutive
  assistant-side items (an output message, reasoning, function calls) form one assistant message,
  as one model turn. Other item types (hosted tool calls, references) are skipped.
- A tool call's id is the ``call_id`` (what ``function_call_output`` answers), not the item id.
- Finish reason: ``completed`` is ``stop``, or ``tool_calls`` when the output has a function call;
  ``incomplete`` follows ``incomplete_details.reason`` (``max_output_tokens`` is ``length``,
  ``content_filter`` is ``content_filter``, anything else ``other``); ``failed`` and
  ``cancelled`` are ``other``; ``queued`` and ``in_progress`` (not finished) are ``None``.
- ``max_output_tokens`` is ``params.max_tokens``; ``text.format`` is ``response_format``.

Streams (``stream=True``, the ``.stream(...)`` helpers) are folded into what a plain call returns
(and back) by ``chronicle.llm.openai_streams``.
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
    RefusalBlock,
    TextBlock,
    Usage,
)
from pydantic import JsonValue

from chronicle.llm.canonical import (
    BaseAdapter,
    build_input,
    build_output,
    content_value,
    inclusive_usage,
    map_finish_reason,
    normalize_tool_choice,
    normalize_tools,
    read_params,
    tool_call_block,
    with_roles,
)
from chronicle.llm.lenient import as_int, as_list, as_map, as_str, nonempty_str

CHAT_FINISH_REASONS: Mapping[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
}

_ROLES: Mapping[str, MessageRole] = {
    "system": MessageRole.SYSTEM,
    "developer": MessageRole.SYSTEM,
    "user": MessageRole.USER,
    "assistant": MessageRole.ASSISTANT,
    "tool": MessageRole.TOOL,
    "function": MessageRole.TOOL,
}


# --------------------------------------------------------------------------------------------
# Chat Completions


def assistant_blocks(message: Mapping[str, JsonValue]) -> list[ContentBlock]:
    """The blocks of an assistant chat message: reasoning, text, refusal, then tool calls."""
    blocks: list[ContentBlock] = []
    for key in ("reasoning_content", "reasoning"):
        reasoning = nonempty_str(message.get(key))
        if reasoning is not None:
            blocks.append(ReasoningBlock(text=reasoning))
            break
    content = message.get("content")
    if isinstance(content, str):
        if content:
            blocks.append(TextBlock(text=content))
    elif isinstance(content, list):
        value = content_value(content)
        if isinstance(value, list):
            blocks.extend(value)
    refusal = nonempty_str(message.get("refusal"))
    if refusal is not None:
        blocks.append(RefusalBlock(text=refusal))
    for call in as_list(message.get("tool_calls")) or ():
        block = _chat_tool_call(call)
        if block is not None:
            blocks.append(block)
    legacy = as_map(message.get("function_call"))
    if legacy is not None:
        block = tool_call_block(None, legacy.get("name"), legacy.get("arguments"))
        if block is not None:
            blocks.append(block)
    return blocks


def _chat_tool_call(call: JsonValue) -> ContentBlock | None:
    spec = as_map(call)
    if spec is None:
        return None
    function = as_map(spec.get("function"))
    if function is not None:
        return tool_call_block(spec.get("id"), function.get("name"), function.get("arguments"))
    custom = as_map(spec.get("custom"))
    if custom is not None:
        return tool_call_block(spec.get("id"), custom.get("name"), custom.get("input"))
    return None


_ASSISTANT, _TOOL = MessageRole.ASSISTANT, MessageRole.TOOL
"""Bound once: an enum member lookup costs a descriptor call, and this runs per message."""


def read_chat_messages(messages: Sequence[JsonValue]) -> list[Message]:
    """Chat Completions ``messages`` as canonical messages (see the module docstring)."""
    result: list[Message] = []
    for message, role in with_roles(messages, _ROLES):
        if role is _ASSISTANT:
            result.append(Message(role=role, content=_assistant_content(message)))
        elif role is _TOOL:
            result.append(
                Message(
                    role=role,
                    content=content_value(message.get("content")),
                    tool_call_id=nonempty_str(message.get("tool_call_id")),
                )
            )
        else:
            result.append(Message(role=role, content=content_value(message.get("content"))))
    return result


def _assistant_content(message: Mapping[str, JsonValue]) -> str | list[ContentBlock]:
    content = message.get("content")
    if (
        isinstance(content, str)
        and message.get("tool_calls") is None
        and message.get("function_call") is None
        and nonempty_str(message.get("reasoning_content")) is None
        and nonempty_str(message.get("reasoning")) is None
        and nonempty_str(message.get("refusal")) is None
    ):
        return content  # plain text only (the common case), without building its blocks
    blocks = assistant_blocks(message)
    if isinstance(content, str) and blocks == ([TextBlock(text=content)] if content else []):
        return content  # plain text only: keep the string form
    if content is None and not blocks:
        return ""
    return blocks


def chat_usage(value: JsonValue) -> Usage | None:
    """Chat Completions ``usage`` as exclusive buckets (cached and reasoning are inside totals)."""
    return openai_usage(value, "prompt", "completion")


def openai_usage(
    value: JsonValue, input_word: str, output_word: str, *, litellm: bool = False
) -> Usage | None:
    """OpenAI-shaped ``usage`` as exclusive buckets: ``{input_word}_tokens`` and
    ``{output_word}_tokens`` are totals that include ``{input_word}_tokens_details``'s
    ``cached_tokens`` and ``cache_write_tokens`` and ``{output_word}_tokens_details``'s
    ``reasoning_tokens``. With ``litellm``, LiteLLM's ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` beside the totals come first, and a detail's
    ``cache_creation_tokens`` is a cache write too (``chronicle.llm.litellm``)."""
    usage = as_map(value)
    if usage is None:
        return None
    details = as_map(usage.get(f"{input_word}_tokens_details")) or {}
    output_details = as_map(usage.get(f"{output_word}_tokens_details")) or {}
    cached = [details.get("cached_tokens")]
    written = [details.get("cache_write_tokens")]
    if litellm:
        cached.insert(0, usage.get("cache_read_input_tokens"))
        written[:0] = (
            usage.get("cache_creation_input_tokens"),
            details.get("cache_creation_tokens"),
        )
    return inclusive_usage(
        input_total=as_int(usage.get(f"{input_word}_tokens")),
        cached_read=_first_int(cached),
        cache_write=_first_int(written),
        output_total=as_int(usage.get(f"{output_word}_tokens")),
        reasoning=as_int(output_details.get("reasoning_tokens")),
    )


def _first_int(values: list[JsonValue]) -> int | None:
    return next((n for n in map(as_int, values) if n is not None), None)


def first_choice(response: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    """The choice with index 0 (else the first one) of a ChatCompletion, or ``{}``."""
    choices = [c for c in as_list(response.get("choices")) or () if as_map(c) is not None]
    for choice in choices:
        mapped = as_map(choice)
        if mapped is not None and as_int(mapped.get("index")) == 0:
            return mapped
    if not choices:
        return {}
    return as_map(choices[0]) or {}


def chat_output(
    response: Mapping[str, JsonValue],
    llm_input: LlmInput,
    provider: str,
    *,
    deployment_id: str | None = None,
    usage: Usage | None = None,
    raw: JsonValue = None,
) -> LlmOutput:
    """A ChatCompletion (as JSON) as an ``LlmOutput`` recorded for ``provider``.

    ``usage`` replaces the usage read from ``response`` (LiteLLM reads its own); ``raw``
    defaults to ``response``.
    """
    choice = first_choice(response)
    message = as_map(choice.get("message")) or {}
    return build_output(
        dict(response) if raw is None else raw,
        llm_input,
        provider=provider,
        content=assistant_blocks(message),
        finish_reason=map_finish_reason(choice.get("finish_reason"), CHAT_FINISH_REASONS),
        served_model=nonempty_str(response.get("model")),
        usage=usage if usage is not None else chat_usage(response.get("usage")),
        response_id=nonempty_str(response.get("id")),
        deployment_id=deployment_id,
    )


def chat_input(raw: Mapping[str, JsonValue]) -> LlmInput:
    """Chat Completions arguments (also LiteLLM's) as an ``LlmInput``."""
    messages = as_list(raw.get("messages"))
    tools = raw.get("tools") if raw.get("tools") is not None else raw.get("functions")
    choice = raw.get("tool_choice")
    if choice is None:
        choice = raw.get("function_call")
    return build_input(
        raw,
        messages=read_chat_messages(messages) if messages is not None else [],
        tools=normalize_tools(tools),
        tool_choice=normalize_tool_choice(choice),
        response_format=as_map(raw.get("response_format")),
        params=read_params(raw, max_tokens_keys=("max_completion_tokens", "max_tokens")),
    )


class _OpenAIAdapter(BaseAdapter):
    """What the two OpenAI APIs' adapters share: the name (``<provider>.<api>``), and for Azure
    the deployment recorded as ``deployment_id`` (the client's fixed one, else the requested
    ``model``); ``_response`` reads a response the API returned."""

    api = ""

    def __init__(
        self,
        provider: str = "openai",
        *,
        name: str | None = None,
        azure: bool = False,
        deployment: str | None = None,
    ) -> None:
        super().__init__(name or f"{provider}.{self.api}", provider)
        self._azure = azure
        self._deployment = deployment

    def _response(
        self, response: Mapping[str, JsonValue], llm_input: LlmInput, deployment: str | None
    ) -> LlmOutput:
        raise NotImplementedError

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        response = as_map(raw)
        deployment = None
        if self._azure:
            deployment = self._deployment or nonempty_str(llm_input.raw.get("model"))
        if response is None:
            return build_output(raw, llm_input, provider=self.provider, deployment_id=deployment)
        return self._response(response, llm_input, deployment)


class OpenAIChatAdapter(_OpenAIAdapter):
    """Chat Completions (``chat.completions.create``); see the module docstring."""

    api = "chat"

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        return chat_input(raw)

    def _response(
        self, response: Mapping[str, JsonValue], llm_input: LlmInput, deployment: str | None
    ) -> LlmOutput:
        return chat_output(response, llm_input, self.provider, deployment_id=deployment)


# --------------------------------------------------------------------------------------------
# Responses API


def _reasoning_blocks(item: Mapping[str, JsonValue]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for key in ("summary", "content"):
        for part in as_list(item.get(key)) or ():
            text = as_str((as_map(part) or {}).get("text"))
            if text:
                blocks.append(ReasoningBlock(text=text))
        if blocks:
            break
    return blocks


def _item_tool_call(item: Mapping[str, JsonValue]) -> ContentBlock | None:
    kind = item.get("type")
    call_id = item.get("call_id") if item.get("call_id") is not None else item.get("id")
    if kind == "function_call":
        return tool_call_block(call_id, item.get("name"), item.get("arguments"))
    if kind == "custom_tool_call":
        return tool_call_block(call_id, item.get("name"), item.get("input"))
    return None


def read_responses_input(value: JsonValue) -> list[Message]:
    """Responses ``input`` (a string or a list of items) as canonical messages."""
    if isinstance(value, str):
        return [Message(role=MessageRole.USER, content=value)]
    items = as_list(value)
    if items is None:
        return []
    # (role, content, tool_call_id); an assistant turn's block list grows while items join it.
    drafts: list[tuple[MessageRole, str | list[ContentBlock], str | None]] = []
    turn: list[ContentBlock] | None = None

    def join_turn(blocks: list[ContentBlock]) -> None:
        nonlocal turn
        if turn is None:
            turn = []
            drafts.append((MessageRole.ASSISTANT, turn, None))
        turn.extend(blocks)

    for raw_item in items:
        item = as_map(raw_item)
        if item is None:
            continue
        kind = as_str(item.get("type"))
        role = _ROLES.get(as_str(item.get("role")) or "")
        if kind in (None, "message") and role is not None and role is not MessageRole.TOOL:
            content = content_value(item.get("content"))
            if role is MessageRole.ASSISTANT and isinstance(content, list):
                join_turn(content)
            else:
                turn = None
                drafts.append((role, content, None))
        elif kind in ("function_call", "custom_tool_call"):
            block = _item_tool_call(item)
            if block is not None:
                join_turn([block])
        elif kind == "reasoning":
            blocks = _reasoning_blocks(item)
            if blocks:
                join_turn(blocks)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            turn = None
            call_id = nonempty_str(item.get("call_id"))
            drafts.append((MessageRole.TOOL, content_value(item.get("output")), call_id))
    return [
        Message(role=role, content=content, tool_call_id=call_id)
        for role, content, call_id in drafts
    ]


def responses_usage(value: JsonValue) -> Usage | None:
    """Responses ``usage`` as exclusive buckets (cached and reasoning are inside totals)."""
    return openai_usage(value, "input", "output")


_INCOMPLETE_REASONS: Mapping[str, FinishReason] = {
    "max_output_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


def _responses_finish(
    response: Mapping[str, JsonValue], has_tool_call: bool
) -> FinishReason | None:
    status = response.get("status")
    if status is None or status in ("queued", "in_progress"):
        return None
    if status == "completed":
        return FinishReason.TOOL_CALLS if has_tool_call else FinishReason.STOP
    if status == "incomplete":
        details = as_map(response.get("incomplete_details")) or {}
        return map_finish_reason(details.get("reason"), _INCOMPLETE_REASONS) or FinishReason.OTHER
    return FinishReason.OTHER


def responses_output(
    response: Mapping[str, JsonValue],
    llm_input: LlmInput,
    provider: str,
    *,
    deployment_id: str | None = None,
) -> LlmOutput:
    """A Responses ``Response`` (as JSON) as an ``LlmOutput`` recorded for ``provider``."""
    content: list[ContentBlock] = []
    has_tool_call = False
    for raw_item in as_list(response.get("output")) or ():
        item = as_map(raw_item)
        if item is None:
            continue
        kind = item.get("type")
        if kind == "message":
            value = content_value(item.get("content"))
            if isinstance(value, str):
                if value:
                    content.append(TextBlock(text=value))
            else:
                content.extend(value)
        elif kind == "reasoning":
            content.extend(_reasoning_blocks(item))
        elif kind in ("function_call", "custom_tool_call"):
            has_tool_call = True
            block = _item_tool_call(item)
            if block is not None:
                content.append(block)
    return build_output(
        dict(response),
        llm_input,
        provider=provider,
        content=content,
        finish_reason=_responses_finish(response, has_tool_call),
        served_model=nonempty_str(response.get("model")),
        usage=responses_usage(response.get("usage")),
        response_id=nonempty_str(response.get("id")),
        deployment_id=deployment_id,
    )


def _instructions(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None


def _text_format(value: JsonValue) -> Mapping[str, JsonValue] | None:
    text = as_map(value)
    return as_map(text.get("format")) if text is not None else None


class OpenAIResponsesAdapter(_OpenAIAdapter):
    """The Responses API (``responses.create``); see the module docstring."""

    api = "responses"

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        return build_input(
            raw,
            messages=read_responses_input(raw.get("input")),
            system=_instructions(raw.get("instructions")),
            tools=normalize_tools(raw.get("tools")),
            tool_choice=normalize_tool_choice(raw.get("tool_choice")),
            response_format=_text_format(raw.get("text")),
            params=read_params(raw, max_tokens_keys=("max_output_tokens",), stop_keys=()),
        )

    def _response(
        self, response: Mapping[str, JsonValue], llm_input: LlmInput, deployment: str | None
    ) -> LlmOutput:
        return responses_output(response, llm_input, self.provider, deployment_id=deployment)


OPENAI_CHAT = OpenAIChatAdapter("openai")
"""``client.chat.completions.create`` on an OpenAI client."""
OPENAI_RESPONSES = OpenAIResponsesAdapter("openai")
"""``client.responses.create`` on an OpenAI client."""
AZURE_CHAT = OpenAIChatAdapter("azure", azure=True)
"""``client.chat.completions.create`` on an Azure OpenAI client (``model`` is the deployment)."""
AZURE_RESPONSES = OpenAIResponsesAdapter("azure", azure=True)
"""``client.responses.create`` on an Azure OpenAI client (``model`` is the deployment)."""
