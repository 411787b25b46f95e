"""``chronicle.wrap(boto3.client("bedrock-runtime"))``: the real boto3 client against ``LlmServer``.

The client gets fake credentials and an ``endpoint_url`` on loopback, with retries and the
instance-metadata lookup off, so nothing reaches AWS. Every call is recorded to the real control
plane and replayed with no request, as the dict boto3 returns. ``converse_stream`` and
``invoke_model_with_response_stream`` are tested in ``test_provider_streams.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError
from botocore.response import StreamingBody
from pydantic import JsonValue

import chronicle
from chronicle.llm.bedrock_streams import (
    ConverseStreamAssembler,
    InvokeStreamAssembler,
    converse_events,
    invoke_events,
)
from tests.support.calls import buckets, recorded_tool_call
from tests.support.llm_server import (
    LlmServer,
    converse_error,
    converse_text,
    converse_tool_use,
    converse_usage,
    messages_text,
    messages_tool_use,
    messages_usage,
    streamed,
    tool_call,
)
from tests.support.recording import drain, only, replay_of, streamed_metadata

CONVERSE = "bedrock.converse"
INVOKE = "bedrock.invoke_model"
MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
USER = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]


@pytest.fixture
def bedrock(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=llm_server.bedrock_endpoint_url,
        config=Config(retries={"total_max_attempts": 1}),
    )
    yield client
    client.close()


def test_wrap_replaces_converse_and_invoke_model_in_place(bedrock):
    assert chronicle.wrap(bedrock) is bedrock
    assert bedrock.converse.__chronicle_boundary__.name == CONVERSE
    assert bedrock.invoke_model.__chronicle_boundary__.name == INVOKE
    assert bedrock.converse.__chronicle_boundary__.provider == "bedrock"
    assert bedrock.converse_stream.__chronicle_boundary__.name == CONVERSE  # one name for both
    assert bedrock.invoke_model_with_response_stream.__chronicle_boundary__.name == INVOKE
    assert chronicle.wrap(bedrock).converse is bedrock.converse  # twice: unchanged


def sunny_reply() -> Any:
    """A Converse answer with reasoning and cached tokens (``SUNNY_CONTENT``, ``SUNNY_USAGE``)."""
    usage = converse_usage(40, 6, cache_read_input_tokens=300, cache_write_input_tokens=20)
    return converse_text("Sunny, 24C.", reasoning="Check the sky.", usage=usage)


SUNNY_CONTENT: list[dict[str, Any]] = [
    {"type": "reasoning", "text": "Check the sky."},
    {"type": "text", "text": "Sunny, 24C."},
]
SUNNY_USAGE = {"input": 40, "cached_read": 300, "cache_write": 20, "output": 6, "reasoning": 0}
"""``sunny_reply``'s canonical content and usage, streamed or not."""


def test_converse_is_recorded_and_replayed_as_the_boto3_dict(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    llm_server.reply_with(sunny_reply())
    arguments: dict[str, Any] = {
        "modelId": MODEL,
        "messages": USER,
        "system": [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.3, "stopSequences": ["END"]},
    }
    with chronicle.record("bedrock") as session:
        live = bedrock.converse(**arguments)
    assert live["output"]["message"]["content"][-1]["text"] == "Sunny, 24C."
    assert llm_server.last_request.path_model == MODEL

    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == CONVERSE
    assert envelope["input"]["raw"] == arguments
    assert envelope["input"]["model"] == MODEL
    assert envelope["input"]["system"] == "Be brief."
    assert envelope["input"]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]}
    ]
    assert envelope["input"]["params"] == {"temperature": 0.3, "max_tokens": 256, "stop": ["END"]}
    output = envelope["output"]
    assert output["provider"] == "bedrock"
    assert (output["model"], output["model_source"]) == (MODEL, "requested")
    assert output["finish_reason"] == "stop"
    assert output["content"] == SUNNY_CONTENT
    assert output["usage"] == SUNNY_USAGE
    assert output["raw"] == live  # the whole dict, ResponseMetadata included
    metadata = envelope["metadata"]
    assert metadata["client.library"] == "boto3"
    assert metadata["client.version"] == boto3.__version__
    assert metadata["client.region"] == "us-east-1"
    assert metadata["client.base_url"] == llm_server.url

    before = llm_server.request_count
    with replay_of(session) as run:
        replayed = bedrock.converse(**arguments)
    assert llm_server.request_count == before  # no request
    assert type(replayed) is dict
    assert replayed == live
    assert [(c.name, c.mode) for c in run.call_log()] == [(CONVERSE, "stub")]


