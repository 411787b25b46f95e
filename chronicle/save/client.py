"""The control plane's HTTP API, as the calls Chronicle makes to it.

``ControlPlaneClient`` is the seam: delivery and replay talk to a client, and ``HttpControlPlane``
is the real one (``chronicle.testing.InMemoryControlPlane`` is the test double). Every request
is marked so that no instrumentation records it (the OpenTelemetry suppress key is set around it
and the httpx ``extensions`` carry ``"chronicle.internal": True`` for Chronicle's own httpx
instrumenter) and no log line shows it (``chronicle.save.quiet``).

Every request has a wall-clock deadline: httpx's ``timeout`` bounds each read, so a server that
drips a byte at a time could hold a request for ever. The client's network streams clamp each
connect, read and write to what is left of the request's deadline (``timeout`` seconds from its
start, or sooner inside ``deadline(...)``), and an answer is read at most ``max_answer_bytes``
(decoded) before it is refused, never buffered whole.
"""

from __future__ import annotations

import contextvars
import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import httpcore
import httpx
from agentplane_primitives.models import Envelope, Span, Trace
from opentelemetry import context as otel_context
from pydantic import ValidationError
from typing_extensions import override

from chronicle._version import __version__
from chronicle.errors import ControlPlaneError, ReplayError
from chronicle.otel.context import suppressed
from chronicle.redaction import redact_secrets, safe_url
from chronicle.save.forks import after_fork_in_child
from chronicle.save.quiet import own_request

INTERNAL_EXTENSION = "chronicle.internal"
"""httpx request extension that tells instrumenters a request is Chronicle's own traffic."""

_INTERNAL = {INTERNAL_EXTENSION: True}

MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""The default bound of one answer, decoded; a longer one is refused (``ControlPlaneError``)."""

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "chronicle_request_deadline", default=None
)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Requests made inside end within ``seconds`` from now (or their own ``timeout``, if
    sooner): a synchronous trace registration is bounded by ``registration_timeout`` this way.
    A client that cannot bound its requests (a test double) ignores it."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def _remaining(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` clamped to what is left of the current request's deadline; ``expired`` is
    raised when nothing is left."""
    end = _deadline.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every read and write ends by the request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    @override
    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _remaining(timeout, httpcore.ReadTimeout))

    @override
    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _remaining(timeout, httpcore.WriteTimeout))

    @override
    def close(self) -> None:
        self._inner.close()

    @override
    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        bound = _remaining(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bound))

    @override
    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend, with streams bounded by the request's deadline."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    @override
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bound = _remaining(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, bound, local_address, socket_options)
        )

    @override
    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        bound = _remaining(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, bound, socket_options))

    @override
    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bounded_transport() -> httpx.BaseTransport:
    """httpx's own transport, its network streams bounded by each request's deadline.

    httpx has no public hook for the network backend: the pool's is wrapped where httpx 0.2x and
    httpcore 1.x keep it. Should that move, requests are still bounded per read (``timeout``).
    """
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport


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

    ``timeout`` bounds each request in all, from its start to the last byte of the answer (a
    wall-clock deadline, not httpx's per-read timeout); an answer longer than
    ``max_answer_bytes`` once decoded is refused as it arrives, and so is JSON nested deeper than
    Python's parser can read: both raise ``ControlPlaneError`` (``status_code=None``).

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
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._max_answer = max_answer_bytes
        self._shown = safe_url(self.url)
        headers = {"user-agent": f"chronicle/{__version__}"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        opener = functools.partial(
            httpx.Client,
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            follow_redirects=False,
        )

        # A new transport (and pool) each time: a forked child must not share the parent's.
        def open_client() -> httpx.Client:
            return opener(transport=transport if transport is not None else _bounded_transport())

        self._open = open_client
        self._http = self._open()
        # A forked child must not share the parent's keep-alive connections (each would read
        # the other's responses), nor a pool lock another thread held at the fork.
        after_fork_in_child(self._reopen_in_child)

    reached = False
    """Whether the control plane has answered this client at all (any status)."""

    @property
    def shown_url(self) -> str:
        """The URL as log lines show it: password and credential query parameters masked."""
        return self._shown

    def _reopen_in_child(self) -> None:
        # The inherited client is dropped, not closed: closing could end the parent's connections.
        # (A transport given to the constructor is kept; the default one is made anew.)
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
        """The decoded JSON answer, once ``expect`` accepts it; else ``ControlPlaneError``.

        The whole request, answer included, ends within ``timeout`` seconds (or the enclosing
        ``deadline``); the answer is read at most ``max_answer_bytes``.
        """
        headers = {"content-type": "application/json"} if body is not None else None
        bound = self._timeout
        outer = _deadline.get()
        if outer is not None:
            bound = min(bound, max(outer - time.monotonic(), 0.0))
        try:
            with untraced(), deadline(bound):
                request = self._http.build_request(
                    method, path, content=body, params=params, headers=headers, extensions=_INTERNAL
                )
                response = self._http.send(request, stream=True)
                try:
                    content = self._read(response, method, path)
                finally:
                    response.close()
        except httpx.ConnectError as exc:
            raise ControlPlaneError(
                f"nothing answers at {self._shown} ({method} {path}: {self._safe(str(exc))}): "
                f"{_start_hint(self.url)}",
                refused=True,
            ) from None
        except httpx.TimeoutException as exc:
            raise ControlPlaneError(
                f"control plane at {self._shown} did not answer {method} {path} within "
                f"{bound:g} s ({type(exc).__name__}); check that it is running and "
                "control_plane_url, or raise timeout"
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
            raise ControlPlaneError(
                self._describe(method, path, response, content), status_code=status
            )
        if 300 <= status < 400:
            location = response.headers.get("location", "nowhere")
            raise ControlPlaneError(
                f"control plane at {self._shown} answered {status} to {method} {path}, "
                f"redirecting to {safe_url(location)}; Chronicle does not follow redirects: set "
                "control_plane_url to the address the control plane is served at"
            )
        try:
            found = json.loads(content)
        except RecursionError:
            raise ControlPlaneError(
                f"control plane at {self._shown} answered {method} {path} with JSON nested "
                "deeper than Python can read, which no recording holds; the stored data is "
                "damaged, or control_plane_url points at something else"
            ) from None
        except MemoryError:
            raise ControlPlaneError(
                f"control plane at {self._shown} answered {method} {path} with "
                f"{len(content)} bytes of JSON this process has not the memory to read; read a "
                "smaller piece (one span), or lower max_answer_bytes of HttpControlPlane"
            ) from None
        except ValueError:
            found = _NOT_JSON
        if found is _NOT_JSON or not expect(found):
            raise ControlPlaneError(
                f"control plane at {self._shown} answered {status} to {method} {path} with "
                f"{_what_came_back(response, content, found is _NOT_JSON)}, which is not the "
                "control plane's answer, so nothing is counted as stored; check that "
                "control_plane_url points at the AgentPlane control plane itself (not a proxy or "
                "a login page)"
            )
        return found

    def _read(self, response: httpx.Response, method: str, path: str) -> bytes:
        """The answer's body, decoded, refused past ``max_answer_bytes`` as it arrives."""
        limit = self._max_answer
        declared = response.headers.get("content-length", "")
        if (
            declared.isdigit()
            and int(declared) > limit
            and "content-encoding" not in response.headers
        ):
            raise self._too_long(method, path, f"declares {int(declared)} bytes")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise self._too_long(method, path, f"runs past {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_long(self, method: str, path: str, what: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"control plane at {self._shown} answered {method} {path} with a body that {what} "
            f"(decoded), over the {self._max_answer} bytes Chronicle reads; it is refused unread. "
            "Read a smaller piece (one span), or raise max_answer_bytes of HttpControlPlane"
        )

    def _safe(self, text: str) -> str:
        return redact_secrets(text.replace(self.url, self._shown))

    def _describe(self, method: str, path: str, response: httpx.Response, content: bytes) -> str:
        """The server's own message, and what to do about the usual statuses."""
        text = content.decode(response.encoding or "utf-8", errors="replace")
        try:
            detail = json.loads(content).get("detail", text)
        except (ValueError, AttributeError, RecursionError, MemoryError):
            detail = text
        hint = {
            401: "set api_key (CHRONICLE_API_KEY) to a key the control plane accepts",
            403: "the api_key lacks a scope; ingest is needed to record, read to replay",
            413: "the body is over the server's max_body_bytes; lower max_payload_bytes",
        }.get(response.status_code, "")
        said = (
            f"control plane at {self._shown} answered {response.status_code} to {method} "
            f"{path}: {self._safe(str(detail)[:500])}"
        )
        return f"{said}; {hint}" if hint else said

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
        path = f"/v1/traces/{trace_id}/spans/{span_id}/envelopes"
        found = self._send("GET", path, _holds("envelopes"))
        return self._envelopes_in(found, path)

    def trace_envelopes(self, trace_id: str) -> list[dict[str, Any]]:
        """``GET /v1/traces/{t}/envelopes``: every envelope of a trace in start order.

        ``[]`` when the trace is unknown.
        """
        path = f"/v1/traces/{trace_id}/envelopes"
        found = self._send("GET", path, _holds("envelopes"), allow_404=True)
        return self._envelopes_in(found, path)

    def _envelopes_in(self, found: Any, path: str) -> list[dict[str, Any]]:
        """The envelopes of an answer; an item that is not an object is a damaged recording,
        reported (``ControlPlaneError`` naming it), never dropped silently."""
        items = found.get("envelopes") if isinstance(found, dict) else None
        if not isinstance(items, list):
            return []
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise ControlPlaneError(
                    f"control plane at {self._shown} answered GET {path} with a damaged "
                    f"recording: item {position} of its envelopes is {json_kind(item)}, not an "
                    "envelope object; nothing of it is used. Record the request again, or check "
                    "the control plane's storage"
                )
        return items

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


def json_kind(item: object) -> str:
    """A JSON value's kind as a message names it: ``a list``, ``null``, ``the number 5``."""
    if item is None:
        return "null"
    if isinstance(item, (bool, int, float)):
        return f"the value {json.dumps(item)}"
    if isinstance(item, str):
        return f"the string {json.dumps(item[:40])}"
    return "a list" if isinstance(item, list) else f"a {type(item).__name__}"


def invalid_envelope(exc: ValidationError, where: str, fix: str) -> ReplayError:
    """The one-line error for an envelope that does not validate: ``replay: WHERE (the first
    problem and where it is); FIX``."""
    first = exc.errors()[0]
    return ReplayError(f"replay: {where} ({first['msg']} at {list(first['loc'])}); {fix}")


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


def _what_came_back(response: httpx.Response, content: bytes, not_json: bool) -> str:
    media = response.headers.get("content-type", "no content type").split(";")[0].strip()
    if not content:
        return "an empty body"
    text = content[:320].decode(response.encoding or "utf-8", errors="replace")
    sample = redact_secrets(text[:80].replace("\n", " "))
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
