"""Another server on a localhost port that answers ``/health`` the way a control plane does.

Tests use it to prove that Chronicle never takes a server it did not start for its own.
"""

from __future__ import annotations

import http.server
import json

from tests.support.served import Served


class Impostor(Served):
    """Another server on a port, answering ``/health`` the way a control plane does."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(
                    {"status": "ok", "service": "control-plane", "version": "impostor"}
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler)
