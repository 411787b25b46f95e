"""The README quickstart works as written, run the way a new user would run it; the replay
guide's incident test is the worked example and its ``chronicle_config`` names every key."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from chronicle.testing import LocalControlPlane
from chronicle.testing.pytest_plugin import CONFIG_KEYS

README = Path(__file__).resolve().parent.parent / "README.md"
REPLAY_GUIDE = README.parent / "docs" / "guides" / "replay.md"


def _blocks(language: str, page: Path = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_the_quickstart_runs_as_written(tmp_path):
    (setup,) = [b for b in _blocks("bash") if "control-plane serve" in b]
    (code,) = [b for b in _blocks("python") if "chronicle.replay_trace(" in b]
    documented = re.search(r"--port (\d+)", setup)
    assert documented is not None, "the quickstart names no port"
    port = int(documented.group(1))
    if not _port_free(port):  # someone else's server on the documented port: use another
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        code = code.replace(str(port), str(free))
        port = free
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    with LocalControlPlane(port=port) as control_plane:
        result = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.strip().splitlines()
        trace_id = lines[0].rsplit("/", 1)[1]
        assert lines[0] == f"http://127.0.0.1:{port}/#chronicle/{trace_id}"
        assert lines[1] == "[('planner', 'stub'), ('search', 'run')]"
        assert len(control_plane.trace_envelopes(trace_id)) == 2
        assert control_plane.search(session_id="sess-1")[0]["trace_id"] == trace_id


def test_the_incident_test_in_the_replay_guide_is_the_worked_example():
    (shown,) = [b for b in _blocks("python", REPLAY_GUIDE) if "@pytest.mark.chronicle_replay(" in b]
    example = README.parent / "examples" / "test_incident.py"
    assert shown in example.read_text(encoding="utf-8")
    (conftest,) = [b for b in _blocks("python", REPLAY_GUIDE) if "def chronicle_config" in b]
    keys = re.findall(r'^\s+"(\w+)":', conftest, flags=re.M)
    assert keys == list(CONFIG_KEYS)  # every key the plugin takes, and no other
