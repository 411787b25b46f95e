"""Delivery: batching within the server's limits, outages, rejections, overflow, strict mode."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from agentplane_primitives.models import Envelope, Span, Trace

import chronicle
from chronicle import runtime
from chronicle.errors import ControlPlaneError
from chronicle.testing import InMemoryControlPlane, LocalControlPlane


@chronicle.boundary("step", kind="tool")
def step(i: int, payload: str = "") -> int:
    return i


class FlakyControlPlane(InMemoryControlPlane):
    """The in-memory double, with an outage switch and a poison envelope name."""

    def __init__(self) -> None:
        super().__init__()
        self.down = threading.Event()
        self.batches: list[int] = []

    def _check(self) -> None:
        if self.down.is_set():
            raise ControlPlaneError("connection refused", status_code=None)

    def register_trace(self, trace: Trace) -> None:
        self._check()
        super().register_trace(trace)

    def put_span(self, span: Span) -> None:
        self._check()
        super().put_span(span)

    def post_envelopes(self, body: bytes) -> None:
        self._check()
        envelopes = json.loads(body)["envelopes"]
        if any(e["input"]["raw"].get("payload") == "poison" for e in envelopes):
            raise ControlPlaneError("invalid envelope: poison payload", status_code=400)
        self.batches.append(len(envelopes))
        super().post_envelopes(body)


def _index(envelope: Envelope) -> int:
    """The ``i`` argument the envelope's call was made with."""
    value = envelope.input.raw["i"]
    assert isinstance(value, int)
    return value


def test_batches_respect_the_servers_max_batch():
    with LocalControlPlane(env={"CONTROL_PLANE_MAX_BATCH": "5"}) as server:
        chronicle.configure(control_plane_url=server.url, batch_size=100)
        with chronicle.record("batched") as session:
            for i in range(23):
                step(i)
        assert chronicle.flush(20)
        chronicle.reset()
        assert len(server.wait_for_envelopes(session.trace_id, 23)) == 23


def test_an_envelope_over_the_body_limit_is_reported_and_the_rest_saved(caplog):
    caplog.set_level(logging.ERROR, logger="chronicle")
    with LocalControlPlane(env={"CONTROL_PLANE_MAX_BODY": "20000"}) as server:
        chronicle.configure(control_plane_url=server.url)
        with chronicle.record("too-big") as session:
            step(1)
            step(2, payload="z" * 50_000)
            step(3)
        assert chronicle.flush(20) is False  # something was lost, and flush says so
        chronicle.reset()
        saved = server.wait_for_envelopes(session.trace_id, 2)
    assert sorted(e["input"]["raw"]["i"] for e in saved) == [1, 3]
    assert any("max_body_bytes" in r.getMessage() for r in caplog.records)


def test_an_outage_loses_nothing_while_the_queue_has_room():
    double = FlakyControlPlane()
    runtime.install(double, flush_interval=0.01)
    double.down.set()
    with chronicle.record("outage") as session:
        for i in range(50):
            step(i)
    assert chronicle.flush(0.3) is False  # still down
    double.down.clear()
    assert chronicle.flush(10) is True
    assert sorted(_index(e) for e in double.envelopes) == list(range(50))
    assert double.spans[(session.trace_id, session.span_id)].state.value == "closed"
    assert double.traces[session.trace_id].name == "outage"


def test_a_rejected_envelope_is_logged_once_and_does_not_take_its_batch_down(caplog):
    caplog.set_level(logging.ERROR, logger="chronicle")
    double = FlakyControlPlane()
    runtime.install(double, flush_interval=5)
    with chronicle.record("poison"):
        for i in range(20):
            step(i, payload="poison" if i == 13 else "")
    assert chronicle.flush(10) is False  # one was rejected: flush reports it
    assert sorted(_index(e) for e in double.envelopes) == [i for i in range(20) if i != 13]
    errors = [r.getMessage() for r in caplog.records]
    assert len([m for m in errors if "poison payload" in m]) == 1
    assert chronicle.flush(1) is True  # reported once, not forever


def test_overflow_drops_new_envelopes_counts_them_and_never_a_span_close(caplog):
    caplog.set_level(logging.WARNING, logger="chronicle")
    double = FlakyControlPlane()
    runtime.install(double, flush_interval=0.01, max_queue=10)
    double.down.set()
    with chronicle.record("overflow") as session:
        for i in range(40):
            step(i)
    double.down.clear()
    assert chronicle.flush(10) is False
    assert runtime.current().delivery.dropped == 30
    assert len(double.envelopes) == 10
    assert double.spans[(session.trace_id, session.span_id)].state.value == "closed"
    full = [r for r in caplog.records if "queue is full" in r.getMessage()]
    assert len(full) == 1  # warned about once


def test_on_overflow_block_waits_for_room_instead_of_dropping():
    double = FlakyControlPlane()
    runtime.install(double, flush_interval=0.01, max_queue=5, on_overflow="block", batch_size=5)
    with chronicle.record("block"):
        for i in range(40):
            step(i)
    assert chronicle.flush(10) is True
    assert runtime.current().delivery.dropped == 0
    assert len(double.envelopes) == 40


def test_strict_mode_raises_from_flush():
    double = FlakyControlPlane()
    runtime.install(double, flush_interval=5, fail_open=False)
    with chronicle.record("strict"):
        step(1, payload="poison")
    with pytest.raises(chronicle.DeliveryError, match="rejected"):
        chronicle.flush(10)


def test_strict_registration_raises_at_the_root():
    double = FlakyControlPlane()
    double.down.set()
    runtime.install(double, registration_fail_open=False)
    with pytest.raises(chronicle.ControlPlaneError, match="connection refused"):
        with chronicle.record("strict-root"):
            raise AssertionError("the body must not run")
    double.down.clear()


def test_lazy_registration_still_writes_labels():
    double = FlakyControlPlane()
    runtime.install(double, trace_registration="lazy", flush_interval=0.01)
    with chronicle.record("lazy", labels={"session_id": "s-lazy"}) as session:
        step(1)
    assert chronicle.flush(10)
    assert double.traces[session.trace_id].metadata == {"session_id": "s-lazy"}
