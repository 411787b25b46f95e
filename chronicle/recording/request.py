"""Request spans: one service's handling of one request, the unit of replay.

``record()`` opens the root span of a new trace, with labels; ``span()`` opens a span that joins
the caller's trace from inbound headers (or a ``TraceContext``), or starts a new trace when there
is none; ``aspan()`` is the same for ``async with``. Each is an OpenTelemetry span (OpenInference
kind CHAIN, GenAI operation ``invoke_agent``: named ``invoke_agent {agent}`` when an
``AgentProfile`` names the agent, else by the trace's name or ``chronicle.request``), a
``Session`` in the context, and a ``RequestRecord`` that the span processor hands
to delivery when the span starts and ends.

A boundary called outside any request span opens an implicit one around itself: a trace of one
span with one envelope, saved and replayable like any other (its ids are on the envelope). Group
calls into one trace by opening a span yourself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from agentplane_primitives.models import Trace, TraceContext
from agentplane_primitives.utils import new_span_id, new_trace_id
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from pydantic import JsonValue

from chronicle import runtime
from chronicle.errors import ConfigurationError, ReservedMetadataError
from chronicle.otel import genai, openinference
from chronicle.otel.context import (
    ACTIVE_REPLAYS,
    ATTEMPT_KEY,
    FRAME_KEY,
    RECORD_KEY,
    SESSION_KEY,
    current_replay_in,
    detach,
)
from chronicle.otel.redacting import RedactingSpan
from chronicle.recording.capture import json_form
from chronicle.recording.session import (
    Session,
    closed_session_in,
    current_frame_in,
    current_session_in,
    mark_closed,
)
from chronicle.redaction import Redaction, redact_secrets
from chronicle.traceparent import header_mapping, read_trace_context
from chronicle.wire import (
    AGENT,
    LOSSY_LABEL,
    LOSSY_METADATA,
    RESERVED_PREFIX,
    SERVICE_VERSION,
    TRUNCATED,
    RequestRecord,
    hex_id,
)

logger = logging.getLogger("chronicle")


def check_metadata(
    metadata: Mapping[str, object] | None,
    what: str,
    *,
    redaction: Redaction | None = None,
    limit: int | None = None,
) -> dict[str, JsonValue]:
    """Validate user metadata (string keys outside ``chronicle.``) and take its JSON form.

    The values are redacted and bounded by ``limit`` like a payload; a cut or lossy value adds
    ``chronicle.truncated`` / ``chronicle.lossy_metadata``.
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"{what} must be a mapping of str to JSON values, got {type(metadata).__name__}"
        )
    checked: dict[str, object] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be strings, got {key!r}")
        if key.startswith(RESERVED_PREFIX):
            raise ReservedMetadataError(key)
        checked[key] = value
    form = json_form(checked, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction)
    out: dict[str, JsonValue] = dict(form.value) if isinstance(form.value, dict) else {}
    if form.truncated:
        out[TRUNCATED] = True
    if form.lossy:
        out[LOSSY_METADATA] = True
    return out


def _recorded_trace(
    labels: dict[str, str], name: str | None, redaction: Redaction, limit: int
) -> tuple[dict[str, str], str | None]:
    """Labels and trace name as they are sent and set on spans: redacted, valid, bounded.

    A cut or rewritten label or name adds the label ``chronicle.truncated`` / ``chronicle.lossy``
    (``"true"``): labels hold strings only.
    """
    truncated = lossy = False
    out: dict[str, str] = {}
    if labels:
        form = json_form(labels, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction)
        items = form.value if isinstance(form.value, dict) else {}
        out = {key: value for key, value in items.items() if isinstance(value, str)}
        truncated, lossy = form.truncated, form.lossy
    if name is not None:
        named = json_form(name, max_string_bytes=limit, redaction=redaction)
        name = named.value if isinstance(named.value, str) else None
        truncated, lossy = truncated or named.truncated, lossy or named.lossy
    if truncated:
        out[TRUNCATED] = "true"
    if lossy:
        out[LOSSY_LABEL] = "true"
    return out, name


