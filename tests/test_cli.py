"""The ``chronicle`` command against the real control plane, run the way a user runs it.

One control plane (with an API key) serves the module; two traces are recorded into it once:

- ``research``: the blog's two researchers (``researcher`` is a tool boundary that calls the
  ``planner`` llm and ``web_search``), the second search failing; agent ``researcher-bot``.
- ``billing``: a call that crosses into a second service (``lookup_invoice`` opens a ``billing``
  span that calls ``charge``), recorded later, so a time between the two splits them.

Every command runs in a fresh interpreter (``python -m chronicle`` or the ``chronicle`` script).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentplane_primitives.enums import State
from agentplane_primitives.models import Trace
from agentplane_primitives.utils import new_trace_id

import chronicle
from chronicle import cli
from chronicle.save.client import HttpControlPlane
from chronicle.testing import LocalControlPlane
from tests.support.child import ctrl_c_reaches_it
from tests.support.cli import run_cli
from tests.support.impostor import Impostor
from tests.support.misbehaving import HungServer
from tests.support.workers import one_worker

pytestmark = one_worker("cli")

KEY = "cli-key"
ROW = re.compile(
    r"^(?P<indent> *)(?P<name>\S+)\s+(?P<kind>span|llm|tool)\s+"
    r"(?P<status>ok|FAILED|open)\s+(?P<ms>[\d,]+\.\d) ms"
)
"""A row of the waterfall: the indented name, kind, status and duration."""


@chronicle.boundary("planner", kind="llm")
def planner(task: str) -> dict[str, Any]:
    """Plan the search for one source."""
    time.sleep(0.02)
    return {"query": f"q:{task}"}


@chronicle.boundary("web_search", kind="tool")
def web_search(query: str) -> dict[str, Any]:
    """Search the web."""
    time.sleep(0.02)
    if "source B" in query:
        raise TimeoutError("search backend timed out after 30s")
    return {"hits": [query]}


@chronicle.boundary("researcher", kind="tool")
def researcher(task: str) -> dict[str, Any]:
    """Research one source: plan, then search."""
    plan = planner(task)
    try:
        return web_search(plan["query"])
    except TimeoutError as exc:
        return {"error": str(exc)}


@chronicle.boundary("charge", kind="tool")
def charge(invoice: int) -> dict[str, Any]:
    return {"charged": invoice}


@chronicle.boundary("lookup_invoice", kind="tool")
def lookup_invoice(invoice: int) -> dict[str, Any]:
    with chronicle.span(service="billing"):
        return charge(invoice)


@dataclass
class Recorded:
    server: LocalControlPlane
    research: str
    billing: str
    between: datetime
    research_span: str


@pytest.fixture(scope="module")
def recorded() -> Iterator[Recorded]:
    with LocalControlPlane(api_keys=f"{KEY}:local:ingest+read") as server:
        profile = chronicle.AgentProfile("researcher-bot", "Answer with sources")
        chronicle.configure(control_plane_url=server.url, api_key=KEY, agent=profile)
        labels = {
            "session_id": "sess-a",
            "message_id": "msg-a1",
            "user_id": "ada",
            "team": "search",
        }
        with chronicle.record("research", labels=labels, service="research-agent") as first:
            researcher("find X (source A)")
            researcher("find X (source B)")
        assert chronicle.flush(10)
        time.sleep(0.05)
        between = datetime.now(UTC)
        time.sleep(0.05)
        chronicle.configure(control_plane_url=server.url, api_key=KEY, service_name="front")
        labels = {"session_id": "sess-b", "message_id": "msg-b1", "user_id": "bob"}
        with chronicle.record("billing", labels=labels) as second:
            lookup_invoice(7)
        assert chronicle.flush(10)
        chronicle.shutdown()
        server.wait_for_envelopes(first.trace_id, 6)
        server.wait_for_envelopes(second.trace_id, 2)
        yield Recorded(server, first.trace_id, second.trace_id, between, first.span_id)


def _env(server: LocalControlPlane | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "NO_COLOR"))}
    if server is not None:
        env["CHRONICLE_CONTROL_PLANE_URL"] = server.url
        env["CHRONICLE_API_KEY"] = KEY
    env.update(extra)
    return env


def run(
    server: LocalControlPlane | None, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``chronicle ARGS`` against ``server`` (its URL and key in the environment), in this
    process (tests/support/cli.py); ``serve`` in a child of its own, as it runs a server."""
    if server is not None:
        env = {"CHRONICLE_CONTROL_PLANE_URL": server.url, "CHRONICLE_API_KEY": KEY, **env}
    # env holds environment variables only (never run_cli's cwd), which mypy cannot tell
    return run_cli(*args, in_child=args[:1] == ("serve",), **env)  # type: ignore[arg-type]


