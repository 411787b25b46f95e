"""One spelling of a call, accepted everywhere a call is named: ``"search#2"`` is ``("search", 2)``.

``chronicle show``, the call log, diffs and failure reports print ``name#n``; the same text names
that call in every ``ReplayPlan`` method, on the pytest marker, in ``chronicle replay``'s flags and
in ``ReplayRun.captured_result``. The rule: without ``n``, a ``#`` followed by digits at the end
of the name is the invocation; anything else is the name as written. So a boundary whose own name
holds ``#`` stays reachable: ``lookup#v2`` is a name (no digits after the ``#``), and a boundary
named ``step#2`` is called by its name with ``n`` given (``run("step#2", 1)``).

The agent: ``research`` searches twice, looks its topic up (``lookup#v2``) and takes a ``step#2``.
Recorded to the real control plane, then the world changes (the index is emptied), so a call that
runs live is told from one served from the recording.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.cli import main
from chronicle.replay.plan import ReplayPlan, call_target

pytest_plugins = ["pytester"]

INDEX: dict[str, list[str]] = {}
"""What ``search`` finds: filled for the recording, emptied after it."""
LIVE: list[str] = []
"""The boundaries whose code ran, in order."""


@chronicle.boundary("search", kind="tool")
def search(query: str) -> list[str]:
    LIVE.append("search")
    return list(INDEX.get(query, []))


@chronicle.boundary("lookup#v2", kind="tool")
def lookup(topic: str) -> str:
    LIVE.append("lookup#v2")
    return f"{topic}: {len(INDEX)} topics indexed"


@chronicle.boundary("step#2", kind="tool")
def step(summary: str) -> str:
    LIVE.append("step#2")
    return summary.upper() if INDEX else summary


@chronicle.boundary("research", kind="tool")
def research(topic: str) -> dict[str, Any]:
    hits = search(topic) + search(f"{topic} more")
    return {"hits": hits, "about": lookup(topic), "step": step(f"{topic} ({len(hits)} hits)")}


RECORDED = {"hits": ["a", "b"], "about": "refunds: 2 topics indexed", "step": "REFUNDS (2 HITS)"}


@pytest.fixture
def recorded(recording: Any) -> chronicle.Session:
    """``research("refunds")`` recorded; then the index is emptied."""
    INDEX.clear()
    INDEX.update({"refunds": ["a"], "refunds more": ["b"]})
    with chronicle.record("research") as session:
        assert research("refunds") == RECORDED
    recording.saved(session.trace_id, 5)
    INDEX.clear()
    LIVE.clear()
    return session


@pytest.fixture
def saved(
    recorded: chronicle.Session, recording: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The recording saved as an incident file with ``chronicle save``."""
    monkeypatch.setenv("CHRONICLE_CONTROL_PLANE_URL", recording.control_plane.url)
    path = tmp_path / "research.json"
    assert main(["save", recorded.trace_id, "-o", str(path)]) == 0
    return path


def modes(run: Any) -> list[tuple[str, int, str]]:
    return [(c.name, c.invocation_index, c.mode) for c in run.call_log()]


# ---- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "n", "names"),
    [
        ("search#2", None, ("search", 2)),
        ("http POST 127.0.0.1#1", None, ("http POST 127.0.0.1", 1)),
        ("billing/charge#3", None, ("billing/charge", 3)),
        ("search", None, ("search", None)),
        ("lookup#v2", None, ("lookup#v2", None)),  # no digits after '#': a name
        ("a#1b", None, ("a#1b", None)),
        ("#2", None, ("#2", None)),  # nothing before the '#': a name
        ("step#2", 1, ("step#2", 1)),  # n given: the name as written
        ("step#2#1", None, ("step#2", 1)),
    ],
)
def test_a_hash_and_digits_at_the_end_is_the_invocation_unless_n_is_given(given, n, names):
    assert call_target(given, n) == names


PLAN_METHODS: list[tuple[str, Callable[[ReplayPlan, str, int | None], ReplayPlan]]] = [
    ("stub", lambda p, name, n: p.stub(name, n)),
    ("run", lambda p, name, n: p.run(name, n)),
    ("run model=", lambda p, name, n: p.run(name, n, model="gpt-4o")),
    ("drive", lambda p, name, n: p.drive(name, n)),
    ("through", lambda p, name, n: p.through(name, n)),
    ("expect_change", lambda p, name, n: p.expect_change(name, n)),
    ("override", lambda p, name, n: p.override(name, n, output=[])),
    ("override error=", lambda p, name, n: p.override(name, n, error=TimeoutError("slow"))),
    ("live_after", lambda p, name, n: p.live_after(name, n)),
]


