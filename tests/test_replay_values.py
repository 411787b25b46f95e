"""Values come back whole: recorded SDK errors are raised as the SDK's own exceptions, and a
boundary's return annotation rebuilds its stubbed result. Against the real control plane and the
real SDK clients pointed at ``LlmServer``."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypedDict, TypeVar

import anthropic
import openai
import pytest
from pydantic import BaseModel

import chronicle
from tests.support.llm_server import LlmServer, chat_error, messages_error

T = TypeVar("T")

USER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def oai(llm_server: LlmServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=llm_server.openai_base_url, api_key="sk-test-key", max_retries=0
    ) as client:
        yield chronicle.wrap(client)


@pytest.fixture
def claude(llm_server: LlmServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=llm_server.anthropic_base_url, api_key="test-key", max_retries=0
    ) as client:
        yield chronicle.wrap(client)


RATE_LIMIT_HEADERS = {
    "retry-after": "20",
    "x-ratelimit-remaining-tokens": "0",
    "x-request-id": "req_limit_1",
    "set-cookie": "__cf_bm=secret-session-cookie",
}


def test_a_recorded_openai_rate_limit_error_replays_as_itself(oai, llm_server, recording):
    def agent() -> tuple[Any, ...]:
        try:
            oai.chat.completions.create(model="gpt-4o-mini", messages=USER)
        except openai.RateLimitError as error:  # the agent's own handler must run on replay
            headers = error.response.headers
            return (
                "back off",
                error.status_code,
                headers.get("retry-after"),
                headers.get("x-ratelimit-remaining-tokens"),
                error.request_id,
                error.body,
                error.code,
                str(error),
                error.response.json(),
            )
        return ("no error",)

    reply = chat_error(429, "Rate limit reached for gpt-4o-mini on tokens per min")
    llm_server.reply_with(dataclasses.replace(reply, headers=RATE_LIMIT_HEADERS))
    with chronicle.record("rate-limited") as session:
        live = agent()
    assert live[:5] == ("back off", 429, "20", "0", "req_limit_1")
    (envelope,) = recording.saved(session.trace_id, 1)
    detail = envelope["metadata"]["chronicle.error"]
    assert detail["class"] == "openai:RateLimitError"
    assert detail["status_code"] == 429
    assert "set-cookie" not in detail["headers"]  # a credential header is not recorded
    assert detail["request"] == {
        "method": "POST",
        "url": f"{llm_server.openai_base_url}/chat/completions",
    }

    requests = llm_server.request_count
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        replayed = agent()
    assert replayed == live
    assert llm_server.request_count == requests


def test_a_recorded_anthropic_error_replays_as_itself(claude, llm_server, recording):
    def agent() -> tuple[Any, ...]:
        try:
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=16, messages=USER)
        except anthropic.RateLimitError as error:
            return (
                type(error).__name__,
                error.status_code,
                error.request_id,
                error.body,
                error.response.headers.get("retry-after"),
                str(error),
            )
        return ("no error",)

    reply = messages_error(429, "Number of request tokens has exceeded your rate limit")
    llm_server.reply_with(dataclasses.replace(reply, headers={"retry-after": "7"}))
    with chronicle.record("anthropic-limited") as session:
        live = agent()
    assert live[:2] == ("RateLimitError", 429) and live[4] == "7"
    recording.saved(session.trace_id, 1)
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        assert agent() == live


def test_a_recorded_connection_error_replays_as_the_sdk_exception(recording):
    client = chronicle.wrap(
        openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-test", max_retries=0)
    )
    with chronicle.record("unreachable") as session, pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="gpt-4o-mini", messages=USER)
    recording.saved(session.trace_id, 1)
    with (
        chronicle.replay_trace(session.trace_id, session.span_id),
        pytest.raises(openai.APIConnectionError, match="Connection error"),
    ):
        client.chat.completions.create(model="gpt-4o-mini", messages=USER)
    client.close()


# ---- return annotations ---------------------------------------------------------------------


class Forecast(BaseModel):
    city: str
    temperatures: list[float]
    issued: datetime.datetime


@dataclasses.dataclass
class Hit:
    title: str
    score: float


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Row(TypedDict):
    id: int
    name: str


class Boundaries:
    def __init__(self, live: bool) -> None:
        def body(value: T) -> T:
            if not live:
                raise AssertionError("a stub must not run")
            return value

        @chronicle.boundary("forecast")
        def forecast(city: str) -> Forecast:
            return body(
                Forecast(
                    city=city,
                    temperatures=[11.5, 14.0],
                    issued=datetime.datetime(2024, 5, 1, 6, tzinfo=datetime.timezone.utc),
                )
            )

        @chronicle.boundary("search")
        def search(query: str) -> list[Hit]:
            return body([Hit("refund policy", 0.92), Hit("returns", 0.5)])

        @chronicle.boundary("best")
        def best(query: str) -> Hit | None:
            return body(Hit("refund policy", 0.92))

        @chronicle.boundary("level")
        async def level() -> Level:
            return body(Level.HIGH)

        @chronicle.boundary("row")
        def row() -> Row:
            return body(Row(id=7, name="ada"))

        @chronicle.boundary("attachment")
        def attachment() -> bytes:
            return body(b"%PDF-1.7\x00\xff\xfe binary")

        @chronicle.boundary("untyped_blob")
        def untyped_blob():  # no annotation, on purpose
            return body(b"\x00\x01\x02")

        @chronicle.boundary("plain")
        def plain() -> dict[str, Any]:
            return body({"rows": [{"id": 1}]})

        self.calls: list[tuple[str, Callable[[], Any]]] = [
            ("forecast", lambda: forecast("Paris")),
            ("search", lambda: search("refunds")),
            ("best", lambda: best("refunds")),
            ("level", lambda: asyncio_run(level())),
            ("row", row),
            ("attachment", attachment),
            ("untyped_blob", untyped_blob),
            ("plain", plain),
        ]

    def run(self) -> dict[str, Any]:
        return {name: call() for name, call in self.calls}


def asyncio_run(awaitable: Any) -> Any:
    import asyncio

    return asyncio.run(awaitable)


def test_annotated_return_types_come_back_as_those_types(recording):
    with chronicle.record("typed") as session:
        live = Boundaries(live=True).run()
    envelopes = {e["name"]: e for e in recording.saved(session.trace_id, 8)}
    assert envelopes["attachment"]["output"]["raw"] == {"$bytes": "JVBERi0xLjcA//4gYmluYXJ5"}
    assert envelopes["attachment"]["metadata"]["chronicle.binary_output"] is True
    assert "chronicle.lossy_output" not in envelopes["attachment"]["metadata"]

    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        replayed = Boundaries(live=False).run()
    assert replayed == live
    assert isinstance(replayed["forecast"], Forecast)
    assert replayed["forecast"].issued.tzinfo is not None
    assert all(isinstance(hit, Hit) for hit in replayed["search"])
    assert isinstance(replayed["best"], Hit)
    assert replayed["level"] is Level.HIGH
    assert type(replayed["attachment"]) is bytes
    assert type(replayed["untyped_blob"]) is bytes
    assert replayed["plain"].rows[0].id == 1  # plain JSON keeps attribute access


def test_a_recording_that_does_not_fit_the_annotation_comes_back_as_json(recording, caplog):
    @chronicle.boundary("forecast")
    def forecast(city: str) -> Forecast:
        return {"city": city}  # type: ignore[return-value]  # the annotation lies

    with chronicle.record("lying") as session:
        forecast("Oslo")
    recording.saved(session.trace_id, 1)
    with (
        caplog.at_level(logging.WARNING, logger="chronicle"),
        chronicle.replay_trace(session.trace_id, session.span_id),
    ):
        value = forecast("Oslo")
    loose: Any = value  # the annotation says Forecast; the recording holds a dict
    assert loose == {"city": "Oslo"} and loose.city == "Oslo"
    assert "does not validate as its return annotation Forecast" in caplog.text
