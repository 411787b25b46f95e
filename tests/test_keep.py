"""Keep on incident: a request the sampler dropped is held, and saved when it turns out to matter.

Each test samples through a ``TracerProvider`` of its own (with an in-memory exporter standing
for the user's backend) and saves to the real control plane.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tracemalloc
from typing import Any

import pytest
from agentplane_primitives.models import Envelope
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, TraceIdRatioBased

import chronicle
from chronicle import runtime
from chronicle.config import load_settings
from chronicle.save.client import HttpControlPlane
from chronicle.save.keep import KeepBuffer
from chronicle.testing import LocalControlPlane
from chronicle.wire import KEPT, CallRecord, RequestRecord
from tests.support.child import run_child

GATEWAY_DOWN = "payment gateway refused order"


@chronicle.boundary("lookup", kind="tool")
def lookup(order: int) -> dict[str, object]:
    return {"order": order, "status": "shipped", "note": "x" * 200}


@chronicle.boundary("refund", kind="tool")
def refund(order: int) -> dict[str, object]:
    if order % 20 in (3, 13):
        raise RuntimeError(f"{GATEWAY_DOWN} {order}")
    return {"refunded": order}


def handle(order: int) -> dict[str, object]:
    """The agent: looks the order up and refunds it; a refused refund is answered (3), or
    raised (13)."""
    lookup(order)
    try:
        return refund(order)
    except RuntimeError as exc:
        if order % 20 == 13:
            raise
        return {"error": str(exc)}


class ThreadNotingClient(HttpControlPlane):
    """The real HTTP client, noting which thread writes each trace's registration and spans."""

    def __init__(self, url: str) -> None:
        super().__init__(url, None, 10.0)
        self.writers: dict[str, set[str]] = {}

    def _note(self, trace_id: str) -> None:
        self.writers.setdefault(trace_id, set()).add(threading.current_thread().name)

    def register_trace(self, trace: Any) -> None:
        self._note(trace.trace_id)
        super().register_trace(trace)

    def put_span(self, span: Any) -> None:
        self._note(span.trace_id)
        super().put_span(span)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def sampling(
    control_plane: LocalControlPlane,
    exporter: InMemorySpanExporter,
    sampler: Sampler,
    client: HttpControlPlane | None = None,
    **settings: object,
) -> None:
    """Configure Chronicle on a provider with ``sampler`` whose exporter is ``exporter``."""
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = {"control_plane_url": control_plane.url, "flush_interval": 0.05} | settings
    if client is None:
        chronicle.configure(tracer_provider=provider, **settings)
    else:
        runtime.install(client, tracer_provider=provider, **settings)


def keep_buffer() -> KeepBuffer:
    held = runtime.current().keep
    assert held is not None
    return held


