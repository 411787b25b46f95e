"""``instrument_httpx()``: outbound ``httpx`` calls to allowed hosts become ``tool`` envelopes.

``instrument_httpx()`` patches ``httpx.Client.send`` and ``httpx.AsyncClient.send`` (so clients
created before it, and every transport, including mocks and OpenTelemetry-instrumented ones,
are covered); ``uninstrument_httpx()`` puts them back. Both are idempotent and thread-safe.

For a request to a host in ``inject_hosts`` (``host``, ``host:port`` or ``*.suffix``):

- The exchange is a boundary named ``"http <METHOD> <host>"`` (no port, so a recording made
  against one port replays against another), kind ``tool``. Its input is ``method``, ``url``
  (without user name and password), ``headers`` (without credentials: ``is_secret_header``),
  ``body`` and ``body_format`` (``json``, ``text``, ``base64``, ``empty`` or ``stream`` for a
  streamed upload, whose bytes are not recorded). Its output is the final response's
  ``status_code``, ``headers`` (without ``set-cookie`` and other secrets), ``body`` and
  ``body_format``; the response body is read in full first, so ``client.stream(...)`` gets a
  buffered response (``iter_bytes``/``aiter_bytes`` work, ``iter_raw`` does not).
- The request carries ``traceparent`` naming *that* envelope and ``tracestate``
  ``chronicle=<envelope_id>`` (unless the ``inject`` setting is off), so the downstream
  service's Span is parented on it. The trace headers are not part of the recorded input.
- In a replay the call is stubbed: no request is sent, and a real ``httpx.Response`` rebuilt
  from the recording (status, headers, body; ``.request`` set, ``raise_for_status()`` works)
  is returned. A cut-point (``ReplayPlan().run("http GET api.internal")``) sends it live,
  without trace headers. A call the plan lets through (``ReplayPlan().through("billing")``)
  is sent live carrying the signed replay (``chronicle-replay``), and the service's report in
  the response joins the replay (``replay/remote.py``).

Every other request passes through untouched: no header and no envelope. So does any request
whose ``extensions`` hold ``"chronicle.internal": True`` (Chronicle's control-plane client and
TokenOps set it), any request made while OpenTelemetry instrumentation is suppressed, and any
request made inside an ``llm`` boundary (the model call itself, already recorded by it).
Redirects followed by httpx are one exchange (the final response is recorded); the trace headers
go only to the hops whose host is in ``inject_hosts`` (httpx copies headers onto each hop, so
Chronicle removes its own from a hop to any other host, ``response.next_request`` included).
During a replay, a call the recording holds is served from it even when the replaying process's
``inject_hosts`` does not list its host. Model SDKs that use the separate ``httpx2`` package
(recent ``openai``, ``anthropic``) are not patched, and a provider's host is never in
``inject_hosts`` unless you put it there: model providers get no trace ids.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import httpx
from pydantic import JsonValue

from chronicle import runtime
from chronicle.errors import ReplayError
from chronicle.integrations.propagation import host_allowed, in_llm_boundary, outbound_headers
from chronicle.otel.context import current_replay_in, is_suppressed
from chronicle.recording.boundary import BoundarySpec
from chronicle.recording.call import Call, Replayer, begin_call, run_async, run_sync
from chronicle.redaction import is_secret_header
from chronicle.replay.remote import LetThrough, let_through
from chronicle.save.client import INTERNAL_EXTENSION
from chronicle.traceparent import TRACEPARENT, TRACESTATE

logger = logging.getLogger("chronicle")

_REBUILT_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})
_lock = threading.Lock()
_originals: dict[str, Any] = {}
_specs: dict[str, BoundarySpec] = {}
_MAX_SPECS = 1024
_INJECTED = "chronicle.injected"
"""Request extension: the trace headers Chronicle wrote on it (carried onto redirects)."""
_SINGLE = "_send_single_request"


# ---- what is recorded ------------------------------------------------------------------------


def _http_exchange(
    method: str, url: str, headers: dict[str, str], body: JsonValue, body_format: str
) -> httpx.Response:
    """The signature the envelope's input is named after (the real send is driven directly)."""
    raise AssertionError("never called")  # pragma: no cover


def _charset(content_type: str) -> str | None:
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            return value.strip().strip('"')
    return None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _body(content: bytes, content_type: str) -> tuple[JsonValue, str]:
    if not content:
        return None, "empty"
    charset = _charset(content_type) or "utf-8"
    if _is_json(content_type):
        try:
            value: JsonValue = json.loads(content.decode(charset))
            return value, "json"
        except (ValueError, LookupError):
            pass
    try:
        return content.decode(charset), "text"
    except (UnicodeDecodeError, LookupError):
        return base64.b64encode(content).decode("ascii"), "base64"


