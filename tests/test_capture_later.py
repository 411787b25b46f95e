"""A call's capture, snapshotted at the call and walked with its envelope (``snapshot.py``).

What users rely on: the envelope is the one a walk at the call would have made, whatever the
values (secrets, credential names, limits, tuples, sets, bytes, subclasses, cycles); what the
agent changes after the call never reaches it; what needs the JSON at the call (hooks, another
exporter, a user's redactors) still gets it there; and the queue's memory bound counts what
waits. The figures are in docs/benchmarks.md ("Issue 31: the boundary's cost").
"""

from __future__ import annotations

import contextlib
import enum
import json
import math
import random
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, cast

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from chronicle import runtime
from chronicle.recording import call as call_module
from chronicle.recording.snapshot import snapshot, thaw
from chronicle.redaction import Redaction, redact_secrets
from chronicle.save import delivery
from chronicle.save.delivery import record_size
from chronicle.testing import InMemoryControlPlane
from chronicle.wire import CallRecord
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, streamed, tool_call
from tests.test_secrets_in_text import ORDINARY, SECRETS

PURE_PYTHON = pytest.mark.pure_python
"""These tests patch ``recording/call.py``'s functions (to walk at the call, or to watch the walk),
which a compiled ``call.py`` calls directly: they test the pure build (``make test-compiled``
runs the others against the compiled one)."""


class Text(str):
    pass


class Colour(enum.Enum):
    RED = "red"


@contextlib.contextmanager
def _recording(settings: dict[str, Any], *, later: bool) -> Iterator[InMemoryControlPlane]:
    """Chronicle saving to an in-memory control plane, every capture walked with its envelope
    where it may be (as shipped) or, ``later=False``, at the call; flushed, then reset."""
    double = InMemoryControlPlane()
    runtime.install(double, flush_interval=60, **settings)
    try:
        with pytest.MonkeyPatch.context() as patch:
            if not later:
                patch.setattr(call_module, "_walks_later", lambda display, redaction: False)
                patch.setattr(call_module, "snapshot", _never)
            yield double
            assert chronicle.flush(30)
    finally:
        chronicle.reset()


def _never(value: object, limit: int) -> None:
    raise AssertionError("a capture was snapshotted where it was to be walked at the call")


@contextlib.contextmanager
def _openai(llm_server: LlmServer) -> Iterator[Any]:
    """A wrapped OpenAI client against ``llm_server``, closed after."""
    client = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="test", max_retries=0)
    with client:
        yield chronicle.wrap(client)


# ---- random values on the capture's edges ----------------------------------------------------

_KEYS = [
    "role", "content", "password", "pass_word", "api_key", "x api key", "token", "max_tokens",
    "", "é", "a\nb", "k" * 80,
]  # fmt: skip
_TEXTS = [
    "hello", "", "Paris, France", "é" * 30, "line\nbreak", 'quo"te', "\ud800", "x" * 700,
    "1234567890123456", "%2F", "Bearer abcDEF123456ghiJKL789",
]  # fmt: skip


def _leaf(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(_TEXTS)
    if roll < 0.4:
        return rng.choice(list(SECRETS.values()) + ORDINARY)
    if roll < 0.55:
        return rng.choice([0, -1, 2**53, 10**30, True, False, None])
    if roll < 0.7:
        return rng.choice([0.5, -0.0, 1e300, math.nan, math.inf, rng.random()])
    if roll < 0.8:
        return rng.choice([b"\x00raw", bytearray(b"ba"), (1, "t"), {3, 1, 2}, frozenset({"f"})])
    if roll < 0.85:
        return rng.choice([1 + 2j, Ellipsis, Text("sub"), Colour.RED, OrderedDict(o=1)])
    return rng.choice([[1] * 40, [0.25] * 40, ["s"] * 40])


def _value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return _leaf(rng)
    if roll < 0.7:
        keys = [rng.choice([*_KEYS, 1, ("t",)]) for _ in range(rng.randint(0, 4))]
        return {key: _value(rng, depth + 1) for key in keys}
    return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


@chronicle.boundary("lookup", kind="tool")
def lookup(query: object, options: object = None) -> object:
    return options


@chronicle.boundary("chat", kind="llm", provider="openai")
def chat(model: str, messages: object) -> object:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": messages}}],
    }