def ids_in(output: str) -> set[str]:
    return set(re.findall(r"\b[0-9a-f]{32}\b", output))


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


# ---- chronicle traces ------------------------------------------------------------------------


def test_traces_finds_a_trace_by_session_and_not_the_other(recorded):
    result = run(recorded.server, "traces", "--session-id", "sess-a")
    assert result.returncode == 0, result.stderr
    assert ids_in(result.stdout) == {recorded.research}
    header, row, *about_lines = result.stdout.splitlines()
    about = " ".join(line.strip() for line in about_lines)
    assert header.split() == ["TRACE", "ID", "STARTED", "DURATION", "CALLS", "STATUS", "NAME"]
    assert row.startswith(recorded.research) and row.split()[-1] == "research"
    assert row.split()[-3:-1] == ["6", "ok"]  # six envelopes, the span succeeded
    assert "research-agent" in about and "session_id=sess-a" in about
    assert len(about_lines) == 1 and "…" not in result.stdout  # a pipe: whole, never cut


def test_traces_finds_by_message_by_free_label_and_none_for_no_match(recorded):
    by_message = run(recorded.server, "traces", "--message-id", "msg-b1")
    assert ids_in(by_message.stdout) == {recorded.billing}
    by_label = run(recorded.server, "traces", "--label", "team:search", "--user-id", "ada")
    assert ids_in(by_label.stdout) == {recorded.research}
    nothing = run(recorded.server, "traces", "--label", "team:billing")
    assert nothing.returncode == 0
    assert nothing.stdout == "" and nothing.stderr.strip() == "no traces match"


