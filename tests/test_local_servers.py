"""The local servers the suite runs against: the scripted model server and the control plane.

The real ``openai`` and ``anthropic`` clients must parse every scripted reply into their own
types (and raise their own exceptions for error replies), and ``LocalControlPlane`` must start,
store, restart and authenticate like the real service it is.
"""

from __future__ import annotations

import importlib.util
import json
import re
import secrets
import shutil
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

import chronicle.save.server
import chronicle.testing.local
from chronicle.errors import ControlPlaneError
from chronicle.testing import LocalControlPlane, LocalControlPlaneError
from tests.support import llm_replies
from tests.support.llm_server import LlmServer
from tests.support.stored import stored

USER: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
INTERNAL = {"chronicle.internal": True}


def _openai(server: LlmServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)


def _anthropic(server: LlmServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-test", max_retries=0
    )


def _http(
    method: str, url: str, *, json: Any = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    """One plain request, marked as Chronicle's own (as a test's setup traffic should be)."""
    with httpx.Client(timeout=10) as client:
        return client.request(method, url, json=json, headers=headers, extensions=INTERNAL)


def _trace_id() -> str:
    return secrets.token_hex(16)


def _envelope(trace_id: str, span_id: str, sequence: int) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "envelope_id": secrets.token_hex(8),
        "span_id": span_id,
        "trace_id": trace_id,
        "name": "tool.lookup",
        "kind": "tool",
        "envelope_status": {
            "state": "closed",
            "status": "success",
            "started_at": now,
            "ended_at": now,
        },
        "input": {"raw": {"q": sequence}},
        "output": {"raw": sequence},
        "metadata": {"chronicle.sequence": sequence},
    }


# ---- LlmServer: every builder is a valid body of its API ----------------------------------


@pytest.mark.parametrize(
    ("reply", "model"),
    [
        (llm_replies.chat_text("hi"), ChatCompletion),
        (
            llm_replies.chat_text(
                "hi", usage=llm_replies.chat_usage(3, 4, cached_tokens=1, reasoning_tokens=2)
            ),
            ChatCompletion,
        ),
        (llm_replies.chat_tool_calls(llm_replies.tool_call("f", {"a": 1})), ChatCompletion),
        (llm_replies.chat_refusal(), ChatCompletion),
        (llm_replies.responses_text("hi"), Response),
        (
            llm_replies.responses_tool_calls(llm_replies.tool_call("f", {"a": 1}), text="calling"),
            Response,
        ),
        (llm_replies.responses_refusal(), Response),
        (
            llm_replies.messages_text(
                "hi", usage=llm_replies.messages_usage(3, 4, cache_read_input_tokens=2)
            ),
            Message,
        ),
        (
            llm_replies.messages_tool_use(llm_replies.tool_call("f", {"a": 1}), text="calling"),
            Message,
        ),
        (llm_replies.messages_refusal(), Message),
    ],
)
def test_builders_validate_strictly_against_the_sdk_types(
    llm_server: LlmServer, reply: llm_replies.Reply, model: Any
) -> None:
    llm_server.reply_with(reply)
    path = {
        "chat": "/v1/chat/completions",
        "responses": "/v1/responses",
        "messages": "/v1/messages",
    }
    with httpx.Client(base_url=llm_server.url) as client:
        body = client.post(path[reply.api], json={"model": "m", "messages": USER}).json()
    model.model_validate(body)  # full pydantic validation, not the SDKs' lenient construct


# ---- LlmServer with the OpenAI client: Chat Completions ------------------------------------


def test_chat_default_reply_echoes_the_last_user_message(llm_server: LlmServer) -> None:
    with _openai(llm_server) as client:
        completion = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == "echo: What is the weather in Paris?"
    assert completion.model == "gpt-4o"
    request = llm_server.last_request
    assert (request.method, request.path, request.api) == ("POST", "/v1/chat/completions", "chat")
    assert request.body["messages"] == USER
    assert request.headers["authorization"] == "Bearer sk-test"
    assert llm_server.request_count == 1


def test_chat_text_with_usage_details(llm_server: LlmServer) -> None:
    usage = llm_replies.chat_usage(120, 30, cached_tokens=100, reasoning_tokens=12)
    llm_server.reply_with(llm_replies.chat_text("Sunny.", usage=usage))
    with _openai(llm_server) as client:
        completion = client.chat.completions.create(model="o3-mini", messages=USER)
    assert completion.choices[0].message.content == "Sunny."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (120, 30)
    assert completion.usage.total_tokens == 150
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 100
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 12
    assert llm_server.pending() == 0


