"""Provider adapters: golden conformance files and the shared canonical rules (usage and finish
reasons are in test_provider_usage.py, span attributes in test_provider_span_attributes.py).

Every file under ``tests/providers/<provider>/<case>.json`` holds the raw input and output of one
call (``output_raw`` is the ``model_dump(mode="json")`` of the real SDK type, as Chronicle
captures it) and the exact canonical ``LlmInput``/``LlmOutput`` expected from them
(``model_dump(mode="json", exclude_none=True)``). ``expected_output`` is null for a call that
raised: only its input is derived.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from agentplane_primitives.enums import FinishReason
from agentplane_primitives.models import LlmInput, LlmOutput, Usage
from pydantic import JsonValue

from chronicle.llm import anthropic as anthropic_adapters
from chronicle.llm import bedrock as bedrock_adapters
from chronicle.llm import gemini as gemini_adapters
from chronicle.llm import litellm as litellm_adapters
from chronicle.llm import openai as openai_adapters
from chronicle.llm.canonical import (
    BaseAdapter,
    LlmAdapter,
    normalize_tool_choice,
    normalize_tools,
    parse_arguments,
)
from chronicle.llm.generic import GenericAdapter
from chronicle.otel.openinference import llm_span_attributes

GOLDEN_DIR = Path(__file__).parent / "providers"
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*/*.json"))

NAMED_ADAPTERS: dict[str, BaseAdapter] = {
    adapter.name: adapter
    for adapter in (
        openai_adapters.OPENAI_CHAT,
        openai_adapters.OPENAI_RESPONSES,
        openai_adapters.AZURE_CHAT,
        openai_adapters.AZURE_RESPONSES,
        anthropic_adapters.ANTHROPIC_MESSAGES,
        litellm_adapters.LITELLM_COMPLETION,
        gemini_adapters.GEMINI_GENERATE_CONTENT,
        bedrock_adapters.BEDROCK_CONVERSE,
        bedrock_adapters.BEDROCK_INVOKE_ANTHROPIC,
    )
}


def adapter_named(name: str) -> LlmAdapter:
    if name.startswith("generic."):
        given = name.split(".", 1)[1]
        return GenericAdapter(None if given == "unknown" else given)
    return NAMED_ADAPTERS[name]


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def derive(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Run a golden case's adapter; the canonical dumps compared with the expectations."""
    adapter = adapter_named(case["adapter"])
    llm_input = adapter.to_input(copy.deepcopy(case["input_raw"]))
    got_input = llm_input.model_dump(mode="json", exclude_none=True)
    if case["expected_output"] is None:
        return got_input, None
    llm_output = adapter.to_output(copy.deepcopy(case["output_raw"]), llm_input)
    return got_input, llm_output.model_dump(mode="json", exclude_none=True)


# --------------------------------------------------------------------------------------------
# Golden files


def test_golden_files_cover_every_adapter_and_case_kind() -> None:
    cases = [load(path) for path in GOLDEN_FILES]
    assert len(cases) >= 35
    used = {case["adapter"] for case in cases}
    assert set(NAMED_ADAPTERS) <= used
    assert {"generic.unknown"} <= used
    names = {path.relative_to(GOLDEN_DIR).as_posix() for path in GOLDEN_FILES}
    for required in (
        "openai/chat_text.json",
        "openai/chat_tool_calls.json",
        "openai/chat_tool_result.json",
        "openai/chat_reasoning.json",
        "openai/chat_refusal.json",
        "openai/chat_cached_tokens.json",
        "openai/chat_unparsable_arguments.json",
        "openai/chat_failure.json",
        "openai/responses_text.json",
        "openai/responses_tool_calls.json",
        "openai/responses_tool_result.json",
        "openai/responses_reasoning.json",
        "openai/responses_refusal.json",
        "openai/responses_unparsable_arguments.json",
        "openai/responses_failure.json",
        "anthropic/messages_text.json",
        "anthropic/messages_tool_use.json",
        "anthropic/messages_tool_result.json",
        "anthropic/messages_thinking.json",
        "anthropic/messages_cache.json",
        "anthropic/messages_failure.json",
        "gemini/generate_content_text.json",
        "gemini/generate_content_function_call.json",
        "gemini/generate_content_function_response.json",
        "gemini/generate_content_thinking.json",
        "gemini/generate_content_cached.json",
        "gemini/generate_content_prompt_blocked.json",
        "gemini/generate_content_candidate_safety.json",
        "gemini/generate_content_failure.json",
        "bedrock/converse_text.json",
        "bedrock/converse_tool_use.json",
        "bedrock/converse_tool_result.json",
        "bedrock/converse_reasoning.json",
        "bedrock/converse_cache.json",
        "bedrock/converse_guardrail.json",
        "bedrock/converse_failure.json",
        "bedrock/invoke_model_anthropic.json",
    ):
        assert required in names
    for case in cases:
        assert set(case) >= {
            "description",
            "adapter",
            "input_raw",
            "output_raw",
            "expected_input",
            "expected_output",
        }


