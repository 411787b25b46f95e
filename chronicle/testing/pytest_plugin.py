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
- ``rewrite`` and ``all``: the test runs live and its file is written again; nothing is replayed.

Recording needs no control plane: the test body runs inside one request span whose envelopes are
kept in memory (validated and redacted as they would be sent: ``chronicle.testing.capture()``)
and written, atomically, as an incident file (``chronicle.save.incident``) whose metadata names
the test and its outcome; the session ends with a line per file written (``wrote ... (5 calls;
the test failed ...)``), also from pytest-xdist workers, and says when two tests of the run wrote
the same file. A marker without a path uses the file named after the test (``default_path``:
``<test dir>/incidents/<module>/<test name>.json``).

``--chronicle-block-network`` (or ``block_network=True`` on the marker) refuses, during a replay
test, every connection to a host outside ``--chronicle-allowed-hosts`` (default: loopback), before
a packet leaves (``chronicle.testing.network``); a refused attempt fails the test even when the
code under test caught the error.

``--chronicle-corpus DIR --chronicle-entry module:function`` adds one test item per incident
file under DIR (``CorpusItem``, named after the file): each calls the entry with its recorded
input (an ASGI app, ``module:app``: sends it the recorded HTTP request), everything else
stubbed, strictly (``chronicle.replay.corpus``), so pytest-xdist spreads a corpus over cores,
and pytest's reporting and JUnit XML apply.

