"""The control plane's HTTP API, as the calls Chronicle makes to it.

``ControlPlaneClient`` is the seam: delivery and replay talk to a client, and ``HttpControlPlane``
is the real one (``chronicle.testing.InMemoryControlPlane`` is the test double). Every request
is marked so that no instrumentation records it: the OpenTelemetry suppress key is set around it
and the httpx ``extensions`` carry ``"chronicle.internal": True`` for Chronicle's own httpx
instrumenter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import httpx
from agentplane_primitives.models import Envelope, Span, Trace
from opentelemetry import context as otel_context

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

    def post_envelopes(self, body: bytes, count: int) -> None:
        """``POST /v1/envelopes:batch`` with ``{"envelopes": [...]}`` of ``count`` items."""
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


class HttpControlPlane:
    """``ControlPlaneClient`` over httpx. Thread-safe; one connection pool per instance."""

    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        headers = {"user-agent": f"chronicle/{__version__}"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        allow_404: bool = False,
    ) -> Any:
        headers = {"content-type": "application/json"} if body is not None else None
        try:
            with untraced():
                response = self._http.request(
                    method, path, content=body, headers=headers, extensions=_INTERNAL
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

    def health(self) -> dict[str, Any]:
        found = self._send("GET", "/health")
        return found if isinstance(found, dict) else {}

    def register_trace(self, trace: Trace) -> None:
        self._send("POST", "/v1/traces", body=body_of(trace))

    def put_span(self, span: Span) -> None:
        self._send("PUT", f"/v1/traces/{span.trace_id}/spans/{span.span_id}", body=body_of(span))

    def post_envelopes(self, body: bytes, count: int) -> None:
        self._send("POST", "/v1/envelopes:batch", body=body)

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        found = self._send("GET", f"/v1/traces/{trace_id}", allow_404=True)
        return found if isinstance(found, dict) else None

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        found = self._send("GET", f"/v1/traces/{trace_id}/spans/{span_id}/envelopes")
        items = found.get("envelopes") if isinstance(found, dict) else None
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    def close(self) -> None:
        self._http.close()


def body_of(entity: Trace | Span | Envelope) -> bytes:
    """The JSON body of an entity, as the control plane stores it (``None`` fields left out)."""
    return entity.model_dump_json(exclude_none=True).encode()


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
