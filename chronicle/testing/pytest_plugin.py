"""The pytest plugin (the ``pytest11`` entry point ``chronicle``): incidents as regression tests.

Mark a test with an incident file and the whole test body runs inside its replay::

    @pytest.mark.chronicle_replay("incidents/delete-db.json", run=["delete_file"])
    def test_the_gate_holds(chronicle_run):
        run_agent("clean up")
        assert chronicle_run.captured_result("delete_file", 1)["blocked"] is True

Requesting ``chronicle_run`` only hands the run to the test; the marker alone is enough. A relative
path is read from the test file's folder (or ``chronicle_config()["incident_dir"]``); instead of a
file, ``trace_id=`` and ``span_id=`` read a span from the control plane the test's settings name
(``chronicle_config()["settings"]["control_plane_url"]``: a pytest-xdist worker's own, say), else
the configured one. The ``chronicle_replay`` fixture opens a replay where the test wants it
instead.

Replays here are strict: a test whose replay diverges from its recording (a stubbed call's input
changed, a recorded call not made, a plan entry that matched nothing) fails, with each divergence
(boundary, call number, diff) and the call log in pytest's report. ``expect_change=[(name, n)]``
accepts a change the fix makes; ``strict=False`` (on the marker or in ``chronicle_config``)
reports divergences without failing. ``match="input"`` matches calls by input, not order.

Record modes, named as pytest-recording names them (``--chronicle-record-mode``):

- ``none`` (the default): replay only; a missing file fails the test with how to record it;
- ``once``: a missing file is recorded by running the test live, then written whether the test
  passes or fails (a test written from an incident fails on the buggy code by design); an
  existing file is replayed, so a failing test never overwrites it;
- ``new_episodes``: an existing file is replayed as in ``none``, except that a call with no
  recording (one the fix adds) runs live and is recorded (``ReplayPlan().record_new()``); when
  the test passes, the file is rewritten with those calls in their place in the tree, and without
  the recordings no call used (the fix stopped making them): ``rewrote ... (added
  request_approval#1; dropped issue_refund#1)``. A recorded call whose input changed is still a
  divergence. A missing file is recorded as ``once`` records it;
- ``rewrite`` and ``all``: the test runs live and its file is written again; nothing is replayed.

``--chronicle-record-mode`` applies to every marked test; without it, a marker's ``record_mode=``
applies to its test (the command line wins, so ``rewrite`` records everything again).

Recording needs no control plane: the test body runs inside one request span whose envelopes are
kept in memory (validated and redacted as they would be sent: ``chronicle.testing.capture()``)
and written, atomically, as an incident file (``chronicle.save.incident``) whose metadata names
the test and its outcome; the session ends with a line per file written (``wrote ... (5 calls;
the test failed ...)``), also from pytest-xdist workers, and says when two tests of the run wrote
the same file. A marker without a path uses the file named after the test (``default_path``:
``<test dir>/incidents/<module>/<test name>.json``).

Every replay here watches the network as ``chronicle.replay()`` does: a connection the code makes
outside any boundary the plan runs live (an un-instrumented tool or client) is a divergence naming
the host and the boundary it was made under, which fails the strict test (``network="block"`` on
the marker or in ``chronicle_config`` refuses it, ``network="allow"`` lets it be); the control
plane and the hosts of ``allowed_hosts``/``--chronicle-allowed-hosts`` are let through.
``--chronicle-block-network`` (or ``block_network=True`` on the marker) refuses, during a replay
test, every connection to a host outside ``--chronicle-allowed-hosts`` (default: loopback), from
any thread, before a packet leaves (``chronicle.testing.network``); a refused attempt fails the
test even when the code under test caught the error.

``--chronicle-corpus DIR --chronicle-entry module:function`` adds one test item per incident
file under DIR (``CorpusItem``, named after the file): each calls the entry with its recorded
input (an ASGI app, ``module:app``: sends it the recorded HTTP request), everything else
stubbed, strictly (``chronicle.whatif.corpus``), so pytest-xdist spreads a corpus over cores,
and pytest's reporting and JUnit XML apply. Its plan is given as ``chronicle replay``'s:
``--chronicle-run``, ``--chronicle-expect-change``, ``--chronicle-ignore``, ``--chronicle-match``,
``--chronicle-not-strict`` (``chronicle.testing.corpus_items``); ``--chronicle-report``,
``--chronicle-markdown`` and ``--chronicle-json`` (the lines ``chronicle replay --json`` prints,
which ``chronicle report`` merges across ``--chronicle-shard`` runs) write its results. The
corpus's part of the plugin (``corpus_plugin``) is loaded, by name, only in a session given a
corpus; the options of every part are defined in ``plugin_options``, which imports nothing but
pytest, since every session reads them. The replay's part (``replay_plugin``: the replay engine,
the models, the runtime) is loaded, by name, only in a session that collects a test marked
``chronicle_replay`` or asking for ``chronicle_run`` or ``chronicle_replay`` (else when one of
those fixtures first runs, or a test's own replay diverges): a session with none costs what
pytest and this module cost.

A ``chronicle_config`` fixture, overridden in a ``conftest.py``, sets the defaults of every
replay test (see ``CONFIG_KEYS``). A failing replay test gets a ``chronicle`` section in pytest's
report (divergences a non-strict replay let through, the call log ``name#n stub|run``); ``-v`` or
``--chronicle-log-calls`` prints it for the tests that pass too.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

from chronicle.errors import ReplayDivergenceError
from chronicle.lazy import loaded_on_use
from chronicle.testing.plugin_options import (
    CORPUS_PLUGIN,
    MARKER,
    PROPERTY,
    RECORD_MODES,
    REPLAY_PLUGIN,
    STARTED,
    WRITTEN,
    add_options,
    wants_corpus,
)

__all__ = [
    "CONFIG_KEYS",
    "MARKER",
    "MARKER_OPTIONS",
    "RECORD_MODES",
    "CorpusItem",
    "RecordingRun",
    "default_path",
]


if TYPE_CHECKING:  # loaded when first asked for (__getattr__)
    from chronicle.replay.entry import ReplayScope
    from chronicle.replay.incident import IncidentRun, IncidentScope
    from chronicle.replay.run import ReplayRun
    from chronicle.testing.corpus_items import CorpusItem
    from chronicle.testing.options import CONFIG_KEYS, MARKER_OPTIONS
    from chronicle.testing.recording_run import RecordingRun

_LAZY = {
    "CorpusItem": "chronicle.testing.corpus_items",
    "CONFIG_KEYS": "chronicle.testing.options",
    "MARKER_OPTIONS": "chronicle.testing.options",
    "RecordingRun": "chronicle.testing.recording_run",
}
"""The public names whose modules load the replay engine: imported when first asked for."""


__getattr__ = loaded_on_use(__name__, _LAZY)
"""``CorpusItem``, ``CONFIG_KEYS``, ``MARKER_OPTIONS`` and ``RecordingRun``, from the modules
that hold them, loaded when first asked for (PEP 562), as pytest loads those modules only for a
session with a corpus or a replay test."""


_SUMMARY = pytest.StashKey[list[str]]()
"""The lines the session ends with: each test hands them over in its report's
``user_properties`` (under ``PROPERTY``), which pytest-xdist carries from its workers."""
_FIXTURES = frozenset({"chronicle_run", "chronicle_replay"})
"""The fixtures that need the replay's part (``chronicle_config`` does not)."""