def _saved(
    calls: list[tuple[Any, Any]], settings: dict[str, Any], *, later: bool
) -> list[dict[str, Any]]:
    """Each call's envelope as saved (ids and times left out), captured later or at the call."""
    with _recording(settings, later=later) as double, chronicle.record("later"):
        for query, options in calls:
            lookup(query, options)
            chat("gpt-4o-mini", [{"role": "user", "content": query}])
    saved = []
    for envelope in double.envelopes:
        body = envelope.model_dump(mode="json", exclude_none=True)
        for key in ("envelope_id", "span_id", "trace_id", "parent_envelope_id"):
            body.pop(key, None)
        body["envelope_status"] = {
            k: v for k, v in body["envelope_status"].items() if not k.endswith("_at")
        }
        saved.append(body)
    return saved


@PURE_PYTHON
@pytest.mark.parametrize("seed", range(4))
def test_the_envelope_is_the_one_a_walk_at_the_call_makes(seed: int) -> None:
    rng = random.Random(seed)
    calls = [(_value(rng), _value(rng)) for _ in range(150)]
    settings = {"max_payload_bytes": rng.choice([300, 2_000, 256 * 1024])}
    later = _saved(calls, settings, later=True)
    now = _saved(calls, settings, later=False)
    assert len(later) == len(now) == 2 * len(calls)
    for a, b in zip(later, now, strict=True):
        assert a == b


