"""A replay that travels with a request: one incident replayed across services.

A caller's replay can let an outbound HTTP call through to the service it went to
(``ReplayPlan().through("billing")``). That service then answers the call by replaying its own
recorded span, running its own code (the fix under test may be there) with its boundaries served
from its recording, and sends back what happened, which joins the caller's run. Three parts:

- **What travels** (``replay/travel.py``: ``Descriptor``): the recorded trace and span, the
  plan's entries, ``strict``, ``match``, ``ignore``, signed with the shared ``replay_token`` in
  the ``chronicle-replay`` header, and only to hosts in ``inject_hosts``. No ``traceparent`` goes
  with it: a service that ignores the replay must not record into the recorded trace.
- **The service** (``inbound``, ``serve_asgi``, ``ServedReplay``): only with
  ``accept_replay`` on does it look at the header at all (off, the default: ignored, the
  request runs normally); on, the signature must verify with its own ``replay_token``, the
  replay must not have expired (``TTL_SECONDS``) or been seen before, or the request is refused
  (``ReplayRefusedError``; HTTP 403 or 400 from the middleware, with what to set). Accepted, the
  span is read from the control plane (or from the incident file ``replay_incident`` names)
  and replayed around the handler; nothing is written.
- **The report** (``replay/travel.py``: ``Report``, in a response header): the service's call
  log with each call's arguments and result (JSON form, redacted as a recording is),
  divergences, matched plan entries and error. The caller's httpx instrumentation reads it
  (``LetThrough.absorb``) and merges it into its ``ReplayRun``: ``call_log()`` and
  ``divergences()`` then hold both services' calls, each naming its ``service``;
  ``captured_input``/``captured_result("charge", 1)`` read the service's call (its JSON form);
  a name both services have is the caller's own, and the service's is ``"billing/charge"``,
  as the call log and divergences then name it. A strict caller fails on a divergence in the
  service. A service's replay runs non-strict (it answers, whatever happened); strictness is
  the caller's verdict.

Plan entries travel whole: an entry naming a boundary the service recorded applies there
(``run("charge", 1)``), and ``"billing/charge"`` applies only in the service named ``billing``.
``override`` entries (arbitrary Python values) do not travel. A replay recorded as a new trace
(``record=True``) asks the service to record its replay into that same trace, its span parented
on the caller's recorded let-through call and linked to the span it replays.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from agentplane_primitives.models import Envelope, TraceContext
from opentelemetry import context as otel_context

from chronicle import runtime
from chronicle.errors import (
    ControlPlaneError,
    ReplayDivergenceError,
    ReplayError,
    ReplayRefusedError,
)
from chronicle.otel.context import REPLAY_PARENT_KEY
from chronicle.recording.capture import json_arguments, json_form
from chronicle.recording.http_entry import Message, Receive, Send
from chronicle.recording.session import Session, current_frame_in, current_session_in
from chronicle.replay import divergence
from chronicle.replay.calllog import LoggedCall
from chronicle.replay.divergence import Volatile
from chronicle.replay.entry import ReplayScope
from chronicle.replay.load import load_envelopes
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import (
    ReplayRun,
    accounts_for,
    callee,
    lets_through,
    log_of,
    merge_remote,
    strict_error,
)
from chronicle.replay.travel import (
    HEADER,
    REFUSED_HEADER,
    REPORT_HEADER,
    TTL_SECONDS,
    Descriptor,
    Entry,
    Report,
    decode,
    read_report,
    write_report,
)
from chronicle.replay.tree import Scope
from chronicle.save.incident import Incident

logger = logging.getLogger("chronicle")

# ---- the caller: letting a call through --------------------------------------------------------


def _travelling(
    plan: ReplayPlan,
) -> tuple[tuple[Entry, ...], tuple[tuple[str, int | None, str], ...]]:
    """The plan's entries that travel (not ``override``), and its ``model=`` swaps."""
    entries = tuple(e for e in plan.entries() if e[2] != "override")
    models = tuple((name, n, model) for (name, n), model in plan.models.items())
    return entries, models


