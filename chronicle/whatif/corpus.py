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

import contextlib
import json
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

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
    Spelling,
    Volatile,
    plan_option,
)
from chronicle.replay.entry import replay
from chronicle.replay.incident import IncidentRun, replay_incident
from chronicle.replay.network import NetworkMode, network_policy
from chronicle.replay.plan import ReplayPlan, call_target
from chronicle.replay.run import MadeCall, Match, made_calls
from chronicle.save.incident import Incident, SpanChoice, read_incident
from chronicle.save.untrusted import RecordingFileError
from chronicle.whatif import report
from chronicle.whatif.corpus_entry import (
    CorpusError,
    Entry,
    call_of,
    entry_of,
    http_outcome,
    load_entry,
)
from chronicle.whatif.usage import SLOWER, Totals, Usage, UsagePair, call_usage

__all__ = [
    "CallRow",
    "CorpusError",
    "CorpusResult",
    "CutPoint",
    "Entry",
    "Options",
    "Replayers",
    "find_recordings",
    "junit_xml",
    "load_entry",
    "plan_targets",
    "replay_corpus",
    "replay_file",
    "replay_one",
    "replay_trace_id",
    "sharded",
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


@dataclass(frozen=True)
class CallRow:
    """One call of a replayed recording, in the recording's tree order: ``call`` (``name#n``,
    as ``chronicle show`` numbers it), ``depth`` (0 for the entry), ``kind``, and ``mode``, how
    the replay made it: ``stub`` (served from the recording), ``served`` (inside a served call),
    ``run`` or ``live`` (ran live), ``override`` (a fork's value), ``new`` (no recording), or
    ``missed`` (the replay never made it)."""

    call: str
    depth: int
    kind: str
    mode: str

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON form ``--json`` prints."""
        return {"call": self.call, "depth": self.depth, "kind": self.kind, "mode": self.mode}


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
    usage: UsagePair = field(default_factory=UsagePair)
    """Tokens, cost and live latency, recorded beside replayed (``chronicle.whatif.usage``)."""
    calls: tuple[CallRow, ...] = ()
    """The recording's calls in tree order, each with how the replay made it (``CallRow``)."""

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
            "trace_id": self.trace_id,
            "usage": self.usage.to_json(),
            "calls": [c.to_json() for c in self.calls],
            "details": self.describe(),
            "unmatched": None
            if self.unmatched is None
            else [{"name": d.name, "index": d.index, "diff": d.diff} for d in self.unmatched],
            "spelling": self.spelling,
        }

    def json_line(self) -> str:
        """The line ``chronicle replay --json`` and ``pytest --chronicle-json`` write for it
        (``to_json()``, one line; ``chronicle report`` merges such lines)."""
        return json.dumps(self.to_json(), ensure_ascii=False)


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
    state = _Replay(source, incident, entry, options)
    with divergence.advice_spelt(options.spelling):  # the replay's errors advise as results do
        try:
            _find_entry(state)
            _build_call(state)
            _check_spans(state)
            result = _run(state) or _outcome(state)
        except _Refused as refused:
            result = CorpusResult(source, "error", str(refused), (), state.recorded_output)
    result.usage, result.calls = _measured(state)
    result.spelling = options.spelling
    result.seconds = time.perf_counter() - began
    result.trace_id = incident.trace_id or None
    result.new_trace_id = state.new_trace_id
    return result


class _Refused(Exception):
    """The recording cannot be replayed with this entry; the message is its ``error`` line."""


@dataclass
class _Replay:
    """One recording's replay as it goes: each step reads what the steps before it found."""

    source: str
    incident: Incident
    entry: Entry
    options: Options
    recorded: Envelope | None = None
    """The recorded entry call."""
    where: str = ""
    """`` (module:function)``: the entry's recorded import path, for messages."""
    call: Callable[[], object] | None = None
    """The entry called with the recorded input."""
    invocation: int = 1
    plan: ReplayPlan | None = None
    recorded_output: JsonValue = None
    timing: _Timing = field(default_factory=_Timing)
    run: Any = None
    """The replay's run (``ReplayRun`` or ``IncidentRun``) once it began."""
    live: object = None
    raised: BaseException | None = None
    new_trace_id: str | None = None


