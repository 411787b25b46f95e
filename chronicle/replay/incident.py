"""Replaying an incident: one request span, or every span of a multi-service trace at once.

``replay_incident(incident, plan)`` returns a context manager. An incident of one span replays
exactly as ``chronicle.replay()`` does and yields its ``ReplayRun``. An incident of several spans
(``python -m chronicle save TRACE_ID --all-spans``, or a recording whose test went through a
service's middleware) gives each span a ``ReplayRun`` of its own and yields an ``IncidentRun``
over them. A call is served by the span of the code that makes it:

- a call inside a request span that the code under test opens (``span()``, the ASGI middleware)
  with ``service="billing"`` is served by a recorded span of ``billing``: the first such request
  span opened during the replay takes the first recorded ``billing`` span (in start order), the
  next takes the next, and one opened more often than recorded keeps the last;
- any other call (the test body itself, or a service with no recorded span) is served by the
  first recorded span no request span has taken, else by the first span.

So a test that runs the caller's code, with its outbound call to the other service as a cut-point,
gets the other service's calls stubbed from the other service's recording. One plan applies to
every span.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from agentplane_primitives.models import Envelope
from opentelemetry import context as otel_context
from typing_extensions import override

from chronicle import runtime
from chronicle.recording.call import Call, CallSpec
from chronicle.recording.session import Session, current_session_in
from chronicle.replay.calllog import LoggedCall
from chronicle.replay.divergence import Divergence, Volatile
from chronicle.replay.entry import ReplayEntry, ReplayScope
from chronicle.replay.network import NetworkMode, NetworkPolicy, network_policy
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import (
    Episodes,
    Match,
    Replayer,
    ReplayRun,
    reraise_swallowed,
    settle,
    unmatched_entries,
    verdict,
)
from chronicle.replay.tree import Scope
from chronicle.save.incident import Incident, IncidentSpan


class IncidentRun:
    """A replay of several request spans in progress: one ``ReplayRun`` per span.

    ``runs`` maps each span id to its run (in the incident's span order); ``spans`` describes the
    spans. The reading methods are those of ``ReplayRun``, across the spans.
    """

    def __init__(self, incident: Incident, runs: dict[str, ReplayRun]) -> None:
        self.incident = incident
        self.spans: tuple[IncidentSpan, ...] = incident.spans
        self.runs = runs
        self.trace_id = incident.trace_id
        self._unmatched: list[Divergence] = []

    def run_of(self, service: str) -> ReplayRun:
        """The run of ``service``'s first recorded span; ``KeyError`` naming the services."""
        for span in self.spans:
            if span.service == service:
                return self.runs[span.span_id]
        known = ", ".join(sorted({s.service or "?" for s in self.spans}))
        raise KeyError(f"the incident has no span of service {service!r}; its services: {known}")

    def call_log(self) -> list[LoggedCall]:
        """Every crossing so far, span by span (in the incident's span order), each in order."""
        return [entry for run in self.runs.values() for entry in run.call_log()]

    def captured_input(self, name: str, n: int = 1) -> dict[str, object]:
        """The arguments of call ``n`` of ``name`` (see ``ReplayRun.captured_input``)."""
        return self._only(name, n).captured_input(name, n)

    def captured_result(self, name: str, n: int = 1) -> object:
        """What call ``n`` of ``name`` returned (see ``ReplayRun.captured_result``)."""
        return self._only(name, n).captured_result(name, n)

    def divergences(self) -> list[Divergence]:
        """Every span's divergences (see ``ReplayRun.divergences``), span by span, then the plan
        entries that matched no call in any span. A span whose code never ran reports no unused
        recordings."""
        found = [d for run in self.runs.values() for d in run.divergences()]
        return found + self._unmatched

    def recorded(self, name: str, n: int = 1) -> Envelope | None:
        """The recorded envelope of call ``n`` of ``name`` in the first span that has one."""
        for run in self.runs.values():
            found = run.recorded(name, n)
            if found is not None:
                return found
        return None

    def episodes(self) -> dict[str, Episodes]:
        """``record_new()``: what the finished replay made of each span whose code ran
        (``ReplayRun.episodes``), by span id; the other spans are left as recorded."""
        found: dict[str, Episodes] = {}
        for span_id, run in self.runs.items():
            episodes = run.episodes()
            if episodes is not None:
                found[span_id] = episodes
        return found

    def _only(self, name: str, n: int) -> ReplayRun:
        made = [
            run
            for run in self.runs.values()
            if any(c.name == name and c.invocation_index == n for c in run.call_log())
        ]
        if len(made) == 1:
            return made[0]
        if not made:
            seen = sorted({f"{c.name}#{c.invocation_index}" for c in self.call_log()})
            raise KeyError(
                f"replay: there was no call {n} of {name!r} during this replay; calls seen: "
                f"{', '.join(seen) or 'none'}"
            )
        raise KeyError(
            f"replay: call {n} of {name!r} was made in {len(made)} spans; read it from one "
            "with run.run_of(service)"
        )


class _SpanRouter:
    """What the context holds during a multi-span replay: picks the span that serves a call,
    and the run a connection made outside any live call is reported in."""

    __slots__ = (
        "_assigned",
        "_lock",
        "_root",
        "_runs",
        "_spans",
        "_taken",
        "export_spans",
        "network",
    )

    def __init__(
        self, spans: tuple[IncidentSpan, ...], runs: dict[str, ReplayRun], root: Session
    ) -> None:
        self._spans, self._runs, self._root = spans, runs, root
        self._assigned: dict[Session | None, ReplayRun] = {}
        self._taken: list[str] = []
        self._lock = threading.Lock()
        first = next(iter(runs.values()))
        self.export_spans = first.export_spans
        self.network: NetworkPolicy | None = first.network  # every span's (one policy)

    def begin(self, spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]) -> Call:
        """The call's stub or cut-point, from the span that serves the current request span."""
        session = current_session_in(otel_context.get_current())
        return Replayer(self._run_for(session)).begin(spec, args, kwargs)

    def network_connection(self, host: str, port: int | None, lookup: bool, scope: object) -> None:
        """Judge a connection made in this replay: in the run of the live call it was made in,
        else of the current request span's span (taking none), else of the first span."""
        owner = scope.run if isinstance(scope, Scope) else None
        run = next((r for r in self._runs.values() if r is owner), None)
        if run is None:
            with self._lock:
                found = self._assigned.get(current_session_in(otel_context.get_current()))
            run = found or self._runs[self._spans[0].span_id]
        Replayer(run).network_connection(host, port, lookup, scope)

    def has_recording(self, name: str) -> bool:
        """Whether any span of the incident recorded a call of ``name``."""
        return any(name in run.tree.by_name for run in self._runs.values())

    def _run_for(self, session: Session | None) -> ReplayRun:
        with self._lock:
            run = self._assigned.get(session)
            if run is not None:
                return run
            service = None if session is None or session is self._root else session.service
            run = self._take(service)
            self._assigned[session] = run
            return run

    def _take(self, service: str | None) -> ReplayRun:
        spans, taken = self._spans, self._taken
        free = [s for s in spans if s.span_id not in taken]
        if service is not None and any(s.service == service for s in spans):
            mine = [s for s in free if s.service == service]
            if not mine:  # opened more often than recorded: keep its last span
                last = [span_id for span_id in taken if self._service(span_id) == service][-1]
                return self._runs[last]
            chosen = mine[0]
        else:
            if not free:
                return self._runs[spans[0].span_id]
            chosen = free[0]
        taken.append(chosen.span_id)
        return self._runs[chosen.span_id]

    def _service(self, span_id: str) -> str | None:
        return next(s.service for s in self._spans if s.span_id == span_id)

    def used(self) -> list[str]:
        """The span ids whose code ran, in the order they were first used."""
        with self._lock:
            return list(self._taken)


