"""Hooks, redaction, JSON forms, retries and reserved keys, checked on the real control plane."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import logging
import uuid
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle


class BudgetExceeded(chronicle.AbortCall):
    pass


class Halt(BaseException):
    """Like TokenOps's halt: not an Exception, so nothing may swallow it."""


@chronicle.boundary("chat", kind="llm", provider="openai")
def chat(model: str, messages: list[dict[str, Any]], max_tokens: int = 100) -> Any:
    chat.models.append(model)  # type: ignore[attr-defined]
    return {
        "id": "chatcmpl-1",
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


chat.models = []  # type: ignore[attr-defined]
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]


def divide_by_zero(*_: object) -> None:
    """A hook with a bug."""
    raise ZeroDivisionError("division by zero")


def missing_key(*_: object) -> None:
    """A hook with another bug."""
    raise KeyError("missing")


class Governor(chronicle.Hook):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.seen: list[chronicle.CallInfo] = []
        self.envelopes: list[object] = []

    def enter(self, call):
        self.events.append(("enter", call.name))
        self.seen.append(call)
        if call.kind == "llm" and call.arguments.get("model") == "gpt-4o":
            return {"model": "gpt-4o-mini"}
        return None

    def crossing(self, call, result):
        self.events.append(("crossing", call.name))

    def record(self, call, envelope):
        self.events.append(("record", call.name))
        self.envelopes.append(envelope)

    def leave(self, call):
        self.events.append(("leave", call.name))


def test_a_governor_patches_a_model_argument_and_sees_every_event(recording):
    governor = Governor()
    chronicle.default_hooks.register(governor)
    chat.models.clear()  # type: ignore[attr-defined]
    with chronicle.record("governed") as session:
        reply = chat("gpt-4o", MESSAGES)  # positional: the patch must still land
    assert chat.models == ["gpt-4o-mini"]  # type: ignore[attr-defined]
    assert reply["model"] == "gpt-4o-mini"
    assert governor.events == [
        ("enter", "chat"),
        ("crossing", "chat"),
        ("record", "chat"),
        ("leave", "chat"),
    ]
    call = governor.seen[0]
    assert (call.kind, call.invocation_index, call.attempt) == ("llm", 1, 1)
    assert call.arguments == {"model": "gpt-4o", "messages": MESSAGES}
    assert (call.trace_id, call.span_id) == (session.trace_id, session.span_id)
    (envelope,) = recording.saved(session.trace_id, 1)
    assert call.envelope_id == envelope["envelope_id"]
    assert isinstance(governor.envelopes[0], chronicle.Envelope)
    assert governor.envelopes[0].envelope_id == envelope["envelope_id"]
    assert envelope["input"]["model"] == "gpt-4o-mini"  # what was actually sent
    assert envelope["output"]["usage"] == {
        "input": 10,
        "cached_read": 0,
        "cache_write": 0,
        "output": 2,
        "reasoning": 0,
    }


def test_an_abort_stops_the_call_is_recorded_and_propagates(recording):
    class Budget(chronicle.Hook):
        def enter(self, call):
            raise BudgetExceeded(f"budget exhausted on {call.trace_id}")

    chronicle.default_hooks.register(Budget())
    chat.models.clear()  # type: ignore[attr-defined]
    with chronicle.record("aborted") as session, pytest.raises(BudgetExceeded):
        chat("gpt-4o", MESSAGES)
    assert chat.models == []  # type: ignore[attr-defined]
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"] == {
        "type": "AbortCall",
        "message": f"budget exhausted on {session.trace_id}",
    }


def test_an_abort_propagates_even_with_failing_hooks_ignored(recording):
    chronicle.default_hooks.register(chronicle.FunctionHook(divide_by_zero))
    chronicle.default_hooks.register(
        chronicle.FunctionHook(lambda call: (_ for _ in ()).throw(BudgetExceeded("no")))
    )
    with chronicle.record("abort-after-crash"), pytest.raises(BudgetExceeded):
        chat("gpt-4o", MESSAGES)


def test_a_base_exception_from_crossing_reaches_the_caller_after_leave(recording):
    left = []

    class Halter(chronicle.Hook):
        def crossing(self, call, result):
            raise Halt("run halted")

        def leave(self, call):
            left.append(call.name)

    chronicle.default_hooks.register(Halter())
    with chronicle.record("halted") as session, pytest.raises(Halt):
        chat("gpt-4o-mini", MESSAGES)
    assert left == ["chat"]
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["envelope_status"]["status"] == "success"  # the call itself returned


def test_a_crashing_hook_does_not_break_the_call(recording, caplog):
    caplog.set_level(logging.WARNING, logger="chronicle")
    chronicle.default_hooks.register(chronicle.FunctionHook(missing_key, crossing=divide_by_zero))
    with chronicle.record("crashing-hook") as session:
        assert chat("gpt-4o-mini", MESSAGES)["choices"][0]["message"]["content"] == "hi"
    assert len(recording.saved(session.trace_id, 1)) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed in enter" in m and "hooks_fail_call_on_error" in m for m in messages)