def test_chat_tool_calls(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.chat_tool_calls(
            llm_replies.tool_call("get_weather", {"city": "Paris"}, id="call_1"),
            llm_replies.tool_call("get_time", {"tz": "CET"}),
        )
    )
    with _openai(llm_server) as client:
        completion = client.chat.completions.create(model="gpt-4o", messages=USER)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]  # type: ignore[union-attr]
    assert calls[0].id == "call_1"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert calls[1].id.startswith("call_")


def test_chat_refusal(llm_server: LlmServer) -> None:
    llm_server.reply_with(llm_replies.chat_refusal("I can't help with that."))
    with _openai(llm_server) as client:
        completion = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert completion.choices[0].message.content is None
    assert completion.choices[0].message.refusal == "I can't help with that."


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_chat_error_raises_the_sdk_exception(
    llm_server: LlmServer, status: int, error_type: type[openai.APIStatusError]
) -> None:
    llm_server.reply_with(llm_replies.chat_error(status, "scripted failure"))
    with _openai(llm_server) as client, pytest.raises(error_type) as caught:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert caught.value.status_code == status
    assert "scripted failure" in caught.value.message
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == "scripted failure"
    assert caught.value.request_id is not None
    assert llm_server.request_count == 1  # max_retries=0: no retry


def test_chat_streaming_text_with_usage(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.chat_text(
            "Sunny and warm.", usage=llm_replies.chat_usage(9, 4, cached_tokens=2)
        )
    )
    with _openai(llm_server) as client:
        stream = client.chat.completions.create(
            model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Sunny and warm."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens_details is not None
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 2
    assert llm_server.last_request.stream


def test_chat_streaming_tool_calls_through_the_stream_helper(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.chat_tool_calls(
            llm_replies.tool_call("get_weather", {"city": "Paris"}, id="c1")
        )
    )
    with (
        _openai(llm_server) as client,
        client.chat.completions.stream(model="gpt-4o", messages=USER) as stream,
    ):
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].id == "c1"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_streaming_refusal_and_early_close(llm_server: LlmServer) -> None:
    llm_server.reply_with(llm_replies.chat_refusal("No."))
    with _openai(llm_server) as client:
        with client.chat.completions.stream(model="gpt-4o", messages=USER) as stream:
            final = stream.get_final_completion()
        partial = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        next(iter(partial))
        partial.close()  # the client walks away mid-stream; the server copes
        after = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert final.choices[0].message.refusal == "No."
    assert final.choices[0].message.content is None
    assert after.choices[0].message.content == "echo: What is the weather in Paris?"


def test_chat_streaming_error_is_raised_before_the_stream(llm_server: LlmServer) -> None:
    llm_server.reply_with(llm_replies.chat_error(429, "slow down"))
    with _openai(llm_server) as client, pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)


# ---- LlmServer with the OpenAI client: Responses -------------------------------------------


def test_responses_default_and_text_with_usage(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.responses_text(
            "Sunny.",
            usage=llm_replies.responses_usage(50, 20, cached_tokens=40, reasoning_tokens=8),
        )
    )
    with _openai(llm_server) as client:
        scripted = client.responses.create(model="gpt-4.1", input="Weather?")
        echoed = client.responses.create(
            model="gpt-4.1",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi there"}]}],
        )
    assert isinstance(scripted, Response)
    assert scripted.output_text == "Sunny."
    assert scripted.model == "gpt-4.1"
    assert scripted.usage is not None
    assert scripted.usage.input_tokens_details.cached_tokens == 40
    assert scripted.usage.output_tokens_details.reasoning_tokens == 8
    assert echoed.output_text == "echo: Hi there"
    assert [r.path for r in llm_server.requests] == ["/v1/responses", "/v1/responses"]


def test_responses_tool_calls_and_refusal(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.responses_tool_calls(
            llm_replies.tool_call("get_weather", {"city": "Paris"}, id="call_9")
        ),
        llm_replies.responses_refusal("No."),
    )
    with _openai(llm_server) as client:
        calls = client.responses.create(model="gpt-4.1", input="Weather?")
        refused = client.responses.create(model="gpt-4.1", input="Something bad")
    item = calls.output[0]
    assert item.type == "function_call"
    assert (item.name, item.call_id, json.loads(item.arguments)) == (
        "get_weather",
        "call_9",
        {"city": "Paris"},
    )
    message = refused.output[0]
    assert message.type == "message"
    assert message.content[0].type == "refusal"
    assert message.content[0].refusal == "No."


