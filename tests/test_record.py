"""Recording against the real control plane: what is saved, read back over HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from typing import Any

import pytest
from agentplane_primitives.utils import new_span_id, new_trace_id
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from tests.support.stored import stored


@chronicle.boundary("planner", kind="llm")
def planner(task: str) -> dict[str, str]:
    return {"query": f"q:{task}"}


@chronicle.boundary("web_search", kind="tool")
def web_search(query: str) -> dict[str, list[str]]:
    return {"hits": [query]}


def researcher(task: str) -> dict[str, list[str]]:  # plain code, not a boundary
    plan = planner(task)
    return web_search(plan["query"])


@chronicle.boundary("research", kind="tool")
def research(task: str) -> dict[str, list[str]]:
    return researcher(task)


def by_name(envelopes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for envelope in envelopes:
        grouped.setdefault(envelope["name"], []).append(envelope)
    return grouped


def test_two_sibling_branches_of_the_same_shape_nest_under_their_own_caller(recording):
    with chronicle.record("orchestrate") as session:
        research("source A")
        research("source B")
    envelopes = recording.saved(session.trace_id, 6)
    grouped = by_name(envelopes)
    assert [e["metadata"]["chronicle.invocation_index"] for e in grouped["research"]] == [1, 2]
    for index in range(2):
        parent = grouped["research"][index]
        assert parent.get("parent_envelope_id") is None
        assert grouped["planner"][index].get("parent_envelope_id") == parent["envelope_id"]
        assert grouped["web_search"][index].get("parent_envelope_id") == parent["envelope_id"]
    assert grouped["web_search"][1]["input"]["raw"] == {"query": "q:source B"}
    sequences = sorted(e["metadata"]["chronicle.sequence"] for e in envelopes)
    assert sequences == [1, 2, 3, 4, 5, 6]
    assert {e["span_id"] for e in envelopes} == {session.span_id}


def test_asyncio_gather_siblings_each_parent_their_own_children(recording):
    @chronicle.boundary("fetch", kind="tool")
    async def fetch(item: str) -> str:
        await asyncio.sleep(0.01)
        return await inner(item)

    @chronicle.boundary("inner", kind="tool")
    async def inner(item: str) -> str:
        await asyncio.sleep(0.005)
        return item.upper()

    async def main() -> list[str]:
        async with chronicle.record("gather") as session:
            results = await asyncio.gather(fetch("a"), fetch("b"), fetch("c"))
        main.session = session  # type: ignore[attr-defined]
        return list(results)

    assert asyncio.run(main()) == ["A", "B", "C"]
    session = main.session  # type: ignore[attr-defined]
    grouped = by_name(recording.saved(session.trace_id, 6))
    parent_of = {e["input"]["raw"]["item"]: e["envelope_id"] for e in grouped["fetch"]}
    for child in grouped["inner"]:
        assert child.get("parent_envelope_id") == parent_of[child["input"]["raw"]["item"]]


def test_a_failing_boundary_is_recorded_and_reraised_unchanged(recording):
    class Boom(RuntimeError):
        pass

    error = Boom("disk on fire")

    @chronicle.boundary("delete_file", kind="tool")
    def delete_file(path: str) -> None:
        raise error

    with chronicle.record("fails") as session, pytest.raises(Boom) as caught:
        delete_file("/tmp/x")
    assert caught.value is error
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"] == {"type": "Boom", "message": "disk on fire"}
    trace = recording.control_plane.trace(session.trace_id)
    assert trace["spans"][0]["status"] == "success"  # the request handled the failure

    with pytest.raises(Boom), chronicle.record("escapes") as escaped:
        delete_file("/tmp/y")
    recording.saved(escaped.trace_id, 1)
    trace = recording.control_plane.trace(escaped.trace_id)
    assert trace["spans"][0]["status"] == "failure"  # it escaped the request span


def test_arguments_are_named_by_the_rules(recording):
    @chronicle.boundary("posonly", kind="tool")
    def posonly(a: int, b: int, /, c: int, *rest: int, d: int = 4, **extra: str) -> int:
        return a

    class Tools:
        @chronicle.boundary("method", kind="tool")
        def method(self, query: str) -> str:
            return query

        @classmethod
        @chronicle.boundary("klass", kind="tool")
        def klass(cls, n: int) -> int:
            return n

    with chronicle.record("naming") as session:
        assert posonly(1, 2, 3, 5, 6, d=7, colour="red") == 1
        assert Tools().method("hello") == "hello"
        assert Tools.klass(3) == 3
    grouped = by_name(recording.saved(session.trace_id, 3))
    assert grouped["posonly"][0]["input"]["raw"] == {
        "a": 1,
        "b": 2,
        "c": 3,
        "rest": [5, 6],
        "d": 7,
        "colour": "red",
    }
    assert grouped["method"][0]["input"]["raw"] == {"query": "hello"}
    assert grouped["klass"][0]["input"]["raw"] == {"n": 3}
    assert grouped["method"][0]["output"]["raw"] == "hello"


def test_trace_labels_are_found_by_search(recording):
    with chronicle.record(
        "labelled", labels={"session_id": "sess-42", "user_id": "u-7"}
    ) as session:
        web_search("x")
    recording.saved(session.trace_id, 1)
    found = recording.control_plane.search(session_id="sess-42")
    assert [t["trace_id"] for t in found] == [session.trace_id]
    assert found[0]["metadata"] == {"session_id": "sess-42", "user_id": "u-7"}
    (envelope,) = recording.control_plane.trace_envelopes(session.trace_id)
    assert "session_id" not in json.dumps(envelope["metadata"])  # labels live on the trace only


def test_a_user_provider_sees_the_boundary_as_a_tool_span_with_its_own_span_nested(control_plane):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)
    user_tracer = provider.get_tracer("user-app")

    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: str) -> str:
        with user_tracer.start_as_current_span("user.db_query"):
            return key * 2

    try:
        with user_tracer.start_as_current_span("user.request"):
            with chronicle.record("with-user-provider") as session:
                assert lookup("ab") == "abab"
        assert chronicle.flush(10)
    finally:
        chronicle.reset()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_span = "execute_tool lookup"  # named by the OpenTelemetry GenAI convention
    assert {"user.request", "with-user-provider", tool_span, "user.db_query"} <= set(spans)
    tool = spans[tool_span]
    attributes: Any = tool.attributes
    assert attributes["chronicle.boundary"] == "lookup"
    assert attributes["openinference.span.kind"] == "TOOL"
    assert json.loads(attributes["input.value"]) == {"key": "ab"}
    parent: Any = spans["user.db_query"].parent
    assert parent.span_id == tool.context.span_id
    assert len({s.context.trace_id for s in spans.values()}) == 1
    (envelope,) = control_plane.wait_for_envelopes(session.trace_id, 1)
    assert envelope["envelope_id"] == format(tool.context.span_id, "016x")
    assert session.trace_id == format(tool.context.trace_id, "032x")


def search_once(flush_timeout: float = 10, **configuration: Any) -> tuple[str, bool]:
    """Configure Chronicle with ``configuration``, record one ``web_search`` and flush: the trace
    id and whether the flush delivered everything within ``flush_timeout`` seconds. Chronicle is
    reset after."""
    chronicle.configure(**configuration)
    try:
        with chronicle.record("search") as session:
            web_search("x")
        return session.trace_id, chronicle.flush(flush_timeout)
    finally:
        chronicle.reset()


def test_service_name_comes_from_otel_service_name(control_plane, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-agent")
    trace_id, delivered = search_once(control_plane_url=control_plane.url)
    assert delivered
    trace = control_plane.trace(trace_id)
    assert [s["service"] for s in trace["spans"]] == ["billing-agent"]


def test_a_50kb_output_is_saved_whole_under_tiny_span_limits(control_plane):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        span_limits=SpanLimits(max_attribute_length=64, max_span_attributes=8)
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)
    big = "x" * 50_000

    @chronicle.boundary("big", kind="tool")
    def produce(size: int) -> dict[str, object]:
        return {"blob": big, "size": size}

    try:
        with chronicle.record("big-output") as session:
            produce(50_000)
        assert chronicle.flush(10)
    finally:
        chronicle.reset()
    (envelope,) = control_plane.wait_for_envelopes(session.trace_id, 1)
    assert envelope["output"]["raw"] == {"blob": big, "size": 50_000}
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool big"]
    attributes: Any = span.attributes
    assert len(attributes["output.value"]) == 64  # the display copy was cut, the record not


@pytest.mark.parametrize(
    ("variable", "value"), [("CHRONICLE_ENABLED", "false"), ("OTEL_SDK_DISABLED", "true")]
)
def test_recording_off_saves_nothing_but_the_call_still_works(
    control_plane, monkeypatch, variable, value
):
    monkeypatch.setenv(variable, value)
    before = stored(control_plane)
    chronicle.configure(control_plane_url=control_plane.url)
    try:
        assert chronicle.is_enabled() is False
        with chronicle.record("off") as session:
            assert research("quiet") == {"hits": ["q:quiet"]}
        assert session.trace_id and session.span_id  # ids exist for hooks and logs
        assert chronicle.flush(5)
    finally:
        chronicle.reset()
    assert stored(control_plane) == before  # no trace added, none changed
    assert control_plane.trace_envelopes(session.trace_id) == []  # nor an envelope under its id


def test_a_boundary_outside_any_span_is_recorded_in_an_implicit_span(recording):
    seen: dict[str, Any] = {}

    @chronicle.boundary("loose", kind="tool")
    def loose(n: int) -> int:
        seen["session"] = chronicle.current_session()
        return n + 1

    assert chronicle.current_session() is None
    assert loose(1) == 2
    session = seen["session"]
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["span_id"] == session.span_id
    assert envelope["output"]["raw"] == 2
    assert chronicle.current_session() is None


def test_a_malformed_traceparent_starts_a_new_trace(recording):
    with chronicle.span({"traceparent": "00-nothex-zz-01"}) as session:
        web_search("x")
    assert len(session.trace_id) == 32
    assert session.parent_envelope_id is None
    recording.saved(session.trace_id, 1)


def test_a_valid_traceparent_joins_the_callers_trace(recording):
    trace_id, caller = new_trace_id(), new_span_id()  # fresh: the control plane is shared
    with chronicle.span(
        {"Traceparent": f"00-{trace_id}-{caller}-01"}, service="downstream"
    ) as session:
        web_search("x")
    assert (session.trace_id, session.parent_envelope_id) == (trace_id, caller)
    recording.saved(trace_id, 1)
    (span,) = recording.control_plane.trace(trace_id)["spans"]
    assert span.get("parent_envelope_id") == caller
    assert span["service"] == "downstream"


def test_reserved_metadata_keys_are_rejected():
    with pytest.raises(chronicle.ReservedMetadataError, match=r"reserved 'chronicle\.' prefix"):
        chronicle.span(metadata={"chronicle.sequence": 1})


def test_every_envelope_arrives_when_the_control_plane_restarts_mid_run(
    fresh_control_plane, caplog
):
    chronicle.configure(control_plane_url=fresh_control_plane.url, flush_interval=0.05)
    caplog.set_level(logging.WARNING, logger="chronicle")
    try:
        with chronicle.record("outage") as session:
            for i in range(5):
                web_search(f"before {i}")
            fresh_control_plane.stop()
            for i in range(5):
                web_search(f"during {i}")
        fresh_control_plane.start()
        assert chronicle.flush(30)
    finally:
        chronicle.reset()
    envelopes = fresh_control_plane.wait_for_envelopes(session.trace_id, 10)
    queries = sorted(e["input"]["raw"]["query"] for e in envelopes)
    assert queries == sorted([f"before {i}" for i in range(5)] + [f"during {i}" for i in range(5)])
    assert fresh_control_plane.trace(session.trace_id)["spans"][0]["state"] == "closed"
    assert any("retrying" in r.getMessage() for r in caplog.records)


def test_the_api_key_is_sent_as_a_bearer_token(tmp_path):
    from chronicle.testing import LocalControlPlane

    with LocalControlPlane(api_keys="s3cret-key:local:ingest+read") as secured:
        trace_id, delivered = search_once(control_plane_url=secured.url, api_key="s3cret-key")
        assert delivered
        assert len(secured.wait_for_envelopes(trace_id, 1)) == 1


def test_a_wrong_api_key_is_reported_without_leaking_it(caplog):
    from chronicle.testing import LocalControlPlane

    caplog.set_level(logging.WARNING, logger="chronicle")
    with LocalControlPlane(api_keys="right-key:local:ingest+read") as secured:
        _, delivered = search_once(
            1, control_plane_url=secured.url, api_key="wrong-key-123", registration_fail_open=True
        )
        assert delivered is False
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "401" in text and "api_key" in text
    assert "wrong-key-123" not in text


def test_ending_a_request_span_does_not_wait_for_delivery(fresh_control_plane):
    chronicle.configure(control_plane_url=fresh_control_plane.url, flush_interval=5.0)
    try:
        with chronicle.record("fast") as session:
            for i in range(50):
                web_search(str(i))
        fresh_control_plane.stop()  # whatever is still queued now must survive the gap
        fresh_control_plane.start()
        assert chronicle.flush(30)
    finally:
        chronicle.reset()
    assert len(fresh_control_plane.wait_for_envelopes(session.trace_id, 50)) == 50


def test_otel_current_span_inside_a_boundary_is_the_boundary(recording):
    @chronicle.boundary("peek", kind="tool")
    def peek() -> str:
        current = trace_api.get_current_span()
        assert isinstance(current, ReadableSpan)
        return current.name

    with chronicle.record("peeking"):
        assert peek() == "execute_tool peek"


def test_with_nowhere_to_record_nothing_is_recorded_but_hooks_run(caplog):
    caplog.set_level(logging.WARNING, logger="chronicle")
    chronicle.configure()
    seen = []
    chronicle.default_hooks.register(chronicle.FunctionHook(lambda call: seen.append(call.name)))
    assert chronicle.is_enabled() is False
    with chronicle.record("nowhere") as session:
        assert web_search("x") == {"hits": ["x"]}
    assert seen == ["web_search"]
    assert session.trace_id
    assert any("nothing is recorded" in r.getMessage() for r in caplog.records)


def test_built_on_first_use_it_says_nothing_is_recorded_at_the_first_call_only(caplog):
    # A process that only replays (a test run with no configuration) builds the runtime on
    # first use and never records: the warning waits for a call that would have been recorded.
    chronicle.reset()
    caplog.set_level(logging.WARNING, logger="chronicle")
    assert chronicle.runtime.current().recording is False
    assert not any("nothing is recorded" in r.getMessage() for r in caplog.records)
    with chronicle.record("nowhere"):
        assert web_search("x") == {"hits": ["x"]}
        web_search("y")
    assert sum("nothing is recorded" in r.getMessage() for r in caplog.records) == 1


def test_a_plain_function_returning_a_coroutine_is_recorded_when_awaited(recording):
    async def _impl(query: str) -> dict[str, str]:
        await asyncio.sleep(0.01)
        return {"answer": query}

    def create(
        query: str,
    ) -> Coroutine[
        Any, Any, dict[str, str]
    ]:  # like the async SDK clients' methods: not ``async def``
        return _impl(query)

    traced = chronicle.wrap_llm("async.create", create, is_async=True)

    async def main() -> str:
        async with chronicle.record("coroutine") as session:
            assert await traced("q") == {"answer": "q"}
        return session.trace_id

    trace_id = asyncio.run(main())
    (envelope,) = recording.saved(trace_id, 1)
    assert envelope["output"]["raw"] == {"answer": "q"}
    assert "chronicle.lossy_output" not in envelope["metadata"]