def test_a_ratio_sampler_loses_no_incident(control_plane, exporter):
    """0.1 of 200 requests sampled: every failed one is saved and replays, so are the flagged
    one and the one named by later feedback; the rest are dropped and counted, never exported,
    and the agent's thread never waited on the network for them."""
    client = ThreadNotingClient(control_plane.url)
    sampling(control_plane, exporter, TraceIdRatioBased(0.1), client, keep_window=3.0)
    requests: dict[int, chronicle.Session] = {}
    unsampled: set[int] = set()
    flagged = feedback = None
    slowest = 0.0  # of the unsampled requests
    for order in range(200):
        started = time.perf_counter()
        try:
            with chronicle.record("refund-request", labels={"session_id": f"s-{order}"}) as s:
                requests[order] = s
                if not trace.get_current_span().is_recording():
                    unsampled.add(order)
                    if flagged is None and order % 20 not in (3, 13):
                        flagged = order
                        s.keep("the customer wrote twice")
                handle(order)
        except RuntimeError:
            pass
        if order in unsampled:
            slowest = max(slowest, time.perf_counter() - started)
        if (
            feedback is None
            and order in unsampled
            and order % 20 not in (3, 13)
            and order != flagged
        ):
            feedback = order
            assert chronicle.keep(session_id=f"s-{order}", reason="thumbs down") == 1
    assert flagged is not None and feedback is not None
    failed = {order for order in requests if order % 20 in (3, 13)}
    kept = (failed & unsampled) | {flagged, feedback}
    assert 150 < len(unsampled) < 200  # about 0.9 of them
    assert chronicle.flush(10)

    # The user's exporter got the sampled requests only, as before.
    exported = {span.context.trace_id for span in exporter.get_finished_spans()}
    assert {f"{t:032x}" for t in exported} == {
        requests[o].trace_id for o in requests if o not in unsampled
    }

    # Every failed request, sampled or not, is on the control plane and replays.
    for order in failed | {flagged, feedback}:
        session = requests[order]
        envelopes = control_plane.wait_for_envelopes(session.trace_id, 2)
        assert [e["name"] for e in envelopes] == ["lookup", "refund"]
        for envelope in envelopes:
            Envelope.model_validate(envelope)
        (span,) = control_plane.trace(session.trace_id)["spans"]
        if order in kept:
            assert span["metadata"][KEPT] in (
                "the call 'refund' failed (RuntimeError)",
                "the customer wrote twice",
                "thumbs down",
            )
        else:
            assert KEPT not in span["metadata"]
    for order in failed & unsampled:
        session = requests[order]
        with chronicle.replay_trace(session.trace_id, session.span_id) as run:
            if order % 20 == 13:
                with pytest.raises(RuntimeError, match=GATEWAY_DOWN):
                    handle(order)
            else:
                assert GATEWAY_DOWN in str(handle(order)["error"])
        assert [(c.name, c.mode) for c in run.call_log()] == [
            ("lookup", "stub"),
            ("refund", "stub"),
        ]
    reasons = {
        order: control_plane.trace(requests[order].trace_id)["spans"][0]["metadata"][KEPT]
        for order in (flagged, feedback)
    }
    assert reasons == {flagged: "the customer wrote twice", feedback: "thumbs down"}

    # The rest: not on the control plane, dropped once their window ended, and counted.
    time.sleep(3.2)
    held = keep_buffer()
    assert held.held == 0
    assert held.kept == len(kept)
    assert held.dropped == len(unsampled) - len(kept)
    for order in sorted(unsampled - kept)[:20]:
        assert control_plane.trace(requests[order].trace_id) is None
    assert chronicle.keep(session_id=f"s-{min(unsampled - kept)}") == 0  # too late now

    # Kept requests were written by the delivery thread only: no network on the agent's.
    for order in kept:
        assert client.writers[requests[order].trace_id] == {"chronicle-delivery"}
    print(f"\nslowest unsampled request: {slowest * 1000:.1f} ms; kept {len(kept)}")


def test_a_kept_request_has_the_shape_of_a_sampled_one(control_plane, exporter):
    def run(sampler: Sampler) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        sampling(control_plane, exporter, sampler)
        with pytest.raises(RuntimeError), chronicle.record("refund-request") as session:
            handle(13)
        assert chronicle.flush(10)
        envelopes = control_plane.wait_for_envelopes(session.trace_id, 2)
        found = control_plane.trace(session.trace_id)
        assert found is not None
        chronicle.reset()
        return found, envelopes

    sampled_trace, sampled = run(ALWAYS_ON)
    kept_trace, kept = run(ALWAYS_OFF)

    def shape(value: object) -> object:
        if isinstance(value, dict):
            return {key: shape(item) for key, item in value.items() if key != KEPT}
        if isinstance(value, list):
            return [shape(item) for item in value]
        return type(value).__name__

    assert shape(kept) == shape(sampled)
    assert shape(kept_trace) == shape(sampled_trace)
    assert kept_trace["spans"][0]["metadata"][KEPT] == "the call 'refund' failed (RuntimeError)"
    assert [e["output"].get("error") for e in kept] == [e["output"].get("error") for e in sampled]


def test_a_request_flagged_while_running_saves_what_came_before_and_after(control_plane, exporter):
    sampling(control_plane, exporter, ALWAYS_OFF)
    with chronicle.record("flagged") as session:
        lookup(1)
        session.keep("odd answer")
        session.keep("asked twice: the first reason stays")
        lookup(2)
    assert chronicle.flush(10)
    envelopes = control_plane.wait_for_envelopes(session.trace_id, 2)
    assert [e["input"]["raw"] for e in envelopes] == [{"order": 1}, {"order": 2}]
    (span,) = control_plane.trace(session.trace_id)["spans"]
    assert span["metadata"][KEPT] == "odd answer"
    assert span["state"] == "closed"
    assert exporter.get_finished_spans() == ()


def test_a_slow_request_is_kept(control_plane, exporter):
    sampling(control_plane, exporter, ALWAYS_OFF, keep_slower_than=0.05)
    with chronicle.record("quick") as quick:
        lookup(1)
    with chronicle.record("slow") as slow:
        lookup(2)
        time.sleep(0.1)
    assert chronicle.flush(10)
    (span,) = control_plane.trace(slow.trace_id)["spans"]
    assert span["metadata"][KEPT].startswith("it ran 0.1 s (keep_slower_than=0.05 s)")
    assert control_plane.trace(quick.trace_id) is None