class IncidentScope(ReplayEntry[IncidentRun]):
    """The context manager ``replay_incident()`` returns for an incident of several spans."""

    def __init__(
        self,
        incident: Incident,
        plan: ReplayPlan,
        *,
        export_spans: bool,
        strict: bool = False,
        match: Match = "order",
        ignore: Volatile | None = None,
        network: NetworkMode = "report",
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.incident = incident
        self.plan, self.strict = plan, strict
        runs = {
            span.span_id: ReplayRun(
                incident.envelopes_of(span.span_id),
                plan,
                export_spans=export_spans,
                strict=strict,
                match=match,
                ignore=ignore or Volatile(),
                network=network,
                allowed_hosts=allowed_hosts,
            )
            for span in incident.spans
        }
        shared = network_policy(network, allowed_hosts, strict)
        for run in runs.values():
            run.network = shared  # one policy: a host one span lets through, all do
        self.run = IncidentRun(incident, runs)
        self._router: _SpanRouter | None = None

    @override
    def begin(self) -> tuple[_SpanRouter, Session, IncidentRun]:
        first = self.incident.spans[0]
        root = Session(
            service=first.service or runtime.current().settings.service_name,
            metadata={},
            trace_id=self.incident.trace_id,
            span_id=first.span_id,
        )
        self._router = _SpanRouter(self.incident.spans, self.run.runs, root)
        return self._router, root, self.run

    @override
    def end(self, exc: BaseException | None) -> None:
        router, self._router = self._router, None
        if router is None:
            return
        used = set(router.used())
        runs = self.run.runs
        settled = [settle(run, unused=span_id in used) for span_id, run in runs.items()]
        if not all(settled):
            return
        self.run._unmatched = unmatched_entries(self.plan, list(runs.values()))
        verdict(
            self.run.divergences(),
            self.strict,
            exc is not None,
            f"the replay of trace {self.incident.trace_id}",
        )
        reraise_swallowed(runs.values(), exc)


def replay_incident(
    incident: Incident,
    plan: ReplayPlan | None = None,
    *,
    export_spans: bool = False,
    strict: bool = False,
    match: Match = "order",
    ignore: Iterable[str] = (),
    network: NetworkMode = "report",
    allowed_hosts: Iterable[str] = (),
) -> ReplayScope | IncidentScope:
    """Replay an incident: its one span as ``chronicle.replay()`` does, or each of its spans.

    ``strict``, ``match``, ``ignore``, ``network`` and ``allowed_hosts`` as for
    ``chronicle.replay()``; with several spans, divergences are found span by span and the
    plan's entries are matched across all of them.
    """
    plan, volatile = plan or ReplayPlan(), Volatile(ignore)
    if len(incident.spans) == 1:
        run = ReplayRun(
            list(incident.envelopes),
            plan,
            export_spans=export_spans,
            strict=strict,
            match=match,
            ignore=volatile,
            network=network,
            allowed_hosts=allowed_hosts,
        )
        return ReplayScope(run)
    return IncidentScope(
        incident,
        plan,
        export_spans=export_spans,
        strict=strict,
        match=match,
        ignore=volatile,
        network=network,
        allowed_hosts=allowed_hosts,
    )
