"""A pytest in a new process, and the one corpus run on two pytest-xdist workers that several
test modules assert on.

Each pytest-xdist worker a nested ``pytest -n 2`` starts is a new interpreter importing pytest,
the plugins, Chronicle and the agent (about a second of CPU each, three processes a run), so the
corpus's claims about a run on two workers are asserted on one such run, made once per session
(``corpus_on_two_workers``): items one per recording, passed and failed on both workers, the
reports merged from both, ``--chronicle-jobs`` ignored with a warning, a plan entry no share
reaches said once, each recording read once and no connection opened. A test using it is marked
``xdist_group(TWO_WORKERS_GROUP)`` so that ``make test`` (``--dist loadgroup``) runs them on one
worker, which makes the run once.

The fixture is in ``tests/support/two_workers.py``: a test module lists it in its
``pytest_plugins`` (and imports nothing from it, which pytest would then not rewrite).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.child import ONLY_OUR_PLUGINS

REPO = Path(__file__).parent.parent.parent

TWO_WORKERS_GROUP = "corpus-on-two-workers"
"""The ``xdist_group`` of the tests asserting on ``corpus_on_two_workers``."""

WATCH = """
import os
import socket

import pytest

from chronicle.save import incident

LOG = os.environ["CORPUS_WATCH_LOG"]
patch = pytest.MonkeyPatch()


def note(line):
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()} {line}\\n")


read = incident.Incident.read.__func__
connect, connect_ex = socket.socket.connect, socket.socket.connect_ex


def reading(cls, path):
    note(f"read {os.path.basename(path)}")
    return read(cls, path)


def connecting(self, address):
    note(f"connect {address!r}")
    return connect(self, address)


def connecting_ex(self, address):
    note(f"connect {address!r}")
    return connect_ex(self, address)


def pytest_configure():
    patch.setattr(incident.Incident, "read", classmethod(reading))
    patch.setattr(socket.socket, "connect", connecting)
    patch.setattr(socket.socket, "connect_ex", connecting_ex)


def pytest_unconfigure():
    patch.undo()  # (a pytest in the test's own process leaves them as they were)
"""
"""A conftest noting, in every pytest process, each recording read and each connection made
(in the file ``CORPUS_WATCH_LOG`` names): ``PID read NAME`` and ``PID connect ADDRESS``."""


def run_pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> pytest.RunResult:
    """``pytest -p no:cacheprovider ARGS`` in a new process in ``folder``, loading Chronicle's
    plugin and pytest-xdist only (``ONLY_OUR_PLUGINS``), as ``pytester.runpytest_subprocess``
    runs it for a test using ``pytester``; with ``env`` added to this environment."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    environment.update(ONLY_OUR_PLUGINS, PY_COLORS="0", **(env or {}))
    command = [sys.executable, "-m", "pytest", f"--basetemp={folder / 'basetemp'}"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(done.stdout, done.stderr, sep="\n")  # shown when the test asserting on it fails
    code: int | pytest.ExitCode = done.returncode
    with contextlib.suppress(ValueError):
        code = pytest.ExitCode(code)
    elapsed = time.monotonic() - started
    return pytest.RunResult(code, done.stdout.splitlines(), done.stderr.splitlines(), elapsed)


@dataclass(frozen=True)
class CorpusRun:
    """``corpus_on_two_workers``: the folder, its recordings, the run and what it noted."""

    folder: Path
    paths: Sequence[Path]
    """``incidents/request-NN.json``: each recorded live, but ``CORRUPT`` and ``DIVERGED``."""
    result: pytest.RunResult
    noted: Sequence[str]
    """``WATCH``'s lines: ``PID read NAME`` and ``PID connect ADDRESS``."""
    live_calls: int
    """How many requests the model server got while the corpus ran (none: each replays)."""

    def text(self, name: str) -> str:
        """A file the run wrote in its folder (``summary.md``, ``report.html``, ``out.xml``)."""
        return (self.folder / name).read_text(encoding="utf-8")

    def readers(self) -> dict[str, str]:
        """Each recording read, by the process (its pid) that read it."""
        reads = [line.split() for line in self.noted if line.split()[1] == "read"]
        return {name: pid for pid, _, name in reads}


RECORDINGS = 20
CORRUPT = 3
"""The recording made unreadable (``{``): its item fails saying it is not JSON."""
DIVERGED = 4
"""The recording edited so the code no longer asks what it recorded (diverged)."""
UNREACHED = "serach_kb"
"""The run's ``--chronicle-run``: a misspelled ``search_kb``, which no recording's calls reach
(each worker's share passes over it; the run fails over it, naming the close name)."""