def test_feedback_after_the_window_finds_nothing_and_the_drop_is_counted(control_plane, exporter):
    sampling(control_plane, exporter, ALWAYS_OFF, keep_window=0.2)
    with chronicle.record("late", labels={"session_id": "late-feedback"}) as session:
        lookup(1)
    assert keep_buffer().held == 1
    time.sleep(0.3)
    assert chronicle.keep(session_id="late-feedback", reason="too late") == 0
    assert chronicle.keep(trace_id=session.trace_id) == 0
    assert (keep_buffer().held, keep_buffer().dropped, keep_buffer().kept) == (0, 1, 0)
    assert chronicle.flush(10)
    assert control_plane.trace(session.trace_id) is None


def test_feedback_by_trace_id_keeps_the_request(control_plane, exporter):
    sampling(control_plane, exporter, ALWAYS_OFF)
    with chronicle.record("named") as session:
        lookup(7)
    assert chronicle.keep(trace_id=session.trace_id.upper(), reason="ticket 4211") == 1
    assert chronicle.keep(trace_id=session.trace_id) == 0  # kept already
    assert chronicle.flush(10)
    (envelope,) = control_plane.wait_for_envelopes(session.trace_id, 1)
    assert envelope["output"]["raw"]["order"] == 7
    assert control_plane.trace(session.trace_id)["spans"][0]["metadata"][KEPT] == "ticket 4211"


def test_a_sampled_request_is_saved_as_before_whatever_keep_says(control_plane, exporter):
    sampling(control_plane, exporter, ALWAYS_ON)
    with chronicle.record("sampled", labels={"session_id": "s-sampled"}) as session:
        lookup(1)
        session.keep("no effect")
    assert chronicle.keep(session_id="s-sampled") == 0
    assert chronicle.flush(10)
    assert len(control_plane.wait_for_envelopes(session.trace_id, 1)) == 1
    assert KEPT not in control_plane.trace(session.trace_id)["spans"][0]["metadata"]
    assert (keep_buffer().held, keep_buffer().kept) == (0, 0)
    assert {s.name for s in exporter.get_finished_spans()} == {"sampled", "execute_tool lookup"}


def test_keeping_off_keeps_nothing(control_plane, exporter, monkeypatch):
    monkeypatch.setenv("CHRONICLE_KEEP_UNSAMPLED", "false")
    sampling(control_plane, exporter, ALWAYS_OFF)
    assert runtime.current().keep is None
    with pytest.raises(RuntimeError), chronicle.record("lost") as session:
        handle(13)
    assert chronicle.keep(trace_id=session.trace_id) == 0
    assert chronicle.flush(10)
    assert control_plane.trace(session.trace_id) is None


def test_the_settings_are_checked_and_read_from_the_environment():
    settings = load_settings(
        {},
        {
            "CHRONICLE_KEEP_WINDOW": "120",
            "CHRONICLE_KEEP_MAX_REQUESTS": "50",
            "CHRONICLE_KEEP_MAX_BYTES": "1048576",
            "CHRONICLE_KEEP_SLOWER_THAN": "2.5",
        },
    )
    assert (settings.keep_unsampled, settings.keep_window, settings.keep_max_requests) == (
        True,
        120.0,
        50,
    )
    assert (settings.keep_max_bytes, settings.keep_slower_than) == (1048576, 2.5)
    with pytest.raises(chronicle.ConfigurationError, match=r"keep_window.*above 0"):
        chronicle.configure(keep_window=0)
    with pytest.raises(chronicle.ConfigurationError, match="CHRONICLE_KEEP_MAX_BYTES"):
        load_settings({}, {"CHRONICLE_KEEP_MAX_BYTES": "lots"})


def test_bad_arguments_say_what_to_pass(control_plane, exporter):
    sampling(control_plane, exporter, ALWAYS_OFF)
    with pytest.raises(TypeError, match=r"session_id=\.\.\. or trace_id=\.\.\."):
        chronicle.keep()
    with pytest.raises(TypeError, match="session_id"):
        chronicle.keep(session_id="s", trace_id="0" * 32)
    with pytest.raises(TypeError, match="reason"):
        chronicle.keep(session_id="s", reason="")
    with chronicle.record("r") as session, pytest.raises(TypeError, match="reason"):
        session.keep(None)  # type: ignore[arg-type]