def _safe_headers(headers: httpx.Headers) -> dict[str, str]:
    return {
        key: value
        for key, value in headers.items()
        if not is_secret_header(key) and key not in (TRACEPARENT, TRACESTATE)
    }


def _request_arguments(request: httpx.Request) -> tuple[object, ...]:
    url = request.url
    if url.userinfo:
        url = url.copy_with(username=None, password=None)
    try:
        body, body_format = _body(request.content, request.headers.get("content-type", ""))
    except httpx.RequestNotRead:  # a streamed upload: its bytes are not held
        body, body_format = None, "stream"
    return (request.method, str(url), _safe_headers(request.headers), body, body_format)


def _response_record(result: object) -> object:
    if not isinstance(result, httpx.Response):
        return result
    body, body_format = _body(result.content, result.headers.get("content-type", ""))
    return {
        "status_code": result.status_code,
        "headers": _safe_headers(result.headers),
        "body": body,
        "body_format": body_format,
    }


def _restore(raw: JsonValue) -> httpx.Response:
    """Rebuild the recorded response (``.request`` is set by the caller)."""
    status = raw.get("status_code") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not isinstance(status, int):
        raise ReplayError(
            "replay: this HTTP call was recorded without its response (capture_output was off); "
            "run it live with ReplayPlan().run(name) or record it again"
        )
    recorded = raw.get("headers")
    headers = [
        (str(key), str(value))
        for key, value in (recorded.items() if isinstance(recorded, dict) else ())
        if str(key).lower() not in _REBUILT_HEADERS
    ]
    body, body_format = raw.get("body"), raw.get("body_format")
    content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
    if body_format == "empty" or (body is None and body_format != "json"):
        content = b""
    elif body_format == "base64" and isinstance(body, str):
        content = base64.b64decode(body)
    elif body_format == "text" and isinstance(body, str):
        content = body.encode(_charset(content_type) or "utf-8")
    else:
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    response = httpx.Response(status, headers=headers, content=content)
    response.elapsed = datetime.timedelta(0)
    return response


def _name(request: httpx.Request) -> str:
    return f"http {request.method.upper()} {request.url.host or 'unknown'}"


def _spec_for(request: httpx.Request) -> BoundarySpec:
    name = _name(request)
    spec = _specs.get(name)
    if spec is None:
        spec = BoundarySpec(
            _http_exchange,
            name,
            "tool",
            extract_result=_response_record,
            restore=_restore,
        )
        with _lock:
            if len(_specs) >= _MAX_SPECS:
                _specs.clear()
            spec = _specs.setdefault(name, spec)
    return spec


# ---- deciding and driving one request --------------------------------------------------------


def _recorded(request: httpx.Request) -> BoundarySpec | None:
    """The boundary this request crosses, or ``None`` to pass it straight through."""
    try:
        if request.extensions.get(INTERNAL_EXTENSION):
            return None
        if is_suppressed():
            return None
        if in_llm_boundary():
            return None  # the model call itself: recorded by its llm boundary, no trace ids
        if host_allowed(request.url, runtime.current().settings.inject_hosts):
            return _spec_for(request)
        # During a replay a recorded call is served from the recording whatever the settings
        # of the replaying process say: sending it live would call the real service from a test.
        replay = current_replay_in()
        if replay is not None and cast(Replayer, replay).has_recording(_name(request)):
            return _spec_for(request)
        return None
    except Exception:
        logger.exception("could not inspect an httpx request; it is sent unrecorded")
        return None


def _begin(spec: BoundarySpec, request: httpx.Request) -> Call | None:
    """Open the boundary (may raise ``AbortCall`` or a replay error) and inject the headers."""
    call = begin_call(spec, _request_arguments(request), {})
    if call is not None and call.stubbed:
        return call
    try:
        if runtime.current().settings.inject:
            injected = outbound_headers(request.headers.get(TRACESTATE))
            for key, value in injected.items():
                request.headers[key] = value
            if injected:
                # httpx copies headers and extensions onto every redirect; the mark lets the
                # hop to an unlisted host drop what Chronicle wrote (see _strip_on_unlisted_hop).
                request.extensions = {**request.extensions, _INJECTED: injected}
    except Exception:
        logger.exception("could not write the trace headers of %s", spec.name)
    return call


def _let_through(request: httpx.Request) -> LetThrough | None:
    """During a replay, a live call the plan lets through to its service (``through``) carries
    the signed replay (``replay/remote.py``); ``None`` for any other call. Raises
    ``ReplayError`` when it cannot (host not in ``inject_hosts``, no ``replay_token``)."""
    through = let_through(request.url, host_allowed)
    if through is not None:
        headers = through.headers()
        request.headers.update(headers)
        injected = request.extensions.get(_INJECTED) or {}
        request.extensions = {**request.extensions, _INJECTED: {**injected, **headers}}
    return through


