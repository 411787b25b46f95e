"""Trajectories: the refund agent's tool calls (tests/support/policy_agent.py, its model calls
answered by the local model server) against a reference run's, in agentevals' four modes, on
the real control plane; the reference as a trace id, a ``TraceTree`` and an incident file, and
through ``chronicle evaluate --reference --trajectory``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support import policy_agent
from tests.support.cli import run_cli
from tests.support.llm_server import LlmServer

ROOT = Path(__file__).resolve().parent.parent
GOOD = ("lookup_order", "request_approval", "issue_refund")


def record_ticket(
    control_plane: LocalControlPlane,
    server: LlmServer,
    *tools: str,
    amount: int = 3000,
    profile: chronicle.AgentProfile | None = policy_agent.PROFILE,
) -> str:
    """Record one ticket whose model asks for ``tools`` one at a time, then answers."""
    return policy_agent.record_ticket(
        control_plane,
        server,
        profile,
        tools,
        lambda name: {"order_id": "o-1"} | ({} if name == "lookup_order" else {"amount": amount}),
        answer="Your refund is on its way.",
    )


@pytest.fixture
def reference(control_plane: LocalControlPlane, llm_server: LlmServer) -> str:
    """The good run: the order looked up, a manager asked, then the refund."""
    return record_ticket(control_plane, llm_server, *GOOD)


def trajectory(trace: str, ref: object, mode: str, **options: object) -> chronicle.Verdict:
    evaluation = chronicle.evaluate(trace, reference=ref, trajectory=mode, **options)  # type: ignore[arg-type]
    return evaluation.verdict("trajectory")


def test_two_swapped_calls_pass_unordered_and_fail_strict_at_the_first_of_them(
    reference, control_plane, llm_server
):
    swapped = record_ticket(
        control_plane, llm_server, "request_approval", "lookup_order", "issue_refund"
    )
    unordered = trajectory(swapped, reference, "unordered")
    assert (unordered.status, unordered.reason) == (
        "pass",
        "3 tool call(s) against the reference's 3",
    )
    assert unordered.rule == (
        f"unordered trajectory: the same tool calls, in any order as trace {reference} (tool calls)"
    )
    strict = trajectory(swapped, reference, "strict")
    assert (strict.status, strict.calls) == ("fail", ("request_approval#1",))
    assert strict.reason == "request_approval#1 is call 1, where the reference calls lookup_order#1"
    assert trajectory(reference, reference, "strict").status == "pass"  # itself, in order
    default = chronicle.evaluate(swapped, reference=reference).verdict("trajectory")
    assert default.rule.startswith("strict trajectory")  # agentevals' default mode


def test_subset_and_superset_name_the_extra_call_and_the_missing_one(
    reference, control_plane, llm_server
):
    again = record_ticket(control_plane, llm_server, "lookup_order", *GOOD)  # one more lookup
    assert trajectory(again, reference, "superset").status == "pass"
    subset = trajectory(again, reference, "subset")
    assert (subset.status, subset.calls) == ("fail", ("lookup_order#2",))
    assert subset.reason == "lookup_order#2 is not among the reference's calls"
    unordered = trajectory(again, reference, "unordered")
    assert unordered.calls == ("lookup_order#2",)

    unapproved = record_ticket(control_plane, llm_server, "lookup_order", "issue_refund")
    assert trajectory(unapproved, reference, "subset").status == "pass"
    superset = trajectory(unapproved, reference, "superset")
    assert (superset.status, superset.calls) == ("fail", ())
    assert superset.reason == "the reference's request_approval#1 not made"
    strict = trajectory(unapproved, reference, "strict")
    assert (strict.calls, strict.reason) == (
        ("issue_refund#1",),
        "issue_refund#1 is call 2, where the reference calls request_approval#1",
    )


def test_arguments_count_only_when_asked(reference, control_plane, llm_server):
    smaller = record_ticket(control_plane, llm_server, *GOOD, amount=2000)
    assert trajectory(smaller, reference, "strict").status == "pass"
    strict = trajectory(smaller, reference, "strict", trajectory_args=True)
    assert (strict.status, strict.calls) == ("fail", ("request_approval#1",))
    assert strict.reason == (
        "request_approval#1's arguments differ from the reference's request_approval#1: "
        "amount 2000 where the reference has 3000"
    )
    assert strict.rule.endswith("(tool calls and their arguments)")
    unordered = trajectory(smaller, reference, "unordered", trajectory_args=True)
    assert unordered.calls == ("request_approval#1",)
    assert unordered.reason.startswith(
        "request_approval#1's arguments match no request_approval call of the reference's "
        "(amount 2000 where the reference has 3000); nor issue_refund#1; the reference's "
    )


def test_the_reference_as_a_tree_a_file_and_on_the_command_line(
    reference, control_plane, llm_server, tmp_path
):
    swapped = record_ticket(
        control_plane, llm_server, "request_approval", "lookup_order", "issue_refund"
    )
    saved = tmp_path / "good.json"
    result = run_cli("save", reference, "--url", control_plane.url, "-o", str(saved))
    assert result.returncode == 0, result.stderr
    by_tree = trajectory(swapped, chronicle.show(reference), "strict")
    by_file = trajectory(swapped, saved, "strict")
    by_text = trajectory(swapped, str(saved), "strict")
    assert by_tree.calls == by_file.calls == by_text.calls == ("request_approval#1",)
    assert by_file.rule.endswith("as good.json (tool calls)")

    strict = run_cli(
        "evaluate", swapped, "--url", control_plane.url, "--reference", reference, "--json"
    )
    assert strict.returncode == 1, strict.stderr  # the trajectory failed
    verdicts = {v["check"]: v for v in json.loads(strict.stdout)["verdicts"]}
    assert verdicts["trajectory"]["calls"] == ["request_approval#1"]
    unordered = run_cli(
        "evaluate",
        swapped,
        "--url",
        control_plane.url,
        "--reference",
        str(saved),
        "--trajectory",
        "unordered",
        "--trajectory-args",
    )
    assert unordered.returncode == 0, unordered.stdout + unordered.stderr
    assert "PASS [trajectory] unordered trajectory" in unordered.stdout
    bad = run_cli("evaluate", swapped, "--url", control_plane.url, "--trajectory", "unordered")
    assert bad.returncode == 2 and "pass reference=" in bad.stderr


def test_a_trace_without_a_profile_is_checked_for_its_trajectory_alone(
    reference, control_plane, llm_server
):
    chronicle.reset()
    plain = record_ticket(control_plane, llm_server, *GOOD, profile=None)
    evaluation = chronicle.evaluate(plain, reference=reference, trajectory="strict")
    assert [(v.check, v.status) for v in evaluation.verdicts] == [("trajectory", "pass")]
    assert evaluation.notes[0].startswith("only the trajectory was checked: ")
    with pytest.raises(chronicle.ConfigurationError, match="carries no agent profile"):
        chronicle.evaluate(plain)
    with pytest.raises(chronicle.ConfigurationError, match="one of strict, unordered, subset"):
        chronicle.evaluate(plain, reference=reference, trajectory="sideways")  # type: ignore[arg-type]
    with pytest.raises(chronicle.ConfigurationError, match="incident file, a trace id"):
        chronicle.evaluate(plain, reference=Path("no-such-run.json"))
