"""``make demo`` tells the whole story, keeps its data, and stays up until Ctrl-C."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from chronicle.cli.serve import PageServer
from chronicle.testing import LocalControlPlane
from tests.support.child import ctrl_c_reaches_it

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"see it:\s+(?P<base>http://127\.0\.0\.1:\d+)/#chronicle/(?P<trace>[0-9a-f]{32})")
PAGE = re.compile(r"the page:\s+(?P<base>http://127\.0\.0\.1:\d+)/trace/(?P<trace>[0-9a-f]{32})")


def _env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "NO_COLOR"))}
    return {**env, "XDG_DATA_HOME": str(data), **extra}


def _gone(base: str, trace_id: str) -> bool:
    """Whether the demo's control plane at ``base`` is gone: nothing answers there, or what
    answers does not hold the demo's trace (another control plane took the free port since: a
    demo of another terminal, or of a test suite running beside this one)."""
    try:
        answer = httpx.get(f"{base}/v1/traces/{trace_id}", timeout=2)
    except httpx.ConnectError:
        return True
    return answer.status_code == 404


def test_make_demo_exits_at_once_with_the_flag_and_keeps_its_data(tmp_path):
    # (-o: the demo as `make demo` runs it, never its install step, which an edit of
    # pyproject.toml would start here, into the environment other tests are running from)
    result = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed-demo", "demo"],
        cwd=REPO,
        env=_env(tmp_path, CHRONICLE_DEMO_EXIT="1"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Traceback" not in result.stderr
    link = LINK.search(out)
    assert link, out
    trace_id = link["trace"]
    rows = [line.split()[:4] for line in out.splitlines() if re.match(r"\s+\S+#\d\s", line)]
    assert rows == [
        ["model#1", "llm", "ok", rows[0][3]],
        ["delete_file#1", "tool", "ok", rows[1][3]],
        ["model#2", "llm", "ok", rows[2][3]],
    ]
    assert "agent   support-agent (agt_" in out
    assert "call log: model#1:stub, delete_file#1:run, model#2:stub" in out
    assert "the fix holds: True" in out
    assert f"show {trace_id} --envelope delete_file#1" in out
    assert "stays up" not in out  # the flag: no waiting
    assert _gone(link["base"], trace_id)  # and nothing left running
    database = tmp_path / "chronicle" / "demo" / "control-plane.db"
    with LocalControlPlane(database_path=database) as again:  # the data outlived the run
        stored = again.trace(trace_id)
        assert stored is not None and stored["metadata"]["user_id"] == "ada"


def test_the_demo_stays_up_until_ctrl_c_its_link_answers_and_another_runs_beside_it(tmp_path):
    port = _free_port()  # the port a second demo prefers too (8800 for a user)
    process = _demo(tmp_path, "--port", str(port), stay_up=True)
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None and process.stderr is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        while not seen or "press Ctrl-C" not in seen[-1]:
            seen.append(lines.get(timeout=120))
        link = LINK.search("".join(seen))
        assert link, "".join(seen)
        page = httpx.get(f"{link['base']}/", timeout=10)
        assert page.status_code == 200 and "AgentPlane" in page.text
        trace = httpx.get(f"{link['base']}/v1/traces/{link['trace']}", timeout=10)
        assert trace.status_code == 200 and trace.json()["envelope_count"] == 3
        ours = PAGE.search("".join(seen))  # Chronicle's page of the same trace, served beside it
        assert ours and ours["trace"] == link["trace"], "".join(seen)
        nested = httpx.get(f"{ours['base']}/trace/{ours['trace']}", timeout=10)
        assert nested.status_code == 200
        assert [m for m in re.findall(r'data-call="([^"]+)"', nested.text)] == [
            "model#1",
            "delete_file#1",
            "model#2",
        ]
        index = httpx.get(f"{ours['base']}/", timeout=10)
        assert f'href="/trace/{ours["trace"]}"' in index.text
        # a second demo while this one holds the port and the database
        other = _finish(_demo(tmp_path, "--port", str(port)))
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(60)
        finally:
            if process.poll() is None:  # never leave the demo (and its control plane) running
                process.kill()
        reader.join(10)
        process.stdout.close()
    stderr = process.stderr.read()
    process.stderr.close()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert "stopped the control plane" in "".join(rest)
    assert _gone(link["base"], link["trace"])
    other_code, out, err = other
    assert other_code == 0 and "the fix holds: True" in out, out + err
    assert "another demo is using the demo's database" in out
    assert f"port {port} is held by another control plane" in out
    beside = RUNNING.search(out)
    assert beside and beside["url"] != f"http://127.0.0.1:{port}"
    second = LINK.search(out)
    assert second and second["base"] == beside["url"]


# ---- port 8800 taken: by another demo, by the Quickstart's control plane -----------------------

RUNNING = re.compile(
    r"control plane running at (?P<url>http://127\.0\.0\.1:\d+) \(database (?P<db>.+)\)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _demo(data: Path, *args: str, stay_up: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "examples/demo.py", *([] if stay_up else ["--exit"]), *args],
        cwd=REPO,
        env=_env(data),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=150)
    finally:
        if process.poll() is None:  # never leave a demo (and its control plane) running
            process.kill()
            process.communicate()
    return process.returncode, out, err


def test_two_demos_started_together_both_tell_the_truth(tmp_path):
    port = _free_port()  # the port both prefer (8800 for a user), free when they start
    demos = [_demo(tmp_path, "--port", str(port)) for _ in range(2)]
    results = [_finish(d) for d in demos]
    for code, out, err in results:
        assert code == 0, out + err
        assert "Traceback" not in err and "the fix holds: True" in out
    found = [RUNNING.search(out) for _, out, _ in results]
    assert all(found), [out for _, out, _ in results]
    kept = str(tmp_path / "chronicle" / "demo" / "control-plane.db")
    traces = []
    for (_, out, _), m in zip(results, found, strict=True):
        link = LINK.search(out)
        assert link and m and link["base"] == m["url"]  # each recorded where it says it runs
        traces.append((link["trace"], m["db"] == kept))
        if m["db"] != kept:  # the other one held the database: this one says so
            assert "another demo is using the demo's database" in out
        if m["url"] != f"http://127.0.0.1:{port}":  # the other one held the port: said too
            assert f"port {port} " in out
        assert _gone(m["url"], link["trace"])
    # (under load one may finish before the other binds: then both used the port in turn)
    with LocalControlPlane(database_path=Path(kept)) as again:  # each database line was true
        for trace_id, in_kept in traces:
            assert (again.trace(trace_id) is not None) == in_kept


def test_the_demo_says_it_leaves_the_quickstarts_control_plane_and_can_use_it(
    tmp_path, control_plane
):
    quickstart = control_plane  # `control-plane serve --port 8800` from the Quickstart
    code, out, err = _finish(_demo(tmp_path, "--port", str(quickstart.port)))
    assert code == 0, out + err
    assert f"port {quickstart.port} is held by another control plane" in out
    assert f"examples/demo.py --control-plane {quickstart.url}" in out
    own = RUNNING.search(out)
    assert own and own["url"] != quickstart.url
    assert quickstart.search(session_id="sess-demo") == []  # nothing went into the other one

    code, out, err = _finish(_demo(tmp_path, "--control-plane", quickstart.url))
    assert code == 0, out + err
    assert f"recording into the control plane at {quickstart.url}" in out
    assert "the fix holds: True" in out
    link = LINK.search(out)
    assert link and link["base"] == quickstart.url
    assert [t["trace_id"] for t in quickstart.search(session_id="sess-demo")] == [link["trace"]]
    assert quickstart.running  # the demo started none, and stopped none


def test_the_demo_with_a_control_plane_url_where_none_runs_says_so(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    code, _, err = _finish(_demo(tmp_path, "--control-plane", url))
    assert code == 1 and "Traceback" not in err
    assert f"no control plane answers at {url}" in err


def test_the_pages_run_on_another_port_when_the_one_after_the_control_planes_is_taken(
    control_plane,
):
    # The demo and chronicle serve prefer the port after their control plane's for the pages.
    # Another program may take it at any moment (another demo's control plane, or a client's
    # connection on a port of the ephemeral range), so it is bound, never checked first:
    # here it is held when the pages start, as if taken just after a check found it free.
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        with PageServer(control_plane.url, prefer_port=taken) as pages:
            assert pages.url != f"http://127.0.0.1:{taken}"
            index = httpx.get(f"{pages.url}/", timeout=10)
    assert index.status_code == 200 and "recent traces" in index.text.lower(), index.text
    free = _free_port()
    with PageServer(control_plane.url, prefer_port=free) as pages:
        assert pages.url == f"http://127.0.0.1:{free}"  # free: the preferred port is used
