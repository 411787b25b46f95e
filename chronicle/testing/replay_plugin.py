"""The replay's part of the pytest plugin (``chronicle.testing.pytest_plugin``): loaded by name
(``config.pluginmanager.import_plugin``) only in a session that collects a test marked
``chronicle_replay`` or asking for ``chronicle_run`` or ``chronicle_replay`` (else when such a
fixture first runs, or a test's replay diverges), so a session with none of them loads no replay
engine, models or runtime.

Here is what the plugin's fixtures call (``prepare``, ``run_of``, ``opener``), what turns a
diverged replay into a report (``reported``), and the hook that runs a marked test's body inside
its replay, or records it (``pytest_runtest_call``). The fixtures, the marker and the options
stay in ``pytest_plugin``, which pytest reads at collection."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    Invalid,
    Options,
    network_option,
    read_from,
    read_options,
    replay_hosts,
    replay_options,
    settings_of,
)
from chronicle.testing.plugin_options import MARKER, PROPERTY
from chronicle.testing.pytest_plugin import default_path
from chronicle.testing.recording_run import (
    RecordingRun,
    for_this_test,
    record_test,
    write_episodes,
)

_STATE = pytest.StashKey["ChronicleTest"]()
_OPENED = pytest.StashKey[list[tuple[str, "ReplayRun | IncidentRun"]]]()
"""The replays a test opened with the ``chronicle_replay`` fixture: what each replays, its run."""


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


def prepare(request: pytest.FixtureRequest) -> None:
    """Prepare the replay (or recording) of a test marked ``chronicle_replay``
    (``pytest_plugin._chronicle_marked``).

    A marker that cannot be used, or a file that cannot be replayed, fails the test's setup with
    a message saying what to do (no traceback: the marker is the place to look).
    """
    item = request.node
    marker = item.get_closest_marker(MARKER)
    assert marker is not None
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


def run_of(item: pytest.Item) -> ReplayRun | IncidentRun | RecordingRun:
    """The run a marked test is replayed (or recorded) in (``chronicle_run``)."""
    test: ChronicleTest | None = item.stash.get(_STATE, None)
    if test is None:
        raise pytest.UsageError(
            f"the chronicle_run fixture needs @pytest.mark.{MARKER}(...) on the test"
        )
    return test.run


def opener(
    request: pytest.FixtureRequest, chronicle_config: dict[str, Any]
) -> Callable[..., ReplayScope | IncidentScope]:
    """What the ``chronicle_replay`` fixture hands the test: opens a replay."""
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


def reported(
    item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
) -> pytest.TestReport:
    """A diverged replay's failure as a report (not a traceback); the ``chronicle`` section
    (``pytest_plugin.pytest_runtest_makereport``, for the call's report)."""
    test: ChronicleTest | None = item.stash.get(_STATE, None)
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
