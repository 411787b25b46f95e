"""The ``chronicle`` command as a test runs it: ``python -m chronicle ARGV``, in this process.

A command is a function (``chronicle.cli.main``) reading its arguments, its environment and the
control plane, and writing to stdout and stderr: run here, it costs no interpreter start and no
imports (about a second of CPU each time in a child). What a child would have is set up around
the call and put back after it: the environment without the variables a user's shell may hold
(``CHRONICLE_*``, ``OPENAI_*``) plus the ones given, ``sys.argv[0]`` as ``python -m chronicle``
has it (messages name the program as the user ran it), the working folder (first on
``sys.path``, so ``--profile module:NAME`` finds a module there), and stdout and stderr as pipes
(not a terminal). The result is a ``CompletedProcess`` as ``subprocess.run`` returns it. A module
the command imports stays imported: give each test's modules names of their own.

A test about the process itself (a signal, the exit status of the interpreter, what a fresh
import does, ``serve``) starts a real child instead: ``in_child=True``.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import chronicle
from chronicle.cli import main

ROOT = Path(__file__).resolve().parents[2]
DROPPED = ("CHRONICLE_", "OPENAI_", "NO_COLOR")
"""Environment variables the command never sees unless a test gives them."""

_MAIN = str(Path(chronicle.__file__).parent / "__main__.py")


def command_env(**environ: str) -> dict[str, str]:
    """This environment without ``DROPPED`` variables, plus ``environ``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED)}
    return {**kept, **environ}


@contextlib.contextmanager
def _as_a_child(argv: list[str], env: dict[str, str], cwd: Path) -> Iterator[None]:
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    saved_path = list(sys.path)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [_MAIN, *argv]
    sys.path.insert(0, str(cwd))  # as ``python -m`` puts it first
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)


def run_cli(
    *argv: str, cwd: Path = ROOT, in_child: bool = False, **environ: str
) -> subprocess.CompletedProcess[str]:
    """``python -m chronicle ARGV`` with ``environ`` (see the module docstring); never raises
    for the command's own failure: its exit status is the result's ``returncode``."""
    env = command_env(**environ)
    if in_child:
        return subprocess.run(
            [sys.executable, "-m", "chronicle", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
            env=env,
        )
    out, err = _pipe(), _pipe()
    with _as_a_child(list(argv), env, cwd):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's usage errors and --help
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess(["chronicle", *argv], code, _read(out), _read(err))


def write_test(
    trace_id: str,
    url: str,
    folder: Path,
    profile: str = "tests.support.policy_agent:PROFILE",
    **environ: str,
) -> subprocess.CompletedProcess[str]:
    """``chronicle evaluate TRACE --url URL --profile PROFILE --write-test FOLDER``: the trace
    checked against the profile, and a regression test with its incident written to ``folder``
    when a check fails (exit status 1)."""
    argv = ["evaluate", trace_id, "--url", url, "--profile", profile, "--write-test", str(folder)]
    return run_cli(*argv, cwd=ROOT, in_child=False, **environ)


def _pipe() -> io.TextIOWrapper:
    """A text stream as a child's piped stdout is: UTF-8, not a terminal."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _read(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8")