A ``chronicle_config`` fixture, overridden in a ``conftest.py``, sets the defaults of every
replay test (see ``CONFIG_KEYS``). A failing replay test gets a ``chronicle`` section in pytest's
report (divergences a non-strict replay let through, the call log ``name#n stub|run``); ``-v`` or
``--chronicle-log-calls`` prints it for the tests that pass too.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from typing_extensions import override

from chronicle import runtime
from chronicle.config import load_settings
from chronicle.errors import (
    ChronicleError,
    ReplayDivergenceError,
    ReplayError,
    ReplayMismatchError,
)
from chronicle.recording.hooks import CallInfo, Hook, default_hooks
from chronicle.recording.request import record
from chronicle.redaction import redact_secrets
from chronicle.replay import corpus, divergence
from chronicle.replay.calllog import CallLog, LoggedCall
from chronicle.replay.diff import diff
from chronicle.replay.divergence import Divergence, Volatile
from chronicle.replay.entry import ReplayScope, replay_trace
from chronicle.replay.incident import IncidentRun, IncidentScope, replay_incident
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import Match, ReplayRun
from chronicle.save.client import HttpControlPlane
from chronicle.save.incident import Incident, IncidentSpan
from chronicle.testing import InMemoryControlPlane, capture
from chronicle.testing.network import LOOPBACK, AllowList, Blocked, block_network

MARKER = "chronicle_replay"
RECORD_MODES = ("none", "once", "rewrite", "all")
MARKER_OPTIONS = (
    "source",
    "trace_id",
    "span_id",
    "run",
    "stub",
    "expect_change",
    "strict",
    "match",
    "ignore",
    "block_network",
    "allowed_hosts",
)
"""The keywords ``@pytest.mark.chronicle_replay(...)`` takes."""
CONFIG_KEYS = (
    "strict",
    "match",
    "ignore",
    "incident_dir",
    "redactors",
    "settings",
    "block_network",
    "allowed_hosts",
)
"""The keys ``chronicle_config`` may hold:

- ``strict``: fail a test whose replay diverges from its recording (default ``True``);
- ``match``: ``"order"`` (default) or ``"input"``, as for ``chronicle.replay()``;
- ``ignore``: input paths fresh on every run, not compared (``["state.messages[*].id"]``), as
  for ``chronicle.replay()``; a marker's ``ignore`` adds to these;
- ``incident_dir``: the folder relative marker paths are read from (a relative one is taken from
  pytest's rootdir); default: the test file's folder;
- ``redactors``: ``str -> str`` functions added to the default redactors, for recording and for
  comparing inputs during replay;
- ``settings``: other ``chronicle.configure()`` settings for the test body (``service_name``, ...);
  its ``control_plane_url`` is where ``trace_id=`` replays read; the configuration before the
  test is put back when it ends;
- ``block_network``, ``allowed_hosts``: as the command-line options, for every replay test.
"""

_STATE = pytest.StashKey["ChronicleTest"]()
_OPENED = pytest.StashKey[list[tuple[str, "ReplayRun | IncidentRun"]]]()
"""The replays a test opened with the ``chronicle_replay`` fixture: what each replays, its run."""
_SUMMARY = pytest.StashKey[list[str]]()
"""The lines the session ends with: each test hands them over in its report's
``user_properties`` (under ``_PROPERTY``), which pytest-xdist carries from its workers."""
_PROPERTY = "chronicle"
_WRITTEN = pytest.StashKey[dict[Path, str]]()
"""The incident files this process wrote, and the test that wrote each."""
_STARTED = pytest.StashKey[float]()


class _Invalid(Exception):
    """A marker or ``chronicle_config`` that cannot be used; the message says how to fix it."""


# ---- options, marker, config -----------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--chronicle-record-mode``, ``--chronicle-block-network``, ``--chronicle-allowed-hosts``,
    ``--chronicle-log-calls``."""
    group = parser.getgroup("chronicle", "Chronicle replay (incidents as regression tests)")
    group.addoption(
        "--chronicle-record-mode",
        choices=RECORD_MODES,
        default="none",
        help="none (default): replay incident files, a missing one fails; once: record a "
        "missing file by running the test live, replay an existing one; rewrite/all: run "
        "every marked test live and write its file again",
    )
    group.addoption(
        "--chronicle-block-network",
        action="store_true",
        default=False,
        help="during replay tests, refuse connections to hosts outside "
        "--chronicle-allowed-hosts (a call that escapes the stubs fails the test)",
    )
    group.addoption(
        "--chronicle-allowed-hosts",
        default=None,
        metavar="HOSTS",
        help="comma-separated addresses, networks (127.0.0.0/8) or names that a blocked "
        f"network still reaches (default: {','.join(LOOPBACK)})",
    )
    group.addoption(
        "--chronicle-corpus",
        action="append",
        default=[],
        metavar="DIR",
        help="also collect one test per incident file under DIR (repeatable): each calls "
        "--chronicle-entry with its recorded input, everything else stubbed, strictly",
    )
    group.addoption(
        "--chronicle-entry",
        default=None,
        metavar="MODULE:FUNCTION",
        help="the entry --chronicle-corpus calls: a @chronicle.boundary function, or an ASGI "
        "app (module:app) whose recorded HTTP requests are sent to it again",
    )
    group.addoption(
        "--chronicle-log-calls",
        action="store_true",
        default=False,
        help="print the call log (name#n stub|run) of every replay test, passed ones too "
        "(also with -v)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``chronicle_replay`` marker, and what collects the session's last lines."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(source=None, *, trace_id=None, span_id=None, run=(), stub=(), "
        "expect_change=(), strict=True, match='order', ignore=(), block_network=None, "
        "allowed_hosts=None): "
        "run the whole test inside a Chronicle replay of an incident file (a path relative to "
        "the test file) or of a recorded span (trace_id=, span_id=); run=[...] names the "
        "cut-points that run live, expect_change=[...] the calls the fix changes (a name, or "
        "(name, n)); a replay that diverges fails the test unless strict=False; "
        "--chronicle-record-mode records missing files. The chronicle_run fixture hands the run "
        "to the test.",
    )
    config.stash[_SUMMARY] = []
    config.stash[_WRITTEN] = {}
    config.stash[_STARTED] = time.time()
    config.pluginmanager.register(_Summary(config.stash[_SUMMARY]), "chronicle-summary")


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
            if key == _PROPERTY and isinstance(value, str):
                self.lines.append(value)


@pytest.fixture
def chronicle_config() -> dict[str, Any]:
    """Defaults for every replay test; override it in a ``conftest.py`` (see ``CONFIG_KEYS``)."""
    return {}


@dataclass(frozen=True)
class _Options:
    source: str | os.PathLike[str] | None
    trace_id: str | None
    span_id: str | None
    plan: ReplayPlan
    strict: bool
    match: Match
    ignore: Volatile
    incident_dir: Path | None
    settings: dict[str, object] | None
    block_network: bool
    allowed_hosts: tuple[str, ...]


def _options(marker: pytest.Mark, config: object, pytest_config: pytest.Config) -> _Options:
    """The marker's options over ``chronicle_config`` over the command line, checked."""
    kwargs = dict(marker.kwargs)
    _no_unknown(kwargs, MARKER_OPTIONS, f"@pytest.mark.{MARKER}() has no option")
    if len(marker.args) > 1:
        raise _Invalid(
            f"@pytest.mark.{MARKER}() takes one positional argument, the incident file; got "
            f"{len(marker.args)}: {', '.join(repr(a) for a in marker.args)}"
        )
    if marker.args and "source" in kwargs:
        raise _Invalid(f"@pytest.mark.{MARKER}() got the incident file twice (source=)")
    source = marker.args[0] if marker.args else kwargs.get("source")
    trace_id, span_id = kwargs.get("trace_id"), kwargs.get("span_id")
    if source is not None and not isinstance(source, (str, os.PathLike)):
        raise _Invalid(f"the incident file is a path (str), got {source!r}")
    if source is None and (trace_id is None) != (span_id is None):
        raise _Invalid(
            f"@pytest.mark.{MARKER}() reads a recorded span with both trace_id= and span_id=; "
            f'or give it an incident file (@pytest.mark.{MARKER}("incidents/x.json")), or '
            "neither, for the file named after the test"
        )
    if source is not None and (trace_id is not None or span_id is not None):
        raise _Invalid(
            f"@pytest.mark.{MARKER}() takes an incident file or trace_id=/span_id=, not both"
        )
    for name, value in (("trace_id", trace_id), ("span_id", span_id)):
        if value is not None and not isinstance(value, str):
            raise _Invalid(f"{name}= is a hex id (str), got {value!r}")
    plan = ReplayPlan()
    for mode in ("stub", "run", "expect_change"):
        for name, n in _targets(mode, kwargs.get(mode, ())):
            getattr(plan, mode)(name, n)

    if not isinstance(config, Mapping):
        raise _Invalid(f"the chronicle_config fixture returns a dict, got {type(config).__name__}")
    _no_unknown(config, CONFIG_KEYS, "chronicle_config has no key")
    incident_dir = config.get("incident_dir")
    if incident_dir is not None:
        if not isinstance(incident_dir, (str, os.PathLike)):
            raise _Invalid(f"chronicle_config: incident_dir is a folder path, got {incident_dir!r}")
        incident_dir = pytest_config.rootpath / Path(incident_dir)
    settings = _settings(config)
    strict, match, ignore = _replay_options(kwargs, config)
    block = kwargs.get("block_network", config.get("block_network"))
    if block is None:
        block = bool(pytest_config.getoption("chronicle_block_network"))
    if not isinstance(block, bool):
        raise _Invalid(f"block_network is True or False, got {block!r}")
    allowed = kwargs.get("allowed_hosts", config.get("allowed_hosts"))
    if allowed is None:
        allowed = pytest_config.getoption("chronicle_allowed_hosts") or LOOPBACK
    if isinstance(allowed, str):
        allowed = [part for part in allowed.split(",") if part.strip()]
    if not isinstance(allowed, Iterable):
        raise _Invalid(f"allowed_hosts is a list of host names or addresses, got {allowed!r}")
    allowed = list(allowed)
    if not all(isinstance(host, str) for host in allowed):
        raise _Invalid(f"allowed_hosts is a list of host names or addresses, got {allowed!r}")
    try:
        AllowList.parse(allowed)
    except ValueError as exc:
        raise _Invalid(f"allowed_hosts: {exc}") from None
    return _Options(
        source,
        trace_id,
        span_id,
        plan,
        strict,
        match,
        ignore,
        incident_dir,
        settings,
        block,
        tuple(allowed),
    )


def _replay_options(
    given: Mapping[str, object], config: Mapping[str, object]
) -> tuple[bool, Match, Volatile]:
    """``strict`` (default ``True``), ``match`` (default ``"order"``) and ``ignore``: ``given``
    (the marker's or the fixture call's) over ``chronicle_config`` (``ignore``: both), checked."""
    strict = given.get("strict", config.get("strict", True))
    if not isinstance(strict, bool):
        raise _Invalid(f"strict is True or False, got {strict!r}")
    match = given.get("match", config.get("match", "order"))
    if match != "order" and match != "input":
        raise _Invalid(f"match is 'order' or 'input', got {match!r}")
    patterns: list[str] = []
    for source in (config.get("ignore"), given.get("ignore")):
        if source is None:
            continue
        if isinstance(source, str):
            source = [source]
        if not isinstance(source, Iterable) or not all(isinstance(p, str) for p in source):
            raise _Invalid(f'ignore is a list of input paths ("messages[*].id"), got {source!r}')
        patterns.extend(source)
    try:
        ignore = Volatile(patterns)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None
    return strict, match, ignore


def _no_unknown(given: Mapping[str, object], known: tuple[str, ...], what: str) -> None:
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _Invalid(f"{what} {key!r}{hint}; the known ones: {', '.join(known)}")


def _targets(mode: str, value: object) -> list[tuple[str, int | None]]:
    """``run=``/``stub=`` as ``(name, n)`` pairs: a name, or a list of names and pairs."""
    single = isinstance(value, str) or (
        isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int)
    )
    items = [value] if single else value
    if not isinstance(items, Iterable):
        raise _Invalid(f"{mode}= takes a list of boundary names, got {value!r}")
    targets: list[tuple[str, int | None]] = []
    for item in items:
        if isinstance(item, str) and item:
            targets.append((item, None))
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[0]
            and isinstance(item[1], int)
            and not isinstance(item[1], bool)
            and item[1] >= 1
        ):
            targets.append((item[0], item[1]))
        else:
            raise _Invalid(
                f"{mode}=[...] holds boundary names (str) or (name, n) pairs with n counted "
                f"from 1; got {item!r} ({type(item).__name__})"
            )
    return targets


