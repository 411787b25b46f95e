"""W3C trace context between services: ``inject`` for outbound calls, ``extract`` for inbound,
and ``span``/``aspan``, which open a request span on the inbound headers (or answer a replay a
caller let through, ``replay/remote.py``).

``inject(headers, url=...)`` returns a copy of ``headers`` with the two W3C headers added:

- ``traceparent``: ``00-<trace_id>-<parent-id>-<flags>``. The parent-id is the innermost
  Chronicle boundary (envelope) active here, the outbound-call envelope that the downstream
  service's Span names as its ``parent_envelope_id``. Outside any boundary it is the current
  request span's id (there is no envelope to name; the downstream Span then points at the
  caller's request span). With no Chronicle span at all it is the current OpenTelemetry span,
  as OpenTelemetry's own propagator would write it; with no trace at all nothing is added.
- ``tracestate``: ``chronicle=<envelope_id>`` first, then the members already in ``headers``
  (or in the current OpenTelemetry span's trace state), at most 32. The Chronicle member
  survives when another instrumentation's client span rewrites ``traceparent``, so the
  downstream Span still finds the envelope. Outside a boundary a stale ``chronicle`` member is
  removed and none is written.

Nothing is added when the ``inject`` setting is off, during a replay (a replayed call must not
make the downstream service record into the recorded trace), inside an ``llm`` boundary (a
model provider never gets trace ids, whatever ``inject_hosts`` says), or, with ``url``, when
its host is not allowed by ``inject_hosts``: entries are ``host`` (any port), ``host:port``,
``[v6]:port`` or ``*.suffix`` (subdomains of ``suffix``, any depth, not ``suffix`` itself),
case-insensitive.
Without ``url`` the caller has chosen the transport, so only the ``inject`` setting applies.

``extract(headers)`` reads an inbound ``traceparent`` (and the ``chronicle`` member of
``tracestate``, which wins as the parent envelope) from a mapping or from ASGI-style
``(name, value)`` pairs, and returns an ``agentplane_primitives`` ``TraceContext``, or ``None``
when there is none, it is malformed, or the ``extract`` setting is off. It never raises.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from agentplane_primitives.models import TraceContext
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api

from chronicle import runtime
from chronicle.otel import openinference
from chronicle.otel.context import current_replay_in
from chronicle.recording.request import RequestSpan
from chronicle.recording.session import current_frame_in, current_session_in
from chronicle.replay.remote import ServedReplay, inbound
from chronicle.traceparent import (
    TRACEPARENT,
    TRACESTATE,
    format_traceparent,
    header_mapping,
    merge_tracestate,
    read_trace_context,
)
from chronicle.wire import hex_id

logger = logging.getLogger("chronicle")

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


# ---- which hosts may receive the header ------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _parse_entries(entries: tuple[str, ...]) -> tuple[tuple[str, bool, int | None], ...]:
    """``inject_hosts`` as ``(host or suffix, is_wildcard, port or None)``; bad entries dropped."""
    parsed: list[tuple[str, bool, int | None]] = []
    for raw in entries:
        entry = raw.strip().lower()
        port: int | None = None
        if entry.startswith("["):  # [v6] or [v6]:port
            host, _, rest = entry[1:].partition("]")
            if rest.startswith(":") and rest[1:].isdigit():
                port = int(rest[1:])
            elif rest:
                logger.warning("inject_hosts entry %r is not a host; ignored", raw)
                continue
        elif entry.count(":") == 1:
            host, _, port_text = entry.partition(":")
            if not port_text.isdigit():
                logger.warning("inject_hosts entry %r has a bad port; ignored", raw)
                continue
            port = int(port_text)
        else:
            host = entry  # a name, an IPv4 address or a bare IPv6 address
        wildcard = host.startswith("*.")
        if wildcard:
            host = host[1:]  # ".suffix"
        if not host or "*" in host:
            logger.warning("inject_hosts entry %r is not host, host:port or *.suffix; ignored", raw)
            continue
        parsed.append((host.rstrip("."), wildcard, port))
    return tuple(parsed)


def host_allowed(url: object, hosts: Iterable[str] | None = None) -> bool:
    """Whether ``url`` (a string or an ``httpx.URL``) names a host in ``hosts``.

    ``hosts`` defaults to the ``inject_hosts`` setting. A URL that cannot be parsed is not allowed.
    """
    entries = tuple(runtime.current().settings.inject_hosts if hosts is None else hosts)
    if not entries:
        return False
    try:
        parts = urlsplit(str(url))
        host = (parts.hostname or "").rstrip(".").lower()
        port = parts.port
    except ValueError:
        return False
    if not host:
        return False
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme.lower())
    for allowed, wildcard, allowed_port in _parse_entries(entries):
        if allowed_port is not None and allowed_port != port:
            continue
        if (host.endswith(allowed) and host != allowed[1:]) if wildcard else host == allowed:
            return True
    return False


# ---- writing the headers ---------------------------------------------------------------------


def in_llm_boundary(ctx: otel_context.Context | None = None) -> bool:
    """Whether the innermost Chronicle boundary here is an ``llm`` one (a model call)."""
    frame = current_frame_in(ctx)
    if frame is None:
        return False
    kind = getattr(frame, "kind", None)
    if kind is not None:
        return bool(kind == "llm")
    # Frames that do not carry their kind: the boundary's own span, when it is the current one.
    span = trace_api.get_current_span(ctx)
    if hex_id(span.get_span_context().span_id, 16) != frame.envelope_id:
        return False
    attributes = getattr(span, "attributes", None)
    return (
        isinstance(attributes, Mapping)
        and attributes.get(openinference.SPAN_KIND) == openinference.KIND_OF["llm"]
    )


def outbound_headers(existing_tracestate: str | None = None) -> dict[str, str]:
    """``traceparent`` and ``tracestate`` for a call made here, or ``{}`` when there is no trace,
    a replay is active, or the call is made inside an ``llm`` boundary (model providers get no
    trace ids). Ignores the ``inject`` setting and ``inject_hosts`` (see ``inject``)."""
    ctx = otel_context.get_current()
    if current_replay_in(ctx) is not None or in_llm_boundary(ctx):
        return {}
    span_context = trace_api.get_current_span(ctx).get_span_context()
    session = current_session_in(ctx)
    envelope_id: str | None = None
    if session is not None and session.trace_id and session.span_id:
        trace_id = session.trace_id
        frame = current_frame_in(ctx)
        if frame is not None and frame.session is session:
            envelope_id = frame.envelope_id
        parent_id = envelope_id or session.span_id
        sampled = True
        if span_context.is_valid and hex_id(span_context.trace_id, 32) == trace_id:
            sampled = span_context.trace_flags.sampled
    elif span_context.is_valid:
        trace_id = hex_id(span_context.trace_id, 32)
        parent_id = hex_id(span_context.span_id, 16)
        sampled = span_context.trace_flags.sampled
    else:
        return {}
    if existing_tracestate is None and span_context.is_valid and span_context.trace_state:
        existing_tracestate = span_context.trace_state.to_header()
    headers = {TRACEPARENT: format_traceparent(trace_id, parent_id, sampled)}
    state = merge_tracestate(existing_tracestate, envelope_id)
    if state is not None:
        headers[TRACESTATE] = state
    return headers


def inject(
    headers: Mapping[str, str] | None = None, *, url: object | None = None
) -> dict[str, str]:
    """A copy of ``headers`` carrying ``traceparent`` and ``tracestate`` for the current call.

    ``requests.post(url, headers=chronicle.inject({"accept": "application/json"}, url=url))``.
    With ``url``, the headers are added only if its host is in ``inject_hosts``; they are never
    added when the ``inject`` setting is off or during a replay (see the module docstring).
    Existing ``traceparent``/``tracestate`` entries (any case) are replaced.
    """
    if headers is not None and not isinstance(headers, Mapping):
        raise TypeError(
            f"inject() takes a mapping of header names to values, got {type(headers).__name__}"
        )
    result: dict[str, str] = dict(headers or {})
    try:
        if not runtime.current().settings.inject:
            return result
        if url is not None and not host_allowed(url):
            return result
        existing = next((str(v) for k, v in result.items() if k.lower() == TRACESTATE), None)
        added = outbound_headers(existing)
    except Exception:  # propagation never breaks the call it decorates
        logger.exception("could not write the trace headers; the call goes without")
        return result
    if not added:
        return result
    for key in list(result):
        if key.lower() in (TRACEPARENT, TRACESTATE):
            del result[key]
    result.update(added)
    return result


# ---- reading them ----------------------------------------------------------------------------


def extract(headers: object) -> TraceContext | None:
    """The caller's trace context from inbound headers, or ``None``; never raises.

    ``headers`` is a mapping (any case; ``str`` or ``bytes`` values) or ASGI-style pairs. Pass
    the result to ``chronicle.span(context)`` to join the caller's trace.
    """
    try:
        if not runtime.current().settings.extract:
            return None
        mapping = header_mapping(headers)
        if mapping is None:
            return None
        return read_trace_context(mapping)
    except Exception:
        logger.debug("unreadable trace headers ignored", exc_info=True)
        return None


def span(
    parent: Mapping[str, object] | TraceContext | None = None,
    *,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> RequestSpan | ServedReplay:
    """Open a request span: ``with chronicle.span(request.headers) as session: ...``.

    ``parent`` is the inbound headers (a valid ``traceparent`` joins that trace; a missing or
    malformed one starts a new trace, never an error) or a ``TraceContext``. Inside a boundary of
    another span in this process, the new span is parented on that boundary.

    When the headers carry a replay a caller let through (``ReplayPlan().through``) and this
    service accepts replays (``accept_replay``), the block runs as a replay of this service's
    recorded span instead, writing nothing; answer with ``response_headers()`` of the returned
    object (the report), after the block. A replay that does not verify raises
    ``ReplayRefusedError`` (answer it with its ``status``). Either object has
    ``response_headers()`` (``{}`` for a plain span).
    """
    if isinstance(parent, Mapping):
        descriptor = inbound(parent)
        if descriptor is not None:
            return ServedReplay(descriptor, service)
    return RequestSpan(parent=parent, service=service, metadata=metadata)


def aspan(
    parent: Mapping[str, object] | TraceContext | None = None,
    *,
    service: str | None = None,
    metadata: Mapping[str, object] | None = None,
) -> RequestSpan | ServedReplay:
    """``span()`` for ``async with``."""
    return span(parent, service=service, metadata=metadata)
