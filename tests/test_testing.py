"""The shipped test double: ``chronicle.testing.capture`` keeps what would be sent."""

from __future__ import annotations

import chronicle
from chronicle.testing import capture


@chronicle.boundary("search", kind="tool")
def search(query: str) -> dict:
    return {"hits": [query]}


def test_capture_keeps_validated_entities_in_call_order():
    with capture() as sent:
        with chronicle.record("captured", labels={"session_id": "s-1"}) as session:
            search("a")
            search("b")
    assert [(e.name, e.input.raw) for e in sent.envelopes] == [
        ("search", {"query": "a"}),
        ("search", {"query": "b"}),
    ]
    assert sent.traces[session.trace_id].metadata == {"session_id": "s-1"}
    (span,) = sent.spans.values()
    assert (span.state.value, span.status.value) == ("closed", "success")


def test_what_was_captured_replays():
    with capture() as sent:
        with chronicle.record("captured") as session:
            search("a")
    with chronicle.replay(sent.span_envelopes(session.trace_id, session.span_id)) as run:
        assert search("anything").hits == ["a"]
    assert [c.mode for c in run.call_log()] == ["stub"]


def test_emit_open_writes_are_replaced_by_the_close():
    with capture(emit_open=True) as sent:
        with chronicle.record("open-then-close"):
            search("a")
    (envelope,) = sent.envelopes
    assert envelope.envelope_status.state.value == "closed"
