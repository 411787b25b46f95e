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
pytest, since every session reads them.

A ``chronicle_config`` fixture, overridden in a ``conftest.py``, sets the defaults of every
replay test (see ``CONFIG_KEYS``). A failing replay test gets a ``chronicle`` section in pytest's
report (divergences a non-strict replay let through, the call log ``name#n stub|run``); ``-v`` or
``--chronicle-log-calls`` prints it for the tests that pass too.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from chronicle.errors import ReplayDivergenceError, ReplayError, ReplayMismatchError
from chronicle.replay import divergence
from chronicle.replay.entry import ReplayScope, replay_trace
from chronicle.replay.incident import IncidentRun, IncidentScope, replay_incident
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import Match, ReplayRun
from chronicle.save.incident import Incident
from chronicle.testing.failure_text import (
    ON_THE_MARKER,
    call_log_text,
    diff_text,
    missing_file,
    shown_path,
)
from chronicle.testing.network import Blocked, block_network
from chronicle.testing.options import (
    CONFIG_KEYS,
    MARKER_OPTIONS,
    Invalid,
    Options,
    network_option,
    read_from,
    read_options,
    replay_hosts,
    replay_options,
    settings_of,
)
from chronicle.testing.plugin_options import (
    CORPUS_PLUGIN,
    MARKER,
    RECORD_MODES,
    add_options,
    wants_corpus,
)
from chronicle.testing.recording_run import (
    PROPERTY,
    STARTED,
    WRITTEN,
    RecordingRun,
    for_this_test,
    record_test,
    write_episodes,
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
    from chronicle.testing.corpus_items import CorpusItem


def __getattr__(name: str) -> Any:
    """``CorpusItem``, from the corpus's code, loaded when first asked for (PEP 562), as pytest
    loads it only for a session with a corpus."""
    if name == "CorpusItem":
        return importlib.import_module("chronicle.testing.corpus_items").CorpusItem
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STATE = pytest.StashKey["ChronicleTest"]()
_OPENED = pytest.StashKey[list[tuple[str, "ReplayRun | IncidentRun"]]]()
"""The replays a test opened with the ``chronicle_replay`` fixture: what each replays, its run."""
_SUMMARY = pytest.StashKey[list[str]]()
"""The lines the session ends with: each test hands them over in its report's
``user_properties`` (under ``PROPERTY``), which pytest-xdist carries from its workers."""


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


@pytest.fixture
def chronicle_config() -> dict[str, Any]:
    """Defaults for every replay test; override it in a ``conftest.py`` (see ``CONFIG_KEYS``)."""
    return {}


# ---- one marked test ---------------------------------------------------------------------------


@dataclass(eq=False)
class ChronicleTest:
    """The plugin's state for one marked test: what it replays or records, and what happened."""

    options: Options
    path: Path | None
    shown: str
    recording: bool
    run: ReplayRun | IncidentRun | RecordingRun
    scope: ReplayScope | IncidentScope | None = None
    blocked: Blocked | None = None
    written: int = 0
    new_episodes: bool = False
    """``new_episodes``: the file is rewritten with the run's new calls when the test passes."""
    notes: list[str] = field(default_factory=list)

    def report(self) -> str:
        """The ``chronicle`` section of the test's report: notes, divergences, the call log."""
        what = "recorded" if self.recording else "replayed"
        lines = [*self.notes]
        if self.blocked is not None and self.blocked.attempts:
            lines.append(self.blocked.describe())
        found = self.run.divergences()
        if found:
            hint = "allowed: strict=False" if not self.options.strict else ""
            lines.append(
                divergence.report(found, f"the replay of {self.shown}", hint, spelling="marker")
            )
        lines.append(f"call log ({what} {self.shown}):")
        lines.append(call_log_text(self.run))
        return "\n".join(lines)

    def mismatched(self, error: ReplayMismatchError, where: str | None) -> str:
        """A call with no recording, reported as a divergence is: what, the marker's way to
        accept it, where, the call log."""
        lines = [
            f"chronicle: the replay of {self.shown} met a call it has no recording for:",
            f"1. {error.reason}; the run diverged from the recorded request",
            f"On the marker: run=[({error.name!r}, {error.invocation})] runs it live if it is new "
            "on purpose, and --chronicle-record-mode=new_episodes (record_mode='new_episodes') "
            "runs it live and adds it to the file; otherwise the code under test makes a call "
            "the recording never made.",
            f"raised at {where}, by that call" if where else "raised by that call",
            f"call log ({self.shown}):",
            call_log_text(self.run),
        ]
        return "\n".join(lines)

    def diverged(self, error: ReplayDivergenceError, where: str | None) -> str:
        """The failure of a strict replay: each divergence, what to do, where, the call log."""
        lines = [
            divergence.report(
                error.divergences, f"chronicle: the replay of {self.shown}", spelling="marker"
            ),
            *diff_text(self.run, error.divergences),
            ON_THE_MARKER,
            f"raised at {where}, by the call that diverged"
            if where
            else "found when the test body ended",
            f"call log ({self.shown}):",
            call_log_text(self.run),
        ]
        return "\n".join(lines)


@pytest.fixture(autouse=True)
def _chronicle_marked(request: pytest.FixtureRequest) -> None:
    """Prepare the replay (or recording) of a test marked ``chronicle_replay``; others: nothing.

    A marker that cannot be used, or a file that cannot be replayed, fails the test's setup with
    a message saying what to do (no traceback: the marker is the place to look).
    """
    item = request.node
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return
    try:
        item.stash[_STATE] = _prepare(request, marker)
    except Invalid as exc:
        problem = str(exc)
    else:
        return
    pytest.fail(problem, pytrace=False)


def _prepare(request: pytest.FixtureRequest, marker: pytest.Mark) -> ChronicleTest:
    """What the marked test replays or records; raises ``Invalid`` with the failure message."""
    try:
        options = read_options(marker, request.getfixturevalue("chronicle_config"), request.config)
    except Invalid as exc:
        raise Invalid(f"chronicle: {exc}") from None
    if options.source is None and options.trace_id is not None:
        assert options.span_id is not None
        shown = f"span {options.span_id} of trace {options.trace_id}"
        url, key = read_from(options.settings)
        try:
            scope: ReplayScope | IncidentScope = replay_trace(
                options.trace_id,
                options.span_id,
                options.plan,
                strict=options.strict,
                match=options.match,
                ignore=options.ignore,
                url=url,
                api_key=key,
                network=options.network,
                allowed_hosts=options.replay_hosts,
            )
        except ReplayError as exc:
            raise Invalid(f"chronicle: {exc}") from None
        return ChronicleTest(options, None, shown, False, scope.run, scope)
    if options.source is None:
        path = default_path(request.node, options.incident_dir)
    else:
        source = Path(options.source)
        base = options.incident_dir or Path(str(request.path)).parent
        path = source if source.is_absolute() else base / source
    shown = shown_path(path, request.config)
    mode = options.record_mode
    if mode in ("rewrite", "all") or (mode in ("once", "new_episodes") and not path.exists()):
        return ChronicleTest(options, path, shown, True, RecordingRun())
    try:
        incident = Incident.read(path)
    except FileNotFoundError:
        raise Invalid(missing_file(shown, request.node.nodeid)) from None
    except ReplayError as exc:
        raise Invalid(f"chronicle: {exc}") from None
    scope = replay_incident(
        incident,
        options.plan.record_new() if mode == "new_episodes" else options.plan,
        strict=options.strict,
        match=options.match,
        ignore=options.ignore,
        network=options.network,
        allowed_hosts=options.replay_hosts,
    )
    test = ChronicleTest(options, path, shown, False, scope.run, scope)
    test.new_episodes = mode == "new_episodes"
    if incident.metadata.get("outcome") == "failed":
        failure = incident.metadata.get("failure") or "no message kept"
        test.notes.append(
            f"note: {shown} was recorded from a failing test ({failure}); if that failure was "
            "the environment (no network, a bad key) rather than the incident, record it again "
            "with --chronicle-record-mode=rewrite"
        )
    return test


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
    test: ChronicleTest | None = request.node.stash.get(_STATE, None)
    if test is None:
        raise pytest.UsageError(
            f"the chronicle_run fixture needs @pytest.mark.{MARKER}(...) on the test"
        )
    return test.run


@pytest.fixture
def chronicle_replay(
    request: pytest.FixtureRequest, chronicle_config: dict[str, Any]
) -> Callable[..., ReplayScope | IncidentScope]:
    """Open a replay: ``with chronicle_replay(path, plan=None) as run:``, or
    ``chronicle_replay(trace_id=..., span_id=...)``; paths, ``strict`` (default ``True``),
    ``match``, ``ignore``, ``network`` and ``allowed_hosts`` as the marker's, defaults from
    ``chronicle_config`` (and ``--chronicle-allowed-hosts``)."""
    config = chronicle_config or {}
    incident_dir = config.get("incident_dir")
    folder = (
        request.config.rootpath / Path(incident_dir)
        if incident_dir is not None
        else Path(str(request.path)).parent
    )

    def open_replay(
        source: str | os.PathLike[str] | None = None,
        plan: ReplayPlan | None = None,
        *,
        trace_id: str | None = None,
        span_id: str | None = None,
        strict: bool | None = None,
        match: Match | None = None,
        ignore: Iterable[str] | None = None,
        network: str | None = None,
        allowed_hosts: Iterable[str] | None = None,
    ) -> ReplayScope | IncidentScope:
        given: dict[str, object] = {
            "strict": strict,
            "match": match,
            "ignore": ignore,
            "network": network,
            "allowed_hosts": allowed_hosts,
        }
        given = {k: v for k, v in given.items() if v is not None}
        try:
            strictly, matching, volatile = replay_options(given, config)
            watching = network_option(given, config)
            hosts = replay_hosts(given, config, request.config)
        except Invalid as exc:
            raise pytest.UsageError(f"chronicle_replay: {exc}") from None
        if source is not None:
            path = Path(source)
            path = path if path.is_absolute() else folder / path
            try:
                incident = Incident.read(path)
            except FileNotFoundError:
                raise ReplayError(
                    f"replay: the incident file {path} does not exist; save one with "
                    f"`python -m chronicle save TRACE_ID -o {path}`"
                ) from None
            if span_id is not None:
                chosen = incident.envelopes_of(span_id)
                if not chosen:
                    raise ReplayError(f"replay: {path} has no span {span_id}")
                incident = Incident.of(chosen, incident.spans)
            scope: ReplayScope | IncidentScope = replay_incident(
                incident,
                plan,
                strict=strictly,
                match=matching,
                ignore=volatile,
                network=watching,
                allowed_hosts=hosts,
            )
            shown = shown_path(path, request.config)
        elif trace_id is None or span_id is None:
            raise pytest.UsageError(
                "chronicle_replay needs an incident file, or both trace_id= and span_id="
            )
        else:
            try:
                url, key = read_from(settings_of(config))
            except Invalid as exc:
                raise pytest.UsageError(f"chronicle_replay: {exc}") from None
            scope = replay_trace(
                trace_id,
                span_id,
                plan,
                strict=strictly,
                match=matching,
                ignore=volatile,
                url=url,
                api_key=key,
                network=watching,
                allowed_hosts=hosts,
            )
            shown = f"span {span_id} of trace {trace_id}"
        request.node.stash.setdefault(_OPENED, []).append((shown, scope.run))
        return scope

    return open_replay


# ---- running the test body ---------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Run a marked test's body inside its replay, or record it (record modes)."""
    test = item.stash.get(_STATE, None)
    if test is None:
        return (yield)
    if test.recording:
        return (yield from record_test(item, test))
    return (yield from _replay(item, test))


def _replay(item: pytest.Item, test: ChronicleTest) -> Generator[None, object, object]:
    assert test.scope is not None
    options = test.options
    with write_episodes(item, test), contextlib.ExitStack() as stack:
        if options.settings is not None:
            stack.enter_context(for_this_test(options.settings))
        if options.block_network:
            test.blocked = stack.enter_context(block_network(options.allowed_hosts))
        stack.enter_context(divergence.advice_spelt("marker"))  # errors advise marker arguments
        stack.enter_context(test.scope)
        result = yield
        if test.blocked is not None and test.blocked.attempts:
            # raised inside the replay, so its exit adds no verdict of its own to this failure
            pytest.fail(
                f"{test.blocked.describe()}; the code under test caught the error, but a call "
                "that escapes the replay's stubs fails the test",
                pytrace=False,
            )
    return result


# ---- reporting ---------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A diverged replay's failure as a report (not a traceback); the ``chronicle`` section."""
    report = yield
    test: ChronicleTest | None = item.stash.get(_STATE, None)
    if report.when != "call":
        return report
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, ReplayDivergenceError) and call.excinfo is not None:
        where = _where_in(item, call.excinfo)
        if test is not None:
            report.longrepr = test.diverged(error, where)
        else:  # a replay the test opened itself (the chronicle_replay fixture, or replay())
            opened = item.stash.get(_OPENED, [])
            lines = [divergence.report(error.divergences, "chronicle: the replay")]
            for _, run in opened:
                lines += diff_text(run, error.divergences)
            lines.append(f"raised at {where}" if where else "found when the replay ended")
            for shown, run in opened:
                lines += [f"call log ({shown}):", call_log_text(run)]
            report.longrepr = "\n".join(lines)
        return report
    if isinstance(error, ReplayMismatchError) and call.excinfo is not None and test is not None:
        report.longrepr = test.mismatched(error, _where_in(item, call.excinfo))
        return report
    if test is None:
        return report
    text = test.report()
    if report.failed:
        report.sections.append(("chronicle", text))
    elif item.config.getoption("chronicle_log_calls") or item.config.get_verbosity() > 0:
        item.user_properties.append((PROPERTY, f"{item.nodeid}\n{text}"))
    return report


def _where_in(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """``file:line`` of the test's own frame closest to the error, if the error came through it."""
    test_file = Path(str(item.path))
    for entry in reversed(excinfo.traceback):
        if Path(str(entry.path)) == test_file:
            return f"{shown_path(test_file, item.config)}:{entry.lineno + 1}"
    return None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The files recorded in this session, and the call logs asked for (``-v``)."""
    entries = config.stash.get(_SUMMARY, [])
    if not entries:
        return
    terminalreporter.section("chronicle")
    for entry in entries:
        terminalreporter.write_line(entry)
