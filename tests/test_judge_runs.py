"""A judge whose variance is known: ``evaluate(..., judge_runs=N)`` asks each question N times
through a real wrapped OpenAI client against the local model server's scripted (flaky)
answers, keeps each run's answer and the pass rate, decides by majority, records every judge
call, and a replay of those calls asks no model and gives the same verdicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support import policy_agent
from tests.support.llm_server import LlmServer, chat_text

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTION = "Always verify order status before issuing a refund"
MODEL_CALL = "openai.chat.completions.create"
# One question only: the instruction (no goal; the one constraint is decided by its code).
PROFILE = chronicle.AgentProfile(
    "Refund Agent (judged)",
    instructions=[INSTRUCTION],
    constraints=[chronicle.Constraint.never("delete_file")],
    tools=policy_agent.TOOL_SCHEMAS,
)


@pytest.fixture
def incident(control_plane: LocalControlPlane, llm_server: LlmServer) -> chronicle.TraceTree:
    """The refund ticket as recorded, read back as a tree."""
    trace_id = policy_agent.record_ticket(
        control_plane,
        llm_server,
        PROFILE,
        ("lookup_order", "issue_refund"),
        lambda tool: {"order_id": "o-1"} | ({"amount": 3000} if tool == "issue_refund" else {}),
        answer="Your refund is on its way.",
    )
    llm_server.reset()
    return chronicle.show(trace_id)


def says(verdict: str, calls: list[str], reason: str) -> Any:
    return chat_text(json.dumps({"verdict": verdict, "calls": calls, "reason": reason}))


def flaky(server: LlmServer, *verdicts: str) -> None:
    server.reply_with(
        *(
            says(v, ["lookup_order#1"] if v == "pass" else ["issue_refund#1"], f"run {i}: {v}")
            for i, v in enumerate(verdicts, 1)
        )
    )


def test_five_runs_three_pass_give_a_pass_at_rate_0_6_and_replay_with_no_judge_call(
    incident, control_plane, llm_server
):
    flaky(llm_server, "pass", "fail", "pass", "fail", "pass")
    judge = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="sk-local", max_retries=0)
    with chronicle.record("judge") as session:
        evaluation = chronicle.evaluate(
            incident, judge=judge, judge_model="gpt-4o-mini", judge_runs=5
        )
    verdict = evaluation.verdict(INSTRUCTION)
    assert (verdict.status, verdict.by) == ("pass", "judge")
    assert verdict.runs == ("pass", "fail", "pass", "fail", "pass")
    assert verdict.pass_rate == 0.6
    assert verdict.calls == ("lookup_order#1",)  # what the passing runs named
    assert (
        verdict.reason == "3 of 5 judge runs say pass (3 pass, 2 fail; pass rate 0.6): run 1: pass"
    )
    assert verdict.to_json()["pass_rate"] == 0.6
    assert evaluation.verdict("delete_file is never called").runs == ()  # code: asked no one
    assert llm_server.request_count == 5
    asked = {r.body["messages"][1]["content"] for r in llm_server.requests}
    assert len(asked) == 1  # the same question each time

    assert chronicle.flush(10)
    envelopes = control_plane.wait_for_envelopes(session.trace_id, 5)
    assert [e["name"] for e in envelopes] == [MODEL_CALL] * 5  # every run recorded
    llm_server.reset()
    chronicle.reset()
    with chronicle.replay(envelopes, strict=True):
        again = chronicle.evaluate(
            incident, profile=PROFILE, judge=judge, judge_model="gpt-4o-mini", judge_runs=5
        )
    assert llm_server.request_count == 0  # the recording answered every run
    assert [v.to_json() for v in again.verdicts] == [v.to_json() for v in evaluation.verdicts]
    judge.close()


def test_a_tie_is_undetermined_and_a_failed_run_counts_as_undetermined(incident, llm_server):
    flaky(llm_server, "pass", "fail", "fail", "pass")
    judge = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="sk-local", max_retries=0)
    tie = chronicle.evaluate(incident, judge=judge, judge_model="gpt-4o-mini", judge_runs=4)
    verdict = tie.verdict(INSTRUCTION)
    assert (verdict.status, verdict.calls, verdict.pass_rate) == ("undetermined", (), 0.5)
    assert verdict.reason == "a tie over 4 judge runs (2 pass, 2 fail; pass rate 0.5): no majority"

    llm_server.reply_with(
        says("fail", ["issue_refund#1"], "no status check"),
        chat_text("not JSON"),
        says("fail", [], ""),
    )
    mostly = chronicle.evaluate(incident, judge=judge, judge_model="gpt-4o-mini", judge_runs=3)
    verdict = mostly.verdict(INSTRUCTION)
    assert (verdict.status, verdict.runs) == ("fail", ("fail", "undetermined", "fail"))
    assert verdict.pass_rate == 0.0 and verdict.calls == ("issue_refund#1",)
    judge.close()
    with pytest.raises(chronicle.ConfigurationError, match="pass judge=client"):
        chronicle.evaluate(incident, judge_runs=3)
    with pytest.raises(chronicle.ConfigurationError, match="1 or more"):
        chronicle.evaluate(incident, judge=judge, judge_model="gpt-4o-mini", judge_runs=0)


def test_the_command_records_every_run_in_the_evaluations_trace(
    incident, control_plane, llm_server
):
    flaky(llm_server, "fail", "pass", "fail")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "OPENAI_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chronicle",
            "evaluate",
            incident.trace_id,
            "--url",
            control_plane.url,
            "--judge",
            "openai:gpt-4o-mini",
            "--judge-runs",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**env, "OPENAI_BASE_URL": llm_server.openai_base_url, "OPENAI_API_KEY": "sk-local"},
    )
    assert result.returncode == 1, result.stderr  # the instruction failed, by 2 of 3
    (verdict,) = [v for v in json.loads(result.stdout)["verdicts"] if v["by"] == "judge"]
    assert (verdict["status"], verdict["runs"]) == ("fail", ["fail", "pass", "fail"])
    assert verdict["pass_rate"] == pytest.approx(1 / 3)
    (judged,) = chronicle.find_traces(
        labels={"evaluates": incident.trace_id}, url=control_plane.url
    )
    assert judged.envelope_count == 3
