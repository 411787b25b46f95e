"""An HTTP request as its span's entry: what ``ChronicleMiddleware(record_request=True)`` records,
and how a corpus replay calls an ASGI app with it again.

``RequestEntry.serve`` runs the app inside one call named ``"<METHOD> <path>"``: the outermost
boundary of the request's span, so its entry, with the app's import path as ``wire.ENTRY`` when
the app is bound to a module's global (``myservice.main:app``). The call's input is the request,
``{"request": {"method", "scheme", "path", "query", "headers"}}``, and its result the response,
``{"status", "headers"}``. Headers leave out credentials (``Authorization``, cookies, API keys:
``redaction.is_secret_header``); names are lower-cased, repeated ones joined with ``", "``. Input
and result are redacted and bounded by ``max_payload_bytes`` like every recorded value.

With ``record_body`` the bodies are recorded too, for JSON (parsed), form
(``application/x-www-form-urlencoded``, parsed; a repeated field as a list) and text (``text/*``)
content types, up to ``max_payload_bytes``: ``body`` beside ``body_format`` (``json``, ``form``
or ``text``), and the ``content-length`` and ``transfer-encoding`` headers left out (a replay
sends the body again with its own length). A body of another type, or a larger one, is not
recorded and ``body_omitted`` says why. Without ``record_body`` (the default) nothing of a body
is recorded; the request's ``content-length`` header still says there was one.

During a replay that serves the entry call from its recording (its span replayed with the app
called in the replay's context, and the call not run live), the app does not run: the recorded
response is answered, its body as recorded (empty when it was not).

The request body is read before the app starts (its input is recorded when the call starts), up
to ``max_payload_bytes``, and handed to the app unchanged, followed by the rest of the stream; a
body whose type is not recorded is never read ahead. The response is forwarded as the app sends
it (streaming stays streaming) and its body kept on the side, up to the same bound. WebSocket
connections pass through.

A replay goes the other way: ``asgi_request(recorded)`` is the ASGI scope and body of a recorded
request (``ValueError`` saying what to do when it cannot be sent again: a body not recorded),
and ``call_app(app, scope, body)`` calls an app with them in this process, with no network.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlencode

from pydantic import JsonValue

from chronicle import runtime
from chronicle.recording.boundary import BoundarySpec
from chronicle.redaction import is_secret_header

__all__ = [
    "ARGUMENT",
    "BodyNotRecorded",
    "RequestEntry",
    "asgi_request",
    "call_app",
    "entry_name",
    "find_global",
    "is_asgi_app",
    "send_recorded",
]

logger = logging.getLogger("chronicle")

# The ASGI interface, as the middleware and a replayed request use it.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
BodyFormat = Literal["json", "form", "text"]

ARGUMENT = "request"
"""The name the entry call's input holds the request under."""
_BODY_HEADERS = frozenset({"content-length", "transfer-encoding"})
"""Left out when the body is recorded: a replay sends the body with a length of its own."""
_UNKNOWN = object()


def entry_name(method: str, path: str) -> str:
    """The name of the entry call of a request: ``"POST /triage"``."""
    return f"{method} {path}"


# ---- the JSON form of a request and a response ---------------------------------------------


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def body_format(content_type: str | None) -> BodyFormat | None:
    """How a body of this content type is recorded; ``None``: it is not."""
    media = _media_type(content_type)
    if media == "application/json" or media.endswith("+json"):
        return "json"
    if media == "application/x-www-form-urlencoded":
        return "form"
    if media.startswith("text/"):
        return "text"
    return None


def _charset(content_type: str | None) -> str:
    for parameter in (content_type or "").split(";")[1:]:
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def _headers(raw: Iterable[tuple[bytes, bytes]], *, body_kept: bool) -> dict[str, str]:
    """Headers as recorded: names lower-cased, credentials left out, repeated ones joined."""
    kept: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if is_secret_header(key) or (body_kept and key in _BODY_HEADERS):
            continue
        text = value.decode("latin-1")
        kept[key] = f"{kept[key]}, {text}" if key in kept else text
    return kept