def _check_labels(labels: Mapping[str, object] | None) -> dict[str, str]:
    """Labels as strings: a value (or key) of another type is recorded as its ``str`` with a
    warning; one whose ``str`` fails, or labels that are not a mapping, are dropped with a
    warning. Never raises, except ``ReservedMetadataError`` for a key with the reserved prefix."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        logger.warning(
            "labels must be a mapping of str to str, got %s; the trace is recorded "
            "without labels: pass a dict such as {'user_id': '42'}",
            type(labels).__name__,
        )
        return {}
    checked: dict[str, str] = {}
    try:
        items = list(labels.items())
    except Exception as exc:
        logger.warning(
            "the labels mapping could not be read (%s); the trace is recorded without "
            "labels: pass a plain dict of str to str",
            type(exc).__name__,
        )
        return {}
    for key, value in items:
        if isinstance(key, str) and key.startswith(RESERVED_PREFIX):
            raise ReservedMetadataError(key)
        if isinstance(key, str) and isinstance(value, str):
            checked[key] = value
            continue
        try:
            text_key, text_value = str(key), str(value)
            if not isinstance(text_key, str) or not isinstance(text_value, str):
                raise TypeError("__str__ returned a non-string")
        except Exception as exc:
            logger.warning(
                "a label of type %s: %s could not be turned into a string (%s) and "
                "was dropped; labels are strings (they are indexed and searched): convert it "
                "with str() yourself",
                type(key).__name__,
                type(value).__name__,
                type(exc).__name__,
            )
            continue
        if text_key.startswith(RESERVED_PREFIX):
            raise ReservedMetadataError(text_key)
        logger.warning(
            "the label %r holds a %s, recorded as its str(); labels are strings "
            "(they are indexed and searched): convert it with str() to silence this",
            redact_secrets(text_key[:100]),
            type(value).__name__ if not isinstance(value, str) else type(key).__name__,
        )
        checked[text_key] = text_value
    return checked


def _inbound(parent: object, extract: bool) -> TraceContext | None:
    """The caller's trace context from headers or a ``TraceContext``; ``None`` if absent or bad."""
    if parent is None:
        return None
    if isinstance(parent, TraceContext):
        return parent
    if not isinstance(parent, Mapping):
        raise TypeError(
            f"parent must be inbound headers (a mapping) or a TraceContext, got "
            f"{type(parent).__name__}"
        )
    if not extract:
        return None
    headers = header_mapping(parent)
    return read_trace_context(headers) if headers is not None else None


def _remote_parent(trace_id: str, span_id: str, sampled: bool = True) -> otel_context.Context:
    span_context = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT),
    )
    return trace_api.set_span_in_context(NonRecordingSpan(span_context))


