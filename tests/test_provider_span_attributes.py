"""Provider adapters' OpenInference span attributes: what a model call's span carries (messages,
tool calls, token details, reasoning and refusals, the provider family), and their bound.
"""

from __future__ import annotations

import json

from agentplane_primitives.models import LlmInput, LlmOutput
from pydantic import JsonValue

from chronicle.llm import anthropic as anthropic_adapters
from chronicle.llm.generic import GenericAdapter
from chronicle.otel import openinference
from chronicle.otel.openinference import llm_span_attributes
from tests.test_providers import GOLDEN_DIR, adapter_named, load

# --------------------------------------------------------------------------------------------
# OpenInference attributes


def _golden_models(name: str) -> tuple[LlmInput, LlmOutput]:
    case = load(GOLDEN_DIR / name)
    adapter = adapter_named(case["adapter"])
    llm_input = adapter.to_input(case["input_raw"])
    return llm_input, adapter.to_output(case["output_raw"], llm_input)


def test_span_attributes_for_a_tool_call_round_trip() -> None:
    llm_input, llm_output = _golden_models("openai/chat_tool_result.json")
    attrs = llm_span_attributes(llm_input, llm_output)
    assert attrs["llm.model_name"] == "gpt-4o-2024-08-06"
    assert attrs["llm.request.model_name"] == "gpt-4o"
    assert attrs["llm.provider"] == "openai"
    assert attrs["llm.system"] == "openai"
    assert json.loads(str(attrs["llm.invocation_parameters"])) == {"max_tokens": 200}
    assert attrs["llm.input_messages.0.message.role"] == "system"
    assert attrs["llm.input_messages.0.message.content"] == "Answer in French."
    assert attrs["llm.input_messages.1.message.content"] == "Weather in Paris?"
    assert attrs["llm.input_messages.1.message.contents.0.message_content.type"] == "text"
    prefix = "llm.input_messages.2.message.tool_calls.0.tool_call"
    assert attrs[f"{prefix}.id"] == "call_1"
    assert attrs[f"{prefix}.function.name"] == "get_weather"
    assert json.loads(str(attrs[f"{prefix}.function.arguments"])) == {"city": "Paris"}
    assert attrs["llm.input_messages.3.message.role"] == "tool"
    assert attrs["llm.input_messages.3.message.tool_call_id"] == "call_1"
    assert attrs["llm.output_messages.0.message.role"] == "assistant"
    assert attrs["llm.output_messages.0.message.content"] == '{"answer": "Il fait 21 degres."}'
    assert attrs["llm.token_count.prompt"] == 150
    assert attrs["llm.token_count.completion"] == 12
    assert attrs["llm.token_count.total"] == 162
    schema = json.loads(str(attrs["llm.tools.0.tool.json_schema"]))
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "get_weather"
    assert schema["function"]["parameters"]["required"] == ["city"]
    assert all(isinstance(v, str | int | float | bool) for v in attrs.values())


def test_span_attributes_token_details() -> None:
    llm_input, llm_output = _golden_models("anthropic/messages_cache.json")
    attrs = llm_span_attributes(llm_input, llm_output)
    assert attrs["llm.provider"] == "anthropic"
    assert attrs["llm.system"] == "anthropic"
    assert attrs["llm.input_messages.0.message.role"] == "system"
    assert attrs["llm.input_messages.0.message.content"] == "A long document..."
    assert attrs["llm.token_count.prompt"] == 2510
    assert attrs["llm.token_count.completion"] == 50
    assert attrs["llm.token_count.total"] == 2560
    assert attrs["llm.token_count.prompt_details.cache_read"] == 2000
    assert attrs["llm.token_count.prompt_details.cache_write"] == 500
    assert attrs["llm.token_count.completion_details.reasoning"] == 0

    llm_input, llm_output = _golden_models("openai/chat_cached_tokens.json")
    attrs = llm_span_attributes(llm_input, llm_output)
    assert (attrs["llm.token_count.prompt"], attrs["llm.token_count.completion"]) == (100, 30)
    assert attrs["llm.token_count.completion_details.reasoning"] == 5


def test_span_attributes_reasoning_and_refusal_content() -> None:
    llm_input, llm_output = _golden_models("openai/chat_reasoning_content.json")
    attrs = llm_span_attributes(llm_input, llm_output)
    assert attrs["llm.output_messages.0.message.content"] == "6"
    assert attrs["llm.output_messages.0.message.contents.0.message_content.type"] == "reasoning"
    assert attrs["llm.output_messages.0.message.contents.0.message_content.text"] == (
        "3 plus 3 is 6."
    )
    llm_input, llm_output = _golden_models("openai/chat_refusal.json")
    attrs = llm_span_attributes(llm_input, llm_output)
    assert attrs["llm.output_messages.0.message.content"] == "I can't help with that."


def test_span_attributes_without_output_or_usage() -> None:
    llm_input = anthropic_adapters.ANTHROPIC_MESSAGES.to_input(
        {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    )
    attrs = llm_span_attributes(llm_input, None, provider="anthropic")
    assert attrs["llm.model_name"] == "claude-sonnet-4-5"
    assert attrs["llm.provider"] == "anthropic"
    assert attrs["llm.invocation_parameters"] == "{}"
    assert not any(key.startswith("llm.output_messages") for key in attrs)
    assert not any(key.startswith("llm.token_count") for key in attrs)
    unknown = GenericAdapter(None)
    llm_input = unknown.to_input({"q": 1})
    attrs = llm_span_attributes(llm_input, unknown.to_output({"a": 1}, llm_input))
    assert attrs["llm.model_name"] == "unknown"
    assert "llm.provider" not in attrs
    assert "llm.system" not in attrs
    assert not any(key.startswith("llm.token_count") for key in attrs)


def test_span_attributes_provider_family() -> None:
    cases = [
        ("azure/chat_text.json", "azure", "openai"),
        ("litellm/bedrock_tool_calls.json", "aws", "anthropic"),
        ("litellm/other_prefix.json", "litellm", "litellm"),
    ]
    for name, provider, system in cases:
        attrs = llm_span_attributes(*_golden_models(name))
        assert (attrs["llm.provider"], attrs["llm.system"]) == (provider, system)


def test_span_attributes_cap_the_messages() -> None:
    messages: list[JsonValue] = [{"role": "user", "content": f"m{i}"} for i in range(100)]
    llm_input = anthropic_adapters.ANTHROPIC_MESSAGES.to_input(
        {"model": "claude", "system": "sys", "messages": messages}
    )
    attrs = llm_span_attributes(llm_input, None)
    roles = [k for k in attrs if k.startswith("llm.input_messages.") and k.endswith(".role")]
    assert len(roles) == openinference.MAX_SPAN_MESSAGES
    assert attrs["llm.input_messages.0.message.content"] == "sys"
    assert attrs["llm.input_messages.1.message.content"] == "m69"
    last = openinference.MAX_SPAN_MESSAGES - 1
    assert attrs[f"llm.input_messages.{last}.message.content"] == "m99"