def _header(raw: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in raw:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def body_fields(body: bytes, content_type: str | None) -> dict[str, JsonValue]:
    """``body`` and ``body_format`` for a body that is recorded, else ``body_omitted``."""
    kind = body_format(content_type)
    if kind is None:
        media = _media_type(content_type) or "untyped"
        return {"body_omitted": f"a {media} body (JSON, form and text bodies are recorded)"}
    charset = _charset(content_type)
    try:
        text = body.decode(charset)
    except (LookupError, UnicodeDecodeError):
        return {"body_omitted": f"the body is not {charset} text"}
    if kind == "json":
        try:
            return {"body_format": "json", "body": json.loads(text)}
        except ValueError:
            return {"body_format": "text", "body": text}  # sent again as it came
    if kind == "form":
        form: dict[str, JsonValue] = {}
        for key, value in parse_qsl(text, keep_blank_values=True):
            known = form.get(key)
            if known is None:
                form[key] = value
            elif isinstance(known, list):
                known.append(value)
            else:
                form[key] = [known, value]
        return {"body_format": "form", "body": form}
    return {"body_format": "text", "body": text}


def _body_bytes(request: Mapping[str, JsonValue], content_type: str | None) -> bytes:
    kind, body = request.get("body_format"), request.get("body")
    if kind == "json":
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if kind == "form" and isinstance(body, dict):
        pairs = [
            (key, str(item))
            for key, value in body.items()
            for item in (value if isinstance(value, list) else [value])
        ]
        return urlencode(pairs).encode("ascii")
    if kind == "text" and isinstance(body, str):
        return body.encode(_charset(content_type), errors="replace")
    raise ValueError(f"its request body has a body_format this version cannot send ({kind!r})")


# ---- recording: the middleware's side ------------------------------------------------------


class _Response:
    """The response an app sends, forwarded as it goes and kept on the side for the result."""

    def __init__(self, send: Send, record_body: bool, limit: int) -> None:
        self._send = send
        self._record_body = record_body
        self._limit = limit
        self.status: int | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self._size = 0
        self._keep = False
        """Whether the body is kept: ``record_body``, and a type that is recorded."""

    async def send(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            self.status = int(message.get("status", 200))
            self._headers = list(message.get("headers") or ())
            content_type = _header(self._headers, b"content-type")
            self._keep = self._record_body and body_format(content_type) is not None
        elif kind == "http.response.body" and self._keep and self._size <= self._limit:
            chunk = bytes(message.get("body") or b"")
            self._size += len(chunk)
            if self._size <= self._limit:
                self._chunks.append(chunk)
        await self._send(message)

    def form(self) -> dict[str, JsonValue]:
        """``status``, ``headers`` and, with ``record_body``, the body fields."""
        result: dict[str, JsonValue] = {"status": self.status}
        if not self._record_body:
            result["headers"] = dict(_headers(self._headers, body_kept=False))
            return result
        content_type = _header(self._headers, b"content-type")
        result["headers"] = dict(_headers(self._headers, body_kept=self._keep))
        if not self._keep:
            if content_type is not None:
                result.update(body_fields(b"", content_type))  # why it was not kept
        elif self._size > self._limit:
            result["body_omitted"] = f"larger than max_payload_bytes ({self._limit} bytes)"
        elif self._size:
            result.update(body_fields(b"".join(self._chunks), content_type))
        return result


class RequestEntry:
    """Serves each HTTP request inside its entry call (see the module docstring).

    ``outer`` is the object the server was given when no framework names it in the scope (the
    middleware itself, when it wraps the app); a module global bound to it, or to the
    framework's app (``scope["app"]``), is the import path recorded.
    """

    def __init__(self, app: ASGIApp, *, record_body: bool, outer: object) -> None:
        self.app = app
        self.record_body = record_body
        self._outer = outer
        self._path: object = _UNKNOWN

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one connection; an HTTP request is recorded as its span's entry."""
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        limit = runtime.current().settings.max_payload_bytes
        ahead: list[Message] = []
        fields: dict[str, JsonValue] = {}
        if self.record_body:
            ahead, fields = await self._read_ahead(scope, receive, limit)
        pending = list(ahead)

        async def receive_again() -> Message:
            return pending.pop(0) if pending else await receive()

        response = _Response(send, self.record_body, limit)
        ran: list[bool] = []

        async def serve_request(request: dict[str, JsonValue]) -> dict[str, JsonValue]:
            ran.append(True)
            await self.app(scope, receive_again, response.send)
            return response.form()

        try:
            request = self._request(scope, fields)
            call = self._entry_call(scope, request, serve_request)
        except Exception:  # never the request's failure: it is served unrecorded
            logger.exception("could not record the request as its span's entry; served as is")
            await self.app(scope, receive_again, send)
            return
        result = await call(request)
        if not ran:  # a replay served the entry from its recording: answer the recorded response
            await send_recorded(send, result)

    async def _read_ahead(
        self, scope: Scope, receive: Receive, limit: int
    ) -> tuple[list[Message], dict[str, JsonValue]]:
        """The body's first messages (read ahead, up to ``limit`` bytes) and its fields."""
        raw = scope.get("headers") or ()
        content_type = _header(raw, b"content-type")
        if body_format(content_type) is None:  # its type is not recorded: never read ahead
            length = _header(raw, b"content-length")
            has_body = (
                content_type is not None
                or (length is not None and length.strip() not in ("", "0"))
                or _header(raw, b"transfer-encoding") is not None
            )
            return [], body_fields(b"", content_type) if has_body else {}
        # read even without a length header (HTTP/2 sends none): no body is one empty message
        ahead: list[Message] = []
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            ahead.append(message)
            if message.get("type") != "http.request":
                return ahead, {"body_omitted": "the client went away before the body ended"}
            chunk = bytes(message.get("body") or b"")
            size += len(chunk)
            if size > limit:
                return ahead, {"body_omitted": f"larger than max_payload_bytes ({limit} bytes)"}
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        return ahead, body_fields(body, content_type) if body else {}

    def _request(self, scope: Scope, fields: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        raw = list(scope.get("headers") or ())
        kept = "body_format" in fields
        query = scope.get("query_string") or b""
        request: dict[str, JsonValue] = {
            "method": str(scope.get("method") or "GET"),
            "scheme": str(scope.get("scheme") or "http"),
            "path": str(scope.get("path") or "/"),
            "query": query.decode("latin-1") if isinstance(query, bytes) else str(query),
            "headers": dict(_headers(raw, body_kept=kept)),
        }
        request.update(fields)
        return request

    def _entry_call(
        self,
        scope: Scope,
        request: Mapping[str, JsonValue],
        serve_request: Callable[[dict[str, JsonValue]], Awaitable[dict[str, JsonValue]]],
    ) -> Callable[[dict[str, JsonValue]], Awaitable[dict[str, JsonValue]]]:
        """``serve_request`` as the boundary the request is recorded through."""
        name = entry_name(str(request["method"]), str(request["path"]))
        # one spec per request, not a cache by name: docs/benchmarks.md, "Figures behind the
        # code's choices"; so is the one search for the import path
        spec = BoundarySpec(serve_request, name, "tool", is_async=True)
        if self._path is _UNKNOWN:
            self._path = find_global(scope.get("app"), self._outer)
        spec.entry = self._path if isinstance(self._path, str) else None
        entry: Callable[[dict[str, JsonValue]], Awaitable[dict[str, JsonValue]]] = spec.wrapper()
        return entry


def find_global(*candidates: object) -> str | None:
    """``module:name`` of a module global bound to the first candidate found (``None`` ones are
    skipped), a module other than ``__main__`` preferred; ``None`` when there is none."""
    wanted = [candidate for candidate in candidates if candidate is not None]
    if not wanted:
        return None
    found: dict[int, str] = {}
    in_main: dict[int, str] = {}
    for module_name, module in list(sys.modules.items()):
        try:
            names = list(vars(module).items())
        except TypeError:  # not a module (a placeholder some packages put there)
            continue
        for name, value in names:
            for index, candidate in enumerate(wanted):
                if value is candidate:
                    into = in_main if module_name == "__main__" else found
                    into.setdefault(index, f"{module_name}:{name}")
    for index in range(len(wanted)):
        if index in found:
            return found[index]
    for index in range(len(wanted)):
        if index in in_main:
            return in_main[index]
    return None


# ---- replaying: calling the app again --------------------------------------------------------


async def send_recorded(send: Send, result: object) -> None:
    """Answer a recorded response (an entry call's result): its status and headers, and its body
    when it was recorded (else an empty one)."""
    recorded: Mapping[str, Any] = result if isinstance(result, Mapping) else {}
    status = recorded.get("status")
    headers = recorded.get("headers")
    kept = {str(k): str(v) for k, v in headers.items()} if isinstance(headers, Mapping) else {}
    body = b""
    if "body_format" in recorded:
        body = _body_bytes(recorded, kept.get("content-type"))
    kept = {k: v for k, v in kept.items() if k not in _BODY_HEADERS}
    kept["content-length"] = str(len(body))
    await send(
        {
            "type": "http.response.start",
            "status": status if isinstance(status, int) else 200,
            "headers": [
                (k.encode("latin-1", errors="replace"), v.encode("latin-1", errors="replace"))
                for k, v in kept.items()
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def is_asgi_app(target: object) -> bool:
    """Whether ``target`` looks like an ASGI application: ``async (scope, receive, send)``."""
    if not callable(target):
        return False
    # a function, else its class's own __call__ (type(target).__call__ would find the metaclass's)
    call: Any = target
    if not inspect.isfunction(target):
        owners = (vars(k) for k in type(target).__mro__)
        call = next((owner["__call__"] for owner in owners if "__call__" in owner), None)
    if call is None or not inspect.iscoroutinefunction(inspect.unwrap(call)):
        return False
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return len(parameters) == 3


class BodyNotRecorded(ValueError):
    """A recorded HTTP request whose body was not recorded: it cannot be sent again."""


def asgi_request(recorded: JsonValue) -> tuple[Scope, bytes]:
    """The ASGI scope and body of a recorded entry's input (``{"request": {...}}``).

    Raises ``ValueError`` when it is not a recorded HTTP request, and ``BodyNotRecorded`` (one)
    for a request whose body was not recorded (``record_body`` off, or ``body_omitted``).
    """
    request = recorded.get(ARGUMENT) if isinstance(recorded, dict) else None
    if (
        not isinstance(request, dict)
        or not isinstance(request.get("method"), str)
        or not isinstance(request.get("path"), str)
        or not isinstance(request.get("headers"), dict)
    ):
        raise ValueError("its entry is not an HTTP request recorded by ChronicleMiddleware")
    recorded_headers = request["headers"]
    assert isinstance(recorded_headers, dict)
    headers = {str(k): str(v) for k, v in recorded_headers.items()}
    content_type = headers.get("content-type")
    if "body_omitted" in request:
        raise BodyNotRecorded(
            f"its request body was not recorded ({request['body_omitted']}), so the request "
            "cannot be sent again; leave it out of the corpus"
        )
    if "body_format" in request:
        body = _body_bytes(request, content_type)
        headers["content-length"] = str(len(body))
    else:
        body = b""
        length = headers.get("content-length", "").strip()
        if (length and length != "0") or "transfer-encoding" in headers:
            raise BodyNotRecorded(
                "its request had a body that was not recorded, so the request cannot be sent "
                "again; record requests with ChronicleMiddleware(app, record_body=True)"
            )
    path = str(request["path"])
    query = request.get("query")
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": str(request["method"]),
        "scheme": str(request.get("scheme") or "http"),
        "path": path,
        "raw_path": quote(path).encode("ascii"),
        "query_string": str(query or "").encode("latin-1", errors="replace"),
        "root_path": "",
        "headers": [
            (name.encode("latin-1", errors="replace"), value.encode("latin-1", errors="replace"))
            for name, value in headers.items()
        ],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    return scope, body


async def call_app(app: ASGIApp, scope: Scope, body: bytes) -> int | None:
    """Call ``app`` with one HTTP request in this process and return the status it answered
    (``None`` if it sent none). The response is read and dropped; after the body, ``receive``
    waits for the response to end, then says the client went away (as a server does)."""
    done = asyncio.Event()
    sent_body = False
    status: list[int] = []

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            status.append(int(message.get("status", 200)))
        elif kind == "http.response.body" and not message.get("more_body", False):
            done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return status[0] if status else None