@pytest.mark.parametrize(
    "path", GOLDEN_FILES, ids=[p.relative_to(GOLDEN_DIR).as_posix() for p in GOLDEN_FILES]
)
def test_golden(path: Path) -> None:
    case = load(path)
    got_input, got_output = derive(case)
    assert got_input == case["expected_input"]
    assert got_output == case["expected_output"]
    # The expectations are valid canonical models, and keep the raw values whole.
    assert LlmInput.model_validate(case["expected_input"]).raw is not None
    if case["expected_output"] is not None:
        LlmOutput.model_validate(case["expected_output"])


def test_golden_comparison_can_fail() -> None:
    case = load(GOLDEN_DIR / "openai" / "chat_cached_tokens.json")
    got_input, got_output = derive(case)
    assert got_output == case["expected_output"]
    wrong = copy.deepcopy(case["expected_output"])
    wrong["usage"]["input"] = 100  # the cached tokens counted twice
    assert got_output != wrong
    wrong_input = copy.deepcopy(case["expected_input"])
    wrong_input["messages"][0]["content"] = "something else"
    assert got_input != wrong_input


def _sdk_type(name: str) -> Any:
    if name == "openai.ChatCompletion":
        return pytest.importorskip("openai.types.chat").ChatCompletion
    if name == "openai.Response":
        return pytest.importorskip("openai.types.responses").Response
    if name == "anthropic.Message":
        return pytest.importorskip("anthropic.types").Message
    if name == "google.GenerateContentResponse":
        return pytest.importorskip("google.genai.types").GenerateContentResponse
    raise AssertionError(f"unknown output_type {name}")


SDK_FILES = [p for p in GOLDEN_FILES if load(p).get("output_type")]


@pytest.mark.parametrize(
    "path", SDK_FILES, ids=[p.relative_to(GOLDEN_DIR).as_posix() for p in SDK_FILES]
)
def test_golden_output_raw_is_a_real_sdk_dump(path: Path) -> None:
    case = load(path)
    sdk_type = _sdk_type(case["output_type"])
    parsed = sdk_type.model_validate(case["output_raw"])
    assert case["output_raw"] in (
        parsed.model_dump(mode="json"),
        parsed.model_dump(mode="json", exclude_none=True),
    )


BEDROCK_FILES = sorted((GOLDEN_DIR / "bedrock").glob("converse_*.json"))


@pytest.mark.parametrize("path", BEDROCK_FILES, ids=[p.name for p in BEDROCK_FILES])
def test_golden_bedrock_converse_is_what_botocore_parses(path: Path) -> None:
    """The Converse goldens hold what boto3 returns: botocore's own output shape accepts them."""
    botocore_session = pytest.importorskip("botocore.session")
    from botocore.validate import ParamValidator

    case = load(path)
    model = botocore_session.get_session().get_service_model("bedrock-runtime")
    operation = model.operation_model("Converse")
    report = ParamValidator().validate(case["input_raw"], operation.input_shape)
    assert not report.has_errors(), report.generate_report()
    if case["output_raw"] is not None:
        body = {k: v for k, v in case["output_raw"].items() if k != "ResponseMetadata"}
        report = ParamValidator().validate(body, operation.output_shape)
        assert not report.has_errors(), report.generate_report()


# --------------------------------------------------------------------------------------------
# Arguments, tools, tool choice


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"a": 1, "b": [true, null]}', {"a": 1, "b": [True, None]}),
        ("", {}),
        ("   ", {}),
        (None, {}),
        ({"a": 1}, {"a": 1}),
        ('{"a": 1', {"_raw": '{"a": 1'}),
        ("[1, 2]", {"_raw": "[1, 2]"}),
        ('"text"', {"_raw": '"text"'}),
        ('{"a": NaN}', {"_raw": '{"a": NaN}'}),
        ("[" * 100_000, {"_raw": "[" * 100_000}),
        (5, {"_raw": 5}),
    ],
)
def test_parse_arguments(value: Any, expected: dict[str, Any]) -> None:
    assert parse_arguments(value) == expected