class RequestSpan:
    """Opens a request span on enter and closes it on exit; ``with`` and ``async with``."""

    def __init__(
        self,
        *,
        parent: object = None,
        service: str | None = None,
        metadata: Mapping[str, object] | None = None,
        trace_id: str | None = None,
        trace_name: str | None = None,
        labels: Mapping[str, object] | None = None,
        root: bool = False,
        implicit: bool = False,
        links: Sequence[Link] = (),
        replay_record: bool = False,
    ) -> None:
        """``links``: OpenTelemetry links of the span. ``replay_record``: the span a replay
        with ``record=True`` records into (a new trace), opened and saved though replays are
        active."""
        self._rt = runtime.current()
        self._links = list(links)
        self._replay_record = replay_record
        settings = self._rt.settings
        self._inbound = _inbound(parent, settings.extract)
        if trace_id is not None:
            try:
                Trace.model_validate({"trace_id": trace_id, "state": "open"})
            except ValueError:
                raise ValueError(
                    f"trace_id {trace_id!r} is not a trace id: use 32 lowercase hex characters, "
                    "not all zeros (or leave it out and Chronicle mints one)"
                ) from None
        if service is not None and (not isinstance(service, str) or not service.strip()):
            raise ConfigurationError("service", f"expects a non-empty string, got {service!r}")
        self._root = root
        self._implicit = implicit
        self._explicit_trace = trace_id
        redaction, limit = self._rt.redaction, settings.max_payload_bytes
        recorded_labels, recorded_name = _recorded_trace(
            _check_labels(labels), trace_name, redaction, limit
        )
        self.record = RequestRecord(
            service=service or settings.service_name,
            metadata=check_metadata(metadata, "metadata", redaction=redaction, limit=limit)
            | ({AGENT: settings.agent.span_form()} if settings.agent else {})
            | ({SERVICE_VERSION: settings.service_version} if settings.service_version else {}),
            trace_name=recorded_name,
            labels=recorded_labels,
        )
        self.session = Session(
            service=self.record.service,
            metadata=self.record.metadata,
            labels=self.record.labels,
            trace_id=trace_id or "",
            control_plane_url=settings.control_plane_url,
            keep=self._rt.keep.keep_trace if self._rt.keep is not None else None,
        )
        self._span: trace_api.Span | None = None
        self._token: object = None

    # ---- opening --------------------------------------------------------------------------

    def open(self) -> Session:
        """Start the span, put its ``Session`` in the context, register a new trace."""
        session, record, rt = self.session, self.record, self._rt
        ctx = otel_context.get_current()
        replay = current_replay_in(ctx)
        if not self._replay_record and (replay is not None or ACTIVE_REPLAYS):
            # A span opened during a replay records and registers nothing. In the replay's own
            # context its boundaries stay matched against the replayed span; elsewhere (a thread
            # that does not carry it: an in-process service answering a request) it is a request
            # of its own, whose boundaries run unrecorded (see recording/call.py).
            replaying = current_session_in(ctx) if replay is not None else None
            if replaying is not None:
                session.trace_id, session.span_id = replaying.trace_id, replaying.span_id
            else:
                session.trace_id, session.span_id = new_trace_id(), new_span_id()
            self._token = otel_context.attach(otel_context.set_value(SESSION_KEY, session, ctx))
            return session
        parent_ctx, parent_envelope_id = self._parent_context(ctx)
        session.parent_envelope_id = record.parent_envelope_id = parent_envelope_id
        if rt.recording:
            agent = rt.settings.agent
            attributes: dict[str, genai.AttributeValue] = {
                openinference.SPAN_KIND: openinference.CHAIN,
                "chronicle.service": record.service,
            }
            if agent is None:
                name = record.trace_name or "chronicle.request"
                attributes.update(
                    genai.agent_attributes(record.service, record.labels.get("session_id"))
                )
            else:  # named by the GenAI convention: the agent's invocation
                name = genai.agent_span_name(agent.name)
                version = agent.metadata.get("version")
                attributes.update(
                    genai.agent_attributes(
                        agent.name,
                        record.labels.get("session_id"),
                        version=version if isinstance(version, str) else None,
                        description=agent.goal or None,
                    )
                )
            if record.trace_name is not None:
                attributes[genai.TRACE_NAME] = record.trace_name
            if "session_id" in record.labels:
                attributes["session.id"] = record.labels["session_id"]
            if "user_id" in record.labels:
                attributes["user.id"] = record.labels["user_id"]
            span = rt.tracer.start_span(
                name,
                context=otel_context.set_value(RECORD_KEY, record, parent_ctx),
                attributes=attributes,
                links=self._links or None,
            )
            span_context = span.get_span_context()
            if span_context.is_valid:
                session.trace_id = hex_id(span_context.trace_id, 32)
                session.span_id = hex_id(span_context.span_id, 16)
                session.unsampled = not span.is_recording()
                # Dropped by the sampler, which drops its calls too, and nothing holds it: its
                # calls record nothing.
                link = rt.link
                session.dropped = (
                    session.unsampled and rt.keep is None and link is not None and link.drops_below
                )
            self._span = span
            # Code in the body writes on the span through the context: give it the redacting one.
            visible = RedactingSpan(span, rt.redaction) if rt.display else span
            body_ctx = trace_api.set_span_in_context(visible, parent_ctx)
        else:
            rt.note_unrecorded()
            body_ctx = parent_ctx
        if not session.span_id:  # not recording (or sampled out): ids still exist for hooks
            session.span_id = new_span_id()
            if not session.trace_id:
                inbound = self._inbound
                session.trace_id = inbound.trace_id if inbound is not None else new_trace_id()
        body_ctx = otel_context.set_value(SESSION_KEY, session, body_ctx)
        body_ctx = otel_context.set_value(FRAME_KEY, None, body_ctx)
        body_ctx = otel_context.set_value(ATTEMPT_KEY, None, body_ctx)
        self._token = otel_context.attach(body_ctx)
        sampled = self._span is not None and self._span.is_recording()
        if session.parent_envelope_id is None and self._starts_trace(ctx):
            if sampled:
                try:
                    rt.delivery.register_trace(record, session.trace_id, wait=not self._implicit)
                except BaseException as exc:  # registration_fail_open=False: the span fails too
                    self.close(exc)
                    raise
            elif rt.keep is not None and self._span is not None:
                # Sampled out: registered only if the request is kept (chronicle.save.keep).
                rt.keep.register_trace(record, session.trace_id)
        return session

    def _starts_trace(self, ctx: otel_context.Context) -> bool:
        """Whether this span is the first Chronicle span of its trace in this process."""
        if self._inbound is not None:
            return False
        enclosing = current_session_in(ctx)
        return enclosing is None or enclosing.trace_id != self.session.trace_id

    def _parent_context(self, ctx: otel_context.Context) -> tuple[otel_context.Context, str | None]:
        inbound = self._inbound
        if self._explicit_trace is not None:
            # The OTel API has no way to ask for a trace id, so the root gets a remote parent in
            # that trace (shown as a missing parent by some backends).
            return _remote_parent(self._explicit_trace, new_span_id()), None
        if inbound is not None:
            current = trace_api.get_current_span(ctx).get_span_context()
            if current.is_valid and hex_id(current.trace_id, 32) == inbound.trace_id:
                return ctx, inbound.parent_envelope_id  # e.g. OTel's ASGI server span: nest in it
            sampled = inbound.flags != "00"
            return (
                _remote_parent(inbound.trace_id, inbound.parent_envelope_id, sampled),
                inbound.parent_envelope_id,
            )
        if closed_session_in(ctx):
            # A thread that outlived the request it was started in: the request (and its trace)
            # is over, so this span starts a trace of its own, not a late child of that one.
            return trace_api.set_span_in_context(trace_api.INVALID_SPAN, ctx), None
        if self._root:
            if current_session_in(ctx) is not None:
                # record() inside another request: a new trace of its own.
                return trace_api.set_span_in_context(trace_api.INVALID_SPAN, ctx), None
            # Inside the user's own span (an instrumented web framework, say) the request is
            # that OTel trace, so Chronicle's trace is the same one.
            return ctx, None
        frame = current_frame_in(ctx)
        enclosing = current_session_in(ctx)
        if frame is not None and enclosing is not None:
            return ctx, frame.envelope_id  # a sub-agent in this process: parented on that call
        return ctx, None

    # ---- closing --------------------------------------------------------------------------

    def release(self) -> None:
        """Restore the context the span was opened in; the span stays open.

        An implicit span around a streamed call lets go of the caller's context when the call
        returns its stream, and ends when the stream does.
        """
        token, self._token = self._token, None
        detach(token, "span")  # (another context when a generator moved threads)

    def close(self, error: BaseException | None) -> None:
        """End the span (``failure`` when ``error`` is given) and restore the context.

        The session is marked closed first: a thread still carrying this context (started
        during the request, outliving it) records its later calls in request spans of their own.
        """
        mark_closed(self.session)
        self.release()
        span, self._span = self._span, None
        if error is not None:
            self.record.failed = True
        if span is None:
            return
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.close(exc)

    async def __aenter__(self) -> Session:
        return self.open()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.close(exc)

    def response_headers(self) -> dict[str, str]:
        """Headers the response to this request should carry: none. (``chronicle.span`` may
        instead return a replay it serves for a caller, whose report goes back this way.)"""
        return {}

    def __repr__(self) -> str:
        return f"<chronicle request span {self.session!r}>"


