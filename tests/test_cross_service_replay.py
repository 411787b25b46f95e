"""One incident replayed across two services: the replay travels with the let-through request.

Two real services: ``support`` (this process, an ASGI app behind ``ChronicleMiddleware`` served
by uvicorn in a thread) asks ``billing`` (``tests/support/billing_service.py``, a process of its
own, also behind ``ChronicleMiddleware`` with ``instrument_httpx``) to refund an order over HTTP.
Both record into the session's real control plane: one trace, two spans. The incident: support's
planner asked for 980000 cents on a 4700-cent order and billing's ``charge`` paid it.

The tests replay support's span from support's side with the call to billing let through
(``ReplayPlan().through("billing")``) to a billing process started with the code under test,
``charge`` as the cut-point there.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import chronicle
from chronicle.errors import ReplayRefusedError
from chronicle.integrations import propagation
from chronicle.replay import remote, travel
from chronicle.replay.calllog import LoggedCall
from chronicle.replay.run import merge_remote
from chronicle.save.client import HttpControlPlane
from chronicle.save.incident import Incident as SavedIncident
from chronicle.save.incident import read_incident
from chronicle.testing import LocalControlPlane
from tests.support.agents import AppServer
from tests.support.stored import stored
from tests.support.workers import one_worker

pytestmark = one_worker("cross-service")

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-replay-token-0123456789"
MESSAGE = "Please refund my $47 blender, ORD-1."
HTTP = "http POST 127.0.0.1"


# ---- the two services --------------------------------------------------------------------------


@chronicle.boundary("plan_refund", kind="tool")
def plan_refund(message: str) -> dict[str, Any]:
    """Support's planner (the recorded decision: far too much)."""
    return {"order_id": "ORD-1", "amount_cents": 980_000}


@chronicle.boundary("tell_customer", kind="tool")
def tell_customer(result: dict[str, Any]) -> str:
    if result.get("blocked"):
        return "Your refund needs a human to look at it."
    return f"Refunded {result.get('charged_cents')} cents."


def support(billing_url: str, message: str) -> str:
    """Support's handler logic: plan the refund, ask billing, tell the customer."""
    decision = plan_refund(message)
    reply = httpx.post(f"{billing_url}/refund", json=decision, timeout=30)
    reply.raise_for_status()
    return tell_customer(reply.json()["result"])


@chronicle.boundary("lookup_order", kind="tool")
def support_lookup_order(order_id: str) -> dict[str, Any]:
    """Support's own ``lookup_order`` (its CRM's view), named as billing's is."""
    return {"order_id": order_id, "customer": "Ada", "channel": "chat"}


def support_checking(billing_url: str, message: str) -> str:
    """Support's handler with a look at its own order record first: a ``lookup_order`` in both
    services."""
    decision = plan_refund(message)
    support_lookup_order(decision["order_id"])
    reply = httpx.post(f"{billing_url}/refund", json=decision, timeout=30)
    reply.raise_for_status()
    return tell_customer(reply.json()["result"])


def support_app(
    billing_url: str, handler: Callable[[str, str], str] = support
) -> chronicle.ChronicleMiddleware:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        session = chronicle.current_session()
        answer = await asyncio.to_thread(handler, billing_url, body["message"])
        assert session is not None
        return JSONResponse(
            {"answer": answer, "trace_id": session.trace_id, "span_id": session.span_id}
        )

    app = Starlette(routes=[Route("/chat", chat, methods=["POST"])])
    return chronicle.ChronicleMiddleware(app, service="support")