@pytest.fixture
def burst_settings() -> dict[str, object]:
    return {"keep_max_requests": 200, "keep_max_bytes": 2 * 1024 * 1024, "keep_window": 60.0}


def test_the_buffer_stays_within_its_bounds_under_a_burst(control_plane, exporter, burst_settings):
    """4 threads x 500 requests of about 20 KB each, none sampled and none failing: what is
    held stays within keep_max_requests and keep_max_bytes (Python's own allocations measured),
    the oldest are dropped and counted, and no request waits on another's network."""
    sampling(control_plane, exporter, ALWAYS_OFF, **burst_settings)
    payload = "p" * 10_000

    @chronicle.boundary("answer", kind="tool")
    def answer(question: str) -> str:
        return question.upper()

    def agent(worker: int) -> None:
        for n in range(500):
            with chronicle.record("burst", labels={"session_id": f"b-{worker}-{n}"}):
                answer(payload)

    with chronicle.record("warm-up"):  # imports and first-use caches are not the buffer's
        answer(payload)
    held = keep_buffer()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        threads = [threading.Thread(target=agent, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held.held <= 200
    assert held.held_bytes <= 2 * 1024 * 1024
    assert held.dropped == 2001 - held.held
    assert held.evicted == held.dropped
    # What is still held is about what the bound says (records' JSON, strings of 10 KB each,
    # twice: input and output), not 2,000 requests' worth (about 40 MB).
    assert grown < 3 * 2 * 1024 * 1024, grown
    print(
        f"\nburst: {held.held} held, {held.held_bytes} bytes counted, {grown} bytes grown "
        f"(tracemalloc), {held.dropped} dropped"
    )
    # No request waited on the network: none registered its trace on the agent's thread.
    assert runtime.current().delivery.registration_waits == 0


class DeliveryLog:
    """Stands in for delivery beside a ``KeepBuffer``: notes what it is handed, in order."""

    def __init__(self) -> None:
        self.handed: list[tuple[str, object]] = []

    def register_trace(self, record: object, trace_id: str, *, wait: bool) -> None:
        assert not wait  # a kept request's registration never waits on the agent's thread
        self.handed.append(("register", trace_id))

    def sends_open(self, record: object) -> bool:
        return isinstance(record, RequestRecord)  # as delivery without emit_open

    def span_started(self, record: object, trace_id: int, span_id: int, start_ns: int) -> None:
        self.handed.append(("open", span_id))

    def span_ended(
        self, record: object, trace_id: int, span_id: int, start_ns: int, end_ns: int
    ) -> None:
        self.handed.append(("close", span_id))


def buffer_of(**settings: object) -> tuple[KeepBuffer, DeliveryLog]:
    delivery = DeliveryLog()
    return KeepBuffer(delivery, load_settings(settings, {})), delivery  # type: ignore[arg-type]


def a_call(name: str = "lookup", error: tuple[str, str] | None = None) -> CallRecord:
    return CallRecord(
        name=name,
        kind="tool",
        trace_id="0" * 31 + "1",
        span_id="0" * 15 + "1",
        parent_envelope_id=None,
        sequence=1,
        invocation=1,
        input_raw={"q": "x" * 100},
        output_raw={"a": 1},
        error=error,
    )


def test_a_kept_request_reaches_delivery_in_order_and_a_late_stream_follows_it():
    held, delivery = buffer_of()
    request = RequestRecord(service="s", metadata={}, labels={"session_id": "s1"})
    held.span_started(request, 1, 10, 0)
    held.register_trace(request, f"{1:032x}")
    first, failing = a_call(), a_call("refund", ("RuntimeError", "refused"))
    held.span_started(first, 1, 11, 1)
    held.span_ended(first, 1, 11, 1, 2)
    assert delivery.handed == []  # held, nothing handed yet
    held.span_started(failing, 1, 12, 3)
    held.span_ended(failing, 1, 12, 3, 4)
    assert delivery.handed == [
        ("register", f"{1:032x}"),
        ("open", 10),
        ("close", 11),
        ("close", 12),
    ]
    assert request.metadata[KEPT] == "the call 'refund' failed (RuntimeError)"
    stream = a_call("stream")
    held.span_started(stream, 1, 13, 5)
    held.span_ended(request, 1, 10, 0, 6)  # the request span ends before its stream
    held.span_ended(stream, 1, 13, 5, 7)
    assert delivery.handed[-2:] == [("close", 10), ("close", 13)]
    assert (held.held, held.kept, held.dropped, held.held_bytes) == (0, 1, 0, 0)


def test_the_oldest_go_first_and_what_is_held_stays_within_the_bounds():
    held, delivery = buffer_of(keep_max_requests=3)
    for number in range(1, 11):
        request = RequestRecord(service="s", metadata={})
        held.span_started(request, number, number, 0)
        held.span_ended(request, number, number, 0, 1)
    assert (held.held, held.dropped, held.evicted) == (3, 7, 7)
    assert held.keep_trace(f"{1:032x}", "too late: evicted") is False
    assert held.keep_trace(f"{10:032x}", "newest") is True
    assert delivery.handed == [("open", 10), ("close", 10)]
    # What is left of the dropped and the kept: nothing but what is held.
    assert len(held._requests) == len(held._ended) == 2
    held.close()
    assert (held.held, held.dropped, held.held_bytes) == (0, 9, 0)
    held.span_started(RequestRecord(service="s", metadata={}), 11, 11, 0)  # closed: ignored
    assert held.held == 0


def test_with_the_control_plane_down_a_kept_request_costs_the_agent_nothing_and_arrives_later(
    fresh_control_plane, exporter
):
    """The kept request is handed to delivery, and nothing is lost: it is saved once the
    control plane is back."""
    sampling(fresh_control_plane, exporter, ALWAYS_OFF)
    fresh_control_plane.stop()
    sessions = []
    for order in (13, 33, 53):
        with pytest.raises(RuntimeError), chronicle.record("outage") as session:
            handle(order)
        sessions.append(session)
    assert keep_buffer().kept == 3
    assert runtime.current().delivery.registration_waits == 0  # queued, never waited for
    fresh_control_plane.start()
    assert chronicle.flush(30)
    for session in sessions:
        assert len(fresh_control_plane.wait_for_envelopes(session.trace_id, 2)) == 2


def test_the_environment_sampler_of_the_provider_chronicle_builds(control_plane):
    """``OTEL_TRACES_SAMPLER=always_off``: the provider Chronicle builds drops everything, and
    the failed request is still on the control plane; the one that went well is not."""
    result = run_child(
        """
        import chronicle

        @chronicle.boundary("charge", kind="tool")
        def charge(amount):
            if amount > 100:
                raise ValueError("over the limit")
            return {"charged": amount}

        with chronicle.record("fine") as fine:
            charge(5)
        try:
            with chronicle.record("failed") as failed:
                charge(500)
        except ValueError:
            pass
        print(fine.trace_id, failed.trace_id)
        assert chronicle.flush(10)
        """,
        OTEL_TRACES_SAMPLER="always_off",
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    fine, failed = result.stdout.split()
    (envelope,) = control_plane.wait_for_envelopes(failed, 1)
    assert envelope["output"]["error"]["message"] == "over the limit"
    assert control_plane.trace(fine) is None


def test_a_control_plane_that_never_answers_holds_no_request(exporter):
    """A server that accepts connections and never answers: a request that waited on it would
    wait registration_timeout (0.5 s) at least. Kept requests do not wait at all."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        provider = TracerProvider(sampler=ALWAYS_OFF)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        chronicle.configure(control_plane_url=url, tracer_provider=provider, timeout=5.0)
        for order in (3, 13, 23, 33):
            with contextlib.suppress(RuntimeError), chronicle.record("silent"):
                handle(order)
        assert keep_buffer().kept == 4
        assert runtime.current().delivery.registration_waits == 0  # queued, never waited for
        chronicle.reset()


def test_a_hook_flags_the_request_it_sees(control_plane, exporter):
    def flag_large_refunds(call: chronicle.CallInfo, result: object) -> None:
        order = call.arguments.get("order")
        if call.name == "refund" and isinstance(order, int) and order > 100:
            session = chronicle.current_session()
            assert session is not None
            session.keep("refund over 100 (hook)")

    chronicle.default_hooks.register(chronicle.FunctionHook(crossing=flag_large_refunds))
    sampling(control_plane, exporter, ALWAYS_OFF)
    with chronicle.record("small") as small:
        handle(5)
    with chronicle.record("large") as large:
        handle(105)
    assert chronicle.flush(10)
    assert len(control_plane.wait_for_envelopes(large.trace_id, 2)) == 2
    (span,) = control_plane.trace(large.trace_id)["spans"]
    assert span["metadata"][KEPT] == "refund over 100 (hook)"
    assert control_plane.trace(small.trace_id) is None
