"""Every report says each thing once, counts with the right plural, and fits its output
(issue 44, item 3): a strict replay's failure, the corpus summary and pytest's collection line,
``chronicle agents`` piped and on a terminal, ``chronicle serve`` on a port another program
holds.
"""

from __future__ import annotations

import functools
import http.server
import io
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import chronicle
from chronicle import cli
from chronicle.cli.common import table_width
from chronicle.errors import plural
from chronicle.read.agents import AgentPage, AgentSummary, render_agents
from chronicle.replay import divergence
from chronicle.testing.failure_text import diff_text
from chronicle.whatif.diff import diff
from tests.support.child import ctrl_c_reaches_it
from tests.support.impostor import Impostor
from tests.support.inline import run_inline
from tests.test_agents import record_traces, run_cli
from tests.test_corpus import ENTRY, agent, record_corpus  # noqa: F401 (agent: a fixture)
from tests.test_pytest_plugin import write_lookups

pytest_plugins = ["pytester"]


# ---- said once -------------------------------------------------------------------------------


def test_a_strict_failure_prints_a_changed_input_once_then_points_to_it(tmp_path):
    path = tmp_path / "lookups.json"
    write_lookups(path, "a", "b")

    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: str) -> str:
        return key.upper()

    with chronicle.replay(path) as run:  # not strict: the divergences are read after
        with chronicle.record("lookups"):
            lookup("a")
            lookup("c")
    found = run.divergences()
    above = divergence.report(found, "chronicle: the replay of lookups.json", spelling="marker")
    below = "\n".join(diff_text(run, found))
    assert 'key: "b" -> "c"' in above
    assert diff(run).changed()[0].input == ('key: "b" -> "c"',)  # the diff has it too ...
    assert below.splitlines()[1:] == [  # ... and says it by its number
        "~ lookup#2",
        "    input  (divergence 1 above)",
        "differ: 1 call differs; the first divergence is lookup#2",
    ]
    assert 'key: "b" -> "c"' in "\n".join(diff_text(run))  # nothing said above: the paths


def test_the_pytest_failure_of_a_strict_replay_says_the_change_once(pytester):
    write_lookups(pytester.path / "lookups.json", "a", "b")
    pytester.makepyfile(
        test_lookups="""
        import pytest
        import chronicle

        @chronicle.boundary("lookup", kind="tool")
        def lookup(key):
            return key.upper()

        @pytest.mark.chronicle_replay("lookups.json")
        def test_lookups():
            lookup("a")
            lookup("c")
        """
    )
    result = run_inline(pytester)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # pytest's own short summary repeats a failure's first lines (whole when CI is set): the
    # report itself is what says the change once
    report = out.split("short test summary info")[0]
    assert report.count('key: "b" -> "c"') == 1, out
    result.stdout.fnmatch_lines(
        [
            "1. the input of call 2 of 'lookup' differs from its recording*",
            '    key: "b" -> "c"',
            "diff of the replay against its recording (changed calls only):",
            "~ lookup#2",
            "    input  (divergence 1 above)",
            "differ: 1 call differs; the first divergence is lookup#2",
        ]
    )


# ---- counts ----------------------------------------------------------------------------------


def test_plural_says_one_thing_and_many_things():
    assert [plural(n, "recording") for n in (0, 1, 2)] == [
        "0 recordings",
        "1 recording",
        "2 recordings",
    ]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == (
        "3 entries"
    )


def test_a_corpus_of_one_recording_says_1_recording(agent, tmp_path, capsys, monkeypatch):  # noqa: F811
    record_corpus(agent, tmp_path / "incidents", 1)
    monkeypatch.chdir(Path(__file__).parent.parent)  # the entry is imported from here
    status = cli.main(["replay", str(tmp_path / "incidents"), "--entry", ENTRY])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.splitlines()[-1].startswith("1 recording: 1 passed (")