def test_responses_error(llm_server: LlmServer) -> None:
    llm_server.reply_with(llm_replies.responses_error(400, "bad input", param="input"))
    with _openai(llm_server) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-4.1", input="x")
    assert caught.value.param == "input"


def test_responses_streaming(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.responses_text("Sunny and warm."),
        llm_replies.responses_tool_calls(
            llm_replies.tool_call("get_weather", {"city": "Paris"}), text="Checking."
        ),
    )
    with _openai(llm_server) as client:
        events = list(client.responses.create(model="gpt-4.1", input="Weather?", stream=True))
        with client.responses.stream(model="gpt-4.1", input="Weather?") as stream:
            for _ in stream:
                pass
            final = stream.get_final_response()
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "Sunny and warm."
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for event in events:  # the SDK builds events leniently; validate each one strictly
        type(event).model_validate(event.model_dump(mode="json", by_alias=True))
    assert final.output_text == "Checking."
    assert final.output[1].type == "function_call"
    assert json.loads(final.output[1].arguments) == {"city": "Paris"}


# ---- LlmServer with the Azure OpenAI client ------------------------------------------------


def test_azure_chat_and_responses_paths(llm_server: LlmServer) -> None:
    llm_server.reply_with(llm_replies.chat_text("from azure"))
    with openai.AzureOpenAI(
        azure_endpoint=llm_server.azure_endpoint,
        api_version="2024-10-21",
        api_key="azure-key",
        max_retries=0,
    ) as client:
        completion = client.chat.completions.create(model="my-gpt4o", messages=USER)
        response = client.responses.create(model="my-gpt4o", input="Hello")
    assert completion.choices[0].message.content == "from azure"
    assert completion.model == "my-gpt4o"
    assert response.output_text == "echo: Hello"
    chat, responses = llm_server.requests
    assert chat.path == "/openai/deployments/my-gpt4o/chat/completions"
    assert chat.deployment == "my-gpt4o"
    assert chat.query["api-version"] == ["2024-10-21"]
    assert chat.headers["api-key"] == "azure-key"
    assert responses.path == "/openai/responses"
    assert responses.query["api-version"] == ["2024-10-21"]


def test_azure_client_with_a_deployment(llm_server: LlmServer) -> None:
    with openai.AzureOpenAI(
        azure_endpoint=llm_server.azure_endpoint,
        azure_deployment="dep-1",
        api_version="2024-10-21",
        api_key="azure-key",
        max_retries=0,
    ) as client:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert llm_server.last_request.path == "/openai/deployments/dep-1/chat/completions"
    assert llm_server.last_request.deployment == "dep-1"


# ---- LlmServer with the Anthropic client ---------------------------------------------------


def test_messages_default_text_and_cache_usage(llm_server: LlmServer) -> None:
    usage = llm_replies.messages_usage(
        200, 40, cache_read_input_tokens=150, cache_creation_input_tokens=25
    )
    llm_server.reply_with(llm_replies.messages_text("Sunny.", usage=usage))
    with _anthropic(llm_server) as client:
        message = client.messages.create(model="claude-x", max_tokens=100, messages=USER)
        echoed = client.messages.create(
            model="claude-x",
            max_tokens=100,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        )
    assert isinstance(message, Message)
    assert message.content[0].type == "text"
    assert message.content[0].text == "Sunny."
    assert message.model == "claude-x"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (200, 40)
    assert message.usage.cache_read_input_tokens == 150
    assert message.usage.cache_creation_input_tokens == 25
    assert echoed.content[0].text == "echo: Hi"  # type: ignore[union-attr]
    request = llm_server.requests[0]
    assert (request.path, request.api) == ("/v1/messages", "messages")
    # this SDK version sends the key as a bearer token; older ones send x-api-key
    sent = request.headers.get("x-api-key") or request.headers.get("authorization", "")
    assert sent.removeprefix("Bearer ") == "sk-ant-test"
    assert "anthropic-version" in request.headers


