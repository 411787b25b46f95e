"""Provider adapters' token usage and finish reasons: each provider's usage split into the
canonical exclusive buckets (summing to the provider's totals), and each provider's stop or
finish reason mapped to the canonical ``FinishReason``.
"""

from __future__ import annotations

from typing import Any

import pytest
from agentplane_primitives.enums import FinishReason
from agentplane_primitives.models import Usage
from pydantic import JsonValue

from chronicle.llm import anthropic as anthropic_adapters
from chronicle.llm import bedrock as bedrock_adapters
from chronicle.llm import gemini as gemini_adapters
from chronicle.llm import litellm as litellm_adapters
from chronicle.llm import openai as openai_adapters
from chronicle.llm.canonical import (
    BaseAdapter,
    exclusive_usage,
    inclusive_usage,
)

# --------------------------------------------------------------------------------------------
# Usage buckets


def test_openai_usage_subtracts_cached_and_reasoning() -> None:
    usage = openai_adapters.chat_usage(
        {
            "prompt_tokens": 100,
            "completion_tokens": 30,
            "prompt_tokens_details": {"cached_tokens": 20},
            "completion_tokens_details": {"reasoning_tokens": 5},
        }
    )
    assert usage == Usage(input=80, cached_read=20, cache_write=0, output=25, reasoning=5)


def test_openai_usage_with_cache_writes_keeps_the_total() -> None:
    usage = openai_adapters.chat_usage(
        {
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 30},
        }
    )
    assert usage == Usage(input=50, cached_read=20, cache_write=30, output=10, reasoning=0)


def test_responses_usage() -> None:
    usage = openai_adapters.responses_usage(
        {
            "input_tokens": 100,
            "output_tokens": 30,
            "input_tokens_details": {"cached_tokens": 20},
            "output_tokens_details": {"reasoning_tokens": 5},
        }
    )
    assert usage == Usage(input=80, cached_read=20, cache_write=0, output=25, reasoning=5)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # details larger than their totals are cut to fit: the total wins
        (
            {"input_total": 10, "cached_read": 25, "output_total": 4, "reasoning": 9},
            Usage(input=0, cached_read=10, output=0, reasoning=4),
        ),
        (
            {"input_total": 10, "cached_read": 6, "cache_write": 6, "output_total": 0},
            Usage(input=0, cached_read=6, cache_write=4),
        ),
        # negative values never reach a bucket
        (
            {"input_total": -5, "cached_read": -1, "output_total": 3, "reasoning": -2},
            Usage(output=3),
        ),
        # no total: the details are taken as given
        ({"input_total": None, "cached_read": 7, "output_total": None}, Usage(cached_read=7)),
        ({"input_total": None, "output_total": None}, None),
    ],
)
def test_inclusive_usage_edges(kwargs: dict[str, Any], expected: Usage | None) -> None:
    assert inclusive_usage(**kwargs) == expected


def test_buckets_sum_to_the_provider_totals() -> None:
    for prompt, cached, completion, reasoning in [(100, 20, 30, 5), (5, 50, 5, 50), (0, 0, 0, 0)]:
        usage = inclusive_usage(
            input_total=prompt, cached_read=cached, output_total=completion, reasoning=reasoning
        )
        assert usage is not None
        assert usage.input + usage.cached_read + usage.cache_write == prompt
        assert usage.output + usage.reasoning == completion


def test_anthropic_usage_buckets() -> None:
    usage = anthropic_adapters.message_usage(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 500,
            "output_tokens": 50,
        }
    )
    assert usage == Usage(input=10, cached_read=2000, cache_write=500, output=50, reasoning=0)
    # the TTL breakdown is used when the total is missing
    usage = anthropic_adapters.message_usage(
        {
            "input_tokens": 1,
            "output_tokens": 2,
            "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 4},
        }
    )
    assert usage == Usage(input=1, cache_write=7, output=2)
    # thinking tokens are part of output_tokens; never more than it
    usage = exclusive_usage(input_tokens=1, output_total=10, reasoning=15)
    assert usage == Usage(input=1, output=0, reasoning=10)


def test_missing_or_odd_usage_is_none() -> None:
    odd: list[JsonValue] = [None, "12", [], {}, {"prompt_tokens": "many"}, {"prompt_tokens": True}]
    for value in odd:
        assert openai_adapters.chat_usage(value) is None
        assert openai_adapters.responses_usage(value) is None
        assert anthropic_adapters.message_usage(value) is None
        assert litellm_adapters.litellm_usage(value) is None


def test_litellm_usage_prefers_its_anthropic_cache_fields() -> None:
    usage = litellm_adapters.litellm_usage(
        {
            "prompt_tokens": 2510,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 2000},
            "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 500,
        }
    )
    assert usage == Usage(input=10, cached_read=2000, cache_write=500, output=50)


def test_gemini_usage_buckets() -> None:
    usage = gemini_adapters.gemini_usage(
        {
            "prompt_token_count": 100,
            "cached_content_token_count": 30,
            "tool_use_prompt_token_count": 7,
            "candidates_token_count": 10,
            "thoughts_token_count": 5,
            "total_token_count": 122,
        }
    )
    assert usage == Usage(input=77, cached_read=30, cache_write=0, output=10, reasoning=5)
    assert sum(usage.model_dump().values()) == 122  # the buckets add up to the billed total
    # REST names too, and a cached count larger than the prompt is cut to it
    odd = gemini_adapters.gemini_usage({"promptTokenCount": 10, "cachedContentTokenCount": 50})
    assert odd == Usage(input=0, cached_read=10, cache_write=0, output=0, reasoning=0)
    assert gemini_adapters.gemini_usage({}) is None


