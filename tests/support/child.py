"""Running a snippet in a fresh Python: the global TracerProvider can be set once per process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence


def ctrl_c_reaches_it() -> None:
    """``preexec_fn`` for a child the test interrupts: SIGINT back to its default.

    A shell starts background commands with SIGINT ignored (``make test &``, ``nohup``), and a
    child inherits that, so Python would install no KeyboardInterrupt handler and the test's
    SIGINT would do nothing: the child stays up and the test waits for it in vain.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


PYTEST_PLUGINS = "chronicle.testing.pytest_plugin,xdist.plugin,xdist.looponfail"
"""The plugins a pytest the tests start loads: Chronicle's and pytest-xdist (``-n``), no other.

The environment has more installed (logfire's, langsmith's, anyio's), which a pytest loads by
their entry points on every start: most of a second of CPU each time, for plugins no test here
uses. ``ONLY_OUR_PLUGINS`` is the environment that says so."""

ONLY_OUR_PLUGINS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_PLUGINS": PYTEST_PLUGINS}


def child_env(**env: str) -> dict[str, str]:
    """This environment without any ``OTEL_*`` or ``CHRONICLE_*`` variable, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CHRONICLE_"))}
    return {**clean, **env}


def run_child(
    code: str, *, argv: Sequence[str] = (), check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a new interpreter, optionally behind a launcher ``argv``."""
    result = subprocess.run(
        [*argv, sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=120,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result