def _find_entry(state: _Replay) -> None:
    """The recording's entry call, which must be the entry's (an ASGI app takes any request)."""
    try:
        recorded = state.recorded = entry_of(state.incident)
    except ReplayError as exc:
        raise _Refused(f"{exc}; record it again") from None
    shown = recorded.metadata.get(wire.ENTRY)
    state.where = f" ({shown})" if isinstance(shown, str) else ""
    entry = state.entry
    if not entry.asgi and recorded.name != entry.name:
        raise _Refused(
            f"its entry is {recorded.name!r}{state.where}, not {entry.name!r} ({entry.path}); "
            "replay it with the --entry that handles it, or leave it out of this corpus"
        )


def _build_call(state: _Replay) -> None:
    """The entry's call with the recorded input, which must have been recorded whole and fit."""
    recorded, entry = state.recorded, state.entry
    assert recorded is not None
    if recorded.input is None or any(
        recorded.metadata.get(key) for key in (wire.LOSSY_INPUT, wire.TRUNCATED)
    ):
        raise _Refused(
            f"the input of its entry {recorded.name!r} was not recorded whole (capture_input off, "
            "not JSON, or cut to max_payload_bytes), so the entry cannot be called with it; "
            "record the request again with the input captured"
        )
    try:
        state.call = call_of(entry, recorded.input.raw)
    except http_entry.BodyNotRecorded as exc:
        raise _Refused(str(exc)) from None
    except ValueError as exc:
        if entry.asgi:
            raise _Refused(
                f"{exc}: its entry is {recorded.name!r}{state.where}, which {entry.path} does "
                "not serve; replay it with the --entry that handles it, or leave it out of this "
                "corpus"
            ) from None
        raise _Refused(
            f"{exc}, so {entry.path} cannot be called with it; was it recorded from another "
            "version of the entry, or with capture_input off?"
        ) from None
    invocation = recorded.metadata.get(wire.INVOCATION)
    state.invocation = invocation if isinstance(invocation, int) else 1
    state.plan = state.options.plan(recorded.name if entry.asgi else entry.name, state.invocation)
    state.recorded_output = None if recorded.output is None else recorded.output.raw


def _check_spans(state: _Replay) -> None:
    """``--record`` records the replay of one span: an incident of several is refused."""
    spans = state.incident.spans
    if state.options.record and len(spans) != 1:
        raise _Refused(
            f"it holds {len(spans)} spans, and --record records the replay of one span; save "
            "the span to replay with chronicle save TRACE --span S -o FILE"
        )


def _scope(state: _Replay) -> Any:
    """The replay's scope: of the incident, or recorded as a new trace (``--record``)."""
    options, incident = state.options, state.incident
    if options.record:
        scope = replay(
            incident.envelopes_of(incident.spans[0].span_id),
            state.plan,
            strict=options.strict,
            match=options.match,
            ignore=options.ignore,
            record=True,
            network=options.network,
            allowed_hosts=options.allowed_hosts,
        )
        scope.run.service = incident.spans[0].service  # recorded as that service's span
        return scope
    return replay_incident(
        incident,
        state.plan,
        strict=options.strict,
        match=options.match,
        ignore=options.ignore,
        network=options.network,
        allowed_hosts=options.allowed_hosts,
    )


def _run(state: _Replay) -> CorpusResult | None:
    """Call the entry inside the replay; a result when the replay departed from the recording
    or could not go on, ``None`` when it reached its verdict (``_outcome`` reads it)."""
    assert state.call is not None
    options, source = state.options, state.source
    default_hooks.register(state.timing)
    quiet = _NoVerdictWarning()
    if not options.strict:  # the result reports every divergence itself
        logger.addFilter(quiet)
    ran = False
    try:
        scope = _scope(state)
        with scope as run:
            state.run = run
            state.new_trace_id = getattr(run, "new_trace_id", None)  # record=True: the new trace
            try:
                state.live = state.call()
            except ReplayError:
                raise
            except Exception as exc:  # the live code raised: the replay's verdict is moot
                state.raised = exc
                if options.record:
                    scope.failed(exc)  # the new trace says so
            ran = True
    except ReplayDivergenceError as exc:
        kept = _not_plan(exc.divergences)
        if kept or not ran:
            unmatched = _unmatched(state.run)
            return CorpusResult(
                source, "diverged", "", kept, state.recorded_output, unmatched=unmatched
            )
        # Only plan entries this recording never reached: no divergence in a corpus, so the
        # replay goes on to its result as one that passed its verdict.
    except ReplayMismatchError as exc:
        run_it = plan_option(options.spelling, "run", exc.name, exc.invocation)
        message = (
            f"{exc.reason}; the run diverged from the recorded request. If that call is new on "
            f"purpose, run it live with {run_it}"
        )
        unmatched = _unmatched(state.run)
        return CorpusResult(
            source, "diverged", message, (), state.recorded_output, unmatched=unmatched
        )
    except ReplayError as exc:
        return CorpusResult(source, "error", _one_line(exc), (), state.recorded_output)
    finally:
        default_hooks.unregister(state.timing)
        logger.removeFilter(quiet)
    return None