class LetThrough:
    """One call a caller's replay lets through: the header it carries, and what to do with the
    service's answer (``absorb``)."""

    def __init__(
        self,
        run: ReplayRun,
        envelope_id: str,
        label: str,
        host: str,
        token: str,
        record_into: tuple[str, str] | None = None,
    ) -> None:
        self.run, self.envelope_id, self.label, self.host = run, envelope_id, label, host
        self._token, self._record_into = token, record_into
        answered = callee(run, envelope_id)
        self.service = answered.service if answered is not None and answered.service else host

    def headers(self) -> dict[str, str]:
        """The ``chronicle-replay`` header, freshly signed with ``replay_token``."""
        run = self.run
        answered = callee(run, self.envelope_id)
        entries, models = _travelling(run.plan)
        descriptor = Descriptor(
            trace_id=run.trace_id,
            span_id=answered.span_id if answered is not None else None,
            parent_envelope_id=self.envelope_id,
            entries=entries,
            models=models,
            strict=run.strict,
            match=run.match,
            ignore=run.volatile.patterns,
            nonce=secrets.token_hex(16),
            expires=time.time() + TTL_SECONDS,
            caller=run.service,
            record_into=self._record_into,
        )
        return {HEADER: descriptor.encode(self._token)}

    def absorb(self, headers: Mapping[str, str]) -> None:
        """Merge the service's report (from its response ``headers``) into the caller's run.

        Raises ``ReplayRefusedError`` when the service refused the replay, ``ReplayError`` when
        it answered without a report (it ran the request normally: it does not accept replays)
        or could not replay its span, and, for a strict replay, ``ReplayDivergenceError`` when
        the service's replay diverged where the plan does not expect it.
        """
        refused = headers.get(REFUSED_HEADER)
        if refused is not None:
            raise ReplayRefusedError(
                f"replay: {self.label} was let through to {self.host}, which refused the "
                f"replay: {refused}"
            )
        raw = headers.get(REPORT_HEADER)
        if raw is None:
            raise ReplayError(
                f"replay: {self.label} was let through to {self.host}, which answered without "
                "a replay report, so it ran the request normally (live): it does not accept "
                "replays. Start that service with CHRONICLE_ACCEPT_REPLAY=true and the same "
                "CHRONICLE_REPLAY_TOKEN, or stub the call (drop the through entry)"
            )
        report = read_report(raw, self.host)
        service = report.service or self.service
        run = self.run
        calls = [
            LoggedCall(name, n, mode, recording, service)  # type: ignore[arg-type]
            for name, n, mode, recording in report.calls
        ]
        matched = set(report.matched)
        matched.update(
            (name, None, "through")
            for name, n in run.plan.through_calls
            if n is None and name == service
        )
        found = merge_remote(
            run,
            service,
            calls,
            report.divergences,
            matched,
            report.inputs,
            report.results,
            values_left_out=report.values_left_out,
        )
        if report.error is not None:
            raise ReplayError(
                f"replay: {service} could not replay its span for {self.label}: {report.error}"
            )
        unexpected = [d for d in found if not d.expected]
        if run.strict and unexpected:
            raise strict_error(
                run,
                ReplayDivergenceError(
                    divergence.report(unexpected, f"the replay of {service}'s span"),
                    tuple(unexpected),
                ),
            )