@pytest.mark.parametrize("method", [m for _, m in PLAN_METHODS], ids=[i for i, _ in PLAN_METHODS])
def test_every_plan_method_takes_name_hash_n_as_name_and_n(method):
    spelt = method(ReplayPlan(), "http POST 127.0.0.1#2", None)
    paired = method(ReplayPlan(), "http POST 127.0.0.1", 2)
    assert spelt.entries() == paired.entries()
    assert spelt.models == paired.models
    assert spelt.through_calls == paired.through_calls
    assert spelt.anchor == paired.anchor
    assert list(spelt.overrides) == list(paired.overrides)
    assert repr(spelt) == repr(paired)
    assert "127.0.0.1', 2" in repr(spelt)


def test_one_call_methods_say_both_spellings_when_n_is_missing():
    with pytest.raises(TypeError, match=r"override\('search', 1, \.\.\.\) or override\('search#1'"):
        ReplayPlan().override("search", output=[])
    with pytest.raises(TypeError, match=r"live_after\('search#1'\)"):
        ReplayPlan().live_after("search")
    with pytest.raises(ValueError, match="invocations count from 1; got n=0 for 'search'"):
        ReplayPlan().run("search#0")


# ---- a replay ------------------------------------------------------------------------------


def test_run_name_hash_n_runs_that_call_and_captured_result_reads_it(recorded):
    # search#2 runs live and finds nothing now, so step#2's input changes: expected, by name#n.
    plan = ReplayPlan().run("search#2").expect_change("step#2#1")
    with chronicle.replay_trace(recorded.trace_id, recorded.span_id, plan, strict=True) as run:
        assert research("refunds") == {**RECORDED, "hits": ["a"]}
    assert [(d.name, d.index, d.kind, d.diff, d.expected) for d in run.divergences()] == [
        ("step#2", 1, "input", 'summary: "refunds (2 hits)" -> "refunds (1 hits)"', True)
    ]
    assert LIVE == ["search"]
    assert modes(run) == [
        ("research", 1, "run"),
        ("search", 1, "stub"),
        ("search", 2, "run"),
        ("lookup#v2", 1, "stub"),
        ("step#2", 1, "stub"),
    ]
    assert run.captured_result("search#2") == run.captured_result("search", 2) == []
    assert run.captured_result("search#1") == run.captured_result("search") == ["a"]
    recorded_2 = run.recorded("search#2")
    assert recorded_2 is not None and recorded_2.output is not None
    assert recorded_2.output.raw == ["b"]
    with pytest.raises(KeyError, match="there was no call 3 of 'search'"):
        run.captured_result("search#3")


def test_override_and_live_after_take_the_printed_spelling(recorded):
    plan = ReplayPlan().override("search#1", output=["z"]).live_after("step#2", 1)
    with chronicle.replay_trace(recorded.trace_id, recorded.span_id, plan) as run:
        result = research("refunds")
    assert result == {**RECORDED, "hits": ["z", "b"], "step": "refunds (2 hits)"}
    assert modes(run) == [
        ("research", 1, "run"),
        ("search", 1, "override"),
        ("search", 2, "stub"),
        ("lookup#v2", 1, "stub"),
        ("step#2", 1, "live"),
    ]


def test_a_name_holding_a_hash_is_reachable(recorded):
    plan = ReplayPlan().run("lookup#v2").run("step#2", 1)
    with chronicle.replay_trace(recorded.trace_id, recorded.span_id, plan, strict=True) as run:
        assert research("refunds") == {
            "hits": ["a", "b"],
            "about": "refunds: 0 topics indexed",
            "step": "refunds (2 hits)",
        }
    assert LIVE == ["lookup#v2", "step#2"]
    assert run.captured_result("lookup#v2") == "refunds: 0 topics indexed"
    assert run.captured_result("step#2", 1) == "refunds (2 hits)"
    assert run.divergences() == []


