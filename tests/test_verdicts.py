"""Verdicts kept: ``evaluate(..., save=True)`` records the evaluation as a trace linked to the one
it evaluates, on the real control plane, and ``find_traces(failing=...)`` / ``chronicle traces
--failing``, ``--evaluated`` and ``chronicle agents`` read it back. The refund agent
(tests/support/policy_agent.py) runs with its model calls answered by the local model server.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from agentplane_primitives.models import Envelope, Span, Trace

import chronicle
from chronicle.read.agents import find_agents
from chronicle.testing import LocalControlPlane
from tests.support import policy_agent
from tests.support.cli import run_cli
from tests.support.llm_server import LlmServer, chat_text
from tests.test_rules import POLICY_TOOL, policy_tool  # noqa: F401 (the fixture, shared)

BEFORE = "Look the refund policy up before refunding"
RULE_LABEL = "constraint.look_the_refund_policy_up_before_refunding"


def profile(name: str) -> chronicle.AgentProfile:
    """The refund agent's profile with the rule, named for one test (its own agent_id, so the
    shared control plane's other evaluations do not count toward it)."""
    return chronicle.AgentProfile(
        name,
        "Refund by policy.",
        constraints=[chronicle.Constraint.before("lookup_policy", "issue_refund", text=BEFORE)],
        tools=[*policy_agent.TOOL_SCHEMAS, POLICY_TOOL],
    )


def arguments(tool: str) -> dict[str, Any]:
    """What the model asks ``tool`` with: the order, and an amount for a refund."""
    return {"order_id": "o-1"} | ({"amount": 2000} if tool == "issue_refund" else {})


def ticket(
    control_plane: LocalControlPlane,
    server: LlmServer,
    agent: chronicle.AgentProfile,
    *tools: str,
) -> str:
    """Record one ticket whose model asks for ``tools`` one at a time, then answers."""
    return policy_agent.record_ticket(control_plane, server, agent, tools, arguments)


def saved(control_plane: LocalControlPlane, evaluation: chronicle.Evaluation, count: int) -> Any:
    """The saved evaluation trace whole, once its ``count`` envelopes are stored."""
    assert evaluation.saved_as is not None
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(evaluation.saved_as, count)
    return chronicle.show(evaluation.saved_as, url=control_plane.url)


@pytest.mark.usefixtures("policy_tool")
def test_a_saved_evaluation_is_a_trace_linked_to_the_one_it_evaluates(control_plane, llm_server):
    agent = profile("Refund Agent (kept)")
    bad = ticket(control_plane, llm_server, agent, "lookup_order", "issue_refund", "lookup_policy")
    good = ticket(control_plane, llm_server, agent, "lookup_policy", "lookup_order", "issue_refund")

    evaluation = chronicle.evaluate(bad, save=True)
    assert evaluation.to_json()["saved_as"] == evaluation.saved_as != bad
    tree = saved(control_plane, evaluation, len(evaluation.verdicts))
    (span,) = tree.spans
    assert span["service"] == "chronicle-evaluate"
    assert span["metadata"]["chronicle.evaluates"] == {"trace_id": bad}
    assert "chronicle.agent" not in span["metadata"]  # not a run of the agent
    labels = tree.trace["metadata"]
    assert labels["chronicle.evaluates"] == bad
    assert labels["chronicle.evaluation.passed"] == "false"
    assert labels[f"chronicle.verdict.{agent.agent_id}.{RULE_LABEL}"] == "fail"
    assert labels[f"chronicle.verdict.{agent.agent_id}.tools"] == "pass"
    # one envelope per verdict, holding what the verdict says; valid primitives all of them
    Trace.model_validate(tree.trace | {"state": "closed"})
    Span.model_validate(span)
    for envelope in tree.envelopes:
        Envelope.model_validate(envelope)
    by_rule = {e["input"]["raw"]["rule"]: e for e in tree.envelopes}
    assert set(by_rule) == {v.rule for v in evaluation.verdicts}
    rule = by_rule[BEFORE]
    assert rule["name"] == "verdict:constraint"
    assert rule["input"]["raw"]["evaluates"] == bad
    assert rule["output"]["raw"]["status"] == "fail"
    assert rule["output"]["raw"]["calls"] == ["issue_refund#1"]
    assert rule["output"]["raw"]["reason"] == evaluation.verdict(BEFORE).reason

    chronicle.evaluate(good, save=True)
    assert chronicle.flush(10)
    url = control_plane.url
    failing = {t.trace_id for t in chronicle.find_traces(failing="refund policy", url=url)}
    assert bad in failing and good not in failing
    assert bad in {t.trace_id for t in chronicle.find_traces(failing=RULE_LABEL, url=url)}
    evaluated = {t.trace_id for t in chronicle.find_traces(evaluated=True, limit=500, url=url)}
    assert {bad, good} <= evaluated
    passing = chronicle.find_traces(failing="tools", url=url)
    assert not {bad, good} & {t.trace_id for t in passing}  # every tool called is listed

    listed = run_cli("traces", "--failing", "policy", "--url", url, "--json")
    assert listed.returncode == 0, listed.stderr
    ids = [t["trace_id"] for t in json.loads(listed.stdout)]
    assert bad in ids and good not in ids and evaluation.saved_as not in ids


