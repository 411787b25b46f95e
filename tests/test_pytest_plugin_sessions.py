"""The pytest plugin's sessions (each test runs a small test file in a pytest subprocess):
``trace_id=`` markers replay from each pytest-xdist worker's own control plane, and a test's own
settings leave the session's configuration to the tests after it.
"""

from __future__ import annotations

import chronicle
from chronicle.testing import LocalControlPlane
from tests.test_pytest_plugin import run, write_lookups

pytest_plugins = ["pytester"]

# ---- trace_id= markers under pytest-xdist ----------------------------------------------------

WORKER_CONFTEST = """
import shutil
from pathlib import Path

import pytest

from chronicle.testing import LocalControlPlane

RECORDED = Path({database!r})


@pytest.fixture(scope="session")
def worker_control_plane(tmp_path_factory, worker_id):
    # each xdist worker serves its own copy of the recorded database
    folder = tmp_path_factory.mktemp(f"control-plane-{{worker_id}}")
    for part in RECORDED.parent.iterdir():
        if part.name.startswith(RECORDED.name) and not part.name.endswith(".lock"):
            shutil.copy(part, folder / part.name)
    with LocalControlPlane(database_path=folder / RECORDED.name) as control_plane:
        yield control_plane


@pytest.fixture
def chronicle_config(worker_control_plane):
    return {{"settings": {{"control_plane_url": worker_control_plane.url}}}}
"""

TRACE_ID_TESTS = """
import pytest

import chronicle


@chronicle.boundary("lookup", kind="tool")
def lookup(key):
    raise AssertionError("stubbed by the replay")


@pytest.mark.parametrize("n", range(4))
@pytest.mark.chronicle_replay(trace_id={a[0]!r}, span_id={a[1]!r})
def test_a(n, chronicle_run):
    assert lookup("a") == "A"
    assert [c.mode for c in chronicle_run.call_log()] == ["stub"]


@pytest.mark.parametrize("n", range(4))
@pytest.mark.chronicle_replay(trace_id={b[0]!r}, span_id={b[1]!r})
def test_b(n):
    assert lookup("b") == "B"


def test_the_fixture_reads_the_same_control_plane(chronicle_replay):
    with chronicle_replay(trace_id={b[0]!r}, span_id={b[1]!r}) as run:
        assert lookup("b") == "B"
    assert [c.mode for c in run.call_log()] == ["stub"]
"""


def test_trace_id_markers_replay_from_each_xdist_workers_own_control_plane(pytester, tmp_path):
    """Each worker serves its own copy of the recorded database (its own port): the marker and
    the fixture read from the one ``chronicle_config`` names, where they read the configured
    control plane (none here) and every test failed at setup."""

    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: str) -> str:
        return key.upper()

    database = tmp_path / "recorded" / "control_plane.db"
    spans = {}
    with LocalControlPlane(database_path=database) as control_plane:
        chronicle.configure(control_plane_url=control_plane.url, flush_interval=0.05)
        for key in ("a", "b"):
            with chronicle.record(f"lookup {key}") as session:
                lookup(key)
            spans[key] = (session.trace_id, session.span_id)
        assert chronicle.flush(10)
        for trace_id, _ in spans.values():
            control_plane.wait_for_envelopes(trace_id, 1)
        chronicle.reset()
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makeconftest(WORKER_CONFTEST.format(database=str(database)))
    pytester.makepyfile(test_by_trace=TRACE_ID_TESTS.format(a=spans["a"], b=spans["b"]))
    # Every test on both workers (--dist each), each worker replaying from its own control
    # plane: how xdist shares the tests out (one busy worker may take all of them) is no part
    # of what is tested.
    result = run(pytester, "-n", "2", "--dist", "each", "-v")
    result.assert_outcomes(passed=2 * 9)
    for worker in ("gw0", "gw1"):
        passed = [line for line in result.outlines if f"[{worker}]" in line and "PASSED" in line]
        assert len(passed) == 9, "\n".join(result.outlines)


SESSION_CONFTEST = """
import pytest

import chronicle
from chronicle.testing import LocalControlPlane


@chronicle.boundary("lookup", kind="tool")
def lookup(key):
    return key.upper()


RECORDED = {}


@pytest.fixture(scope="session", autouse=True)
def configured():
    # the worker's control plane, configured once for the session, with one recorded request
    with LocalControlPlane() as control_plane:
        chronicle.configure(control_plane_url=control_plane.url, flush_interval=0.05)
        with chronicle.record("seed") as session:
            lookup("a")
        assert chronicle.flush(10)
        control_plane.wait_for_envelopes(session.trace_id, 1)
        RECORDED["ids"] = (session.trace_id, session.span_id)
        yield
"""

SETTINGS_TESTS = """
import pytest

from conftest import lookup


@pytest.fixture
def chronicle_config():
    return {"settings": {"service_name": "a-test-of-its-own"}}


@pytest.mark.chronicle_replay("lookups.json")
def test_replayed_with_settings_of_its_own():
    assert lookup("a") == "A"


@pytest.mark.chronicle_replay("recorded.json")
def test_recorded_with_settings_of_its_own():
    assert lookup("b") == "B"
"""

AFTER_TESTS = """
from conftest import RECORDED, lookup


def test_the_session_configuration_still_reads_its_control_plane(chronicle_replay):
    trace_id, span_id = RECORDED["ids"]
    with chronicle_replay(trace_id=trace_id, span_id=span_id) as run:
        assert lookup("a") == "A"
    assert [c.mode for c in run.call_log()] == ["stub"]
"""


def test_a_tests_own_settings_leave_the_sessions_configuration_to_the_tests_after_it(pytester):
    """Which tests share a pytest-xdist worker, and in which order, changes from run to run: a
    test whose ``chronicle_config`` has settings (replayed or recorded) used to leave Chronicle
    unconfigured, so a later ``trace_id=`` replay on its worker failed."""
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makeconftest(SESSION_CONFTEST)
    write_lookups(pytester.path / "lookups.json", "a")
    pytester.makepyfile(test_1_settings=SETTINGS_TESTS, test_2_after=AFTER_TESTS)
    result = run(pytester, "-p", "no:xdist", "--chronicle-record-mode=once")
    result.assert_outcomes(passed=3)
    assert (pytester.path / "recorded.json").exists()