def _settings(config: Mapping[str, object]) -> dict[str, object] | None:
    """The ``configure()`` settings the test body runs with, or ``None`` to keep the current."""
    redactors = config.get("redactors")
    settings = config.get("settings")
    if redactors is None and settings is None:
        return None
    if settings is not None and not isinstance(settings, Mapping):
        raise _Invalid(
            f"chronicle_config: settings is a dict of configure() settings, got {settings!r}"
        )
    merged: dict[str, object] = dict(settings or {})
    if redactors is not None:
        if not isinstance(redactors, Iterable) or not all(callable(r) for r in redactors):
            raise _Invalid(
                f"chronicle_config: redactors is a list of str -> str functions, got {redactors!r}"
            )
        merged["redactors"] = [*_as_list(merged.get("redactors")), *redactors]
    try:
        load_settings(merged)
    except ChronicleError as exc:
        raise _Invalid(f"chronicle_config: {exc}") from None
    return merged


def _read_from(settings: Mapping[str, object] | None) -> tuple[str | None, str | None]:
    """Where a ``trace_id=`` replay reads its span (``url``, ``api_key``): the control plane the
    test's settings name (``chronicle_config()["settings"]["control_plane_url"]``, a worker's own
    under pytest-xdist, say), else ``(None, None)``: the configured one."""
    url = (settings or {}).get("control_plane_url")
    if not isinstance(url, str) or not url:
        return None, None
    key = (settings or {}).get("api_key")
    return url, key if isinstance(key, str) else None


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, Iterable) and not isinstance(value, str) else []