def test_tool_call_without_a_name_is_skipped() -> None:
    message: dict[str, JsonValue] = {
        "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]
    }
    assert openai_adapters.assistant_blocks(message) == []


def test_normalize_tools() -> None:
    schema: JsonValue = {"type": "object"}
    assert normalize_tools(
        [
            {
                "type": "function",
                "function": {"name": "a", "description": "A", "parameters": schema},
            },
            {"type": "function", "name": "b", "parameters": schema, "strict": True},
            {"name": "c", "description": "C", "input_schema": schema},
            {"type": "custom", "custom": {"name": "d", "description": "D"}},
            {"type": "file_search", "vector_store_ids": ["vs"]},
            {"type": "function", "function": {"description": "no name"}},
            "not a tool",
            {},
        ]
    ) == [
        {"name": "a", "description": "A", "parameters": schema},
        {"name": "b", "parameters": schema},
        {"name": "c", "description": "C", "parameters": schema},
        {"name": "d", "description": "D"},
        {"name": "file_search"},
    ]
    assert normalize_tools(None) is None
    assert normalize_tools({"name": "x"}) is None
    assert normalize_tools([]) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("any", "required"),
        ("sometimes", None),
        ({"type": "function", "function": {"name": "f"}}, {"name": "f"}),
        ({"type": "function", "name": "f"}, {"name": "f"}),
        ({"type": "custom", "custom": {"name": "g"}}, {"name": "g"}),
        ({"type": "auto"}, "auto"),
        ({"type": "any", "disable_parallel_tool_use": True}, "required"),
        ({"type": "tool", "name": "f"}, {"name": "f"}),
        ({"type": "none"}, "none"),
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
        ({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}, "auto"),
        ({"type": "web_search_preview"}, {"name": "web_search_preview"}),
        ({"name": "legacy"}, {"name": "legacy"}),
        ({"type": "tool"}, None),
        (None, None),
        (3, None),
    ],
)
def test_normalize_tool_choice(value: Any, expected: Any) -> None:
    assert normalize_tool_choice(value) == expected


# --------------------------------------------------------------------------------------------
# Messages


def test_chat_messages_roles_and_parts() -> None:
    llm_input = openai_adapters.OPENAI_CHAT.to_input(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "developer", "content": "d"},
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
                {"role": "function", "name": "lookup", "content": "42"},
                {"role": "critic", "content": "skipped"},
                {"role": "assistant", "content": "", "tool_calls": None},
                {"role": "assistant", "content": None},
                "not a message",
            ],
        }
    )
    dumped = [m.model_dump(mode="json", exclude_none=True) for m in llm_input.messages]
    assert dumped == [
        {"role": "system", "content": "d"},
        {"role": "user", "content": []},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": ""},
    ]
    assert llm_input.system is None


def test_anthropic_user_message_split_keeps_order() -> None:
    messages = anthropic_adapters.read_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "before"},
                    {"type": "tool_result", "tool_use_id": "t1"},
                    {"type": "image", "source": {}},
                ],
            },
            {"role": "user", "content": []},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2"}]},
        ]
    )
    dumped = [m.model_dump(mode="json", exclude_none=True) for m in messages]
    assert dumped == [
        {"role": "user", "content": [{"type": "text", "text": "before"}]},
        {"role": "tool", "content": "", "tool_call_id": "t1"},
        {"role": "user", "content": []},
        {"role": "user", "content": []},
        {"role": "tool", "content": "", "tool_call_id": "t2"},
    ]


def test_responses_string_assistant_message_stays_a_string() -> None:
    messages = openai_adapters.read_responses_input(
        [
            {"role": "assistant", "content": "earlier answer"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "item_reference", "id": "x"},
        ]
    )
    dumped = [m.model_dump(mode="json", exclude_none=True) for m in messages]
    assert dumped == [
        {"role": "assistant", "content": "earlier answer"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_call", "id": "c1", "name": "f", "arguments": {}},
                {"type": "tool_call", "id": "c2", "name": "g", "arguments": {}},
            ],
        },
    ]


# --------------------------------------------------------------------------------------------
# Output model and provider