class Billing:
    """The billing service in a process of its own (``tests/support/billing_service.py``)."""

    def __init__(
        self, control_plane: LocalControlPlane, ledger: Path, *, variant: str, **settings: str
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        env.update(
            CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
            CHRONICLE_SERVICE_NAME="billing",
            CHRONICLE_FLUSH_INTERVAL="0.05",
            CHRONICLE_INJECT_HOSTS="127.0.0.1",
            BILLING_VARIANT=variant,
            BILLING_LEDGER=str(ledger),
            PYTHONPATH=str(ROOT),
        )
        env.update({f"CHRONICLE_{k.upper()}": v for k, v in settings.items()})
        self._env = env
        self.ledger = ledger
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> Billing:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.billing_service"],
            cwd=ROOT,
            env=self._env,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._process = process
        assert process.stdout is not None
        line = process.stdout.readline()  # "listening on <port>", or "" if it died
        if not line.startswith("listening on "):
            process.kill()
            raise RuntimeError(f"the billing service did not start (it said {line!r})")
        self.url = f"http://127.0.0.1:{int(line.split()[-1])}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(15)
            if self._process.stdout is not None:
                self._process.stdout.close()

    def charges(self) -> list[str]:
        """What live charges wrote to the ledger."""
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []


def fixed_billing(
    control_plane: LocalControlPlane, tmp_path: Path, variant: str = "fixed", token: str = TOKEN
) -> Billing:
    """Billing (with the fix, or another ``variant``) accepting replays signed with ``token``."""
    return Billing(
        control_plane,
        tmp_path / "ledger.txt",
        variant=variant,
        accept_replay="true",
        replay_token=token,
    )


def the_fix(*through: Any) -> chronicle.ReplayPlan:
    """The plan that proves the fix in billing: the call let through (``through``), billing's
    ``charge`` tool run live (the cut-point in billing's span), and the customer's message
    expected to change (it now reads the refusal: the fix, on purpose)."""
    return (
        chronicle.ReplayPlan().through(*through).run("charge", 1).expect_change("tell_customer", 1)
    )


def configure(control_plane: LocalControlPlane, **settings: Any) -> None:
    chronicle.configure(
        control_plane_url=control_plane.url,
        service_name="support",
        flush_interval=0.05,
        inject_hosts=["127.0.0.1"],
        **settings,
    )
    chronicle.instrument_httpx()


@dataclass(frozen=True)
class Incident:
    trace_id: str
    support_span: str
    billing_span: str


def record_incident(
    control_plane: LocalControlPlane, ledger: Path, handler: Callable[[str, str], str] = support
) -> Incident:
    """Record the incident: support (this process, running ``handler``) asks the buggy billing
    (its own process) to refund 980000 cents on a 4700-cent order, and billing pays it."""
    chronicle.reset()
    configure(control_plane)
    support_calls = 4 if handler is support_checking else 3
    try:
        with Billing(control_plane, ledger, variant="buggy") as billing:
            with AppServer(support_app(billing.url, handler)) as server:
                # The customer's request, sent with urllib: not an httpx call this process
                # records (127.0.0.1 is in inject_hosts), so support's span is the trace's root.
                request = urllib.request.Request(
                    f"{server.url}/chat",
                    data=json.dumps({"message": MESSAGE}).encode(),
                    headers={"content-type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=30) as answer:
                    body = json.loads(answer.read())
            assert body["answer"] == "Refunded 980000 cents."
            assert billing.charges() == ["ORD-1 980000"]
            assert chronicle.flush(10)
            # support: plan_refund, the HTTP call, tell_customer; billing: lookup_order, charge
            control_plane.wait_for_envelopes(body["trace_id"], support_calls + 2)
    finally:
        chronicle.uninstrument_httpx()
        chronicle.reset()
    trace = control_plane.trace(body["trace_id"])
    assert trace is not None
    spans = {span["service"]: span["span_id"] for span in trace["spans"]}
    assert sorted(span["service"] for span in trace["spans"]) == ["billing", "support"]
    assert len(control_plane.trace_envelopes(body["trace_id"])) == support_calls + 2
    return Incident(body["trace_id"], spans["support"], spans["billing"])


@pytest.fixture(scope="module")
def incident(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Incident:
    """The incident, recorded once."""
    return record_incident(control_plane, tmp_path_factory.mktemp("recording") / "ledger.txt")


@pytest.fixture(scope="module")
def checking_incident(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Incident:
    """The incident with support's own ``lookup_order`` first (a name both services have)."""
    ledger = tmp_path_factory.mktemp("recording") / "ledger.txt"
    return record_incident(control_plane, ledger, support_checking)


@pytest.fixture
def replaying(control_plane: LocalControlPlane) -> Iterator[None]:
    """Support configured as the caller of a cross-service replay (the shared token)."""
    configure(control_plane, replay_token=TOKEN)
    try:
        yield
    finally:
        chronicle.uninstrument_httpx()
        chronicle.reset()


def calls(run: chronicle.ReplayRun) -> list[tuple[str | None, str, int, str]]:
    return [(c.service, c.name, c.invocation_index, c.mode) for c in run.call_log()]


def settled(control_plane: LocalControlPlane, incident: Incident) -> dict[str, Any]:
    """What the control plane holds (tests/support/stored.py: every trace's summary, the
    incident's trace in full), once both processes' delivery had time to send anything."""
    time.sleep(0.5)  # flush_interval is 0.05 s on both sides
    return stored(control_plane, incident.trace_id)


# ---- the replay across both services -----------------------------------------------------------


@pytest.mark.parametrize(
    "through",
    [("billing", None), (HTTP, 1)],
    ids=["by-service", "by-boundary"],
)
def test_the_incident_replays_across_both_services_with_the_fix_live_in_billing(
    incident: Incident,
    control_plane: LocalControlPlane,
    replaying: None,
    tmp_path: Path,
    through: tuple[str, int | None],
) -> None:
    before = settled(control_plane, incident)
    plan = the_fix(*through)  # billing's service name, or the one HTTP call
    with fixed_billing(control_plane, tmp_path) as billing:
        with chronicle.replay_trace(
            incident.trace_id, incident.support_span, plan, strict=True
        ) as run:
            answer = support(billing.url, MESSAGE)
        assert billing.charges() == []  # the fixed charge ran live, and refused
    # tell_customer is stubbed (its recorded text comes back), but it was told of the refusal.
    assert answer == "Refunded 980000 cents."
    assert run.captured_input("tell_customer", 1)["result"] == {
        "blocked": True,
        "reason": "980000 is over the order's 4700",
    }
    # One call log, both services, in the order the calls happened.
    assert calls(run) == [
        ("support", "plan_refund", 1, "stub"),
        ("support", HTTP, 1, "run"),
        ("billing", "lookup_order", 1, "stub"),
        ("billing", "charge", 1, "run"),
        ("support", "tell_customer", 1, "stub"),
    ]
    # What billing's live charge returned reached support through the real HTTP answer.
    response = run.captured_result(HTTP, 1)
    assert isinstance(response, httpx.Response)
    assert response.json()["result"]["blocked"] is True
    assert [(d.service, d.name, d.kind, d.expected) for d in run.divergences()] == [
        (None, "tell_customer", "input", True)
    ]
    assert settled(control_plane, incident) == before  # nothing written by either service


def test_the_caller_reads_the_calls_billing_made_by_their_names(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    with fixed_billing(control_plane, tmp_path) as billing:
        with chronicle.replay_trace(
            incident.trace_id, incident.support_span, the_fix("billing"), strict=True
        ) as run:
            support(billing.url, MESSAGE)
    refused = {"blocked": True, "reason": "980000 is over the order's 4700"}
    # billing's live charge: what it was asked and what it returned, read in support's test.
    assert run.captured_input("charge", 1) == {
        "order_id": "ORD-1",
        "amount_cents": 980_000,
        "total_cents": 4_700,
    }
    assert run.captured_result("charge", 1) == refused
    assert run.captured_result("billing/charge", 1) == refused  # qualified: the same call
    # billing's stubbed lookup returned its recording.
    assert run.captured_result("lookup_order", 1) == {"order_id": "ORD-1", "total_cents": 4_700}
    with pytest.raises(KeyError) as missing:
        run.captured_result("charge", 2)
    assert "charge#1" in str(missing.value) and "lookup_order#1" in str(missing.value)


def test_a_name_both_services_have_is_the_callers_own_and_service_slash_name_is_the_services(
    checking_incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    with fixed_billing(control_plane, tmp_path) as billing:
        with chronicle.replay_trace(
            checking_incident.trace_id,
            checking_incident.support_span,
            the_fix("billing"),
            strict=True,
        ) as run:
            support_checking(billing.url, MESSAGE)
    assert calls(run) == [
        ("support", "plan_refund", 1, "stub"),
        ("support", "lookup_order", 1, "stub"),
        ("support", HTTP, 1, "run"),
        ("billing", "billing/lookup_order", 1, "stub"),
        ("billing", "charge", 1, "run"),
        ("support", "tell_customer", 1, "stub"),
    ]
    assert run.captured_result("lookup_order", 1) == {
        "order_id": "ORD-1",
        "customer": "Ada",
        "channel": "chat",
    }
    assert run.captured_result("billing/lookup_order", 1) == {
        "order_id": "ORD-1",
        "total_cents": 4_700,
    }
    # Every name the call log shows reaches its call.
    for call in run.call_log():
        run.captured_input(call.name, call.invocation_index)


def test_a_divergence_in_a_name_both_services_have_names_the_service_and_its_advice_works(
    checking_incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    trace, span = checking_incident.trace_id, checking_incident.support_span
    with fixed_billing(control_plane, tmp_path, "changed") as billing:
        with pytest.raises(chronicle.ReplayDivergenceError) as raised:
            with chronicle.replay_trace(trace, span, the_fix("billing"), strict=True):
                support_checking(billing.url, MESSAGE)
    (found,) = raised.value.divergences
    assert (found.service, found.name, found.kind) == ("billing", "billing/lookup_order", "input")
    assert "ReplayPlan().expect_change('billing/lookup_order', 1)" in str(raised.value)
    # The advice, followed: the entry applies in billing only, and the replay passes.
    plan = the_fix("billing").expect_change("billing/lookup_order", 1)
    with fixed_billing(control_plane, tmp_path, "changed") as billing:
        with chronicle.replay_trace(trace, span, plan, strict=True) as run:
            support_checking(billing.url, MESSAGE)
    assert [(d.service, d.name, d.kind, d.expected) for d in run.divergences()] == [
        ("billing", "billing/lookup_order", "input", True),
        (None, "tell_customer", "input", True),
    ]
    assert run.captured_input("billing/lookup_order", 1) == {"order_id": "ord-1"}


def test_a_changed_input_in_billing_fails_the_callers_strict_replay(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    plan = chronicle.ReplayPlan().through("billing").run("charge", 1).expect_change("tell_customer")
    with fixed_billing(control_plane, tmp_path, "changed") as billing:
        with pytest.raises(chronicle.ReplayDivergenceError) as raised:
            with chronicle.replay_trace(
                incident.trace_id, incident.support_span, plan, strict=True
            ):
                support(billing.url, MESSAGE)
    (found,) = raised.value.divergences
    assert (found.service, found.name, found.index, found.kind) == (
        "billing",
        "lookup_order",
        1,
        "input",
    )
    assert 'order_id: "ORD-1" -> "ord-1"' in str(raised.value)
    assert "in billing: the input of call 1 of 'lookup_order'" in str(raised.value)


def test_an_error_in_the_services_replay_reaches_the_callers_test(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    plan = chronicle.ReplayPlan().through("billing").run("charge", 1)
    with fixed_billing(control_plane, tmp_path, "extra") as billing:
        with pytest.raises(chronicle.ReplayError) as raised:
            with chronicle.replay_trace(incident.trace_id, incident.support_span, plan) as run:
                support(billing.url, MESSAGE)
    message = str(raised.value)
    assert message.startswith("replay: billing could not replay its span for http POST")
    assert "ReplayMismatchError" in message and "'lookup_order'" in message
    assert ("billing", "lookup_order", 2, "stub") in calls(run)  # the call that had none
    assert billing.charges() == []


def test_a_service_with_accept_replay_off_ignores_the_replay_and_runs_normally(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    plan = chronicle.ReplayPlan().through("billing").run("charge", 1)
    before = settled(control_plane, incident)
    with Billing(
        control_plane, tmp_path / "ledger.txt", variant="buggy", replay_token=TOKEN
    ) as billing:
        with pytest.raises(chronicle.ReplayError, match="answered without a replay report"):
            with chronicle.replay_trace(incident.trace_id, incident.support_span, plan):
                support(billing.url, MESSAGE)
        # The header changed nothing for billing: it ran the request live, as any request,
        # and recorded it as a trace of its own (not into the replayed one).
        assert billing.charges() == ["ORD-1 980000"]
    after = settled(control_plane, incident)
    assert after["traces"] == before["traces"]  # the replayed trace is as it was
    (new,) = {t["trace_id"] for t in after["summaries"]} - {
        t["trace_id"] for t in before["summaries"]
    }
    held = control_plane.trace(new)
    assert held is not None and [s["service"] for s in held["spans"]] == ["billing"]


def test_a_wrong_token_is_refused_with_a_clear_error_and_nothing_runs(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    plan = chronicle.ReplayPlan().through("billing").run("charge", 1)
    with fixed_billing(control_plane, tmp_path, "buggy", token="another-token") as billing:
        with pytest.raises(ReplayRefusedError) as raised:
            with chronicle.replay_trace(incident.trace_id, incident.support_span, plan):
                support(billing.url, MESSAGE)
        assert "set the same CHRONICLE_REPLAY_TOKEN" in str(raised.value)
        # Sent by hand (no Chronicle on this side), the answer says the same with a 403.
        forged = travel.Descriptor(
            incident.trace_id,
            incident.billing_span,
            "0" * 16,
            (),
            (),
            False,
            "order",
            (),
            "n" * 32,
            time.time() + 60,
            None,
        ).encode("a-guess")
        answer = httpx.post(
            f"{billing.url}/refund",
            json={"order_id": "ORD-1", "amount_cents": 1},
            headers={travel.HEADER: forged},
        )
        assert answer.status_code == 403
        assert "CHRONICLE_REPLAY_TOKEN" in answer.json()["error"]
        assert billing.charges() == []  # refused: the handler never ran


def test_a_let_through_call_that_cannot_carry_the_replay_fails_before_it_is_sent(
    incident: Incident, control_plane: LocalControlPlane
) -> None:
    plan = chronicle.ReplayPlan().through("billing")
    configure(control_plane)  # no replay_token
    try:
        with pytest.raises(chronicle.ReplayError, match="set CHRONICLE_REPLAY_TOKEN"):
            with chronicle.replay_trace(incident.trace_id, incident.support_span, plan):
                support("http://127.0.0.1:9", MESSAGE)  # nothing listens: nothing was sent
        chronicle.configure(
            control_plane_url=control_plane.url,
            inject_hosts=["billing.internal"],
            replay_token=TOKEN,
        )
        with pytest.raises(chronicle.ReplayError, match="not in inject_hosts"):
            with chronicle.replay_trace(incident.trace_id, incident.support_span, plan):
                support("http://127.0.0.1:9", MESSAGE)
    finally:
        chronicle.uninstrument_httpx()
        chronicle.reset()


# ---- the service side in process: span(headers), the header, the report ----------------------


def signed(incident: Incident, entries: tuple[travel.Entry, ...], **changes: Any) -> str:
    """A replay of billing's span as a caller would sign it."""
    fields: dict[str, Any] = {
        "trace_id": incident.trace_id,
        "span_id": incident.billing_span,
        "parent_envelope_id": "0" * 16,
        "entries": entries,
        "models": (),
        "strict": True,
        "match": "order",
        "ignore": (),
        "nonce": os.urandom(16).hex(),
        "expires": time.time() + 60,
        "caller": "support",
    }
    fields.update(changes)
    return travel.Descriptor(**fields).encode(changes.pop("token", TOKEN))


@pytest.fixture
def billing_service(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """Billing's code in this process (``tests/support/billing_service.py``), the fixed variant,
    its ledger ``tmp_path / "ledger.txt"``."""
    from tests.support import billing_service

    monkeypatch.setenv("BILLING_VARIANT", "fixed")
    monkeypatch.setenv("BILLING_LEDGER", str(tmp_path / "ledger.txt"))
    return billing_service


def test_span_headers_serves_the_replay_only_when_the_service_accepts_it(
    incident: Incident,
    control_plane: LocalControlPlane,
    billing_service: ModuleType,
    tmp_path: Path,
) -> None:
    headers = {"Chronicle-Replay": signed(incident, (("billing/charge", 1, "run"),))}
    chronicle.configure(control_plane_url=control_plane.url, replay_token=TOKEN)
    assert isinstance(propagation.span(headers), chronicle.span(None).__class__)  # off: ignored
    chronicle.configure(control_plane_url=control_plane.url, replay_token=TOKEN, accept_replay=True)
    before = settled(control_plane, incident)
    served = propagation.span(headers, service="billing")
    assert isinstance(served, remote.ServedReplay)
    with served as session:
        assert (session.trace_id, session.span_id) == (incident.trace_id, incident.billing_span)
        result = billing_service.refund("ORD-1", 980_000)
    assert result == {"blocked": True, "reason": "980000 is over the order's 4700"}
    report = travel.read_report(served.response_headers()[travel.REPORT_HEADER], "billing")
    assert report.calls == (("lookup_order", 1, "stub", 1), ("charge", 1, "run", 1))
    assert report.matched == (("billing/charge", 1, "run"),)
    assert (report.divergences, report.error) == ((), None)
    assert not (tmp_path / "ledger.txt").exists()
    assert settled(control_plane, incident) == before
    # The same signed replay twice: a captured header is served once.
    with pytest.raises(ReplayRefusedError, match="already served once"):
        propagation.span(headers)


@pytest.mark.parametrize(
    ("token", "value", "status", "says"),
    [
        (None, "v1.e30.AAAA", 403, "set CHRONICLE_REPLAY_TOKEN"),
        (TOKEN, "not a replay", 400, "is not a replay this service reads"),
        (TOKEN, "v1.e30.AAAA", 403, "signature does not verify"),
    ],
)
def test_a_replay_that_does_not_verify_is_refused_saying_what_to_set(
    token: str | None, value: str, status: int, says: str
) -> None:
    with pytest.raises(ReplayRefusedError, match=says) as raised:
        travel.decode(value, token)
    assert raised.value.status == status


def test_an_expired_replay_is_refused(incident: Incident) -> None:
    value = signed(incident, (), expires=time.time() - 10)
    with pytest.raises(ReplayRefusedError, match="expired 10 s ago"):
        travel.decode(value, TOKEN)


def test_the_report_stays_within_its_bound_and_never_hides_a_divergence() -> None:
    from chronicle.replay.divergence import Divergence

    found = tuple(
        Divergence("step", n, "input", "x" * 5_000, expected=n % 2 == 0, call=n)
        for n in range(1, 400)
    )
    calls = tuple(("step", n, "stub", n) for n in range(1, 5_000))
    report = travel.Report("billing", "1" * 16, calls, found, (), None)
    value = travel.write_report(report)
    assert len(value) <= travel.MAX_REPORT_BYTES
    read = travel.read_report(value, "billing")
    assert read.calls == ()
    assert read.divergences and not read.divergences[0].expected  # unexpected ones kept first
    assert "more left out of the report" in read.divergences[-1].diff
    assert read.omitted == len(calls) + len(found) - len(read.divergences)


def test_the_report_leaves_out_the_largest_values_first_and_the_caller_says_so() -> None:
    calls = (("summarize", 1, "run", 1), ("charge", 1, "stub", 1))
    report = travel.Report(
        "billing",
        "1" * 16,
        calls,
        (),
        (),
        None,
        inputs={("summarize", 1): {"text": "x" * 20_000}, ("charge", 1): {"amount_cents": 5}},
        results={("summarize", 1): "y" * 20_000, ("charge", 1): {"charged_cents": 5}},
    )
    value = travel.write_report(report)
    assert len(value) <= travel.MAX_REPORT_BYTES
    read = travel.read_report(value, "billing")
    assert read.calls == calls  # the call log is whole: only the large values went
    assert read.inputs == {("charge", 1): {"amount_cents": 5}}
    assert read.results == {("charge", 1): {"charged_cents": 5}}
    assert read.values_left_out
    run = chronicle.ReplayRun([], chronicle.ReplayPlan())
    merge_remote(
        run,
        "billing",
        [LoggedCall(n, i, m, r, "billing") for n, i, m, r in read.calls],  # type: ignore[arg-type]
        (),
        (),
        read.inputs,
        read.results,
        values_left_out=read.values_left_out,
    )
    assert run.captured_result("charge", 1) == {"charged_cents": 5}
    with pytest.raises(KeyError, match="report left its values out"):
        run.captured_result("summarize", 1)


def test_a_service_reads_its_span_from_an_incident_file_of_every_span(
    incident: Incident,
    control_plane: LocalControlPlane,
    billing_service: ModuleType,
    tmp_path: Path,
) -> None:
    path = tmp_path / "incident.json"
    with closing(HttpControlPlane(control_plane.url, None, 10.0)) as client:
        saved = read_incident(client, incident.trace_id, all_spans=True)
    assert isinstance(saved, SavedIncident)
    saved.write(path)
    (call,) = [
        e
        for e in control_plane.span_envelopes(incident.trace_id, incident.support_span)
        if e["name"] == HTTP
    ]
    # No control plane on this side: the span is found in the file by the caller's call.
    chronicle.configure(accept_replay=True, replay_token=TOKEN, replay_incident=str(path))
    value = signed(
        incident, (("charge", 1, "run"),), span_id=None, parent_envelope_id=call["envelope_id"]
    )
    served = propagation.span({travel.HEADER: value})
    assert isinstance(served, remote.ServedReplay)
    with served as session:
        assert session.span_id == incident.billing_span
        assert billing_service.refund("ORD-1", 980_000)["blocked"] is True
    report = travel.read_report(served.response_headers()[travel.REPORT_HEADER], "billing")
    assert (report.service, report.calls) == (
        "billing",
        (("lookup_order", 1, "stub", 1), ("charge", 1, "run", 1)),
    )
    chronicle.configure(
        accept_replay=True, replay_token=TOKEN, replay_incident=str(tmp_path / "missing.json")
    )
    with pytest.raises(chronicle.ReplayError, match="--all-spans"):
        propagation.span({travel.HEADER: signed(incident, ())})


def test_a_span_the_service_cannot_read_is_answered_409_with_the_reason_in_the_report(
    incident: Incident, control_plane: LocalControlPlane
) -> None:
    from starlette.testclient import TestClient

    from tests.support import billing_service

    chronicle.configure(control_plane_url=control_plane.url, accept_replay=True, replay_token=TOKEN)
    unknown = signed(incident, (), trace_id="f" * 32, span_id="e" * 16)
    with TestClient(billing_service.app()) as client:
        answer = client.post(
            "/refund",
            json={"order_id": "ORD-1", "amount_cents": 1},
            headers={travel.HEADER: unknown},
        )
    assert answer.status_code == 409
    report = travel.read_report(answer.headers[travel.REPORT_HEADER], "billing")
    assert report.error is not None and f"span {'e' * 16} of trace {'f' * 32}" in report.error
    assert report.calls == ()


def test_a_recorded_replay_records_both_services_into_one_new_trace(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    plan = the_fix("billing")
    with fixed_billing(control_plane, tmp_path) as billing:
        with chronicle.replay_trace(
            incident.trace_id, incident.support_span, plan, strict=True, record=True
        ) as run:
            support(billing.url, MESSAGE)
        assert chronicle.flush(10)
        assert run.new_trace_id is not None
        # support: plan_refund, the HTTP call, tell_customer; billing: lookup_order, charge
        saved = control_plane.wait_for_envelopes(run.new_trace_id, 5)
    trace = control_plane.trace(run.new_trace_id)
    assert trace is not None
    spans = {span["service"]: span for span in trace["spans"]}
    assert set(spans) == {"support", "billing"}
    by_id = {e["envelope_id"]: e for e in saved}
    call = by_id[spans["billing"]["parent_envelope_id"]]  # billing's span hangs on the call
    assert (call["name"], call["span_id"]) == (HTTP, spans["support"]["span_id"])
    assert spans["billing"]["metadata"]["chronicle.replay_of"] == {
        "trace_id": incident.trace_id,
        "span_id": incident.billing_span,
    }
    billing_calls = [e for e in saved if e["span_id"] == spans["billing"]["span_id"]]
    charged = next(e for e in billing_calls if e["name"] == "charge")
    assert charged["output"]["raw"] == {
        "blocked": True,
        "reason": "980000 is over the order's 4700",
    }
    assert sorted(e["name"] for e in billing_calls) == ["charge", "lookup_order"]
    # The original trace is untouched.
    assert len(control_plane.trace_envelopes(incident.trace_id)) == 5


def test_a_replay_of_an_incident_file_lets_the_call_through_by_service(
    incident: Incident, control_plane: LocalControlPlane, replaying: None, tmp_path: Path
) -> None:
    path = tmp_path / "incident.json"  # what `chronicle save TRACE --all-spans` writes
    with closing(HttpControlPlane(control_plane.url, None, 10.0)) as client:
        saved = read_incident(client, incident.trace_id, all_spans=True)
    assert isinstance(saved, SavedIncident)
    saved.write(path)
    plan = the_fix("billing")
    with fixed_billing(control_plane, tmp_path) as billing:
        with chronicle.replay(path, plan, span_id=incident.support_span, strict=True) as run:
            support(billing.url, MESSAGE)
    assert [c for c in calls(run) if c[0] == "billing"] == [
        ("billing", "lookup_order", 1, "stub"),
        ("billing", "charge", 1, "run"),
    ]
    assert [(d.name, d.expected) for d in run.divergences()] == [("tell_customer", True)]