def _outcome(state: _Replay) -> CorpusResult:
    """The verdict of a replay that followed its recording: the entry raised where it returned
    (or the reverse), an HTTP answer of another class, or its result beside the recorded one."""
    run, recorded, entry = state.run, state.recorded, state.entry
    assert recorded is not None
    cuts = tuple(
        CutPoint(
            name,
            n,
            took,
            _recorded_ms(run.recorded(name, n)),
            state.timing.usage.get((name, n)),
            _recorded_usage(run.recorded(name, n)),
        )
        for (name, n), took in state.timing.took.items()
    )
    found, unmatched = _not_plan(run.divergences()), _unmatched(run)

    def result(
        outcome: Outcome, message: str = "", live: JsonValue = None, compared: bool = False
    ) -> CorpusResult:
        changes: list[str] = []
        if compared:
            changes = divergence.path_diff(state.recorded_output, live, root="(result)", limit=20)
            if changes and state.options.fail_on_output:
                outcome, message = "diverged", "the entry's result changed (--fail-on-output)"
        return CorpusResult(
            state.source,
            outcome,
            message,
            found,
            state.recorded_output,
            live,
            changes,
            cuts,
            unmatched=unmatched,
        )

    recorded_failed = recorded.envelope_status.status is EnvelopeStatus.FAILURE
    if state.raised is not None:
        if recorded_failed:
            return result("passed")
        raised = state.raised
        return result(
            "failed",
            f"the entry raised {type(raised).__name__}: {_one_line(raised)}, where the "
            "recording returned",
        )
    live, answered = state.live, None
    if entry.asgi:
        answered = http_outcome(live, state.recorded_output)
        try:  # the response, as the middleware's entry call returned it
            live = run.captured_result(recorded.name, state.invocation)
        except KeyError:  # the app did not record the request: its divergences say so
            live = None
    rt = runtime.current()
    limit = rt.settings.max_payload_bytes
    live_output = json_form(
        live, max_string_bytes=limit, max_total_bytes=limit, redaction=rt.redaction
    ).value
    if answered is not None:
        return result("failed", answered, live_output)
    if recorded_failed:
        error = recorded.output.error if recorded.output is not None else None
        what = f"{error.type}: {error.message}" if error is not None else "an error"
        return result(
            "failed",
            f"the entry returned, where the recording raised {_one_line(what)}",
            live_output,
        )
    return result("passed", "", live_output, compared=True)


# ---- what the replay cost, beside its recording ------------------------------------------------


def _measured(state: _Replay) -> tuple[UsagePair, tuple[CallRow, ...]]:
    """The recording's usage beside the replay's (``chronicle.whatif.usage``: a served call
    counts its recording, a live call its new usage, a call never reached nothing), and the
    recording's calls, each with how the replay made it. Never raises: what cannot be read is
    left out."""
    try:
        return _measure(state)
    except Exception:  # a figure is never worth a result: report the replay without it
        logger.debug("chronicle: could not measure the replay's usage", exc_info=True)
        return UsagePair(), ()


