"""Request spans: one service's handling of one request, the unit of replay.

``record()`` opens the root span of a new trace, with labels; ``span()`` opens a span that joins
the caller's trace from inbound headers (or a ``TraceContext``), or starts a new trace when there
is none; ``aspan()`` is the same for ``async with``. Each is an OpenTelemetry span (OpenInference
kind CHAIN) and a ``Session``: the ids, the counters that number calls, and the hooks.

A boundary called outside any request span opens an implicit one around itself: a trace of one
span with one envelope, saved and replayable like any other (its ids are on the envelope). Group
calls into one trace by opening a span yourself.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agentplane_primitives.models import Span as SpanEntity
from agentplane_primitives.models import Trace as TraceEntity
from agentplane_primitives.models import TraceContext
from agentplane_primitives.utils import new_span_id, new_trace_id, parse_traceparent
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from pydantic import JsonValue

from chronicle import runtime
from chronicle.errors import ConfigurationError, ControlPlaneError, ReservedMetadataError
from chronicle.otel.context import (
    ATTEMPT_KEY,
    FRAME_KEY,
    RECORD_KEY,
    SESSION_KEY,
    current_frame_in,
    current_replay_in,
    current_session_in,
)
from chronicle.recording.capture import json_form
from chronicle.recording.hooks import HookRegistry, default_hooks

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import Span as SdkSpan

    from chronicle.save.delivery import Delivery

logger = logging.getLogger("chronicle")

_RESERVED = "chronicle."
_TRACESTATE_KEY = "chronicle"


def utc(ns: int) -> datetime:
    """An OTel timestamp (ns since the epoch) as an aware UTC datetime."""
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)


def hex_id(value: int, width: int) -> str:
    return format(value, f"0{width}x")


class Frame:
    """The innermost boundary on the stack: what a nested boundary takes as its parent."""

    __slots__ = ("envelope_id", "kind", "session")

    def __init__(self, envelope_id: str, session: Session, kind: str | None = None) -> None:
        self.envelope_id = envelope_id
        self.session = session
        self.kind = kind


class Attempt:
    """An ``attempt(n, of=...)`` block: the boundaries it opens directly are retries."""

    __slots__ = ("frame", "number", "of")

    def __init__(self, number: int, of: str | None, frame: Frame | None) -> None:
        self.number = number
        self.of = of
        self.frame = frame


class Session:
    """A request span in progress: the ids of the Span entity, its counters and hooks.

    ``trace_id``, ``span_id`` (both hex), ``parent_envelope_id`` (the caller's outbound-call
    envelope, or ``None``) and ``service`` are fixed once it is open. ``hooks`` inherits
    ``default_hooks``; hooks registered here apply to this span's calls only.
    """

    def __init__(
        self,
        *,
        service: str,
        metadata: Mapping[str, JsonValue],
        parent_envelope_id: str | None,
        trace_id: str | None,
        trace_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        implicit: bool = False,
    ) -> None:
        self.trace_id: str = trace_id or ""
        self.span_id: str = ""
        self.parent_envelope_id = parent_envelope_id
        self.service = service
        self.metadata = dict(metadata)
        self.hooks = HookRegistry(parent=default_hooks)
        self.implicit = implicit
        self.trace_name = trace_name
        self.labels = dict(labels or {})
        self.failed = False
        self._sequence = itertools.count(1)
        self._invocations: dict[str, int] = {}
        self._lock = threading.Lock()
        self._claimed = False
        self._started_ns = 0

    def __repr__(self) -> str:
        return (
            f"Session(trace_id={self.trace_id!r}, span_id={self.span_id!r}, "
            f"parent_envelope_id={self.parent_envelope_id!r}, service={self.service!r})"
        )

    def next_call(self, name: str) -> tuple[int, int]:
        """Number the next call of ``name``: ``(sequence in the span, invocation of the name)``."""
        with self._lock:
            count = self._invocations.get(name, 0) + 1
            self._invocations[name] = count
            return next(self._sequence), count

    # ---- the record the processor saves (see chronicle.otel.processor) ----------------------

    def claim(self) -> bool:
        """True once: the first ChronicleSpanProcessor to see this span saves it."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def started(self, span: SdkSpan, delivery: Delivery) -> None:
        """Queue the open write of the Span entity."""
        context = span.get_span_context()
        self.trace_id = hex_id(context.trace_id, 32)
        self.span_id = hex_id(context.span_id, 16)
        self._started_ns = span.start_time or 0
        delivery.submit_span(self._entity_builder(None, None))

    def ended(self, span: ReadableSpan, delivery: Delivery) -> None:
        """Queue the close write; it wakes delivery, but nothing here waits for it."""
        delivery.submit_span(self._entity_builder(span.end_time or 0, self.failed), urgent=True)

    def _entity_builder(self, ended_ns: int | None, failed: bool | None) -> Any:
        started = self._started_ns
        snapshot = {
            "span_id": self.span_id,
            "trace_id": self.trace_id,
            "parent_envelope_id": self.parent_envelope_id,
            "service": self.service,
            "metadata": dict(self.metadata),
        }

        def build() -> SpanEntity:
            body: dict[str, Any] = {**snapshot, "started_at": utc(started)}
            if ended_ns is None:
                body["state"] = "open"
            else:
                body.update(
                    state="closed",
                    status="failure" if failed else "success",
                    ended_at=utc(max(ended_ns, started)),
                )
            return SpanEntity.model_validate(body)

        return build

    def trace_entity(self) -> TraceEntity:
        """The Trace registration body: id, name and labels, validated."""
        return TraceEntity.model_validate(
            {
                "trace_id": self.trace_id,
                "name": self.trace_name,
                "metadata": self.labels,
                "state": "open",
            }
        )