# ---- one marked test ---------------------------------------------------------------------------


class RecordingRun:
    """What ``chronicle_run`` hands a test that the plugin is recording: its calls, run live.

    The reading methods are those of ``ReplayRun``: every call is ``run``; ``captured_input``
    holds the arguments in JSON form; there is no recording to compare with yet, so
    ``recorded()`` is ``None``.
    """

    def __init__(self) -> None:
        self.trace_id = ""
        self.calls = CallLog()
        """Written by ``_Recorder`` as the test's calls happen."""

    def call_log(self) -> list[LoggedCall]:
        """Every call so far, in the order it started."""
        return self.calls.entries()

    def captured_input(self, name: str, n: int = 1) -> dict[str, object]:
        """The arguments of call ``n`` of ``name`` (JSON form)."""
        if not self.calls.called(name, n):
            raise KeyError(f"there was no call {n} of {name!r} while recording")
        return self.calls.arguments(name, n)

    def captured_result(self, name: str, n: int = 1) -> object:
        """What call ``n`` of ``name`` returned."""
        if not self.calls.has_result(name, n):
            raise KeyError(f"call {n} of {name!r} did not return while recording")
        return self.calls.result(name, n)

    def recorded(self, name: str, n: int = 1) -> None:
        """Always ``None``: the recording is being made."""
        return None

    def divergences(self) -> list[Divergence]:
        """Always empty: there is nothing to diverge from yet."""
        return []