def test_requested_model_when_the_response_names_none() -> None:
    adapter = openai_adapters.OPENAI_CHAT
    llm_input = adapter.to_input({"model": "gpt-4o", "messages": []})
    output = adapter.to_output({"choices": [{"index": 0, "message": {"content": "x"}}]}, llm_input)
    assert (output.model, output.model_source) == ("gpt-4o", "requested")
    nameless = adapter.to_input({"messages": []})
    assert nameless.model == "unknown"
    output = adapter.to_output({"choices": []}, nameless)
    assert (output.model, output.model_source) == (None, None)


def test_azure_deployment_id_is_the_requested_model() -> None:
    for adapter in (openai_adapters.AZURE_CHAT, openai_adapters.AZURE_RESPONSES):
        assert adapter.provider == "azure"
        llm_input = adapter.to_input({"model": "my-deployment"})
        output = adapter.to_output({"model": "gpt-4o-2024-11-20"}, llm_input)
        assert (output.provider, output.deployment_id) == ("azure", "my-deployment")
        assert (output.model, output.model_source) == ("gpt-4o-2024-11-20", "served")
        assert adapter.to_output(None, adapter.to_input({})).deployment_id is None
    for adapter in (openai_adapters.OPENAI_CHAT, openai_adapters.OPENAI_RESPONSES):
        llm_input = adapter.to_input({"model": "gpt-4o"})
        assert adapter.to_output({"model": "gpt-4o"}, llm_input).deployment_id is None


@pytest.mark.parametrize(
    ("model", "custom", "expected"),
    [
        ("anthropic/claude-sonnet-4-5", None, "anthropic"),
        ("openai/gpt-4o", None, "openai"),
        ("gpt-4o-mini", None, "openai"),
        ("o3-mini", None, "openai"),
        ("o1", None, "openai"),
        ("chatgpt-4o-latest", None, "openai"),
        ("azure/prod-deployment", None, "azure"),
        ("azure_ai/mistral-large", None, "azure"),
        ("bedrock/anthropic.claude-3-haiku", None, "bedrock"),
        ("gemini/gemini-2.0-flash", None, "google"),
        ("vertex_ai/gemini-1.5-pro", None, "google"),
        ("claude-3-5-sonnet-20240620", None, "anthropic"),
        ("gemini-1.5-pro", None, "google"),
        ("ollama/llama3", None, "litellm"),
        ("groq/llama3-70b", None, "litellm"),
        ("omni-model", None, "litellm"),
        ("my-model", "anthropic", "anthropic"),
        ("my-model", "together_ai", "litellm"),
        (None, None, "litellm"),
    ],
)
def test_litellm_provider(model: str | None, custom: str | None, expected: str) -> None:
    assert litellm_adapters.litellm_provider(model, custom) == expected


def test_litellm_output_provider_comes_from_the_request() -> None:
    adapter = litellm_adapters.LITELLM_COMPLETION
    assert adapter.provider == "litellm"
    llm_input = adapter.to_input({"model": "azure/prod", "messages": []})
    output = adapter.to_output({"choices": [], "model": "gpt-4o"}, llm_input)
    assert output.provider == "azure"
    llm_input = adapter.to_input({"model": "x", "custom_llm_provider": "bedrock"})
    assert adapter.to_output(None, llm_input).provider == "bedrock"


def test_litellm_thinking_blocks_when_no_reasoning_content() -> None:
    adapter = litellm_adapters.LITELLM_COMPLETION
    llm_input = adapter.to_input({"model": "anthropic/claude", "messages": []})
    raw: JsonValue = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "content": "ok",
                    "thinking_blocks": [
                        {"type": "thinking", "thinking": "a"},
                        {"type": "redacted_thinking", "data": "x"},
                        {"type": "thinking", "thinking": "b"},
                    ],
                },
            }
        ]
    }
    output = adapter.to_output(raw, llm_input)
    assert [b.model_dump() for b in output.content] == [
        {"type": "reasoning", "text": "a\nb"},
        {"type": "text", "text": "ok"},
    ]


# --------------------------------------------------------------------------------------------
# Generic adapter


def test_generic_unknown_shape() -> None:
    adapter = GenericAdapter(None)
    assert adapter.provider == "unknown"
    llm_input = adapter.to_input({"question": "hi"})
    assert (llm_input.model, llm_input.messages, llm_input.system) == ("unknown", [], None)
    output = adapter.to_output({"answer": 1}, llm_input)
    assert (output.provider, output.usage, output.content) == ("unknown", None, [])
    odd: list[JsonValue] = [None, 3, [1, 2], True]
    for raw in odd:
        output = adapter.to_output(raw, llm_input)
        assert (output.provider, output.usage, output.content) == ("unknown", None, [])


