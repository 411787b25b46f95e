"""A local HTTP server run in a thread of its own, for the test doubles of ``tests/support``.

``Served(handler)`` binds a ``ThreadingHTTPServer`` with ``handler`` to a free port of
``127.0.0.1`` when made; it serves while a ``with`` block runs (or from ``start()`` until
``close()``), each request in a daemon thread, and is shut down and its socket closed at the end.
"""

from __future__ import annotations

import http.server
import threading
from typing import Self


class Served:
    """``handler`` served on ``127.0.0.1``, on a free port (``port``, ``url``)."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        """``http://127.0.0.1:PORT``."""
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        """Serve from now on, until ``close()``."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving, close the socket and wait (up to 10 s) for the serving thread."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
