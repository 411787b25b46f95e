"""inject() and extract(): the W3C headers for transports Chronicle does not instrument."""

from __future__ import annotations

import pytest
from agentplane_primitives.models import TraceContext
from opentelemetry.sdk.trace import TracerProvider

import chronicle
from chronicle.integrations.propagation import extract, host_allowed, inject

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
ENVELOPE = "b7ad6b7169203331"


@pytest.mark.parametrize(
    ("url", "hosts", "allowed"),
    [
        ("http://agent-b/x", ["agent-b"], True),
        ("http://AGENT-B:9000/x", ["agent-b"], True),
        ("http://agent-b:9000/x", ["agent-b:9000"], True),
        ("http://agent-b:9001/x", ["agent-b:9000"], False),
        ("http://agent-b/x", ["agent-b:80"], True),
        ("https://agent-b/x", ["agent-b:80"], False),
        ("http://a.svc.internal/x", ["*.internal"], True),
        ("http://deep.a.internal:8001/x", ["*.internal:8001"], True),
        ("http://deep.a.internal:8002/x", ["*.internal:8001"], False),
        ("http://internal/x", ["*.internal"], False),
        ("http://notinternal/x", ["*.internal"], False),
        ("http://[::1]:8001/x", ["[::1]:8001"], True),
        ("http://[::1]:8001/x", ["::1"], True),
        ("https://api.openai.com/v1/chat", ["agent-b", "*.internal"], False),
        ("http://agent-b/x", [], False),
        ("not a url", ["agent-b"], False),
        ("http://agent-b:99999/x", ["agent-b"], False),
    ],
)
def test_host_allowed(url, hosts, allowed):
    assert host_allowed(url, hosts) is allowed


def test_inject_names_the_innermost_boundary_and_extract_reads_it_back(recording):
    chronicle.configure(control_plane_url=recording.control_plane.url, inject_hosts=["agent-b"])
    seen: dict[str, dict[str, str]] = {}

    @chronicle.boundary("call_b", kind="tool")
    def call_b() -> None:
        seen["inside"] = inject({"accept": "application/json"}, url="http://agent-b/run")
        seen["other"] = inject({"accept": "application/json"}, url="https://api.openai.com/v1")

    with chronicle.record("caller") as session:
        seen["outside"] = inject(
            tracestate_dict := {"TraceState": "chronicle=ffffffffffffffff,x=1"}
        )
        call_b()
    inside = seen["inside"]
    trace_id, parent = session.trace_id, inside["traceparent"].split("-")[2]
    assert inside["traceparent"] == f"00-{trace_id}-{parent}-01"
    assert parent != session.span_id  # the envelope, not the request span
    assert inside["tracestate"] == f"chronicle={parent}"
    assert inside["accept"] == "application/json"
    assert seen["other"] == {"accept": "application/json"}  # not allowed: untouched
    # outside a boundary: the request span's id; a stale chronicle member is dropped
    assert seen["outside"]["traceparent"] == f"00-{trace_id}-{session.span_id}-01"
    assert seen["outside"]["tracestate"] == "x=1"
    assert "TraceState" not in seen["outside"]
    assert tracestate_dict == {"TraceState": "chronicle=ffffffffffffffff,x=1"}  # not mutated

    context = extract(inside)
    assert context == TraceContext(trace_id=trace_id, parent_envelope_id=parent, flags="01")


def test_the_tracestate_member_wins_over_the_traceparent_parent():
    headers = {
        "traceparent": f"00-{TRACE}-{PARENT}-01",
        "tracestate": f"other=1,chronicle={ENVELOPE}",
    }
    assert extract(headers) == TraceContext(trace_id=TRACE, parent_envelope_id=ENVELOPE)
    asgi_pairs = [(b"traceparent", f"00-{TRACE}-{PARENT}-00".encode())]
    assert extract(asgi_pairs) == TraceContext(
        trace_id=TRACE, parent_envelope_id=PARENT, flags="00"
    )


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"traceparent": "garbage"},
        {"traceparent": f"00-{'0' * 32}-{PARENT}-01"},
        {"traceparent": 12},
        [(b"traceparent", b"a"), (b"traceparent", b"b")],
        "traceparent: x",
        [1, 2, 3],
        object(),
    ],
)
def test_extract_never_raises_on_bad_input(headers):
    assert extract(headers) is None


def test_extract_off_and_inject_off():
    chronicle.configure(extract=False, inject=False)
    assert extract({"traceparent": f"00-{TRACE}-{PARENT}-01"}) is None
    with chronicle.record("quiet"):
        assert inject({"a": "b"}) == {"a": "b"}


def test_inject_outside_any_trace_adds_nothing_and_inside_a_user_span_uses_it():
    chronicle.configure()
    assert inject() == {}
    provider = TracerProvider()
    with provider.get_tracer("user").start_as_current_span("user") as user_span:
        context = user_span.get_span_context()
        headers = inject()
    assert headers == {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-01",
    }
    with pytest.raises(TypeError, match="mapping"):
        inject([("a", "b")])  # type: ignore[arg-type]


def test_nothing_is_injected_during_a_replay(recording):
    @chronicle.boundary("step", kind="tool")
    def step() -> dict[str, str]:
        return inject(url="http://anything")

    chronicle.configure(control_plane_url=recording.control_plane.url, inject_hosts=["anything"])
    with chronicle.record("live") as session:
        assert "traceparent" in step()
    recording.saved(session.trace_id, 1)
    with chronicle.replay_trace(
        session.trace_id, session.span_id, chronicle.ReplayPlan().run("step")
    ):
        assert step() == {}
