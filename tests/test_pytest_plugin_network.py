"""The pytest plugin's network blocking, as a user meets it (each test runs a small test file in
a pytest subprocess): ``block_network`` refuses a host outside the allow list, even when the
code catches the error, and loopback is allowed by default.
"""

from __future__ import annotations

from tests.support.incident_files import write_today_incident
from tests.support.llm_server import LlmServer
from tests.test_pytest_plugin import run

pytest_plugins = ["pytester"]

# ---- the network ----------------------------------------------------------------------------

NETWORK_TEST = """
import httpx
import pytest

import chronicle


@chronicle.boundary("today", kind="tool")
def today():
    raise AssertionError("stubbed in every test here")


@chronicle.boundary("fetch", kind="tool")
def fetch(url):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=5).status_code


@pytest.mark.chronicle_replay("today.json", run=["fetch"])
def test_blocked_host(server_url):
    assert today() == "monday"
    fetch(server_url)


@pytest.mark.chronicle_replay("today.json", run=["fetch"])
def test_blocked_even_when_the_code_catches_it(server_url):
    assert today() == "monday"
    try:
        fetch(server_url)
    except httpx.ConnectError:
        pass  # the agent "degrades gracefully": the test still fails


@pytest.mark.chronicle_replay("today.json", run=["fetch"])
def test_allowed_host(allowed_url):
    assert today() == "monday"
    assert fetch(allowed_url) == 200
"""


def test_block_network_refuses_a_host_outside_the_allow_list(pytester, llm_server):
    with LlmServer(host="127.0.0.2") as outside:
        pytester.makeini("[pytest]\nfilterwarnings = error\n")
        write_today_incident(pytester.path / "today.json")
        pytester.makeconftest(
            f"""
            import pytest

            @pytest.fixture
            def server_url():
                return "{outside.url}"

            @pytest.fixture
            def allowed_url():
                return "{llm_server.url}"
            """
        )
        pytester.makepyfile(test_network=NETWORK_TEST)
        result = run(
            pytester,
            "--chronicle-block-network",
            "--chronicle-allowed-hosts=127.0.0.1",
            "test_network.py",
        )
        result.assert_outcomes(passed=1, failed=2)
        out = result.stdout.str()
        port = outside.url.rsplit(":", 1)[1]
        assert f"chronicle blocked a connection to 127.0.0.2:{port}" in out
        assert "127.0.0.2 is not an allowed host (allowed: 127.0.0.1/32)" in out
        assert "the code under test caught the error" in out
        assert outside.requests == []  # nothing reached the server outside the list
        assert len(llm_server.requests) == 1  # the allowed host was reached


def test_the_marker_option_blocks_the_network_and_loopback_is_allowed_by_default(pytester):
    with LlmServer(host="127.0.0.2") as outside:
        pytester.makeini("[pytest]\nfilterwarnings = error\n")
        write_today_incident(pytester.path / "today.json")
        pytester.makepyfile(
            test_marker_block=f"""
            import httpx
            import pytest

            import chronicle

            @chronicle.boundary("today", kind="tool")
            def today():
                raise AssertionError("stubbed")

            @chronicle.boundary("fetch", kind="tool")
            def fetch(url):
                body = {{"model": "m", "messages": [{{"role": "user", "content": "hi"}}]}}
                return httpx.post(f"{{url}}/v1/chat/completions", json=body).status_code

            @pytest.mark.chronicle_replay(
                "today.json", run=["fetch"], block_network=True, allowed_hosts=["127.0.0.1"]
            )
            def test_blocked():
                today()
                fetch("{outside.url}")

            @pytest.mark.chronicle_replay("today.json", run=["fetch"], block_network=True)
            def test_loopback_is_allowed_by_default():
                assert today() == "monday"
                assert fetch("{outside.url}") == 200
            """
        )
        result = run(pytester, "test_marker_block.py")
        result.assert_outcomes(passed=1, failed=1)
        assert "chronicle blocked a connection to 127.0.0.2" in result.stdout.str()
        assert len(outside.requests) == 1  # from the second test only