def test_strict_hooks_fail_the_call(control_plane):
    chronicle.configure(control_plane_url=control_plane.url, hooks_fail_call_on_error=True)
    chronicle.default_hooks.register(chronicle.FunctionHook(missing_key))
    with chronicle.record("strict"), pytest.raises(KeyError):
        chat("gpt-4o-mini", MESSAGES)


def test_hooks_run_when_recording_is_off(monkeypatch):
    monkeypatch.setenv("CHRONICLE_ENABLED", "false")
    chronicle.configure()
    governor = Governor()
    chronicle.default_hooks.register(governor)
    chat.models.clear()  # type: ignore[attr-defined]
    with chronicle.span() as session:
        chat("gpt-4o", MESSAGES)
    assert chat.models == ["gpt-4o-mini"]  # type: ignore[attr-defined]
    assert [e for e, _ in governor.events] == ["enter", "crossing", "leave"]
    assert governor.seen[0].trace_id == session.trace_id


def test_session_hooks_apply_to_that_session_only(recording):
    seen = []
    with chronicle.record("one") as first:
        first.hooks.register(chronicle.FunctionHook(lambda call: seen.append(call.span_id)))
        chat("gpt-4o-mini", MESSAGES)
    with chronicle.record("two"):
        chat("gpt-4o-mini", MESSAGES)
    assert seen == [first.span_id]


def test_stubbed_replay_runs_no_hooks(recording):
    with chronicle.record("to-replay") as session:
        chat("gpt-4o-mini", MESSAGES)
    recording.saved(session.trace_id, 1)
    governor = Governor()
    chronicle.default_hooks.register(governor)
    with chronicle.replay_trace(session.trace_id, session.span_id):
        assert chat("gpt-4o-mini", MESSAGES).choices[0].message.content == "hi"
    assert governor.events == []


SECRET_KEY = "sk-proj-Abc123DEF456ghi789JKL012mno345PQR678stu901"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def test_secrets_never_leave_the_process_but_the_caller_sees_them(control_plane):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)

    @chronicle.boundary("call_api", kind="tool")
    def call_api(api_key: str, headers: dict[str, str]) -> dict[str, str]:
        return {"echo": api_key, "token": JWT}

    @chronicle.boundary("leaky", kind="tool")
    def leaky(token: str) -> None:
        raise PermissionError(f"rejected key {SECRET_KEY}")

    with chronicle.record("secrets") as session:
        result = call_api(SECRET_KEY, {"Authorization": f"Bearer {JWT}"})
        with pytest.raises(PermissionError, match=SECRET_KEY):
            leaky(JWT)
    assert result == {"echo": SECRET_KEY, "token": JWT}  # the caller gets the real values
    assert chronicle.flush(10)
    envelopes = control_plane.wait_for_envelopes(session.trace_id, 2)
    saved = json.dumps(envelopes)
    exported = json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()])
    exported += json.dumps(
        [dict(e.attributes or {}) for s in exporter.get_finished_spans() for e in s.events]
    )
    for text in (saved, exported):
        assert SECRET_KEY not in text
        assert JWT not in text
        assert "sk-proj-" not in text
        assert "REDACTED" in text
    chronicle.reset()


def test_your_own_redactor_adds_to_the_defaults(recording, control_plane):
    chronicle.configure(
        control_plane_url=control_plane.url,
        redactors=[lambda s: s.replace("ada@example.com", "[EMAIL]")],
    )

    @chronicle.boundary("lookup_user", kind="tool")
    def lookup_user(email: str, key: str) -> str:
        return email

    with chronicle.record("pii") as session:
        lookup_user("ada@example.com", SECRET_KEY)
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["input"]["raw"]["email"] == "[EMAIL]"
    assert SECRET_KEY not in json.dumps(envelope)


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_json_forms_round_trip_or_say_they_did_not(recording):
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    @chronicle.boundary("forms", kind="tool")
    def forms(**values: object) -> object:
        return values.get("result")

    when = dt.datetime(2026, 12, 2, 10, 30, tzinfo=dt.UTC)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    with chronicle.record("forms") as session:
        forms(
            when=when,
            day=when.date(),
            ident=ident,
            price=decimal.Decimal("9.99"),
            colour=Colour.RED,
            blob=b"\x00\x01",
            tags={"b", "a"},
            pair=(1, 2),
            nan=float("nan"),
            point=Point(1, 2),
            result=Point(3, 4),
        )
        forms(thing=Opaque(), result=Opaque())
    first, second = recording.saved(session.trace_id, 2)
    assert first["input"]["raw"] == {
        "when": "2026-12-02T10:30:00+00:00",
        "day": "2026-12-02",
        "ident": "12345678-1234-5678-1234-567812345678",
        "price": "9.99",
        "colour": "red",
        "blob": {"$bytes": "AAE="},
        "tags": ["a", "b"],
        "pair": [1, 2],
        "nan": "NaN",
        "point": {"x": 1, "y": 2},
        "result": {"x": 3, "y": 4},
    }
    assert first["output"]["raw"] == {"x": 3, "y": 4}
    assert "chronicle.lossy_input" not in first["metadata"]
    assert second["metadata"]["chronicle.lossy_input"] is True
    assert second["metadata"]["chronicle.lossy_output"] is True
    assert "Opaque()" in json.dumps(second["output"]["raw"])

    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        assert forms(result=Point(3, 4)) == Point(3, 4)  # the type was recorded too
        with pytest.raises(chronicle.LossyReplayError, match="was not JSON-serializable"):
            forms(thing=Opaque(), result=Opaque())
    assert [c.mode for c in run.call_log()] == ["stub", "stub"]


