"""``python -m chronicle save``: from a recorded trace on the control plane to an incident file.

A trace of one span is saved with its trace id alone; a trace of several spans is listed (service,
start time, envelope count) until one is chosen with ``--span``, or all are kept with
``--all-spans`` as one incident, which the pytest plugin replays span by span.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from agentplane_primitives.utils import new_trace_id

import chronicle
from chronicle.cli import main
from chronicle.replay.incident import replay_incident
from chronicle.save.incident import Incident
from tests.support.inline import run_inline
from tests.support.recording import Recording

pytest_plugins = ["pytester"]


@chronicle.boundary("quote", kind="tool")
def quote(item: str) -> dict[str, Any]:
    return {"item": item, "price": 12}


@chronicle.boundary("charge", kind="tool")
def charge(amount: int) -> dict[str, Any]:
    return {"charged": amount}


@chronicle.boundary("call_billing", kind="tool")
def call_billing(amount: int) -> dict[str, Any]:
    """Stands in for an HTTP call to the billing service, which handles it in a span of its own."""
    with chronicle.span(service="billing"):
        return charge(amount)


@pytest.fixture
def cli_env(recording, monkeypatch):
    monkeypatch.setenv("CHRONICLE_CONTROL_PLANE_URL", recording.control_plane.url)
    return recording


def checkout(recording: Recording) -> chronicle.Session:
    """One request across two services: frontend (quote, call_billing) and billing (charge)."""
    with chronicle.record("checkout", service="frontend") as session:
        call_billing(quote("book")["price"])
    recording.saved(session.trace_id, 3)
    return session


def test_a_trace_of_one_span_is_saved_without_a_span_id(cli_env, tmp_path, capsys):
    with chronicle.record("one") as session:
        quote("pen")
    cli_env.saved(session.trace_id, 1)
    out = tmp_path / "incidents" / "one.json"
    assert main(["save", session.trace_id, "-o", str(out)]) == 0
    assert f"saved 1 envelope of span unknown_service {session.span_id}" in capsys.readouterr().out
    incident = Incident.read(out)
    assert [s.span_id for s in incident.spans] == [session.span_id]
    assert [e.name for e in incident.envelopes] == ["quote"]
    with chronicle.replay(out) as run:
        assert quote("anything") == {"item": "pen", "price": 12}
    assert [c.mode for c in run.call_log()] == ["stub"]


def test_a_trace_of_several_spans_lists_them_and_asks_for_one(cli_env, tmp_path, capsys):
    session = checkout(cli_env)
    trace = cli_env.control_plane.trace(session.trace_id)
    billing = next(s["span_id"] for s in trace["spans"] if s["service"] == "billing")
    out = tmp_path / "checkout.json"
    assert main(["save", session.trace_id, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "has 2 spans with envelopes; save one with --span SPAN_ID" in err
    assert "--all-spans" in err
    lines = err.splitlines()
    assert lines[1].split() == ["SPAN_ID", "SERVICE", "STARTED", "(UTC)", "ENVELOPES"]
    frontend_line, billing_line = lines[2].split(), lines[3].split()
    assert (frontend_line[0], frontend_line[1], frontend_line[-1]) == (
        session.span_id,
        "frontend",
        "2",
    )
    assert (billing_line[0], billing_line[1], billing_line[-1]) == (billing, "billing", "1")
    assert not out.exists()

    assert main(["save", session.trace_id, "--span", billing, "-o", str(out)]) == 0
    chosen = Incident.read(out)
    assert [(s.span_id, s.service) for s in chosen.spans] == [(billing, "billing")]
    assert [e.name for e in chosen.envelopes] == ["charge"]


def test_all_spans_saves_the_trace_as_one_incident(cli_env, tmp_path):
    session = checkout(cli_env)
    out = tmp_path / "checkout.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chronicle",
            "save",
            session.trace_id,
            "--all-spans",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(out.read_text(encoding="utf-8"))
    assert [s["service"] for s in body["spans"]] == ["frontend", "billing"]
    assert [e["name"] for e in body["envelopes"]] == ["quote", "call_billing", "charge"]
    call_billing_id = body["envelopes"][1]["envelope_id"]
    assert body["spans"][1]["parent_envelope_id"] == call_billing_id


def test_the_old_form_and_the_errors_say_what_to_check(cli_env, tmp_path, capsys):
    session = checkout(cli_env)
    out = tmp_path / "x.json"
    assert main(["save", session.trace_id, session.span_id, "-o", str(out)]) == 0
    assert [e.name for e in Incident.read(out).envelopes] == ["quote", "call_billing"]
    unknown = new_trace_id()  # the control plane is shared: an id nobody else used
    assert main(["save", unknown, "-o", str(out)]) == 1
    assert f"trace {unknown} is not on the control plane" in capsys.readouterr().err
    assert main(["save", session.trace_id, "--span", "00f067aa0ba902b7", "-o", str(out)]) == 1
    assert "has no span 00f067aa0ba902b7; its spans: " in capsys.readouterr().err
    assert main(["save", session.trace_id, session.span_id, "--all-spans", "-o", str(out)]) == 2
    assert "--all-spans saves every span; leave out the span id" in capsys.readouterr().err


MULTI_SERVICE_TEST = """
import pytest
from agentplane_primitives.utils import new_trace_id