# ---- options, marker, config -----------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every option of the plugin (``plugin_options``: read in every session, so it imports
    nothing else)."""
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``chronicle_replay`` marker, and what collects the session's last lines."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(source=None, *, trace_id=None, span_id=None, run=(), stub=(), "
        "expect_change=(), strict=True, match='order', ignore=(), block_network=None, "
        "allowed_hosts=None, network='report', record_mode=None): "
        "run the whole test inside a Chronicle replay of an incident file (a path relative to "
        "the test file) or of a recorded span (trace_id=, span_id=); run=[...] names the "
        "cut-points that run live, expect_change=[...] the calls the fix changes (a name, or "
        "(name, n)); a replay that diverges fails the test unless strict=False; a connection "
        "made outside the boundaries the plan runs is a divergence (network='report'), "
        "refused (network='block') or let be (network='allow'); "
        "record_mode='new_episodes' (or --chronicle-record-mode) records the calls a fix adds, "
        "'once' a missing file. The chronicle_run fixture hands the run "
        "to the test.",
    )
    config.stash[_SUMMARY] = []
    config.stash[WRITTEN] = {}
    config.stash[STARTED] = time.time()
    config.pluginmanager.register(_Summary(config.stash[_SUMMARY]), "chronicle-summary")
    if wants_corpus(config):  # its code is loaded only then: most sessions have no corpus
        config.pluginmanager.import_plugin(CORPUS_PLUGIN)


class _Summary:
    """Keeps the lines each test hands over for the session's end, from its last report
    (teardown), so pytest-xdist's workers' lines reach the controller too."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the test's ``chronicle`` properties once, from its teardown report."""
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == PROPERTY and isinstance(value, str):
                self.lines.append(value)