def span(
    parent: Mapping[str, object] | TraceContext | None = None,
    *,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> RequestSpan:
    """Open a request span: ``with chronicle.span(request.headers) as session: ...``.

    ``parent`` is the inbound headers (a valid ``traceparent`` joins that trace; a missing or
    malformed one starts a new trace, never an error) or a ``TraceContext``. Inside a boundary of
    another span in this process, the new span is parented on that boundary.
    """
    return RequestSpan(parent=parent, service=service, metadata=metadata)


def aspan(
    parent: Mapping[str, object] | TraceContext | None = None,
    *,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> RequestSpan:
    """``span()`` for ``async with``."""
    return RequestSpan(parent=parent, service=service, metadata=metadata)


def record(
    name: str | None = None,
    *,
    trace_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> RequestSpan:
    """Open the root span of a new trace with labels: ``with chronicle.record("chat", labels=...)``.

    ``labels`` (``session_id``, ``message_id``, ``user_id`` and your own keys; string values) are
    written once on the Trace and searchable on the control plane. ``trace_id`` picks the id
    (32 hex); by default one is minted. Works with ``with`` and ``async with``.
    """
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"record() name must be a non-empty string or None, got {name!r}")
    return RequestSpan(
        trace_id=trace_id,
        trace_name=name,
        labels=labels,
        service=service,
        metadata=metadata,
        root=True,
    )
