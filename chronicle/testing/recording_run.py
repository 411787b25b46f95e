"""A marked test the pytest plugin records (``--chronicle-record-mode``): ``record_test`` runs
its body live and writes its incident file; the ``RecordingRun`` the test reads meanwhile (the
calls in a ``CallLog``, through the ``Recorder`` hook); the configuration a test body runs under
(``for_this_test``); ``write_episodes``, which rewrites a replayed file with the calls a
``new_episodes`` replay added."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Protocol

import pytest
from pydantic import JsonValue
from typing_extensions import override

from chronicle import runtime
from chronicle.errors import ReplayError
from chronicle.recording.hooks import CallInfo, Hook, default_hooks
from chronicle.recording.request import record
from chronicle.redaction import redact_secrets
from chronicle.replay.calllog import CallLog, LoggedCall
from chronicle.replay.divergence import Divergence
from chronicle.replay.incident import IncidentRun
from chronicle.replay.run import ReplayRun, with_episodes
from chronicle.save.client import HttpControlPlane
from chronicle.save.incident import Incident, IncidentSpan
from chronicle.testing.memory import InMemoryControlPlane, capture
from chronicle.testing.options import Options
from chronicle.testing.plugin_options import PROPERTY, STARTED, WRITTEN


class MarkedTest(Protocol):
    """What ``record_test`` and ``write_episodes`` read and set of the plugin's state for one
    marked test (``replay_plugin.ChronicleTest``), named here so this module needs nothing of
    the plugin that calls it."""

    options: Options
    path: Path | None
    shown: str
    run: ReplayRun | IncidentRun | RecordingRun
    written: int
    new_episodes: bool
    notes: list[str]


class RecordingRun:
    """What ``chronicle_run`` hands a test that the plugin is recording: its calls, run live.

    The reading methods are those of ``ReplayRun``: every call is ``run``; ``captured_input``
    holds the arguments in JSON form; there is no recording to compare with yet, so
    ``recorded()`` is ``None``.
    """

    def __init__(self) -> None:
        self.trace_id = ""
        self.calls = CallLog()
        """Written by ``Recorder`` as the test's calls happen."""

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


class Recorder(Hook):
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


@contextlib.contextmanager
def for_this_test(settings: Mapping[str, object]) -> Iterator[InMemoryControlPlane]:
    """``capture(**settings)`` around one test body, then the configuration before it back (what
    ``configure()`` or the environment set, read from a control plane of its own), so the tests
    that run after it in this process, which pytest-xdist picks, see the same configuration
    whichever worker they land on. A configuration with a client of its own (``capture()``
    around the session) cannot be rebuilt: Chronicle is left unconfigured, as ``capture()``
    leaves it."""
    before = runtime.configured()
    try:
        with capture(**settings) as sent:
            yield sent
    finally:
        if before is not None and (
            before.client is None or isinstance(before.client, HttpControlPlane)
        ):
            runtime.configure_with(before.settings)


def failure_line(error: BaseException) -> str:
    """The error's type and the first line of its message, redacted and cut to 300 characters."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    text = redact_secrets(text)
    return text if len(text) <= 300 else text[:299] + "\u2026"


def record_test(item: pytest.Item, test: MarkedTest) -> Generator[None, object, object]:
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
    recorder = Recorder(run)
    failure: BaseException | None = None
    with for_this_test(settings) as sent:
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
        metadata["failure"] = failure_line(failure)
    shared = shared_with(item, test.path)
    Incident.of(envelopes, spans, metadata).write(test.path)
    item.config.stash[WRITTEN][test.path] = item.nodeid
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
    item.user_properties.append((PROPERTY, line))
    if failure is not None:
        raise failure
    return result


def shared_with(item: pytest.Item, path: Path) -> str | None:
    """Another test of this run that wrote ``path`` already: this process's record of what it
    wrote, else (another pytest-xdist worker) the file's own ``test`` if it was written since
    this session started."""
    written = item.config.stash[WRITTEN].get(path)
    if written is not None and written != item.nodeid:
        return written
    try:
        if path.stat().st_mtime < item.config.stash[STARTED]:
            return None
        other = Incident.read(path).metadata.get("test")
    except (OSError, ReplayError):
        return None
    return other if isinstance(other, str) and other != item.nodeid else None


@contextlib.contextmanager
def write_episodes(item: pytest.Item, test: MarkedTest) -> Iterator[None]:
    """Around a replay test (once the replay has ended): in ``new_episodes``, rewrite its file
    with what the run made of it (``ReplayRun.episodes``: the calls with no recording, run live,
    added in their place; the recordings no call used, dropped), when the test passed and that
    changed anything; its metadata then says the test passed. A line for the session's end says
    what changed. Nothing for any other mode."""
    if not test.new_episodes:
        yield
        return
    try:
        yield
    except BaseException:
        test.notes.append(
            f"new_episodes: {test.shown} not rewritten: the test failed (the calls with no "
            "recording ran live and were not kept; the call log shows them)"
        )
        raise
    assert test.path is not None
    run = test.run
    if isinstance(run, IncidentRun):
        found = run.episodes()
    else:
        assert not isinstance(run, RecordingRun)
        episodes = run.episodes()
        found = {} if episodes is None else {run.span_id: episodes}
    added = [call for e in found.values() for call in e.added]
    dropped = [call for e in found.values() for call in e.dropped]
    unfinished = [call for e in found.values() for call in e.unfinished]
    if not added and not dropped:
        return
    incident = Incident.read(test.path)
    metadata: dict[str, JsonValue] = {**incident.metadata, "outcome": "passed"}
    metadata.pop("failure", None)
    rewritten = with_episodes(incident, found)
    Incident(rewritten.trace_id, rewritten.spans, rewritten.envelopes, metadata).write(test.path)
    item.config.stash[WRITTEN][test.path] = item.nodeid
    test.written = len(rewritten.envelopes)
    changes = [f"added {', '.join(added)}"] if added else []
    if dropped:
        changes.append(f"dropped {', '.join(dropped)}")
    if unfinished:
        changes.append(f"not added, still running when the test ended: {', '.join(unfinished)}")
    line = f"rewrote {test.shown} (new_episodes: {'; '.join(changes)})"
    test.notes.append(line)
    item.user_properties.append((PROPERTY, line))
