"""A resource a test leaves unclosed is named with its module in the run's summary (the suite's
check after each module), and with the test itself by the leak finder run by hand."""

from __future__ import annotations

import gc

import pytest

from tests.support.inline import run_inline

pytest_plugins = ["pytester"]

LEAKY = """
import socket

def test_leaks():
    holder = {"socket": socket.socket()}
    holder["itself"] = holder  # a cycle: only a collection frees it

def test_after_it():
    pass
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The inner run with the collector's automatic runs off, so the cycle is freed by the check
    (``gc.collect`` still works) and not by chance in whichever test it happened in."""
    pytester.makepyfile(test_leaky=LEAKY, test_clean="def test_clean():\n    pass\n")
    gc.disable()
    try:
        return run_inline(pytester, "-p", "tests.support.leftovers", "--leftovers", *args)
    finally:
        gc.enable()


def test_a_module_that_leaves_a_socket_unclosed_is_named_in_the_summary_and_fails_nothing(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester)
    result.assert_outcomes(passed=3)  # a leak of test code fails no test, not even its own
    out = result.stdout.str()
    summary = out[out.index("resources left unclosed (by module)") :]
    assert "test_leaky.py: unclosed <socket.socket" in summary
    assert "test_clean" not in summary
    assert "Close each in the test that made it" in out and "tests.support.leak_finder" in out


def test_the_leak_finder_names_the_test_that_left_it(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "-p", "tests.support.leak_finder")
    result.assert_outcomes(passed=3)  # the finder collects first, after each test
    out = result.stdout.str()
    summary = out[out.index("leak_finder: unclosed leftovers by test") :]
    assert "test_leaky.py::test_leaks\n    unclosed <socket.socket" in summary
    assert "test_after_it" not in summary and "test_clean" not in summary
    assert "1 leftovers in 1 tests" in summary
