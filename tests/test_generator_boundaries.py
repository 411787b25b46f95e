"""Generator boundaries (sync and async): each resume nests its calls, the items are recorded as
yielded, a generator closed, dropped or failed is recorded as it ended, and a replay serves the
items (then the generator's own exception) without running its body.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import openai
import pytest

import chronicle
from tests.support.calls import USER
from tests.support.llm_server import (
    chat_text,
    streamed,
)
from tests.support.recording import Recording, replay_of
from tests.test_streams import streamed_metadata, strict_replay

# ---- generator boundaries ---------------------------------------------------------------------


def test_a_generator_boundary_nests_its_calls_on_every_resume_and_replays_without_its_body(
    recording,
):
    looked_up: list[str] = []

    @chronicle.boundary("lookup")
    def lookup(city: str) -> dict[str, Any]:
        looked_up.append(city)
        return {"city": city, "temp": 20 + len(looked_up)}

    @chronicle.boundary("render")
    def render(item: dict[str, Any]) -> str:
        return f"{item['city']}: {item['temp']}"

    @chronicle.boundary("forecast")
    def forecast(cities: list[str]) -> Iterator[dict[str, Any]]:
        for city in cities:
            yield lookup(city)

    def run() -> list[str]:
        return [render(item) for item in forecast(["Paris", "Rome", "Oslo"])]

    with chronicle.record("generator") as session:
        lines = run()
    assert lines == ["Paris: 21", "Rome: 22", "Oslo: 23"]

    envelopes = recording.saved(session.trace_id, 7)
    gen = next(e for e in envelopes if e["name"] == "forecast")
    assert gen["output"]["raw"] == [
        {"city": "Paris", "temp": 21},
        {"city": "Rome", "temp": 22},
        {"city": "Oslo", "temp": 23},
    ]
    assert streamed_metadata(gen)["chronicle.chunk_count"] == 3
    lookups = [e for e in envelopes if e["name"] == "lookup"]
    renders = [e for e in envelopes if e["name"] == "render"]
    assert [e["parent_envelope_id"] for e in lookups] == [gen["envelope_id"]] * 3
    assert [e.get("parent_envelope_id") for e in renders] == [None] * 3  # not nested in it

    looked_up.clear()
    with replay_of(session) as run_log:
        assert run() == lines
    assert looked_up == []  # the body did not run
    assert [c.name for c in run_log.call_log()] == ["forecast", "render", "render", "render"]


def test_an_async_generator_boundary_is_recorded_and_replayed(recording):
    steps: list[int] = []

    @chronicle.boundary("step")
    async def step(n: int) -> int:
        steps.append(n)
        await asyncio.sleep(0)
        return n * n

    @chronicle.boundary("squares", kind="llm")
    async def squares(n: int) -> AsyncIterator[str]:
        for i in range(n):
            yield f"{await step(i)} "

    async def main() -> tuple[chronicle.Session, list[str]]:
        async with chronicle.record("async-generator") as session:
            return session, [piece async for piece in squares(3)]

    session, pieces = asyncio.run(main())
    assert pieces == ["0 ", "1 ", "4 "]
    envelopes = recording.saved(session.trace_id, 4)
    gen = envelopes[0]
    assert gen["name"] == "squares"
    assert gen["output"]["content"] == [{"type": "text", "text": "0 1 4 "}]  # llm: joined text
    assert [e["parent_envelope_id"] for e in envelopes[1:]] == [gen["envelope_id"]] * 3

    steps.clear()

    async def replayed() -> list[str]:
        async with replay_of(session):
            return [piece async for piece in squares(3)]

    assert asyncio.run(replayed()) == pieces
    assert steps == []


def test_a_generator_closed_dropped_or_thrown_into_is_recorded_incomplete(recording):
    @chronicle.boundary("count")
    def count(n: int) -> Generator[int, None, None]:
        yield from range(n)

    with chronicle.record("generator-ends") as session:
        closed = count(5)
        assert next(closed) == 0
        closed.close()
        dropped = count(5)
        assert [next(dropped), next(dropped)] == [0, 1]
        del dropped  # collected: Python closes it, and the call ends
        thrown = count(5)
        next(thrown)
        with pytest.raises(KeyError):
            thrown.throw(KeyError("stop"))
    ends = recording.saved(session.trace_id, 3)
    assert [e["output"]["raw"] for e in ends] == [[0], [0, 1], [0]]
    assert all(e["metadata"]["chronicle.incomplete"] is True for e in ends)
    assert [e["envelope_status"]["status"] for e in ends] == ["success", "success", "failure"]
    assert ends[2]["output"]["error"]["type"] == "KeyError"

    with replay_of(session, chronicle.ReplayPlan().run("count", 2)) as run:
        replayed = count(5)
        assert next(replayed) == 0
        live = count(5)
        assert list(live) == [0, 1, 2, 3, 4]  # the cut-point runs its body
    assert run.captured_result("count", 2) == [0, 1, 2, 3, 4]


def test_a_stream_helper_closed_early_ends_its_call_at_once(oai, llm_server, recording):
    sent: list[Any] = []
    chronicle.default_hooks.register(chronicle.FunctionHook(record=lambda c, e: sent.append(e)))
    llm_server.reply_with(streamed(chat_text("abcdefgh"), deltas=4))
    gc.disable()  # the helper holds its stream in a cycle: only closing can end the call now
    try:
        with chronicle.record("helper-close"):
            with oai.chat.completions.stream(model="m", messages=USER) as stream:
                for _ in stream:
                    break
            assert len(sent) == 1  # ended when the helper closed the stream's response
    finally:
        gc.enable()
    assert sent[0].metadata["chronicle.incomplete"] is True


def test_async_with_streaming_response_is_recorded_and_replayed(llm_server, recording):
    async def consume(client: openai.AsyncOpenAI) -> tuple[str, str]:
        async with client.chat.completions.with_streaming_response.create(
            model="m", messages=USER
        ) as response:
            whole = (await response.parse()).choices[0].message.content
        async with client.chat.completions.with_streaming_response.create(
            model="m", messages=USER, stream=True
        ) as response:
            stream = await response.parse()
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        return str(whole), text

    async def main() -> None:
        client = chronicle.wrap(
            openai.AsyncOpenAI(base_url=llm_server.openai_base_url, api_key="t", max_retries=0)
        )
        llm_server.reply_with(chat_text("async whole"), streamed(chat_text("async parts")))
        async with chronicle.record("async-streaming-response") as session:
            live = await consume(client)
        assert live == ("async whole", "async parts")
        whole, parts = recording.saved(session.trace_id, 2)
        assert whole["output"]["content"] == [{"type": "text", "text": "async whole"}]
        assert parts["metadata"]["chronicle.streamed"] is True
        before = llm_server.request_count
        async with replay_of(session):
            assert await consume(client) == live
        assert llm_server.request_count == before
        await client.close()

    asyncio.run(main())


# ---- a failed generator boundary --------------------------------------------------------------


class PageMissing(LookupError):
    """An agent's own exception type."""


