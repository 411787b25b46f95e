"""``ChronicleMiddleware``: one Chronicle request span per HTTP request or WebSocket connection.

Pure ASGI (no ``BaseHTTPMiddleware``, so streaming responses and background tasks are untouched
and the context the handler runs in is the one the span was opened in)::

    app = Starlette(routes=...)
    app.add_middleware(chronicle.ChronicleMiddleware, service="billing-agent")
    # or: app = chronicle.ChronicleMiddleware(app, service="billing-agent")

- ``http`` and ``websocket`` scopes each get a request span (named ``"<METHOD> <path>"``,
  ``"WEBSOCKET <path>"`` for a WebSocket, which spans the whole connection); ``lifespan`` and
  anything else passes straight through.
- A valid inbound ``traceparent`` joins the caller's trace, and the Span's
  ``parent_envelope_id`` is the caller's outbound-call envelope (the ``chronicle`` member of
  ``tracestate`` when present, else the traceparent's parent-id). A missing or malformed header
  starts a new trace. With the ``extract`` setting off inbound headers are ignored.
- The span closes ``failure`` when the application raises (the exception propagates unchanged)
  and when it answers an HTTP status of 500 or above (as OpenTelemetry marks server spans:
  a 4xx is the client's error, so the span stays ``success``). A WebSocket fails only by
  raising.
- With ``accept_replay`` on, an HTTP request carrying a replay a caller let through
  (``ReplayPlan().through``, a signed ``chronicle-replay`` header) is answered by replaying this
  service's recorded span around the app, with the report in a response header; one whose
  signature does not verify with ``replay_token`` is refused (403). Off (the default), the
  header is ignored (``replay/remote.py``).
- ``record_request=True`` records each HTTP request as its span's entry: one call named
  ``"<METHOD> <path>"`` around the app, whose input is the request (method, path, query, headers
  without credentials) and whose result is the response (status, headers), with the app's import
  path; ``record_body=True`` adds the JSON, form and text bodies of both, up to
  ``max_payload_bytes``. Off (the default) nothing of either is recorded. ``chronicle replay
  PATH --entry module:app`` then calls the app again with each recorded request, in process
  (``recording/http_entry.py``).
- With OpenTelemetry's ASGI or FastAPI instrumentation installed, add Chronicle *inside* it
  (``FastAPIInstrumentor.instrument_app`` and ``OpenTelemetryMiddleware(app)`` wrap the whole
  app, so ``app.add_middleware(ChronicleMiddleware)`` already is): OpenTelemetry extracts the
  header once and opens its server span, and the Chronicle span nests in that server span in
  the same trace, still parented on the caller's envelope. Placed outside it, OpenTelemetry's
  extraction would start from an empty context and drop Chronicle's request span.
"""

from __future__ import annotations

import logging

from opentelemetry import trace as trace_api

from chronicle.errors import ConfigurationError
from chronicle.recording.http_entry import ASGIApp, Message, Receive, RequestEntry, Scope, Send
from chronicle.recording.request import RequestSpan
from chronicle.replay.remote import serve_asgi
from chronicle.traceparent import header_mapping
from chronicle.wire import hex_id

__all__ = ["ChronicleMiddleware", "HTTPServerError"]

logger = logging.getLogger("chronicle")


class HTTPServerError(Exception):
    """Why a request span closed ``failure`` without an exception: the app answered 5xx."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the application answered HTTP {status}")
        self.status = status


class ChronicleMiddleware:
    """Pure ASGI middleware: a Chronicle request span around each HTTP request and WebSocket.

    ``service`` names the Span's service (default: the ``service_name`` setting).
    ``record_request`` records each HTTP request as its span's entry, to replay it by calling the
    app again; ``record_body`` (which implies it) records the JSON, form and text bodies too.
    """

    def __init__(
        self,
        app: ASGIApp,
        service: str | None = None,
        *,
        record_request: bool = False,
        record_body: bool = False,
    ) -> None:
        if service is not None and (not isinstance(service, str) or not service.strip()):
            raise ConfigurationError("service", f"expects a non-empty string, got {service!r}")
        for name, value in (("record_request", record_request), ("record_body", record_body)):
            if not isinstance(value, bool):
                raise ConfigurationError(name, f"expects True or False, got {value!r}")
        self.app = app
        self.service = service
        self._entry = (
            RequestEntry(app, record_body=record_body, outer=self)
            if record_request or record_body
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection inside a request span (``lifespan`` passes through)."""
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if kind == "http" and await serve_asgi(self.app, scope, receive, send, self.service):
            return  # a replay a caller let through, answered from this service's recording
        path = str(scope.get("path") or "/")
        method = str(scope.get("method") or "GET") if kind == "http" else "WEBSOCKET"
        span_scope = RequestSpan(
            parent=header_mapping(scope.get("headers") or ()),
            service=self.service,
            trace_name=f"{method} {path}",
        )
        session = span_scope.open()
        current = trace_api.get_current_span()
        context = current.get_span_context()
        span = (
            current if context.is_valid and hex_id(context.span_id, 16) == session.span_id else None
        )
        # span is None when not recording (off, sampled out, replaying): nothing to annotate
        if span is not None and span.is_recording():
            span.set_attributes({"http.request.method": method, "url.path": path})
        status: list[int] = []

        async def send_and_watch(message: Message) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 200)))
            await send(message)

        serve = self.app if self._entry is None else self._entry.serve
        try:
            await serve(scope, receive, send_and_watch if kind == "http" else send)
        except BaseException as exc:
            span_scope.close(exc)
            raise
        error: BaseException | None = None
        if status:
            if span is not None and span.is_recording():
                span.set_attribute("http.response.status_code", status[0])
            if status[0] >= 500:
                error = HTTPServerError(status[0])
        span_scope.close(error)
