"""A stream is recorded as the server sent it, whatever its consumer does to the chunks.

LlamaIndex's ``FunctionAgent`` (through ``llama_index.llms.openai.utils.update_tool_calls``)
keeps the first tool-call delta of an OpenAI chat stream and appends each later argument piece
onto it, in place, while it reads the stream. A recording that kept the live chunk objects and
put them in JSON form later would hold that grown delta: arguments doubled in the chunks and the
assembled output, a replay handing the consumer those chunks, and a strict replay of unchanged
code failing. Here the real ``openai`` SDK streams from ``LlmServer`` through ``chronicle.wrap``,
a consumer mutates the chunks as LlamaIndex does (and the Responses and Anthropic equivalents),
and the saved envelope and a strict replay are checked against what the server sent.

The last tests check the same for a plain boundary's return value that its caller changes
right after the call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pydantic
import pytest

import chronicle
from tests.support.calls import CHAT, MESSAGES, RESPONSES, USER, recorded_tool_call
from tests.support.llm_server import (
    LlmServer,
    chat_tool_calls,
    messages_tool_use,
    responses_tool_calls,
    streamed,
    tool_call,
)
from tests.support.recording import Recording

PARIS = {"city": "Paris"}
SENT = json.dumps(PARIS)
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def weather() -> Any:
    @chronicle.boundary("get_weather", kind="tool")
    def get_weather(city: str) -> str:
        return f"Sunny in {city}"

    return get_weather


def update_tool_calls(tool_calls: list[Any], deltas: list[Any] | None) -> None:
    """LlamaIndex's accumulation (``llama_index.llms.openai.utils.update_tool_calls``): the first
    delta of a tool call is kept, and every later piece is appended onto that object."""
    if not deltas:
        return
    delta = deltas[0]
    if not tool_calls or tool_calls[-1].index != delta.index:
        tool_calls.append(delta)
        return
    kept = tool_calls[-1]
    kept.function.arguments = (kept.function.arguments or "") + (delta.function.arguments or "")
    kept.function.name = (kept.function.name or "") + (delta.function.name or "")
    kept.id = (kept.id or "") + (delta.id or "")


@dataclass
class Read:
    """What the consumer read: each chunk as it arrived (dumped before anything changed it) and
    the arguments it assembled."""

    pristine: list[dict[str, Any]]
    arguments: str


def read_chunk(chunk: Any, pristine: list[dict[str, Any]], tool_calls: list[Any]) -> None:
    pristine.append(chunk.model_dump(mode="json", exclude_unset=True))
    if chunk.choices:
        update_tool_calls(tool_calls, chunk.choices[0].delta.tool_calls)


def run_agent(client: openai.OpenAI, get_weather: Any) -> tuple[Read, str]:
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=USER, tools=TOOLS, stream=True
    )
    pristine: list[dict[str, Any]] = []
    tool_calls: list[Any] = []
    for chunk in stream:
        read_chunk(chunk, pristine, tool_calls)
    arguments = tool_calls[0].function.arguments
    return Read(pristine, arguments), get_weather(**json.loads(arguments))


async def run_agent_async(client: openai.AsyncOpenAI, get_weather: Any) -> tuple[Read, str]:
    stream = await client.chat.completions.create(
        model="gpt-4o-mini", messages=USER, tools=TOOLS, stream=True
    )
    pristine: list[dict[str, Any]] = []
    tool_calls: list[Any] = []
    async for chunk in stream:
        read_chunk(chunk, pristine, tool_calls)
    arguments = tool_calls[0].function.arguments
    return Read(pristine, arguments), get_weather(**json.loads(arguments))


def recorded_chunks(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks a saved stream envelope stores, each with the fields they share put back."""
    metadata = envelope["metadata"]
    assert "chronicle.chunks_rebuilt" not in metadata
    shared = metadata.get("chronicle.shared_chunk_fields", {})
    return [{**shared, **chunk} for chunk in metadata["chronicle.chunks"]]