def test_messages_tool_use_and_refusal(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.messages_tool_use(
            llm_replies.tool_call("get_weather", {"city": "Paris"}, id="toolu_1"),
            text="Let me check.",
        ),
        llm_replies.messages_refusal(),
    )
    with _anthropic(llm_server) as client:
        tool = client.messages.create(model="claude-x", max_tokens=100, messages=USER)
        refused = client.messages.create(model="claude-x", max_tokens=100, messages=USER)
    assert tool.stop_reason == "tool_use"
    assert [block.type for block in tool.content] == ["text", "tool_use"]
    block = tool.content[1]
    assert block.type == "tool_use"
    assert (block.id, block.name, block.input) == ("toolu_1", "get_weather", {"city": "Paris"})
    assert refused.stop_reason == "refusal"
    assert refused.content == []


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, anthropic.BadRequestError),
        (401, anthropic.AuthenticationError),
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (529, anthropic.InternalServerError),  # OverloadedError, where the SDK has it
    ],
)
def test_messages_error_raises_the_sdk_exception(
    llm_server: LlmServer, status: int, error_type: type[anthropic.APIStatusError]
) -> None:
    llm_server.reply_with(llm_replies.messages_error(status, "scripted failure"))
    with _anthropic(llm_server) as client, pytest.raises(error_type) as caught:
        client.messages.create(model="claude-x", max_tokens=100, messages=USER)
    assert caught.value.status_code == status
    assert "scripted failure" in caught.value.message
    assert caught.value.request_id is not None
    assert llm_server.request_count == 1


def test_messages_streaming_refusal(llm_server: LlmServer) -> None:
    llm_server.reply_with(llm_replies.messages_refusal("Partial"))
    with (
        _anthropic(llm_server) as client,
        client.messages.stream(model="claude-x", max_tokens=100, messages=USER) as stream,
    ):
        final = stream.get_final_message()
    assert final.stop_reason == "refusal"
    assert [block.type for block in final.content] == ["text"]


def test_messages_streaming(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.messages_text(
            "Sunny and warm.", usage=llm_replies.messages_usage(12, 6, cache_read_input_tokens=4)
        ),
        llm_replies.messages_tool_use(
            llm_replies.tool_call("get_weather", {"city": "Paris"}), text="Checking."
        ),
    )
    with _anthropic(llm_server) as client:
        events = list(
            client.messages.create(model="claude-x", max_tokens=100, messages=USER, stream=True)
        )
        with client.messages.stream(model="claude-x", max_tokens=100, messages=USER) as stream:
            for _ in stream:
                pass
            final = stream.get_final_message()
    assert (events[0].type, events[-1].type) == ("message_start", "message_stop")
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Sunny and warm."
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.output_tokens == 6
    assert delta.delta.stop_reason == "end_turn"
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"


def test_streams_split_text_into_the_asked_number_of_deltas(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.streamed(llm_replies.chat_text("abcdefghij"), deltas=5),
        llm_replies.streamed(
            llm_replies.messages_tool_use(llm_replies.tool_call("f", {"x": 12345})), deltas=4
        ),
    )
    with _openai(llm_server) as client:
        chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert pieces == ["ab", "cd", "ef", "gh", "ij"]
    with _anthropic(llm_server) as client:
        events = list(
            client.messages.create(model="claude-x", max_tokens=9, messages=USER, stream=True)
        )
    partial = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(partial) == 4
    assert json.loads("".join(partial)) == {"x": 12345}


def test_streams_fail_part_way_as_the_sdks_see_it(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.streamed(llm_replies.chat_text("abcdef"), deltas=3, fail_after=2),
        llm_replies.streamed(
            llm_replies.chat_text("abcdef"), deltas=3, fail_after=2, failure="disconnect"
        ),
        llm_replies.streamed(llm_replies.messages_text("abcdef"), deltas=3, fail_after=3),
    )
    with _openai(llm_server) as client:
        received: list[Any] = []
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        with pytest.raises(openai.APIError, match="stream interrupted"):
            received.extend(stream)
        assert len(received) == 2
        with pytest.raises(openai.APIConnectionError):
            list(client.chat.completions.create(model="m", messages=USER, stream=True))
    with _anthropic(llm_server) as client:
        events = client.messages.create(model="claude-x", max_tokens=9, messages=USER, stream=True)
        with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
            list(events)


# ---- LlmServer: bookkeeping ------------------------------------------------------------------