def test_name_hash_digits_without_n_is_the_invocation_even_for_such_a_name(recorded):
    # ``run("step#2")`` is call 2 of ``step``, which nothing made: the strict replay says so.
    with (
        pytest.raises(chronicle.ReplayDivergenceError, match=r"run\('step', 2\) matched no call"),
        chronicle.replay_trace(
            recorded.trace_id, recorded.span_id, ReplayPlan().run("step#2"), strict=True
        ),
    ):
        research("refunds")


# ---- the marker ----------------------------------------------------------------------------

MARKER_TEST = """
import pytest

import chronicle
from tests.test_call_names import LIVE, RECORDED, research


def search_2_ran(run):
    assert research("refunds") == {**RECORDED, "hits": ["a"]}
    assert run.captured_result("search#2") == run.captured_result("search", 2) == []
    assert [(c.name, c.invocation_index, c.mode) for c in run.call_log()] == [
        ("research", 1, "run"),
        ("search", 1, "stub"),
        ("search", 2, "run"),
        ("lookup#v2", 1, "stub"),
        ("step#2", 1, "stub"),
    ]
    assert [(d.name, d.index, d.expected) for d in run.divergences()] == [("step#2", 1, True)]
    assert LIVE == ["search"]


@pytest.mark.chronicle_replay("research.json", run="search#2", expect_change=["step#2#1"])
def test_the_marker_takes_name_hash_n(chronicle_run):
    LIVE.clear()
    search_2_ran(chronicle_run)


@pytest.mark.chronicle_replay("research.json", run=[("search", 2)], expect_change=[("step#2", 1)])
def test_the_marker_takes_name_and_n(chronicle_run):
    LIVE.clear()
    search_2_ran(chronicle_run)


def test_the_fixture_takes_a_plan_of_name_hash_n(chronicle_replay):
    LIVE.clear()
    plan = chronicle.ReplayPlan().run("search#2").expect_change("step#2#1")
    with chronicle_replay("research.json", plan) as run:
        search_2_ran(run)


@pytest.mark.chronicle_replay("research.json", run=["lookup#v2", ("step#2", 1)])
def test_the_marker_reaches_names_holding_a_hash(chronicle_run):
    assert research("refunds")["about"] == "refunds: 0 topics indexed"
    assert LIVE[-2:] == ["lookup#v2", "step#2"]
"""


def test_the_marker_takes_both_spellings(saved, pytester, monkeypatch):
    (pytester.path / "research.json").write_text(saved.read_text("utf-8"), encoding="utf-8")
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_research=MARKER_TEST)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent.parent))
    # A pytest of its own: the test file imports this module afresh (tests.test_call_names),
    # a second copy whose clients must not outlive the run in this process.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=120)
    result.assert_outcomes(passed=4)


# ---- chronicle replay's flags --------------------------------------------------------------

ENTRY = f"{__name__}:research"
"""This module, as pytest imported it (so ``LIVE`` is the one the tests read)."""


def replay_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["replay", *args, "--entry", ENTRY, "--json"])
    return status, capsys.readouterr().out


def test_chronicle_replay_flags_take_name_hash_n(saved, capsys):
    status, out = replay_cli(str(saved), "--run", "search#2", "--run", "step#2#1", capsys=capsys)
    assert status == 0, out
    assert LIVE == ["search", "step#2"]
    (found,) = [json.loads(line) for line in out.splitlines()]
    assert found["outcome"] == "passed"
    assert found["live_output"]["hits"] == ["a"]  # search#2 ran, and found nothing now
    assert found["live_output"]["step"] == "refunds (1 hits)"
    assert sorted((c["name"], c["index"]) for c in found["cut_points"]) == [
        ("research", 1),  # the entry
        ("search", 2),
        ("step#2", 1),
    ]

    LIVE.clear()
    status, out = replay_cli(str(saved), "--override", 'search#1=["z"]', capsys=capsys)
    assert LIVE == []
    (found,) = [json.loads(line) for line in out.splitlines()]
    assert found["live_output"]["hits"] == ["z", "b"]


def test_chronicle_replay_run_reaches_a_name_holding_a_hash(saved, capsys):
    status, out = replay_cli(str(saved), "--run", "lookup#v2", capsys=capsys)
    assert status == 0, out
    assert LIVE == ["lookup#v2"]
