"""The control plane's HTTP API, as the calls Chronicle makes to it.

``ControlPlaneClient`` is the seam: delivery and replay talk to a client, and ``HttpControlPlane``
is the real one (``chronicle.testing.InMemoryControlPlane`` is the test double). Every request
is marked so that no instrumentation records it (the OpenTelemetry suppress key is set around it
and the httpx ``extensions`` carry ``"chronicle.internal": True`` for Chronicle's own httpx
instrumenter) and no log line shows it (``chronicle.save.quiet``).
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import httpx
from agentplane_primitives.models import Envelope, Span, Trace
from opentelemetry import context as otel_context
from typing_extensions import override

from chronicle._version import __version__
from chronicle.errors import ControlPlaneError
from chronicle.otel.context import suppressed
from chronicle.redaction import redact_secrets, safe_url
from chronicle.save.quiet import own_request

INTERNAL_EXTENSION = "chronicle.internal"
"""httpx request extension that tells instrumenters a request is Chronicle's own traffic."""

_INTERNAL = {INTERNAL_EXTENSION: True}


class ControlPlaneClient(Protocol):
    """The control-plane calls Chronicle makes. Each raises ``ControlPlaneError`` on failure.

    ``ControlPlaneError.status_code`` is the HTTP status of an error answer (4xx/5xx), or ``None``
    when there was no usable answer (refused, reset, timed out, redirected, or an answer that is
    not the control plane's): delivery retries those and 408/429/5xx, and splits a batch the
    server rejected as invalid.
    """

    def health(self) -> dict[str, Any]:
        """``GET /health``: reports ``max_batch`` and ``max_body_bytes``."""
        ...

    def register_trace(self, trace: Trace) -> None:
        """``POST /v1/traces``: idempotent; the first labels written win."""
        ...

    def put_span(self, span: Span) -> None:
        """``PUT /v1/traces/{t}/spans/{s}``: open, then close, a span."""
        ...

    def post_envelopes(self, body: bytes) -> None:
        """``POST /v1/envelopes:batch`` with a body of ``{"envelopes": [...]}``."""
        ...

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        """``GET /v1/traces/{t}``, or ``None`` if the trace is unknown."""
        ...

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        """``GET /v1/traces/{t}/spans/{s}/envelopes``: the span's envelopes in call order."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@contextmanager
def untraced() -> Iterator[None]:
    """Chronicle's own requests: no OpenTelemetry instrumentation records what runs inside, and
    the HTTP library logs nothing about it (``chronicle.save.quiet``)."""
    token = otel_context.attach(suppressed())
    try:
        with own_request():
            yield
    finally:
        otel_context.detach(token)


_Query = list[tuple[str, str | int | float | bool | None]]
"""Query parameters in order; a key may repeat (``label=...``)."""

_OWN_PARAMETERS = ("session_id", "message_id", "user_id")
"""Labels that ``GET /v1/traces`` takes as query parameters of their own."""


class HttpControlPlane(ControlPlaneClient):
    """``ControlPlaneClient`` over httpx, and the reads tests and tools make. Thread-safe.

    One connection pool per instance. ``api_key`` is sent as ``Authorization: Bearer``;
    ``transport`` is handed to ``httpx.Client`` (``None``: the default network transport; an
    ``httpx.MockTransport`` in a test that needs a server httpx cannot reach).

    Only the control plane's documented success answer counts: a 2xx *and* a JSON body of the
    expected shape (``{"status": "stored", ...}`` for a batch, the trace for a registration,
    ...). A redirect is never followed (it is reported, with where it points); a 2xx that is not
    the control plane's answer (a proxy's or a login page's HTML, invalid JSON) is an error too.
    Both raise ``ControlPlaneError`` with ``status_code=None``, so delivery keeps the records and
    retries, as for a control plane that is down. Every message names the URL with its password
    and credential query parameters masked.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None,
        timeout: float,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._shown = safe_url(self.url)
        headers = {"user-agent": f"chronicle/{__version__}"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._open = functools.partial(
            httpx.Client,
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )
        self._http = self._open()
        if hasattr(os, "register_at_fork"):
            # A forked child must not share the parent's keep-alive connections (each would read
            # the other's responses), nor a pool lock another thread held at the fork.
            weak = weakref.WeakMethod(self._reopen_in_child)
            os.register_at_fork(after_in_child=lambda: _call(weak))

    reached = False
    """Whether the control plane has answered this client at all (any status)."""

    @property
    def shown_url(self) -> str:
        """The URL as log lines show it: password and credential query parameters masked."""
        return self._shown

    def _reopen_in_child(self) -> None:
        # The inherited client is dropped, not closed: closing could end the parent's connections.
        self._http = self._open()

    def _send(
        self,
        method: str,
        path: str,
        expect: Callable[[Any], bool],
        *,
        body: bytes | None = None,
        params: _Query | None = None,
        allow_404: bool = False,
    ) -> Any:
        """The decoded JSON answer, once ``expect`` accepts it; else ``ControlPlaneError``."""
        headers = {"content-type": "application/json"} if body is not None else None
        try:
            with untraced():
                response = self._http.request(
                    method,
                    path,
                    content=body,
                    params=params,
                    headers=headers,
                    extensions=_INTERNAL,
                )
        except httpx.ConnectError as exc:
            raise ControlPlaneError(
                f"nothing answers at {self._shown} ({method} {path}: {self._safe(str(exc))}): "
                f"{_start_hint(self.url)}",
                refused=True,
            ) from None
        except httpx.HTTPError as exc:
            raise ControlPlaneError(
                f"control plane at {self._shown} did not answer {method} {path}: "
                f"{type(exc).__name__}: {self._safe(str(exc))}; check that it is running and "
                "control_plane_url"
            ) from None
        self.reached = True
        status = response.status_code
        if allow_404 and status == 404:
            return None
        if status >= 400:
            raise ControlPlaneError(self._describe(method, path, response), status_code=status)
        if 300 <= status < 400:
            location = response.headers.get("location", "nowhere")
            raise ControlPlaneError(
                f"control plane at {self._shown} answered {status} to {method} {path}, "
                f"redirecting to {safe_url(location)}; Chronicle does not follow redirects: set "
                "control_plane_url to the address the control plane is served at"
            )
        try:
            found = response.json()
        except ValueError:
            found = _NOT_JSON
        if found is _NOT_JSON or not expect(found):
            raise ControlPlaneError(
                f"control plane at {self._shown} answered {status} to {method} {path} with "
                f"{_what_came_back(response, found is _NOT_JSON)}, which is not the control "
                "plane's answer, so nothing is counted as stored; check that control_plane_url "
                "points at the AgentPlane control plane itself (not a proxy or a login page)"
            )
        return found

    def _safe(self, text: str) -> str:
        return redact_secrets(text.replace(self.url, self._shown))

    def _describe(self, method: str, path: str, response: httpx.Response) -> str:
        """The server's own message, and what to do about the usual statuses."""
        try:
            detail = response.json().get("detail", response.text)
        except (ValueError, AttributeError):
            detail = response.text
        hint = {
            401: "set api_key (CHRONICLE_API_KEY) to a key the control plane accepts",
            403: "the api_key lacks a scope; ingest is needed to record, read to replay",
            413: "the body is over the server's max_body_bytes; lower max_payload_bytes",
        }.get(response.status_code, "")
        text = (
            f"control plane at {self._shown} answered {response.status_code} to {method} "
            f"{path}: {self._safe(str(detail)[:500])}"
        )
        return f"{text}; {hint}" if hint else text

    @override
    def health(self) -> dict[str, Any]:
        found = self._send("GET", "/health", lambda f: isinstance(f, dict) and "status" in f)
        return found if isinstance(found, dict) else {}

    @override
    def register_trace(self, trace: Trace) -> None:
        self._send(
            "POST",
            "/v1/traces",
            lambda f: isinstance(f, dict) and f.get("trace_id") == trace.trace_id,
            body=body_of(trace),
        )

    @override
    def put_span(self, span: Span) -> None:
        self._send(
            "PUT",
            f"/v1/traces/{span.trace_id}/spans/{span.span_id}",
            lambda f: isinstance(f, dict) and f.get("span_id") == span.span_id,
            body=body_of(span),
        )

    @override
    def post_envelopes(self, body: bytes) -> None:
        self._send("POST", "/v1/envelopes:batch", _batch_stored, body=body)

    @override
    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        found = self._send(
            "GET",
            f"/v1/traces/{trace_id}",
            lambda f: isinstance(f, dict) and f.get("trace_id") == trace_id,
            allow_404=True,
        )
        return found if isinstance(found, dict) else None

    @override
    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        found = self._send(
            "GET", f"/v1/traces/{trace_id}/spans/{span_id}/envelopes", _holds("envelopes")
        )
        return _items(found, "envelopes")

    def trace_envelopes(self, trace_id: str) -> list[dict[str, Any]]:
        """``GET /v1/traces/{t}/envelopes``: every envelope of a trace in start order.

        ``[]`` when the trace is unknown.
        """
        found = self._send(
            "GET", f"/v1/traces/{trace_id}/envelopes", _holds("envelopes"), allow_404=True
        )
        return _items(found, "envelopes")

    def find_traces(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        q: str | None = None,
        limit: int = 500,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """``GET /v1/traces``: summaries of the traces whose labels all match, most recent first.

        ``session_id``, ``message_id`` and ``user_id`` go as query parameters of their own, any
        other label as a repeated ``label=key:value``. ``q`` is the server's free-text match (id,
        name or a label value); the server takes a ``limit`` of at most 500.
        """
        params: _Query = [("limit", limit)]
        if offset:
            params.append(("offset", offset))
        if q is not None:
            params.append(("q", q))
        for key, value in (labels or {}).items():
            if key in _OWN_PARAMETERS:
                params.append((key, value))
            else:
                params.append(("label", f"{key}:{value}"))
        return _items(self._send("GET", "/v1/traces", _holds("traces"), params=params), "traces")

    @override
    def close(self) -> None:
        self._http.close()


def body_of(entity: Trace | Span | Envelope) -> bytes:
    """The JSON body of an entity, as the control plane stores it (``None`` fields left out)."""
    return entity.model_dump_json(exclude_none=True).encode()


def _items(found: Any, key: str) -> list[dict[str, Any]]:
    """The objects of the list ``found[key]``; ``[]`` when there is no such list."""
    items = found.get(key) if isinstance(found, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


_NOT_JSON = object()


def _call(weak: weakref.WeakMethod[Callable[[], None]]) -> None:
    method = weak()
    if method is not None:
        method()


def _holds(key: str) -> Callable[[Any], bool]:
    """An answer check: a JSON object with a list under ``key``."""
    return lambda found: isinstance(found, dict) and isinstance(found.get(key), list)


def _batch_stored(found: Any) -> bool:
    """Whether a batch answer is the control plane's: ``{"status": "stored", "accepted": n}``."""
    return (
        isinstance(found, dict)
        and found.get("status") == "stored"
        and isinstance(found.get("accepted"), int)
    )


def _what_came_back(response: httpx.Response, not_json: bool) -> str:
    media = response.headers.get("content-type", "no content type").split(";")[0].strip()
    if not response.content:
        return "an empty body"
    sample = redact_secrets(response.text[:80].replace("\n", " "))
    shape = "invalid JSON" if not_json else "JSON of another shape"
    return f"{shape} ({media}: {sample!r})"


def _start_hint(url: str) -> str:
    """What to do when nothing answers at ``url``: on this machine, the command that starts a
    control plane there."""
    parsed = httpx.URL(url)
    if parsed.host in ("127.0.0.1", "localhost", "::1"):
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return (
            f"start the control plane (`chronicle serve --port {port}`), or set "
            "control_plane_url to where it runs"
        )
    return f"check that the control plane runs at {parsed.host}, or set control_plane_url"