class _Recorder(Hook):
    """Fills a ``RecordingRun`` from the calls of one trace (a default hook while recording)."""

    def __init__(self, run: RecordingRun) -> None:
        self.run = run

    @override
    def enter(self, call: CallInfo) -> None:
        run = self.run
        if call.trace_id == run.trace_id:
            entry = LoggedCall(call.name, call.invocation_index, "run")
            run.calls.started(entry, dict(call.arguments))

    @override
    def crossing(self, call: CallInfo, result: object) -> None:
        run = self.run
        if call.trace_id == run.trace_id:
            run.calls.returned(call.name, call.invocation_index, result)


@dataclass(eq=False)
class ChronicleTest:
    """The plugin's state for one marked test: what it replays or records, and what happened."""

    options: _Options
    path: Path | None
    shown: str
    recording: bool
    run: ReplayRun | IncidentRun | RecordingRun
    scope: ReplayScope | IncidentScope | None = None
    blocked: Blocked | None = None
    written: int = 0
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
            lines.append(divergence.report(found, f"the replay of {self.shown}", hint))
        lines.append(f"call log ({what} {self.shown}):")
        lines.append(_call_log_text(self.run))
        return "\n".join(lines)

    def mismatched(self, error: ReplayMismatchError, where: str | None) -> str:
        """A call with no recording, reported as a divergence is: what, the marker's way to
        accept it, where, the call log."""
        lines = [
            f"chronicle: the replay of {self.shown} met a call it has no recording for:",
            f"1. {error.reason}; the run diverged from the recorded request",
            f"On the marker: run=[({error.name!r}, {error.invocation})] runs it live if it is new "
            "on purpose; otherwise the code under test makes a call the recording never made.",
            f"raised at {where}, by that call" if where else "raised by that call",
            f"call log ({self.shown}):",
            _call_log_text(self.run),
        ]
        return "\n".join(lines)

    def diverged(self, error: ReplayDivergenceError, where: str | None) -> str:
        """The failure of a strict replay: each divergence, what to do, where, the call log."""
        lines = [
            divergence.report(error.divergences, f"chronicle: the replay of {self.shown}"),
            *_diff_text(self.run),
            _ON_THE_MARKER,
            f"raised at {where}, by the call that diverged"
            if where
            else "found when the test body ended",
            f"call log ({self.shown}):",
            _call_log_text(self.run),
        ]
        return "\n".join(lines)


_ON_THE_MARKER = (
    "On the marker: run=[(name, n)] runs a call live, expect_change=[(name, n)] accepts a "
    "change the fix makes, strict=False reports divergences without failing the test."
)


def _diff_text(run: ReplayRun | IncidentRun | RecordingRun) -> list[str]:
    """The diff of a finished replay against its recording, the changed calls only (a span
    whose calls all match is left out); nothing for a recording run."""
    runs = list(run.runs.values()) if isinstance(run, IncidentRun) else [run]
    lines: list[str] = []
    for each in runs:
        if not isinstance(each, ReplayRun):
            continue
        span = f" (span {each.span_id})" if isinstance(run, IncidentRun) else ""
        try:
            found = diff(each)
        except Exception as exc:  # the report must not fail over its diff
            lines.append(f"(no diff of the replay against its recording{span}: {exc})")
            continue
        if isinstance(run, IncidentRun) and found.same:
            continue
        lines.append(f"diff of the replay against its recording{span} (changed calls only):")
        lines.append(found.render(changed_only=True))
    return lines


