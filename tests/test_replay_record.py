"""``replay(..., record=True)``: a what-if recorded as its own trace, linked to the original.

The refund agent (``tests/support/refund_agent.py``: a support agent, a billing sub-agent that
looks the order up and refunds it, a wrapped OpenAI client against the local model server) is
recorded once to the real control plane, then replayed with one thing changed and
``record=True``: the new trace holds the live calls as recorded calls and the served ones
marked with the envelope they were served from, and ``chronicle diff`` of the two shows the
change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from chronicle import wire
from chronicle.errors import ConfigurationError
from tests.support import refund_agent as agent
from tests.support.llm_server import LlmServer, chat_text, chat_usage
from tests.support.stored import stored

MODEL = agent.MODEL


def record_original(server: LlmServer) -> Any:
    server.reply_with(chat_text("Your refund is on its way.", usage=chat_usage(30, 9)))
    with chronicle.record("support") as session:
        agent.support_agent("Where is my refund?", "o-17")
    return session


@pytest.fixture
def original(recording: Any, llm_server: LlmServer) -> Iterator[Any]:
    agent.use(llm_server)
    try:
        session = record_original(llm_server)
        recording.saved(session.trace_id, 5)
        yield session
    finally:
        agent.close()


def by_name(envelopes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in envelopes}


def test_a_recorded_what_if_is_a_linked_trace_and_diff_shows_the_change(original, recording):
    recorded = by_name(recording.saved(original.trace_id, 5))
    plan = chronicle.ReplayPlan().override("refund", 1, error=TimeoutError("refund API down"))
    with chronicle.replay_trace(
        original.trace_id, original.span_id, plan, strict=True, record=True
    ) as run:
        reply = agent.support_agent("Where is my refund?", "o-17")
    assert reply == "Your refund is on its way."
    new = run.new_trace_id
    assert new is not None and new != original.trace_id
    saved = recording.saved(new, 5)
    assert len(saved) == 5 and {e["trace_id"] for e in saved} == {new}
    made = by_name(saved)
    # What ran live is recorded as usual; what was served says which recording served it.
    for live in ("support_agent", "billing_agent"):
        assert wire.REPLAYED_FROM not in made[live]["metadata"]
    for served in ("lookup_order", "refund", MODEL):
        assert made[served]["metadata"][wire.REPLAYED_FROM] == recorded[served]["envelope_id"]
    assert made["refund"]["output"]["error"]["type"] == "TimeoutError"
    assert made["lookup_order"]["output"]["raw"] == recorded["lookup_order"]["output"]["raw"]
    assert made["billing_agent"]["parent_envelope_id"] == made["support_agent"]["envelope_id"]
    assert made["refund"]["parent_envelope_id"] == made["billing_agent"]["envelope_id"]
    [span] = recording.control_plane.trace(new)["spans"]
    assert span["metadata"][wire.REPLAY_OF] == {
        "trace_id": original.trace_id,
        "span_id": original.span_id,
    }
    found = chronicle.diff(original.trace_id, new)
    assert not found.same
    assert found.first_divergence is not None and found.first_divergence.name == "refund"
    assert found.first_divergence.status == ("ok", "failed: TimeoutError: refund API down")
    changes = {line.name: line.change for line in found.calls}
    assert changes == {
        "support_agent": "same",  # the model's answer was served: the reply did not change
        "billing_agent": "changed",
        "lookup_order": "same",
        "refund": "changed",
        MODEL: "changed",  # its input now reads the failure
    }


def test_a_stubbed_sub_agent_is_recorded_with_what_it_consumed(original, recording, llm_server):
    llm_server.reply_with(chat_text("Refund sent (mini).", usage=chat_usage(20, 5)))
    plan = chronicle.ReplayPlan().run(MODEL, 1, model="gpt-4.1-mini")
    with chronicle.replay_trace(original.trace_id, original.span_id, plan, record=True) as run:
        assert agent.support_agent("Where is my refund?", "o-17") == "Refund sent (mini)."
    assert ("billing_agent", 1, "stub") in [
        (c.name, c.invocation_index, c.mode) for c in run.call_log()
    ]
    assert run.new_trace_id is not None
    made = by_name(recording.saved(run.new_trace_id, 5))
    # billing_agent was served whole: its recorded calls are in the new trace under it.
    assert made["lookup_order"]["parent_envelope_id"] == made["billing_agent"]["envelope_id"]
    assert wire.REPLAYED_FROM in made["refund"]["metadata"]
    assert made[MODEL]["input"]["model"] == "gpt-4.1-mini"
    found = chronicle.diff(original.trace_id, run.new_trace_id)
    changes = {line.name: line.change for line in found.calls}
    assert changes["billing_agent"] == changes["lookup_order"] == changes["refund"] == "same"
    assert changes[MODEL] == "changed" and changes["support_agent"] == "changed"
    model = next(line for line in found.calls if line.name == MODEL)
    assert any(change.startswith("model: ") for change in model.input)


def test_the_new_span_carries_an_opentelemetry_link_to_the_original(control_plane, llm_server):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=chronicle.ReplaySampler(TracerProvider().sampler))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)
    agent.use(llm_server)
    try:
        session = record_original(llm_server)
        assert chronicle.flush(10)
        exporter.clear()
        with chronicle.replay_trace(session.trace_id, session.span_id, record=True) as run:
            agent.support_agent("Where is my refund?", "o-17")
    finally:
        agent.close()
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None or s.parent.is_remote]
    [root] = roots
    assert format(root.context.trace_id, "032x") == run.new_trace_id
    [link] = root.links
    assert format(link.context.trace_id, "032x") == session.trace_id
    assert format(link.context.span_id, "016x") == session.span_id


def test_without_record_nothing_is_written(original, recording):
    before = stored(recording.control_plane, original.trace_id)
    plan = chronicle.ReplayPlan().override("refund", 1, error=TimeoutError("down"))
    with chronicle.replay_trace(original.trace_id, original.span_id, plan) as run:
        agent.support_agent("Where is my refund?", "o-17")
    assert run.new_trace_id is None
    assert chronicle.flush(10)
    assert stored(recording.control_plane, original.trace_id) == before


def test_record_with_no_control_plane_is_a_configuration_error_at_entry(original, recording):
    envelopes = recording.control_plane.span_envelopes(original.trace_id, original.span_id)
    chronicle.reset()
    with pytest.raises(ConfigurationError, match="control_plane_url"):
        chronicle.replay(envelopes, record=True)


def test_replays_of_lists_the_replays_of_a_trace(original, recording):
    made: list[str | None] = []
    for _ in range(2):
        with chronicle.replay_trace(original.trace_id, original.span_id, record=True) as run:
            agent.support_agent("Where is my refund?", "o-17")
        made.append(run.new_trace_id)
    assert chronicle.flush(10)
    found = chronicle.find_traces(replays_of=original.trace_id, limit=10)
    assert {t.trace_id for t in found} == set(made) and len(found) == 2
