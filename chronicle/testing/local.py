"""``LocalControlPlane``: the real control plane in a subprocess, for tests.

It runs the AgentPlane control plane (the ``agentplane-control-plane`` package, installed by the
``server``, ``demo`` and ``dev`` extras) on a free ``127.0.0.1`` port with its own SQLite
database, and reads back what Chronicle stored there through the same client Chronicle saves with
(``HttpControlPlane``)::

    from chronicle.testing import LocalControlPlane

    with LocalControlPlane() as control_plane:
        chronicle.configure(control_plane_url=control_plane.url)
        ...  # run the code under test, then flush
        envelopes = control_plane.wait_for_envelopes(trace_id, count=2)

Nothing here touches the network beyond ``127.0.0.1`` and nothing is registered globally: no
``atexit`` hook, no signal handler, no environment change in this process.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from chronicle.errors import plural
from chronicle.save.client import HttpControlPlane
from chronicle.save.server import ControlPlaneProcess, DatabaseInUseError

__all__ = ["DatabaseInUseError", "LocalControlPlane", "snapshot_of"]

_SEARCH_PAGE = 500
"""The largest ``limit`` the control plane accepts on ``GET /v1/traces``."""
_POLL_INTERVAL = 0.05
_READ_TIMEOUT = 10.0


def snapshot_of(client: HttpControlPlane) -> dict[str, Any]:
    """What ``LocalControlPlane.snapshot()`` returns, read from any control plane's client."""
    summaries: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = client.find_traces(limit=_SEARCH_PAGE, offset=offset)
        summaries.extend(page)
        if len(page) < _SEARCH_PAGE:
            break
        offset += _SEARCH_PAGE
    traces: dict[str, Any] = {}
    for summary in summaries:
        trace_id = str(summary.get("trace_id"))
        envelopes = client.trace_envelopes(trace_id)
        envelopes.sort(key=lambda e: str(e.get("envelope_id")))
        traces[trace_id] = {"trace": client.get_trace(trace_id), "envelopes": envelopes}
    return {"traces": traces}


class LocalControlPlane(ControlPlaneProcess):
    """The real control plane in a subprocess on ``127.0.0.1``, for tests.

    Its lifecycle is ``ControlPlaneProcess``'s (``chronicle.save.server``): ``start()`` returns
    once the server on ``port`` is proven to be this one (never another server answering on the
    same port), ``prefer_port`` moves to a free port when that one is taken (``moved_from``),
    ``stop()``/``start()`` keep the port and the database, ``close()`` removes the temporary
    directory, one server per database (``DatabaseInUseError``), a failed start raises
    ``LocalControlPlaneError`` quoting the server's last lines. Used as a context manager it is
    started on entry and closed on exit.

    The reading helpers go through ``chronicle.save.client.HttpControlPlane``, so, like
    Chronicle's own requests, nothing records them; with ``api_keys`` they send its first key
    (``api_key``) as ``Authorization: Bearer``. They raise ``ControlPlaneError`` for an
    unexpected status or no answer, and are thread-safe.
    """

    _http: HttpControlPlane | None = None
    _http_lock = threading.Lock()
    """Guards making and closing the reading client (a moment; shared by every instance)."""

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and wait for it to exit (SIGTERM, then SIGKILL after ``timeout``).

        Keeps the port and the database, so ``start()`` brings the same data back. A no-op if
        it is not running.
        """
        self._close_http()
        super().stop(timeout)

    # ---- reading back ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /health``: ``status``, ``version``, ``max_batch``, ``max_body_bytes``."""
        return self._client().health()

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """``GET /v1/traces/{trace_id}``: labels, derived state and spans; ``None`` if unknown."""
        return self._client().get_trace(trace_id)

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        """The envelopes of one span, in call order (what replay reads)."""
        return self._client().span_envelopes(trace_id, span_id)

    def trace_envelopes(self, trace_id: str) -> list[dict[str, Any]]:
        """Every envelope of a trace in start order; ``[]`` if the trace is unknown."""
        return self._client().trace_envelopes(trace_id)

    def search(
        self, *, q: str | None = None, limit: int = _SEARCH_PAGE, **labels: str
    ) -> list[dict[str, Any]]:
        """``GET /v1/traces``: trace summaries whose labels all match, most recent first.

        ``session_id``, ``message_id`` and ``user_id`` are sent as their own query parameters,
        any other keyword as a repeated ``label=key:value``. ``q`` is the server's free-text
        match (id, name or a label value); ``limit`` is at most 500.
        """
        return self._client().find_traces(labels=labels, q=q, limit=limit)

    def wait_for_envelopes(
        self, trace_id: str, count: int, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Poll until the trace holds at least ``count`` envelopes and return them all.

        Raises ``TimeoutError`` (saying how many arrived) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            envelopes = self.trace_envelopes(trace_id)
            if len(envelopes) >= count:
                return envelopes
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"trace {trace_id} holds {plural(len(envelopes), 'envelope')} after "
                    f"{timeout}s, "
                    f"expected at least {count}; was the recording flushed to {self.url}?"
                )
            time.sleep(_POLL_INTERVAL)

    def snapshot(self) -> dict[str, Any]:
        """Everything the tenant's traces hold, in a form that compares with ``==``.

        ``{"traces": {trace_id: {"trace": <GET /v1/traces/{id}>, "envelopes": [...]}}}`` with
        each trace's envelopes sorted by ``envelope_id``. Take one before and one after to
        assert that nothing was written.
        """
        return snapshot_of(self._client())

    def _client(self) -> HttpControlPlane:
        with self._http_lock:
            if self._http is None:
                self._http = HttpControlPlane(self.url, self.api_key, _READ_TIMEOUT)
            return self._http

    def _close_http(self) -> None:
        with self._http_lock:
            if self._http is not None:
                self._http.close()
                self._http = None
