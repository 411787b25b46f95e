"""Rules without code: ``Constraint.before/never/only/at_most`` over the refund agent's traces
(tests/support/policy_agent.py, its model calls answered by the local model server), on the
real control plane. The rules are recorded with the profile, so a process that never imported
the agent checks them the same way (``chronicle evaluate TRACE`` with no ``--profile``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support import policy_agent
from tests.support.cli import run_cli
from tests.support.llm_server import LlmServer, chat_usage

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "Look the refund policy up before refunding"
POLICY_TOOL = {
    "name": "lookup_policy",
    "description": "The refund policy for an order.",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
}
RULES = [
    chronicle.Constraint.before("lookup_policy", "issue_refund", text=BEFORE),
    chronicle.Constraint.never("delete_file"),
    chronicle.Constraint.only(["lookup_order", "lookup_policy", "issue_refund"]),
    chronicle.Constraint.at_most("tool_calls", 8),
    chronicle.Constraint.at_most("cost_usd", 0.05),
    chronicle.Constraint.at_most("tokens", 20_000),
]
PROFILE = chronicle.AgentProfile(
    "Refund Agent (rules)",
    "Refund by policy.",
    constraints=RULES,
    tools=[*policy_agent.TOOL_SCHEMAS, POLICY_TOOL],
)
AMOUNTS = ("issue_refund", "request_approval")
USAGE = chat_usage(1000, 500)  # gpt-4o: $2.50 / $10 a million: $0.0075 a call


@pytest.fixture
def policy_tool() -> Iterator[None]:
    """``lookup_policy`` among the refund agent's tools for this test."""

    @chronicle.boundary("lookup_policy", kind="tool")
    def lookup_policy(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "refund_limit": 2500}

    policy_agent.TOOLS["lookup_policy"] = lookup_policy
    yield
    del policy_agent.TOOLS["lookup_policy"]


def record_ticket(
    control_plane: LocalControlPlane, server: LlmServer, *tools: str, amount: int = 2000
) -> str:
    """Record one ticket whose model asks for ``tools`` one at a time, then answers."""
    return policy_agent.record_ticket(
        control_plane,
        server,
        PROFILE,
        tools,
        lambda name: {"order_id": "o-1"} | ({"amount": amount} if name in AMOUNTS else {}),
        model="gpt-4o",
        usage=USAGE,
    )


def statuses(evaluation: chronicle.Evaluation) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {v.rule: (v.status, v.calls) for v in evaluation.verdicts if v.check == "constraint"}


def test_refunding_before_the_policy_lookup_breaks_the_rule_at_the_refund(
    control_plane, llm_server, policy_tool
):
    trace = record_ticket(
        control_plane, llm_server, "lookup_order", "issue_refund", "lookup_policy"
    )
    evaluation = chronicle.evaluate(trace)
    rule = evaluation.verdict(BEFORE)
    assert (rule.status, rule.calls) == ("fail", ("issue_refund#1",))
    assert rule.reason == (
        "issue_refund#1 ran before any lookup_policy call (lookup_policy#1 came later)"
    )
    assert [v.rule for v in evaluation.failed] == [BEFORE]  # the other rules hold
    found = statuses(evaluation)
    assert found["delete_file is never called"] == ("pass", ())
    assert found["at most 8 tool calls a request"] == ("pass", ())
    cost = evaluation.verdict("the model calls cost at most $0.05 a request")
    assert cost.reason == "4 model call(s) cost $0.03, within $0.05"  # 4 x $0.0075
    tokens = evaluation.verdict("the model calls use at most 20000 tokens a request")
    assert tokens.reason == "4 model call(s) used 6000 tokens, within 20000"
    check = PROFILE.checks[0].rule
    assert check is not None and check(evaluation.calls) == ["issue_refund#1"]  # a check, too

    good = record_ticket(control_plane, llm_server, "lookup_policy", "lookup_order", "issue_refund")
    holds = chronicle.evaluate(good).verdict(BEFORE)
    assert (holds.status, holds.reason) == (
        "pass",
        "each issue_refund call (1) came after a lookup_policy call",
    )