def test_cycles_and_deep_objects_never_break_a_call(recording):
    cyclic: dict[str, object] = {"name": "loop"}
    cyclic["self"] = cyclic
    deep: list[Any] = []
    node = deep
    for _ in range(500):
        node.append([])
        node = node[0]

    @chronicle.boundary("weird", kind="tool")
    def weird(a: object, b: object) -> str:
        return "fine"

    with chronicle.record("weird") as session:
        assert weird(cyclic, deep) == "fine"
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["metadata"]["chronicle.lossy_input"] is True


def test_long_strings_are_cut_to_max_payload_bytes_and_flagged(control_plane):
    chronicle.configure(control_plane_url=control_plane.url, max_payload_bytes=1000)

    @chronicle.boundary("long", kind="tool")
    def long(text: str) -> str:
        return text

    with chronicle.record("long") as session:
        long("y" * 5000)
    assert chronicle.flush(10)
    (envelope,) = control_plane.wait_for_envelopes(session.trace_id, 1)
    assert envelope["metadata"]["chronicle.truncated"] is True
    # The whole input is bounded: the key "text" takes its share of the 1000 bytes.
    assert envelope["input"]["raw"]["text"] == "y" * 994 + "…[truncated 4006 bytes]"


def test_capture_can_be_turned_off(control_plane):
    chronicle.configure(
        control_plane_url=control_plane.url, capture_input=False, capture_output=False
    )

    @chronicle.boundary("private", kind="tool")
    def private(secret: str) -> str:
        return secret

    with chronicle.record("no-capture") as session:
        assert private("hush") == "hush"
    assert chronicle.flush(10)
    (envelope,) = control_plane.wait_for_envelopes(session.trace_id, 1)
    assert envelope["input"]["raw"] == {}
    assert envelope["output"].get("raw") is None


def test_attempt_marks_retries_with_a_link_to_the_first_try(recording):
    calls = []

    @chronicle.boundary("flaky", kind="tool")
    def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ConnectionError("reset")
        return n

    with chronicle.record("retries") as session:
        with pytest.raises(ConnectionError):
            flaky(1)
        with chronicle.attempt(2, of="0000000000000001"):
            flaky(1)
    first, second = recording.saved(session.trace_id, 2)
    assert first["attempt"] == 1 and not first.get("links")
    assert second["attempt"] == 2
    assert second["links"] == [{"type": "retry_of", "envelope_id": "0000000000000001"}]
    assert first["envelope_id"] != second["envelope_id"]


def test_attempt_links_to_a_real_first_envelope(recording):
    @chronicle.boundary("fetch_page", kind="tool")
    def fetch_page(url: str) -> str:
        return url

    ids = []
    with chronicle.record("retry-link") as session:
        session.hooks.register(chronicle.FunctionHook(lambda call: ids.append(call.envelope_id)))
        fetch_page("a")
        with chronicle.attempt(2, of=ids[0]):
            fetch_page("a")
    first, second = recording.saved(session.trace_id, 2)
    assert second["links"] == [{"type": "retry_of", "envelope_id": first["envelope_id"]}]


def test_user_metadata_may_not_use_the_reserved_prefix():
    with pytest.raises(chronicle.ReservedMetadataError, match=r"'chronicle\.sequence'"):
        chronicle.record("x", metadata={"chronicle.sequence": 3})
    with pytest.raises(chronicle.ReservedMetadataError):
        chronicle.record("x", labels={"chronicle.owner": "me"})


def test_a_later_hook_sees_an_earlier_hooks_patch(recording):
    seen = []

    @chronicle.boundary("scale")
    def scale(x: int) -> int:
        return x * 10

    def first_enter(call):
        return {"x": int(str(call.arguments["x"])) + 1}

    first = chronicle.FunctionHook(enter=first_enter)

    def second_enter(call):
        seen.append(dict(call.arguments))
        return None

    chronicle.default_hooks.register(first)
    chronicle.default_hooks.register(chronicle.FunctionHook(enter=second_enter))
    with chronicle.record("patched"):
        assert scale(1) == 20
    assert seen == [{"x": 2}]