class _ReplayPart(Protocol):
    """What this module calls of the replay's part (the module ``replay_plugin``)."""

    def prepare(self, request: pytest.FixtureRequest) -> None: ...

    def run_of(self, item: pytest.Item) -> ReplayRun | IncidentRun | RecordingRun: ...

    def opener(
        self, request: pytest.FixtureRequest, chronicle_config: dict[str, Any]
    ) -> Callable[..., ReplayScope | IncidentScope]: ...

    def reported(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> pytest.TestReport: ...


def _replay_part(config: pytest.Config) -> _ReplayPart:
    """The replay's part of the plugin, loaded (and registered: its hooks) the first time a test
    needs it."""
    config.pluginmanager.import_plugin(REPLAY_PLUGIN)
    return cast("_ReplayPart", config.pluginmanager.get_plugin(REPLAY_PLUGIN))


def _needs_replay(item: pytest.Item) -> bool:
    """Whether the test is marked ``chronicle_replay`` or asks for a replay fixture."""
    fixtures = getattr(item, "fixturenames", ())
    return item.get_closest_marker(MARKER) is not None or not _FIXTURES.isdisjoint(fixtures)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Load the replay's part when a collected test needs it (on each pytest-xdist worker, for
    the tests it collected), before any test runs."""
    if not session.config.option.collectonly and any(map(_needs_replay, session.items)):
        _replay_part(session.config)


@pytest.fixture
def chronicle_config() -> dict[str, Any]:
    """Defaults for every replay test; override it in a ``conftest.py`` (see ``CONFIG_KEYS``)."""
    return {}


@pytest.fixture(autouse=True)
def _chronicle_marked(request: pytest.FixtureRequest) -> None:
    """Prepare the replay (or recording) of a test marked ``chronicle_replay``; others: nothing.

    A marker that cannot be used, or a file that cannot be replayed, fails the test's setup with
    a message saying what to do (no traceback: the marker is the place to look).
    """
    if request.node.get_closest_marker(MARKER) is not None:
        _replay_part(request.config).prepare(request)


def default_path(item: pytest.Item, incident_dir: Path | None = None) -> Path:
    """The incident file of a test whose marker names none:
    ``<test dir>/incidents/<module name without .py>/<test name>.json``
    (``<incident_dir>/<module>/<test name>.json`` when ``chronicle_config`` sets ``incident_dir``).

    The test name is its node id after the file, classes joined by dots
    (``TestCheckout.test_refund``), parameters kept (``test_refund[eur]``); characters a file
    name cannot hold become ``_``.
    """
    module = Path(str(item.path))
    name = ".".join(item.nodeid.split("::")[1:]) or item.name
    name = re.sub(r'[\\/:*?"<>|\s]', "_", name)
    folder = incident_dir if incident_dir is not None else module.parent / "incidents"
    return folder / module.stem / f"{name}.json"


@pytest.fixture
def chronicle_run(
    request: pytest.FixtureRequest, _chronicle_marked: None
) -> ReplayRun | IncidentRun | RecordingRun:
    """The replay the ``chronicle_replay`` marker runs this test in (the recording, in a record
    mode), to assert on: ``call_log()``, ``captured_input()``, ``captured_result()``."""
    return _replay_part(request.config).run_of(request.node)


@pytest.fixture
def chronicle_replay(
    request: pytest.FixtureRequest, chronicle_config: dict[str, Any]
) -> Callable[..., ReplayScope | IncidentScope]:
    """Open a replay: ``with chronicle_replay(path, plan=None) as run:``, or
    ``chronicle_replay(trace_id=..., span_id=...)``; paths, ``strict`` (default ``True``),
    ``match``, ``ignore``, ``network`` and ``allowed_hosts`` as the marker's, defaults from
    ``chronicle_config`` (and ``--chronicle-allowed-hosts``)."""
    return _replay_part(request.config).opener(request, chronicle_config)


# ---- reporting ---------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A diverged replay's failure as a report (not a traceback); the ``chronicle`` section: the
    replay's part writes them, when it is loaded or a test's own replay diverged."""
    report = yield
    if report.when != "call":
        return report
    loaded = item.config.pluginmanager.has_plugin(REPLAY_PLUGIN)
    if not loaded and (
        call.excinfo is None or not call.excinfo.errisinstance(ReplayDivergenceError)
    ):
        return report
    return _replay_part(item.config).reported(item, call, report)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The files recorded in this session, and the call logs asked for (``-v``)."""
    entries = config.stash.get(_SUMMARY, [])
    if not entries:
        return
    terminalreporter.section("chronicle")
    for entry in entries:
        terminalreporter.write_line(entry)
