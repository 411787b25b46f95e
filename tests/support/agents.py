"""Real HTTP servers for the integration tests: any ASGI app served by uvicorn on localhost.

``AppServer(app)`` binds ``127.0.0.1`` on a free port, serves ``app`` from a background thread,
and stops the server (and joins the thread) on exit::

    with AppServer(app) as server:
        httpx.get(f"{server.url}/ping")

``HeaderLog`` is a tiny ASGI app that answers ``{"ok": true}`` to every HTTP request and keeps
the headers each request arrived with, to assert on what a client sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import uvicorn

__all__ = ["AppServer", "HeaderLog"]


class AppServer:
    """An ASGI app served by uvicorn on ``127.0.0.1`` (a free port) in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The port it listens on (kept after it stops, for tests of a server that is gone)."""
        assert self._port is not None, "the server was never started"
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> AppServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._socket = sock
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", ws="none")
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="app-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("the local app server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class HeaderLog:
    """ASGI app: ``{"ok": true}`` for every HTTP request; ``requests`` holds their headers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        while True:  # drain the body
            message = await receive()
            if not message.get("more_body"):
                break
        self.requests.append(
            {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        )
        body = json.dumps({"ok": True}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