def test_generic_str_output_and_given_provider() -> None:
    adapter = GenericAdapter("  OpenAI ")
    assert adapter.provider == "openai"
    llm_input = adapter.to_input({"model": "gpt-4o", "system": "Be nice.", "messages": "odd"})
    assert (llm_input.system, llm_input.messages) == ("Be nice.", [])
    output = adapter.to_output("hello", llm_input)
    assert output.provider == "openai"
    assert output.usage is None
    assert [b.model_dump() for b in output.content] == [{"type": "text", "text": "hello"}]
    assert (output.model, output.model_source) == ("gpt-4o", "requested")
    assert GenericAdapter("").provider == "unknown"
    assert GenericAdapter("unknown").provider == "unknown"


def test_generic_openai_shaped_output_keeps_the_given_provider() -> None:
    raw: JsonValue = {
        "id": "r1",
        "model": "llama-3-70b",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
    }
    adapter = GenericAdapter("groq")
    output = adapter.to_output(raw, adapter.to_input({"model": "llama3"}))
    assert output.provider == "groq"
    assert output.usage == Usage(input=10, output=2)
    assert (output.model, output.model_source, output.response_id) == (
        "llama-3-70b",
        "served",
        "r1",
    )
    assert output.finish_reason is FinishReason.STOP
    for given in (None, "unknown"):
        detected = GenericAdapter(given).to_output(raw, adapter.to_input({}))
        assert detected.provider == "openai"


def test_generic_detects_responses_and_anthropic_shapes() -> None:
    adapter = GenericAdapter(None)
    llm_input = adapter.to_input({})
    responses: JsonValue = {
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    output = adapter.to_output(responses, llm_input)
    assert (output.provider, output.usage) == ("openai", Usage(input=3, output=1))
    message: JsonValue = {"type": "message", "content": [{"type": "text", "text": "hi"}]}
    output = adapter.to_output(message, llm_input)
    assert (output.provider, output.usage) == ("anthropic", None)
    assert [b.model_dump() for b in output.content] == [{"type": "text", "text": "hi"}]


def test_generic_assistant_message_output_has_content_only() -> None:
    adapter = GenericAdapter(None)
    output = adapter.to_output(
        {"role": "assistant", "content": "hi", "tool_calls": None}, adapter.to_input({})
    )
    assert (output.provider, output.usage) == ("unknown", None)
    assert [b.model_dump() for b in output.content] == [{"type": "text", "text": "hi"}]


def test_gemini_contents_are_grouped_as_the_sdk_groups_them() -> None:
    call: JsonValue = {"functionCall": {"name": "lookup", "args": {"q": "x"}}}
    messages = gemini_adapters.read_contents(
        ["first", {"text": "second"}, call, ["nested"], {"role": "model", "parts": []}, "last"]
    )
    assert [
        (m.role.value, m.model_dump(mode="json", exclude_none=True)["content"]) for m in messages
    ] == [
        ("user", [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]),
        ("assistant", [{"type": "tool_call", "name": "lookup", "arguments": {"q": "x"}}]),
        ("user", [{"type": "text", "text": "nested"}]),
        ("assistant", []),
        ("user", [{"type": "text", "text": "last"}]),
    ]
    (single,) = gemini_adapters.read_contents(call)  # one function call part: the model's turn
    assert single.role.value == "assistant"


def test_gemini_raw_forms_drop_nones_and_transport() -> None:
    types = pytest.importorskip("google.genai.types")
    config = types.GenerateContentConfig(
        temperature=0.5, http_options=types.HttpOptions(headers={"x-goog-api-key": "secret"})
    )
    raw = gemini_adapters.compact_arguments({"model": "m", "contents": "hi", "config": config})
    assert raw == {"model": "m", "contents": "hi", "config": {"temperature": 0.5}}
    response = types.GenerateContentResponse(
        response_id="r1", sdk_http_response=types.HttpResponse(headers={"date": "today"})
    )
    assert gemini_adapters.response_json(response) == {"response_id": "r1"}


# --------------------------------------------------------------------------------------------
# Totality

ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    1.5,
    True,
    "",
    "text",
    [],
    [None, 1, "x", [], {}],
    {},
    {"choices": None},
    {"choices": [None, 1, {"message": None}, {"message": {"tool_calls": [None, {"function": 1}]}}]},
    {"choices": [{"message": {"content": [None, 1, {"type": "text"}]}}], "usage": []},
    {"content": "x", "type": "message", "usage": {"input_tokens": -5, "output_tokens": "x"}},
    {"content": [None, {"type": "tool_use"}, {"type": "thinking", "thinking": 1}]},
    {"object": "response", "output": [None, {"type": "reasoning", "summary": [None, 1]}]},
    {"output": {"type": "message"}, "status": 7, "incomplete_details": "x"},
    {"model": 5, "id": 7, "usage": {"prompt_tokens": 1e400, "completion_tokens": float("nan")}},
    {"candidates": [None, {"content": 1}], "usage_metadata": [], "prompt_feedback": 3},
    {"candidates": [{"content": {"parts": [None, {"functionCall": 1}, {"thought": True}]}}]},
    {"output": {"message": {"content": [None, {"toolUse": 1}, {"reasoningContent": []}]}}},
    {"stopReason": 5, "usage": {"inputTokens": -1}, "body": [1]},
]