def test_tool_use_and_tool_results_round_trip(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    tool_config = {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "inputSchema": {"json": {"type": "object"}},
                }
            }
        ],
        "toolChoice": {"tool": {"name": "get_weather"}},
    }
    llm_server.reply_with(
        converse_tool_use(tool_call("get_weather", {"city": "Paris"}, id="tooluse_1")),
        converse_text("It is 24C."),
    )
    with chronicle.record("bedrock-tools") as session:
        first = bedrock.converse(modelId=MODEL, messages=USER, toolConfig=tool_config)
        result = {
            "toolResult": {
                "toolUseId": "tooluse_1",
                "content": [{"json": {"temp_c": 24}}],
                "status": "success",
            }
        }
        history = [*USER, first["output"]["message"], {"role": "user", "content": [result]}]
        bedrock.converse(modelId=MODEL, messages=history, toolConfig=tool_config)
    asked, answered = recording.saved(session.trace_id, 2)
    assert asked["input"]["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object"},
        }
    ]
    assert asked["input"]["tool_choice"] == {"name": "get_weather"}
    assert asked["output"]["finish_reason"] == "tool_calls"
    assert asked["output"]["content"] == [
        recorded_tool_call("tooluse_1", "get_weather", {"city": "Paris"})
    ]
    assert answered["input"]["messages"][-1] == {
        "role": "tool",
        "content": [{"type": "text", "text": '{"temp_c": 24}'}],
        "tool_call_id": "tooluse_1",
    }
    with replay_of(session):
        again = bedrock.converse(modelId=MODEL, messages=USER, toolConfig=tool_config)
    assert again["output"]["message"] == first["output"]["message"]


def test_a_guardrail_stop_is_a_content_filter_finish(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    llm_server.reply_with(
        converse_text("Sorry, the model cannot answer.", stop_reason="guardrail_intervened")
    )
    with chronicle.record("bedrock-guardrail") as session:
        bedrock.converse(modelId=MODEL, messages=USER)
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["output"]["finish_reason"] == "content_filter"


def test_a_service_error_is_recorded_and_replays_as_its_modeled_exception(
    bedrock, llm_server, recording
):
    chronicle.wrap(bedrock)

    def agent() -> tuple[Any, ...]:
        try:
            bedrock.converse(modelId=MODEL, messages=USER)
        except bedrock.exceptions.ThrottlingException as error:  # the agent's own except
            metadata = error.response["ResponseMetadata"]
            return ("back off", str(error), error.operation_name, metadata["HTTPStatusCode"])
        except ClientError as error:
            return ("client error", error.response["Error"]["Code"], str(error))
        return ("no error",)

    llm_server.reply_with(
        converse_error(429, "Too many requests, please wait."),
        converse_error(400, "The model does not exist."),
    )
    with chronicle.record("bedrock-error") as session:
        live = [agent(), agent()]
        llm_server.reply_with(converse_error(400, "The model does not exist."))
        with pytest.raises(bedrock.exceptions.ValidationException) as raised_live:
            bedrock.converse(modelId=MODEL, messages=USER)
    assert live[0] == (
        "back off",
        "An error occurred (ThrottlingException) when calling the Converse operation (reached "
        "max retries: 0): Too many requests, please wait.",
        "Converse",
        429,
    )
    assert live[1][:2] == ("client error", "ValidationException")
    envelope, _, _ = recording.saved(session.trace_id, 3)
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "ThrottlingException"
    assert "Too many requests" in envelope["output"]["error"]["message"]
    recorded = envelope["metadata"]["chronicle.error"]["response"]
    assert recorded["Error"]["Code"] == "ThrottlingException"
    assert "authorization" not in recorded["ResponseMetadata"]["HTTPHeaders"]
    before = llm_server.request_count
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        assert [agent(), agent()] == live
        with pytest.raises(bedrock.exceptions.ValidationException) as raised:
            bedrock.converse(modelId=MODEL, messages=USER)
    assert llm_server.request_count == before
    assert raised.value.response["Error"] == raised_live.value.response["Error"]
    assert isinstance(raised.value.__cause__, chronicle.RecordedCallError)  # says it replayed


def anthropic_body(text: str) -> str:
    return json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 128,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": text}],
        }
    )


