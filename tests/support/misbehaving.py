"""Small misbehaving HTTP servers on 127.0.0.1, for the failure tests. Each is bounded in time.

- ``ScriptedServer(answer)``: a threaded HTTP server whose ``answer(request)`` returns the
  status, headers and body to send (an HTML login page, invalid JSON, a redirect, a slow
  answer); it keeps every request it got (method, path, headers, body).
- ``HungServer``: a listening socket that accepts connections and never answers a byte.
- ``ControlPlaneProxy(target_url)``: forwards to a real control plane, and can be switched to
  hang (accept and never answer) or to answer slowly, then back, to play an outage.

All of them are context managers; leaving one stops it and closes every connection it holds, so
a client blocked on it gets an error at once rather than at its timeout.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx

from tests.support.served import Served

_HOST = "127.0.0.1"


@dataclass
class Request:
    """One request a scripted server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    """What a scripted server sends back; ``delay`` seconds pass first."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def html_page(_: Request) -> Answer:
    """A login page, the way a proxy or a misrouted URL answers."""
    return Answer(200, b"<html><body>Please sign in</body></html>", {"content-type": "text/html"})


def invalid_json(_: Request) -> Answer:
    """A 200 that says it is JSON and is not."""
    return Answer(200, b'{"status": "stored", ', {"content-type": "application/json"})


def redirect_to(url: str, status: int = 301) -> Callable[[Request], Answer]:
    """Every request is answered with a redirect to ``url`` (plus the request's path)."""

    def answer(request: Request) -> Answer:
        return Answer(status, b"", {"location": url.rstrip("/") + request.path})

    return answer


class ScriptedServer(Served):
    """A threaded HTTP/1.1 server on a free port whose every answer comes from ``answer``."""

    def __init__(self, answer: Callable[[Request], Answer]) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with server._lock:
                    server.requests.append(request)
                reply = server.answer(request)
                if reply.delay:
                    time.sleep(reply.delay)
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = do_PUT = _handle

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: tests read ``requests`` instead."""

        super().__init__(Handler)


class HungServer:
    """Accepts every connection and never sends a byte: a hung control plane."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((_HOST, 0))
        self._listener.listen(64)
        self._listener.settimeout(0.1)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{_HOST}:{self._listener.getsockname()[1]}"

    @property
    def accepted(self) -> int:
        """Connections accepted so far (each a client's attempt; none is ever answered)."""
        return len(self._held)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._held.append(connection)  # held open, never read from or written to

    def __enter__(self) -> HungServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for connection in self._held:
            with contextlib.suppress(OSError):
                connection.close()
        self._listener.close()


class ControlPlaneProxy:
    """Forwards every request to ``target_url``, unless switched to hang or to answer slowly.

    ``hang()`` makes new requests wait without an answer until ``recover()`` (or the end of the
    ``with``); ``slow(seconds)`` delays each answer. ``requests`` counts what arrived.
    """

    def __init__(self, target_url: str) -> None:
        self._target = httpx.Client(base_url=target_url, timeout=30)
        self._hung = threading.Event()
        self._released = threading.Event()
        self._delay = 0.0
        self.requests = 0
        self.on_request: Callable[[Request], None] | None = None
        """Called with each request as it arrives (e.g. to note the order of paths)."""
        self._server = ScriptedServer(self._forward)

    @property
    def url(self) -> str:
        return self._server.url

    def hang(self) -> None:
        self._released.clear()
        self._hung.set()

    def slow(self, seconds: float) -> None:
        self._delay = seconds

    def recover(self) -> None:
        self._delay = 0.0
        self._hung.clear()
        self._released.set()

    def _forward(self, request: Request) -> Answer:
        self.requests += 1
        if self.on_request is not None:
            self.on_request(request)
        if self._hung.is_set():
            self._released.wait(60)  # a hung server: the client times out first
        headers = {
            k: v for k, v in request.headers.items() if k in ("content-type", "authorization")
        }
        response = self._target.request(
            request.method, request.path, content=request.body, headers=headers
        )
        kept = {"content-type": response.headers.get("content-type", "application/json")}
        return Answer(response.status_code, response.content, kept, delay=self._delay)

    def __enter__(self) -> ControlPlaneProxy:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.recover()
        self._server.__exit__(*exc)
        self._target.close()


@contextlib.contextmanager
def servers(*items: ScriptedServer | HungServer) -> Iterator[None]:
    """Enter several servers at once."""
    with contextlib.ExitStack() as stack:
        for item in items:
            stack.enter_context(item)
        yield
