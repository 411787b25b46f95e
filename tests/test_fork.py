"""Forking a replay from one decision: ``override``, ``run(..., model=...)``, ``live_after``.

The refund agent (``tests/support/refund_agent.py``, as ``test_diff`` records it: a support
agent, a billing sub-agent that looks the order up and refunds it, then a model call through a
wrapped OpenAI client), recorded once to the real control plane with the refund going through,
then replayed with one thing changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

import chronicle
from chronicle.errors import ReplayError
from tests.support import refund_agent
from tests.support.llm_server import LlmServer, chat_text
from tests.test_diff import MODEL, record_run

Recorded = tuple[Any, Any, LlmServer]


@pytest.fixture
def recorded(recording: Any, llm_server: LlmServer) -> Iterator[Recorded]:
    refund_agent.use(llm_server)
    try:
        session = record_run(refund_agent, llm_server, "Your refund is on its way.", 30)
        recording.saved(session.trace_id, 5)
        yield refund_agent, session, llm_server
    finally:
        refund_agent.close()


def log(run: Any) -> list[tuple[str, int, str]]:
    return [(c.name, c.invocation_index, c.mode) for c in run.call_log()]


def test_what_if_the_refund_api_had_timed_out(recorded):
    agent, session, server = recorded
    requests = server.request_count
    plan = chronicle.ReplayPlan().override("refund", 1, error=TimeoutError("refund API down"))
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        reply = agent.support_agent("Where is my refund?", "o-17")
    assert reply == "Your refund is on its way."  # the model's answer is still the recorded one
    assert log(run) == [
        ("support_agent", 1, "run"),
        ("billing_agent", 1, "run"),
        ("lookup_order", 1, "stub"),
        ("refund", 1, "override"),
        (MODEL, 1, "stub"),
    ]
    assert run.captured_result("billing_agent", 1) == {
        "refunded": False,
        "reason": "refund API down",
    }
    # The model now reads the failure: a divergence after the fork, so expected (strict passes).
    [changed] = run.divergences()
    assert (changed.name, changed.kind, changed.expected) == (MODEL, "input", True)
    assert "refund API down" in changed.diff
    assert server.request_count == requests


def test_an_override_output_is_rebuilt_as_a_recording_is(recorded):
    agent, session, _ = recorded
    completion = chat_text("We cannot refund this order.").body
    plan = (
        chronicle.ReplayPlan()
        .override("lookup_order", 1, output={"order_id": "o-17", "amount": 10.0, "paid": True})
        .override(MODEL, 1, output=completion)
    )
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        reply = agent.support_agent("Where is my refund?", "o-17")
    assert reply == "We cannot refund this order."
    assert isinstance(run.captured_result(MODEL, 1), ChatCompletion)  # the SDK's own type
    assert run.captured_input("refund", 1)["amount"] == 10.0
    assert [d.expected for d in run.divergences()] == [True]  # refund's input, after the fork


def test_a_model_swap_sends_the_call_to_the_other_model(recorded):
    agent, session, server = recorded
    server.reply_with(chat_text("Refund sent (mini)."))
    plan = chronicle.ReplayPlan().run(MODEL, 1, model="gpt-4.1-mini")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        reply = agent.support_agent("Where is my refund?", "o-17")
    assert reply == "Refund sent (mini)."
    sent = server.requests[-1]
    assert sent.model == "gpt-4.1-mini"
    assert sent.body["messages"][1]["content"].startswith("Where is my refund?")
    assert (MODEL, 1, "live") in log(run)
    assert ("billing_agent", 1, "stub") in log(run)  # the rest served as recorded


def test_live_after_runs_exactly_the_suffix(recorded):
    agent, session, server = recorded
    server.reply_with(chat_text("Live answer."))
    plan = chronicle.ReplayPlan().live_after("refund", 1)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        reply = agent.support_agent("Where is my refund?", "o-17")
    assert reply == "Live answer."
    assert log(run) == [
        ("support_agent", 1, "run"),
        ("billing_agent", 1, "run"),
        ("lookup_order", 1, "stub"),
        ("refund", 1, "live"),
        (MODEL, 1, "live"),
    ]
    assert run.divergences() == []


def test_an_anchor_inside_a_stubbed_parent_is_a_plan_error(recorded):
    _, session, _ = recorded
    plan = chronicle.ReplayPlan().stub("billing_agent", 1).live_after("refund", 1)
    with pytest.raises(ReplayError, match=r"inside billing_agent#1, which the plan stubs"):
        chronicle.replay_trace(session.trace_id, session.span_id, plan)


def test_a_model_swap_of_a_tool_is_refused(recorded):
    agent, session, _ = recorded
    plan = chronicle.ReplayPlan().run("refund", 1, model="gpt-4.1-mini")
    with (
        pytest.raises(ReplayError, match=r"'refund' is a tool call"),
        chronicle.replay_trace(session.trace_id, session.span_id, plan),
    ):
        agent.support_agent("Where is my refund?", "o-17")


def test_plan_entries_are_checked_when_written():
    plan = chronicle.ReplayPlan()
    with pytest.raises(TypeError, match="one of output= or error="):
        plan.override("refund", 1)
    with pytest.raises(TypeError, match="give n"):
        plan.override("refund", None, output={})
    assert not chronicle.ReplayPlan().run("x").forks  # a plain plan keeps the stub path as is