def test_invoke_model_with_an_anthropic_body_is_recorded_and_replayed(
    bedrock, llm_server, recording
):
    chronicle.wrap(bedrock)
    llm_server.reply_with(
        messages_text("Bonjour.", usage=messages_usage(30, 4, cache_read_input_tokens=12))
    )
    with chronicle.record("bedrock-invoke") as session:
        live = bedrock.invoke_model(modelId=MODEL, body=anthropic_body("Say hello in French"))
    assert isinstance(live["body"], StreamingBody)
    live_body = json.loads(live["body"].read())  # the caller reads the body as before
    assert live_body["content"] == [{"type": "text", "text": "Bonjour."}]

    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == INVOKE
    assert envelope["input"]["raw"]["body"] == json.loads(anthropic_body("Say hello in French"))
    assert envelope["input"]["model"] == MODEL
    assert envelope["input"]["system"] == "Be brief."
    assert envelope["input"]["params"] == {"max_tokens": 128}
    output = envelope["output"]
    assert output["provider"] == "bedrock"
    assert output["content"] == [{"type": "text", "text": "Bonjour."}]
    assert output["finish_reason"] == "stop"
    assert output["usage"]["cached_read"] == 12
    assert output["raw"]["body"] == live_body
    assert output["raw"]["contentType"] == "application/json"

    before = llm_server.request_count
    with replay_of(session):
        replayed = bedrock.invoke_model(modelId=MODEL, body=anthropic_body("Say hello in French"))
    assert llm_server.request_count == before
    assert isinstance(replayed["body"], StreamingBody)
    assert json.loads(replayed["body"].read()) == live_body
    assert replayed["contentType"] == "application/json"


