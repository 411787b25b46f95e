"""``chronicle.evaluate``: the refund incident checked against its agent's profile, on the real
control plane with the agent's model calls answered by the local model server.

The incident: the model asks for ``issue_refund`` with ``amount: "3000"`` (a string, where the
tool's schema says integer cents) and no manager approval, so the constraint check
(``policy_agent.approved_first``) and the schema check both catch it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

import chronicle
from chronicle.check import correction
from chronicle.check.judge import Judge, judge_client
from chronicle.testing import LocalControlPlane
from tests.support import policy_agent
from tests.support.child import ONLY_OUR_PLUGINS
from tests.support.cli import run_cli, write_test
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    chat_tool_calls,
    messages_text,
    tool_call,
)

ROOT = Path(__file__).resolve().parent.parent
REFUND = "issue_refund#1"
MODEL_CALL = "openai.chat.completions.create"


def script_incident(server: LlmServer, amount: object = "3000") -> None:
    server.reply_with(
        chat_tool_calls(tool_call("lookup_order", {"order_id": "o-1"})),
        chat_tool_calls(tool_call("issue_refund", {"order_id": "o-1", "amount": amount})),
        chat_text("Your refund is on its way."),
    )


@pytest.fixture
def incident(control_plane: LocalControlPlane, llm_server: LlmServer) -> str:
    """The id of the refund incident, recorded by the agent with its profile configured."""
    policy_agent.use(llm_server)
    script_incident(llm_server)
    chronicle.configure(
        control_plane_url=control_plane.url, agent=policy_agent.PROFILE, flush_interval=0.05
    )
    with chronicle.record("ticket", labels={"session_id": "evaluate-incident"}) as session:
        policy_agent.handle_ticket("Please refund my order", "o-1")
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 6)
    return session.trace_id


def by_check(evaluation: chronicle.Evaluation) -> dict[str, chronicle.Verdict]:
    return {v.check if v.check != "constraint" else v.rule: v for v in evaluation.verdicts}


def test_the_refund_incident_is_caught_by_the_constraint_check_and_the_schema(incident):
    evaluation = chronicle.evaluate(incident)  # the profile configured here has the checks
    verdicts = by_check(evaluation)
    rule = verdicts[policy_agent.RULE]
    assert (rule.status, rule.calls) == ("fail", (REFUND,))
    assert "approved_first" in rule.reason
    arguments = verdicts["arguments"]
    assert arguments.status == "fail"
    assert arguments.calls == (f"{MODEL_CALL}#2 (issue_refund)", REFUND)  # the model, the tool
    assert "amount: '3000' is not of type integer" in arguments.reason
    for check in ("tools", "model", "temperature", "max_tokens"):
        assert verdicts[check].status == "pass", verdicts[check].explain()
    assert verdicts["instruction"].status == "undetermined"  # only a judge reads it
    assert verdicts["goal"].status == "undetermined"
    assert not evaluation.passed and evaluation.trace_id == incident
    assert [v.rule for v in evaluation.failed] == [arguments.rule, policy_agent.RULE]
    assert evaluation.verdict(policy_agent.RULE) is rule


def test_without_the_profile_in_code_the_constraint_is_undetermined_and_says_why(
    incident, control_plane
):
    chronicle.reset()  # a process that did not configure the agent: no check to run
    evaluation = chronicle.evaluate(incident, url=control_plane.url)
    rule = evaluation.verdict(policy_agent.RULE)
    assert rule.status == "undetermined" and "no check for it in this process" in rule.reason
    assert evaluation.verdict("arguments").status == "fail"  # the recorded schema still checks
    again = chronicle.evaluate(incident, profile=policy_agent.PROFILE, url=control_plane.url)
    assert again.verdict(policy_agent.RULE).status == "fail"


def test_other_settings_and_an_unlisted_tool_fail_their_checks(control_plane, llm_server):
    policy_agent.use(llm_server)
    llm_server.reply_with(
        chat_tool_calls(tool_call("delete_order", {"order_id": "o-1"})),
        chat_text("done"),
    )
    strict = chronicle.AgentProfile(
        "Refund Agent",
        "Refund by policy",
        tools=policy_agent.TOOL_SCHEMAS,
        model={"name": "gpt-4o-mini", "temperature": 0.0, "max_tokens": 100},
    )
    chronicle.configure(control_plane_url=control_plane.url, agent=strict, flush_interval=0.05)

    @chronicle.boundary("delete_order", kind="tool")
    def delete_order(order_id: str) -> dict[str, Any]:
        return {"deleted": order_id}

    policy_agent.TOOLS["delete_order"] = delete_order
    try:
        with chronicle.record("ticket") as session:
            policy_agent.handle_ticket("delete it", "o-1")
    finally:
        del policy_agent.TOOLS["delete_order"]
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 4)
    verdicts = by_check(chronicle.evaluate(session.trace_id))
    assert verdicts["tools"].status == "fail"
    assert verdicts["tools"].calls == (f"{MODEL_CALL}#1 (delete_order)", "delete_order#1")
    assert verdicts["model"].status == "fail" and "asked for 'gpt-4o'" in verdicts["model"].reason
    assert verdicts["temperature"].status == "fail" and "used 0.1" in verdicts["temperature"].reason
    assert verdicts["max_tokens"].status == "fail"
    assert verdicts["max_tokens"].reason.startswith(f"{MODEL_CALL}#1 asked for 512")


def test_a_check_that_raises_is_undetermined_never_an_exception(incident):
    def broken(calls: Any) -> bool:
        raise KeyError("amount")

    profile = chronicle.AgentProfile(
        "Refund Agent", constraints=[chronicle.Constraint("never crash", check=broken)], tools=[]
    )
    verdict = chronicle.evaluate(incident, profile=profile).verdict("never crash")
    assert verdict.status == "undetermined"
    assert verdict.reason == "its check broken raised KeyError: 'amount'"


def test_a_replay_with_the_fixed_tool_as_the_cut_point_passes_the_rule(incident, monkeypatch):
    tree = chronicle.show(incident)
    span_id = tree.spans[0]["span_id"]
    plan = chronicle.ReplayPlan().run("handle_ticket").run("issue_refund")
    with chronicle.replay_trace(incident, span_id, plan) as run:
        policy_agent.handle_ticket("Please refund my order", "o-1")
    assert (
        chronicle.evaluate(run, profile=policy_agent.PROFILE).verdict(policy_agent.RULE).status
        == "fail"
    )

    monkeypatch.setenv("POLICY_AGENT_FIXED", "1")
    with chronicle.replay_trace(incident, span_id, plan) as fixed:
        policy_agent.handle_ticket("Please refund my order", "o-1")
    evaluation = chronicle.evaluate(fixed, profile=policy_agent.PROFILE)
    assert evaluation.verdict(policy_agent.RULE).status == "pass"
    with pytest.raises(chronicle.ReplayError, match=r"evaluate: the replay of span \w+ is still"):
        with chronicle.replay_trace(incident, span_id, plan) as running:
            chronicle.evaluate(running, profile=policy_agent.PROFILE)
    assert [c.label for c in evaluation.calls][:3] == [
        "handle_ticket#1",
        f"{MODEL_CALL}#1",
        "lookup_order#1",
    ]


def judge_says(verdict: str, calls: list[str], reason: str) -> Any:
    return chat_text(json.dumps({"verdict": verdict, "calls": calls, "reason": reason}))


def test_the_judge_answers_each_instruction_and_the_goal_recorded_then_replayed_with_no_model(
    incident, control_plane, llm_server
):
    tree = chronicle.show(incident)
    llm_server.reset()
    llm_server.reply_with(
        judge_says("fail", [REFUND], "it refunded without checking the order's status"),
        chat_text(  # fenced, and naming a call that is not in the trace
            "```json\n"
            + json.dumps(
                {"verdict": "fail", "calls": [REFUND, "nope#9"], "reason": "no escalation"}
            )
            + "\n```"
        ),
    )
    judge = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="sk-local", max_retries=0)
    with chronicle.record("judge") as session:
        evaluation = chronicle.evaluate(tree, judge=judge, judge_model="gpt-4o-mini")

    judged = [(v.check, v.status, v.calls, v.by) for v in evaluation.verdicts if v.by == "judge"]
    assert judged == [
        ("instruction", "fail", (REFUND,), "judge"),
        ("goal", "fail", (REFUND,), "judge"),
    ]
    assert "nope#9" in evaluation.verdict("goal").reason
    # the constraint has a code check, which decided it: the judge is not asked about it
    assert evaluation.verdict(policy_agent.RULE).by == "chronicle"
    assert llm_server.request_count == 2
    question = llm_server.requests[0].body["messages"][1]["content"]
    assert "The rule to check (instruction): Always verify order status" in question
    assert 'issue_refund#1 (tool): input {"amount": "3000", "order_id": "o-1"}' in question

    assert chronicle.flush(10)
    envelopes = control_plane.wait_for_envelopes(session.trace_id, 2)
    assert [e["name"] for e in envelopes] == [MODEL_CALL, MODEL_CALL]  # recorded like any run
    llm_server.reset()
    chronicle.reset()
    with chronicle.replay(envelopes, strict=True):
        again = chronicle.evaluate(
            tree, profile=policy_agent.PROFILE, judge=judge, judge_model="gpt-4o-mini"
        )
    assert llm_server.request_count == 0  # no model: the recording answered
    assert [v.to_json() for v in again.verdicts] == [v.to_json() for v in evaluation.verdicts]
    judge.close()


def test_a_malformed_judge_answer_is_undetermined(incident, llm_server):
    tree = chronicle.show(incident)
    llm_server.reset()
    llm_server.reply_with(
        chat_text("I think the agent did fine."), chat_text(json.dumps({"verdict": "maybe"}))
    )
    judge = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="sk-local", max_retries=0)
    evaluation = chronicle.evaluate(tree, judge=judge, judge_model="gpt-4o-mini")
    instruction, goal = (v for v in evaluation.verdicts if v.by == "judge")
    assert instruction.status == goal.status == "undetermined"
    assert "not the JSON asked for: it holds no JSON object" in instruction.reason
    assert "its verdict is 'maybe', not pass, fail or undetermined" in goal.reason
    llm_server.reply_with()  # nothing queued: the server echoes, which is not JSON either
    judge.close()
    with pytest.raises(chronicle.ConfigurationError, match="judge_model"):
        chronicle.evaluate(tree, judge=judge)


def test_an_anthropic_style_judge_is_asked_the_same_questions(incident, llm_server):
    anthropic = pytest.importorskip("anthropic")
    tree = chronicle.show(incident)
    llm_server.reset()
    answer = {"verdict": "pass", "calls": ["lookup_order#1"], "reason": "looked it up"}
    llm_server.reply_with(messages_text(json.dumps(answer)), messages_text("no idea"))
    judge = anthropic.Anthropic(
        base_url=llm_server.anthropic_base_url, api_key="sk-local", max_retries=0
    )
    evaluation = chronicle.evaluate(tree, judge=judge, judge_model="claude-3-5-haiku-latest")
    instruction = evaluation.verdict("Always verify order status before issuing a refund")
    assert (instruction.status, instruction.calls, instruction.by) == (
        "pass",
        ("lookup_order#1",),
        "judge",
    )
    assert evaluation.verdict("goal").status == "undetermined"
    sent = llm_server.requests[0].body
    assert sent["system"].startswith("You check an AI agent's recorded actions")
    judge.close()


def run_pytest(path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**env, **ONLY_OUR_PLUGINS, **environ},
    )


def test_the_written_test_fails_on_the_incident_and_passes_after_the_fix(
    incident, control_plane, tmp_path
):
    chronicle.reset()
    written = tmp_path / "regressions"
    result = write_test(incident, control_plane.url, written)
    assert result.returncode == 1, result.stderr  # a check failed
    assert f"FAIL [constraint] {policy_agent.RULE} ({REFUND})" in result.stdout
    assert "2 failed, 4 passed, 2 undetermined (6 calls)" in result.stdout
    assert f"{policy_agent.RULE}: broken at {REFUND}" in result.stderr  # where it happened
    (test_file,) = written.glob("test_*.py")
    (incident_file,) = written.glob("incident_*.json")
    assert str(test_file) in result.stderr and str(incident_file) in result.stderr
    assert json.loads(incident_file.read_text())["trace_id"] == incident
    text = test_file.read_text()
    assert "from tests.support.policy_agent import PROFILE\n" in text
    assert "The model's own answer broke it too (openai.chat.completions.create#2" in text

    buggy = run_pytest(test_file)
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "2 failed" in buggy.stdout
    assert f"FAIL [constraint] {policy_agent.RULE} ({REFUND})" in buggy.stdout

    fixed = run_pytest(test_file, POLICY_AGENT_FIXED="1")
    assert "1 failed, 1 passed" in fixed.stdout, fixed.stdout
    # the constraint holds once the fixed tool refuses; the schema rule was broken by the
    # model's own tool call, which a replay serves from the recording: it still fails
    summary = fixed.stdout.split("short test summary")[-1]
    assert "test_every_tool_call_s_arguments" in summary
    assert "test_refunds_above_2500" not in summary


def test_the_cli_judge_records_its_calls_as_a_trace_of_their_own(
    incident, control_plane, llm_server, monkeypatch
):
    built: list[Judge] = []

    def built_and_kept(spec: str) -> Judge:
        built.append(judge_client(spec))
        return built[-1]

    monkeypatch.setattr(correction, "judge_client", built_and_kept)
    chronicle.reset()
    llm_server.reset()
    llm_server.reply_with(
        judge_says("pass", ["lookup_order#1"], "it looked the order up first"),
        judge_says("fail", [REFUND], "3000 cents refunded with no approval"),
        judge_says("fail", [REFUND], "it did not escalate"),
    )
    result = run_cli(
        "evaluate",
        incident,
        "--url",
        control_plane.url,
        "--judge",
        "openai:gpt-4o-mini",
        "--json",
        OPENAI_BASE_URL=llm_server.openai_base_url,
        OPENAI_API_KEY="sk-local",
    )
    assert result.returncode == 1, result.stderr
    verdicts = {v["check"]: v for v in json.loads(result.stdout)["verdicts"]}
    assert verdicts["instruction"]["status"] == "pass" and verdicts["instruction"]["by"] == "judge"
    assert verdicts["goal"]["calls"] == [REFUND]
    # the constraint has no check without --profile: the judge is asked about it too
    assert verdicts["constraint"]["by"] == "judge" and verdicts["constraint"]["status"] == "fail"
    assert llm_server.request_count == 3
    (judged,) = chronicle.find_traces(labels={"evaluates": incident}, url=control_plane.url)
    assert judged.envelope_count == 3
    # the client the command built is closed, not left open for the garbage collector
    assert [judge.client.is_closed() for judge in built] == [True]

    bad = run_cli("evaluate", incident, "--url", control_plane.url, "--judge", "gpt-4o")
    assert bad.returncode == 2 and "PROVIDER:MODEL" in bad.stderr


def test_the_schema_checker_agrees_with_jsonschema_on_the_schemas_chronicle_writes():
    jsonschema = pytest.importorskip("jsonschema")
    from typing import Literal

    from pydantic import BaseModel

    from chronicle.agent import tool_schema
    from chronicle.check.schema import schema_errors

    class Line(BaseModel):
        sku: str
        cents: int

    def create(
        order_id: str,
        lines: list[Line],
        reason: Literal["damaged", "late"] = "late",
        note: str | None = None,
        *tags: str,
    ) -> None:
        """Refund lines of an order."""

    schema: Any = tool_schema("refund", create)["parameters"]
    hand: Any = {  # the OpenAI function-calling style a profile lists by hand
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "pattern": "^o-"},
            "amount": {"type": "integer", "minimum": 1, "maximum": 100000},
        },
        "required": ["order_id", "amount"],
        "additionalProperties": False,
    }
    line = {"sku": "a", "cents": 5}
    values: list[Any] = [
        {"order_id": "o-1", "lines": [line]},
        {"order_id": "o-1", "lines": [line], "reason": "late", "note": None, "tags": ["x"]},
        {"order_id": 1, "lines": [line]},
        {"lines": [line]},
        {"order_id": "o-1", "lines": [{"sku": "a", "cents": "5"}]},
        {"order_id": "o-1", "lines": [line], "reason": "bored"},
        {"order_id": "o-1", "lines": "nope"},
        {"order_id": "o-1", "lines": [line], "note": 3},
        {"order_id": "o-1", "amount": 3000},
        {"order_id": "o-1", "amount": "3000"},
        {"order_id": "x-1", "amount": 0},
        {"order_id": "o-1", "amount": 5, "override": True},
        {"order_id": "o-1", "amount": True},
        [],
    ]
    for candidate in (schema, hand):
        for value in values:
            ours = schema_errors(value, candidate)
            theirs = list(jsonschema.Draft202012Validator(candidate).iter_errors(value))
            assert bool(ours) == bool(theirs), (value, ours, [e.message for e in theirs])
    assert schema_errors({"order_id": "o-1", "amount": "3000"}, hand) == [
        "amount: '3000' is not of type integer"
    ]
    assert schema_errors({"order_id": "o-1", "amount": 5, "override": True}, hand) == [
        "the arguments: 'override' is not an allowed argument"
    ]


def test_a_tool_input_recorded_in_part_is_not_held_against_its_schema(incident):
    tree = chronicle.show(incident)
    for envelope in tree.envelopes:
        if envelope["name"] == "issue_refund":
            envelope["metadata"]["chronicle.lossy_input"] = True
            envelope["input"]["raw"]["amount"] = {"$repr": "<Cents 3000>"}
    tree = chronicle.TraceTree(tree.trace, tree.envelopes)
    arguments = chronicle.evaluate(tree, policy_agent.PROFILE).verdict("arguments")
    assert arguments.calls == (f"{MODEL_CALL}#2 (issue_refund)",)  # the model's call still fails
    assert arguments.reason.endswith("not checked, recorded in part (lossy or cut): issue_refund#1")


def _hostile(tree: Any, entry: str, name: str) -> tuple[Any, Any]:
    """The incident's tree and profile with the names a hostile recording could carry."""
    from chronicle.wire import ENTRY

    for envelope in tree.envelopes:
        if (envelope.get("metadata") or {}).get(ENTRY):
            envelope["metadata"][ENTRY] = entry
    return tree, name