def _call_log_text(run: ReplayRun | IncidentRun | RecordingRun) -> str:
    """The call log, ``name#n stub|run`` a line (by span for a multi-span incident)."""
    if isinstance(run, IncidentRun):
        blocks = []
        for span in run.spans:
            calls = run.runs[span.span_id].call_log()
            if calls:
                blocks.append(
                    f"span {span.span_id} ({span.service or 'unknown service'}):\n"
                    + _calls_text(calls, "    ")
                )
        return "\n".join(blocks) or "  (no boundary was called)"
    return _calls_text(run.call_log(), "  ") or "  (no boundary was called)"


def _calls_text(calls: list[LoggedCall], indent: str) -> str:
    return "\n".join(f"{indent}{c.name}#{c.invocation_index} {c.mode}" for c in calls)


def _shown(path: Path, config: pytest.Config) -> str:
    try:
        return str(path.relative_to(config.rootpath))
    except ValueError:
        return str(path)


def _missing(shown: str, nodeid: str) -> str:
    return (
        f"chronicle: the incident file {shown} does not exist, and record mode 'none' only "
        f"replays. Record it by running the test live once (the file is written whether the "
        f"test passes or fails, and says which):\n"
        f"    pytest --chronicle-record-mode=once '{nodeid}'\n"
        f"or save a recorded trace from the control plane:\n"
        f"    python -m chronicle save TRACE_ID -o {shown}"
    )


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
    except _Invalid as exc:
        problem = str(exc)
    else:
        return
    pytest.fail(problem, pytrace=False)


def _prepare(request: pytest.FixtureRequest, marker: pytest.Mark) -> ChronicleTest:
    """What the marked test replays or records; raises ``_Invalid`` with the failure message."""
    try:
        options = _options(marker, request.getfixturevalue("chronicle_config"), request.config)
    except _Invalid as exc:
        raise _Invalid(f"chronicle: {exc}") from None
    if options.source is None and options.trace_id is not None:
        assert options.span_id is not None
        shown = f"span {options.span_id} of trace {options.trace_id}"
        url, key = _read_from(options.settings)
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
            )
        except ReplayError as exc:
            raise _Invalid(f"chronicle: {exc}") from None
        return ChronicleTest(options, None, shown, False, scope.run, scope)
    if options.source is None:
        path = default_path(request.node, options.incident_dir)
    else:
        source = Path(options.source)
        base = options.incident_dir or Path(str(request.path)).parent
        path = source if source.is_absolute() else base / source
    shown = _shown(path, request.config)
    mode = request.config.getoption("chronicle_record_mode")
    if mode in ("rewrite", "all") or (mode == "once" and not path.exists()):
        return ChronicleTest(options, path, shown, True, RecordingRun())
    try:
        incident = Incident.read(path)
    except FileNotFoundError:
        raise _Invalid(_missing(shown, request.node.nodeid)) from None
    except ReplayError as exc:
        raise _Invalid(f"chronicle: {exc}") from None
    scope = replay_incident(
        incident, options.plan, strict=options.strict, match=options.match, ignore=options.ignore
    )
    test = ChronicleTest(options, path, shown, False, scope.run, scope)
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
    ``chronicle_replay(trace_id=..., span_id=...)``; paths, ``strict`` (default ``True``) and
    ``match`` as the marker's, defaults from ``chronicle_config``."""
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
    ) -> ReplayScope | IncidentScope:
        given = {"strict": strict, "match": match, "ignore": ignore}
        try:
            strictly, matching, volatile = _replay_options(
                {k: v for k, v in given.items() if v is not None}, config
            )
        except _Invalid as exc:
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
                incident, plan, strict=strictly, match=matching, ignore=volatile
            )
            shown = _shown(path, request.config)
        elif trace_id is None or span_id is None:
            raise pytest.UsageError(
                "chronicle_replay needs an incident file, or both trace_id= and span_id="
            )
        else:
            try:
                url, key = _read_from(_settings(config))
            except _Invalid as exc:
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
        return (yield from _record(item, test))
    return (yield from _replay(test))


