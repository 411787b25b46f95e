"""The fix workflow end to end, as a user runs it: record the incident, fix the agent, watch the
test pass, with the fix adding a call the recording never made.

1. A pytest project (a pytest subprocess on a folder of its own) holds a refund agent with its
   bug: it refunds 3000 cents with no manager's approval. Its test, marked ``chronicle_replay``,
   is recorded with ``--chronicle-record-mode=once`` and fails, as a test written from an
   incident does. The agent is fixed the natural way (ask ``request_approval`` before a large
   refund): in ``none`` mode the new call has no recording; ``new_episodes`` runs that call alone
   live and adds it to the file in its place, and the next ``none`` run replays the whole test
   from the file with nothing live.
2. ``chronicle evaluate --write-test`` on a recorded trace of the policy agent
   (``tests/support/policy_agent.py``, the agents seed's rule: approval before a refund above
   2500 cents): the test it writes fails on the recorded behaviour and passes once the agent is
   fixed the same natural way (``POLICY_AGENT_FIXED=approval``), the file growing by that call.
   The same for the seed's tool list: an agent whose code forces a refund through a tool the
   profile does not list passes once it asks for approval and uses the listed refund instead
   (two calls added, the forbidden one dropped).

Whether a tool ran live is read from the log the agent's tools write when their code runs, and
whether the model was asked from the local model server's request count.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import chronicle
import chronicle.agent as agent_registry
import tests.support
from chronicle.testing import LocalControlPlane
from tests.support import policy_agent
from tests.support.cli import write_test
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, tool_call

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

AGENT = '''
"""A refund agent: looks the order up, refunds it, asks the model to write the reply."""
import json
import os
from pathlib import Path

import openai

import chronicle

client = chronicle.wrap(
    openai.OpenAI(base_url=os.environ["AGENT_LLM_URL"], api_key="test", max_retries=0)
)


def ran(name):
    with Path(os.environ["AGENT_TOOL_LOG"]).open("a") as log:
        log.write(name + "\\n")


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id):
    ran("lookup_order")
    return {"order_id": order_id, "amount": 3000, "paid": True}


@chronicle.boundary("request_approval", kind="tool")
def request_approval(order_id, amount):
    ran("request_approval")
    return {"approved": True, "by": "manager"}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id, amount):
    ran("issue_refund")
    return {"status": "refunded", "amount": amount}


def handle_ticket(ticket, order_id):
    order = lookup_order(order_id)
    if FIXED and order["amount"] > 2500:
        if not request_approval(order_id, order["amount"])["approved"]:
            return "A manager will look at your refund."
    refund = issue_refund(order_id, order["amount"])
    answer = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": f"{ticket}\\nrefund: {json.dumps(refund)}"}],
    )
    return answer.choices[0].message.content


FIXED = False
'''

TEST = """
import pytest

import agent


@pytest.mark.chronicle_replay("incidents/refund.json")
def test_a_large_refund_waits_for_a_manager(chronicle_run):
    reply = agent.handle_ticket("Please refund order o-1", "o-1")
    assert reply == "Your refund is on its way."
    calls = [call.name for call in chronicle_run.call_log()]
    assert "request_approval" in calls, f"3000 cents refunded with no approval: {calls}"
    assert calls.index("request_approval") < calls.index("issue_refund")
