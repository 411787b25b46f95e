"""A restarted control plane as an agent meets it, for the registration tests of
``tests/test_hardening_delivery.py``: down first, then up and busy (``StartingControlPlane``)."""

from __future__ import annotations

import http.server
import threading
import time
from typing import Any

import httpx


class StartingControlPlane:
    """The control plane's address as a restarted control plane shows it to an agent: first down
    (the port bound, nobody listening: connections are refused), then, after ``listen()``, in
    front of the real control plane, holding each trace registration ``hold`` seconds (busy
    catching up) and each envelope batch ``batch_hold`` seconds before forwarding it, and
    answering span writes at once. ``one_at_a_time``: one request at a time, the next waiting
    for it, as a control plane writing one database does. ``registered``: registrations
    answered; ``started``: requests begun."""

    def __init__(
        self, target_url: str, hold: float = 0, batch_hold: float = 0, one_at_a_time: bool = False
    ) -> None:
        self.hold = hold
        self.registered = 0
        self.started = 0
        """Requests begun."""
        self.started_before_registered = 0
        """Requests begun when the first registration was answered."""
        target = httpx.Client(base_url=target_url, timeout=30)
        self._target = target
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                proxy.started += 1
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                registration = self.command == "POST" and self.path == "/v1/traces"
                time.sleep(proxy.hold if registration else 0)
                time.sleep(batch_hold if self.path == "/v1/envelopes:batch" else 0)
                kept = {k: v for k, v in self.headers.items() if k.lower() == "content-type"}
                answer = target.request(self.command, self.path, content=body, headers=kept)
                self.send_response(answer.status_code)
                self.send_header("content-type", answer.headers.get("content-type", ""))
                self.send_header("content-length", str(len(answer.content)))
                if one_at_a_time:  # the next request, on any connection, is served next
                    self.send_header("connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(answer.content)
                if registration and not proxy.registered:
                    proxy.started_before_registered = proxy.started
                proxy.registered += registration

            do_GET = do_POST = do_PUT = _forward

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        base = http.server.HTTPServer if one_at_a_time else http.server.ThreadingHTTPServer

        class Server(base):  # type: ignore[valid-type,misc]
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                """Quiet: a registration the agent gave up on finds its connection closed."""

        self._server = Server(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self._server.server_bind()  # bound, not listening: refused, as a control plane that is down
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def listen(self) -> None:
        """Come up: accept connections from now on."""
        self._server.server_activate()
        self._thread.start()

    def close(self) -> None:
        self.hold = 0
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
        self._target.close()
