"""``ReplayPlan().record_new()`` and the pytest plugin's ``new_episodes``: the calls a fix adds
run live and are recorded into the incident file, in their place in the call tree; the
recordings the fix no longer uses are dropped from it; a recorded call whose input changed is
still a divergence.

The agent: ``handle`` (the entry) runs a ``billing`` sub-agent that looks the order up and
refunds it. ``FIX`` switches on the fixes a test makes: ask for approval first (a new call
inside the recorded ``billing``), which itself asks a ``notify`` call (a new call inside a new
call), or stop refunding (the recorded ``issue_refund`` no longer made). ``LIVE`` lists the
tools whose code ran, which tells a live call from a stubbed one.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.errors import ReplayDivergenceError, ReplayError, ReplayMismatchError
from chronicle.save.incident import Incident
from chronicle.testing import capture
from tests.support.inline import run_inline

pytest_plugins = ["pytester"]

FIX: set[str] = set()
LIVE: list[str] = []


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id: str) -> dict[str, Any]:
    LIVE.append("lookup_order")
    return {"order_id": order_id, "amount": 3000 if "bigger" not in FIX else 4000}


@chronicle.boundary("notify", kind="tool")
def notify(text: str) -> str:
    LIVE.append("notify")
    return "sent"


@chronicle.boundary("request_approval", kind="tool")
def request_approval(order_id: str, amount: int) -> dict[str, Any]:
    LIVE.append("request_approval")
    if "notify" in FIX:
        notify(f"approval asked for {order_id}")
    return {"approved": "decline" not in FIX}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id: str, amount: int) -> dict[str, Any]:
    LIVE.append("issue_refund")
    return {"status": "refunded", "amount": amount}


@chronicle.boundary("billing", kind="tool")
def billing(order_id: str) -> dict[str, Any]:
    order = lookup_order(order_id)
    if "approval" in FIX and not request_approval(order_id, order["amount"])["approved"]:
        return {"refunded": False}
    return {"refunded": True, "refund": issue_refund(order_id, order["amount"])}


@chronicle.boundary("handle", kind="tool")
def handle(order_id: str) -> dict[str, Any]:
    return billing(order_id)


@pytest.fixture
def incident(tmp_path: Path) -> Path:
    """The buggy run (no approval), recorded into a file."""
    FIX.clear()
    with capture() as sent:
        with chronicle.record("ticket"):
            handle("o-1")
    path = tmp_path / "refund.json"
    Incident.of(sent.envelopes).write(path)
    chronicle.reset()
    LIVE.clear()
    return path


def plan() -> chronicle.ReplayPlan:
    return chronicle.ReplayPlan().run("handle", 1).run("billing", 1)


def names(path: Path) -> list[tuple[str, str | None]]:
    """Each envelope's name and its parent's name, in the file's order."""
    found = json.loads(path.read_text())["envelopes"]
    by_id = {e["envelope_id"]: e["name"] for e in found}
    return [(e["name"], by_id.get(e.get("parent_envelope_id") or "")) for e in found]


def test_a_new_call_runs_live_and_is_written_in_its_place(incident: Path) -> None:
    recorded = Incident.read(incident)
    FIX.add("approval")
    with pytest.raises(ReplayMismatchError, match="call 1 of 'request_approval'"):
        with chronicle.replay(str(incident), plan(), strict=True):
            handle("o-1")
    assert Incident.read(incident) == recorded  # nothing recorded, nothing written

    LIVE.clear()
    with chronicle.replay(str(incident), plan().record_new(), strict=True) as run:
        assert handle("o-1") == {"refunded": True, "refund": {"status": "refunded", "amount": 3000}}
    assert LIVE == ["request_approval"]  # the recorded tools were stubbed
    assert [(c.name, c.mode, c.recording) for c in run.call_log()][2:] == [
        ("lookup_order", "stub", 1),
        ("request_approval", "run", None),
        ("issue_refund", "stub", 1),
    ]
    episodes = run.episodes()
    assert episodes is not None
    assert (episodes.added, episodes.dropped) == (("request_approval#1",), ())
    assert names(incident) == [
        ("handle", None),
        ("billing", "handle"),
        ("lookup_order", "billing"),
        ("request_approval", "billing"),  # in its place: inside billing, before the refund
        ("issue_refund", "billing"),
    ]
    rewritten = Incident.read(incident)
    added = next(e for e in rewritten.envelopes if e.name == "request_approval")
    assert added.input is not None and added.input.raw == {"order_id": "o-1", "amount": 3000}
    assert added.output is not None and added.output.raw == {"approved": True}
    assert {e.envelope_id for e in recorded.envelopes} < {
        e.envelope_id for e in rewritten.envelopes
    }

    LIVE.clear()  # the file now holds what the fixed code does: a strict replay, nothing live
    with chronicle.replay(str(incident), plan(), strict=True) as again:
        handle("o-1")
    assert LIVE == [] and again.divergences() == []
    assert Incident.read(incident) == rewritten