def test_traces_by_time_window(recorded):
    mid = recorded.between.isoformat()
    later = run(recorded.server, "traces", "--since", mid)
    assert ids_in(later.stdout) == {recorded.billing}
    earlier = run(recorded.server, "traces", "--since", "1h", "--until", mid)
    assert ids_in(earlier.stdout) == {recorded.research}
    future = (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")  # local time
    assert ids_in(run(recorded.server, "traces", "--since", future).stdout) == set()


def test_traces_by_agent_as_json(recorded):
    result = run(recorded.server, "traces", "--agent", "researcher-bot", "--json")
    assert result.returncode == 0, result.stderr
    (found,) = json.loads(result.stdout)
    assert found["trace_id"] == recorded.research
    assert found["agents"] == ["researcher-bot"]
    assert found["labels"]["user_id"] == "ada"
    assert found["envelope_count"] == 6 and found["duration_ms"] > 80
    assert found["url"] == f"{recorded.server.url}/#chronicle/{recorded.research}"
    assert json.loads(run(recorded.server, "traces", "--agent", "nobody", "--json").stdout) == []


def test_a_bad_time_is_a_usage_error(recorded):
    result = run(recorded.server, "traces", "--since", "yesterday-ish")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "30m, 2h, 1d" in result.stderr


# ---- chronicle show --------------------------------------------------------------------------


def rows(output: str) -> list[tuple[int, str, str, str, float]]:
    """(indent, name, kind, status, ms) of each row of the waterfall, and the detail lines."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("CALL "))
    found = []
    for line in lines[start + 1 :]:
        match = ROW.match(line)
        if match:
            ms = float(match["ms"].replace(",", ""))
            found.append((len(match["indent"]), match["name"], match["kind"], match["status"], ms))
        else:
            found.append((len(line) - len(line.lstrip()), line.strip(), "", "", 0.0))
    return found


def test_show_prints_the_two_researcher_tree_without_welding_the_branches(recorded):
    result = run(recorded.server, "show", recorded.research)
    assert result.returncode == 0, result.stderr
    table = rows(result.stdout)
    assert [(indent, name, kind, status) for indent, name, kind, status, _ in table] == [
        (0, "research-agent", "span", "ok"),
        (2, "researcher#1", "tool", "ok"),
        (4, "planner#1", "llm", "ok"),
        (4, "web_search#1", "tool", "ok"),
        (2, "researcher#2", "tool", "ok"),
        (4, "planner#2", "llm", "ok"),
        (4, "web_search#2", "tool", "FAILED"),
        (6, "✗ TimeoutError: search backend timed out after 30s", "", ""),
    ]
    ms = {name: value for _, name, _, _, value in table}
    assert ms["planner#1"] >= 20 and ms["web_search#1"] >= 20
    assert ms["researcher#1"] >= ms["planner#1"] + ms["web_search#1"] - 0.2
    assert ms["research-agent"] >= ms["researcher#1"] + ms["researcher#2"] - 0.2
    matched = [ROW.match(line) for line in result.stdout.splitlines()]
    lines = {match["name"]: match.string for match in matched if match}
    first, second = lines["researcher#1"], lines["researcher#2"]
    assert second.index("█") >= first.rindex("█")  # one time axis: the second runs after
    assert "labels  session_id=sess-a message_id=msg-a1 user_id=ada team=search" in result.stdout
    assert f"span    {recorded.research_span} research-agent" in result.stdout
    assert "6 calls, 1 failed" in result.stdout
    assert "agent   researcher-bot (agt_" in result.stdout
    assert "\x1b[" not in result.stdout  # not a terminal: no colour
    assert all(len(line) <= 100 for line in result.stdout.splitlines())


def test_show_nests_a_downstream_service_under_the_envelope_that_called_it(recorded):
    result = run(recorded.server, "show", recorded.billing)
    assert result.returncode == 0, result.stderr
    assert [(i, name, kind) for i, name, kind, _, _ in rows(result.stdout)] == [
        (0, "front", "span"),
        (2, "lookup_invoice#1", "tool"),
        (4, "billing", "span"),
        (6, "charge#1", "tool"),
    ]
    assert re.search(r"span    [0-9a-f]{16} billing \(called by lookup_invoice#1\)", result.stdout)


def test_show_one_envelope_in_full_and_the_tree_as_json(recorded):
    result = run(recorded.server, "show", recorded.research, "--envelope", "web_search#2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("web_search#2  tool  FAILED")
    assert "error     TimeoutError: search backend timed out after 30s" in result.stdout
    assert '"query": "q:find X (source B)"' in result.stdout
    as_json = json.loads(run(recorded.server, "show", recorded.research, "--json").stdout)
    assert as_json["trace"]["trace_id"] == recorded.research
    assert len(as_json["envelopes"]) == 6
    span = run(recorded.server, "show", recorded.research, "--span", "0" * 15 + "1")
    assert_one_line_failure(span, "has no span", recorded.research_span)


def test_show_in_a_terminal_is_coloured_unless_no_color(recorded):
    def on_a_terminal(**env: str) -> str:
        main, child = pty.openpty()
        process = subprocess.Popen(
            [sys.executable, "-m", "chronicle", "show", recorded.research],
            stdout=child,
            stderr=subprocess.PIPE,
            env=_env(recorded.server, **env),
        )
        os.close(child)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(main)
        assert process.stderr is not None
        assert process.wait(60) == 0, process.stderr.read()
        process.stderr.close()
        return b"".join(chunks).decode()

    coloured = on_a_terminal()
    assert "\x1b[1;31m" in coloured  # the failure stands out in red
    assert "\x1b[" not in on_a_terminal(NO_COLOR="1")


# ---- chronicle save, and the failures every command reports in one line -----------------------


def test_save_with_the_console_script(recorded, tmp_path):
    script = Path(sys.executable).parent / "chronicle"
    out = tmp_path / "incident.json"
    result = subprocess.run(
        [str(script), "save", recorded.research, recorded.research_span, "-o", str(out)],
        capture_output=True,
        text=True,
        env=_env(recorded.server),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"saved 6 envelopes of span research-agent {recorded.research_span} to {out}"
    )
    assert len(json.loads(out.read_text())["envelopes"]) == 6


def test_a_missing_trace_fails_in_one_line(recorded):
    missing = "ab" * 16
    assert_one_line_failure(run(recorded.server, "show", missing), f"trace {missing} is not")
    result = run(recorded.server, "save", missing, "0" * 15 + "1", "-o", "x.json")
    assert_one_line_failure(result, f"trace {missing} is not on the control plane")


def test_a_control_plane_that_is_down_fails_in_one_line():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"  # nothing listens there
    result = run(None, "traces", "--url", url)
    assert_one_line_failure(
        result,
        f"nothing answers at {url}",
        f"`chronicle serve --port {port}`",  # what to run
    )


def test_a_refused_key_fails_in_one_line(recorded):
    result = run(recorded.server, "show", recorded.research, CHRONICLE_API_KEY="wrong-key")
    assert_one_line_failure(result, "answered 401", "CHRONICLE_API_KEY")


def test_no_control_plane_configured_says_how_to_set_one():
    result = run(None, "traces")
    assert result.returncode == 2
    assert_one_line_failure(result, "CHRONICLE_CONTROL_PLANE_URL")


# ---- the same from Python --------------------------------------------------------------------


def test_find_traces_and_show_from_python(recorded):
    connection = {"url": recorded.server.url, "api_key": KEY}
    (found,) = chronicle.find_traces(user_id="ada", since=timedelta(hours=1), **connection)
    assert found.trace_id == recorded.research
    assert found.status == "success" and found.services == ("research-agent",)
    assert (
        chronicle.find_traces(until=recorded.between, labels={"team": "billing"}, **connection)
        == []
    )
    newest_first = chronicle.find_traces(since="1h", **connection)
    assert [s.trace_id for s in newest_first] == [recorded.billing, recorded.research]
    tree = found.show()
    assert [(n.depth, n.label) for n in tree.nodes][:3] == [
        (0, "research-agent"),
        (1, "researcher#1"),
        (2, "planner#1"),
    ]
    failed = [n for n in tree.nodes if n.status == "failure"]
    assert [(n.label, n.error) for n in failed] == [
        ("web_search#2", "TimeoutError: search backend timed out after 30s")
    ]
    assert str(chronicle.show(recorded.research, **connection)) == str(tree)
    assert tree.envelope("researcher#2")["input"]["raw"] == {"task": "find X (source B)"}


def _dead_url() -> str:
    """The address of a localhost port nothing listens on."""
    return f"http://127.0.0.1:{_free_port()}"


def test_find_traces_and_show_read_the_control_plane_configure_named(recorded, monkeypatch):
    # configure() in code wins over the environment, for reading as for recording
    monkeypatch.setenv("CHRONICLE_CONTROL_PLANE_URL", _dead_url())
    chronicle.configure(control_plane_url=recorded.server.url, api_key=KEY)
    try:
        (found,) = chronicle.find_traces(session_id="sess-a")
        assert found.trace_id == recorded.research
        tree = chronicle.show(recorded.research)
        assert tree.trace_id == recorded.research and len(tree.envelopes) == 6
        assert tree.url is not None and tree.url.startswith(recorded.server.url)
        # an explicit url still wins over the configured one
        with pytest.raises(chronicle.ControlPlaneError, match="nothing answers at"):
            chronicle.show(recorded.research, url=_dead_url())
    finally:
        chronicle.shutdown()


def test_find_traces_reads_the_configured_control_plane_without_any_environment(
    recorded, monkeypatch
):
    monkeypatch.delenv("CHRONICLE_CONTROL_PLANE_URL", raising=False)
    chronicle.configure(control_plane_url=recorded.server.url, api_key=KEY)
    try:
        assert [s.trace_id for s in chronicle.find_traces(user_id="bob")] == [recorded.billing]
    finally:
        chronicle.shutdown()
    with pytest.raises(chronicle.ConfigurationError, match="CHRONICLE_CONTROL_PLANE_URL"):
        chronicle.find_traces(user_id="bob")  # nothing configured any more


def test_a_server_that_is_not_a_control_plane_is_told_from_a_missing_trace(llm_server):
    url = llm_server.url
    shown = run(None, "show", "ab" * 16, "--url", url)
    assert_one_line_failure(shown, f"{url} is not a control plane", "GET /health")
    assert "is not on the control plane" not in shown.stderr
    listed = run(None, "traces", "--url", url)
    assert_one_line_failure(listed, f"{url} is not a control plane")


# ---- chronicle serve -------------------------------------------------------------------------


class Served:
    """``chronicle serve`` in a subprocess, its output read line by line."""

    def __init__(self, port: int, data: Path, *flags: str) -> None:
        self.port = port
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chronicle", "serve", "--port", str(port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(None, XDG_DATA_HOME=str(data)),
            preexec_fn=ctrl_c_reaches_it,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def until(self, text: str) -> str:
        seen = ""
        while text not in seen:
            seen += self.lines.get(timeout=60)
        return seen

    def interrupt(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(30)
        finally:
            if self.process.poll() is None:  # never leave the server running
                self.process.kill()
        self.reader.join(10)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        stderr = self.process.stderr.read()
        self.process.stderr.close()
        rest = ""
        while not self.lines.empty():
            rest += self.lines.get()
        return code, rest, stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_serve_runs_the_control_plane_with_a_database_that_persists_printing_only_its_lines(
    tmp_path,
):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    served = Served(port, tmp_path)
    try:
        started = served.until(f"export CHRONICLE_CONTROL_PLANE_URL={url}\n")
        assert started.startswith("starting the control plane on ")
        assert f"control plane running at {url}" in started
        assert str((tmp_path / "chronicle" / "control-plane.db").resolve()) in started
        httpx.get(f"{url}/health", timeout=10)
        client = HttpControlPlane(url, None, 10)
        trace = Trace(
            trace_id=new_trace_id(),
            name="kept",
            metadata={"session_id": "sess-serve"},
            state=State.OPEN,
        )
        client.register_trace(trace)
        client.close()
        # (in this process: it says so before starting anything)
        second = run_cli("serve", "--port", str(port), XDG_DATA_HOME=str(tmp_path))
        assert second.returncode == 2
        assert_one_line_failure(second, f"port {port} is in use", "--port")
    finally:
        code, rest, stderr = served.interrupt()
    assert code == 0 and "Traceback" not in stderr, stderr
    assert rest.strip().splitlines()[-1] == "stopped the control plane"  # after the server's log
    # the server's own log (its banner, the requests it answered) only with --verbose
    assert "Uvicorn" not in started + rest + stderr and "GET /health" not in rest + stderr
    again = Served(port, tmp_path)  # the default database outlives the server
    try:
        again.until("export CHRONICLE_CONTROL_PLANE_URL")
        (found,) = chronicle.find_traces(session_id="sess-serve", url=url)
        assert (found.trace_id, found.name) == (trace.trace_id, "kept")
    finally:
        assert again.interrupt()[0] == 0


def test_serve_without_the_control_plane_package_says_how_to_install_it(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "control_plane" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(shutil, "which", lambda name, *a: None)
    assert cli.main(["serve"]) == 2
    message = capsys.readouterr().err.strip()
    # what works from the registry (the package is on PyPI) and from a checkout alike
    assert "pip install 'agentplane-control-plane>=1,<2'" in message
    assert "pip install -e '.[server]'" in message
    assert "agentplane-chronicle[" not in message  # not on the registry
    assert len(message.splitlines()) == 1


def test_serve_verbose_prints_the_servers_log(tmp_path):
    loud = Served(_free_port(), tmp_path, "--verbose")
    try:
        loud.until("export CHRONICLE_CONTROL_PLANE_URL")
        httpx.get(f"http://127.0.0.1:{loud.port}/health", timeout=10)
    finally:  # (serve copies the rest of the server's log before it exits)
        code, _, stderr = loud.interrupt()
    assert code == 0
    assert "Uvicorn running on" in stderr and "GET /health" in stderr


def test_serve_never_reports_another_server_on_its_port_as_its_own(tmp_path, monkeypatch, capsys):
    """The port is taken between the check and the bind: serve must not claim it runs."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with Impostor() as impostor:
        real = cli.port_is_free
        checks = iter([True])  # the first check passes, as if the port were taken just after
        monkeypatch.setattr(
            cli.serve, "port_is_free", lambda port: next(checks, None) or real(port)
        )
        code = cli.main(["serve", "--port", str(impostor.port)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "control plane running at" not in out
    assert f"port {impostor.port} was taken while the control plane started" in err
    assert "a control plane (version impostor) already runs at" in err


def test_serve_on_a_port_a_control_plane_holds_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with Impostor() as impostor:
        assert cli.main(["serve", "--port", str(impostor.port)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"port {impostor.port} is in use: a control plane (version impostor) already" in line


# ---- help, version, patience -----------------------------------------------------------------


def test_a_bare_chronicle_prints_the_help_and_version_prints_the_version():
    bare = run(None)
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout.startswith("usage: ")
    for command in ("traces", "show", "save", "serve", "--version"):
        assert command in bare.stdout
    version = run(None, "--version")
    assert (version.returncode, version.stdout) == (0, f"chronicle {chronicle.__version__}\n")


def test_a_hung_control_plane_is_waited_for_out_loud(tmp_path):
    with HungServer() as hung:  # accepts connections and never answers
        url = hung.url
        result = run(None, "traces", "--url", url, CHRONICLE_TIMEOUT="2.5")
        attempts = hung.accepted
    assert result.returncode == 1 and "Traceback" not in result.stderr
    waiting, failed = result.stderr.strip().splitlines()
    assert f"waiting for the control plane at {url}" in waiting
    assert "giving up after 2.5 s" in waiting
    assert f"control plane at {url} did not answer" in failed and "ReadTimeout" in failed
    assert attempts == 1  # one wait of the timeout, then the answer: no retries


# ---- chronicle replay TRACE with a fork and --record (issue 28, item 4) -----------------------


@pytest.fixture
def refund_trace(recording: Any, llm_server: Any) -> Iterator[str]:
    """The refund agent (tests/support/refund_agent.py) recorded once; its trace id."""
    from tests.support import refund_agent
    from tests.support.llm_server import chat_text

    refund_agent.use(llm_server)
    try:
        llm_server.reply_with(chat_text("Your refund is on its way."))
        with chronicle.record("support") as session:
            refund_agent.support_agent("Where is my refund?", "o-17")
        recording.saved(session.trace_id, 5)
        yield session.trace_id
    finally:
        refund_agent.close()


def test_replay_a_trace_with_a_fault_recorded_prints_the_new_trace_and_its_diff(
    refund_trace, recording, capsys
):
    status = cli.main(
        [
            "replay",
            refund_trace,
            "--entry",
            "tests.support.refund_agent:support_agent",
            "--fail",
            "refund#1=TimeoutError: refund API down",
            "--override",
            'lookup_order#1={"order_id": "o-17", "amount": 10.0, "paid": true}',
            "--record",
            "--url",
            recording.control_plane.url,
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    [new] = re.findall(r"recorded as trace ([0-9a-f]{32})", out)
    assert new != refund_trace
    assert f"diff {refund_trace} -> {new}" in out
    assert "~     lookup_order#1" in out and "amount: 42.5 -> 10.0" in out
    assert "status  ok -> failed: TimeoutError: refund API down" in out
    assert "the first divergence is lookup_order#1" in out
    [span] = recording.control_plane.trace(new)["spans"]
    assert span["metadata"]["chronicle.replay_of"]["trace_id"] == refund_trace


def test_replay_swaps_a_model_from_the_command_line(refund_trace, recording, llm_server, capsys):
    from tests.support.llm_server import chat_text

    llm_server.reply_with(chat_text("Refund sent (mini)."))
    model = "openai.chat.completions.create#1=gpt-4.1-mini"
    status = cli.main(
        [
            "replay",
            refund_trace,
            "--entry",
            "tests.support.refund_agent:support_agent",
            "--model",
            model,
            "--url",
            recording.control_plane.url,
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert llm_server.requests[-1].model == "gpt-4.1-mini"
    assert "recorded as trace" not in out  # without --record nothing is written


def test_replay_fork_options_are_checked(capsys, recording):
    for option, value, said in [
        ("--fail", "refund=TimeoutError", "NAME#n=ExceptionType"),
        ("--fail", "refund#1=NoSuchError", "not an exception"),
        ("--override", "refund#1={not json", "JSON"),
        ("--model", "planner#2", "NAME#n=MODEL"),
    ]:
        status = cli.main(
            [
                "replay",
                "0" * 31 + "1",
                "--entry",
                "tests.support.refund_agent:support_agent",
                option,
                value,
                "--url",
                recording.control_plane.url,
            ]
        )
        assert status == 2
        assert said in capsys.readouterr().err