def pytest_corpus(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``pytest --chronicle-corpus incidents ARGS`` in this process, without pytest-xdist."""
    corpus = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, *args, "incidents"]
    return run_inline(pytester, "-p", "no:xdist", *corpus)


def test_pytest_corpus_reports_the_items_it_collected(agent, pytester):  # noqa: F811
    record_corpus(agent, pytester.path / "incidents", 3)
    listed = pytest_corpus(pytester, "--collect-only", "-q")
    listed.stdout.fnmatch_lines(
        [
            "incidents/request-00.json",
            "incidents/request-01.json",
            "incidents/request-02.json",
            "3 tests collected*",
        ]
    )
    chosen = pytest_corpus(pytester, "-k", "request-01")  # collected 3, then -k picks one
    chosen.stdout.fnmatch_lines(["collected 3 items / 2 deselected / 1 selected"])
    chosen.assert_outcomes(passed=1, deselected=2)
    assert "collected 0 items" not in chosen.stdout.str()


# ---- widths ----------------------------------------------------------------------------------

LONG = chronicle.AgentProfile(
    "Refund Agent for enterprise customers in the EMEA region",
    "Refund what policy allows",
    tenant_id="tenant_emea_enterprise_customers_refunds",
    model={"name": "gpt-4o-2024-08-06-with-a-long-deployment-name"},
)
LAST_SEEN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d$")


def page_of(*profiles: chronicle.AgentProfile) -> AgentPage:
    seen = datetime(2026, 12, 3, 14, 2, tzinfo=UTC)
    agents = [AgentSummary(p.to_json(), 41, seen, seen, ()) for p in profiles]
    return AgentPage(agents=agents, has_more=False, scanned=41, complete=True)


def test_agents_piped_prints_every_column_whole(fresh_control_plane):
    record_traces(fresh_control_plane, LONG, 1)
    table = run_cli(fresh_control_plane, "agents")  # stdout is a pipe
    assert table.returncode == 0, table.stderr
    _, row = table.stdout.splitlines()
    assert len(row) > 100  # wider than the 100 columns it was cut to
    assert "…" not in table.stdout
    assert LONG.name in row and str(LONG.tenant_id) in row and LAST_SEEN.search(row)
    assert row.startswith(LONG.agent_id + " ")


def test_agents_on_a_terminal_fits_it_and_never_cuts_last_seen():
    page = page_of(LONG, chronicle.AgentProfile("Triage", "Route tickets"))
    for width in (80, 100, 120):
        header, *rows = render_agents(page, width=width).splitlines()
        assert all(len(line) <= width for line in (header, *rows)), width
        assert header.endswith("LAST SEEN")
        assert all(LAST_SEEN.search(row) for row in rows)
        assert rows[0].split()[0].startswith("agt_")
    narrow = render_agents(page, width=80).splitlines()[1]
    assert "…" in narrow  # the long name, tenant or model gave room
    assert render_agents(page, width=None).splitlines()[1].count("…") == 0


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_table_fits_a_terminal_and_takes_a_pipe_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert table_width(Terminal()) == 90
    assert table_width(io.StringIO()) is None


# ---- chronicle serve on a port another program holds -----------------------------------------


@pytest.fixture
def web_server(tmp_path: Path) -> Iterator[int]:
    """A plain web server (python's http.server) on a free port: not a control plane."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_serve_on_a_port_a_web_server_holds_names_it_and_a_free_port(web_server, capsys):
    assert cli.main(["serve", "--port", str(web_server)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"port {web_server} is in use by a web server that is not a control plane" in line
    assert "GET /health: 404, server SimpleHTTP/" in line
    assert f"(pid {os.getpid()})" in line  # this process holds it
    free = int(re.search(r"--port (\d+) is free", line).group(1))  # type: ignore[union-attr]
    assert free != web_server and cli.port_is_free(free)
    assert "use that one" not in line


def test_serve_on_a_port_a_silent_program_holds_says_it_does_not_answer_http(capsys):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        assert cli.main(["serve", "--port", str(port)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"port {port} is in use by a program that does not answer HTTP" in line


def test_serve_on_a_port_a_control_plane_holds_says_to_record_to_it(capsys):
    with Impostor() as impostor:
        assert cli.main(["serve", "--port", str(impostor.port)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    url = f"http://127.0.0.1:{impostor.port}"
    assert f"a control plane (version impostor) already runs at {url}" in line
    assert f"export CHRONICLE_CONTROL_PLANE_URL={url}" in line and "--port " in line


def test_serve_without_port_runs_on_the_next_free_one_when_a_web_server_holds_it(
    web_server, tmp_path
):
    code = (
        "import chronicle.cli as cli\n"
        f"cli.serve.DEFAULT_PORT = {web_server}\n"
        "raise SystemExit(cli.main(['serve']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    env["XDG_DATA_HOME"] = str(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ctrl_c_reaches_it,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("  export CHRONICLE_CONTROL_PLANE_URL="):
                break
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    held, starting = lines[0], lines[1]
    assert held.startswith(f"port {web_server} is held by a web server that is not a control")
    moved = int(re.search(r"running on port (\d+) instead", held).group(1))  # type: ignore[union-attr]
    assert moved != web_server
    assert starting.startswith(f"starting the control plane on http://127.0.0.1:{moved}")
    assert f"control plane running at http://127.0.0.1:{moved}" in "".join(lines)
    assert process.returncode == 0 and "Traceback" not in err
