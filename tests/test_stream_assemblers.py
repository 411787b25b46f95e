"""The provider stream assemblers: the chunks or events of a stream and the response assembled
from them are inverse, cut-short streams agree, and what is kept is bounded.
"""

from __future__ import annotations

from typing import Any

from chronicle.llm.anthropic_streams import MessagesStreamAssembler, message_events
from chronicle.llm.openai_streams import (
    ChatStreamAssembler,
    ResponsesStreamAssembler,
    chat_chunks,
    responses_events,
)
from chronicle.wire import shared_fields
from tests.test_streams import WEATHER

# ---- the provider assemblers ------------------------------------------------------------------


def test_chat_chunks_and_the_chat_assembler_are_inverse():
    completion: Any = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "service_tier": None,
        "system_fingerprint": "fp",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }
    assembler = ChatStreamAssembler()
    for chunk in chat_chunks(completion, include_usage=True) or []:
        assembler.add(chunk)
    assert assembler.result() == completion
    no_usage = ChatStreamAssembler()
    for chunk in chat_chunks(completion) or []:
        no_usage.add(chunk)
    assert no_usage.result() == {**completion, "usage": None}


def test_responses_events_and_the_responses_assembler_agree_even_when_cut_short():
    response: Any = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1-mini",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hi there", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Rome"}',
                "status": "completed",
            },
        ],
        "usage": None,
    }
    events = responses_events(response) or []
    whole = ResponsesStreamAssembler()
    for event in events:
        whole.add(event)
    assert whole.result() == response
    cut = ResponsesStreamAssembler()
    for event in events[:-2]:  # stopped before the last item closed and the response completed
        cut.add(event)
    partial: Any = cut.result()
    assert isinstance(partial, dict)
    assert partial["status"] == "in_progress"
    assert partial["output"][0]["content"][0]["text"] == "Hi there"
    assert partial["output"][1]["arguments"] == '{"city":"Rome"}'


def test_message_events_and_the_messages_assembler_are_inverse():
    message: Any = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": WEATHER},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2},
    }
    assembler = MessagesStreamAssembler()
    for event in message_events(message) or []:
        assembler.add(event)
    assert assembler.result() == message
    cut = MessagesStreamAssembler()
    for event in (message_events(message) or [])[:10]:  # the tool block never stopped
        cut.add(event)
    partial: Any = cut.result()
    assert isinstance(partial, dict)
    assert partial["content"][2]["input"] == WEATHER  # its one delta did arrive
    assert partial["stop_reason"] is None


def test_assemblers_keep_at_most_the_limit_of_text():
    assembler = ChatStreamAssembler(limit=10)
    for piece in ["abcd"] * 100:
        assembler.add({"choices": [{"index": 0, "delta": {"content": piece}}]})
    result: Any = assembler.result()
    assert isinstance(result, dict)
    assert result["choices"][0]["message"]["content"] == "abcdabcdab"


def test_shared_chunk_fields_come_back_exactly():
    chunks: list[Any] = [
        {"id": "a", "n": 1, "usage": None, "choices": [1]},
        {"id": "a", "n": 2, "usage": None},
        {"id": "a", "n": 3, "usage": {"total": 3}},
    ]
    shared, rest = shared_fields(chunks)
    assert all(isinstance(chunk, dict) for chunk in rest)
    assert shared == {"id": "a"}  # n differs, usage is not always null, choices is not a scalar
    assert rest == [
        {"n": 1, "usage": None, "choices": [1]},
        {"n": 2, "usage": None},
        {"n": 3, "usage": {"total": 3}},
    ]
    assert [{**shared, **chunk} for chunk in rest if isinstance(chunk, dict)] == chunks
    assert shared_fields([{"id": "a"}, {"other": 1}]) == ({}, [{"id": "a"}, {"other": 1}])
