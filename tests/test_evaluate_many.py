"""Many traces at once: ``chronicle evaluate --agent NAME --since 1d --save`` over the refund
agent's saved traces (tests/support/policy_agent.py, its model answered by the local model
server; some refund before the policy lookup), then ``chronicle traces --failing`` lists exactly
the ones that broke the rule. On a control plane of this test's own, so every trace and
evaluation on it is this test's.
"""

from __future__ import annotations

import json
import random

import pytest

import chronicle
from chronicle.check.many import Tally, TraceResult
from chronicle.cli import main
from chronicle.testing import LocalControlPlane
from tests.support.cli import run_cli
from tests.support.llm_server import LlmServer
from tests.test_rules import policy_tool  # noqa: F401 (the fixture, shared)
from tests.test_verdicts import BEFORE, profile, ticket

TRACES = 10  # 3 break the rule (the seed below), 7 keep it: exactness is the point, not the count
AGENT = "refund-agent"


@pytest.mark.usefixtures("policy_tool")
def test_evaluate_an_agents_day_and_find_exactly_the_traces_that_broke_the_rule(
    fresh_control_plane: LocalControlPlane, llm_server: LlmServer
) -> None:
    agent = profile(AGENT)
    url = fresh_control_plane.url
    order = random.Random(43)
    broke: set[str] = set()
    held: set[str] = set()
    for _ in range(TRACES):
        early = order.random() < 0.4  # refunds before it looks the policy up
        tools = ("issue_refund", "lookup_policy") if early else ("lookup_policy", "issue_refund")
        trace = ticket(fresh_control_plane, llm_server, agent, "lookup_order", *tools)
        (broke if early else held).add(trace)
    other = profile("another-agent")  # not --agent refund-agent: never evaluated
    stranger = ticket(fresh_control_plane, llm_server, other, "issue_refund")
    chronicle.reset()
    assert broke and held

    result = run_cli(
        "evaluate", "--agent", AGENT, "--since", "1d", "--save", "--json", "--url", url
    )
    assert result.returncode == 1, result.stderr  # some failed the rule
    *lines, last = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["trace_id"] for line in lines} == broke | held  # one object per trace
    assert all(line["saved_as"] for line in lines)
    summary = last["summary"]
    assert (summary["traces"], summary["failed"], summary["saved"]) == (TRACES, len(broke), TRACES)
    (rule,) = [c for c in summary["checks"] if c["rule"] == BEFORE]
    assert (rule["passed"], rule["failed"]) == (len(held), len(broke))
    assert set(rule["failing"]) == broke

    found = run_cli(
        "traces", "--failing", "refund policy", "--limit", "500", "--json", "--url", url
    )
    assert found.returncode == 0, found.stderr
    assert {t["trace_id"] for t in json.loads(found.stdout)} == broke
    evaluated = run_cli("traces", "--evaluated", "--limit", "500", "--json", "--url", url)
    assert {t["trace_id"] for t in json.loads(evaluated.stdout)} == broke | held
    assert stranger not in evaluated.stdout

    table = run_cli("evaluate", "--agent", AGENT, "--url", url)  # the lines and the summary
    assert table.returncode == 1
    assert f"{len(held)} of {TRACES} passed, {len(broke)} failed  [constraint] {BEFORE}" in (
        table.stdout
    )
    assert f"{TRACES} traces checked: {len(broke)} failed a check" in table.stdout


def test_the_options_that_choose_traces_and_one_trace_do_not_mix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nowhere = ("--url", "http://127.0.0.1:9")
    assert main(["evaluate", "ab" * 16, "--agent", AGENT, *nowhere]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["evaluate", "--since", "1d", *nowhere]) == 2
    assert "--agent NAME or --label" in capsys.readouterr().err
    assert main(["evaluate", "--agent", AGENT, "--write-test", "x", *nowhere]) == 2
    assert "--write-test check one trace" in capsys.readouterr().err


def test_a_trace_that_cannot_be_checked_is_counted_not_fatal() -> None:
    tally = Tally()
    tally.add(TraceResult("ab" * 16, None, "ConfigurationError: no profile"))
    assert tally.to_json()["summary"]["errors"] == 1
    assert TraceResult("ab" * 16, None, "boom").line().endswith("ERROR  boom")
