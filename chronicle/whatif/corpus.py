"""Replaying a corpus: every recorded request of an agent, called again against its current code.

``replay_corpus(paths, entry="app.agent:handle")`` replays each incident file under ``paths``
(and each trace id given, read from the control plane) by calling the entry, the function the
user names, with the input recorded for the span's outermost boundary. The entry runs live; every
call it makes is served from the recording (``ReplayPlan().run(entry, n)``: its children are
stubbed, with ``run=`` cut-points running live too), strictly by default, with the same
``ignore=`` rules as ``chronicle.replay()``. The recording never picks the code that runs: the
entry's boundary name must be the recorded entry's name, or the recording is refused.

One plan serves the whole corpus, and most recordings make only some of the calls it names: a
plan entry that matches no call in one recording (``--run get_weather`` where that request never
asked for the weather) is no divergence there, as it is in a single replay. An entry that
matches no call in any recording replayed is a mistake (a misspelt name): ``unmatched_entries``
names it, and ``chronicle replay`` and ``pytest --chronicle-corpus`` fail the run over it.

The entry may also be an ASGI app (``entry="myservice.main:app"``) whose requests
``ChronicleMiddleware(app, record_request=True)`` recorded as their spans' entries: each recorded
request is sent to the app again in this process (``recording/http_entry.py``; no network, the
app's lifespan not run), and the response the middleware's entry call returns is the entry's
result. A recording whose entry is not such a request is refused, and so is one whose request
body was not recorded (``record_body``). An answer of 500 or above where the recording got less
(or the reverse) fails the replay, as a raise would.

Each recording gets a ``CorpusResult``:

- ``passed``: the replay followed the recording (and, with ``fail_on_output``, the entry returned
  what it recorded);
- ``diverged``: the replay departed from it (``divergences``, each with its diff; or a call with
  no recording);
- ``failed``: the live entry raised where the recording returned, or returned where it raised;
- ``error``: the recording could not be replayed (a corrupt file, an entry of another name, an
  input not recorded whole); ``message`` is one line saying what to do.

The entry's result sits beside the recorded one (``live_output``, ``recorded_output``,
``output_changes``), and each call that ran live beside its recording (``cut_points``: latency,
token usage). One recording's problem never stops the others. ``chronicle replay``
(``cli/whatif.py``) and ``pytest --chronicle-corpus`` (``chronicle.testing.pytest_plugin``) are
thin layers over this module.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree

from agentplane_primitives.enums import Status as EnvelopeStatus
from agentplane_primitives.models import Envelope
from pydantic import JsonValue

from chronicle import runtime, wire
from chronicle.errors import (
    ControlPlaneError,
    ReplayDivergenceError,
    ReplayError,
    ReplayMismatchError,
    plural,
)
from chronicle.recording import http_entry
from chronicle.recording.capture import json_form
from chronicle.recording.hooks import CallInfo, Hook, default_hooks
from chronicle.replay import divergence
from chronicle.replay.divergence import (
    Divergence,
    PlanMethod,
    Spelling,
    Volatile,
    plan_option,
)
from chronicle.replay.entry import replay
from chronicle.replay.incident import replay_incident
from chronicle.replay.network import NetworkMode, network_policy
from chronicle.replay.plan import ReplayPlan, call_target
from chronicle.replay.run import Match
from chronicle.save.incident import Incident, SpanChoice, read_incident
from chronicle.save.untrusted import RecordingFileError
from chronicle.whatif.corpus_entry import (
    CorpusError,
    Entry,
    call_of,
    entry_of,
    http_outcome,
    load_entry,
)

__all__ = [
    "CorpusError",
    "CorpusResult",
    "CutPoint",
    "Entry",
    "Options",
    "find_recordings",
    "junit_xml",
    "load_entry",
    "plan_targets",
    "replay_corpus",
    "replay_file",
    "replay_one",
    "replay_trace_id",
    "summary",
    "unmatched_entries",
]

Outcome = Literal["passed", "diverged", "failed", "error"]

logger = logging.getLogger("chronicle")


@dataclass(frozen=True)
class CutPoint:
    """A call that ran live during the replay, beside its recording.

    ``live_ms``/``recorded_ms``: how long it took; ``live_usage``/``recorded_usage``: the token
    usage of a model call (``None`` when there is none, or no recording).
    """

    name: str
    index: int
    live_ms: float
    recorded_ms: float | None
    live_usage: JsonValue = None
    recorded_usage: JsonValue = None

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON form ``--json`` prints."""
        return {
            "name": self.name,
            "index": self.index,
            "live_ms": round(self.live_ms, 3),
            "recorded_ms": None if self.recorded_ms is None else round(self.recorded_ms, 3),
            "live_usage": self.live_usage,
            "recorded_usage": self.recorded_usage,
        }


