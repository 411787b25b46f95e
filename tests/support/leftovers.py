"""What a test leaves unclosed, blamed on the module that left it (a pytest plugin,
``tests/conftest.py`` loads it).

A resource dropped unclosed (an ``openai.OpenAI`` client's socket) is finalized when the garbage
collector frees it: at once where nothing else refers to it, but an SDK client sits in reference
cycles (its resources refer back to it), so it waits for the collector's next full run, in
whatever later test that happens, where it is shown as that test's warning (pyproject's
``filterwarnings`` has ``default::ResourceWarning``: a leak of test code must not fail an
unrelated test). So with ``--leftovers``, after the last test of each module on a worker (its
module fixtures torn down), ``pytest_runtest_teardown`` runs a full collection (``collect``) and
the run's summary names the module and its leftovers ("resources left unclosed (by module)").
It is off by default: a full collection in a worker that imported the frameworks takes up to
3 s (30 of them took 1.7 to 2.9 s in one ``make test``), and with it on the suite's CPU time grew
by about 110 s of 640. It reports rather
than fails: whether a dropped client's socket is still open when it is finalized depends on the
order the collector finalizes a cycle in, so the same leak shows in one run and not the next, and
a failing check would fail the suite at random.
``tests/support/leak_finder.py`` (run by hand) names the test inside the module.

A command or a pytest run in the test's own process (``tests/support/cli.py``, ``inline.py``)
gets no collection of its own: what it leaves unclosed is a leak like any other (where a child's
exit would have hidden it), found by the same check. A full collection after each of those runs
(about 130 in the suite, ignoring their ``ResourceWarning``s) found one thing in all of them,
``chronicle evaluate --judge`` leaving its SDK client open, since fixed in ``chronicle``.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
import warnings
from collections.abc import Generator
from typing import Any

import pytest


def collect() -> list[str]:
    """Run a full collection and say what it finalized unclosed: each ``ResourceWarning``
    (``unclosed <socket ...>``) and each exception a finalizer raised, with where the object was
    made when ``tracemalloc`` traces (``PYTHONTRACEMALLOC=20``). None of them is raised."""
    found: list[str] = []

    def unraisable(args: sys.UnraisableHookArgs) -> None:
        found.append(
            f"{args.err_msg or 'Exception ignored in'}: {args.object!r}: {args.exc_value!r}"
        )

    previous, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            gc.collect()
    finally:
        sys.unraisablehook = previous
    found += [
        str(warning.message) + _made_at(warning.source)
        for warning in caught
        if issubclass(warning.category, ResourceWarning)
    ]
    return found


def _made_at(source: object) -> str:
    made = tracemalloc.get_object_traceback(source) if source is not None else None
    return "" if made is None else "\n  made at:\n" + "\n".join(made.format())


_KEY = "chronicle-leftovers"
"""The name of the user property a test's teardown report carries the module's leftovers in
(from a pytest-xdist worker to the controller, which prints them)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    """After the last test of a module on this worker, collect, and hand what the module left
    unclosed to the report (``pytest_terminal_summary`` prints it)."""
    result = yield
    if not item.config.getoption("leftovers"):
        return result
    module = item.getparent(pytest.Module)
    if nextitem is not None and nextitem.getparent(pytest.Module) is module:
        return result
    leftovers = collect()
    if leftovers:
        name = module.nodeid if module is not None else item.nodeid
        item.user_properties.append((_KEY, f"{name}: " + "; ".join(leftovers)))
    return result


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--leftovers",
        action="store_true",
        default=False,
        help="after the last test of each module on a worker, a full garbage collection that "
        "names in the summary what the module left unclosed (about 2 s a module in a worker "
        "that imported the frameworks: not in make test)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Summary(), "chronicle-leftovers-summary")


class _Summary:
    """Each module's leftovers, as this session (the controller, under xdist) received them."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.found += [str(value) for key, value in report.user_properties if key == _KEY]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Name each module that left something unclosed, and what, with how to find the test."""
        if not self.found:
            return
        terminalreporter.section("resources left unclosed (by module)", yellow=True)
        for line in dict.fromkeys(self.found):
            terminalreporter.line(line)
        terminalreporter.line(
            "Close each in the test that made it: `with openai.OpenAI(...) as client:`, "
            "`client.close()`, a fixture that closes it. To find that test, run the module with "
            "`-p tests.support.leak_finder` (and PYTHONTRACEMALLOC=20 for where each was made)."
        )