@pytest.mark.usefixtures("policy_tool")
def test_agents_shows_each_agents_pass_rate_per_check(control_plane, llm_server):
    agent = profile("Refund Agent (rates)")
    bad = ticket(control_plane, llm_server, agent, "issue_refund", "lookup_policy")
    good = ticket(control_plane, llm_server, agent, "lookup_policy", "issue_refund")
    unsaved = ticket(control_plane, llm_server, agent, "issue_refund")
    for trace in (bad, good, bad):  # evaluated twice: its latest evaluation counts, once
        chronicle.evaluate(trace, save=True)
    chronicle.evaluate(unsaved)  # not saved: not counted
    assert chronicle.flush(10)

    (row,) = find_agents(agent=agent.agent_id, url=control_plane.url).agents
    assert row.traces == 3 and row.evaluated == 2
    rates = {rate.name: rate for rate in row.pass_rates}
    rule = rates[RULE_LABEL]
    assert (rule.passed, rule.failed, rule.undetermined, rule.pass_rate) == (1, 1, 0, 0.5)
    assert rule.rule == BEFORE and rule.shown == f"constraint: {BEFORE}"
    assert (rates["tools"].passed, rates["tools"].total) == (2, 2)

    shown = run_cli("agents", "--url", control_plane.url, "--json")
    assert shown.returncode == 0, shown.stderr
    (listed,) = [a for a in json.loads(shown.stdout)["agents"] if a["agent_id"] == agent.agent_id]
    assert listed["evaluated"] == 2
    assert {r["name"]: r["pass_rate"] for r in listed["pass_rates"]}[RULE_LABEL] == 0.5
    table = run_cli("agents", "--url", control_plane.url)
    assert f"{agent.name} ({agent.agent_id}): 2 traces evaluated" in table.stdout
    assert f" 50%  1 of 2 passed, 1 failed  constraint: {BEFORE}" in table.stdout


@pytest.mark.usefixtures("policy_tool")
def test_the_judges_calls_are_kept_in_the_evaluation_trace_with_the_verdicts(
    control_plane, llm_server
):
    agent = chronicle.AgentProfile(
        "Refund Agent (judged)",
        "Refund by policy.",
        instructions=["Always verify order status before issuing a refund"],
        constraints=[chronicle.Constraint.before("lookup_policy", "issue_refund", text=BEFORE)],
        tools=[*policy_agent.TOOL_SCHEMAS, POLICY_TOOL],
    )
    trace = ticket(control_plane, llm_server, agent, "issue_refund", "lookup_policy")
    llm_server.reset()
    answers = [
        {"verdict": "fail", "calls": ["issue_refund#1"], "reason": "no lookup first"},
        {"verdict": "pass", "calls": [], "reason": "refunded by policy"},
    ]
    llm_server.reply_with(*(chat_text(json.dumps(a)) for a in answers))
    judge = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="sk-local", max_retries=0)
    evaluation = chronicle.evaluate(trace, judge=judge, judge_model="gpt-4o-mini", save=True)
    judge.close()
    assert llm_server.request_count == 2
    tree = saved(control_plane, evaluation, len(evaluation.verdicts) + 2)
    kinds = [e["kind"] for e in tree.envelopes]
    assert kinds.count("llm") == 2  # the judge's two questions, in the same trace
    assert kinds.count("tool") == len(evaluation.verdicts)
    labels = tree.trace["metadata"]
    instruction = "instruction.always_verify_order_status_before_issuing_a_refund"
    assert labels[f"chronicle.verdict.{agent.agent_id}.{instruction}"] == "fail"
    assert labels[f"chronicle.verdict.{agent.agent_id}.goal"] == "pass"
    judged = next(e for e in tree.envelopes if e["name"] == "verdict:instruction")
    assert judged["output"]["raw"]["by"] == "judge"
    found = chronicle.find_traces(failing="verify order status", url=control_plane.url)
    assert trace in {t.trace_id for t in found}


def test_saving_needs_a_control_plane_and_a_trace_to_link_to(tmp_path):
    tree = chronicle.TraceTree({"trace_id": "ab" * 16, "spans": []}, [])
    chronicle.configure(enabled=False)
    with pytest.raises(chronicle.ConfigurationError, match="control_plane_url"):
        chronicle.evaluate(tree, profile=profile("Refund Agent (nowhere)"), save=True)
