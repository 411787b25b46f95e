"""Nothing runs live in a replay unless the plan says so: a connection made outside any boundary
the plan runs (an un-instrumented tool calling an HTTP API) is reported, naming the host and the
boundary it was made under; strict mode fails on it; ``network="block"`` refuses it;
``"allow"`` and ``allowed_hosts=`` let it through. And a strict divergence a framework wraps in
its own error still reaches the test as ``ReplayDivergenceError``.

A real agent: a wrapped OpenAI client against the local model server, a ``refund`` tool that
is a boundary (its policy check another), and ``pay``, a plain function calling a local
payments server with ``httpx``, from inside ``refund`` and from the agent loop (outside any
boundary). Recorded to the real control plane, replayed from it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest

import chronicle
from chronicle.errors import NetworkBlockedError
from chronicle.replay.entry import ReplayScope
from chronicle.replay.network import GUARD
from chronicle.save.incident import Incident
from chronicle.testing import capture
from chronicle.whatif import corpus
from tests.support.incident_files import write_today_incident
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer

pytest_plugins = ["pytester"]


class Payments:
    """A local payments API: every request to it is a refund paid (counted in ``paid``)."""

    def __init__(self) -> None:
        self.paid: list[str] = []
        payments = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                payments.paid.append(self.path)
                body = b"paid"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def payments() -> Iterator[Payments]:
    server = Payments()
    yield server
    server.close()


class Agent:
    """The support agent: asks the model, refunds the order through the ``refund`` tool, then
    (``notify``) confirms the payment from the agent loop itself."""

    def __init__(self, llm_server: LlmServer, payments: Payments) -> None:
        self.payments = payments
        self.client = chronicle.wrap(
            openai.OpenAI(base_url=llm_server.openai_base_url, api_key="test", max_retries=0)
        )

        @chronicle.boundary("policy", kind="tool")
        def policy(order_id: str) -> str:
            return "refundable"

        @chronicle.boundary("refund", kind="tool")
        def refund(order_id: str) -> dict[str, str]:
            verdict = policy(order_id)
            return {"policy": verdict, "payment": self.pay(order_id)}

        self.refund = refund

    def pay(self, order_id: str) -> str:
        """Not a boundary: an HTTP call nobody instrumented."""
        return httpx.get(f"{self.payments.url}/refund/{order_id}").text

    def run(self, order_id: str, *, notify: bool = True, prompt: str = "refund") -> str:
        reply = self.client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"{prompt} {order_id}"}]
        )
        result = self.refund(order_id)
        if notify:
            self.pay(f"{order_id}/confirm")
        return f"{reply.choices[0].message.content}: {result['payment']}"


@pytest.fixture
def agent(llm_server: LlmServer, payments: Payments) -> Iterator[Agent]:
    agent = Agent(llm_server, payments)
    with agent.client:
        yield agent


@pytest.fixture
def recorded(recording: Any, agent: Agent, payments: Payments) -> chronicle.Session:
    with chronicle.record("refund-request") as session:
        agent.run("A-1")
    recording.saved(session.trace_id, 3)  # the model, refund, policy
    assert payments.paid == ["/refund/A-1", "/refund/A-1/confirm"]
    payments.paid.clear()
    return session


def replay(
    session: chronicle.Session, plan: chronicle.ReplayPlan | None = None, **options: Any
) -> ReplayScope:
    return chronicle.replay_trace(session.trace_id, session.span_id, plan, **options)


def network_divergences(run: chronicle.ReplayRun) -> list[tuple[str, str | None]]:
    return [(d.name, d.under) for d in run.divergences() if d.kind == "network"]


# ---- report (the default) ---------------------------------------------------------------------


def test_a_strict_replay_refuses_a_connection_outside_any_boundary_and_says_what_to_do(
    recorded, agent, payments
):
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with replay(recorded, strict=True):
            agent.run("A-1")
    message = str(raised.value)
    assert f"a connection to {payments.host} was made outside any boundary" in message
    assert "instrument the client that made it" in message
    assert f"allowed_hosts=[{payments.host!r}]" in message and "network='allow'" in message
    (found,) = raised.value.divergences
    assert (found.kind, found.name, found.under) == ("network", payments.host, None)
    assert payments.paid == []  # refused before a packet left: the refund is not paid twice


def test_a_connection_under_a_boundary_that_runs_only_to_reach_a_cut_point_names_it(
    recorded, agent, payments
):
    plan = chronicle.ReplayPlan().run("policy", 1)  # refund runs, to reach its policy check
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with replay(recorded, plan, strict=True):
            agent.run("A-1")
    message = str(raised.value)
    assert f"a connection to {payments.host} was made under refund#1" in message
    assert "ReplayPlan().run('refund', 1)" in message
    assert [(d.name, d.under) for d in raised.value.divergences] == [(payments.host, "refund#1")]
    assert payments.paid == []


def test_a_replay_that_is_not_strict_lets_connections_through_and_lists_them(
    recorded, agent, payments, caplog
):
    plan = chronicle.ReplayPlan().run("policy", 1)
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        with replay(recorded, plan) as run:
            agent.run("A-1")
            agent.pay("A-1/confirm")  # once more: counted, not listed again
    found = {d.under: d.diff for d in run.divergences() if d.name == payments.host}
    assert found == {
        "refund#1": "let through (network='report'), once",
        None: "let through (network='report'), 2 times",
    }
    assert len(run.divergences()) == 2
    assert payments.paid == ["/refund/A-1", "/refund/A-1/confirm", "/refund/A-1/confirm"]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = warning.getMessage()
    assert f"a connection to {payments.host} was made under refund#1" in text
    assert f"a connection to {payments.host} was made outside any boundary" in text


def test_a_thread_started_inside_the_replay_is_watched_as_the_replay(recorded, agent, payments):
    with replay(recorded, network="report") as run:
        agent.run("A-1", notify=False)
        worker = threading.Thread(target=agent.pay, args=("A-1/confirm",))
        worker.start()
        worker.join()
    assert network_divergences(run) == [(payments.host, None)]


def test_a_thread_that_does_not_carry_the_replay_is_not_watched(recorded, agent, payments):
    go = threading.Event()

    def poller() -> None:  # started before the replay: the process's, not the replayed code's
        go.wait(10)
        agent.pay("A-1/poll")

    worker = threading.Thread(target=poller)
    worker.start()
    with replay(recorded, strict=True) as run:
        agent.run("A-1", notify=False)
        go.set()
        worker.join()
    assert run.divergences() == []
    assert payments.paid == ["/refund/A-1/poll"]


# ---- block, allow, allowed_hosts --------------------------------------------------------------


def test_block_refuses_the_connection_before_it_reaches_the_server(recorded, agent, payments):
    with replay(recorded, network="block") as run:
        with pytest.raises(httpx.ConnectError) as failed:
            agent.run("A-1")
    assert payments.paid == []
    assert "chronicle refused a connection during a replay (network='block')" in str(failed.value)
    causes = []
    error: BaseException | None = failed.value
    while error is not None:
        causes.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(e, NetworkBlockedError) for e in causes)  # a ConnectionError
    (found,) = run.divergences()
    assert (found.kind, found.name, found.under, found.diff) == (
        "network",
        payments.host,
        None,
        "refused, once",
    )


def run_giving_up_quietly(agent: Agent) -> None:
    with contextlib.suppress(httpx.ConnectError):  # the agent's retry logic gives up quietly
        agent.run("A-1")


def test_a_strict_block_fails_at_exit_whatever_the_code_made_of_the_refused_connection(
    recorded, agent, payments
):
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with replay(recorded, strict=True, network="block"):
            run_giving_up_quietly(agent)
    assert [(d.name, d.under) for d in raised.value.divergences] == [(payments.host, None)]
    assert payments.paid == []


def test_allow_and_allowed_hosts_let_the_connection_through(recorded, agent, payments):
    for options in (
        {"network": "allow"},
        {"allowed_hosts": [payments.host]},
        {"allowed_hosts": ["127.0.0.1"]},
        {"allowed_hosts": ["localhost"]},  # a name allows what it resolves to (loopback)
    ):
        with replay(recorded, strict=True, **options) as run:
            assert agent.run("A-1") == "echo: refund A-1: paid"  # refund's recorded payment
        assert network_divergences(run) == [], options
    assert payments.paid == ["/refund/A-1/confirm"] * 4  # refund itself was stubbed


def test_loopback_is_not_allowed_by_default(recorded, agent, payments):
    with replay(recorded, allowed_hosts=["127.0.0.1:1"]) as run:  # another port
        agent.run("A-1")
    assert network_divergences(run) == [(payments.host, None)]


def test_a_cut_point_that_runs_the_boundary_live_is_not_reported(recorded, agent, payments):
    plan = chronicle.ReplayPlan().run("refund", 1)
    with replay(recorded, plan, strict=True, network="block") as run:
        answer = agent.run("A-1", notify=False)
    assert answer.endswith(": paid")
    assert payments.paid == ["/refund/A-1"]  # the cut-point paid, as the plan asked
    assert run.divergences() == []


def test_the_control_plane_is_reached_during_a_blocked_replay(recorded, agent, recording):
    with replay(recorded, strict=True, network="block") as run:
        agent.run("A-1", notify=False)
        # the replay machinery reads the control plane (a nested replay), and so may the code
        with replay(recorded, strict=True, network="block") as inner:
            agent.run("A-1", notify=False)
        assert httpx.get(f"{recording.control_plane.url}/healthz").status_code < 500
    assert run.divergences() == [] and inner.divergences() == []


def test_bad_options_fail_before_anything_runs(recorded):
    with pytest.raises(ValueError, match="network is 'report', 'block' or 'allow'"):
        replay(recorded, network="deny")
    with pytest.raises(ValueError, match="an allowed host is an address"):
        replay(recorded, allowed_hosts=[""])


def test_the_socket_patch_is_gone_when_no_replay_is_active(recorded, agent):
    import socket

    original = socket.socket.connect
    with replay(recorded, network="allow"):
        assert socket.socket.connect is not original
    assert socket.socket.connect is original and not GUARD.installed


# ---- a divergence a framework wraps in its own error -------------------------------------------


class AgentGenerationError(Exception):
    """What a framework raises for any error in a step (smolagents' own name for it)."""


def framework_step(step: Any) -> Any:
    try:
        return step()
    except Exception as exc:
        raise AgentGenerationError(f"Error in generating model output: {exc}") from exc


def test_a_divergence_wrapped_by_the_framework_reaches_the_test_as_replay_divergence_error(
    recorded, agent
):
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with replay(recorded, strict=True):
            framework_step(lambda: agent.run("A-1", prompt="please refund", notify=False))
    assert isinstance(raised.value.__cause__, AgentGenerationError)
    assert "the input of call 1 of 'openai.chat.completions.create' differs" in str(raised.value)
    assert "the block then ended with AgentGenerationError" in str(raised.value)
    assert [d.kind for d in raised.value.divergences] == ["input"]


def test_a_swallowed_connection_divergence_is_raised_at_exit(recorded, agent, payments):
    def swallow() -> None:
        with contextlib.suppress(chronicle.ReplayDivergenceError):  # a loop that moves on
            agent.run("A-1")

    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with replay(recorded, strict=True):
            framework_step(swallow)
    assert [(d.kind, d.name) for d in raised.value.divergences] == [("network", payments.host)]
    assert payments.paid == []


# ---- a corpus (chronicle replay, --chronicle-corpus) and the pytest marker -------------------


def refund_request(payments: Payments) -> Any:
    """A corpus entry: a boundary whose own body pays through a plain HTTP call."""

    @chronicle.boundary("policy", kind="tool")
    def policy(order_id: str) -> str:
        return "refundable"

    @chronicle.boundary("handle_refund")
    def handle_refund(order_id: str) -> str:
        verdict = policy(order_id)
        return f"{verdict}: {httpx.get(f'{payments.url}/refund/{order_id}').text}"

    return handle_refund


def test_a_corpus_entry_runs_live_but_its_own_connections_are_reported(tmp_path, payments):
    handle_refund = refund_request(payments)
    with capture() as sent:
        with chronicle.record("refund"):
            handle_refund("A-1")
    path = tmp_path / "refund.json"
    Incident.of(sent.envelopes).write(path)
    payments.paid.clear()
    entry = corpus.Entry(handle_refund, "refunds:handle_refund", "handle_refund")

    result = corpus.replay_file(path, entry, corpus.Options())
    assert result.outcome == "diverged"
    assert [(d.kind, d.name, d.under) for d in result.divergences] == [
        ("network", payments.host, "handle_refund#1")
    ]
    assert payments.paid == []
    allowed = corpus.Options(allowed_hosts=(payments.host,))
    assert corpus.replay_file(path, entry, allowed).outcome == "passed"
    assert payments.paid == ["/refund/A-1"]


MARKED_TESTS = """
import httpx
import pytest

import chronicle


@chronicle.boundary("today", kind="tool")
def today():
    raise AssertionError("stubbed in every test here")


def notify(url):  # no boundary: an un-instrumented client
    return httpx.get(url).status_code


@pytest.mark.chronicle_replay("today.json")
def test_reported(payments_url):
    assert today() == "monday"
    notify(payments_url)


@pytest.mark.chronicle_replay("today.json", network="block")
def test_blocked_and_caught(payments_url):
    assert today() == "monday"
    try:
        notify(payments_url)
    except httpx.ConnectError:
        pass  # the test still fails: the replay is strict


@pytest.mark.chronicle_replay("today.json", allowed_hosts=["{host}"])
def test_allowed(payments_url):
    assert today() == "monday"
    assert notify(payments_url) == 200
"""


def test_the_pytest_marker_reports_a_connection_outside_the_plan(pytester, payments):
    write_today_incident(pytester.path / "today.json")
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makeconftest(
        f"""
        import pytest

        @pytest.fixture
        def payments_url():
            return "{payments.url}/notify"
        """
    )
    pytester.makepyfile(test_marked=MARKED_TESTS.replace("{host}", payments.host))
    result = run_inline(pytester)
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert f"a connection to {payments.host} was made outside any boundary" in out
    assert "(refused, once)" in out
    assert payments.paid == ["/notify"]  # from the allowed test only