def test_bedrock_usage_buckets() -> None:
    usage = bedrock_adapters.converse_usage(
        {
            "inputTokens": 25,
            "outputTokens": 80,
            "cacheReadInputTokens": 3000,
            "cacheWriteInputTokens": 500,
            "totalTokens": 3605,
        }
    )
    assert usage == Usage(input=25, cached_read=3000, cache_write=500, output=80, reasoning=0)
    assert sum(usage.model_dump().values()) == 3605


# --------------------------------------------------------------------------------------------
# Finish reasons


def _gemini_output(reason: Any) -> JsonValue:
    content: JsonValue = {"role": "model", "parts": [{"text": "x"}]}
    return {"candidates": [{"content": content, "finish_reason": reason}]}


def _chat_output(reason: Any) -> JsonValue:
    return {"choices": [{"index": 0, "finish_reason": reason, "message": {"content": "x"}}]}


def _responses_output(reason: Any) -> JsonValue:
    status, details, output = reason
    return {"object": "response", "status": status, "incomplete_details": details, "output": output}


FUNCTION_CALL: Any = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]

FINISH_REASONS: dict[str, tuple[BaseAdapter, dict[str, JsonValue], Any, list[tuple[Any, Any]]]] = {
    # provider: (adapter, its input, its output with a reason, [(reason, FinishReason)])
    "gemini": (
        gemini_adapters.GEMINI_GENERATE_CONTENT,
        {"model": "gemini-2.5-flash", "contents": "hi"},
        _gemini_output,
        [
            ("STOP", FinishReason.STOP),
            ("MAX_TOKENS", FinishReason.LENGTH),
            ("SAFETY", FinishReason.CONTENT_FILTER),
            ("RECITATION", FinishReason.CONTENT_FILTER),
            ("PROHIBITED_CONTENT", FinishReason.CONTENT_FILTER),
            ("SPII", FinishReason.CONTENT_FILTER),
            ("MALFORMED_FUNCTION_CALL", FinishReason.OTHER),
            ("FINISH_REASON_UNSPECIFIED", FinishReason.OTHER),
            (None, None),
        ],
    ),
    "bedrock": (
        bedrock_adapters.BEDROCK_CONVERSE,
        {"modelId": "m", "messages": []},
        lambda reason: {"stopReason": reason},
        [
            ("end_turn", FinishReason.STOP),
            ("stop_sequence", FinishReason.STOP),
            ("max_tokens", FinishReason.LENGTH),
            ("model_context_window_exceeded", FinishReason.LENGTH),
            ("tool_use", FinishReason.TOOL_CALLS),
            ("guardrail_intervened", FinishReason.CONTENT_FILTER),
            ("content_filtered", FinishReason.CONTENT_FILTER),
            ("malformed_tool_use", FinishReason.OTHER),
        ],
    ),
    "chat": (
        openai_adapters.OPENAI_CHAT,
        {"model": "m", "messages": []},
        _chat_output,
        [
            ("stop", FinishReason.STOP),
            ("length", FinishReason.LENGTH),
            ("tool_calls", FinishReason.TOOL_CALLS),
            ("function_call", FinishReason.TOOL_CALLS),
            ("content_filter", FinishReason.CONTENT_FILTER),
            ("eos", FinishReason.OTHER),
            (None, None),
        ],
    ),
    "anthropic": (
        anthropic_adapters.ANTHROPIC_MESSAGES,
        {"model": "claude", "messages": []},
        lambda reason: {"content": [], "stop_reason": reason},
        [
            ("end_turn", FinishReason.STOP),
            ("stop_sequence", FinishReason.STOP),
            ("max_tokens", FinishReason.LENGTH),
            ("model_context_window_exceeded", FinishReason.LENGTH),
            ("tool_use", FinishReason.TOOL_CALLS),
            ("refusal", FinishReason.CONTENT_FILTER),
            ("pause_turn", FinishReason.OTHER),
            ("something_new", FinishReason.OTHER),
            (None, None),
        ],
    ),
    "responses": (  # a reason is (status, incomplete_details, output)
        openai_adapters.OPENAI_RESPONSES,
        {"model": "gpt-4.1", "input": "x"},
        _responses_output,
        [
            (("completed", None, []), FinishReason.STOP),
            (("completed", None, FUNCTION_CALL), FinishReason.TOOL_CALLS),
            (("incomplete", {"reason": "max_output_tokens"}, []), FinishReason.LENGTH),
            (("incomplete", {"reason": "content_filter"}, []), FinishReason.CONTENT_FILTER),
            (("incomplete", {"reason": "max_messages"}, []), FinishReason.OTHER),
            (("incomplete", None, []), FinishReason.OTHER),
            (("failed", None, []), FinishReason.OTHER),
            (("cancelled", None, []), FinishReason.OTHER),
            (("in_progress", None, []), None),
            (("queued", None, []), None),
            ((None, None, []), None),
        ],
    ),
}


@pytest.mark.parametrize(
    ("provider", "reason", "expected"),
    [
        pytest.param(provider, reason, expected, id=f"{provider}-{reason}")
        for provider, (_, _, _, cases) in FINISH_REASONS.items()
        for reason, expected in cases
    ],
)
def test_finish_reasons(provider: str, reason: Any, expected: FinishReason | None) -> None:
    """Each provider's stop or finish reason, as its SDK reports it, is one canonical reason."""
    adapter, input_raw, output_with, _ = FINISH_REASONS[provider]
    llm_input = adapter.to_input(input_raw)
    assert adapter.to_output(output_with(reason), llm_input).finish_reason == expected
