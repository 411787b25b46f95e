"""What the pytest plugin costs a session that replays nothing: pytest loads it in every session
of a project with Chronicle installed, and its replay part (``replay_plugin``: the replay engine,
the primitives' models, the runtime) is loaded only when a collected test needs it.

Each session here is a new interpreter (what a module has loaded shows only there), with the
plugins ``tests/support/child.py`` names; a ``conftest.py`` writes what was loaded when the
session ended."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.child import ONLY_OUR_PLUGINS, child_env
from tests.support.inline import run_inline

pytest_plugins = ["pytester"]

HEAVY = ("chronicle.replay", "agentplane_primitives.models", "chronicle.runtime")
"""What a session with no replay test never imports (each, and the modules under it)."""

SEEN = """
import json
import sys


def pytest_sessionfinish(session):
    with open("loaded.json", "w", encoding="utf-8") as out:
        json.dump(sorted(sys.modules), out)
"""

PLAIN = """
def test_adds():
    assert 1 + 2 == 3
"""

MARKED = """
import pytest

import chronicle


@chronicle.boundary("add")
def add(a, b):
    return a + b


@pytest.mark.chronicle_replay("incidents/add.json", record_mode="once")
def test_records(chronicle_run):
    assert add(1, 2) == 3


@pytest.mark.chronicle_replay("incidents/add.json")
def test_replays(chronicle_run):
    assert add(1, 2) == 3
    assert [(call.name, call.mode) for call in chronicle_run.call_log()] == [("add", "stub")]
"""


OWN_REPLAY = """
from pathlib import Path

import chronicle
from chronicle.save.incident import Incident
from chronicle.testing import capture


@chronicle.boundary("add")
def add(a, b):
    return a + b


def test_changed_input():
    with capture() as sent, chronicle.record("sum"):
        add(1, 2)
    Incident.of(sent.envelopes).write(Path("add.json"))
    with chronicle.replay(Path("add.json"), strict=True):
        add(5, 2)
"""


def session(folder: Path, *args: str) -> tuple[str, set[str]]:
    """``pytest ARGS`` in ``folder``, in a new process: its output, and the modules it loaded."""
    (folder / "conftest.py").write_text(textwrap.dedent(SEEN), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env=child_env(**ONLY_OUR_PLUGINS),
        timeout=120,
    )
    loaded = set(json.loads((folder / "loaded.json").read_text(encoding="utf-8")))
    return done.stdout + done.stderr, loaded


def heavy(loaded: set[str]) -> list[str]:
    """The modules of ``HEAVY`` among ``loaded``."""
    return sorted(m for m in loaded if m in HEAVY or m.startswith(tuple(f"{h}." for h in HEAVY)))


def test_a_session_with_no_replay_test_loads_no_replay_code(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(PLAIN, encoding="utf-8")
    output, collected = session(tmp_path, "--co", "-q")
    assert "test_plain.py::test_adds" in output
    assert "chronicle.testing.pytest_plugin" in collected  # the plugin is loaded, ...
    assert heavy(collected) == []  # ... without the replay's part
    assert "chronicle.testing.replay_plugin" not in collected

    output, ran = session(tmp_path, "-q")
    assert "1 passed" in output
    assert heavy(ran) == []


def test_a_session_with_a_marked_test_records_and_replays_it(tmp_path: Path) -> None:
    (tmp_path / "test_marked.py").write_text(MARKED, encoding="utf-8")
    output, loaded = session(tmp_path, "-q")
    assert "2 passed" in output, output
    assert "wrote incidents/add.json (1 call)" in output
    assert (tmp_path / "incidents" / "add.json").is_file()
    assert {"chronicle.testing.replay_plugin", *HEAVY} <= loaded


def test_a_diverged_replay_a_test_opened_itself_is_reported_as_the_plugin_reports_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_own=OWN_REPLAY)  # no marker, no fixture: nothing loaded the part
    result = run_inline(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "chronicle: the replay diverged from its recording in 1 place:",
            "*a: 1 -> 5",
            "raised at test_own.py:18",
        ]
    )
