"""The shipped test tooling: ``chronicle.testing`` and the pytest plugin.

``capture()`` keeps what would be sent; the names users import are pinned here.
"""

from __future__ import annotations

import importlib.metadata
import multiprocessing
import os
import socket
import threading
from typing import Any

import httpx
import pytest

import chronicle
import chronicle.testing
from chronicle.errors import NetworkBlockedError
from chronicle.save.client import INTERNAL_EXTENSION, HttpControlPlane
from chronicle.testing import LocalControlPlane, LocalControlPlaneError, capture, pytest_plugin
from chronicle.testing.local import DatabaseInUseError
from chronicle.testing.network import AllowList, block_network
from tests.support.impostor import Impostor
from tests.support.llm_server import LlmServer


@chronicle.boundary("search", kind="tool")
def search(query: str) -> Any:  # a replay returns a dict that reads by attribute too
    return {"hits": [query]}


def test_capture_keeps_validated_entities_in_call_order():
    with capture() as sent:
        with chronicle.record("captured", labels={"session_id": "s-1"}) as session:
            search("a")
            search("b")
    assert [(e.name, e.input.raw) for e in sent.envelopes] == [
        ("search", {"query": "a"}),
        ("search", {"query": "b"}),
    ]
    assert sent.traces[session.trace_id].metadata == {"session_id": "s-1"}
    (span,) = sent.spans.values()
    assert (span.state.value, span.status and span.status.value) == ("closed", "success")


def test_what_was_captured_replays():
    with capture() as sent:
        with chronicle.record("captured") as session:
            search("a")
    with chronicle.replay(sent.span_envelopes(session.trace_id, session.span_id)) as run:
        assert search("anything").hits == ["a"]
    assert [c.mode for c in run.call_log()] == ["stub"]


def test_emit_open_writes_are_replaced_by_the_close():
    with capture(emit_open=True) as sent:
        with chronicle.record("open-then-close"):
            search("a")
    (envelope,) = sent.envelopes
    assert envelope.envelope_status.state.value == "closed"


def test_the_testing_names_are_pinned():
    assert chronicle.testing.__all__ == [
        "InMemoryControlPlane",
        "LocalControlPlane",
        "LocalControlPlaneError",
        "capture",
    ]
    for name in chronicle.testing.__all__:
        assert (getattr(chronicle.testing, name).__doc__ or "").strip(), f"{name} has no docstring"
    assert issubclass(chronicle.testing.LocalControlPlaneError, chronicle.ChronicleError)
    assert issubclass(chronicle.testing.LocalControlPlaneError, RuntimeError)


def test_the_pytest_plugin_names_are_pinned(pytestconfig, request):
    (entry,) = [
        e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "chronicle"
    ]
    assert entry.value == "chronicle.testing.pytest_plugin"
    assert pytestconfig.pluginmanager.get_plugin("chronicle") is pytest_plugin
    markers = [line.split("(", 1)[0] for line in pytestconfig.getini("markers")]
    assert "chronicle_replay" in markers
    assert callable(request.getfixturevalue("chronicle_replay"))
    with pytest.raises(pytest.UsageError, match=r"@pytest.mark.chronicle_replay\(...\)"):
        request.getfixturevalue("chronicle_run")  # it exists, and asks for its marker


def test_the_http_client_marks_every_request_as_chronicles_own():
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/traces":
            return httpx.Response(200, json={"traces": [{"trace_id": "t1"}, "not an object"]})
        return httpx.Response(404, json={"detail": "trace not found"})

    client = HttpControlPlane("http://cp.test/", "k-1", 5.0, transport=httpx.MockTransport(answer))
    try:
        assert client.find_traces(labels={"session_id": "s1", "team": "a"}, q="x") == [
            {"trace_id": "t1"}
        ]
        assert client.trace_envelopes("t2") == []  # an unknown trace has no envelopes
    finally:
        client.close()
    first = seen[0]
    assert first.url.params.multi_items() == [
        ("limit", "500"),
        ("q", "x"),
        ("session_id", "s1"),
        ("label", "team:a"),
    ]
    for request in seen:
        assert request.headers["authorization"] == "Bearer k-1"
        assert request.extensions[INTERNAL_EXTENSION] is True