def test_unknown_path_is_a_404_and_is_recorded(llm_server: LlmServer) -> None:
    with httpx.Client(base_url=llm_server.url) as client:
        response = client.post("/v1/embeddings", json={"input": "x"})
        not_json = client.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 404
    assert "no route" in response.json()["error"]["message"]
    assert not_json.status_code == 400
    assert [r.api for r in llm_server.requests] == [None, "chat"]


def test_replies_are_queued_per_api_and_reset(llm_server: LlmServer) -> None:
    llm_server.reply_with(
        llm_replies.messages_text("anthropic"),
        llm_replies.chat_text("first"),
        llm_replies.chat_text("second"),
    )
    assert llm_server.pending() == 3
    assert llm_server.pending("chat") == 2
    with _openai(llm_server) as client:
        texts = [
            client.chat.completions.create(model="m", messages=USER).choices[0].message.content
            for _ in range(3)
        ]
    assert texts == ["first", "second", "echo: What is the weather in Paris?"]
    assert llm_server.pending() == 1
    llm_server.reset()
    assert (llm_server.pending(), llm_server.request_count) == (0, 0)


# ---- LocalControlPlane ---------------------------------------------------------------------


def test_control_plane_starts_and_reports_health(
    fresh_control_plane: LocalControlPlane,
) -> None:
    control_plane = fresh_control_plane  # its own log: the shared one's tail is other tests' lines
    health = control_plane.health()
    assert health["status"] == "ok"
    assert health["service"] == "control-plane"
    assert control_plane.running
    assert control_plane.url == f"http://127.0.0.1:{control_plane.port}"
    assert control_plane.api_key is None
    assert control_plane.database_path.exists()
    assert "Uvicorn running" in control_plane.log_tail()


def test_posted_trace_is_found_by_search(control_plane: LocalControlPlane) -> None:
    trace_id = _trace_id()
    body = {
        "trace_id": trace_id,
        "state": "open",
        "metadata": {"session_id": "s1", "team": trace_id},
    }
    response = _http("POST", f"{control_plane.url}/v1/traces", json=body)
    assert response.status_code == 201
    assert trace_id in [t["trace_id"] for t in control_plane.search(session_id="s1")]
    by_label = control_plane.search(team=trace_id)
    assert [t["trace_id"] for t in by_label] == [trace_id]
    assert control_plane.search(session_id="s1", team="other") == []
    found = control_plane.trace(trace_id)
    assert found is not None
    assert found["metadata"] == {"session_id": "s1", "team": trace_id}
    assert control_plane.trace(_trace_id()) is None
    assert control_plane.trace_envelopes(_trace_id()) == []


def test_envelopes_are_read_back_and_waited_for(control_plane: LocalControlPlane) -> None:
    trace_id, span_id = _trace_id(), secrets.token_hex(8)
    envelopes = [_envelope(trace_id, span_id, n) for n in (1, 2)]
    response = _http(
        "POST",
        f"{control_plane.url}/v1/envelopes:batch",
        json={"envelopes": envelopes},
    )
    assert response.status_code == 201
    stored = control_plane.wait_for_envelopes(trace_id, 2, timeout=5)
    assert {e["envelope_id"] for e in stored} == {e["envelope_id"] for e in envelopes}
    in_span = control_plane.span_envelopes(trace_id, span_id)
    assert [e["output"]["raw"] for e in in_span] == [1, 2]
    with pytest.raises(TimeoutError, match="holds 2 envelope"):
        control_plane.wait_for_envelopes(trace_id, 3, timeout=0.2)


def test_stored_shows_a_new_trace_and_an_envelope_added_to_a_span_it_holds(
    control_plane: LocalControlPlane,
) -> None:
    """tests/support/stored.py, which the replay tests read before and after a replay to show
    it wrote nothing (a snapshot() of the shared control plane costs more as the run goes)."""
    trace_id, span_id = _trace_id(), secrets.token_hex(8)
    body = {"trace_id": trace_id, "state": "open", "metadata": {"session_id": "stored"}}
    _http("POST", f"{control_plane.url}/v1/traces", json=body).raise_for_status()

    def add(sequence: int) -> None:
        envelopes = [_envelope(trace_id, span_id, sequence)]
        url = f"{control_plane.url}/v1/envelopes:batch"
        _http("POST", url, json={"envelopes": envelopes}).raise_for_status()

    add(1)
    before = stored(control_plane, trace_id)
    assert [e["output"]["raw"] for e in before["traces"][trace_id]["envelopes"]] == [1]
    assert stored(control_plane, trace_id) == before  # reading writes nothing
    add(2)  # into the span the trace holds: its summary is the same, its envelopes are not
    grown = stored(control_plane, trace_id)
    assert grown["traces"] != before["traces"]
    other = {"trace_id": _trace_id(), "state": "open", "metadata": {"session_id": "stored"}}
    _http("POST", f"{control_plane.url}/v1/traces", json=other).raise_for_status()
    assert stored(control_plane)["summaries"] != grown["summaries"]  # a new trace