"""


def run_pytest(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return run_inline(project, "-p", "no:xdist", *args)


def envelopes(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(path.read_text())["envelopes"]
    return found


def without_sequence(envelope: dict[str, Any]) -> dict[str, Any]:
    """The envelope with its place in call order left out (a call added before it moves it)."""
    metadata = {k: v for k, v in envelope["metadata"].items() if k != "chronicle.sequence"}
    return {**envelope, "metadata": metadata}


def test_new_episodes_adds_the_call_a_fix_makes_and_the_next_run_replays_it(
    pytester: pytest.Pytester, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool_log = pytester.path / "tools.log"
    monkeypatch.setenv("AGENT_LLM_URL", llm_server.openai_base_url)
    monkeypatch.setenv("AGENT_TOOL_LOG", str(tool_log))
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(agent=AGENT, test_refund=TEST)
    incident = pytester.path / "incidents" / "refund.json"

    # 1. the bug, recorded: the test runs live, fails, and the file is written anyway
    llm_server.reply_with(chat_text("Your refund is on its way."))
    recorded = run_pytest(pytester, "--chronicle-record-mode=once")
    recorded.assert_outcomes(failed=1)
    recorded.stdout.fnmatch_lines(["*3000 cents refunded with no approval*"])
    recorded.stdout.fnmatch_lines(["wrote incidents/refund.json (3 calls; the test failed*"])
    assert tool_log.read_text().split() == ["lookup_order", "issue_refund"]
    assert llm_server.request_count == 1
    before = envelopes(incident)
    assert [e["name"] for e in before] == [
        "lookup_order",
        "issue_refund",
        "openai.chat.completions.create",
    ]

    # 2. the natural fix: ask a manager before a large refund. Replayed as recorded, the new
    # call has no recording, and the failure says how to record it
    pytester.makepyfile(agent=AGENT.replace("FIXED = False", "FIXED = True"))
    tool_log.write_text("")
    strict = run_pytest(pytester)
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(
        [
            "*call 1 of 'request_approval' has no recording*",
            "*--chronicle-record-mode=new_episodes*",
        ]
    )
    assert tool_log.read_text() == "" and llm_server.request_count == 1

    # 3. new_episodes: only the new call runs live, and the file gains exactly that call
    grown = run_pytest(pytester, "--chronicle-record-mode=new_episodes", "--chronicle-log-calls")
    grown.assert_outcomes(passed=1)
    grown.stdout.fnmatch_lines(
        ["rewrote incidents/refund.json (new_episodes: added request_approval#1)"]
    )
    grown.stdout.fnmatch_lines(
        ["*lookup_order#1 stub", "*request_approval#1 run", "*issue_refund#1 stub"]
    )
    assert tool_log.read_text().split() == ["request_approval"]
    assert llm_server.request_count == 1  # the model's answer came from the file
    after = envelopes(incident)
    assert len(after) == len(before) + 1
    (added,) = [e for e in after if e["name"] == "request_approval"]
    kept = [e for e in after if e is not added]
    assert [without_sequence(e) for e in kept] == [without_sequence(e) for e in before]
    assert after.index(added) == 1  # in its place: after the lookup, before the refund
    assert [e["metadata"]["chronicle.sequence"] for e in after] == list(range(1, len(after) + 1))
    assert added["input"]["raw"] == {"order_id": "o-1", "amount": 3000}
    assert added["output"]["raw"] == {"approved": True, "by": "manager"}
    assert (added["trace_id"], added["span_id"]) == (before[0]["trace_id"], before[0]["span_id"])
    assert added.get("parent_envelope_id") == before[0].get("parent_envelope_id")
    metadata = json.loads(incident.read_text())["metadata"]
    assert metadata["outcome"] == "passed" and "failure" not in metadata

    # 4. the next run replays the whole test from the file: nothing live
    tool_log.write_text("")
    replayed = run_pytest(pytester, "--chronicle-log-calls")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(
        ["*lookup_order#1 stub", "*request_approval#1 stub", "*issue_refund#1 stub"]
    )
    assert tool_log.read_text() == ""
    assert llm_server.request_count == 1
    assert envelopes(incident) == after  # nothing new: the file is left as it is


# ---- the test chronicle evaluate --write-test writes ------------------------------------------


FRESH = ("tests.support.policy_agent", "shop_agent")
"""The agents' modules, which a written test imports: afresh in each of its runs, as in a new
process (the agent's model client pointing nowhere, no approval remembered)."""


def run_written(
    pytester: pytest.Pytester, path: Path, selected: str = "refunds_above", **environ: str
) -> pytest.RunResult:
    """The written test file ``path`` run by pytest as a user runs it (only the tests named
    like ``selected``), with none of this run's CHRONICLE_/POLICY_ settings, plus ``environ``:
    in this process (``run_inline``), with the ``FRESH`` modules and the tool registry as a new
    process has them."""
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith(("CHRONICLE_", "POLICY_"))]:
            patch.delenv(key)
        for key, value in environ.items():
            patch.setenv(key, value)
        for name in FRESH:
            patch.delitem(sys.modules, name, raising=False)
        # (importing it again rebinds tests.support.policy_agent: put back after the run too)
        patch.setattr(tests.support, "policy_agent", policy_agent)
        patch.setattr(agent_registry, "_tools", {})
        return run_inline(pytester, "-p", "no:xdist", "-k", selected, str(path))


@pytest.fixture
def refund_incident(control_plane: LocalControlPlane, llm_server: LlmServer) -> str:
    """A trace of the policy agent refunding 3000 cents with no approval (its profile's rule)."""
    policy_agent.use(llm_server)
    llm_server.reply_with(
        chat_tool_calls(tool_call("lookup_order", {"order_id": "o-1"})),
        chat_tool_calls(tool_call("issue_refund", {"order_id": "o-1", "amount": 3000})),
        chat_text("Your refund is on its way."),
    )
    chronicle.configure(
        control_plane_url=control_plane.url, agent=policy_agent.PROFILE, flush_interval=0.05
    )
    with chronicle.record("ticket") as session:
        policy_agent.handle_ticket("Please refund my order", "o-1")
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 6)
    chronicle.reset()
    return session.trace_id


