"""The framework modules: the ones the dev environment holds run here, the others elsewhere.

Frameworks whose pins conflict with the dev environment (``ISOLATED``) are tested by ``make
test-frameworks``, each in a venv of its own. Where such a framework is not importable (the dev
environment), its module is not collected, and the run's summary says where it runs, so nothing
is skipped silently.
"""

from __future__ import annotations

import importlib.util

import pytest

ISOLATED = {
    "test_autogen.py": "autogen_agentchat",
    "test_llama_index.py": "llama_index.core",
    "test_crewai.py": "crewai",
    "test_google_adk.py": "google.adk",
}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


collect_ignore = [name for name, module in ISOLATED.items() if not _importable(module)]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the framework modules this environment left to ``make test-frameworks``."""
    if collect_ignore:
        terminalreporter.write_line(
            "tests/frameworks: "
            + ", ".join(sorted(collect_ignore))
            + " run in environments of their own: make test-frameworks"
        )
