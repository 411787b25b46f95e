"""``chronicle.diff`` and ``chronicle diff``: what changed between two runs of an agent.

The agent is the refund incident's (``tests/support/refund_agent.py``): a ``support_agent``
runs a ``billing_agent`` sub-agent that looks the order up and refunds it, then asks the model
(a wrapped OpenAI client against the local model server) to write the reply from what billing
said. Recorded twice to the real control plane: once as it went (the refund succeeds), once
with the refund API timing out (the sub-agent catches it and says so). What the recording holds::

    support_agent#1
      billing_agent#1
        lookup_order#1
        refund#1                         (B: TimeoutError)
      openai.chat.completions.create#1   (B: reads "refund failed")

The golden files (``tests/data/diff/``) hold the terminal and JSON forms of the diff of two
saved incident files of this agent; ``UPDATE_GOLDEN=1`` records and writes them again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import chronicle
from chronicle import cli
from chronicle.replay.load import load_envelopes
from chronicle.save.incident import Incident
from tests.support import refund_agent
from tests.support.llm_server import LlmServer, chat_text, chat_usage

DATA = Path(__file__).parent / "data" / "diff"
MODEL = "openai.chat.completions.create"


def record_run(agent: Any, server: LlmServer, reply: str, tokens: int) -> Any:
    server.reply_with(chat_text(reply, usage=chat_usage(tokens, 9)))
    with chronicle.record("support") as session:
        agent.support_agent("Where is my refund?", "o-17")
    return session


@pytest.fixture
def two_runs(recording: Any, llm_server: LlmServer) -> Iterator[tuple[Any, Any, Any]]:
    """A (the refund went through) and B (the refund API timed out), both on the control plane;
    and the agent (``tests/support/refund_agent.py``), whose changes are undone after the test."""
    refund_agent.use(llm_server)
    try:
        a = record_run(refund_agent, llm_server, "Your refund is on its way.", 30)
        refund_agent.refund_times_out = True
        b = record_run(refund_agent, llm_server, "Sorry, the refund is delayed.", 34)
        recording.saved(a.trace_id, 5)
        recording.saved(b.trace_id, 5)
        yield a, b, refund_agent
    finally:
        refund_agent.close()


def test_a_timed_out_refund_is_the_first_divergence_and_the_model_sees_it(two_runs):
    a, b, _ = two_runs
    found = chronicle.diff(a.trace_id, b.trace_id)
    assert isinstance(found, chronicle.TraceDiff) and not found.same
    lines = {(line.a or line.b).label: line for line in found.calls}  # type: ignore[union-attr]
    assert [(label, line.change, line.depth) for label, line in lines.items()] == [
        ("support_agent#1", "changed", 0),
        ("billing_agent#1", "changed", 1),
        ("lookup_order#1", "same", 2),
        ("refund#1", "changed", 2),
        (f"{MODEL}#1", "changed", 1),
    ]
    # The tool call itself, not the agents around it whose outputs changed in turn.
    assert found.first_divergence is lines["refund#1"]
    assert lines["refund#1"].status == (
        "ok",
        "failed: TimeoutError: refund API did not answer within 5 s",
    )
    assert "refunded: true -> false" in lines["billing_agent#1"].output
    model = lines[f"{MODEL}#1"]
    assert len(model.input) == 1 and model.input[0].startswith("messages[1].content: ")
    assert "refunded" in model.input[0] and "refund API did not answer" in model.input[0]
    assert model.tokens == {"input": 4, "output": 0}
    assert found.tokens == {"input": 4, "output": 0}
    assert model.latency_ms is not None and found.latency_ms is not None


def test_the_same_run_recorded_twice_is_the_same(two_runs, recording, llm_server):
    a, _, agent = two_runs
    agent.refund_times_out = False
    again = record_run(agent, llm_server, "Your refund is on its way.", 30)
    recording.saved(again.trace_id, 5)
    found = chronicle.diff(a.trace_id, again.trace_id)
    assert found.same and found.first_divergence is None  # ids and response times aside
    assert [line.change for line in found.calls] == ["same"] * 5


def test_an_inserted_call_does_not_shift_the_calls_after_it(two_runs, recording, llm_server):
    a, _, agent = two_runs
    agent.refund_times_out, agent.double_lookup = False, True
    more = record_run(agent, llm_server, "Your refund is on its way.", 30)
    recording.saved(more.trace_id, 6)
    found = chronicle.diff(a.trace_id, more.trace_id)
    shown = [
        (line.a.label if line.a else None, line.b.label if line.b else None, line.change)
        for line in found.calls
    ]
    assert shown == [
        ("support_agent#1", "support_agent#1", "same"),
        ("billing_agent#1", "billing_agent#1", "same"),
        ("lookup_order#1", "lookup_order#1", "same"),
        (None, "lookup_order#2", "only_b"),
        ("refund#1", "refund#1", "same"),  # still paired with its own recording
        (f"{MODEL}#1", f"{MODEL}#1", "same"),
    ]
    assert found.first_divergence is found.calls[3]


def test_an_incident_file_against_a_trace(two_runs, recording, tmp_path):
    a, b, _ = two_runs
    incident = tmp_path / "incident.json"
    Incident.of(recording.saved(a.trace_id, 5)).write(incident)
    from_file = chronicle.diff(incident, b.trace_id)
    from_trace = chronicle.diff(a.trace_id, b.trace_id)
    assert from_file.to_json()["calls"] == from_trace.to_json()["calls"]
    assert from_file.a.source == str(incident)


# ---- the command --------------------------------------------------------------------------


def chronicle_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    status = cli.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_command_exits_1_when_they_differ_and_0_when_the_same(two_runs, capsys, recording):
    a, b, _ = two_runs
    url = recording.control_plane.url
    status, out, _ = chronicle_cli(capsys, "diff", a.trace_id, b.trace_id, "--url", url)
    assert status == 1
    assert "~     refund#1" in out and "status  ok -> failed: TimeoutError" in out
    assert "the first divergence is refund#1" in out
    assert "\x1b[" not in out  # not a terminal: no colour
    status, out, _ = chronicle_cli(capsys, "diff", a.trace_id, a.trace_id, "--url", url, "--json")
    assert status == 0 and json.loads(out)["same"] is True


def test_bad_inputs_are_one_line_with_what_to_do(two_runs, capsys, recording, tmp_path):
    a, _, _ = two_runs
    url = recording.control_plane.url
    missing = "0123456789abcdef0123456789abcdef"
    status, out, err = chronicle_cli(capsys, "diff", a.trace_id, missing, "--url", url)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and f"trace {missing} (B) is not on the control plane" in err
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"envelopes": [', encoding="utf-8")
    status, _, err = chronicle_cli(capsys, "diff", str(corrupt), a.trace_id, "--url", url)
    assert status == 2 and err.count("\n") == 1 and "is not JSON" in err
    status, _, err = chronicle_cli(capsys, "diff", "nope.json", a.trace_id, "--url", url)
    assert status == 2 and "neither a trace id" in err and "chronicle save" in err


def test_two_different_agents_are_refused(two_runs, capsys, recording, tmp_path):
    a, _, _ = two_runs

    @chronicle.boundary("weather", kind="tool")
    def weather(city: str) -> str:
        return "sunny"

    with chronicle.record("weather") as other:
        weather("Lyon")
    recording.saved(other.trace_id, 1)
    url = recording.control_plane.url
    status, _, err = chronicle_cli(capsys, "diff", a.trace_id, other.trace_id, "--url", url)
    assert status == 2 and "two different agents" in err


# ---- golden files -----------------------------------------------------------------------------


def test_the_terminal_and_json_forms_match_the_golden_files(request, capsys):
    if os.environ.get("UPDATE_GOLDEN"):
        request.getfixturevalue("_write_golden_incidents")
    a, b = DATA / "refund_ok.json", DATA / "refund_timeout.json"
    status, out, _ = chronicle_cli(capsys, "diff", str(a), str(b))
    text = out.replace(str(DATA) + os.sep, "")
    status_json, out_json, _ = chronicle_cli(capsys, "diff", str(a), str(b), "--json")
    shown = out_json.replace(str(DATA) + os.sep, "")
    if os.environ.get("UPDATE_GOLDEN"):
        (DATA / "refund.diff.txt").write_text(text, encoding="utf-8")
        (DATA / "refund.diff.json").write_text(shown, encoding="utf-8")
    assert (status, status_json) == (1, 1)
    assert text == (DATA / "refund.diff.txt").read_text(encoding="utf-8")
    assert shown == (DATA / "refund.diff.json").read_text(encoding="utf-8")


def test_the_diff_follows_the_recorded_call_order_whatever_order_the_envelopes_come_in():
    """Envelope models held in call order (read in one pass), the same reversed (placed by the
    call tree first) and as JSON dicts (loaded first) give the saved files' diff, line for
    line."""
    a, b = DATA / "refund_ok.json", DATA / "refund_timeout.json"
    held_a, held_b = load_envelopes(a), load_envelopes(b)

    def compared(result: chronicle.TraceDiff) -> tuple[Any, str]:
        shown = result.to_json()
        del shown["a"], shown["b"]  # the sources' names
        return shown, result.render(changed_only=True)

    expected = compared(chronicle.diff(a, b))
    assert expected[0]["first_divergence"] == {"a": "refund#1", "b": "refund#1"}
    for left, right in (
        (held_a, held_b),
        (held_a[::-1], held_b[::-1]),
        ([e.model_dump(mode="json") for e in held_a], held_b),
    ):
        assert compared(chronicle.diff(left, right)) == expected


@pytest.fixture
def _write_golden_incidents(two_runs: Any, recording: Any) -> None:
    a, b, _ = two_runs
    DATA.mkdir(parents=True, exist_ok=True)
    Incident.of(recording.saved(a.trace_id, 5)).write(DATA / "refund_ok.json")
    Incident.of(recording.saved(b.trace_id, 5)).write(DATA / "refund_timeout.json")


# ---- a finished replay run as a side ------------------------------------------------------------


class NestedAgent:
    """A support agent whose ``billing_agent`` sub-agent looks the order up (a tool) and asks the
    model (a wrapped OpenAI client) to explain it; ``fixed`` fixes the tool (amounts in euros,
    not cents)."""

    def __init__(self, server: LlmServer) -> None:
        self.client = chronicle.wrap(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-local", max_retries=0)
        )
        self.fixed = False
        self.broken = False

        @chronicle.boundary("lookup_order", kind="tool")
        def lookup_order(order_id: str) -> dict[str, Any]:
            if self.broken:
                raise KeyError(order_id)
            return {"order_id": order_id, "amount": 42.5 if self.fixed else 4250}

        @chronicle.boundary("billing_agent", kind="tool")
        def billing_agent(order_id: str) -> str:
            order = lookup_order(order_id)
            answer = self.client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[
                    {"role": "system", "content": "Explain the order to the customer."},
                    {"role": "user", "content": f"order: {json.dumps(order)}"},
                ],
            )
            return answer.choices[0].message.content or ""

        @chronicle.boundary("support_agent", kind="tool")
        def support_agent(ticket: str, order_id: str) -> str:
            return f"billing says: {billing_agent(order_id)}"

        self.support_agent = support_agent


@pytest.fixture
def nested(recording: Any, llm_server: LlmServer) -> Iterator[tuple[Any, NestedAgent]]:
    """The nested agent recorded once on the control plane, with the tool's bug (cents)."""
    agent = NestedAgent(llm_server)
    try:
        llm_server.reply_with(chat_text("You paid 4250 euros.", usage=chat_usage(30, 9)))
        with chronicle.record("support") as session:
            agent.support_agent("How much did I pay?", "o-17")
        recording.saved(session.trace_id, 4)
        yield session, agent
    finally:
        agent.client.close()