def _measure(state: _Replay) -> tuple[UsagePair, tuple[CallRow, ...]]:
    envelopes = state.incident.envelopes
    made = _made_calls(state.run)
    modes = {m.envelope.envelope_id: m.mode for m in made if m.envelope is not None}
    ids = {e.envelope_id for e in envelopes}
    children: dict[str | None, list[Envelope]] = {}
    for envelope in envelopes:
        parent = envelope.parent_envelope_id
        children.setdefault(parent if parent in ids else None, []).append(envelope)
    recorded, replayed = Usage(), Usage()
    rows: list[CallRow] = []
    depths: dict[str, int] = {}
    work: list[tuple[Envelope, int, str]] = [(e, 0, "") for e in reversed(children.get(None, []))]
    while work:
        envelope, depth, above = work.pop()
        mode = modes.get(envelope.envelope_id) or (
            "served" if above in ("stub", "override", "served") else "missed"
        )
        if state.run is None:
            mode = "missed"
        label = _label(envelope)
        depths.setdefault(label, depth)
        kind = str(getattr(envelope.kind, "value", envelope.kind))
        rows.append(CallRow(label, depth, kind, mode))
        if kind == "llm":
            used = _envelope_usage(envelope)
            recorded += used
            if mode in ("stub", "served"):
                replayed += used
        work.extend((c, depth + 1, mode) for c in reversed(children.get(envelope.envelope_id, [])))
    live = [m for m in made if m.mode in ("run", "live")]
    for call in live:
        if call.returned and getattr(call.spec, "kind", None) == "llm":
            replayed += _live_usage(call)
    for call in made:
        if call.envelope is None:
            where = depths.get(call.parent or "", -1) + 1
            kind = str(getattr(call.spec, "kind", "tool"))
            rows.append(CallRow(f"{call.name}#{call.n}", where, kind, "new"))
    latency = _latency(state, live)
    return UsagePair(recorded + latency[0], replayed + latency[1], latency[2]), tuple(rows)


def _made_calls(run: Any) -> list[MadeCall]:
    """The calls a finished replay made, span by span; none when it never began or ended."""
    if run is None:
        return []
    runs = run.runs.values() if isinstance(run, IncidentRun) else [run]
    made: list[MadeCall] = []
    for one in runs:
        try:
            made += made_calls(one)  # the diff and evaluate read a finished run the same way
        except ReplayError:  # still running: it never ended
            return []
    return made


def _label(envelope: Envelope) -> str:
    n = envelope.metadata.get(wire.INVOCATION)
    return f"{envelope.name}#{n if isinstance(n, int) else 1}"


def _envelope_usage(envelope: Envelope) -> Usage:
    """A recorded model call's usage, priced at the time it started."""
    output = envelope.output
    usage = getattr(output, "usage", None)
    if usage is None:
        return Usage()
    model = getattr(output, "model", None) or getattr(envelope.input, "model", None)
    status = envelope.envelope_status
    return call_usage(
        usage.model_dump(mode="json", exclude_none=True),
        model,
        getattr(output, "provider", None),
        None if status is None else status.started_at,
    )


def _live_usage(call: MadeCall) -> Usage:
    """A model call's usage as it ran live: its result read by its provider's adapter."""
    adapter = getattr(call.spec, "adapter", None)
    if adapter is None:
        return Usage()
    arguments = json_form(call.arguments).value
    llm_input = adapter.to_input(arguments if isinstance(arguments, dict) else {})
    output = adapter.to_output(json_form(call.result).value, llm_input)
    if output.usage is None:
        return Usage()
    return call_usage(
        output.usage.model_dump(mode="json", exclude_none=True),
        output.model or llm_input.model,
        adapter.provider,
        datetime.now(UTC),
    )


def _latency(state: _Replay, live: list[MadeCall]) -> tuple[Usage, Usage, int]:
    """The innermost calls that ran live (the cut-points, not the entry or the path to them):
    their recorded time, their live time, and how many were slower than recorded."""
    entry = (state.recorded.name if state.recorded is not None else "", state.invocation)
    outer = {call.parent for call in live}
    recorded_ms = live_ms = 0.0
    slower = 0
    for call in live:
        if (call.name, call.n) == entry or f"{call.name}#{call.n}" in outer:
            continue
        took = state.timing.took.get((call.name, call.n))
        before = _recorded_ms(call.envelope)
        if took is None:
            continue
        live_ms += took
        if before is not None:
            recorded_ms += before
            slower += took > before * SLOWER
    return Usage(latency_ms=recorded_ms), Usage(latency_ms=live_ms), slower


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
    shard: tuple[int, int] | None = None,
    jobs: int = 1,
) -> list[CorpusResult]:
    """Replay every incident file under ``paths`` and every trace in ``trace_ids`` (read with
    ``client``, a ``chronicle.save.client.HttpControlPlane``), calling ``entry`` for each.

    ``entry`` is ``module:function`` or a loaded ``Entry``; ``each`` is called with each result
    as it is made; ``shard=(k, n)`` replays only the k-th of n even parts of the corpus
    (``sharded``). ``jobs`` above 1 spreads the files over that many processes (``entry`` then
    a ``module:function`` each of them imports; the results come back in the same order, and
    the trace ids are replayed here, after them). Raises ``CorpusError`` only for what stops
    every replay (an entry that cannot be imported, a path that does not exist); a bad
    recording is its own ``error`` result.
    """
    chosen = load_entry(entry) if isinstance(entry, str) else entry
    options = options or Options()
    results: list[CorpusResult] = []

    def keep(result: CorpusResult) -> None:
        results.append(result)
        if each is not None:
            each(result)

    files = find_recordings(paths)
    if shard is not None:
        files, trace_ids = sharded(files, trace_ids, *shard)
    if jobs > 1 and len(files) > 1:
        for result in _in_processes(files, entry, options, jobs):
            keep(result)
    else:
        for path in files:
            keep(replay_file(path, chosen, options))
    for trace_id in trace_ids:
        keep(replay_trace_id(client, trace_id, chosen, options))
    return results


