"""An unsampled request costs what an unsampled span costs (issue 41 item 7).

With keeping off, a request the sampler dropped builds no record for its calls and starts no
span for them (only their hooks run); with keeping on, its calls' spans are made without asking
the sampler when its answer is known, and nothing is shown on them. What a user sees must not
change: the wrapped call's result and error, the hooks, a kept request's envelopes, and what a
sampler that samples below a dropped parent exports. Timings are in ``make bench`` (section 9)
and ``tests/bench/keep_instructions.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

import chronicle
from chronicle import runtime
from chronicle.otel.sampler import ReplaySampler, drops_below_dropped
from chronicle.recording import call as call_module
from chronicle.recording.hooks import CallInfo, Hook
from chronicle.testing import LocalControlPlane
from tests.support.llm_server import chat_text, chat_usage


@chronicle.boundary("lookup", kind="tool")
def lookup(order: int) -> dict[str, object]:
    return {"order": order, "status": "shipped"}


@chronicle.boundary("refund", kind="tool")
def refund(order: int) -> dict[str, object]:
    if order < 0:
        raise ValueError(f"order {order} cannot be refunded")
    return {"refunded": order, "lines": [lookup(order)]}


class DropsRequestsOnly(Sampler):
    """Drops the request spans (named by ``chronicle.record``) and samples every other span,
    whatever its parent says: a sampler that samples below a dropped parent."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        decision = Decision.DROP if name.startswith("req") else Decision.RECORD_AND_SAMPLE
        return SamplingResult(decision, None, trace_state)

    def get_description(self) -> str:
        return "DropsRequestsOnly"


def configure(
    control_plane: LocalControlPlane, sampler: Sampler, **settings: object
) -> InMemorySpanExporter:
    """Chronicle on a provider with ``sampler`` and an in-memory exporter (the user's backend)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(
        tracer_provider=provider,
        control_plane_url=control_plane.url,
        flush_interval=0.05,
        **settings,
    )
    return exporter


class Seen(Hook):
    """A hook noting each call it sees enter and leave."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, int]] = []
        self.left: list[str] = []

    def enter(self, call: CallInfo) -> None:
        self.entered.append((call.name, call.invocation_index))

    def leave(self, call: CallInfo) -> None:
        self.left.append(call.name)