def test_a_replay_with_the_fix_as_cut_point_against_its_recording(nested, llm_server):
    session, agent = nested
    agent.fixed = True
    before = len(llm_server.requests)
    plan = chronicle.ReplayPlan().run("lookup_order", 1).expect_change(MODEL, 1)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
        assert agent.support_agent("How much did I pay?", "o-17") == (
            "billing says: You paid 4250 euros."
        )
    assert len(llm_server.requests) == before  # the model call was served from the recording
    found = chronicle.diff(run)  # the replay against its recording
    assert found.b.source == f"the replay of span {session.span_id}"
    assert [(line.b.label, line.change, line.depth) for line in found.calls] == [  # type: ignore[union-attr]
        ("support_agent#1", "same", 0),
        ("billing_agent#1", "same", 1),
        ("lookup_order#1", "changed", 2),
        (f"{MODEL}#1", "changed", 2),
    ]
    tool, model = found.changed()
    assert found.first_divergence is tool
    assert tool.output == ("amount: 4250 -> 42.5",) and tool.input == ()
    assert model.output == () and len(model.input) == 1
    assert model.input[0].startswith("messages[1].content: ")
    assert "4250" in model.input[0] and "42.5" in model.input[0]
    assert [c.mode for c in found.b.calls] == ["run", "run", "run", "stub"]
    assert all(c.latency_ms is None for c in found.b.calls)  # not measured by a replay
    assert found.latency_ms is None and found.tokens == {"input": 0, "output": 0}
    # The same with the recording named, either way round.
    named = chronicle.diff(session.trace_id, run)
    assert named.to_json()["calls"] == found.to_json()["calls"]
    assert [line.change for line in chronicle.diff(run, session.trace_id).calls] == [
        "same",
        "same",
        "changed",
        "changed",
    ]