@PURE_PYTHON
def test_most_of_those_calls_were_captured_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above means something: the snapshot path is the one most calls take."""
    taken: list[bool] = []

    def counted(value: object, limit: int) -> bytes | None:
        frozen = snapshot(value, limit)
        taken.append(frozen is not None)
        return frozen

    monkeypatch.setattr(call_module, "snapshot", counted)
    rng = random.Random(0)
    _saved([(_value(rng), _value(rng)) for _ in range(150)], {}, later=True)
    assert len(taken) == 600 and sum(taken) > 300, sum(taken)


# ---- the copy is the call's ------------------------------------------------------------------


def test_what_the_agent_changes_after_the_call_is_not_what_is_recorded() -> None:
    double = InMemoryControlPlane()
    runtime.install(double, flush_interval=60)  # nothing is built before the flush below
    messages: list[dict[str, str]] = [{"role": "user", "content": "hi"}]
    options: dict[str, Any] = {"filters": ["a"], "seen": {"n": 1}}
    with chronicle.record("mutation"):
        result: Any = lookup(messages, options)
        messages.append({"role": "assistant", "content": "later"})
        messages[0]["content"] = "changed"
        result["filters"].append("b")  # the tool's result is the caller's options
        options["seen"]["n"] = 2
    assert chronicle.flush(30)
    [envelope] = double.envelopes
    assert envelope.input.raw == {
        "query": [{"role": "user", "content": "hi"}],
        "options": {"filters": ["a"], "seen": {"n": 1}},
    }
    assert envelope.output is not None
    assert envelope.output.raw == {"filters": ["a"], "seen": {"n": 1}}


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, None, True, "x"]},
        {"t": (1, (2,)), "s": {1, 2}, "f": frozenset(), "b": b"\xff", "ba": bytearray(b"a")},
        {1: "one", ("k",): -0.0, "nan": math.nan, "big": 10**40, "c": 1 + 2j},
    ],
    ids=["json", "python", "keys"],
)
def test_a_snapshot_is_an_exact_copy(value: Any) -> None:
    frozen = snapshot(value, 10_000)
    assert frozen is not None
    copy: Any = thaw(frozen)
    assert repr(copy) == repr(value) and copy is not value
    assert all(type(copy[key]) is type(value[key]) for key in value)


def test_a_cycle_and_shared_values_keep_their_shape() -> None:
    shared = ["s"]
    value: list[Any] = [shared, shared]
    value.append(value)
    frozen = snapshot(value, 10_000)
    assert frozen is not None
    copy = thaw(frozen)
    assert isinstance(copy, list)
    assert copy[0] is copy[1] and copy[2] is copy and copy[0] is not shared


@pytest.mark.parametrize(
    "value",
    [
        Text("subclass"),
        {"enum": Colour.RED},
        OrderedDict(a=1),
        {"view": memoryview(b"abc")},
        {"code": (lambda: None).__code__},
        {"object": object()},
        {"big": "x" * 2_000},
    ],
    ids=["str-subclass", "enum", "ordereddict", "memoryview", "code", "object", "over-limit"],
)
def test_what_does_not_copy_exactly_and_cheaply_is_walked_at_the_call(value: Any) -> None:
    assert snapshot(value, 1_000) is None


# ---- where the walk runs ---------------------------------------------------------------------


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads the capture's walks ran on, in order."""
    threads: list[str] = []
    for name in ("json_form", "json_arguments"):
        original = getattr(call_module, name)

        def traced(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(call_module, name, traced)
    return threads


def _one_call(**settings: Any) -> list[Any]:
    double = InMemoryControlPlane()
    runtime.install(double, flush_interval=60, **settings)
    with chronicle.record("where"):
        lookup("weather in Paris", {"limit": 5})
    assert chronicle.flush(30)
    return double.envelopes


@PURE_PYTHON
def test_the_walk_runs_off_the_callers_thread(walks: list[str]) -> None:
    [envelope] = _one_call()
    assert envelope.input.raw == {"query": "weather in Paris", "options": {"limit": 5}}
    caller = threading.current_thread().name
    assert len(walks) == 2 and caller not in walks, walks


@PURE_PYTHON
def test_hooks_see_the_json_at_the_call(walks: list[str]) -> None:
    seen: list[object] = []
    hook = chronicle.default_hooks.register(
        chronicle.FunctionHook(lambda info: seen.append(info.arguments))
    )
    try:
        _one_call()
    finally:
        chronicle.default_hooks.unregister(hook)
    assert seen == [{"query": "weather in Paris", "options": {"limit": 5}}]
    assert walks and set(walks) == {threading.current_thread().name}


@PURE_PYTHON
def test_a_users_redactor_runs_on_the_callers_thread(walks: list[str]) -> None:
    callers: set[str] = set()

    def upper(text: str) -> str:
        callers.add(threading.current_thread().name)
        return text.upper()

    [envelope] = _one_call(redactors=[upper, redact_secrets])
    assert envelope.input.raw == {"QUERY": "WEATHER IN PARIS", "OPTIONS": {"LIMIT": 5}}
    assert callers == {threading.current_thread().name}


@PURE_PYTHON
def test_another_exporter_gets_the_json_on_the_span_at_the_call(walks: list[str]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _one_call(tracer_provider=provider)
    [span] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert span.attributes is not None
    assert '"weather in Paris"' in str(span.attributes["input.value"])
    assert set(walks) == {threading.current_thread().name}


# ---- the queue's memory bound ----------------------------------------------------------------


def _waiting(value: object) -> int:
    """What ``record_size`` counts for ``value`` waiting as a snapshot."""
    record = CallRecord("lookup", "tool", "t" * 32, "s" * 16, None, 1, 1)
    empty = record_size(record)
    frozen = snapshot(value, 10**6)
    assert frozen is not None
    record.defer(frozen, lambda record, copy: None)
    return record_size(record) - empty


def test_a_waiting_snapshot_counts_against_the_queues_memory() -> None:
    # All it holds: bytes by their length, a set by its items (a JSON form has neither).
    strings = {str(i) for i in range(1_000)}
    assert _waiting({"data": b"x" * 100_000, "set": strings}) > 100_000 + sum(map(len, strings))
    # A value that holds itself, or one value a million times, waits as what it holds: once.
    loop: list[Any] = ["x" * 1_000]
    loop.append(loop)
    assert 1_000 < _waiting([[loop] * 1_000] * 1_000) < 40_000


def test_a_finish_that_raises_is_logged_and_the_envelope_still_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = CallRecord("lookup", "tool", "t" * 32, "s" * 16, None, 1, 1)

    def broken(record: CallRecord, copy: object) -> None:
        raise RuntimeError("boom")

    record.defer({"a": 1}, broken)
    record.settle()
    assert record.deferred == [] and record.input_raw == {}
    assert "could not capture a value of 'lookup'" in caplog.text


@PURE_PYTHON
def test_a_redaction_is_the_same_later(walks: list[str]) -> None:
    secret = SECRETS["openai_key"]
    double = InMemoryControlPlane()
    runtime.install(double, flush_interval=60)
    with chronicle.record("secret"):
        lookup(f"use {secret}", {"api_key": "k-123", "nested": [secret]})
    assert chronicle.flush(30)
    [envelope] = double.envelopes
    assert secret not in envelope.model_dump_json()
    assert envelope.input.raw == {
        "query": "use [REDACTED:openai_key]",
        "options": {"api_key": "[REDACTED:credential]", "nested": ["[REDACTED:openai_key]"]},
    }
    assert Redaction.default().text(secret) != secret


def test_an_open_write_carries_the_input_and_the_close_write_the_output() -> None:
    """With ``emit_open``, the open envelope is built while the call runs: its input is settled
    then, and the output when the call ends."""
    double = InMemoryControlPlane()
    runtime.install(double, flush_interval=60, emit_open=True)
    seen: list[Any] = []

    @chronicle.boundary("slow", kind="tool")
    def slow(query: dict[str, Any]) -> dict[str, Any]:
        assert chronicle.flush(30)  # the open write is built and saved now
        seen.extend(e.model_dump(mode="json", exclude_none=True) for e in double.envelopes)
        return {"answer": [query["q"]]}

    with chronicle.record("open"):
        slow({"q": "weather"})
    assert chronicle.flush(30)
    [opened] = seen
    assert opened["envelope_status"]["state"] == "open"
    assert opened["input"] == {"raw": {"query": {"q": "weather"}}} and "output" not in opened
    [closed] = double.envelopes
    assert closed.envelope_status.state.value == "closed"
    assert closed.input.raw == {"query": {"q": "weather"}}
    assert closed.output is not None and closed.output.raw == {"answer": ["weather"]}


# ---- a stream's end --------------------------------------------------------------------------

_KEY = SECRETS["openai_key"]
_STREAMS = [
    chat_text("The weather in Paris is mild. " * 20),
    chat_text(f"Use {_KEY} for staging."),  # a key split across deltas: chunks not stored
    chat_tool_calls(tool_call("search", {"q": "Paris", "password": "hunter2"}, id="call_1")),
]


def _streamed(llm_server: LlmServer, settings: dict[str, Any], *, later: bool) -> list[Any]:
    """The envelopes of three streamed chat calls, their ends settled later or at the end."""
    llm_server.reply_with(*(streamed(reply, deltas=9) for reply in _STREAMS))
    with _recording(settings, later=later) as double, _openai(llm_server) as oai:
        with chronicle.record("streams"):
            for _ in _STREAMS:
                messages: Any = [{"role": "user", "content": "Weather?"}]
                for _ in oai.chat.completions.create(
                    model="gpt-4o-mini", messages=messages, stream=True
                ):
                    pass
    return _comparable(double)


def _comparable(double: InMemoryControlPlane) -> list[Any]:
    """The saved envelopes without what differs between two runs anyway: the server's ids and
    times, the envelopes' own ids and times."""
    bodies = [_without_ids(e.model_dump(mode="json", exclude_none=True)) for e in double.envelopes]
    saved = re.sub(r"(chatcmpl-|call_)[0-9a-f]+", r"\1ID", json.dumps(bodies))
    saved = re.sub(r'"(created|[a-z_.]*_at|[a-z_.]*_ms)": [^,}]+', r'"\1": 0', saved)
    return cast("list[Any]", json.loads(saved))


def _without_ids(body: dict[str, Any]) -> dict[str, Any]:
    for key in ("envelope_id", "span_id", "trace_id", "parent_envelope_id"):
        body.pop(key, None)
    return body


@PURE_PYTHON
@pytest.mark.parametrize("limit", [200, 256 * 1024])
def test_a_streams_envelope_is_the_one_settled_at_its_end(
    llm_server: LlmServer, limit: int
) -> None:
    settings = {"max_payload_bytes": limit}
    later = _streamed(llm_server, settings, later=True)
    now = _streamed(llm_server, settings, later=False)
    assert len(later) == 3
    assert later == now
    assert later[0]["metadata"]["chronicle.chunk_count"] > 10
    assert _KEY not in json.dumps(later)


def test_an_llm_calls_open_write_leaves_its_close_write_the_output() -> None:
    """The open envelope of an ``llm`` call is built while the call runs, before its output
    exists; the close envelope still carries the output."""
    double = InMemoryControlPlane()
    runtime.install(double, flush_interval=60, emit_open=True)

    @chronicle.boundary("slow-chat", kind="llm", provider="openai")
    def slow_chat(model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
        assert chronicle.flush(30)  # the open write is built now
        assert [e.envelope_status.state.value for e in double.envelopes] == ["open"]
        message = {"role": "assistant", "content": "hello"}
        return {
            "id": "c1",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }

    with chronicle.record("open-llm"):
        slow_chat("gpt-4o-mini", [{"role": "user", "content": "hi"}])
    assert chronicle.flush(30)
    closed = [e for e in double.envelopes if e.name == "slow-chat"]
    assert [e.envelope_status.state.value for e in closed] == ["closed"]
    output = closed[0].model_dump(mode="json", exclude_none=True)["output"]
    assert output["content"] == [{"type": "text", "text": "hello"}]
    assert output["raw"]["choices"][0]["message"]["content"] == "hello"


def test_a_record_settled_while_it_is_measured_is_measured_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker may settle a record (its open write) while the caller's thread measures it
    for the queue's byte budget: the walk that meets a dict growing under it measures again."""
    record = CallRecord("lookup", "tool", "t" * 32, "s" * 16, None, 1, 1)
    record.metadata["note"] = "x" * 1_000
    expected = record_size(record)
    real, failures = delivery._size_of, [RuntimeError("dictionary changed size during iteration")]

    def racing(*values: object) -> int:
        if failures:
            raise failures.pop()
        return real(*values)

    monkeypatch.setattr(delivery, "_size_of", racing)
    assert record_size(record) == expected > 1_000
    failures.extend([RuntimeError("again")] * 2)
    assert record_size(record) == delivery._RECORD_OVERHEAD  # never raises into the call


# ---- the shapes agents have ------------------------------------------------------------------


@chronicle.boundary("search", kind="tool")
def search(query: str, seen: list[str]) -> dict[str, Any]:
    return {"query": query, "hits": [f"{query}-{len(seen)}"], "seen": seen}


@chronicle.boundary("planner", kind="llm", provider="openai")
def planner(model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    text = f"plan for {messages[-1]['content']}"
    return {
        "id": "p1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }


@chronicle.boundary("researcher", kind="tool")
def researcher(topic: str, notes: list[str]) -> dict[str, Any]:
    messages = [{"role": "user", "content": topic}]
    plan = planner("gpt-4o-mini", messages)
    messages.append(plan["choices"][0]["message"])  # the agent's list grows after the call
    found = search(topic, notes)
    notes.append(found["hits"][0])  # and so does the caller's
    return {"topic": topic, "notes": notes}


@chronicle.boundary("orchestrator", kind="tool")
def orchestrator(question: str) -> list[Any]:
    notes: list[str] = []
    return [researcher(f"{question} #{i}", notes) for i in range(2)]


def _tree(settings: dict[str, Any], *, later: bool) -> list[tuple[str | None, str, Any, Any]]:
    """Each envelope as (its parent's name, its name, input, output), in call order."""
    with _recording(settings, later=later) as double, chronicle.record("nested"):
        orchestrator(f"Paris? key {_KEY}")
    envelopes = double.envelopes
    names = {e.envelope_id: e.name for e in envelopes}
    return [
        (
            names.get(e.parent_envelope_id or ""),
            e.name,
            e.model_dump(mode="json")["input"],
            e.model_dump(mode="json")["output"],
        )
        for e in envelopes
    ]


@PURE_PYTHON
def test_nested_sub_agents_record_the_same_tree_either_way() -> None:
    later = _tree({}, later=True)
    assert later == _tree({}, later=False)
    shape = [(parent, name) for parent, name, _, _ in later]
    assert shape == [
        (None, "orchestrator"),
        ("orchestrator", "researcher"),
        ("researcher", "planner"),
        ("researcher", "search"),
        ("orchestrator", "researcher"),
        ("researcher", "planner"),
        ("researcher", "search"),
    ]
    # Each call recorded its values as they were at the call, not as the agent left them.
    searches = [(i, o) for _, name, i, o in later if name == "search"]
    assert [i["raw"]["seen"] for i, _ in searches] == [
        [],
        ["Paris? key [REDACTED:openai_key] #0-0"],
    ]
    assert _KEY not in json.dumps(later)


def _completions(llm_server: LlmServer, *, later: bool) -> tuple[list[Any], int]:
    """Two plain (not streamed) calls through a wrapped OpenAI client, and how many of their
    results left the caller's thread frozen: the fields the server sent (the wrapped client's
    ``sent_body``), snapshotted as they are."""
    frozen_bodies: list[object] = []
    real = snapshot

    def counted(value: object, limit: int) -> bytes | None:
        frozen = real(value, limit)
        if isinstance(value, dict) and "choices" in value:
            frozen_bodies.append(frozen)
        return frozen

    llm_server.reply_with(
        chat_text(f"Use {_KEY} for staging."),
        chat_tool_calls(tool_call("login", {"user": "ann", "password": "hunter2"})),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(call_module, "snapshot", counted)
        with _recording({}, later=later) as double, _openai(llm_server) as oai:
            with chronicle.record("completions"):
                for _ in range(2):
                    oai.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": "Key?"}]
                    )
    return _comparable(double), sum(taken is not None for taken in frozen_bodies)


@PURE_PYTHON
def test_an_sdk_models_result_is_walked_later_from_what_the_server_sent(
    llm_server: LlmServer,
) -> None:
    later, frozen = _completions(llm_server, later=True)
    now, _ = _completions(llm_server, later=False)
    assert frozen == 2  # both results left the caller's thread as the bodies the server sent
    assert later == now and len(later) == 2
    assert _KEY not in json.dumps(later) and "hunter2" not in json.dumps(later)