def test_invoke_model_with_another_body_passes_through(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    titan = json.dumps({"inputText": "hello", "textGenerationConfig": {"maxTokenCount": 20}})
    with chronicle.record("bedrock-titan") as session:
        bedrock.invoke_model(modelId="amazon.titan-text-express-v1", body=titan)
        bedrock.converse(modelId=MODEL, messages=USER)
    assert llm_server.request_count == 2
    assert only(recording.saved(session.trace_id, 1))["name"] == CONVERSE


# ---- converse_stream and invoke_model_with_response_stream ------------------------------------

WEATHER: dict[str, JsonValue] = {"city": "Paris", "unit": "celsius"}


def test_a_converse_stream_is_one_envelope_with_the_converse_response(
    bedrock, llm_server, recording
):
    chronicle.wrap(bedrock)
    reply = sunny_reply()
    llm_server.reply_with(streamed(reply, deltas=3), reply)
    arguments: dict[str, Any] = {
        "modelId": MODEL,
        "messages": USER,
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 256},
    }
    with chronicle.record("converse-stream") as session:
        response = bedrock.converse_stream(**arguments)
        events = list(response["stream"])
        plain = bedrock.converse(**arguments)  # the same reply, not streamed
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    assert "".join(d.get("text", "") for d in deltas) == "Sunny, 24C."
    assert len(deltas) == 7  # really streamed, in pieces (and the signature)

    streamed_env, plain_env = recording.saved(session.trace_id, 2)
    assert streamed_env["name"] == plain_env["name"] == CONVERSE
    assert streamed_env["input"]["raw"] == arguments
    output = streamed_env["output"]
    for key in ("content", "finish_reason", "usage", "model", "provider"):
        assert output[key] == plain_env["output"][key], key
    assert output["content"] == SUNNY_CONTENT
    assert output["usage"] == SUNNY_USAGE
    # the converse response, less ResponseMetadata (no event carries it)
    assert output["raw"] == {k: v for k, v in plain.items() if k != "ResponseMetadata"}
    metadata = streamed_metadata(streamed_env, len(events))
    assert metadata["chronicle.chunks"] == events

    before = llm_server.request_count
    with replay_of(session) as run:
        replayed = bedrock.converse_stream(**arguments)
        again = list(replayed["stream"])
        plain_again = bedrock.converse(**arguments)
    assert llm_server.request_count == before
    assert type(replayed) is dict
    assert replayed["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert again == events  # the same event dicts, in order
    assert plain_again == plain
    assert run.captured_result(CONVERSE, 1) == output["raw"]


def test_converse_stream_tool_input_deltas_are_assembled_and_shapes_are_served(
    bedrock, llm_server, recording
):
    chronicle.wrap(bedrock)
    tool_config = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}}]}
    llm_server.reply_with(
        streamed(converse_tool_use(tool_call("get_weather", WEATHER, id="tooluse_1")), deltas=5),
        converse_text("Recorded whole."),
    )
    with chronicle.record("converse-tools") as session:
        events = list(
            bedrock.converse_stream(modelId=MODEL, messages=USER, toolConfig=tool_config)["stream"]
        )
        whole = bedrock.converse(modelId=MODEL, messages=USER)
    pieces = [e for e in events if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})]
    assert len(pieces) == 5
    tools_env, _ = recording.saved(session.trace_id, 2)
    assert tools_env["output"]["finish_reason"] == "tool_calls"
    assert tools_env["output"]["content"] == [
        recorded_tool_call("tooluse_1", "get_weather", WEATHER)
    ]

    before = llm_server.request_count
    with replay_of(session):
        # recorded as a stream, asked whole: the assembled converse response
        assembled = bedrock.converse(modelId=MODEL, messages=USER, toolConfig=tool_config)
        # recorded whole, asked as a stream: the events rebuilt from the response
        rebuilt = list(bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"])
    assert llm_server.request_count == before
    assert assembled["output"]["message"]["content"] == [
        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": WEATHER}}
    ]
    folded = ConverseStreamAssembler()
    for event in rebuilt:
        folded.add(event)
    assert folded.result() == {k: v for k, v in whole.items() if k != "ResponseMetadata"}


def test_a_converse_stream_closed_or_failing_keeps_what_was_received(
    bedrock, llm_server, recording
):
    chronicle.wrap(bedrock)
    llm_server.reply_with(
        streamed(converse_text("abcdef"), deltas=3),
        streamed(converse_text("mnopqr"), deltas=3, fail_after=3),
    )
    received: list[Any] = []
    with chronicle.record("converse-early") as session:
        stream = bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"]
        first = [next(iter(stream)), next(iter(stream))]
        stream.close()
        stream = bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"]
        with pytest.raises(EventStreamError, match="stream interrupted"):
            drain(stream, received)
    assert first[1]["contentBlockDelta"]["delta"]["text"] == "ab"
    assert len(received) == 3

    closed, failed = recording.saved(session.trace_id, 2)
    assert closed["output"]["content"] == [{"type": "text", "text": "ab"}]
    assert streamed_metadata(closed, 2)["chronicle.incomplete"] is True
    assert failed["envelope_status"]["status"] == "failure"
    assert failed["output"]["error"]["type"] == "EventStreamError"
    assert failed["output"]["content"] == [{"type": "text", "text": "mnop"}]
    assert streamed_metadata(failed, 3)["chronicle.incomplete"] is True
    span = next(
        s
        for s in recording.control_plane.trace(session.trace_id)["spans"]
        if s["span_id"] == session.span_id
    )
    assert span["state"] == "closed"

    before = llm_server.request_count
    replayed: list[Any] = []
    with replay_of(session):
        stream = bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"]
        assert [next(stream), next(stream)] == first
        with pytest.raises(chronicle.ReplayError, match="stopped after 2 item"):
            next(stream)
        stream = bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"]
        with pytest.raises(EventStreamError, match="stream interrupted") as raised:
            drain(stream, replayed)
    assert llm_server.request_count == before
    assert replayed == received
    assert raised.value.response["Error"]["Code"] == "modelStreamErrorException"


def test_invoke_model_with_response_stream_of_an_anthropic_body(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    usage = messages_usage(30, 9, cache_read_input_tokens=12)
    reply = messages_tool_use(
        tool_call("get_weather", WEATHER, id="toolu_1"), text="Checking.", usage=usage
    )
    llm_server.reply_with(streamed(reply, deltas=3))
    titan = json.dumps({"inputText": "hello"})
    with chronicle.record("invoke-stream") as session:
        response = bedrock.invoke_model_with_response_stream(
            modelId=MODEL, body=anthropic_body("Weather?")
        )
        events = list(response["body"])
        list(bedrock.invoke_model_with_response_stream(modelId="titan", body=titan)["body"])
    assert response["contentType"] == "application/json"
    sent = [json.loads(event["chunk"]["bytes"]) for event in events]
    assert sent[0]["type"] == "message_start"
    assert sum(1 for e in sent if e.get("delta", {}).get("type") == "input_json_delta") == 3

    (envelope,) = recording.saved(session.trace_id, 1)  # the Titan body passed through
    assert envelope["name"] == INVOKE
    assert envelope["input"]["raw"]["body"] == json.loads(anthropic_body("Weather?"))
    output = envelope["output"]
    assert output["provider"] == "bedrock"
    assert output["content"] == [
        {"type": "text", "text": "Checking."},
        recorded_tool_call("toolu_1", "get_weather", WEATHER),
    ]
    assert output["finish_reason"] == "tool_calls"
    assert output["usage"] == buckets(input=30, cached_read=12, output=9)
    assert output["raw"]["body"]["content"][1]["input"] == WEATHER
    assert output["raw"]["contentType"] == "application/json"
    streamed_metadata(envelope, len(events))

    before = llm_server.request_count
    with replay_of(session):
        replayed = bedrock.invoke_model_with_response_stream(
            modelId=MODEL, body=anthropic_body("Weather?")
        )
        again = list(replayed["body"])
    assert llm_server.request_count == before
    assert replayed["contentType"] == "application/json"
    assert all(isinstance(event["chunk"]["bytes"], bytes) for event in again)
    assert [json.loads(event["chunk"]["bytes"]) for event in again] == sent


def test_bedrock_events_and_the_bedrock_assemblers_are_inverse() -> None:
    response: JsonValue = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "s1"}}},
                    {"text": "Let me look."},
                    {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": WEATHER}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12},
        "metrics": {"latencyMs": 3},
    }
    folded = ConverseStreamAssembler()
    for event in converse_events(response) or []:
        folded.add(event)
    assert folded.result() == response
    cut = ConverseStreamAssembler(limit=4)  # cut short: the tool input kept as its text
    for event in (converse_events(response) or [])[:8]:
        cut.add(event)
    assert cut.result() == {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "s1"}}},
                    {"text": "Let "},
                    {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": '{"ci'}},
                ],
            }
        }
    }
    invoked: JsonValue = {
        "body": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [{"type": "text", "text": "Hi."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 2},
        },
        "contentType": "application/json",
    }
    assembler = InvokeStreamAssembler()
    for event in invoke_events(invoked) or []:
        assembler.add(event)
    assert assembler.result() == invoked


def test_a_key_split_across_converse_stream_deltas_is_stored_in_no_event(
    bedrock, llm_server, recording
):
    chronicle.wrap(bedrock)
    key = "ghp_" + "Zx9" * 12
    llm_server.reply_with(streamed(converse_text(f"Token: {key} (rotate it)"), deltas=10))
    with chronicle.record("converse-secret") as session:
        events = list(bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"])
    assert key in "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )

    (envelope,) = recording.saved(session.trace_id, 1)
    masked = "Token: [REDACTED:github_token] (rotate it)"
    assert envelope["output"]["content"] == [{"type": "text", "text": masked}]
    assert envelope["metadata"]["chronicle.chunks_rebuilt"] is True
    assert key not in json.dumps(envelope)

    with replay_of(session) as run:
        again = list(bedrock.converse_stream(modelId=MODEL, messages=USER)["stream"])
    deltas = [e["contentBlockDelta"]["delta"] for e in again if "contentBlockDelta" in e]
    assert "".join(d.get("text", "") for d in deltas) == masked
    assert run.captured_result(CONVERSE, 1) == envelope["output"]["raw"]