def test_a_recording_cannot_write_code_into_the_test(incident, control_plane, tmp_path):
    """Recorded names are production data: an entry that is not a Python name is refused, and
    a profile name that would close the docstring stays text in it."""
    from chronicle.check.correction import write_test

    evaluation = chronicle.evaluate(incident, profile=policy_agent.PROFILE)
    tree = chronicle.show(incident, url=control_plane.url)
    _hostile(tree, 'os:system("touch pwned"); import os', "")
    with pytest.raises(chronicle.ConfigurationError, match="not a Python name"):
        write_test(evaluation, tree, tmp_path / "refused")
    assert not (tmp_path / "refused").exists() or not list((tmp_path / "refused").iterdir())

    tree = chronicle.show(incident, url=control_plane.url)
    for form in evaluation.profiles.values():
        form["name"] = 'x""" + __import__("os").system("touch pwned") + """'
    written = write_test(evaluation, tree, tmp_path / "written")
    assert written is not None
    (test_file,) = (tmp_path / "written").glob("test_*.py")
    module = ast.parse(test_file.read_text())
    calls = [n for n in ast.walk(module) if isinstance(n, ast.Call)]
    assert not any(isinstance(c.func, ast.Name) and c.func.id == "__import__" for c in calls)
    assert '__import__("os")' in (ast.get_docstring(module) or "")  # shown, as text
