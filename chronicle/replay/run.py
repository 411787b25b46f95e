"""Replaying one recorded request span in test code: the run (``ReplayRun``).

``replay_trace(trace_id, span_id, plan)`` (``replay/entry.py``) reads the span's envelopes from
the control plane; ``replay(envelopes, plan)`` replays envelopes already held (a list, the JSON
body of ``GET /v1/traces/{t}/spans/{s}/envelopes``, or a path to a file holding it). Both are
context managers (``with`` and ``async with``) that yield a ``ReplayRun``.

Inside, every boundary call is matched against the recorded call tree (``replay/tree.py``):
among the recorded children of the call it is made in (the span's top level being one parent),
by name and count (``match="order"``, the default: the k-th ``planner`` a live ``researcher``
makes is the k-th ``planner`` recorded under that ``researcher``), or by equal input among the
unused recordings of that name there (``match="input"``, for calls whose order varies, parallel
ones say). Plans, the call log and divergences name calls by their span-wide numbers
(``planner#2``, as ``chronicle show`` prints them):

- STUB (the default) returns the recorded ``output.raw`` and runs no code and no hooks: the SDK's
  own types for wrapped clients, the return annotation's type for a ``@boundary`` that names one
  (pydantic models, dataclasses, enums, bytes), else dicts and lists with attribute access. A
  recorded failure is raised again (see ``StubCall``); an output that was not JSON raises
  ``LossyReplayError``. A stubbed call consumes its recorded subtree: what it called is never
  reported as unused.
  A streamed call or a generator gets its recorded items again (``replay/streams.py``).
- RUN executes the real code (and the default hooks) and keeps the input and result in memory;
  the boundaries it calls are served from *its* recorded children. A call whose recorded
  subtree holds a cut-point runs too (a child can only be called by its parent).
- A call with no recording where it is made raises ``ReplayMismatchError`` naming the call that
  made it, unless the plan runs it. ``ReplayPlan().record_new()`` runs every such call live and
  records it (sent nowhere), in its place in the tree: ``ReplayRun.episodes()`` is the span's
  recording as the run made it, which ``replay(path)`` and the pytest plugin's ``new_episodes``
  write back to the incident file.

Every stubbed call's input is compared with the recording it is served; changed inputs, unused
recordings and plan entries that matched nothing are divergences (``chronicle.replay.divergence``),
listed by ``ReplayRun.divergences()``. A strict replay raises ``ReplayDivergenceError`` for each
one the plan did not expect; otherwise one warning at exit sums them up.

Nothing else runs live: a connection the code makes outside any boundary the plan runs (an
un-instrumented tool or client) is a ``network`` divergence naming the host and the innermost
boundary it was made under (``network="report"``, the default; a strict replay refuses it with
``ReplayDivergenceError``), or refused (``network="block"``), or let through (``"allow"``);
the control plane, ``through`` services and ``allowed_hosts=`` are always let through
(``replay/network.py``). A strict divergence raised inside the replay that the code under test
caught (a framework wrapping it in its own error) is raised again when the replay exits
(``reraise_swallowed``).

Nothing is written: boundaries start no spans while replaying, request spans opened by the code
under test neither register nor save anything, and ``ReplaySampler`` drops every other span.
The replay lives in the OpenTelemetry context, so it applies to the thread or task that entered
it and what inherits that context (threads and executors started inside it do), and never leaks
into another replay. Code that runs without any replay in its context while replays are active
(a thread started earlier) is served by the replay when exactly one is active, and refused with
a ``ReplayError`` otherwise: it never runs live or writes.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal, NamedTuple

from agentplane_primitives.models import Envelope
from opentelemetry import context as otel_context

from chronicle import runtime, wire
from chronicle.errors import (
    NetworkBlockedError,
    ReplayDivergenceError,
    ReplayError,
    ReplayMismatchError,
)
from chronicle.otel.context import REPLAY_PARENT_KEY
from chronicle.recording.call import Call, CallSpec, RecordedCall, call_info
from chronicle.recording.capture import json_arguments
from chronicle.recording.hooks import CallInfo, Hook, default_hooks
from chronicle.recording.session import Session
from chronicle.replay import divergence
from chronicle.replay.calllog import CallLog, LoggedCall
from chronicle.replay.calls import (
    LiveCall,
    Outcomes,
    OverrideCall,
    Recorder,
    RecordingOverrideCall,
    RecordingStubCall,
    StubCall,
)
from chronicle.replay.divergence import Divergence, LiveInput, Volatile, input_unchanged
from chronicle.replay.network import RESOLVED, NetworkPolicy, network_policy
from chronicle.replay.network import target as connection_target
from chronicle.replay.plan import Mode, ReplayPlan, call_target, describe_entry
from chronicle.replay.tree import TOP, RecordedTree, Scope
from chronicle.save.incident import Incident

logger = logging.getLogger("chronicle")

Match = Literal["order", "input"]
MATCHES = ("order", "input")
_NO_CALLS: dict[int, Envelope] = {}
_RAISED_ORDER = itertools.count()
"""Orders the strict divergences raised in several runs (an incident's spans): the first wins."""


class Callee(NamedTuple):
    """The recorded span a recorded outbound call was answered by, in another service."""

    span_id: str
    service: str | None


class ReplayRun:
    """A replay in progress: the recording, the plan, and what happened so far.

    Calls are matched against the recorded call tree (``replay/tree.py``): a call made inside a
    call that runs live is served from that call's recorded children; a stubbed call consumes
    its recorded subtree.
    """

    def __init__(
        self,
        envelopes: list[Envelope],
        plan: ReplayPlan,
        *,
        export_spans: bool = False,
        strict: bool = False,
        match: Match = "order",
        ignore: Iterable[str] = (),
        record: bool = False,
        network: str = "report",
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        if match not in MATCHES:
            raise ValueError(f"match is 'order' or 'input', got {match!r}")
        self.network: NetworkPolicy | None = network_policy(network, allowed_hosts, strict)
        """How connections the plan does not run are treated (``None``: ``network="allow"``);
        an incident's spans share one."""
        self._strict_error: tuple[int, ReplayDivergenceError] | None = None
        self._connections: dict[tuple[str, str | None], tuple[int, int]] = {}
        self.plan = plan
        self.record = record
        """Whether the replay is recorded as a new trace (``record=True``)."""
        self.new_trace_id: str | None = None
        """The trace this replay was recorded as (``record=True``, once entered), else ``None``:
        ``chronicle.diff(run.trace_id, run.new_trace_id)`` shows what the change did."""
        # What serves a stub or an override: the plain calls, or (record=True) calls that are
        # also recorded. The stub path pays one attribute lookup for it, and no check.
        self._stub_call: type[StubCall] = RecordingStubCall if record else StubCall
        self._override_call: type[OverrideCall] = RecordingOverrideCall if record else OverrideCall
        self.volatile = ignore if isinstance(ignore, Volatile) else Volatile(ignore)
        """The input paths not compared: ``ignore=`` and the built-in defaults."""
        self.export_spans = export_spans
        self.strict = strict
        self.match: Match = match
        self.envelopes = envelopes
        self.trace_id = envelopes[0].trace_id if envelopes else ""
        self.span_id = envelopes[0].span_id if envelopes else ""
        self.tree = RecordedTree(envelopes)
        self._top = Scope(self, self.tree, TOP, "the span's top level")
        self._encloses_cut_point = self._paths_to_cut_points()
        self._forks = plan.forks  # the stub path checks this one flag, and nothing more
        self._forked = False  # a fork call was made: what follows may differ (expected)
        self._fork_order: int | None = None  # its recording's place in call order
        self._live_from_now = False  # live_after's anchor was made: every call runs live
        self._order: dict[str, int] = {}
        self._anchor: str | None = None
        if self._forks:
            self._plan_forks()
        self._calls = CallLog(self.tree.by_name)
        # What the calls report to (results, errors, the recorded trace's page, the recorder
        # of record=True): the calls get it, never the run.
        self._outcomes = Outcomes(self._calls)
        self._served: dict[str, Mode] = {}  # envelope id -> the mode of the call it stood for
        self._any_live = False  # no call ran live yet: every call is made at the top level
        self._new: dict[str, int] = {}  # calls with no recording, by name
        # For chronicle.diff(run), kept off the stub path only: the spec of each call whose live
        # input or result the recording cannot stand for (run, live, override, a stub whose
        # input changed), the live call each call with no recording was made in (None: the top
        # level), and the error each live call raised, by ``name#n``.
        self._specs: dict[tuple[str, int], CallSpec] = {}
        self._made_in: dict[tuple[str, int], str | None] = {}
        self._records_new = plan.records_new
        if self._records_new and plan.forks:
            raise ReplayError(
                f"replay: {plan!r} records new calls (record_new) and forks (override, model=, "
                "live_after): what a fork serves is not what the code does, so it cannot be "
                "written as the recording; drop record_new() or the fork"
            )
        self._recorder: _NewCalls | None = None  # record_new: made at the first new call
        self._new_ids: dict[tuple[str, int], str] = {}  # a new call's envelope id, by (name, n)
        self._ran = True  # its code ran (False: an incident's span no call was made in)
        self.write_to: Path | None = None
        """``record_new``: the incident file ``episodes()`` is written to when the replay ends
        without an error (``replay(path)`` sets it), else ``None``."""
        self._divergences: list[Divergence] = []
        self._finished = False
        self._lock = threading.Lock()
        self.service: str | None = None
        """The service whose span is replayed, when the replay read it from the trace."""
        self._let_through: dict[str, Callee | None] = {}
        """Recorded calls the plan lets through to another service (``through``), by envelope
        id, with the span that answered each when the trace says (``know_spans``)."""
        self._remote_matched: set[tuple[str, int | None, str]] = set()
        if plan.lets_through:
            know_spans(self, ())

    @property
    def url(self) -> str | None:
        """The control plane's page for the recorded trace, when it was read from one."""
        return self._outcomes.url

    @url.setter
    def url(self, url: str | None) -> None:
        self._outcomes.url = url

    def _paths_to_cut_points(self) -> frozenset[str]:
        """The recorded calls whose subtree holds a call the plan runs: they run too."""
        plan, tree = self.plan, self.tree
        if not plan.runs_any:
            return frozenset()
        found: set[str] = set()
        for envelope in tree.envelopes:
            eid = envelope.envelope_id
            if plan.mode_for(envelope.name, tree.index[eid]) == "run":
                found.update(tree.ancestors(eid))
        return frozenset(found)

    def _plan_forks(self) -> None:
        """Where the plan forks: the calls enclosing an override or the ``live_after`` anchor
        run (a call is reached through its parents); a rule stubbing one of them is an error."""
        plan, tree = self.plan, self.tree
        self._order = {e.envelope_id: at for at, e in enumerate(tree.envelopes)}
        targets: list[Envelope | None] = [
            tree.by_name.get(name, _NO_CALLS).get(n) for name, n in plan.overrides
        ]
        if plan.anchor is not None:
            anchor = tree.by_name.get(plan.anchor[0], _NO_CALLS).get(plan.anchor[1])
            if anchor is not None:
                self._anchor = anchor.envelope_id
                for parent in tree.ancestors(anchor.envelope_id):
                    outer = tree.by_id[parent]
                    if plan.rule_for(outer.name, tree.index[parent]) == "stub":
                        raise ReplayError(
                            f"replay: live_after{plan.anchor!r} is inside "
                            f"{tree.label(parent)}, which the plan stubs, so it can never be "
                            f"made; remove stub({outer.name!r}, {tree.index[parent]}) or "
                            "anchor on a call outside it"
                        )
                targets.append(anchor)
        found = set(self._encloses_cut_point)
        for target in targets:
            if target is not None:
                found.update(tree.ancestors(target.envelope_id))
        self._encloses_cut_point = frozenset(found)

    def _fork_mode(self, name: str, n: int, eid: str | None, mode: Mode) -> Mode:
        """The mode of a call under a plan that forks (called under the lock)."""
        plan = self.plan
        if self._live_from_now:
            return "live"
        if (eid is not None and eid == self._anchor) or (eid is None and plan.anchor == (name, n)):
            self._live_from_now = True
            self._fork(eid)
            return "live"
        if (name, n) in plan.overrides:
            self._fork(eid)
            return "override"
        if mode == "run" and ((name, n) in plan.models or (name, None) in plan.models):
            self._fork(eid)
            return "live"
        if mode == "stub" and eid in self._encloses_cut_point and plan.rule_for(name, n) is None:
            return "run"  # it encloses an override or the anchor (a plan with no run rules)
        return mode

    def _fork(self, eid: str | None) -> None:
        self._forked = True
        if eid is not None and self._fork_order is None:
            self._fork_order = self._order[eid]

    # ---- what a test asserts on -----------------------------------------------------------

    def call_log(self) -> list[LoggedCall]:
        """Every crossing so far, in order, with its mode (``stub``, ``run``, ``override`` or
        ``live``: see ``Mode``)."""
        with self._lock:
            calls, service = self._calls.shown(), self.service
        if service is None:
            return calls
        return [c if c.service is not None else c._replace(service=service) for c in calls]

    def captured_input(self, name: str, n: int | None = None) -> dict[str, object]:
        """The arguments (by name, live values) of call ``name#n`` during this replay.

        ``n`` is the span-wide number of the recorded call (see ``LoggedCall``), default 1; the
        name may carry it instead, as in a plan (``"search#2"``: ``call_target``).
        """
        name, given = call_target(name, n)
        n = 1 if given is None else given
        with self._lock:
            if not self._calls.called(name, n):
                raise KeyError(self._not_called(name, n))
            return self._calls.arguments(name, n)

    def captured_result(self, name: str, n: int | None = None) -> object:
        """What call ``name#n`` returned during this replay (the live value for RUN): call ``n``
        (default 1), or the call ``"name#n"`` names, as in a plan (``call_target``)."""
        name, given = call_target(name, n)
        n = 1 if given is None else given
        with self._lock:
            if not self._calls.has_result(name, n):
                if self._calls.called(name, n):
                    raise KeyError(
                        f"call {n} of {name!r} raised or has not returned yet, so it has no result"
                    )
                raise KeyError(self._not_called(name, n))
            return self._calls.result(name, n)

    def recorded(self, name: str, n: int | None = None) -> Envelope | None:
        """The recorded envelope of call ``name#n`` (``n`` default 1, or in the name), if any."""
        name, given = call_target(name, n)
        n = 1 if given is None else given
        return self.tree.by_name.get(name, _NO_CALLS).get(n)

    def divergences(self) -> list[Divergence]:
        """Where the replay departed from its recording so far, in the order found.

        Input divergences are found as the calls happen; unused recordings and plan entries that
        matched nothing are added when the replay exits. Each has ``name``, ``index`` (the
        recording's invocation index), ``kind`` (``input``, ``unused`` or ``plan``), ``diff``,
        and ``expected`` (declared with ``ReplayPlan().expect_change``).
        """
        with self._lock:
            return list(self._divergences)

    def _not_called(self, name: str, n: int) -> str:
        elsewhere = self._calls.made_elsewhere(name, n)  # another service's, its values not here
        if elsewhere is not None:
            return f"replay: {elsewhere}"
        seen = self._calls.seen()
        where = f"; the recorded trace: {self.url}" if self.url else ""
        return (
            f"replay: there was no call {n} of {name!r} during this replay; calls seen: "
            f"{', '.join(seen) or 'none'}{where}"
        )

    # ---- driving boundaries ---------------------------------------------------------------

    def _next(self, spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]) -> Call:
        """The call of ``spec`` that happens now: its stub, or a live cut-point.

        The call is matched among the recorded children of the call it is made in (the
        ``Scope`` in the context; the top level otherwise). Raises ``ReplayMismatchError`` for
        a stub with no recording there, and in strict mode ``ReplayDivergenceError`` for a stub
        whose input differs from its recording.
        """
        name = spec.name
        bound = spec.binder.bind(args, kwargs)
        scope = self._top
        if self._any_live:  # only a live call's body has a parent other than the top level
            inside = otel_context.get_value(REPLAY_PARENT_KEY)
            if isinstance(inside, Scope) and inside.run is self:  # (else: another span's code)
                scope = inside
        live = LiveInput(spec, bound, self.volatile) if self.match == "input" else None
        with self._lock:
            if live is None:  # match="order": the k-th call of a name takes the k-th recording
                k = scope.taken.get(name, 0) + 1
                scope.taken[name] = k
                recorded = scope.children.get(name)
                envelope = recorded[k - 1] if recorded is not None and k <= len(recorded) else None
                same = False
            else:
                envelope, same = self._serve_by_input(scope, name, live)
            eid: str | None = None
            if envelope is not None:
                eid = served_id = envelope.envelope_id
                n = self.tree.index[served_id]
                mode = self.plan.mode_for(
                    name, n, encloses_cut_point=served_id in self._encloses_cut_point
                )
                if self._forks:
                    mode = self._fork_mode(name, n, eid, mode)
                self._served[served_id] = mode
            else:
                extra = self._new[name] = self._new.get(name, 0) + 1
                n = self.tree.count(name) + extra
                self._made_in[(name, n)] = None if scope is self._top else scope.label
                mode = self.plan.mode_for(name, n)
                if self._forks:
                    mode = self._fork_mode(name, n, eid, mode)
                elif self._records_new and mode == "stub":
                    mode = "run"  # a new call: run live, and recorded (_recorded_new)
            self._calls.started(LoggedCall(name, n, mode, None if eid is None else n), bound)
        if mode == "stub":
            if envelope is None:
                raise ReplayMismatchError(
                    name,
                    n,
                    len(scope.children.get(name, ())),
                    url=self.url,
                    parent=None if scope is self._top else scope.label,
                    parent_recorded=scope.parent is not None,
                )
            if not (same or input_unchanged(spec, bound, envelope)):
                live = live or LiveInput(spec, bound, self.volatile)
                if not live.matches(envelope):
                    self._specs[(name, n)] = spec  # its live input is not the recorded one
                    self._input_diverged(name, n, live.changes(envelope))
            return self._stub_call(self._outcomes, spec, n, envelope, args, kwargs)
        self._specs[(name, n)] = spec
        if mode == "override":
            return self._override_call(
                self._outcomes, spec, n, self.plan.overrides[(name, n)], args, kwargs, envelope
            )
        if mode == "live":
            model = self.plan.models.get((name, n)) or self.plan.models.get((name, None))
            if model is not None:
                kwargs = self._with_model(spec, n, kwargs, model)
        hooks = default_hooks.snapshot()
        info = call_info(
            spec,
            json_arguments(bound).value if hooks else {},
            invocation=n,
            trace_id=self.trace_id or None,
            span_id=self.span_id or None,
        )
        fail_on_error = runtime.current().settings.hooks_fail_call_on_error

        def keep(result: object) -> None:
            self._calls.returned(name, n, result)  # one dict store: atomic, no lock needed

        recording_new = envelope is None and self._records_new
        inside = Scope(
            self,
            self.tree,
            eid,
            f"{name}#{n}",
            scope.live or recording_new or self._runs_by_plan(name, n, eid, mode),
        )
        self._any_live = True
        recorder = self._outcomes.recorder
        if recorder is not None:
            return _recorded_live(recorder, spec, args, kwargs, keep, inside)
        if recording_new:
            return self._recorded_new(spec, n, args, kwargs, keep, inside, scope)
        return LiveCall(
            spec, args, kwargs, hooks, info, fail_on_error, keep, inside, self._outcomes.raised
        )

    # ---- record_new(): a fix's new calls, recorded into the recording ---------------------

    def _recorded_new(
        self,
        spec: CallSpec,
        n: int,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        keep: Callable[[object], None],
        inside: Scope,
        scope: Scope,
    ) -> Call:
        """A call with no recording under ``record_new``: run live and recorded as any call is
        (input, result or error, redacted and bounded), into this span's ids, sent nowhere
        (``_NewCalls``). Its parent is the call it was made in: the recorded call standing for
        that call, or the new call's own envelope; its children are matched against ``inside``
        (a new call has no recorded children, so they are new too)."""
        with self._lock:
            recorder = self._recorder
            if recorder is None:
                recorder = self._recorder = _NewCalls(self.trace_id, self.span_id)
            parent = None
            if scope is not self._top:
                parent = scope.parent or self._new_ids.get(_key(scope.label))
        ctx = otel_context.set_value(REPLAY_PARENT_KEY, inside)
        call = RecordedCall(spec, recorder.rt, recorder.session, ctx, args, kwargs, None)
        call.record.invocation = n  # the span-wide number the call log shows
        if parent is not None:
            call.record.parent_envelope_id = parent
            call.record.metadata.pop(wire.ENTRY, None)  # not the span's entry: it has a parent
        call.keep = keep
        try:
            call.start()
        finally:
            if call.envelope_id:
                with self._lock:
                    self._new_ids[(spec.name, n)] = call.envelope_id
        return call

    def episodes(self) -> Episodes | None:
        """``record_new()``: the span's recording as this finished run made it, to write back
        to the incident file; ``None`` without ``record_new``, with ``record=True`` (its new
        calls went to the new trace), or for an incident's span whose code never ran.

        Its envelopes are, in the order the calls started: each recording a call stood for (as
        recorded: a changed input stays a divergence, never rewritten), with the recorded calls
        a stubbed call consumed, and each new call, recorded; ``chronicle.sequence`` renumbered
        in that order. Recordings no call stood for are left out (``dropped``, as
        ``name#n``), and so are new calls that had not ended when the replay did (a stream not
        consumed: ``unfinished``). Raises ``ReplayError`` while the replay is running.
        """
        with self._lock:
            if not self._finished:
                raise ReplayError(
                    f"replay: the replay of span {self.span_id} is still running; read its "
                    "episodes once its `with` block has ended"
                )
            if not self._records_new or self.record or not self._ran:
                return None
            tree, recorder = self.tree, self._recorder
            made: list[Envelope] = []
            added: list[str] = []
            unfinished: list[str] = []
            for name, n, mode, recording, service in self._calls.entries():
                if service is not None:
                    continue  # another service's call, in that service's span
                if recording is not None:
                    envelope = tree.by_name[name][recording]
                    made.append(envelope)
                    if mode == "stub":  # what it called was consumed with it
                        inside = set(tree.descendants(envelope.envelope_id))
                        made.extend(e for e in tree.envelopes if e.envelope_id in inside)
                    continue
                new_id = self._new_ids.get((name, n))
                new = None if recorder is None or new_id is None else recorder.ended.get(new_id)
                if new is None:
                    unfinished.append(f"{name}#{n}")
                    continue
                made.append(
                    new.model_copy(update={"metadata": {**new.metadata, wire.INVOCATION: n}})
                )
                added.append(f"{name}#{n}")
            dropped = [f"{d.name}#{d.index}" for d in self._divergences if d.kind == "unused"]
        envelopes = []
        for sequence, envelope in enumerate(made, 1):
            if wire.sequence_of(envelope) != sequence:
                metadata = {**envelope.metadata, wire.SEQUENCE: sequence}
                envelope = envelope.model_copy(update={"metadata": metadata})
            envelopes.append(envelope)
        return Episodes(tuple(envelopes), tuple(added), tuple(dropped), tuple(unfinished))

    def _write_episodes(self, path: Path) -> None:
        """Rewrite the incident file ``path`` with ``episodes()`` in this span's place (its
        other spans and metadata kept), atomically; nothing when no call was added or dropped."""
        episodes = self.episodes()
        if episodes is None or not episodes.changed:
            return
        try:
            incident = Incident.read(path)
        except (OSError, ReplayError) as exc:
            raise ReplayError(
                f"replay: record_new could not read {path} again to write its new calls "
                f"({exc}); the calls it ran live: {', '.join(episodes.added) or 'none'}"
            ) from None
        with_episodes(incident, {self.span_id: episodes}).write(path)

    def _serve_by_input(
        self, scope: Scope, name: str, live: LiveInput
    ) -> tuple[Envelope | None, bool]:
        """``match="input"``: the recording a call takes, ``(envelope, same input)``.

        Among the unused recordings of ``name`` in ``scope``: the first whose input is the
        call's, else the first. Called under the lock, so two calls never take the same one.
        """
        served = self._served
        free = [e for e in scope.children.get(name, ()) if e.envelope_id not in served]
        if not free:
            return None, False
        for candidate in free:
            if live.matches(candidate):
                return candidate, True
        return free[0], False

    @staticmethod
    def _with_model(
        spec: CallSpec, n: int, kwargs: dict[str, object], model: str
    ) -> dict[str, object]:
        """The call's keyword arguments with ``model`` replaced (``run(name, n, model=...)``)."""
        if spec.kind != "llm" or "model" not in kwargs:
            raise ReplayError(
                f"replay: run({spec.name!r}, {n}, model={model!r}) swaps the model of an llm "
                f"call made with model=...; {spec.name!r} is a {spec.kind} call"
                + ("" if spec.kind != "llm" else " made without a model keyword")
                + ": drop model= from the plan, or wrap the model client with chronicle.wrap"
            )
        return {**kwargs, "model": model}

    def _runs_by_plan(self, name: str, n: int, eid: str | None, mode: Mode) -> bool:
        """Whether the plan runs call ``n`` of ``name`` live by an entry of its own (``run``,
        ``through``, ``live_after``, ``model=``), so what its body does on the network is the
        plan's: not a call run only because it encloses a cut-point, an override or the
        anchor, nor the replay's entry (``ReplayPlan.drive``)."""
        if mode == "live" or (eid is not None and eid in self._let_through):
            return True
        plan = self.plan
        return mode == "run" and plan.mode_for(name, n) == "run" and not plan.drives(name, n)

    def _input_diverged(self, name: str, n: int, diff: str) -> None:
        expected = self.plan.expects_change(name, n) or self._forked
        found = Divergence(name, n, "input", diff, expected, call=n)
        with self._lock:
            self._divergences.append(found)
        if self.strict and not expected:
            raise strict_error(
                self, ReplayDivergenceError(divergence.report([found], "the replay"), (found,))
            )


# ---- the engine's interface to a run --------------------------------------------------------
# What the replay's entry points (entry.py, incident.py), cross-service replay (remote.py) and
# the readers of a finished run (chronicle.diff, the checks) do with a ``ReplayRun``: these
# functions, never its private members.


def record_into(run: ReplayRun, session: Session | None, rt: runtime.Runtime | None) -> None:
    """``record=True``: record the calls ``run`` serves and runs into ``session`` (the new
    trace's request span, on ``rt``) from now on; ``None`` once that span has closed."""
    if session is None or rt is None:
        run._outcomes.recorder = None
        return
    run._outcomes.recorder = Recorder(session, rt, run.tree)
    run.new_trace_id = session.trace_id


def callee(run: ReplayRun, envelope_id: str) -> Callee | None:
    """The recorded span that answered the let-through call ``envelope_id`` (``through``), when
    the trace says; ``None`` otherwise."""
    return run._let_through.get(envelope_id)


def lets_through(run: ReplayRun, envelope_id: str) -> bool:
    """Whether the plan lets the recorded call ``envelope_id`` through to another service."""
    return envelope_id in run._let_through


def log_of(run: ReplayRun) -> CallLog:
    """The run's call log (what a served replay reports back to its caller)."""
    return run._calls


def know_spans(run: ReplayRun, spans: Iterable[Mapping[str, object]]) -> None:
    """Learn the recorded trace's spans (``span_id``, ``service``, ``parent_envelope_id``):
    which service answered each outbound call, so ``through("billing")`` finds its calls.
    Call it before the replay is entered."""
    callees: dict[str, Callee] = {}
    for span in spans:
        span_id, parent = span.get("span_id"), span.get("parent_envelope_id")
        service = span.get("service")
        if span_id == run.span_id and isinstance(service, str):
            run.service = service
        elif isinstance(span_id, str) and isinstance(parent, str) and parent not in callees:
            callees[parent] = Callee(span_id, service if isinstance(service, str) else None)
    through, tree = run.plan.through_calls, run.tree
    services = {name for name, n in through if n is None}
    found: set[str] = set()
    for envelope in tree.envelopes:
        eid, name = envelope.envelope_id, envelope.name
        callee = callees.get(eid)
        named = (name, tree.index[eid]) in through or (name, None) in through
        if named or (callee is not None and callee.service in services):
            run._let_through[eid] = callee
            found.add(eid)
            found.update(tree.ancestors(eid))
    # A call let through by its service's name runs live as a cut-point does (its own
    # rule, if any, still wins in ``mode_for``), and so do the calls enclosing it.
    run._encloses_cut_point = run._encloses_cut_point | found


def merge_remote(
    run: ReplayRun,
    service: str,
    calls: Iterable[LoggedCall],
    found: Iterable[Divergence],
    matched: Iterable[tuple[str, int | None, str]],
    inputs: Mapping[tuple[str, int], dict[str, object]] | None = None,
    results: Mapping[tuple[str, int], object] | None = None,
    values_left_out: bool = False,
) -> list[Divergence]:
    """Add what ``service``, a call was let through to, reports: its calls (each naming the
    service) after the calls made so far, with their ``inputs`` and ``results`` (JSON form,
    by ``(name, n)``), its divergences, and the plan entries it matched (so they are not
    reported as matching nothing). Returns its divergences as the run now holds them: each
    naming ``service``, an ``input`` or ``unused`` one under the call log's name for it
    (``service/name`` when the caller has a call of that name too)."""
    with run._lock:  # named before the service's calls join the log
        theirs = [
            dataclasses.replace(
                d,
                name=run._calls.qualified(service, d.name)
                if d.kind in ("input", "unused")
                else d.name,
                service=service,
            )
            for d in found
        ]
        run._calls.extend(calls, inputs, results, values_left_out=values_left_out)
        run._divergences.extend(theirs)
        run._remote_matched.update(matched)
    return theirs


def strict_error(run: ReplayRun, error: ReplayDivergenceError) -> ReplayDivergenceError:
    """``error``, kept (the run's first) so the replay's exit raises it again if the code
    under test catches it (``reraise_swallowed``)."""
    with run._lock:
        if run._strict_error is None:
            run._strict_error = (next(_RAISED_ORDER), error)
    return error


def judge_connection(
    run: ReplayRun, host: str, port: int | None, lookup: bool, scope: object
) -> None:
    """A connection to ``host`` on ``port`` (``lookup``: a name lookup of it) made in this
    replay with ``scope`` current (``REPLAY_PARENT_KEY``): let through when a call the plan
    runs live made it, after ``live_after``'s anchor, or to an allowed host; else reported
    as a ``network`` divergence, and refused (``network="block"``: ``NetworkBlockedError``;
    a strict replay: ``ReplayDivergenceError``). Lookups are only refused, under ``block``.
    Called by the socket guard (``replay/network.py``) before any packet leaves."""
    policy = run.network
    if policy is None or (lookup and policy.mode != "block"):
        return
    inside = scope if isinstance(scope, Scope) and scope.run is run else None
    if (inside is not None and inside.live) or run._live_from_now:
        return
    if policy.allows(host, None if lookup else port):
        return
    shown = host if port is None else connection_target(host, port)
    names = RESOLVED.names_of(host) - {host}
    under = None if inside is None else inside.label
    refused = policy.mode == "block" or policy.strict
    with run._lock:
        at, made = run._connections.get((shown, under), (len(run._divergences), 0))
        found = divergence.connection(shown, under, made + 1, refused, sorted(names))
        if made:
            run._divergences[at] = found
        else:
            run._divergences.append(found)
        run._connections[(shown, under)] = (at, made + 1)
    error = ReplayDivergenceError(divergence.report([found], "the replay"), (found,))
    if policy.strict:
        strict_error(run, error)
    if policy.mode == "block":
        raise NetworkBlockedError(
            shown,
            policy.describe(),
            f"chronicle refused a connection during a replay (network='block'): {found.describe()}",
        )
    if policy.strict:
        raise error


def finish(run: ReplayRun, failed: bool, *, judge: bool = True) -> None:
    """At exit: add unused recordings and unmatched plan entries, then raise or warn.

    ``judge=False`` for a service's replay of its span for a caller: its unused recordings are
    added and a warning sums up what diverged, but nothing is judged here (the caller's plan
    and strictness decide, from the report)."""
    if not judge:
        if settle(run, unused=True):
            unexpected = [d for d in run.divergences() if not d.expected]
            if unexpected:
                logger.warning(
                    "%s",
                    divergence.report(
                        unexpected,
                        f"the replay of span {run.span_id} served for a caller",
                        "sent back to the caller, whose replay judges it",
                    ),
                )
        return
    if settle(run, unused=True):
        run._divergences.extend(unmatched_entries(run.plan, [run]))
        verdict(run._divergences, run.strict, failed, f"the replay of span {run.span_id}")
        if run.write_to is not None and not failed:
            run._write_episodes(run.write_to)


def settle(run: ReplayRun, *, unused: bool) -> bool:
    """Close the run (once: ``False`` if it already was), adding its unused recordings.

    A recording is unused when no call stood for it, though its parent ran live (or it is at
    the top level): the descendants of a stubbed call were consumed with it, and those of an
    unused call are reported through it. ``unused=False`` for a span of an incident whose
    code never ran: its recordings were not expected to be used.
    """
    with run._lock:
        if run._finished:
            return False
        run._finished = True
        if not unused:
            run._ran = False
            return True
        tree, served = run.tree, run._served
        for envelope in tree.envelopes:
            eid = envelope.envelope_id
            if eid in served:
                continue
            parent = tree.parent_id(eid)
            if parent != TOP and served.get(parent) not in ("run", "live"):
                continue  # consumed with a stubbed parent, or itself unused
            n = tree.index[eid]
            after_fork = run._fork_order is not None and run._order[eid] > run._fork_order
            run._divergences.append(
                divergence.unused(
                    envelope.name,
                    n,
                    envelope,
                    expected=after_fork
                    or run._records_new  # the fix no longer makes it: dropped
                    or run.plan.expects_change(envelope.name, n),
                )
            )
        return True


def accounts_for(run: ReplayRun, name: str, n: int | None, what: str) -> bool:
    """Whether the plan entry ``what(name, n)`` matched something in this run: a call, or
    (for ``stub``) a recording consumed with its stubbed parent, or (for ``expect``) a
    recording."""
    if (name, n, what) in run._remote_matched:
        return True
    if any(c.name == name and n in (None, c.invocation_index) for c in run._calls.entries()):
        return True
    recorded = run.tree.by_name.get(name, _NO_CALLS)
    targets = list(recorded.values()) if n is None else [recorded[n]] if n in recorded else []
    if what == "expect":
        return bool(targets)
    if what == "stub":
        served = run._served
        return any(
            any(served.get(a) in ("stub", "override") for a in run.tree.ancestors(e.envelope_id))
            for e in targets
        )
    return False


def made_calls(run: ReplayRun) -> list[MadeCall]:
    """The calls this replay made, in call order, for ``chronicle.diff(run)``: each with the
    recording it stands for, the call it was made in, its live input, and what it returned
    or raised. Raises ``ReplayError`` while the replay is still running."""
    with run._lock:
        if not run._finished:
            raise ReplayError(
                f"diff: the replay of span {run.span_id} is still running; diff the run "
                "once its `with` block has ended"
            )
        made: list[MadeCall] = []
        by_name, tree = run.tree.by_name, run.tree
        calls = run._calls
        for name, n, mode, recording, service in calls.entries():
            if service is not None:
                continue  # made by another service a call was let through to
            key = (name, n)
            envelope = None if recording is None else by_name[name][recording]
            if envelope is not None:
                parent_id = tree.parent_id(envelope.envelope_id)
                parent = None if parent_id == TOP else tree.label(parent_id)
            else:
                parent = run._made_in.get(key)
            spec = run._specs.get(key)
            arguments = calls.arguments(name, n)
            live = None if spec is None else LiveInput(spec, arguments, run.volatile)
            raised = run._outcomes.raised.get(f"{name}#{n}")
            if mode == "override":
                raised = run.plan.overrides[key].error
            made.append(
                MadeCall(
                    name,
                    n,
                    mode,
                    envelope,
                    parent,
                    arguments,
                    spec,
                    live,
                    calls.has_result(name, n),
                    calls.result(name, n) if calls.has_result(name, n) else None,
                    raised,
                )
            )
        return made


def _recorded_live(
    recorder: Recorder,
    spec: CallSpec,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    keep: Callable[[object], None],
    inside: Scope,
) -> Call:
    """A live call of a recorded replay: recorded into the new span as any call is, its body
    matched against ``inside`` (its recorded children), its result kept."""
    ctx = otel_context.set_value(REPLAY_PARENT_KEY, inside)
    call = RecordedCall(spec, recorder.rt, recorder.session, ctx, args, kwargs, None)
    call.keep = keep
    call.start()
    return call


class Episodes(NamedTuple):
    """What a ``record_new`` replay makes of its span's recording (``ReplayRun.episodes``):
    ``envelopes``, the recording as the run made it, in call order; ``added``, the new calls
    recorded into it; ``dropped``, the recordings no call stood for, left out; ``unfinished``,
    new calls that had not ended, left out too (each ``name#n``)."""

    envelopes: tuple[Envelope, ...]
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    unfinished: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Whether the recording changes: a call added, or one dropped."""
        return bool(self.added or self.dropped)


def with_episodes(incident: Incident, episodes: Mapping[str, Episodes]) -> Incident:
    """``incident`` with the envelopes of each span ``episodes`` names replaced by what its
    run made (``ReplayRun.episodes``); its other spans, span descriptions and metadata kept."""
    envelopes = [e for e in incident.envelopes if e.span_id not in episodes]
    for found in episodes.values():
        envelopes.extend(found.envelopes)
    return Incident.of(envelopes, incident.spans, incident.metadata)


class _NewCalls(Hook):
    """Where ``record_new`` records a replay's new calls: a session with the replayed span's
    ids, whose calls run with the current configuration (capture, redaction, bounds, hooks) on
    a tracer that starts no span, so nothing is exported or sent; this hook keeps each call's
    envelope as it ends (``ended``, by envelope id)."""

    def __init__(self, trace_id: str, span_id: str) -> None:
        rt = runtime.current()
        self.rt = dataclasses.replace(rt, link=None)  # no tracer: the calls are sent nowhere
        self.session = Session(
            service=rt.settings.service_name, metadata={}, trace_id=trace_id, span_id=span_id
        )
        self.session.hooks.register(self)
        self.ended: dict[str, Envelope] = {}

    def record(self, call: CallInfo, envelope: Envelope) -> None:
        """Keep the envelope of a new call that ended."""
        self.ended[envelope.envelope_id] = envelope


def _key(label: str) -> tuple[str, int]:
    """``("name", n)`` of a call's label ``name#n``."""
    name, _, n = label.rpartition("#")
    return name, int(n) if n.isdigit() else 0


class MadeCall(NamedTuple):
    """One call a finished replay made (``ReplayRun.made``), ``name#n``: ``envelope`` the
    recording it stands for (``None`` for a new call), ``parent`` the label of the call it sits
    under in the recorded tree (for a new call, the live call that made it; ``None``: the top
    level), ``arguments`` its live arguments by name, ``spec``/``live`` its spec and live input
    when the recording cannot stand for them (else ``None``), ``returned``/``result`` what it
    returned, ``raised`` the error it raised when known."""

    name: str
    n: int
    mode: Mode
    envelope: Envelope | None
    parent: str | None
    arguments: dict[str, object]
    spec: CallSpec | None
    live: LiveInput | None
    returned: bool
    result: object
    raised: BaseException | None


def unmatched_entries(plan: ReplayPlan, runs: list[ReplayRun]) -> list[Divergence]:
    """The plan's entries that matched no call (and, for ``expect_change``, no recording) in
    any of ``runs`` (one plan serves every span of an incident)."""
    found: list[Divergence] = []
    known = [
        name for run in runs for name in (*run.tree.by_name, *(c.name for c in run.call_log()))
    ]
    for name, n, what in plan.entries():
        if not any(accounts_for(run, name, n, what) for run in runs):
            found.append(divergence.unmatched_entry(describe_entry(name, n, what), name, n, known))
    return found


def verdict(found: list[Divergence], strict: bool, failed: bool, what: str) -> None:
    """At the end of a replay: raise ``ReplayDivergenceError`` (strict) or log one warning for
    the divergences the plan did not expect. Nothing while an exception is already on its way
    out (``failed``): that is the story. A strict run raises for input divergences too, in case
    the code under test swallowed the error raised at the call."""
    unexpected = [d for d in found if not d.expected]
    if failed or not unexpected:
        return
    if strict:
        raise ReplayDivergenceError(divergence.report(unexpected, what), tuple(unexpected))
    logger.warning(
        "%s",
        divergence.report(unexpected, what, "pass strict=True to make this an error"),
    )


class Replayer:
    """What the context holds during a replay: the boundaries' way into one ``ReplayRun``, and
    the socket guard's (``network_connection``)."""

    __slots__ = ("begin", "export_spans", "network", "run")

    def __init__(self, run: ReplayRun) -> None:
        self.run = run
        self.network = run.network
        # A recorded replay's calls start real spans: the sampler lets them (and others) through.
        self.export_spans = run.export_spans or run.record
        # The call's stub or cut-point (``ReplayMismatchError`` when nothing matches): the run's
        # own method, so a stub pays for no extra call.
        self.begin: Callable[[CallSpec, tuple[object, ...], dict[str, object]], Call] = run._next

    def has_recording(self, name: str) -> bool:
        """Whether the recording holds any call of ``name``."""
        return name in self.run.tree.by_name

    def network_connection(self, host: str, port: int | None, lookup: bool, scope: object) -> None:
        """Judge a connection made in this replay (``judge_connection``)."""
        judge_connection(self.run, host, port, lookup, scope)


def reraise_swallowed(runs: Iterable[ReplayRun], exc: BaseException | None) -> None:
    """At a replay's exit (after its verdict): raise again the first strict divergence raised
    inside it, when the code under test caught it (a framework wrapping it in its own error, an
    agent loop that logs and goes on), chained from the error leaving the block. Nothing when
    that error is a ``ReplayDivergenceError`` already, or not an ``Exception`` (Ctrl-C, a
    test's ``pytest.fail``)."""
    if isinstance(exc, ReplayDivergenceError) or (
        exc is not None and not isinstance(exc, Exception)
    ):
        return
    raised = [run._strict_error for run in runs if run._strict_error is not None]
    if not raised:
        return
    first = min(raised, key=lambda found: found[0])[1]
    ending = (
        "the block then ended normally"
        if exc is None
        else f"the block then ended with {type(exc).__name__}: {_short(exc)}"
    )
    raise ReplayDivergenceError(
        f"{first}\n(raised inside the replay and caught by the code under test, {ending}; "
        "a strict replay raises it again at its exit. Let ReplayDivergenceError through, or "
        "fix the divergence above)",
        first.divergences,
    ) from exc


def _short(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:
        return "(no message)"
    return text if len(text) <= 200 else text[:200] + "..."