def test_a_stubbed_replay_is_the_same_as_its_recording(nested):
    session, agent = nested
    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        agent.support_agent("How much did I pay?", "o-17")
    found = chronicle.diff(run)
    assert found.same
    # what the stubbed agent would have called is its recorded subtree, consumed with it
    assert [(c.label, c.mode) for c in found.b.calls] == [
        ("support_agent#1", "stub"),
        ("billing_agent#1", "consumed"),
        ("lookup_order#1", "consumed"),
        (f"{MODEL}#1", "consumed"),
    ]


def test_a_live_call_that_raised_is_failed_and_a_replay_in_progress_is_refused(nested):
    session, agent = nested
    agent.broken = True
    plan = chronicle.ReplayPlan().run("lookup_order", 1)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
        with pytest.raises(chronicle.ReplayError, match="still running"):
            chronicle.diff(run)
        with pytest.raises(KeyError):
            agent.support_agent("How much did I pay?", "o-17")
    found = chronicle.diff(run)
    assert [(line.name, line.change, line.status) for line in found.calls] == [
        ("support_agent", "changed", ("ok", "failed: KeyError: 'o-17'")),
        ("billing_agent", "changed", ("ok", "failed: KeyError: 'o-17'")),
        ("lookup_order", "changed", ("ok", "failed: KeyError: 'o-17'")),
        (MODEL, "only_a", None),  # never made: the sub-agent raised before
    ]
    assert found.first_divergence is found.calls[2]
