"""LiteLLM adapter: ``litellm.completion`` takes OpenAI chat arguments and returns an OpenAI-shaped
``ModelResponse``.

Adapter (``chronicle.llm.canonical.LlmAdapter``): ``LITELLM_COMPLETION``, for ``completion`` and
``acompletion``. Input and output are read as OpenAI Chat Completions (see
``chronicle.llm.openai``), with these differences:

- ``provider`` is the provider LiteLLM routes to, read from the requested model's prefix (or a
  ``custom_llm_provider`` argument): ``openai/`` is ``openai``, ``azure/`` and ``azure_ai/``
  ``azure``, ``anthropic/`` ``anthropic``, ``bedrock/`` ``bedrock``, ``gemini/``, ``vertex_ai/``
  and ``vertex_ai_beta/`` ``google``. A bare name is ``openai`` for ``gpt-*``, ``chatgpt-*``,
  ``o1``/``o3``/``o4`` models, ``anthropic`` for ``claude-*``, ``google`` for ``gemini-*``;
  anything else is ``litellm``. ``LiteLLMCompletionAdapter.provider`` is ``litellm``.
- Usage is LiteLLM's OpenAI-shaped usage. For Anthropic models LiteLLM adds the cache counts into
  ``prompt_tokens`` and also reports ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens``: when present they are the ``cached_read`` and ``cache_write``
  buckets and are taken out of ``prompt_tokens`` (else ``prompt_tokens_details.cached_tokens``
  and ``cache_creation_tokens``/``cache_write_tokens`` are used, as for OpenAI).
- Reasoning text is the message's ``reasoning_content``, else the text of its
  ``thinking_blocks``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agentplane_primitives.models import LlmInput, LlmOutput, ReasoningBlock, Usage
from pydantic import JsonValue

from chronicle.llm.canonical import BaseAdapter, build_output
from chronicle.llm.lenient import as_list, as_map, as_str, nonempty_str
from chronicle.llm.openai import chat_input, chat_output, first_choice, openai_usage

_PREFIXES: Mapping[str, str] = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "azure": "azure",
    "azure_ai": "azure",
    "anthropic": "anthropic",
    "bedrock": "bedrock",
    "gemini": "google",
    "vertex_ai": "google",
    "vertex_ai_beta": "google",
}
_BARE_OPENAI = re.compile(r"^(gpt-|chatgpt-|ft:gpt-|o[134](\b|-|$))")


def litellm_provider(model: str | None, custom_llm_provider: str | None = None) -> str:
    """The provider LiteLLM routes ``model`` to, as a Chronicle provider name."""
    if custom_llm_provider:
        return _PREFIXES.get(custom_llm_provider.strip().lower(), "litellm")
    if not model:
        return "litellm"
    name = model.strip().lower()
    prefix, slash, _ = name.partition("/")
    if slash:
        return _PREFIXES.get(prefix, "litellm")
    if _BARE_OPENAI.match(name):
        return "openai"
    if name.startswith("claude-"):
        return "anthropic"
    if name.startswith("gemini-"):
        return "google"
    return "litellm"


def litellm_usage(value: JsonValue) -> Usage | None:
    """LiteLLM's usage as exclusive buckets (see the module docstring)."""
    return openai_usage(value, "prompt", "completion", litellm=True)


def _thinking_text(message: Mapping[str, JsonValue]) -> str | None:
    texts = [
        as_str((as_map(block) or {}).get("thinking"))
        for block in as_list(message.get("thinking_blocks")) or ()
    ]
    kept = [text for text in texts if text]
    return "\n".join(kept) if kept else None


class LiteLLMCompletionAdapter(BaseAdapter):
    """``litellm.completion``; see the module docstring."""

    def __init__(self, name: str = "litellm.completion") -> None:
        super().__init__(name, "litellm")

    def _input(self, raw: Mapping[str, JsonValue]) -> LlmInput:
        return chat_input(raw)

    def _output(self, raw: JsonValue, llm_input: LlmInput) -> LlmOutput:
        provider = litellm_provider(
            nonempty_str(llm_input.raw.get("model")),
            nonempty_str(llm_input.raw.get("custom_llm_provider")),
        )
        response = as_map(raw)
        if response is None:
            return build_output(raw, llm_input, provider=provider)
        usage = litellm_usage(response.get("usage"))
        output = chat_output(response, llm_input, provider, usage=usage)
        if not any(block.type == "reasoning" for block in output.content):
            message = as_map(first_choice(response).get("message"))
            thinking = _thinking_text(message) if message is not None else None
            if thinking is not None:
                output.content = [ReasoningBlock(text=thinking), *output.content]
        return output


LITELLM_COMPLETION = LiteLLMCompletionAdapter()
"""``litellm.completion`` / ``litellm.acompletion``."""
