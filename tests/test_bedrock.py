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
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

import chronicle
from tests.support.llm_server import (
    LlmServer,
    converse_error,
    converse_text,
    converse_tool_use,
    converse_usage,
    messages_text,
    messages_usage,
    tool_call,
)

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


def only(envelopes: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(envelopes) == 1, [e["name"] for e in envelopes]
    assert "chronicle.lossy_input" not in envelopes[0]["metadata"]
    assert "chronicle.lossy_output" not in envelopes[0]["metadata"]
    return envelopes[0]


def replay_of(session: chronicle.Session) -> Any:
    return chronicle.replay_trace(session.trace_id, session.span_id)


def test_wrap_replaces_converse_and_invoke_model_in_place(bedrock):
    assert chronicle.wrap(bedrock) is bedrock
    assert bedrock.converse.__chronicle_boundary__.name == CONVERSE
    assert bedrock.invoke_model.__chronicle_boundary__.name == INVOKE
    assert bedrock.converse.__chronicle_boundary__.provider == "bedrock"
    assert bedrock.converse_stream.__chronicle_boundary__.name == CONVERSE  # one name for both
    assert bedrock.invoke_model_with_response_stream.__chronicle_boundary__.name == INVOKE
    assert chronicle.wrap(bedrock).converse is bedrock.converse  # twice: unchanged


def test_converse_is_recorded_and_replayed_as_the_boto3_dict(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    usage = converse_usage(40, 6, cache_read_input_tokens=300, cache_write_input_tokens=20)
    llm_server.reply_with(converse_text("Sunny, 24C.", reasoning="Check the sky.", usage=usage))
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
    assert output["content"] == [
        {"type": "reasoning", "text": "Check the sky."},
        {"type": "text", "text": "Sunny, 24C."},
    ]
    assert output["usage"] == {
        "input": 40,
        "cached_read": 300,
        "cache_write": 20,
        "output": 6,
        "reasoning": 0,
    }
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
        {
            "type": "tool_call",
            "id": "tooluse_1",
            "name": "get_weather",
            "arguments": {"city": "Paris"},
        }
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


def test_a_service_error_is_recorded_with_its_modeled_exception(bedrock, llm_server, recording):
    chronicle.wrap(bedrock)
    llm_server.reply_with(converse_error(429, "Too many requests, please wait."))
    with chronicle.record("bedrock-error") as session, pytest.raises(ClientError) as raised:
        bedrock.converse(modelId=MODEL, messages=USER)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "ThrottlingException"
    assert "Too many requests" in envelope["output"]["error"]["message"]
    before = llm_server.request_count
    with replay_of(session), pytest.raises(chronicle.RecordedCallError, match="Throttling"):
        bedrock.converse(modelId=MODEL, messages=USER)
    assert llm_server.request_count == before


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
