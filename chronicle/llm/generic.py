"""The generic adapter: canonical ``llm`` fields for any function that calls a model.

``@boundary(kind="llm")`` and ``wrap_llm`` use it. It reads OpenAI- and Anthropic-shaped
arguments and responses with those providers' adapters (``chronicle.llm.openai``,
``chronicle.llm.anthropic``) and falls back to the model name and ``raw`` for anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from agentplane_primitives.models import LlmInput, LlmOutput, Message, TextBlock
from agentplane_primitives.types import UNKNOWN_PROVIDER
from pydantic import JsonValue

from chronicle.llm import anthropic as anthropic_adapter
from chronicle.llm import openai as openai_adapter
from chronicle.llm.canonical import (
    BaseAdapter,
    build_input,
    build_output,
    normalize_provider,
    normalize_tool_choice,
    normalize_tools,
    read_params,
)
from chronicle.llm.lenient import as_list, as_map


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

    Output: a string is one text block, and so is a list of strings (what a generator boundary
    that streams text yielded), joined. An OpenAI ChatCompletion, an OpenAI Responses ``Response``
    or an Anthropic ``Message`` (as JSON) is read by that provider's adapter (content, usage,
    finish reason, served model), and ``provider`` is the one given, else the one detected. A
    single OpenAI-shaped assistant message (``choices[0].message``) gives its content only.
    Anything else has no content and ``usage = None``; with no provider given and none detected,
    ``provider = "unknown"`` and ``usage = None``.

    ``provider`` is recorded as given (trimmed, lower case); ``None``, blank or ``unknown`` means
    detect it from the response shape, else ``unknown``.
    """

    def __init__(self, provider: str | None = None) -> None:
        given = normalize_provider(provider)
        super().__init__(f"generic.{given or UNKNOWN_PROVIDER}", given or UNKNOWN_PROVIDER)
        self._given = given

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
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
        if isinstance(raw, str):
            return build_output(
                raw, llm_input, provider=self.provider, content=[TextBlock(text=raw)]
            )
        pieces = as_list(raw)
        if pieces and all(isinstance(piece, str) for piece in pieces):
            text = "".join(piece for piece in pieces if isinstance(piece, str))
            return build_output(
                raw, llm_input, provider=self.provider, content=[TextBlock(text=text)]
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
