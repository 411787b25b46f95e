"""The control plane's HTTP API, as the calls Chronicle makes to it.

``ControlPlaneClient`` is the seam: delivery and replay talk to a client, and ``HttpControlPlane``
is the real one (``chronicle.testing.InMemoryControlPlane`` is the test double). Every request
is marked so that no instrumentation records it: the OpenTelemetry suppress key is set around it
and the httpx ``extensions`` carry ``"chronicle.internal": True`` for Chronicle's own httpx
instrumenter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import httpx
from agentplane_primitives.models import Envelope, Span, Trace
from opentelemetry import context as otel_context
from typing_extensions import override

from chronicle._version import __version__
from chronicle.errors import ControlPlaneError
from chronicle.otel.context import suppressed

INTERNAL_EXTENSION = "chronicle.internal"
"""httpx request extension that tells instrumenters a request is Chronicle's own traffic."""

_INTERNAL = {INTERNAL_EXTENSION: True}


class ControlPlaneClient(Protocol):
    """The control-plane calls Chronicle makes. Each raises ``ControlPlaneError`` on failure.

    ``ControlPlaneError.status_code`` is the HTTP status, or ``None`` when there was no answer
    (refused, reset, timed out): delivery retries those and 408/429/5xx, and splits a batch the
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
    """No OpenTelemetry instrumentation records what runs inside (Chronicle's own requests)."""
    token = otel_context.attach(suppressed())
    try:
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
        headers = {"user-agent": f"chronicle/{__version__}"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: _Query | None = None,
        allow_404: bool = False,
    ) -> Any:
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
        except httpx.HTTPError as exc:
            raise ControlPlaneError(
                f"control plane at {self.url} did not answer {method} {path}: "
                f"{type(exc).__name__}: {exc}; check that it is running and control_plane_url"
            ) from None
        if allow_404 and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ControlPlaneError(
                _describe(method, path, response), status_code=response.status_code
            )
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    @override
    def health(self) -> dict[str, Any]:
        found = self._send("GET", "/health")
        return found if isinstance(found, dict) else {}

    @override
    def register_trace(self, trace: Trace) -> None:
        self._send("POST", "/v1/traces", body=body_of(trace))

    @override
    def put_span(self, span: Span) -> None:
        self._send("PUT", f"/v1/traces/{span.trace_id}/spans/{span.span_id}", body=body_of(span))

    @override
    def post_envelopes(self, body: bytes) -> None:
        self._send("POST", "/v1/envelopes:batch", body=body)

    @override
    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        found = self._send("GET", f"/v1/traces/{trace_id}", allow_404=True)
        return found if isinstance(found, dict) else None

    @override
    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        found = self._send("GET", f"/v1/traces/{trace_id}/spans/{span_id}/envelopes")
        return _items(found, "envelopes")

    def trace_envelopes(self, trace_id: str) -> list[dict[str, Any]]:
        """``GET /v1/traces/{t}/envelopes``: every envelope of a trace in start order.

        ``[]`` when the trace is unknown.
        """
        found = self._send("GET", f"/v1/traces/{trace_id}/envelopes", allow_404=True)
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
        return _items(self._send("GET", "/v1/traces", params=params), "traces")

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


def _describe(method: str, path: str, response: httpx.Response) -> str:
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
    text = f"control plane answered {response.status_code} to {method} {path}: {str(detail)[:500]}"
    return f"{text}; {hint}" if hint else text