def _strip_on_unlisted_hop(request: httpx.Request) -> None:
    """Remove the trace headers Chronicle wrote when this hop goes to a host not listed."""
    try:
        injected = request.extensions.get(_INJECTED)
        if not injected or host_allowed(request.url, runtime.current().settings.inject_hosts):
            return
        for key, value in injected.items():
            if request.headers.get(key) == value:
                del request.headers[key]
    except Exception:
        logger.exception("could not check the trace headers of a redirected request")


def _sync_single(original: Callable[..., httpx.Response]) -> Callable[..., httpx.Response]:
    @functools.wraps(original)
    def send_single(self: httpx.Client, request: httpx.Request) -> httpx.Response:
        _strip_on_unlisted_hop(request)
        return original(self, request)

    return send_single


def _async_single(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def send_single(self: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
        _strip_on_unlisted_hop(request)
        response: httpx.Response = await original(self, request)
        return response

    return send_single


def _stubbed(call: Call, request: httpx.Request) -> httpx.Response:
    response = call.stub_result()
    if isinstance(response, httpx.Response):
        response.request = request
        return response
    raise ReplayError(f"replay: the recorded HTTP call is not a response: {response!r}")


def _sync_send(original: Callable[..., httpx.Response]) -> Callable[..., httpx.Response]:
    @functools.wraps(original)
    def send(self: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        spec = _recorded(request)
        if spec is None:
            return original(self, request, **kwargs)
        call = _begin(spec, request)
        if call is None:
            return original(self, request, **kwargs)
        if call.stubbed:
            return _stubbed(call, request)

        def exchange(*_recorded: object) -> httpx.Response:  # the real request, not the record
            through = _let_through(request)
            response = original(self, request, **kwargs)
            try:
                response.read()
            except BaseException:
                response.close()
                raise
            if through is not None:
                through.absorb(response.headers)  # the service's replay joins this one
            return response

        result: httpx.Response = run_sync(call, exchange)
        return result

    send.__chronicle_original__ = original  # type: ignore[attr-defined]
    return send


def _async_send(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def send(
        self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any
    ) -> httpx.Response:
        spec = _recorded(request)
        if spec is None:
            result: httpx.Response = await original(self, request, **kwargs)
            return result
        call = _begin(spec, request)
        if call is None:
            result = await original(self, request, **kwargs)
            return result
        if call.stubbed:
            return _stubbed(call, request)

        async def exchange(*_recorded: object) -> httpx.Response:
            through = _let_through(request)
            response: httpx.Response = await original(self, request, **kwargs)
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
            if through is not None:
                through.absorb(response.headers)  # the service's replay joins this one
            return response

        result = await run_async(call, exchange)
        return result

    send.__chronicle_original__ = original  # type: ignore[attr-defined]
    return send


# ---- switching it on and off -----------------------------------------------------------------


def instrument_httpx() -> None:
    """Record and trace-propagate ``httpx`` calls to ``inject_hosts`` (see the module docstring).

    Affects every ``httpx.Client`` and ``httpx.AsyncClient``, including ones already created.
    Calling it again does nothing.
    """
    with _lock:
        if _originals:
            return
        _originals["sync"] = httpx.Client.send
        _originals["async"] = httpx.AsyncClient.send
        httpx.Client.send = _sync_send(_originals["sync"])  # type: ignore[method-assign]
        httpx.AsyncClient.send = _async_send(_originals["async"])  # type: ignore[method-assign]
        # Each hop of a redirect goes through this private method (httpx 0.2x); where it is
        # missing, redirects keep httpx's own header handling.
        single = getattr(httpx.Client, _SINGLE, None)
        async_single = getattr(httpx.AsyncClient, _SINGLE, None)
        if callable(single) and callable(async_single):
            _originals["sync_single"] = single
            _originals["async_single"] = async_single
            setattr(httpx.Client, _SINGLE, _sync_single(single))
            setattr(httpx.AsyncClient, _SINGLE, _async_single(async_single))


def uninstrument_httpx() -> None:
    """Undo ``instrument_httpx()``; calls in flight finish as they started. Idempotent."""
    with _lock:
        if not _originals:
            return
        httpx.Client.send = _originals.pop("sync")  # type: ignore[method-assign]
        httpx.AsyncClient.send = _originals.pop("async")  # type: ignore[method-assign]
        if "sync_single" in _originals:
            setattr(httpx.Client, _SINGLE, _originals.pop("sync_single"))
            setattr(httpx.AsyncClient, _SINGLE, _originals.pop("async_single"))


def is_instrumented() -> bool:
    """Whether ``instrument_httpx()`` is in effect."""
    return bool(_originals)