def test_the_rules_are_recorded_and_checked_without_the_agents_code(
    control_plane, llm_server, policy_tool
):
    trace = record_ticket(control_plane, llm_server, "issue_refund", "lookup_policy")
    recorded = chronicle.show(trace).spans[0]["metadata"]["chronicle.agent"]
    assert recorded["agent_id"] == PROFILE.agent_id
    assert recorded["rules"][0] == {
        "text": BEFORE,
        "kind": "before",
        "first": "lookup_policy",
        "then": "issue_refund",
    }
    assert recorded["rules"][4] == {
        "text": "the model calls cost at most $0.05 a request",
        "kind": "at_most",
        "measure": "cost_usd",
        "limit": 0.05,
    }
    assert chronicle.AgentProfile.from_json(recorded) == PROFILE  # the same checks again

    chronicle.reset()  # a process with no profile configured: the recorded rules still check
    evaluation = chronicle.evaluate(trace, url=control_plane.url)
    assert statuses(evaluation)[BEFORE] == ("fail", ("issue_refund#1",))
    result = run_cli("evaluate", trace, "--url", control_plane.url, "--json")
    assert result.returncode == 1, result.stderr
    verdicts = {v["rule"]: v for v in json.loads(result.stdout)["verdicts"]}
    assert (verdicts[BEFORE]["status"], verdicts[BEFORE]["calls"]) == ("fail", ["issue_refund#1"])
    assert verdicts["delete_file is never called"]["status"] == "pass"


def test_limits_name_the_call_that_went_past_them_and_every_one_after(
    control_plane, llm_server, policy_tool
):
    trace = record_ticket(
        control_plane,
        llm_server,
        "lookup_policy",
        "lookup_order",
        "issue_refund",
        "request_approval",
    )
    tight = chronicle.AgentProfile(
        "Refund Agent (tight)",
        constraints=[
            chronicle.Constraint.at_most("tool_calls", 2),
            chronicle.Constraint.at_most("cost_usd", 0.01),
            chronicle.Constraint.at_most("tokens", 2000),
            chronicle.Constraint.never("request_approval", "delete_file"),
            chronicle.Constraint.only(["lookup_policy", "lookup_order"]),
        ],
        tools=[],
    )
    evaluation = chronicle.evaluate(trace, profile=tight)
    model = "openai.chat.completions.create"
    found = {v.rule: v for v in evaluation.verdicts if v.check == "constraint"}
    calls = found["at most 2 tool calls a request"]
    assert calls.calls == ("issue_refund#1", "request_approval#1")
    assert calls.reason == "4 tool calls, over 2: past it issue_refund#1, request_approval#1"
    cost = found["the model calls cost at most $0.01 a request"]
    assert cost.calls == tuple(f"{model}#{n}" for n in (2, 3, 4, 5))  # $0.015 after the 2nd
    assert cost.reason.startswith(f"5 model call(s) cost $0.0375, over $0.01 from {model}#2")
    tokens = found["the model calls use at most 2000 tokens a request"]
    assert tokens.calls[0] == f"{model}#2" and tokens.status == "fail"
    never = found["request_approval or delete_file is never called"]
    assert (never.status, never.calls) == ("fail", ("request_approval#1",))
    only = found["only lookup_policy, lookup_order are called"]
    assert only.calls == ("issue_refund#1", "request_approval#1")
    assert only.reason.endswith(
        "issue_refund, request_approval not among lookup_policy, lookup_order"
    )


def test_a_cost_the_price_table_cannot_tell_is_undetermined(control_plane, llm_server):
    trace_id = policy_agent.record_ticket(
        control_plane, llm_server, PROFILE, (), lambda tool: {}, model="house-model-7", usage=USAGE
    )
    cost = chronicle.evaluate(trace_id).verdict("the model calls cost at most $0.05 a request")
    assert cost.status == "undetermined"
    assert "the price table does not know 'house-model-7'" in cost.reason


def test_a_bad_rule_is_refused_saying_what_to_pass():
    with pytest.raises(chronicle.ConfigurationError, match="bounds one of tool_calls, tokens"):
        chronicle.Constraint.at_most("dollars", 1)  # type: ignore[arg-type]
    with pytest.raises(chronicle.ConfigurationError, match=r"use \['search'\]"):
        chronicle.Constraint.only("search")
    with pytest.raises(chronicle.ConfigurationError, match="needs two different tools"):
        chronicle.Constraint.before("lookup", "lookup")
    with pytest.raises(chronicle.ConfigurationError, match="a whole number"):
        chronicle.Constraint.at_most("tool_calls", 2.5)
    assert chronicle.Constraint.never("rm") == chronicle.Constraint.never("rm")
    assert chronicle.Constraint.never("rm") != chronicle.Constraint("rm is never called")