def current_session() -> Session | None:
    """The request span active here, or ``None``. Never opens one."""
    return current_session_in()


def check_metadata(metadata: Mapping[str, object] | None, what: str) -> dict[str, JsonValue]:
    """Validate user metadata: string keys outside ``chronicle.``, JSON values."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"{what} must be a mapping of str to JSON values, got {type(metadata).__name__}"
        )
    checked: dict[str, JsonValue] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be strings, got {key!r}")
        if key.startswith(_RESERVED):
            raise ReservedMetadataError(key)
        checked[key] = json_form(value).value
    return checked


def _check_labels(labels: Mapping[str, object] | None) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels must be a mapping of str to str, got {type(labels).__name__}")
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"labels are strings (they are indexed and searched); got {key!r}: {value!r}; "
                "convert the value with str()"
            )
        if key.startswith(_RESERVED):
            raise ReservedMetadataError(key)
        checked[key] = value
    return checked


def _parse_parent(parent: object, extract: bool) -> TraceContext | None:
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
    headers = {str(k).lower(): v for k, v in parent.items()}
    raw = headers.get("traceparent")
    if isinstance(raw, bytes):
        raw = raw.decode("latin-1")
    context = parse_traceparent(raw.strip() if isinstance(raw, str) else raw)
    if context is None:
        return None
    state = headers.get("tracestate")
    if isinstance(state, bytes):
        state = state.decode("latin-1")
    if isinstance(state, str):
        for member in state.split(","):
            key, _, value = member.strip().partition("=")
            if key == _TRACESTATE_KEY:
                linked = parse_traceparent(f"00-{context.trace_id}-{value}-01")
                if linked is not None:
                    context = TraceContext(
                        trace_id=context.trace_id,
                        parent_envelope_id=linked.parent_envelope_id,
                        flags=context.flags,
                    )
    return context


def _remote_parent(trace_id: str, span_id: str, sampled: bool = True) -> otel_context.Context:
    span_context = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT),
    )
    return trace_api.set_span_in_context(NonRecordingSpan(span_context))


class SpanScope:
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
    ) -> None:
        self._rt = runtime.current()
        settings = self._rt.settings
        self._inbound = _parse_parent(parent, settings.extract)
        if trace_id is not None:
            try:
                TraceEntity.model_validate({"trace_id": trace_id, "state": "open"})
            except ValueError:
                raise ValueError(
                    f"trace_id {trace_id!r} is not a trace id: use 32 lowercase hex characters, "
                    "not all zeros (or leave it out and Chronicle mints one)"
                ) from None
        if service is not None and (not isinstance(service, str) or not service.strip()):
            raise ConfigurationError("service", f"expects a non-empty string, got {service!r}")
        self._root = root
        self._explicit_trace = trace_id
        self.session = Session(
            service=service or settings.service_name,
            metadata=check_metadata(metadata, "metadata"),
            parent_envelope_id=None,
            trace_id=trace_id,
            trace_name=trace_name,
            labels=_check_labels(labels),
            implicit=implicit,
        )
        self._span: trace_api.Span | None = None
        self._token: object = None

    # ---- opening --------------------------------------------------------------------------

    def open(self) -> Session:
        session = self.session
        rt = self._rt
        ctx = otel_context.get_current()
        replaying = current_session_in(ctx) if current_replay_in(ctx) is not None else None
        if replaying is not None:
            # The code under test opened a span during a replay: it records and registers
            # nothing, and its boundaries stay matched against the replayed span.
            session.trace_id, session.span_id = replaying.trace_id, replaying.span_id
            self._token = otel_context.attach(otel_context.set_value(SESSION_KEY, session, ctx))
            return session
        parent_ctx, parent_envelope_id = self._parent_context(ctx)
        session.parent_envelope_id = parent_envelope_id
        if rt.recording:
            attributes: dict[str, str] = {
                "openinference.span.kind": "CHAIN",
                "chronicle.service": session.service,
            }
            if "session_id" in session.labels:
                attributes["session.id"] = session.labels["session_id"]
            if "user_id" in session.labels:
                attributes["user.id"] = session.labels["user_id"]
            span = rt.tracer.start_span(
                session.trace_name or "chronicle.request",
                context=otel_context.set_value(RECORD_KEY, session, parent_ctx),
                attributes=attributes,
            )
            span_context = span.get_span_context()
            if span_context.is_valid:
                session.trace_id = hex_id(span_context.trace_id, 32)
                session.span_id = hex_id(span_context.span_id, 16)
            self._span = span
            body_ctx = trace_api.set_span_in_context(span, parent_ctx)
        else:
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
        if sampled and session.parent_envelope_id is None and self._starts_trace(ctx):
            self._register()
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

    def _register(self) -> None:
        rt = self._rt
        session = self.session
        if not rt.delivery.active:
            return
        if rt.settings.trace_registration == "lazy" or session.implicit or rt.client is None:
            rt.delivery.submit_trace(session.trace_entity)
            return
        try:
            rt.client.register_trace(session.trace_entity())
        except ControlPlaneError as exc:
            if not rt.settings.registration_fail_open:
                self.close(exc)
                raise
            logger.warning(
                "chronicle: trace %s could not be registered now (%s); it is queued and will be "
                "sent when the control plane answers",
                session.trace_id,
                exc,
            )
            rt.delivery.submit_trace(session.trace_entity)

    # ---- closing --------------------------------------------------------------------------

    def close(self, error: BaseException | None) -> None:
        if self._token is not None:
            try:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            except Exception:  # detached in another context (a generator moved threads)
                logger.debug("chronicle: span context detached out of order", exc_info=True)
            self._token = None
        span, self._span = self._span, None
        if error is not None:
            self.session.failed = True
        if span is None:
            return
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    async def __aenter__(self) -> Session:
        return self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)

    def __repr__(self) -> str:
        return f"<chronicle span scope {self.session!r}>"


def span(
    parent: Mapping[str, object] | TraceContext | None = None,
    *,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> SpanScope:
    """Open a request span: ``with chronicle.span(request.headers) as session: ...``.

    ``parent`` is the inbound headers (a valid ``traceparent`` joins that trace; a missing or
    malformed one starts a new trace, never an error) or a ``TraceContext``. Inside a boundary of
    another span in this process, the new span is parented on that boundary.
    """
    return SpanScope(parent=parent, service=service, metadata=metadata)


def aspan(
    parent: Mapping[str, object] | TraceContext | None = None,
    *,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> SpanScope:
    """``span()`` for ``async with``."""
    return SpanScope(parent=parent, service=service, metadata=metadata)


def record(
    name: str | None = None,
    *,
    trace_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> SpanScope:
    """Open the root span of a new trace with labels: ``with chronicle.record("chat", labels=...)``.

    ``labels`` (``session_id``, ``message_id``, ``user_id`` and your own keys; string values) are
    written once on the Trace and searchable on the control plane. ``trace_id`` picks the id
    (32 hex); by default one is minted. Works with ``with`` and ``async with``.
    """
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"record() name must be a non-empty string or None, got {name!r}")
    return SpanScope(
        trace_id=trace_id,
        trace_name=name,
        labels=labels,
        service=service,
        metadata=metadata,
        root=True,
    )


class attempt:
    """``with chronicle.attempt(2, of=first_envelope_id):`` marks the boundaries opened directly
    inside as attempt ``n`` of a retry, each with a ``retry_of`` link to ``of``."""

    def __init__(self, n: int, *, of: str | None = None) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"attempt number must be a whole number from 1, got {n!r}")
        if of is not None and parse_traceparent(f"00-{'1' * 32}-{of}-01") is None:
            raise ValueError(f"of must be an envelope id (16 lowercase hex characters), got {of!r}")
        self._n = n
        self._of = of
        self._token: object = None

    def __enter__(self) -> attempt:
        frame = current_frame_in()
        self._token = otel_context.attach(
            otel_context.set_value(ATTEMPT_KEY, Attempt(self._n, self._of, frame))
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    async def __aenter__(self) -> attempt:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()