def test_the_written_test_passes_once_the_agent_asks_for_approval(
    refund_incident: str,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    pytester: pytest.Pytester,
) -> None:
    written = tmp_path / "regressions"
    result = write_test(refund_incident, control_plane.url, written)
    assert result.returncode == 1, result.stderr
    assert f"{policy_agent.RULE}: broken at issue_refund#1" in result.stderr
    (test_file,) = written.glob("test_*.py")
    (incident_file,) = written.glob("incident_*.json")
    text = test_file.read_text()
    assert ".record_new()" in text and "the file grows" in text
    recorded = envelopes(incident_file)

    buggy = run_written(pytester, test_file)
    assert buggy.ret == 1, buggy.outlines
    assert f"FAIL [constraint] {policy_agent.RULE} (issue_refund#1)" in buggy.stdout.str()
    assert envelopes(incident_file) == recorded  # nothing new: the file is as it was

    fixed = run_written(pytester, test_file, POLICY_AGENT_FIXED="approval")
    assert fixed.ret == 0, fixed.outlines
    grown = envelopes(incident_file)
    ids = {e["envelope_id"] for e in recorded}
    assert [e["name"] for e in grown if e["envelope_id"] not in ids] == ["request_approval"]
    assert len(grown) == len(recorded) + 1

    again = run_written(pytester, test_file, POLICY_AGENT_FIXED="approval")
    assert again.ret == 0, again.outlines
    assert envelopes(incident_file) == grown  # the approval now comes from the file


SHOP = '''
"""A refund agent whose code picks its tools: the buggy one forces a refund through a tool its
profile does not list; the fix (SHOP_FIXED=1) asks a manager, then uses the listed refund."""
import os

import chronicle
from tests.support.policy_agent import RULE, TOOL_SCHEMAS, approved_first


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id: str) -> dict:
    return {"order_id": order_id, "amount": 3000, "paid": True}


@chronicle.boundary("request_approval", kind="tool")
def request_approval(order_id: str, amount: int) -> dict:
    return {"approved": True}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id: str, amount: int) -> dict:
    return {"status": "refunded", "order_id": order_id, "amount": amount}


@chronicle.boundary("force_refund", kind="tool")
def force_refund(order_id: str, amount: int) -> dict:
    return {"status": "refunded", "forced": True}


@chronicle.boundary("handle_ticket")
def handle_ticket(order_id: str) -> dict:
    order = lookup_order(order_id)
    if os.environ.get("SHOP_FIXED") == "1":
        if request_approval(order_id, order["amount"])["approved"]:
            return issue_refund(order_id, order["amount"])
        return {"status": "escalated"}
    return force_refund(order_id, order["amount"])


PROFILE = chronicle.AgentProfile(
    "Refund Agent v2",
    "Process customer refund requests according to company policy.",
    constraints=[chronicle.Constraint(RULE, check=approved_first)],
    tools=TOOL_SCHEMAS,
)
'''


def test_the_written_test_of_a_tool_the_profile_forbids_passes_once_the_agent_drops_it(
    control_plane: LocalControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pytester: pytest.Pytester,
) -> None:
    (tmp_path / "shop_agent.py").write_text(SHOP)
    monkeypatch.syspath_prepend(str(tmp_path))
    import shop_agent  # type: ignore[import-not-found]

    try:
        chronicle.configure(control_plane_url=control_plane.url, agent=shop_agent.PROFILE)
        with chronicle.record("ticket") as session:
            shop_agent.handle_ticket("o-1")
    finally:
        sys.modules.pop("shop_agent", None)
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 3)
    chronicle.reset()
    path = f"{tmp_path}{os.pathsep}{ROOT}"
    written = tmp_path / "regressions"
    result = write_test(
        session.trace_id, control_plane.url, written, "shop_agent:PROFILE", PYTHONPATH=path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL [tools] every tool called is one the profile lists (force_refund#1)" in (
        result.stdout
    )
    (test_file,) = written.glob("test_*.py")
    (incident_file,) = written.glob("incident_*.json")

    def run_tools_test(**environ: str) -> pytest.RunResult:
        return run_written(pytester, test_file, "every_tool_called", **environ)

    buggy = run_tools_test()
    assert buggy.ret == 1, buggy.outlines
    assert "force_refund not in the profile's tools" in buggy.stdout.str()

    fixed = run_tools_test(SHOP_FIXED="1")
    assert fixed.ret == 0, fixed.outlines
    assert [e["name"] for e in envelopes(incident_file)] == [
        "handle_ticket",
        "lookup_order",
        "request_approval",
        "issue_refund",
    ]  # the calls the fix added, in their place; the forbidden one dropped
    again = run_tools_test(SHOP_FIXED="1")
    assert again.ret == 0, again.outlines