def _replay(test: ChronicleTest) -> Generator[None, object, object]:
    assert test.scope is not None
    options = test.options
    with contextlib.ExitStack() as stack:
        if options.settings is not None:
            stack.enter_context(_for_this_test(options.settings))
        if options.block_network:
            test.blocked = stack.enter_context(block_network(options.allowed_hosts))
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


def _record(item: pytest.Item, test: ChronicleTest) -> Generator[None, object, object]:
    """Run the test body live and write its incident file, whether the test passes or fails.

    A failed test's file says so in its metadata (``outcome``, ``failure``) and in the line the
    session ends with: an incident test fails on the buggy code by design, but so does a test
    whose environment failed (no network, a bad key). A skipped or interrupted test writes
    nothing.
    """
    assert test.path is not None
    assert isinstance(test.run, RecordingRun)
    run = test.run
    settings: dict[str, object] = {"enabled": True, **(test.options.settings or {})}
    test.notes.append(f"recording {test.shown}: the test body ran live")
    recorder = _Recorder(run)
    failure: BaseException | None = None
    with _for_this_test(settings) as sent:
        default_hooks.register(recorder)
        try:
            with record(item.name) as session:
                run.trace_id = session.trace_id
                result = yield
        except (Exception, pytest.fail.Exception) as exc:
            failure, result = exc, None
        finally:
            default_hooks.unregister(recorder)
    trace_id = session.trace_id
    envelopes = [e for e in sent.envelopes if e.trace_id == trace_id]
    if not envelopes:
        if failure is not None:
            test.notes[-1] = f"{test.shown} not written: the test called no Chronicle boundary"
            raise failure
        pytest.fail(
            f"chronicle: recording {test.shown}: the test called no Chronicle boundary, so there "
            "is nothing to write; does the code under test use @chronicle.boundary or "
            "chronicle.wrap(client)?",
            pytrace=False,
        )
    spans = [
        IncidentSpan(span.span_id, span.service, span.started_at, span.parent_envelope_id)
        for (t, _), span in sent.spans.items()
        if t == trace_id
    ]
    metadata: dict[str, JsonValue] = {"recorded_by": "pytest", "test": item.nodeid}
    metadata["outcome"] = "passed" if failure is None else "failed"
    if failure is not None:
        metadata["failure"] = _failure_line(failure)
    shared = _shared_with(item, test.path)
    Incident.of(envelopes, spans, metadata).write(test.path)
    item.config.stash[_WRITTEN][test.path] = item.nodeid
    test.written = len(envelopes)
    count = f"{len(envelopes)} call" + ("" if len(envelopes) == 1 else "s")
    if failure is None:
        line = f"wrote {test.shown} ({count})"
    else:
        line = (
            f"wrote {test.shown} ({count}; the test failed, marked so in the file: "
            f"{metadata['failure']}); if the failure was the environment (no network, a bad key) "
            "rather than the incident, fix that and record again with "
            "--chronicle-record-mode=rewrite"
        )
    if shared is not None:
        line += (
            f"\n  {test.shown} was also written by {shared} in this run; the last test to write "
            "it wins: give each test its own file"
        )
    test.notes[-1] = line
    item.user_properties.append((_PROPERTY, line))
    if failure is not None:
        raise failure
    return result


@contextlib.contextmanager
def _for_this_test(settings: Mapping[str, object]) -> Iterator[InMemoryControlPlane]:
    """``capture(**settings)`` around one test body, then the configuration before it back (what
    ``configure()`` or the environment set, read from a control plane of its own), so the tests
    that run after it in this process, which pytest-xdist picks, see the same configuration
    whichever worker they land on. A configuration with a client of its own (``capture()``
    around the session) cannot be rebuilt: Chronicle is left unconfigured, as ``capture()``
    leaves it."""
    before = runtime.active()
    try:
        with capture(**settings) as sent:
            yield sent
    finally:
        if before is not None and (
            before.client is None or isinstance(before.client, HttpControlPlane)
        ):
            runtime.configure_with(before.settings)