@dataclass
class CorpusResult:
    """What replaying one recording gave (see the module docstring for ``outcome``)."""

    source: str
    outcome: Outcome
    message: str = ""
    divergences: tuple[Divergence, ...] = ()
    recorded_output: JsonValue = None
    live_output: JsonValue = None
    output_changes: list[str] = field(default_factory=list)
    cut_points: tuple[CutPoint, ...] = ()
    seconds: float = 0.0
    trace_id: str | None = None
    """The recorded trace replayed (``None`` for a file that does not name one)."""
    new_trace_id: str | None = None
    """The trace the replay was recorded as (``Options.record``), else ``None``."""
    unmatched: tuple[Divergence, ...] | None = None
    """The plan entries that matched no call in this recording (no divergence in a corpus:
    see the module docstring); ``None`` when the replay did not get far enough to tell."""
    spelling: Spelling = "python"
    """How ``describe()`` spells its advice (``Options.spelling``)."""

    @property
    def passed(self) -> bool:
        """Whether the replay passed."""
        return self.outcome == "passed"

    def describe(self) -> str:
        """A few lines for a person: the outcome and source, then why (each divergence with its
        advice, spelt as ``spelling`` says), the output, cut-points."""
        head = f"{self.outcome:<8}  {self.source}"
        lines = [f"{head}: {self.message}" if self.message else head]
        unexpected = [d for d in self.divergences if not d.expected]
        if unexpected:
            text = divergence.report(
                unexpected, f"the replay of {self.source}", spelling=self.spelling
            )
            lines += ["    " + line for line in text.splitlines()]
        if self.output_changes:
            lines.append("    the entry's result changed from its recording:")
            lines += ["      " + line for line in self.output_changes]
        for cut in self.cut_points:
            recorded = "" if cut.recorded_ms is None else f" (recorded {cut.recorded_ms:.1f} ms)"
            usage = ""
            if cut.live_usage is not None or cut.recorded_usage is not None:
                usage = (
                    f", tokens {_tokens(cut.live_usage)} (recorded {_tokens(cut.recorded_usage)})"
                )
            lines.append(
                f"    ran {cut.name}#{cut.index} live: {cut.live_ms:.1f} ms{recorded}{usage}"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON form ``--json`` prints."""
        return {
            "source": self.source,
            "outcome": self.outcome,
            "message": self.message,
            "divergences": [
                {
                    "name": d.name,
                    "index": d.index,
                    "kind": d.kind,
                    "diff": d.diff,
                    "expected": d.expected,
                    **({"under": d.under} if d.kind == "network" else {}),
                }
                for d in self.divergences
            ],
            "recorded_output": self.recorded_output,
            "live_output": self.live_output,
            "output_changes": list(self.output_changes),
            "cut_points": [c.to_json() for c in self.cut_points],
            "seconds": round(self.seconds, 4),
        }


def _tokens(usage: JsonValue) -> str:
    if isinstance(usage, dict):
        total = usage.get("total_tokens")
        if total is None:
            parts = [v for k, v in usage.items() if isinstance(v, int) and "token" in k]
            total = sum(parts) if parts else None
        return "?" if total is None else str(total)
    return "?"


# ---- one recording ----------------------------------------------------------------------------


class _Timing(Hook):
    """Times the calls that run live during one replay (a default hook while it runs)."""

    def __init__(self) -> None:
        self.started: dict[tuple[str, int], int] = {}
        self.took: dict[tuple[str, int], float] = {}
        self.usage: dict[tuple[str, int], JsonValue] = {}
        self.thread = threading.get_ident()

    def enter(self, call: CallInfo) -> None:
        self.started[(call.name, call.invocation_index)] = time.perf_counter_ns()

    def crossing(self, call: CallInfo, result: object) -> None:
        usage = getattr(result, "usage", None)
        if usage is not None:
            self.usage[(call.name, call.invocation_index)] = json_form(usage).value

    def leave(self, call: CallInfo) -> None:
        key = (call.name, call.invocation_index)
        start = self.started.pop(key, None)
        if start is not None:
            self.took[key] = (time.perf_counter_ns() - start) / 1e6


def _recorded_ms(envelope: Envelope | None) -> float | None:
    status = envelope.envelope_status if envelope is not None else None
    if status is None or status.ended_at is None or status.started_at is None:
        return None
    return (status.ended_at - status.started_at).total_seconds() * 1000


def _recorded_usage(envelope: Envelope | None) -> JsonValue:
    usage = getattr(envelope.output, "usage", None) if envelope is not None else None
    return usage.model_dump(mode="json", exclude_none=True) if usage is not None else None


@dataclass(frozen=True)
class Options:
    """How each recording is replayed: ``run`` cut-points and ``expect_change`` declarations
    (``(name, n)``, ``n`` ``None`` for every call), ``strict``, ``match``, ``ignore`` as for
    ``chronicle.replay()``, and whether a changed result of the entry fails the replay
    (``fail_on_output``)."""

    run: tuple[tuple[str, int | None], ...] = ()
    expect_change: tuple[tuple[str, int | None], ...] = ()
    """Calls the change is expected to alter (``ReplayPlan.expect_change``): their divergences
    are reported, marked expected, and fail no replay."""
    strict: bool = True
    match: Match = "order"
    ignore: tuple[str, ...] = ()
    fail_on_output: bool = False
    overrides: tuple[tuple[str, int, object], ...] = ()
    """Forks: ``(name, n, value)`` served instead of the recording (``ReplayPlan.override``)."""
    failures: tuple[tuple[str, int, BaseException], ...] = ()
    """Forks: ``(name, n, error)`` raised instead of the recording (``override(error=)``)."""
    models: tuple[tuple[str, int, str], ...] = ()
    """Forks: ``(name, n, model)``: that ``llm`` call sent to another model."""
    record: bool = False
    """Record each replay as a new trace (``replay(..., record=True)``; one span only)."""
    network: NetworkMode = "report"
    """What a connection made outside the cut-points does, as for ``chronicle.replay()``; the
    entry runs live to drive the replay (``ReplayPlan.drive``), so a connection its own body
    makes is reported too."""
    allowed_hosts: tuple[str, ...] = ()
    """Hosts let through whatever the plan says, as for ``chronicle.replay()``."""
    spelling: Spelling = "python"
    """Where the results are printed, so their advice names the fix as it is written there:
    ``cli`` for ``chronicle replay`` (``--run search#2``), ``pytest`` for
    ``--chronicle-corpus`` (``--chronicle-run search#2``), ``python`` for this API
    (``ReplayPlan().run('search', 2)``)."""

    def __post_init__(self) -> None:
        """Raises ``ValueError`` saying what to fix for a bad ``ignore`` pattern or host."""
        network_policy(self.network, self.allowed_hosts, self.strict)
        Volatile(self.ignore)

    def plan(self, entry: str, invocation: int) -> ReplayPlan:
        """The plan of one replay: the entry (``drive``) and ``run`` cut-points live, the
        forks."""
        plan = ReplayPlan().drive(entry, invocation)
        for name, n in self.run:
            plan.run(name, n)
        for name, n in self.expect_change:
            plan.expect_change(name, n)
        for name, n, value in self.overrides:
            plan.override(name, n, output=value)
        for name, n, error in self.failures:
            plan.override(name, n, error=error)
        for name, n, model in self.models:
            plan.run(name, n, model=model)
        return plan


def replay_one(source: str, incident: Incident, entry: Entry, options: Options) -> CorpusResult:
    """Replay one recorded request by calling ``entry`` with its recorded input."""
    began = time.perf_counter()
    made: list[str] = []
    with divergence.advice_spelt(options.spelling):  # the replay's errors advise as results do
        result = _replay_one(source, incident, entry, options, made)
    result.spelling = options.spelling
    result.seconds = time.perf_counter() - began
    result.trace_id = incident.trace_id or None
    result.new_trace_id = made[0] if made else None
    return result


def _replay_one(
    source: str, incident: Incident, entry: Entry, options: Options, made: list[str]
) -> CorpusResult:
    try:
        recorded = entry_of(incident)
    except ReplayError as exc:
        return CorpusResult(source, "error", f"{exc}; record it again")
    shown = recorded.metadata.get(wire.ENTRY)
    where = f" ({shown})" if isinstance(shown, str) else ""
    if not entry.asgi and recorded.name != entry.name:
        return CorpusResult(
            source,
            "error",
            f"its entry is {recorded.name!r}{where}, not {entry.name!r} ({entry.path}); replay "
            "it with the --entry that handles it, or leave it out of this corpus",
        )
    if recorded.input is None or any(
        recorded.metadata.get(key) for key in (wire.LOSSY_INPUT, wire.TRUNCATED)
    ):
        return CorpusResult(
            source,
            "error",
            f"the input of its entry {recorded.name!r} was not recorded whole (capture_input off, "
            "not JSON, or cut to max_payload_bytes), so the entry cannot be called with it; "
            "record the request again with the input captured",
        )
    try:
        call = call_of(entry, recorded.input.raw)
    except http_entry.BodyNotRecorded as exc:
        return CorpusResult(source, "error", str(exc))
    except ValueError as exc:
        if entry.asgi:
            return CorpusResult(
                source,
                "error",
                f"{exc}: its entry is {recorded.name!r}{where}, which {entry.path} does not "
                "serve; replay it with the --entry that handles it, or leave it out of this "
                "corpus",
            )
        return CorpusResult(
            source,
            "error",
            f"{exc}, so {entry.path} cannot be called with it; was it recorded from another "
            "version of the entry, or with capture_input off?",
        )
    invocation = recorded.metadata.get(wire.INVOCATION)
    invocation = invocation if isinstance(invocation, int) else 1
    plan = options.plan(recorded.name if entry.asgi else entry.name, invocation)
    if options.record and len(incident.spans) != 1:
        return CorpusResult(
            source,
            "error",
            f"it holds {len(incident.spans)} spans, and --record records the replay of one "
            "span; save the span to replay with chronicle save TRACE --span S -o FILE",
        )
    recorded_failed = recorded.envelope_status.status is EnvelopeStatus.FAILURE
    recorded_output = None if recorded.output is None else recorded.output.raw
    timing = _Timing()
    default_hooks.register(timing)
    quiet = _NoVerdictWarning()
    if not options.strict:  # the result reports every divergence itself
        logger.addFilter(quiet)
    live: object = None
    raised: BaseException | None = None
    run: Any = None
    ran = False
    try:
        if options.record:
            scope: Any = replay(
                incident.envelopes_of(incident.spans[0].span_id),
                plan,
                strict=options.strict,
                match=options.match,
                ignore=options.ignore,
                record=True,
                network=options.network,
                allowed_hosts=options.allowed_hosts,
            )
            scope.run.service = incident.spans[0].service  # recorded as that service's span
        else:
            scope = replay_incident(
                incident,
                plan,
                strict=options.strict,
                match=options.match,
                ignore=options.ignore,
                network=options.network,
                allowed_hosts=options.allowed_hosts,
            )
        with scope as run:
            recorded_as = getattr(run, "new_trace_id", None)  # record=True: the new trace
            if recorded_as is not None:
                made.append(recorded_as)
            try:
                live = call()
            except ReplayError:
                raise
            except Exception as exc:  # the live code raised: the replay's verdict is moot
                raised = exc
                if options.record:
                    scope.failed(exc)  # the new trace says so
            ran = True
    except ReplayDivergenceError as exc:
        kept = _not_plan(exc.divergences)
        if kept or not ran:
            return CorpusResult(
                source, "diverged", "", kept, recorded_output, unmatched=_unmatched(run)
            )
        # Only plan entries this recording never reached: no divergence in a corpus, so the
        # replay goes on to its result as one that passed its verdict.
    except ReplayMismatchError as exc:
        run_it = plan_option(options.spelling, "run", exc.name, exc.invocation)
        message = (
            f"{exc.reason}; the run diverged from the recorded request. If that call is new on "
            f"purpose, run it live with {run_it}"
        )
        return CorpusResult(
            source, "diverged", message, (), recorded_output, unmatched=_unmatched(run)
        )
    except ReplayError as exc:
        return CorpusResult(source, "error", _one_line(exc), (), recorded_output)
    finally:
        default_hooks.unregister(timing)
        logger.removeFilter(quiet)
    cuts = tuple(
        CutPoint(
            name,
            n,
            took,
            _recorded_ms(run.recorded(name, n)),
            timing.usage.get((name, n)),
            _recorded_usage(run.recorded(name, n)),
        )
        for (name, n), took in timing.took.items()
    )
    found = _not_plan(run.divergences())
    unmatched = _unmatched(run)
    if raised is not None:
        if recorded_failed:
            return CorpusResult(
                source, "passed", "", found, recorded_output, None, [], cuts, unmatched=unmatched
            )
        return CorpusResult(
            source,
            "failed",
            f"the entry raised {type(raised).__name__}: {_one_line(raised)}, where the recording "
            "returned",
            found,
            recorded_output,
            None,
            [],
            cuts,
            unmatched=unmatched,
        )
    answered = None
    if entry.asgi:
        answered = http_outcome(live, recorded_output)
        try:  # the response, as the middleware's entry call returned it
            live = run.captured_result(recorded.name, invocation)
        except KeyError:  # the app did not record the request: its divergences say so
            live = None
    settings = runtime.current().settings
    limit = settings.max_payload_bytes
    live_output = json_form(
        live, max_string_bytes=limit, max_total_bytes=limit, redaction=runtime.current().redaction
    ).value
    if answered is not None:
        return CorpusResult(
            source,
            "failed",
            answered,
            found,
            recorded_output,
            live_output,
            [],
            cuts,
            unmatched=unmatched,
        )
    if recorded_failed:
        error = recorded.output.error if recorded.output is not None else None
        what = f"{error.type}: {error.message}" if error is not None else "an error"
        return CorpusResult(
            source,
            "failed",
            f"the entry returned, where the recording raised {_one_line(what)}",
            found,
            recorded_output,
            live_output,
            [],
            cuts,
            unmatched=unmatched,
        )
    changes = divergence.path_diff(recorded_output, live_output, root="(result)", limit=20)
    outcome: Outcome = "diverged" if changes and options.fail_on_output else "passed"
    message = "the entry's result changed (--fail-on-output)" if outcome == "diverged" else ""
    return CorpusResult(
        source,
        outcome,
        message,
        found,
        recorded_output,
        live_output,
        changes,
        cuts,
        unmatched=unmatched,
    )


def _one_line(error: object) -> str:
    return " ".join(str(error).split())


def _not_plan(found: Iterable[Divergence]) -> tuple[Divergence, ...]:
    """``found`` without the plan entries that matched no call: no divergence in a corpus."""
    return tuple(d for d in found if d.kind != "plan")


def _unmatched(run: Any) -> tuple[Divergence, ...] | None:
    """The plan entries that matched no call in ``run`` (``None``: the replay never began)."""
    if run is None:
        return None
    return tuple(d for d in run.divergences() if d.kind == "plan")


class _NoVerdictWarning(logging.Filter):
    """Leaves out the warning a replay that is not strict logs at its end: a corpus result
    reports every divergence itself (and the plan entries a recording never reached are none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.funcName == "verdict" and record.module == "run")


# ---- a corpus ---------------------------------------------------------------------------------


def find_recordings(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The incident files under ``paths``: a file as given, a folder's ``*.json`` entries (at any
    depth, hidden ones left out; a FIFO or a link of that name too, so that it is refused as its
    own ``error`` result), sorted; each once. Raises ``CorpusError`` for a path that does not
    exist or a folder that cannot be listed."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        try:
            if path.is_dir():
                found += sorted(
                    p
                    for p in path.rglob("*.json")
                    if not any(part.startswith(".") for part in p.relative_to(path).parts)
                )
            elif path.exists():
                found.append(path)
            else:
                raise CorpusError(f"{path} does not exist; name incident files or folders of them")
        except OSError as exc:
            raise CorpusError(
                f"{path} cannot be listed ({exc.strerror}); check its permissions"
            ) from None
    unique: dict[Path, None] = {}
    for path in found:
        unique.setdefault(path, None)
    return list(unique)


def shown_path(path: Path) -> str:
    """``path`` relative to the current directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def replay_file(path: Path, entry: Entry, options: Options) -> CorpusResult:
    """Replay one incident file. Never raises an ``Exception``: a file that cannot be read (not a
    regular file, over ``max_file_bytes``, not UTF-8 or JSON, too deep: see
    ``chronicle.save.untrusted``), and any error of Chronicle's while replaying it, is an
    ``error`` result whose one line names the file and what to do. ``KeyboardInterrupt`` and
    ``SystemExit`` go through."""
    source = shown_path(path)
    try:
        incident = Incident.read(path)
    except FileNotFoundError:
        if path.is_symlink():
            return CorpusResult(
                source,
                "error",
                f"it is a link to {_target(path)}, which does not exist; fix or remove the link",
            )
        return CorpusResult(source, "error", "the file is gone; was it moved while replaying?")
    except ReplayError as exc:
        return CorpusResult(source, "error", _file_error(exc, path))
    except Exception as exc:
        return CorpusResult(source, "error", _unexpected(exc, "read"))
    return _guarded(source, incident, entry, options)


def replay_trace_id(client: Any, trace_id: str, entry: Entry, options: Options) -> CorpusResult:
    """Replay one trace from the control plane (every span of it); a trace that cannot be read,
    and any error of Chronicle's while replaying it, is an ``error`` result."""
    source = f"trace {trace_id}"
    try:
        incident = read_incident(client, trace_id, all_spans=True)
    except ControlPlaneError as exc:
        return CorpusResult(source, "error", _one_line(exc))
    except Exception as exc:
        return CorpusResult(source, "error", _unexpected(exc, "read"))
    assert not isinstance(incident, SpanChoice)
    return _guarded(source, incident, entry, options)


def _guarded(source: str, incident: Incident, entry: Entry, options: Options) -> CorpusResult:
    """``replay_one``, with an error it lets out (a bug, a recording it cannot handle) made the
    recording's ``error`` result: one recording never stops the others."""
    began = time.perf_counter()
    try:
        return replay_one(source, incident, entry, options)
    except Exception as exc:
        result = CorpusResult(source, "error", _unexpected(exc, "replay"))
        result.spelling = options.spelling
        result.seconds = time.perf_counter() - began
        result.trace_id = incident.trace_id or None
        return result


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "a path"


def _file_error(error: ReplayError, path: Path) -> str:
    """The line of a file that cannot be read, without the file's name the result shows."""
    text = _one_line(error).removeprefix("replay: ")
    if isinstance(error, RecordingFileError) and text.startswith(f"{path} "):
        return "it " + text.removeprefix(f"{path} ")
    return text


def _unexpected(error: Exception, doing: str) -> str:
    """The one line of an error Chronicle did not expect while reading or replaying a
    recording."""
    said = _one_line(error)[:300] or "no message"
    return (
        f"chronicle could not {doing} it ({type(error).__name__}: {said}); the recording may be "
        "damaged: record it again, and report it to Chronicle with the file if a fresh recording "
        "does the same"
    )


def replay_corpus(
    paths: Iterable[str | os.PathLike[str]] = (),
    entry: str | Entry = "",
    *,
    trace_ids: Sequence[str] = (),
    client: Any = None,
    options: Options | None = None,
    each: Callable[[CorpusResult], None] | None = None,
) -> list[CorpusResult]:
    """Replay every incident file under ``paths`` and every trace in ``trace_ids`` (read with
    ``client``, a ``chronicle.save.client.HttpControlPlane``), calling ``entry`` for each.

    ``entry`` is ``module:function`` or a loaded ``Entry``; ``each`` is called with each result
    as it is made. Raises ``CorpusError`` only for what stops every replay (an entry that cannot
    be imported, a path that does not exist); a bad recording is its own ``error`` result.
    """
    chosen = load_entry(entry) if isinstance(entry, str) else entry
    options = options or Options()
    results: list[CorpusResult] = []

    def keep(result: CorpusResult) -> None:
        results.append(result)
        if each is not None:
            each(result)

    for path in find_recordings(paths):
        keep(replay_file(path, chosen, options))
    for trace_id in trace_ids:
        keep(replay_trace_id(client, trace_id, chosen, options))
    return results


def summary(results: Sequence[CorpusResult], seconds: float) -> str:
    """One line: how many recordings, how many of each outcome, how long."""
    counts = {outcome: 0 for outcome in ("passed", "diverged", "failed", "error")}
    for result in results:
        counts[result.outcome] += 1
    parts = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n or outcome == "passed")
    rate = f", {len(results) / seconds:.0f}/s" if seconds > 0 and results else ""
    return f"{plural(len(results), 'recording')}: {parts} ({seconds:.2f} s{rate})"


def junit_xml(results: Sequence[CorpusResult], seconds: float) -> str:
    """A JUnit XML report: one test case per recording (diverged and failed as failures,
    error as errors), for CI systems that read it."""
    suite = ElementTree.Element(
        "testsuite",
        name="chronicle replay",
        tests=str(len(results)),
        failures=str(sum(r.outcome in ("diverged", "failed") for r in results)),
        errors=str(sum(r.outcome == "error" for r in results)),
        time=f"{seconds:.3f}",
    )
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname="chronicle.replay",
            name=result.source,
            time=f"{result.seconds:.3f}",
        )
        if result.outcome != "passed":
            tag = "error" if result.outcome == "error" else "failure"
            node = ElementTree.SubElement(
                case, tag, message=f"{result.outcome}: {result.message}".rstrip(": ")
            )
            node.text = result.describe()
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def plan_targets(texts: Iterable[str], option: str = "--run") -> tuple[tuple[str, int | None], ...]:
    """``--run NAME[#n]`` values (``option`` names the flag in the error) as ``(name, n)``
    pairs: ``search`` is every call of ``search``, ``search#2`` its second; ``ValueError`` for a
    bad one."""
    targets: list[tuple[str, int | None]] = []
    for text in texts:
        name, n = call_target(text)  # the plan's rule: a # and digits at the end is n
        if not name or (n is not None and n < 1):
            raise ValueError(
                f"{option} takes NAME or NAME#n with n from 1 (as chronicle show numbers calls), "
                f"got {text!r}"
            )
        targets.append((name, n))
    return tuple(targets)


def unmatched_entries(results: Sequence[CorpusResult]) -> list[str]:
    """One line for each plan entry that matched no call in any recording replayed (a misspelt
    name, a call number no recording reaches), its advice spelt as the results' ``spelling``;
    ``[]`` when each entry matched a call somewhere, or no recording got as far as its plan.

    An entry one recording never reaches is no divergence there (see the module docstring);
    one that no recording reaches is the plan's mistake, and a corpus run fails over it.
    """
    checked = [r.unmatched for r in results if r.unmatched is not None]
    if not checked:
        return []
    spelling = next(r.spelling for r in results if r.unmatched is not None)
    everywhere = [
        found
        for found in checked[0]
        if all(any(_entry(u) == _entry(found) for u in other) for other in checked[1:])
    ]
    count = "the 1 recording" if len(checked) == 1 else f"any of the {len(checked)} recordings"
    lines = []
    for found in everywhere:
        _, _, written = _entry(found)
        method = _METHODS.get(written.partition("(")[0])
        shown = (
            written if method is None else plan_option(spelling, method, found.name, found.index)
        )
        alike = [u for other in checked for u in other if _entry(u) == _entry(found)]
        told = next((u for u in alike if "did you mean" in u.diff), found)  # a close name
        why = told.diff.partition(" matched no call: ")[2].partition("; the boundaries seen")[0]
        lines.append(
            f"the plan entry {shown} matched no call in {count} replayed"
            + (f" ({why})" if why else "")
            + "; fix the name or the call number (chronicle show TRACE lists the calls as name#n)"
        )
    return lines


_METHODS: dict[str, PlanMethod] = {"run": "run", "expect_change": "expect_change"}


def _entry(found: Divergence) -> tuple[str, int | None, str]:
    """A plan divergence's entry: its name, call number, and the entry as the plan writes it
    (``run('search', 2)``), read from the text ``divergence.unmatched_entry`` gives it."""
    written = found.diff.removeprefix("the plan entry ").partition(" matched no call")[0]
    return found.name, found.index, written