import chronicle

CHARGED = []


@chronicle.boundary("quote", kind="tool")
def quote(item):
    raise AssertionError("stubbed from the frontend's span")


@chronicle.boundary("charge", kind="tool")
def charge(amount):
    CHARGED.append(amount)
    return {"charged": amount}


@chronicle.boundary("call_billing", kind="tool")
def call_billing(amount):
    with chronicle.span(service="billing"):
        return charge(amount)


@pytest.mark.chronicle_replay("checkout.json", run=["call_billing"])
def test_each_service_is_served_from_its_own_span(chronicle_run):
    assert call_billing(quote("book")["price"]) == {"charged": 12}
    assert CHARGED == []  # billing's charge came from billing's recorded span
    assert [(c.name, c.mode) for c in chronicle_run.run_of("frontend").call_log()] == [
        ("quote", "stub"), ("call_billing", "run")
    ]
    assert [(c.name, c.mode) for c in chronicle_run.run_of("billing").call_log()] == [
        ("charge", "stub")
    ]
"""


def test_a_multi_service_incident_replays_each_services_span(cli_env, pytester):
    session = checkout(cli_env)
    assert (
        main(["save", session.trace_id, "--all-spans", "-o", str(pytester.path / "checkout.json")])
        == 0
    )
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_checkout=MULTI_SERVICE_TEST)
    result = run_inline(pytester, "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*= chronicle =*",
            "test_checkout.py::test_each_service_is_served_from_its_own_span",
            "call log (replayed checkout.json):",
            f"span {session.span_id} (frontend):",
            "    quote#1 stub",
            "    call_billing#1 run",
            "span * (billing):",
            "    charge#1 stub",
        ]
    )


def test_a_multi_service_replay_reports_divergences_across_its_spans(cli_env, tmp_path):
    session = checkout(cli_env)
    out = tmp_path / "checkout.json"
    assert main(["save", session.trace_id, "--all-spans", "-o", str(out)]) == 0
    incident = Incident.read(out)
    # One plan for every span: "charge" is billing's, and matches there.
    plan = chronicle.ReplayPlan().run("call_billing").stub("charge")
    with replay_incident(incident, plan) as changed:
        call_billing(quote("book")["price"] + 1)  # billing is now asked for 13, not 12
    assert [(d.name, d.kind, d.diff) for d in changed.divergences()] == [
        ("charge", "input", "amount: 12 -> 13")
    ]
    # With the call to billing stubbed, billing's code never runs: its recording is not unused.
    with replay_incident(incident, strict=True) as same:
        call_billing(quote("book")["price"])
    assert same.divergences() == []
    with (
        pytest.raises(chronicle.ReplayDivergenceError, match=r"run\('call_bill'\) matched"),
        replay_incident(incident, chronicle.ReplayPlan().run("call_bill"), strict=True),
    ):
        call_billing(quote("book")["price"])