def test_block_network_refuses_hosts_outside_the_list_before_any_packet():
    with LlmServer(host="127.0.0.2") as outside, LlmServer() as inside:
        port = int(outside.url.rsplit(":", 1)[1])
        inside_port = int(inside.url.rsplit(":", 1)[1])
        with block_network(["127.0.0.1", "localhost"]) as blocked:
            with pytest.raises(NetworkBlockedError, match=r"127\.0\.0\.2 is not an allowed host"):
                socket.create_connection(("127.0.0.2", port), timeout=5)
            with pytest.raises(NetworkBlockedError, match=r"api\.openai\.com:443"):
                socket.getaddrinfo("api.openai.com", 443)  # no DNS query either
            with pytest.raises(RuntimeError, match="already active"):
                with block_network():
                    pass
            # an allowed name resolves, and the addresses it resolves to are allowed
            with socket.create_connection(("localhost", inside_port), timeout=5):
                pass
        assert blocked.attempts == [f"127.0.0.2:{port}", "api.openai.com:443"]
        assert isinstance(NetworkBlockedError("h:1", "x"), ConnectionError)  # clients wrap it
        with socket.create_connection(("127.0.0.2", port), timeout=5):  # the patch is gone
            pass


def test_the_allow_list_takes_addresses_networks_and_names():
    allow = AllowList.parse(["10.0.0.0/8", "::1", "Api.Internal."])
    assert allow.allows("10.1.2.3") and allow.allows("::1") and allow.allows("api.internal")
    assert allow.allows("::ffff:10.0.0.1")  # an IPv4 address in IPv6 form
    assert not allow.allows("11.0.0.1") and not allow.allows("api.openai.com")
    with pytest.raises(ValueError, match="an allowed host is an address, a network or a name"):
        AllowList.parse(["127.0.0.1", " "])


# ---- LocalControlPlane: the server it reaches is its own -----------------------------------


def test_a_control_plane_already_on_the_port_is_not_taken_for_ours(tmp_path):
    with Impostor() as impostor:
        mine = LocalControlPlane(port=impostor.port, database_path=tmp_path / "cp.db")
        try:
            with pytest.raises(LocalControlPlaneError, match="is taken"):
                mine.start(timeout=30)
            assert not mine.running
        finally:
            mine.close()


def test_a_preferred_port_held_by_another_server_moves_to_a_free_one(tmp_path):
    with Impostor() as impostor:
        with LocalControlPlane(prefer_port=impostor.port, database_path=tmp_path / "cp.db") as cp:
            assert cp.port != impostor.port and cp.moved_from == impostor.port
            assert cp.health()["version"] != "impostor"  # the real one, this one's own
            assert cp.search() == []
        # the impostor is untouched and still answers
        answer = httpx.get(f"http://127.0.0.1:{impostor.port}/health", timeout=5).json()
        assert answer["version"] == "impostor"


def test_two_control_planes_started_together_on_one_preferred_port_both_are_their_own(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    planes = [
        LocalControlPlane(prefer_port=port, database_path=tmp_path / f"cp{n}.db") for n in (1, 2)
    ]
    errors: list[BaseException] = []

    def start(plane: LocalControlPlane) -> None:
        try:
            plane.start(timeout=60)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(p,)) for p in planes]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert errors == []
        assert sorted(p.port == port for p in planes) == [False, True]  # one moved, one did not
        assert len({p.port for p in planes}) == 2
        for n, plane in enumerate(planes, 1):  # each reaches its own database
            assert plane.running
            plane_trace = {"trace_id": f"{n:032x}", "state": "open", "metadata": {"n": str(n)}}
            httpx.post(f"{plane.url}/v1/traces", json=plane_trace, timeout=10).raise_for_status()
        assert [list(p.snapshot()["traces"]) for p in planes] == [[f"{1:032x}"], [f"{2:032x}"]]
    finally:
        for plane in planes:
            plane.close()


def test_a_database_is_served_by_one_local_control_plane_at_a_time(tmp_path):
    database = tmp_path / "shared.db"
    second = LocalControlPlane(database_path=database)
    try:
        with LocalControlPlane(database_path=database) as first:
            with pytest.raises(DatabaseInUseError, match="served by another local control plane"):
                second.start()
            assert not second.running
            assert first.health()["status"] == "ok"
        # free again once the first one stopped
        assert second.start().health()["status"] == "ok"
    finally:
        second.close()  # never left running, even when an assertion fails


def _wait_for(event: Any) -> None:
    event.wait(60)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_does_not_keep_the_database_claimed(tmp_path):
    """A worker forked while a server runs must not keep its database locked after a restart."""
    fork = multiprocessing.get_context("fork")
    with LocalControlPlane(database_path=tmp_path / "cp.db") as cp:
        done = fork.Event()
        child = fork.Process(target=_wait_for, args=(done,))
        child.start()
        try:
            cp.stop()
            assert cp.start().health()["status"] == "ok"  # the child's copy held nothing
        finally:
            done.set()
            child.join(30)
            if child.is_alive():
                child.kill()