def _in_processes(
    files: Sequence[Path], entry: str | Entry, options: Options, jobs: int
) -> Iterator[CorpusResult]:
    """``replay_file`` of each file in ``jobs`` fresh processes, in the files' order."""
    path = entry if isinstance(entry, str) else entry.path
    with Replayers(path, options, jobs) as replayers:
        for _, result in replayers.results(files):
            if isinstance(result, str):  # the entry cannot be imported there (it was here)
                raise CorpusError(result)
            yield result


class Replayers:
    """``jobs`` fresh processes replaying recordings ahead of the one that reads their results.

    Each process is forked from a server process that imported the entry's module once
    (``multiprocessing``'s ``forkserver``; spawned where there is none), so none inherits this
    one's threads or state; it loads the entry (``module:function``) and takes ``options``
    once. ``results(files)`` replays the files in chunks and yields ``(file, result)`` in the
    files' order as the results arrive, holding at most ``ahead`` chunks of results at a time,
    whatever the corpus's size (memory flat). A result is the file's ``CorpusResult``, or the
    line saying why the entry cannot be imported in that process. Use it as a context manager:
    leaving it stops the processes, and the replays not yet started never run."""

    def __init__(self, entry: str, options: Options, jobs: int, *, ahead: int = 0) -> None:
        self.jobs = max(1, jobs)
        self.ahead = ahead or 4 * self.jobs
        """Chunks submitted and not yet read (each process has a chunk queued behind the one
        it replays, and finished ones wait to be read)."""
        self.setup = (entry, options, dict(os.environ), os.getcwd())
        context = _context(entry)
        self.spawned = context.get_start_method() == "spawn"
        self.pool = self._pool(context)

    def _pool(self, context: Any) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self.jobs, mp_context=context, initializer=_start_worker, initargs=self.setup
        )

    def _submit(self, chunk: Sequence[Path], first: bool) -> Future[list[CorpusResult | str]]:
        """``chunk`` to a process. A server that cannot fork one (the entry's module raised
        when the server imported it) is left for spawned processes, before the first chunk
        (each then says why the entry cannot be imported, as it would here)."""
        try:
            return self.pool.submit(_replay_chunk, chunk)
        except BrokenExecutor:
            raise
        except (OSError, EOFError):
            if not first or self.spawned:
                raise
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.spawned = True
        self.pool = self._pool(multiprocessing.get_context("spawn"))
        return self.pool.submit(_replay_chunk, chunk)

    def results(
        self, files: Sequence[Path], chunk: int = 0
    ) -> Iterator[tuple[Path, CorpusResult | str]]:
        """Each file's result, in order; ``chunk`` files go to a process at a time (default:
        from 1 to 16, so that every process gets several chunks)."""
        size = chunk or max(1, min(16, len(files) // (self.jobs * 4)))
        chunks = [files[start : start + size] for start in range(0, len(files), size)]
        pending: deque[Future[list[CorpusResult | str]]] = deque()
        submitted = 0
        while submitted < len(chunks) or pending:
            while submitted < len(chunks) and len(pending) < self.ahead:
                pending.append(self._submit(chunks[submitted], first=submitted == 0))
                submitted += 1
            done = submitted - len(pending)
            yield from zip(chunks[done], pending.popleft().result(), strict=True)

    def close(self) -> None:
        """Stop the processes; the replays not started are dropped (an interrupted session)."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Replayers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _context(entry: str) -> Any:
    """How the replaying processes start: forked from a fresh server process that imported
    this module and the entry's once (``forkserver``: a process costs milliseconds, not the
    second its imports take, and none inherits this one's threads), else spawned (Windows).

    The server is started here, with the current directory on the ``sys.path`` it is given
    (where ``load_entry`` imports from), which is this process's ``sys.path`` as it was before
    and after: the directory is there only while the server starts. A server started earlier
    (by another corpus, from another directory) is used as it is: each process it forks moves
    to this directory and imports the entry itself (``_start_worker``). Never raises: a server
    that cannot start here is started by the pool, which says why if it cannot."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, entry.partition(":")[0]])
    with _cwd_on_path():
        try:
            multiprocessing.forkserver.ensure_running()
        except Exception:  # the pool starts it again, and says why if it cannot
            logger.debug(
                "chronicle: could not start the replaying processes' server", exc_info=True
            )
    return context


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """The current directory first on ``sys.path`` for the block (unless it or ``""`` is there
    already), then ``sys.path`` as it was."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def start_replayers(entry: str) -> None:
    """Start, now, what ``Replayers(entry, ...)`` will fork its processes from (the server
    process importing the entry's module), so that its imports overlap the caller's own work
    (pytest collecting) instead of following it. Never raises: ``Replayers`` starts it anyway."""
    _context(entry)


_WORKER: list[tuple[Entry | str, Options]] = []
"""A replaying process's entry (or why it cannot be imported) and options (``_start_worker``)."""


def _start_worker(entry: str, options: Options, environ: dict[str, str], cwd: str) -> None:
    """Set up a replaying process: the environment and current directory of the process that
    started it, as they are now (the server it is forked from may have started earlier, in
    another directory: relative recording paths and the entry's module are found from
    ``cwd``), the entry, the options."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    try:
        loaded: Entry | str = load_entry(entry)
    except CorpusError as exc:
        loaded = str(exc)
    _WORKER.append((loaded, options))


def _replay_chunk(paths: Sequence[Path]) -> list[CorpusResult | str]:
    entry, options = _WORKER[0]
    if isinstance(entry, str):
        return [entry for _ in paths]
    return [replay_file(path, entry, options) for path in paths]


def sharded(
    files: Sequence[Path], trace_ids: Sequence[str], k: int, n: int
) -> tuple[list[Path], list[str]]:
    """The ``k``-th of ``n`` even parts of a corpus (``chronicle.whatif.report.shard``), its
    files and trace ids sorted by their path as given and their id: the same recording falls in
    the same part on every machine that runs the same command."""
    keyed = sorted(
        [(str(path), path) for path in files] + [(f"trace {t}", t) for t in trace_ids],
        key=lambda item: item[0],
    )
    part = [value for _, value in report.shard(keyed, k, n)]
    return [p for p in part if isinstance(p, Path)], [t for t in part if isinstance(t, str)]


def summary(results: Sequence[CorpusResult], seconds: float) -> str:
    """One line: how many recordings, how many of each outcome, how long; then, when a model
    call was counted, the usage change (``tokens -38%, cost -41%, 2 calls slower``)."""
    counts = {outcome: 0 for outcome in ("passed", "diverged", "failed", "error")}
    totals = Totals()
    for result in results:
        counts[result.outcome] += 1
        totals.add(result.usage)
    parts = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n or outcome == "passed")
    rate = f", {len(results) / seconds:.0f}/s" if seconds > 0 and results else ""
    line = f"{plural(len(results), 'recording')}: {parts} ({seconds:.2f} s{rate})"
    counted = totals.recorded.calls or totals.replayed.calls or totals.slower_calls
    return f"{line}; {totals.change()}" if counted else line


def junit_xml(results: Sequence[CorpusResult], seconds: float) -> str:
    """A JUnit XML report: one test case per recording (diverged and failed as failures,
    error as errors), for CI systems that read it (``chronicle.whatif.report.junit_xml``)."""
    return report.junit_xml(report.Report.of([r.to_json() for r in results], seconds))


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
    one that no recording reaches is the plan's mistake, and a corpus run fails over it. The
    lines are ``report.unmatched_lines``'s, which the report of merged shards gives too.
    """
    checked = [r for r in results if r.unmatched is not None]
    spelling = checked[0].spelling if checked else "python"
    entries = [[(d.name, d.index, d.diff) for d in r.unmatched or ()] for r in checked]
    return report.unmatched_lines(entries, spelling)
