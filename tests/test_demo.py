"""``make demo`` tells the whole story, keeps its data, and stays up until Ctrl-C."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from chronicle.testing import LocalControlPlane
from tests.support.child import ctrl_c_reaches_it

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r"see it:\s+(?P<base>http://127\.0\.0\.1:\d+)/#chronicle/(?P<trace>[0-9a-f]{32})")


def _env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "NO_COLOR"))}
    return {**env, "XDG_DATA_HOME": str(data), **extra}


def _refused(base: str) -> bool:
    try:
        httpx.get(f"{base}/health", timeout=2)
    except httpx.ConnectError:
        return True
    return False


def test_make_demo_exits_at_once_with_the_flag_and_keeps_its_data(tmp_path):
    result = subprocess.run(
        ["make", "-s", "demo"],
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
    assert _refused(link["base"])  # and nothing left running
    database = tmp_path / "chronicle" / "demo" / "control-plane.db"
    with LocalControlPlane(database_path=database) as again:  # the data outlived the run
        stored = again.trace(trace_id)
        assert stored is not None and stored["metadata"]["user_id"] == "ada"


def test_the_demo_stays_up_until_ctrl_c_and_its_link_answers(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "examples/demo.py"],
        cwd=REPO,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )
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
    assert _refused(link["base"])