def test_a_call_the_fix_no_longer_makes_is_dropped_with_what_it_called(incident: Path) -> None:
    FIX.update({"approval", "decline", "notify"})
    with chronicle.replay(str(incident), plan().record_new(), strict=True) as run:
        assert handle("o-1") == {"refunded": False}
    assert LIVE == ["request_approval", "notify"]
    (unused,) = run.divergences()
    assert (unused.kind, unused.name, unused.index, unused.expected) == (
        "unused",
        "issue_refund",
        1,
        True,
    )
    episodes = run.episodes()
    assert episodes is not None
    assert episodes.added == ("request_approval#1", "notify#1")
    assert episodes.dropped == ("issue_refund#1",)
    assert names(incident) == [
        ("handle", None),
        ("billing", "handle"),
        ("lookup_order", "billing"),
        ("request_approval", "billing"),
        ("notify", "request_approval"),  # a new call inside a new call
    ]
    LIVE.clear()
    with chronicle.replay(str(incident), plan(), strict=True):
        assert handle("o-1") == {"refunded": False}
    assert LIVE == []


def test_a_recorded_call_whose_input_changed_is_still_a_divergence(incident: Path) -> None:
    recorded = Incident.read(incident)
    FIX.update({"approval", "bigger"})
    plan_ = plan().run("lookup_order", 1).record_new()  # the fixed lookup answers 4000
    with pytest.raises(ReplayDivergenceError, match="call 1 of 'issue_refund'"):
        with chronicle.replay(str(incident), plan_, strict=True):
            handle("o-1")
    assert Incident.read(incident) == recorded  # a diverged replay writes nothing

    plan_ = plan_.expect_change("issue_refund", 1)  # the fix declares it
    with chronicle.replay(str(incident), plan_, strict=True) as run:
        handle("o-1")
    (changed,) = run.divergences()
    assert (changed.kind, changed.expected) == ("input", True)
    rewritten = Incident.read(incident)
    refund = next(e for e in rewritten.envelopes if e.name == "issue_refund")
    assert refund.input is not None and refund.input.raw == {"order_id": "o-1", "amount": 3000}


def test_record_new_keeps_nothing_when_held_envelopes_are_replayed(incident: Path) -> None:
    FIX.add("approval")
    held = [e.model_dump(mode="json") for e in Incident.read(incident).envelopes]
    with chronicle.replay(held, plan().record_new()) as run:
        handle("o-1")
    episodes = run.episodes()
    assert episodes is not None and episodes.added == ("request_approval#1",)
    assert [e.name for e in episodes.envelopes][3] == "request_approval"
    with pytest.raises(ReplayError, match=r"records new calls .* and forks"):
        chronicle.replay(held, plan().record_new().override("issue_refund", 1, output={}))


# ---- the pytest plugin ------------------------------------------------------------------------

AGENT = """
import chronicle

FIXED = False


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id):
    return {"order_id": order_id, "amount": 3000}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id, amount):
    return {"status": "refunded"}


@chronicle.boundary("escalate", kind="tool")
def escalate(order_id, amount):
    return {"ticket": "esc-1"}


def handle(order_id):
    order = lookup_order(order_id)
    if FIXED:
        return escalate(order_id, order["amount"])  # instead of refunding
    return issue_refund(order_id, order["amount"])
"""

MARKED = """
import pytest

import agent


@pytest.mark.chronicle_replay("incidents/refund.json", record_mode="new_episodes")
def test_a_large_refund_is_escalated():
    assert agent.handle("o-1") == {"ticket": "esc-1"}
"""


def run_pytest(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return run_inline(project, "-p", "no:xdist", *args)


def test_the_marker_s_new_episodes_drops_and_adds_and_names_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(agent=AGENT, test_refund=MARKED)
    path = pytester.path / "incidents" / "refund.json"
    first = run_pytest(pytester)  # a missing file is recorded as once records it
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["wrote incidents/refund.json (2 calls; the test failed*"])
    assert names(path) == [("lookup_order", None), ("issue_refund", None)]

    pytester.makepyfile(agent=AGENT.replace("FIXED = False", "FIXED = True"))
    failing = textwrap.dedent(MARKED).replace('{"ticket": "esc-1"}', '{"ticket": "esc-2"}')
    pytester.makepyfile(test_refund=failing)
    kept = path.read_text()
    failed = run_pytest(pytester)
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*new_episodes: incidents/refund.json not rewritten: the test*"])
    assert path.read_text() == kept  # a failing test never rewrites the file

    pytester.makepyfile(test_refund=MARKED)
    fixed = run_pytest(pytester)
    fixed.assert_outcomes(passed=1)
    fixed.stdout.fnmatch_lines(
        ["rewrote incidents/refund.json (new_episodes: added escalate#1; dropped issue_refund#1)"]
    )
    assert names(path) == [("lookup_order", None), ("escalate", None)]
    assert json.loads(path.read_text())["metadata"]["outcome"] == "passed"

    again = run_pytest(pytester, "--chronicle-record-mode=none")  # the command line wins
    again.assert_outcomes(passed=1)
    assert "rewrote" not in again.stdout.str()


def test_a_record_mode_the_plugin_does_not_know_fails_the_test_saying_the_known_ones(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(agent=AGENT, test_refund=MARKED.replace("new_episodes", "new_episode"))
    result = run_pytest(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*record_mode is one of none, once, new_episodes, rewrite, all; got 'new_episode'*"]
    )