def count_records(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the calls a ``RecordedCall`` is made for from now on (a record built)."""
    made: list[str] = []
    original = call_module.RecordedCall.__init__

    def noting(self: Any, spec: Any, *args: Any, **kwargs: Any) -> None:
        made.append(spec.name)
        original(self, spec, *args, **kwargs)

    monkeypatch.setattr(call_module.RecordedCall, "__init__", noting)
    return made


def test_keeping_off_a_dropped_request_builds_no_record_and_its_calls_work(
    control_plane, monkeypatch
):
    exporter = configure(control_plane, ALWAYS_OFF, keep_unsampled=False)
    made = count_records(monkeypatch)
    hook = Seen()
    with chronicle.record("request") as session:
        session.hooks.register(hook)
        assert refund(7) == {"refunded": 7, "lines": [{"order": 7, "status": "shipped"}]}
        with pytest.raises(ValueError, match="order -1 cannot be refunded"):
            refund(-1)
    assert made == []  # no record built, for any call of the dropped request
    # the hooks still see every call, numbered as a recorded request numbers them
    assert hook.entered == [("refund", 1), ("lookup", 1), ("refund", 2)]
    assert hook.left == ["lookup", "refund", "refund"]
    assert chronicle.flush(10)
    assert control_plane.trace(session.trace_id) is None
    assert exporter.get_finished_spans() == ()


def test_keeping_off_a_sampled_request_is_recorded_as_before(control_plane, monkeypatch):
    exporter = configure(control_plane, ALWAYS_ON, keep_unsampled=False)
    made = count_records(monkeypatch)
    with chronicle.record("request") as session:
        refund(3)
    assert made == ["refund", "lookup"]
    assert chronicle.flush(10)
    saved = control_plane.wait_for_envelopes(session.trace_id, 2)
    assert sorted(e["name"] for e in saved) == ["lookup", "refund"]
    assert {s.name for s in exporter.get_finished_spans()} >= {"execute_tool refund"}


@pytest.mark.parametrize("keep", [True, False])
def test_a_sampler_that_samples_below_a_dropped_request_is_still_asked(control_plane, keep):
    exporter = configure(control_plane, DropsRequestsOnly(), keep_unsampled=keep)
    with chronicle.record("request"):
        refund(5)
    exported = {s.name for s in exporter.get_finished_spans()}
    assert exported == {"execute_tool refund", "execute_tool lookup"}


def test_a_held_request_that_fails_is_saved_whole_with_its_payloads(control_plane):
    configure(control_plane, ParentBased(ALWAYS_OFF))
    with chronicle.record("request") as session:
        refund(4)
        with pytest.raises(ValueError, match="cannot be refunded"):
            refund(-2)
    assert chronicle.flush(10)
    saved = control_plane.wait_for_envelopes(session.trace_id, 3)
    assert [e["name"] for e in saved] == ["refund", "lookup", "refund"]  # in call order
    first, looked_up, failed = saved
    assert first["input"]["raw"] == {"order": 4}
    assert first["output"]["raw"] == {"refunded": 4, "lines": [{"order": 4, "status": "shipped"}]}
    assert looked_up["parent_envelope_id"] == first["envelope_id"]
    assert failed["envelope_status"]["status"] == "failure"
    assert "order -2 cannot be refunded" in failed["output"]["error"]["message"]
    held = runtime.current().keep
    assert held is not None and held.kept == 1


def test_which_samplers_are_known_to_drop_below_a_dropped_parent():
    assert drops_below_dropped(ALWAYS_OFF)
    assert drops_below_dropped(ParentBased(ALWAYS_ON))  # local_parent_not_sampled: ALWAYS_OFF
    assert drops_below_dropped(ReplaySampler(TraceIdRatioBased(0.25)))
    assert not drops_below_dropped(ParentBased(ALWAYS_ON, local_parent_not_sampled=ALWAYS_ON))
    assert not drops_below_dropped(DropsRequestsOnly())


def test_a_held_sub_agent_with_a_wrapped_model_client_is_saved_whole_and_replays(
    control_plane, llm_server, oai
):
    """The shape users run: a sub-agent (a boundary) calling a wrapped OpenAI client and a tool,
    twice, in a request the sampler dropped and keeping holds; the second run fails, so the
    request is kept: every call is saved with its parent and the model's usage, and a replay of
    it makes no model request."""
    configure(control_plane, ParentBased(ALWAYS_OFF))
    llm_server.reply_with(
        chat_text("look up 4", usage=chat_usage(12, 3)),
        chat_text("look up -2", usage=chat_usage(14, 4)),
    )

    @chronicle.boundary("researcher", kind="tool")
    def researcher(order: int) -> dict[str, object]:
        planned = oai.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"order {order}"}]
        )
        return {"plan": planned.choices[0].message.content, "refund": refund(order)}

    def agent() -> None:
        researcher(4)
        with pytest.raises(ValueError, match="cannot be refunded"):
            researcher(-2)

    with chronicle.record("request") as session:
        agent()
    assert chronicle.flush(10)
    saved = control_plane.wait_for_envelopes(session.trace_id, 7)
    names = [e["name"] for e in saved]
    assert names == [
        "researcher",
        "openai.chat.completions.create",
        "refund",
        "lookup",
        "researcher",
        "openai.chat.completions.create",
        "refund",
    ]
    by_id = {e["envelope_id"]: e for e in saved}
    parents = [
        by_id[parent]["name"] if (parent := e.get("parent_envelope_id")) else None for e in saved
    ]
    assert parents == [None, "researcher", "researcher", "refund", None, "researcher", "researcher"]
    first_chat, second_chat = saved[1], saved[5]
    assert first_chat["output"]["usage"]["input"] == 12
    assert second_chat["output"]["usage"]["output"] == 4
    assert saved[0]["output"]["raw"]["plan"] == "look up 4"
    assert saved[4]["envelope_status"]["status"] == "failure"

    asked = llm_server.request_count
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        agent()
    assert llm_server.request_count == asked  # every model call answered by its recording
    assert [c.mode for c in run.call_log()] == ["stub"] * 2  # the two researcher runs