@chronicle.boundary("fetch_pages")
def fetch_pages(count: int) -> Iterator[str]:
    yield "page 1"
    yield "page 2"
    raise ValueError(f"page 3 of {count} is missing")


@chronicle.boundary("fetch_pages_async")
async def fetch_pages_async(count: int) -> AsyncIterator[str]:
    yield "page 1"
    raise PageMissing(f"page 2 of {count} is missing")


def read_pages(count: int) -> tuple[list[str], str]:
    pages: list[str] = []
    try:
        for page in fetch_pages(count):
            pages.append(page)
    except ValueError as error:  # the agent's own except clause
        return pages, f"gave up: {error}"
    return pages, "done"


async def read_pages_async(count: int) -> tuple[list[str], str]:
    pages: list[str] = []
    try:
        async for page in fetch_pages_async(count):
            pages.append(page)
    except PageMissing as error:
        return pages, f"gave up: {error}"
    return pages, "done"


def test_a_failed_generator_boundary_replays_its_items_then_its_own_exception(
    recording: Recording,
) -> None:
    with chronicle.record("generator-fails") as session:
        live = read_pages(3)
        live_async = asyncio.run(read_pages_async(2))
    assert live == (["page 1", "page 2"], "gave up: page 3 of 3 is missing")
    assert live_async == (["page 1"], "gave up: page 2 of 2 is missing")
    envelopes = recording.saved(session.trace_id, 2)
    assert [e["output"]["error"]["type"] for e in envelopes] == ["ValueError", "PageMissing"]

    with strict_replay(session) as run:
        assert read_pages(3) == live  # the same pages, then the agent's except clause ran
        assert asyncio.run(read_pages_async(2)) == live_async
    assert run.divergences() == []

    with strict_replay(session):
        stream = fetch_pages(3)
        assert [next(stream), next(stream)] == ["page 1", "page 2"]
        with pytest.raises(ValueError, match="page 3 of 3 is missing") as raised:
            next(stream)
        asyncio.run(read_pages_async(2))
    assert type(raised.value) is ValueError
    assert isinstance(raised.value.__cause__, chronicle.RecordedCallError)  # it says it replayed