def let_through(url: object, allowed: Callable[[object], bool]) -> LetThrough | None:
    """The let-through call being made here to ``url`` (a live call of a replay whose plan lets
    it through to another service), or ``None`` for any other call. ``allowed(url)``: whether
    the host is in ``inject_hosts`` (the caller's instrumentation knows the rule; asked only for
    a let-through call).

    A replay recorded as a new trace (``record=True``) asks the service to record its replay
    into that trace too, parented on this call's new envelope.

    Raises ``ReplayError`` when the call cannot carry the replay: its host is not allowed, or
    no ``replay_token`` is set.
    """
    inside = otel_context.get_value(REPLAY_PARENT_KEY)
    if not isinstance(inside, Scope) or inside.parent is None:
        return None
    run, eid = inside.run, inside.parent
    if not isinstance(run, ReplayRun) or not lets_through(run, eid):
        return None
    settings = runtime.current().settings
    host = _host(url)
    if not allowed(url):
        raise ReplayError(
            f"replay: {inside.label} is let through to {host}, which is not in inject_hosts, "
            "so the replay may not travel there; add it to inject_hosts "
            "(CHRONICLE_INJECT_HOSTS) or stub the call"
        )
    if not settings.replay_token:
        raise ReplayError(
            f"replay: {inside.label} is let through to {host}, and the replay it carries is "
            "signed with replay_token, which is not set; set CHRONICLE_REPLAY_TOKEN "
            "(configure(replay_token=...)) to the token that service checks"
        )
    if run.network is not None:  # the service's host is the plan's to reach, from anywhere
        run.network.allow_url(f"{getattr(url, 'scheme', 'http')}://{host}")
    record_into: tuple[str, str] | None = None
    if run.record:  # this call is recorded into the new trace: its envelope is the frame here
        ctx = otel_context.get_current()
        session, frame = current_session_in(ctx), current_frame_in(ctx)
        if session is not None and frame is not None and frame.session is session:
            record_into = (session.trace_id, frame.envelope_id)
    return LetThrough(run, eid, inside.label, host, settings.replay_token, record_into)


def _host(url: object) -> str:
    host = getattr(url, "host", None)
    port = getattr(url, "port", None)
    if isinstance(host, str):
        return f"{host}:{port}" if isinstance(port, int) else host
    return str(url)


# ---- the service: answering with its own span -------------------------------------------------


def inbound(headers: object) -> Descriptor | None:
    """The replay an inbound request asks this service to serve, or ``None``.

    ``None`` when the request carries no ``chronicle-replay`` header, and whenever
    ``accept_replay`` is off: the header is then ignored, and the request runs normally.
    Raises ``ReplayRefusedError`` when it is on and the replay does not verify (see ``decode``).
    """
    settings = runtime.current().settings
    if not settings.accept_replay:  # first: a service that does not accept pays nothing more
        return None
    value = _header(headers)
    if value is None:
        return None
    return decode(value, settings.replay_token)


def _header(headers: object) -> str | None:
    """The ``chronicle-replay`` header from a mapping (any case) or ASGI ``(name, value)``
    pairs, ``None`` when absent."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        return None
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            continue
        name, value = item
        key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if key.lower() == HEADER:
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


def _localized(
    entries: Iterable[Entry], service: str, recorded: Iterable[str]
) -> list[tuple[Entry, Entry]]:
    """``(as sent, as it applies here)`` for each entry that concerns this service: unqualified
    names, and ``"<service>/<name>"`` qualified by this service's name."""
    names = set(recorded)
    found: list[tuple[Entry, Entry]] = []
    for entry in entries:
        name, n, what = entry
        qualifier, slash, rest = name.partition("/")
        if slash and name not in names:
            if qualifier != service or not rest:
                continue  # another service's entry
            name = rest
        found.append((entry, (name, n, what)))
    return found


def _plan(
    entries: list[tuple[Entry, Entry]], models: Iterable[tuple[str, int | None, str]]
) -> ReplayPlan:
    plan = ReplayPlan()
    swaps = {(name, n): model for name, n, model in models}
    for _, (name, n, what) in entries:
        if what == "run":
            plan.run(name, n, model=swaps.get((name, n)))
        elif what == "stub":
            plan.stub(name, n)
        elif what == "through":
            plan.through(name, n)
        elif what == "expect":
            plan.expect_change(name, n)
        elif what == "live_after" and n is not None:
            plan.live_after(name, n)
    return plan


