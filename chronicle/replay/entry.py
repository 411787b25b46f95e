"""Entering a replay: ``replay(envelopes, plan)`` and ``replay_trace(trace_id, span_id, plan)``,
the context managers they return (``ReplayScope``), and what every replay scope does on entry
and exit (``ReplayEntry``, which ``replay_incident``'s scope shares).

The run itself (matching each call to the recorded tree, the call log, divergences) is
``replay/run.py``'s ``ReplayRun``; see that module for what a replay does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Generic, TypeGuard, TypeVar

from agentplane_primitives.models import TraceContext
from opentelemetry import context as otel_context
from opentelemetry.trace import Link, SpanContext, TraceFlags
from typing_extensions import override

from chronicle import runtime, wire
from chronicle.config import load_settings, trace_page
from chronicle.errors import ConfigurationError, ControlPlaneError, ReplayError
from chronicle.otel.context import (
    ACTIVE_REPLAYS,
    FRAME_KEY,
    REPLAY_KEY,
    SESSION_KEY,
    ActiveReplay,
    detach,
)
from chronicle.recording.request import RequestSpan
from chronicle.recording.session import Session
from chronicle.replay.divergence import Volatile
from chronicle.replay.load import load_envelopes
from chronicle.replay.network import REPLAYS, NetworkMode, network_policy
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import (
    MATCHES,
    Match,
    Replayer,
    ReplayRun,
    finish,
    know_spans,
    record_into,
    reraise_swallowed,
)
from chronicle.save.client import HttpControlPlane
from chronicle.save.untrusted import read_json

logger = logging.getLogger("chronicle")


# ---- entering a replay ------------------------------------------------------------------------


_Run = TypeVar("_Run")
"""What a scope's ``with`` gives: a ``ReplayRun``, or an ``IncidentRun``."""


class ReplayEntry(Generic[_Run]):
    """Entering a replay and leaving it, written once for every replay scope (a span's, an
    incident's): the replay's dispatcher (``REPLAY_KEY``, what boundary calls consult) and its
    session in the OpenTelemetry context with no open frame, and the dispatcher announced in
    ``ACTIVE_REPLAYS`` (for threads and tasks that do not carry the context), and the socket
    guard watching (``replay/network.py``: ``REPLAYS``); leaving undoes all three, in reverse.
    A scope is a sync and an async context manager alike.

    A scope says what it enters with ``begin()`` (the dispatcher, the session, and what its
    ``with`` gives) and what it does once the replay has been left with ``end(exc)``."""

    _entered: tuple[object, ActiveReplay] | None = None

    def begin(self) -> tuple[ActiveReplay, Session, _Run]:
        """Make the replay's dispatcher and session, and what the ``with`` gives."""
        raise NotImplementedError

    def end(self, exc: BaseException | None) -> None:
        """Close the replay, left with ``exc`` (``None``: the block ended normally)."""
        raise NotImplementedError

    def __enter__(self) -> _Run:
        dispatcher, session, run = self.begin()
        ctx = otel_context.set_value(REPLAY_KEY, dispatcher)
        ctx = otel_context.set_value(SESSION_KEY, session, ctx)
        ctx = otel_context.set_value(FRAME_KEY, None, ctx)
        self._entered = (otel_context.attach(ctx), dispatcher)
        ACTIVE_REPLAYS.enter(dispatcher)
        REPLAYS.enter()
        return run

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        entered, self._entered = self._entered, None
        if entered is not None:  # (nothing when it was not entered, or was left already)
            token, dispatcher = entered
            REPLAYS.leave()
            detach(token, "a replay")
            ACTIVE_REPLAYS.leave(dispatcher)
        self.end(exc)

    async def __aenter__(self) -> _Run:
        return self.__enter__()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)


