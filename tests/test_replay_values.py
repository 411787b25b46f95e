"""Values come back whole: recorded SDK errors are raised as the SDK's own exceptions, and a
boundary's return annotation rebuilds its stubbed result. Against the real control plane and the
real SDK clients pointed at ``LlmServer``."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple, TypedDict, TypeVar

import anthropic
import openai
import pytest
from pydantic import BaseModel

import chronicle
from chronicle.errors import ReplayError
from tests.support.llm_server import chat_error, messages_error

T = TypeVar("T")

USER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


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
                    issued=datetime.datetime(2024, 5, 1, 6, tzinfo=datetime.UTC),
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


# ---- values come back as the types they were recorded as -------------------------------------


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(NamedTuple):
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Booking:
    room: uuid.UUID
    starts: datetime.datetime
    price: Decimal
    guests: tuple[str, ...]
    hit: Hit
    level: Level


class Appointment(TypedDict):
    when: datetime.datetime
    room: uuid.UUID
    note: str


ROOM = uuid.UUID("6f1c2b1e-9a4d-4f7e-8a2b-3c4d5e6f7a8b")
NOON = datetime.datetime(2024, 5, 1, 12, 30, 15, 120, tzinfo=datetime.UTC)

ROUND_TRIPS: dict[str, tuple[Callable[[], Any], object]] = {
    # case: (the value a boundary returns, its return annotation)
    "pydantic model": (
        lambda: Forecast(city="Paris", temperatures=[11.5], issued=NOON),
        Forecast,
    ),
    "dataclass": (lambda: Hit("refund policy", 0.92), Hit),
    "enum": (lambda: Colour.GREEN, Colour),
    "int enum": (lambda: Priority.HIGH, Priority),
    "bytes": (lambda: b"%PDF-1.7\x00\xff\xfe binary", bytes),
    "tuple": (lambda: ("a", 1, None, 2.5), tuple[Any, ...]),
    "named tuple": (lambda: Point(3, 4), Point),
    "aware datetime": (lambda: NOON, datetime.datetime),
    "naive datetime": (lambda: datetime.datetime(2024, 5, 1, 6, 0), datetime.datetime),
    "date": (lambda: datetime.date(2024, 2, 29), datetime.date),
    "time": (lambda: datetime.time(6, 30, 15, 250), datetime.time),
    "UUID": (lambda: ROOM, uuid.UUID),
    "Decimal": (lambda: Decimal("19.990"), Decimal),
    "set": (lambda: {"refunds", "returns"}, set[str]),
    "frozenset": (lambda: frozenset({1, 2, 3}), frozenset[int]),
    "TypedDict": (lambda: Appointment(when=NOON, room=ROOM, note="window seat"), Appointment),
    "nested": (
        lambda: Booking(
            room=ROOM,
            starts=NOON,
            price=Decimal("120.50"),
            guests=("ada", "alan"),
            hit=Hit("suite", 1.0),
            level=Level.HIGH,
        ),
        Booking,
    ),
    "inside JSON": (
        lambda: {"when": [NOON.date(), NOON.time()], "points": (Point(1, 2),), "ok": True},
        dict[str, Any],
    ),
}


def same_types(replayed: Any, live: Any, where: str = "the value") -> None:
    """``replayed`` has ``live``'s types all the way down (a dict or a list may come back as a
    subclass: the attribute-access ``RecordedDict``/``RecordedList``)."""
    if type(live) in (dict, list):
        assert isinstance(replayed, type(live)), f"{where}: {type(replayed)} is not a {type(live)}"
    else:
        assert type(replayed) is type(live), f"{where}: {type(replayed)} is not {type(live)}"
    if isinstance(live, dict):
        for key, value in live.items():
            same_types(replayed[key], value, f"{where}[{key!r}]")
    elif isinstance(live, (list, tuple)):
        for index, (again, value) in enumerate(zip(replayed, live, strict=True)):
            same_types(again, value, f"{where}[{index}]")
    elif dataclasses.is_dataclass(live):
        for field in dataclasses.fields(live):
            same_types(getattr(replayed, field.name), getattr(live, field.name), field.name)


def returning(value: Callable[[], Any], annotation: object, *, live: bool) -> Callable[[], Any]:
    """A ``produce`` boundary that returns ``value()``, annotated (``annotation``) or not."""

    def produce():  # annotated below, or not at all
        if not live:
            raise AssertionError("a stub must not run")
        return value()

    if annotation is not None:
        produce.__annotations__["return"] = annotation
    return chronicle.boundary("produce")(produce)


@pytest.mark.parametrize("annotated", [False, True], ids=["unannotated", "annotated"])
@pytest.mark.parametrize("case", list(ROUND_TRIPS))
def test_each_value_type_comes_back_as_itself(case, annotated, recording, caplog):
    value, annotation = ROUND_TRIPS[case]
    with chronicle.record(f"round trip: {case}") as session:
        live = returning(value, annotation if annotated else None, live=True)()
    recording.saved(session.trace_id, 1)

    stub = returning(value, annotation if annotated else None, live=False)
    with (
        caplog.at_level(logging.WARNING, logger="chronicle"),
        chronicle.replay_trace(session.trace_id, session.span_id, strict=True),
    ):
        replayed = stub()
    assert replayed == live
    same_types(replayed, live)
    assert not caplog.records, caplog.text  # no traceback, no "returned as recorded JSON"


def test_the_envelope_says_how_each_value_was_encoded_and_output_raw_stays_json(recording):
    booking = ROUND_TRIPS["nested"][0]
    with chronicle.record("described") as session:
        returning(booking, None, live=True)()
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["raw"] == {
        "room": str(ROOM),
        "starts": "2024-05-01T12:30:15.000120+00:00",
        "price": "120.50",
        "guests": ["ada", "alan"],
        "hit": {"title": "suite", "score": 1.0},
        "level": "high",
    }
    assert envelope["metadata"]["chronicle.output_types"] == {
        "": "dataclass test_replay_values:Booking",
        "/room": "uuid",
        "/starts": "datetime",
        "/price": "decimal",
        "/guests": "tuple",
        "/hit": "dataclass test_replay_values:Hit",
        "/level": "enum test_replay_values:Level",
    }


def test_plain_json_output_records_no_types(recording):
    with chronicle.record("plain") as session:
        returning(lambda: {"rows": [{"id": 1, "name": "ada"}], "total": 1.5}, None, live=True)()
    (envelope,) = recording.saved(session.trace_id, 1)
    assert "chronicle.output_types" not in envelope["metadata"]


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque handle>"


def test_an_unknown_object_is_still_refused_at_replay(recording):
    with chronicle.record("opaque") as session:
        returning(Opaque, None, live=True)()
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["raw"] == {"$repr": "<Opaque handle>"}
    assert envelope["metadata"]["chronicle.lossy_output"] is True
    stub = returning(Opaque, None, live=False)
    with (
        chronicle.replay_trace(session.trace_id, session.span_id),
        pytest.raises(chronicle.LossyReplayError, match="stored as its repr"),
    ):
        stub()


# ---- nothing served that was not recorded -----------------------------------------------------


def configure(recording: Any, **settings: Any) -> None:
    chronicle.configure(
        control_plane_url=recording.control_plane.url, flush_interval=0.05, **settings
    )


@chronicle.boundary("lookup")
def lookup(query: str) -> dict[str, Any]:
    return {"rows": [query] * 3}


def test_a_call_recorded_without_its_output_is_not_stubbed_with_none(recording):
    configure(recording, capture_output=False)
    with chronicle.record("uncaptured") as session:
        assert lookup("refunds") == {"rows": ["refunds"] * 3}
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["metadata"]["chronicle.output_not_recorded"] is True

    with (
        chronicle.replay_trace(session.trace_id, session.span_id),
        pytest.raises(ReplayError, match="was not recorded") as refused,
    ):
        lookup("refunds")
    assert "ReplayPlan().run('lookup', 1)" in str(refused.value)

    plan = chronicle.ReplayPlan().run("lookup", 1)  # what the message says to do
    with chronicle.replay_trace(session.trace_id, session.span_id, plan):
        assert lookup("refunds") == {"rows": ["refunds"] * 3}


def test_a_call_whose_output_was_cut_is_not_stubbed(recording):
    configure(recording, max_payload_bytes=64)
    with chronicle.record("cut") as session:
        lookup("a long query " * 10)  # input and output both cut
        lookup("short")  # input and output whole
    first, second = recording.saved(session.trace_id, 2)
    assert first["metadata"]["chronicle.truncated_output"] is True
    assert "chronicle.truncated_output" not in second["metadata"]

    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        with pytest.raises(ReplayError, match="cut to max_payload_bytes") as refused:
            lookup("a long query " * 10)
        assert "ReplayPlan().run('lookup', 1)" in str(refused.value)
        assert lookup("short") == {"rows": ["short"] * 3}
    assert [c.mode for c in run.call_log()] == ["stub", "stub"]


def test_a_call_whose_input_alone_was_cut_is_still_stubbed(recording):
    configure(recording, max_payload_bytes=64)

    @chronicle.boundary("count")
    def count(text: str) -> int:
        return len(text)

    with chronicle.record("input cut") as session:
        assert count("x" * 500) == 500
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["metadata"]["chronicle.truncated"] is True
    with chronicle.replay_trace(session.trace_id, session.span_id):
        assert count("x" * 500) == 500