class ServedReplay:
    """This service's replay of its recorded span, serving one request a caller let through.

    ``with ServedReplay(descriptor) as session:`` runs the handler inside the replay;
    ``report_headers()`` afterwards is the ``chronicle-replay-report`` header to answer with.
    The recording is read when it is built: ``ReplayError`` if it cannot be.
    """

    def __init__(self, descriptor: Descriptor, service: str | None = None) -> None:
        rt = runtime.current()
        self.descriptor = descriptor
        self.service = service or rt.settings.service_name
        incident = rt.settings.replay_incident
        envelopes = self._from_incident(incident) if incident else self._from_control_plane()
        names = {e.name for e in envelopes}
        self.entries = _localized(descriptor.entries, self.service, names)
        into = descriptor.record_into
        if into is not None and (rt.client is None or not rt.recording):
            raise ReplayError(
                "the caller records its replay (record=True) and this service cannot record "
                "its part: set CHRONICLE_CONTROL_PLANE_URL on it and leave recording on, or "
                "drop record=True in the caller's replay"
            )
        self.run = ReplayRun(
            envelopes,
            _plan(self.entries, descriptor.models),
            match=descriptor.match,
            ignore=Volatile(descriptor.ignore),
            record=into is not None,
        )
        joins = None if into is None else TraceContext(trace_id=into[0], parent_envelope_id=into[1])
        self._scope = ReplayScope(self.run, joins=joins, service=self.service, judge=False)
        self.error: BaseException | None = None

    def _from_control_plane(self) -> list[Envelope]:
        """This service's recorded span, read from the control plane."""
        client = runtime.current().client
        if client is None:
            raise ReplayError(
                "this service was asked to replay its span but has no control plane to read it "
                "from; set CHRONICLE_CONTROL_PLANE_URL (control_plane_url) on it, or "
                "CHRONICLE_REPLAY_INCIDENT to an incident file of the trace"
            )
        trace_id, span_id = self.descriptor.trace_id, self.descriptor.span_id
        try:
            if span_id is None:
                trace = client.get_trace(trace_id)
                spans = trace.get("spans") if isinstance(trace, dict) else None
                span_id = self._find_span(spans if isinstance(spans, list) else [])
            found = client.span_envelopes(trace_id, span_id)
        except ControlPlaneError as exc:
            raise ReplayError(f"could not read trace {trace_id}: {exc}") from None
        envelopes = load_envelopes(found, span_id=span_id)
        if not envelopes:
            raise ReplayError(
                f"span {span_id} of trace {trace_id} has no envelopes here; was it recorded "
                "against this control plane?"
            )
        return envelopes

    def _from_incident(self, path: str) -> list[Envelope]:
        """This service's recorded span, read from an incident file of every span."""
        descriptor = self.descriptor
        try:
            incident = Incident.read(Path(path))
        except FileNotFoundError:
            raise ReplayError(
                f"replay_incident names {path}, which does not exist; save the trace there with "
                f"`chronicle save {descriptor.trace_id} --all-spans`"
            ) from None
        if incident.trace_id != descriptor.trace_id:
            raise ReplayError(
                f"replay_incident ({path}) holds trace {incident.trace_id}, and the caller "
                f"replays trace {descriptor.trace_id}; save that trace with --all-spans"
            )
        spans = [
            {"span_id": s.span_id, "service": s.service, "parent_envelope_id": s.parent_envelope_id}
            for s in incident.spans
        ]
        span_id = descriptor.span_id or self._find_span(spans)
        envelopes = incident.envelopes_of(span_id)
        if not envelopes:
            raise ReplayError(
                f"replay_incident ({path}) holds no envelopes of span {span_id}; save the trace "
                "with --all-spans"
            )
        return envelopes

    def _find_span(self, spans: Iterable[object]) -> str:
        """The recorded span parented on the caller's envelope (its service is this one's)."""
        descriptor = self.descriptor
        for span in spans:
            if isinstance(span, Mapping) and span.get("parent_envelope_id") == (
                descriptor.parent_envelope_id
            ):
                service = span.get("service")
                self.service = service if isinstance(service, str) else self.service
                return str(span["span_id"])
        raise ReplayError(
            f"trace {descriptor.trace_id} holds no span parented on the caller's call "
            f"{descriptor.parent_envelope_id}; was this service's span recorded against this "
            "control plane?"
        )

    def __enter__(self) -> Session:
        self._scope.__enter__()
        session = current_session_in(otel_context.get_current())
        assert session is not None  # the replay's, which the scope just put in the context
        return session

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None and self.error is None:
            self.error = exc
        self._scope.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Session:
        return self.__enter__()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)

    def report(self) -> Report:
        """What happened, once the replay has ended."""
        run = self.run
        matched = tuple(
            sent for sent, (name, n, what) in self.entries if accounts_for(run, name, n, what)
        )
        error = self.error
        inputs, results = self._values()
        return Report(
            service=self.service,
            span_id=run.span_id,
            calls=tuple((c.name, c.invocation_index, c.mode, c.recording) for c in run.call_log()),
            divergences=tuple(run.divergences()),
            matched=matched,
            error=None if error is None else f"{type(error).__name__}: {error}",
            inputs=inputs,
            results=results,
        )

    def _values(
        self,
    ) -> tuple[dict[tuple[str, int], dict[str, object]], dict[tuple[str, int], object]]:
        """Each call's arguments and result in this span, in JSON form, redacted and bounded as
        a recording is (what the caller's ``captured_input``/``captured_result`` read)."""
        rt = runtime.current()
        limit, redaction = rt.settings.max_payload_bytes, rt.redaction
        log = log_of(self.run)
        inputs: dict[tuple[str, int], dict[str, object]] = {}
        results: dict[tuple[str, int], object] = {}
        for call in log.entries():
            key = (call.name, call.invocation_index)
            if call.service is not None or key in inputs or not log.called(*key):
                continue  # another service's (this one let a call through), or seen
            form = json_arguments(
                log.arguments(*key),
                max_string_bytes=limit,
                max_total_bytes=limit,
                redaction=redaction,
            )
            value = form.value
            inputs[key] = dict(value) if isinstance(value, dict) else {"value": value}
            if log.has_result(*key):
                results[key] = json_form(
                    log.result(*key),
                    max_string_bytes=limit,
                    max_total_bytes=limit,
                    redaction=redaction,
                ).value
        return inputs, results

    def report_headers(self) -> dict[str, str]:
        """The response header carrying ``report()`` back to the caller."""
        return {REPORT_HEADER: write_report(self.report())}

    def response_headers(self) -> dict[str, str]:
        """Headers the response to the caller carries (``report_headers()``)."""
        return self.report_headers()