def check_recorded_as_sent(envelope: dict[str, Any], read: Read) -> None:
    assert envelope["name"] == CHAT
    assert len(read.pristine) > 5  # the arguments came in several deltas
    assert recorded_chunks(envelope) == read.pristine
    (call,) = envelope["output"]["content"]
    assert call["arguments"] == PARIS
    message = envelope["output"]["raw"]["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["arguments"] == SENT


def strict_replay(session: chronicle.Session) -> Any:
    return chronicle.replay_trace(session.trace_id, session.span_id, strict=True)


# ---- OpenAI Chat Completions: a LlamaIndex-like consumer -------------------------------------


@pytest.mark.parametrize("deltas", [4, 40])  # fewer chunks than a batch of FOLD_BATCH, more
def test_a_consumer_growing_the_first_tool_call_delta_changes_nothing_recorded(
    oai: openai.OpenAI, llm_server: LlmServer, recording: Recording, weather: Any, deltas: int
) -> None:
    reply = chat_tool_calls(tool_call("get_weather", PARIS))
    llm_server.reply_with(streamed(reply, deltas=deltas))
    with chronicle.record("mutating-consumer") as session:
        read, result = run_agent(oai, weather)
    assert read.arguments == SENT  # live, the consumer assembled the arguments right
    assert result == "Sunny in Paris"

    envelope, tool = recording.saved(session.trace_id, 2)
    check_recorded_as_sent(envelope, read)
    assert tool["input"]["raw"] == PARIS

    before = llm_server.request_count
    with strict_replay(session) as run:
        again, result_again = run_agent(oai, weather)
    assert run.divergences() == []
    assert llm_server.request_count == before
    assert again.arguments == SENT
    assert again.pristine == read.pristine
    assert result_again == "Sunny in Paris"


def test_an_async_consumer_growing_the_first_tool_call_delta_changes_nothing_recorded(
    llm_server: LlmServer, recording: Recording, weather: Any
) -> None:
    llm_server.reply_with(streamed(chat_tool_calls(tool_call("get_weather", PARIS)), deltas=4))

    def client() -> openai.AsyncOpenAI:
        return chronicle.wrap(
            openai.AsyncOpenAI(base_url=llm_server.openai_base_url, api_key="test", max_retries=0)
        )

    async def record() -> tuple[chronicle.Session, Read]:
        async with client() as oai:
            with chronicle.record("mutating-consumer-async") as session:
                read, result = await run_agent_async(oai, weather)
        assert result == "Sunny in Paris"
        return session, read

    async def replay(session: chronicle.Session) -> tuple[list[Any], Read]:
        async with client() as oai:
            with strict_replay(session) as run:
                again, result = await run_agent_async(oai, weather)
        assert result == "Sunny in Paris"
        return run.divergences(), again

    session, read = asyncio.run(record())
    assert read.arguments == SENT
    envelope, _ = recording.saved(session.trace_id, 2)
    check_recorded_as_sent(envelope, read)

    before = llm_server.request_count
    divergences, again = asyncio.run(replay(session))
    assert divergences == []
    assert llm_server.request_count == before
    assert again.arguments == SENT
    assert again.pristine == read.pristine


def recorded_events(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    return recorded_chunks(envelope)


# ---- OpenAI Responses: arguments grown on the item of output_item.added ----------------------


def read_responses(client: openai.OpenAI) -> Read:
    """A consumer building its snapshot in place: ``response.created``'s response, with the
    ``function_call`` item of ``response.output_item.added`` appended to its output and each
    arguments delta appended onto that item."""
    pristine: list[dict[str, Any]] = []
    snapshot: Any = None
    item: Any = None
    for event in client.responses.create(model="gpt-4.1-mini", input="Weather?", stream=True):
        pristine.append(event.model_dump(mode="json", exclude_unset=True))
        if event.type == "response.created":
            snapshot = event.response
        elif event.type == "response.output_item.added" and event.item.type == "function_call":
            item = event.item
            snapshot.output.append(item)
        elif event.type == "response.function_call_arguments.delta":
            item.arguments += event.delta
    return Read(pristine, snapshot.output[0].arguments)


# ---- Anthropic: input filled in on the block of content_block_start --------------------------


def read_messages(client: anthropic.Anthropic) -> Read:
    """A consumer keeping ``message_start``'s message as its snapshot and the ``tool_use`` block
    of ``content_block_start``, appending the block to the message and filling in its input
    dict in place when the block stops."""
    pristine: list[dict[str, Any]] = []
    message: Any = None
    block: Any = None
    partial = ""
    stream = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=USER, stream=True
    )
    for event in stream:
        pristine.append(event.model_dump(mode="json", exclude_unset=True))
        if event.type == "message_start":
            message = event.message
        elif event.type == "content_block_start":
            block = event.content_block
            message.content.append(block)
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            partial += event.delta.partial_json
        elif event.type == "content_block_stop":
            block.input.update(json.loads(partial))
    return Read(pristine, json.dumps(message.content[0].input))


# ---- both: the events kept as sent, a strict replay hands the consumer the same --------------

CONSUMERS: dict[str, tuple[str, Callable[[Any], Read], Callable[..., Any], str, str]] = {
    # id: (the client fixture, the consumer, the reply's builder, the boundary, the call's id)
    "responses-item-grown": ("oai", read_responses, responses_tool_calls, RESPONSES, "call_7"),
    "anthropic-input-filled-in": ("claude", read_messages, messages_tool_use, MESSAGES, "toolu_1"),
}


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_a_consumer_changing_the_events_it_reads_changes_nothing_recorded(
    request: pytest.FixtureRequest, llm_server: LlmServer, recording: Recording, consumer: str
) -> None:
    fixture, read_events, reply, name, call_id = CONSUMERS[consumer]
    client = request.getfixturevalue(fixture)
    llm_server.reply_with(streamed(reply(tool_call("get_weather", PARIS, id=call_id)), deltas=4))
    with chronicle.record(f"mutating-{consumer}") as session:
        read = read_events(client)
    assert read.arguments == SENT

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == name
    assert recorded_events(envelope) == read.pristine
    assert envelope["output"]["content"] == [recorded_tool_call(call_id, "get_weather", PARIS)]

    with strict_replay(session) as run:
        again = read_events(client)
    assert run.divergences() == []
    assert again.arguments == SENT
    assert again.pristine == read.pristine


# ---- a plain boundary's result, changed by its caller right after the call -------------------


class Forecast(pydantic.BaseModel):
    city: str
    hours: list[int]
    notes: dict[str, str]


@dataclass
class Reading:
    city: str
    values: list[float]


def test_a_result_the_caller_changes_right_after_the_call_is_recorded_as_returned(
    recording: Recording,
) -> None:
    @chronicle.boundary("lookup", kind="tool")
    def lookup(city: str) -> dict[str, Any]:
        return {"city": city, "tags": ["dry"], "detail": {"wind": 3}}

    @chronicle.boundary("hours", kind="tool")
    def hours(city: str) -> list[Any]:
        return [1, [2, 3]]

    @chronicle.boundary("forecast", kind="tool")
    def forecast(city: str) -> Forecast:
        return Forecast(city=city, hours=[9, 12], notes={"am": "fog"})

    @chronicle.boundary("reading", kind="tool")
    def reading(city: str) -> Reading:
        return Reading(city, [1.5])

    def agent() -> list[Any]:
        found = lookup("Paris")
        found["tags"].append("windy")
        found["detail"]["wind"] = 40
        found["added"] = True
        listed = hours("Paris")
        listed.append(4)
        listed[1].append(99)
        model = forecast("Paris")
        model.hours.append(18)
        model.notes["pm"] = "rain"
        model.city = "Lyon"
        read = reading("Paris")
        read.values.append(2.5)
        return [found, listed, model, read]

    with chronicle.record("results-changed") as session:
        agent()
    saved = recording.saved(session.trace_id, 4)
    assert [envelope["output"]["raw"] for envelope in saved] == [
        {"city": "Paris", "tags": ["dry"], "detail": {"wind": 3}},
        [1, [2, 3]],
        {"city": "Paris", "hours": [9, 12], "notes": {"am": "fog"}},
        {"city": "Paris", "values": [1.5]},
    ]

    with strict_replay(session) as run:
        found, listed, model, read = agent()
    assert run.divergences() == []
    assert found == {
        "city": "Paris",
        "tags": ["dry", "windy"],
        "detail": {"wind": 40},
        "added": True,
    }
    assert listed == [1, [2, 3, 99], 4]
    assert (model.city, model.hours, model.notes) == (
        "Lyon",
        [9, 12, 18],
        {"am": "fog", "pm": "rain"},
    )
    assert isinstance(model, Forecast) and isinstance(read, Reading)
    assert read.values == [1.5, 2.5]