def _failure_line(error: BaseException) -> str:
    """The error's type and the first line of its message, redacted and cut to 300 characters."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    text = redact_secrets(text)
    return text if len(text) <= 300 else text[:299] + "\u2026"


def _shared_with(item: pytest.Item, path: Path) -> str | None:
    """Another test of this run that wrote ``path`` already: this process's record of what it
    wrote, else (another pytest-xdist worker) the file's own ``test`` if it was written since
    this session started."""
    written = item.config.stash[_WRITTEN].get(path)
    if written is not None and written != item.nodeid:
        return written
    try:
        if path.stat().st_mtime < item.config.stash[_STARTED]:
            return None
        other = Incident.read(path).metadata.get("test")
    except (OSError, ReplayError):
        return None
    return other if isinstance(other, str) and other != item.nodeid else None


# ---- a corpus of recordings (--chronicle-corpus) ------------------------------------------------

_ENTRY = pytest.StashKey["corpus.Entry | str"]()
"""The corpus's entry, imported once per process (or why it cannot be)."""


class CorpusFailed(Exception):
    """A corpus item whose replay did not pass; the message is ``CorpusResult.describe()``."""


class CorpusItem(pytest.Item):
    """One recording of ``--chronicle-corpus``, replayed by calling ``--chronicle-entry`` with
    its recorded input (``chronicle.replay.corpus``); named after the file."""

    def __init__(self, *, recording: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recording = recording

    @override
    def runtest(self) -> None:
        entry = _corpus_entry(self.config)
        if isinstance(entry, str):
            raise CorpusFailed(entry)
        result = corpus.replay_file(self.recording, entry, corpus.Options())
        if not result.passed:
            raise CorpusFailed(result.describe())

    @override
    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, CorpusFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    @override
    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.recording, None, f"chronicle replay {self.name}"


def _corpus_entry(config: pytest.Config) -> corpus.Entry | str:
    entry = config.stash.get(_ENTRY, None)
    if entry is None:
        try:
            entry = corpus.load_entry(str(config.getoption("chronicle_entry")))
        except corpus.CorpusError as exc:
            entry = f"chronicle: {exc}"
        config.stash[_ENTRY] = entry
    return entry


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add one ``CorpusItem`` per incident file under ``--chronicle-corpus`` (sorted, so every
    pytest-xdist worker collects the same items), before ``-k`` and ``--deselect`` apply."""
    folders = config.getoption("chronicle_corpus")
    if not folders:
        return
    if not config.getoption("chronicle_entry"):
        raise pytest.UsageError(
            "--chronicle-corpus needs --chronicle-entry module:function, the function each "
            "recording is replayed through"
        )
    try:
        found = corpus.find_recordings(folders)
    except corpus.CorpusError as exc:
        raise pytest.UsageError(f"--chronicle-corpus: {exc}") from None
    for path in found:
        name = _shown(path.resolve(), config)
        items.append(CorpusItem.from_parent(session, name=name, nodeid=name, recording=path))


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
                lines += _diff_text(run)
            lines.append(f"raised at {where}" if where else "found when the replay ended")
            for shown, run in opened:
                lines += [f"call log ({shown}):", _call_log_text(run)]
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
        item.user_properties.append((_PROPERTY, f"{item.nodeid}\n{text}"))
    return report


def _where_in(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """``file:line`` of the test's own frame closest to the error, if the error came through it."""
    test_file = Path(str(item.path))
    for entry in reversed(excinfo.traceback):
        if Path(str(entry.path)) == test_file:
            return f"{_shown(test_file, item.config)}:{entry.lineno + 1}"
    return None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The files recorded in this session, and the call logs asked for (``-v``)."""
    entries = config.stash.get(_SUMMARY, [])
    if not entries:
        return
    terminalreporter.section("chronicle")
    for entry in entries:
        terminalreporter.write_line(entry)