# ---- serving: the ASGI middleware and span(headers) -------------------------------------------

App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


async def serve_asgi(
    app: App, scope: MutableMapping[str, Any], receive: Receive, send: Send, service: str | None
) -> bool:
    """Answer an HTTP request as a replay of this service's span when it carries one this
    service accepts; ``False`` when it does not (the caller runs it normally).

    A refused replay is answered 403 or 400 with the reason (body and ``chronicle-replay-refused``
    header); a span that cannot be read, 409 with the reason in the report. Otherwise the
    handler runs inside the replay, its response is held until it returns, and is sent with the
    report header added; a handler that raised is answered 500, the error in the report.
    """
    try:
        descriptor = inbound(scope.get("headers") or ())
    except ReplayRefusedError as exc:
        logger.warning("a replay sent to this service was refused: %s", exc)
        await _answer(send, exc.status, str(exc), {REFUSED_HEADER: str(exc)})
        return True
    if descriptor is None:
        return False
    try:
        served = ServedReplay(descriptor, service)
    except (ReplayError, ValueError, TypeError) as exc:  # unreadable span, a bad ignore pattern
        logger.warning("could not replay this service's span for a caller: %s", exc)
        failed = Report(service, descriptor.span_id, (), (), (), f"{type(exc).__name__}: {exc}")
        await _answer(send, 409, str(exc), {REPORT_HEADER: write_report(failed)})
        return True
    held: list[Message] = []

    async def hold(message: Message) -> None:
        held.append(message)

    try:
        async with served:
            await app(scope, receive, hold)
    except Exception:
        logger.warning("the handler raised while replaying span %s", served.run.span_id)
    headers = served.report_headers()
    start = next((m for m in held if m.get("type") == "http.response.start"), None)
    if start is None:
        await _answer(send, 500, f"the handler raised: {served.error!r}", headers)
        return True
    start["headers"] = [
        *start.get("headers", ()),
        *((key.encode("latin-1"), value.encode("latin-1")) for key, value in headers.items()),
    ]
    for message in held:
        await send(message)
    return True


async def _answer(send: Send, status: int, message: str, headers: Mapping[str, str]) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                *(
                    (k.encode("latin-1"), v.encode("latin-1", "replace"))
                    for k, v in headers.items()
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