def test_stop_and_start_keep_the_data_and_the_port(
    fresh_control_plane: LocalControlPlane,
) -> None:
    cp = fresh_control_plane
    assert cp.snapshot() == {"traces": {}}
    trace_id = _trace_id()
    _http(
        "POST",
        f"{cp.url}/v1/traces",
        json={"trace_id": trace_id, "state": "open", "metadata": {"session_id": "s1"}},
    ).raise_for_status()
    before = cp.snapshot()
    assert list(before["traces"]) == [trace_id]
    port, url = cp.port, cp.url

    cp.stop()
    assert not cp.running
    with pytest.raises(httpx.ConnectError):
        _http("GET", f"{url}/health")
    with pytest.raises(ControlPlaneError, match="nothing answers at"):
        cp.health()
    cp.stop()  # idempotent

    cp.start()
    assert (cp.port, cp.url) == (port, url)
    assert cp.snapshot() == before
    assert [t["trace_id"] for t in cp.search(session_id="s1")] == [trace_id]


def test_api_keys_require_the_bearer_token() -> None:
    with LocalControlPlane(api_keys="secret1:local:ingest+read") as cp:
        assert cp.api_key == "secret1"
        anonymous = _http("GET", f"{cp.url}/v1/traces")
        assert anonymous.status_code == 401
        wrong = _http("GET", f"{cp.url}/v1/traces", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        trace_id = _trace_id()
        _http(
            "POST",
            f"{cp.url}/v1/traces",
            json={"trace_id": trace_id, "state": "open", "metadata": {"session_id": "s1"}},
            headers={"authorization": "Bearer secret1"},
        ).raise_for_status()
        assert cp.health()["status"] == "ok"  # /health is unauthenticated anyway
        assert [t["trace_id"] for t in cp.search(session_id="s1")] == [trace_id]
        assert cp.trace(trace_id) is not None
        assert list(cp.snapshot()["traces"]) == [trace_id]


def test_unauthorized_read_raises_control_plane_error() -> None:
    with LocalControlPlane(env={"CONTROL_PLANE_API_KEYS": "k2:local:ingest"}) as cp:
        assert cp.api_key == "k2"
        with pytest.raises(ControlPlaneError) as caught:
            cp.search()
    assert caught.value.status_code == 403


def test_a_taken_port_fails_with_the_server_output() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        taken.listen()
        cp = LocalControlPlane(port=port)
        try:
            with pytest.raises(LocalControlPlaneError, match="is taken") as caught:
                cp.start(timeout=20)
            assert "address already in use" in str(caught.value).lower()
            assert not cp.running
        finally:
            cp.close()


def test_a_port_lost_to_a_race_is_retried_on_a_new_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        lost = taken.getsockname()[1]
        picks = iter([lost])
        real_free_port = chronicle.save.server._free_port
        monkeypatch.setattr(
            chronicle.save.server, "_free_port", lambda: next(picks, None) or real_free_port()
        )
        with LocalControlPlane() as cp:
            assert cp.port != lost
            assert cp.health()["status"] == "ok"
            assert "address already in use" in cp.log_path.read_text().lower()


def test_inherited_control_plane_settings_are_not_passed_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTROL_PLANE_API_KEYS", "outer:local:ingest+read")
    with LocalControlPlane() as cp:
        assert cp.api_key is None
        assert cp.search() == []  # open: the outer key was not passed to the server


def test_missing_package_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name.startswith("control_plane") else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    cp = LocalControlPlane()
    with pytest.raises(LocalControlPlaneError, match=re.escape("pip install -e '.[dev]'")):
        cp.start()
    assert not cp.running
    cp.close()


def test_the_console_script_is_used_when_the_module_is_not_runnable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Path(sys.executable).parent / "control-plane"
    if not script.is_file():
        pytest.skip("no control-plane script beside the interpreter")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "control_plane.__main__" else real_find_spec(name, *a),
    )
    assert chronicle.save.server._server_command() == [str(script)]