ODD_INPUTS: list[Any] = [
    {},
    {"model": ""},
    {"model": None, "messages": None},
    {"model": 3, "messages": "hi", "input": 5, "system": 7, "instructions": []},
    {"messages": [None, 1, "x", {"role": 1}, {"role": "user"}, {"role": "user", "content": 5}]},
    {"messages": [{"role": "assistant", "content": [None, {"type": "tool_use", "name": ""}]}]},
    {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": [None]}]}]},
    {"input": [None, {"type": "function_call"}, {"type": "reasoning", "summary": "x"}]},
    {"input": [{"type": "function_call_output", "output": [1]}, {"role": "assistant"}]},
    {"tools": [None, {"function": None}], "tool_choice": [1], "response_format": "json"},
    {"temperature": "hot", "top_p": True, "max_tokens": -3, "seed": 1.5, "stop": [1, "x"]},
    {"max_tokens": 1e300, "max_output_tokens": "x", "stop_sequences": "END", "text": []},
    {"system": [None, {"text": 1}, {"type": "text", "text": "ok"}]},
    {"contents": [None, 1, [None, 2], {"parts": 5}, {"role": 3}], "config": {"tools": [None]}},
    {"contents": {"text": 1}, "config": {"system_instruction": [None, 1], "tool_config": 7}},
    {"config": {"tools": [{"function_declarations": [None, {"name": ""}]}], "seed": "x"}},
    {"modelId": 5, "messages": [{"role": "user", "content": [{"toolResult": {"content": [1]}}]}]},
    {"toolConfig": {"tools": [None, {"toolSpec": None}], "toolChoice": 1}, "inferenceConfig": 2},
    {"modelId": "m", "body": "not json", "system": [{"text": None}]},
]

ALL_ADAPTERS: list[LlmAdapter] = [
    *NAMED_ADAPTERS.values(),
    GenericAdapter(None),
    GenericAdapter("acme"),
]


@pytest.mark.parametrize("adapter", ALL_ADAPTERS, ids=lambda a: getattr(a, "name", "?"))
def test_adapters_are_total(adapter: LlmAdapter) -> None:
    assert isinstance(adapter, LlmAdapter)
    for raw_input in ODD_INPUTS:
        llm_input = adapter.to_input(raw_input)
        assert isinstance(llm_input, LlmInput)
        assert llm_input.model
        LlmInput.model_validate(llm_input.model_dump(mode="json"))
        for raw_output in ODD_VALUES:
            llm_output = adapter.to_output(raw_output, llm_input)
            assert isinstance(llm_output, LlmOutput)
            assert llm_output.provider
            LlmOutput.model_validate(llm_output.model_dump(mode="json"))
            llm_span_attributes(llm_input, llm_output)


def test_an_adapter_bug_degrades_to_the_minimal_record(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = openai_adapters.OpenAIChatAdapter("openai")

    def broken(*args: object) -> Any:
        raise RuntimeError("unexpected shape")

    monkeypatch.setattr(adapter, "_input", broken)
    monkeypatch.setattr(adapter, "_output", broken)
    llm_input = adapter.to_input({"model": "gpt-4o", "messages": [{"role": "user"}]})
    assert (llm_input.model, llm_input.messages) == ("gpt-4o", [])
    assert llm_input.raw == {"model": "gpt-4o", "messages": [{"role": "user"}]}
    llm_output = adapter.to_output({"id": "x"}, llm_input)
    assert (llm_output.provider, llm_output.model, llm_output.model_source) == (
        "openai",
        "gpt-4o",
        "requested",
    )
    assert (llm_output.usage, llm_output.raw) == (None, {"id": "x"})
