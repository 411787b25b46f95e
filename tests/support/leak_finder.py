"""Which test left a resource unclosed: a pytest plugin run by hand, not by ``make test``.

    .venv/bin/python -m pytest -p tests.support.leak_finder -n 2 -p no:cacheprovider tests/test_x.py

After every test (its fixtures torn down) it runs a full collection (``leftovers.collect``) and
lists, under the test's id, each resource the collection finalized unclosed (a client's socket:
``ResourceWarning: unclosed <socket ...>``) and each exception a finalizer raised. The list is
printed in the run's summary (from every xdist worker) and, with ``--leak-report FILE``, appended
to that file, a line a leftover: ``test id<TAB>what``. ``PYTHONTRACEMALLOC=20`` adds where each
one was made (slower). A collection a test costs a tenth of a second or so: run the suite in
parts (a folder, a dozen files), not all at once on a shared machine.

The suite's own guard (``leftovers.pytest_runtest_teardown``) collects only once a module; run
this to name the test inside the module it blamed.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_FOUND = pytest.StashKey[list[tuple[str, str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--leak-report",
        metavar="FILE",
        default=None,
        help="leak_finder: also append each test's unclosed leftovers to FILE",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FOUND] = []


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, Any]:
    """Collect after the test's own teardown (``trylast``: inside the suite's module guard, so
    the test is named, not its module)."""
    try:
        return (yield)
    finally:
        _note(item.config, item.nodeid, collect())


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    _note(config, "(after the last test)", collect())
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller prints the summary
        workeroutput["leaks"] = config.stash[_FOUND]


def pytest_testnodedown(node: Any, error: object) -> None:
    """(xdist's controller) take a worker's leftovers for the summary."""
    found = getattr(node, "workeroutput", {}).get("leaks", [])
    node.config.stash[_FOUND].extend(tuple(pair) for pair in found)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = terminalreporter.config.stash[_FOUND]
    terminalreporter.section("leak_finder: unclosed leftovers by test")
    if not found:
        terminalreporter.write_line("none: every test closed what it opened")
        return
    tests = sorted({nodeid for nodeid, _ in found})
    for nodeid in tests:
        terminalreporter.write_line(nodeid)
        for what in sorted({what for test, what in found if test == nodeid}):
            terminalreporter.write_line("    " + what.replace("\n", "\n    "))
    terminalreporter.write_line(f"{len(found)} leftovers in {len(tests)} tests")


def collect() -> list[str]:
    # Imported here, not at the top: tests/conftest.py loads leftovers as a plugin, which pytest
    # refuses (a warning, an error here) for a module imported before it (by ``-p`` of this one).
    from tests.support.leftovers import collect

    return collect()


def _note(config: pytest.Config, nodeid: str, leftovers: list[str]) -> None:
    config.stash[_FOUND].extend((nodeid, what) for what in leftovers)
    report = config.getoption("--leak-report")
    if leftovers and report:
        with Path(report).open("a", encoding="utf-8") as file:
            for what in leftovers:
                file.write(f"{nodeid}\t{what.replace(chr(10), ' | ')}\n")