class ReplayScope(ReplayEntry[ReplayRun]):
    """The context manager ``replay()`` and ``replay_trace()`` return.

    ``joins``: recorded (``record=True``), the new span joins that trace (a caller's, parented
    on its recorded let-through call) as ``service`` instead of starting one. ``judge=False``:
    a service's replay of its span for a caller, which judges nothing itself (``finish``)."""

    def __init__(
        self,
        run: ReplayRun,
        *,
        joins: TraceContext | None = None,
        service: str | None = None,
        judge: bool = True,
    ) -> None:
        self.run = run
        self._joins, self._service, self._judge = joins, service, judge
        self._recording: RequestSpan | None = None
        self._failure: BaseException | None = None

    def failed(self, error: BaseException) -> None:
        """The code replayed raised ``error``, which the caller caught inside the block (a
        runner that reports it, ``chronicle replay``): a recorded replay (``record=True``)
        still closes its span as failed with it."""
        self._failure = error

    def _open_recording(self, rt: runtime.Runtime) -> Session:
        """``record=True``: open the new trace's request span (linked to the replayed span by
        ``chronicle.replay_of`` and an OpenTelemetry link) that every call is recorded into.

        Joining a caller's trace (``joins``), the span is parented on the caller's recorded
        let-through call, as the recorded span was on the original one."""
        run, joins = self.run, self._joins
        link = Link(
            SpanContext(
                trace_id=int(run.trace_id, 16),
                span_id=int(run.span_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        )
        recording = RequestSpan(
            parent=joins,
            service=run.service or self._service,
            trace_name=f"replay of {run.trace_id}",
            root=joins is None,
            links=[link],
            replay_record=True,
        )
        recording.record.metadata[wire.REPLAY_OF] = {
            "trace_id": run.trace_id,
            "span_id": run.span_id,
        }
        session = recording.open()
        self._recording = recording
        record_into(run, session, rt)
        return session

    @override
    def begin(self) -> tuple[ActiveReplay, Session, ReplayRun]:
        run = self.run
        rt = runtime.current()
        if run.record:  # as the service whose span it replays, when the replay knows it
            session = self._open_recording(rt)
        else:
            session = Session(
                service=rt.settings.service_name,
                metadata={},
                trace_id=run.trace_id,
                span_id=run.span_id,
            )
        return Replayer(run), session, run

    @override
    def end(self, exc: BaseException | None) -> None:
        recording, self._recording = self._recording, None
        if recording is not None:
            record_into(self.run, None, None)
            recording.close(exc if exc is not None else self._failure)
        finish(self.run, exc is not None, judge=self._judge)
        reraise_swallowed([self.run], exc)


def replay(
    envelopes: object,
    plan: ReplayPlan | None = None,
    *,
    span_id: str | None = None,
    strict: bool = False,
    match: Match = "order",
    ignore: Iterable[str] = (),
    export_spans: bool = False,
    record: bool = False,
    network: NetworkMode = "report",
    allowed_hosts: Iterable[str] = (),
) -> ReplayScope:
    """Replay envelopes already held: ``with chronicle.replay("incident.json") as run: ...``.

    ``envelopes`` is a list of envelopes (models or dicts), the JSON body of
    ``GET /v1/traces/{t}/spans/{s}/envelopes``, or a path to a file holding it. No control plane
    is needed.

    ``strict=True`` raises ``ReplayDivergenceError`` at the first stubbed call whose input differs
    from its recording, and on exit for recordings never used and plan entries that matched no
    call (divergences the plan expects are let through); by default one warning at exit sums them
    up. ``match="input"`` serves each call the unused recording of its name with the same input
    (falling back to call order, reported as an input divergence) among the recorded calls of
    the call's parent, instead of the k-th for the k-th. ``ignore`` names input paths that are
    fresh on every run, compared as equal (``"state.messages[*].id"``, ``"*.request_time"``;
    see ``Volatile``), beside the built-in defaults. ``export_spans=True`` lets spans started
    during the replay reach your exporters.

    ``record=True`` records the replayed run as a new trace on the control plane (its id:
    ``run.new_trace_id``): calls that run live are recorded as usual, served ones (stubs,
    overrides, and what a stubbed call made) with ``metadata["chronicle.replayed_from"]`` naming
    the recorded envelope, and the new span carries ``metadata["chronicle.replay_of"]`` and an
    OpenTelemetry link to the replayed one. Raises ``ConfigurationError`` here when no control
    plane is configured. Without it nothing is written, except by a plan that records new calls:
    ``ReplayPlan().record_new()`` with ``envelopes`` a file path rewrites that file (atomically,
    when the block ends without an error) with the calls that had no recording in their place
    and the recordings no call used dropped (``run.episodes()`` says which).

    ``network``: what happens to a connection the code makes (from the replay's context: its
    thread, and the threads and tasks started in it) outside any boundary the plan runs live,
    an un-instrumented tool or client, which would otherwise run live unseen. ``"report"`` (the
    default): a ``network`` divergence naming ``host:port`` and the innermost boundary it was
    made under (strict: refused at once with ``ReplayDivergenceError``); ``"block"``: refused
    with ``NetworkBlockedError`` (a ``ConnectionError``), and a divergence; ``"allow"``: not
    watched. Always let through: connections inside a boundary the plan runs (``run``,
    ``through``, after ``live_after``'s anchor), the configured control plane, ``through``
    services, and ``allowed_hosts`` (addresses, networks, names, each with ``:port`` or not;
    loopback is not allowed unless named). See ``chronicle.replay.network``.

    A strict divergence raised inside the block and caught there (a framework that wraps
    errors) is raised again at the block's exit, chained from the error that left it.
    """
    if record:
        _check_can_record()
    volatile = Volatile(ignore)  # a bad pattern fails here, before anything runs
    network_policy(network, allowed_hosts, strict)  # and so does a bad network or host
    loaded = load_envelopes(envelopes, span_id=span_id)
    if not loaded:
        raise ReplayError("replay: there are no envelopes to replay; check the file or the span_id")
    run = ReplayRun(
        loaded,
        plan or ReplayPlan(),
        export_spans=export_spans,
        strict=strict,
        match=match,
        ignore=volatile,
        record=record,
        network=network,
        allowed_hosts=allowed_hosts,
    )
    if run.plan.lets_through:  # an incident file names each span's service and calling envelope
        know_spans(run, _spans_listed(envelopes))
    if run.plan.records_new and not record and _is_path(envelopes):
        run.write_to = Path(envelopes)
    return ReplayScope(run)


def _is_path(source: object) -> TypeGuard[str | Path]:
    """Whether ``replay()``'s source names a file (not JSON text, nor envelopes held), as
    ``load_envelopes`` reads it."""
    return isinstance(source, Path) or (
        isinstance(source, str) and not source.lstrip().startswith(("{", "["))
    )


def _spans_listed(source: object) -> list[Mapping[str, object]]:
    """The ``spans`` an incident file (a path, its text, or its JSON) lists; ``[]`` otherwise."""
    data = source
    try:
        if isinstance(source, Path) or (
            isinstance(source, str) and not source.lstrip().startswith(("{", "["))
        ):
            data = read_json(Path(source))  # as load_envelopes read it: untrusted
        elif isinstance(source, (str, bytes)):
            data = json.loads(source)
    except (OSError, ValueError, RecursionError, ReplayError):
        return []  # load_envelopes read it, so this does not happen; the plan then says so
    spans = data.get("spans") if isinstance(data, Mapping) else None
    return [s for s in spans if isinstance(s, Mapping)] if isinstance(spans, list) else []


def _check_can_record() -> None:
    rt = runtime.current()
    if rt.client is None or not rt.recording:
        raise ConfigurationError(
            "control_plane_url",
            "record=True records the replay as a new trace on the control plane, and none is "
            "configured (or recording is off): set control_plane_url (CHRONICLE_CONTROL_PLANE_URL"
            ") and leave recording on, or drop record=True",
        )


def replay_trace(
    trace_id: str,
    span_id: str,
    plan: ReplayPlan | None = None,
    *,
    strict: bool = False,
    match: Match = "order",
    ignore: Iterable[str] = (),
    export_spans: bool = False,
    record: bool = False,
    url: str | None = None,
    api_key: str | None = None,
    network: NetworkMode = "report",
    allowed_hosts: Iterable[str] = (),
) -> ReplayScope:
    """Replay one span read from the control plane: ``with replay_trace(t, s, plan) as run:``.

    The control plane is ``url`` (with ``api_key``, else ``CHRONICLE_API_KEY``) when given, else
    the configured one. Fails here, before anything runs, when there is none, or the trace or
    the span is unknown, or the span has no envelopes. ``strict``, ``match``, ``ignore``,
    ``export_spans``, ``record``, ``network`` and ``allowed_hosts`` are those of ``replay()``;
    the control plane read from is an allowed host.
    """
    Volatile(ignore)  # a bad pattern fails here, before the control plane is asked
    network_policy(network, allowed_hosts, strict)
    if match not in MATCHES:
        raise ValueError(f"match is 'order' or 'input', got {match!r}")
    rt = runtime.current()
    base, client = rt.settings.control_plane_url, rt.client
    if url is not None:
        given = load_settings({"control_plane_url": url, "api_key": api_key})
        base = given.control_plane_url
        client = HttpControlPlane(url, given.api_key, given.timeout)
    if client is None:
        raise ReplayError(
            "replay_trace needs a control plane to read from: set control_plane_url "
            "(CHRONICLE_CONTROL_PLANE_URL), or replay a saved file with chronicle.replay(path)"
        )
    lets_through = plan is not None and plan.lets_through
    try:
        found = client.span_envelopes(trace_id, span_id)
        # Only an empty answer needs the trace, to say which id is wrong, and a plan that lets
        # calls through, to know which service answered each.
        trace = None if found and not lets_through else client.get_trace(trace_id)
    except ControlPlaneError as exc:
        raise ReplayError(f"replay: could not read trace {trace_id}: {exc}") from None
    finally:
        if client is not rt.client:
            client.close()  # the one made for url
    for item in found:
        if item.get("trace_id") != trace_id or item.get("span_id") != span_id:
            raise ReplayError(
                f"replay: asked for span {span_id} of trace {trace_id}, the control plane "
                f"answered with envelope {item.get('envelope_id')!s:.40} of span "
                f"{item.get('span_id')!s:.40} of trace {item.get('trace_id')!s:.40}: that is not "
                "this span's recording, so nothing is replayed; check control_plane_url (a "
                "proxy or cache answering for another request?) and the ids"
            )
    if not found and trace is None:
        raise ReplayError(
            f"replay: trace {trace_id} is not on the control plane; check the id (and that "
            "it is still within retention)"
        )
    if not found:
        assert trace is not None
        spans = [s.get("span_id") for s in trace.get("spans", []) if isinstance(s, dict)]
        if span_id not in spans:
            raise ReplayError(
                f"replay: trace {trace_id} has no span {span_id}; its spans are "
                f"{', '.join(str(s) for s in spans) or 'none'}"
            )
        raise ReplayError(
            f"replay: span {span_id} of trace {trace_id} has no envelopes, so there is nothing "
            "to replay (were its calls delivered? call chronicle.flush() after recording)"
        )
    scope = replay(
        found,
        plan,
        strict=strict,
        match=match,
        ignore=ignore,
        export_spans=export_spans,
        record=record,
        network=network,
        allowed_hosts=allowed_hosts,
    )
    if scope.run.network is not None:
        scope.run.network.allow_url(base)
    if base is not None:
        scope.run.url = trace_page(base, trace_id)
    in_trace = trace.get("spans") if lets_through and trace is not None else None
    if isinstance(in_trace, list):
        know_spans(scope.run, (span for span in in_trace if isinstance(span, dict)))
    return scope
