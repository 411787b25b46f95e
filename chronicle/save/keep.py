"""Keep on incident: a request the sampler dropped is held in memory and saved if it matters.

Head sampling decides before anyone knows whether a request mattered. Chronicle's spans that the
sampler drops still hand their records here (``chronicle.otel.processor.UnsampledSpan``: nothing
reaches the provider or its exporters), grouped by trace: the local part of one request.

The contract:

- **Kept** when it turns out to matter: a call in it failed (its record carries an error), one
  of its request spans failed or ran longer than ``keep_slower_than``, ``session.keep(reason)``
  flagged it, or ``chronicle.keep(session_id=...)`` (or ``trace_id=...``) names it while it is
  held. Its records then go to delivery in the order they came, exactly as a sampled request's
  would have (the same entities: a trace registration when it started its trace, the Span's
  open and close writes, the envelopes), and its first request span's metadata says why
  (``chronicle.kept``). Its later records go straight to delivery.
- **Dropped**, counted (``dropped``): ``keep_window`` seconds after it ended, or earlier, oldest
  first, when holding it would pass ``keep_max_requests`` or ``keep_max_bytes`` (counted in
  ``evicted`` too), and when the configuration shuts down. The records it still makes are
  dropped with it. There is no timer thread: what is due goes when the next request starts, or
  when ``keep``, ``held``, ``dropped`` or ``close`` is called.
- The agent's thread pays a lock, an append, and a walk of each finished record's payload to
  size it (``delivery.record_size``); handing a kept request to delivery queues it (no network,
  within delivery's ``on_overflow``). Nothing here raises into the agent.
- After ``os.fork()`` the child starts empty.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Literal

from chronicle.config import Settings
from chronicle.otel.processor import Record
from chronicle.save.delivery import Delivery, record_size
from chronicle.save.forks import after_fork_in_child
from chronicle.wire import KEPT, CallRecord, RequestRecord, hex_id

logger = logging.getLogger("chronicle")

_WRITE = 120
"""Approximate bytes of one held write besides its record: the tuple and its ids."""
_REQUEST = 400
"""Approximate bytes of one held request besides its writes."""
_MAX_REASON = 500
"""Longest reason kept, in characters."""

State = Literal["held", "kept", "dropped"]
Write = tuple[Record, int, int, int, int | None]
"""``(record, trace_id, span_id, start_ns, end_ns)``; ``end_ns`` is ``None`` for an open write."""


class _Request:
    """The local part of one unsampled trace: its writes, in order, until kept or dropped."""

    __slots__ = (
        "ended_at",
        "open",
        "registration",
        "root",
        "session_id",
        "size",
        "state",
        "trace_id",
        "writes",
    )

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id
        self.state: State = "held"
        self.writes: list[Write] = []
        self.registration: RequestRecord | None = None
        """The record to register the trace with, when its first request span started it."""
        self.root: RequestRecord | None = None
        """Its first request span's record: where the reason for keeping goes."""
        self.session_id: str | None = None
        self.open = 0
        """Request spans of it still open."""
        self.ended_at: float | None = None
        """``time.monotonic()`` when its last open request span ended."""
        self.size = _REQUEST


class KeepBuffer:
    """Holds the records of requests the sampler dropped; delivers those that turn out to matter.

    A ``RecordSink`` for ``UnsampledSpan``. Thread-safe; never raises on the span paths.
    ``redact`` masks the reasons given in code before they are stored.
    """

    def __init__(
        self,
        delivery: Delivery,
        settings: Settings,
        redact: Callable[[str], str] = str,
    ) -> None:
        self._delivery = delivery
        self._settings = settings
        self._redact = redact
        self._window = settings.keep_window
        self._slower_than_ns = int(settings.keep_slower_than * 1e9)
        # Re-entrant: a signal handler may start (and end) a span while this thread holds it.
        self._lock = threading.RLock()
        self._requests: dict[int, _Request] = {}
        """Every request it knows: held, kept and still running, or dropped and still running."""
        self._held: dict[int, _Request] = {}
        """The held ones, oldest first (the order they are evicted in)."""
        self._ended: collections.OrderedDict[int, _Request] = collections.OrderedDict()
        """The held requests that have ended, in the order they ended (their windows close in
        that order); one kept or dropped earlier leaves it at once, so it holds no more than
        ``_held`` does."""
        self._recently_kept: collections.OrderedDict[int, None] = collections.OrderedDict()
        """Kept requests that ended (most ``keep_max_requests``): a late record (a stream
        consumed after its request span) still goes to delivery."""
        self._bytes = 0
        self._kept = self._dropped = self._evicted = 0
        self._closed = False
        self._told_full = False
        after_fork_in_child(self._after_fork)

    # ---- counters -------------------------------------------------------------------------

    @property
    def held(self) -> int:
        """Requests held now (each waiting to turn out to matter, or for its window to end)."""
        with self._lock:
            self._expire(time.monotonic())
            return len(self._held)

    @property
    def held_bytes(self) -> int:
        """Approximate bytes the held requests' records take now."""
        return self._bytes

    @property
    def kept(self) -> int:
        """Unsampled requests kept (handed to delivery), since start."""
        return self._kept

    @property
    def dropped(self) -> int:
        """Unsampled requests dropped (nothing in them mattered in time), since start."""
        with self._lock:
            self._expire(time.monotonic())
            return self._dropped

    @property
    def evicted(self) -> int:
        """Of ``dropped``, those dropped before their window ended, to stay within the bounds."""
        return self._evicted

    # ---- the sink of unsampled spans ------------------------------------------------------

    def span_started(self, record: Record, trace_id: int, span_id: int, start_ns: int) -> None:
        """Hold the open write of an unsampled span (or pass it on, the request being kept)."""
        if not self._delivery.sends_open(record):
            return  # a call's open write (without emit_open): delivery would not send it
        with self._lock:
            request = self._request(trace_id, record)
            if request is None:
                return
            if isinstance(record, RequestRecord):
                request.open += 1
                if request.ended_at is not None:  # a request span of it starts again
                    request.ended_at = None
                    self._ended.pop(trace_id, None)
                if request.root is None:
                    request.root = record
                if request.session_id is None:
                    request.session_id = record.labels.get("session_id")
            state = request.state
            if state == "held":
                request.writes.append((record, trace_id, span_id, start_ns, None))
                request.size += _WRITE
                self._bytes += _WRITE
                self._bound()
                return
        if state == "kept":
            self._delivery.span_started(record, trace_id, span_id, start_ns)

    def span_ended(
        self, record: Record, trace_id: int, span_id: int, start_ns: int, end_ns: int
    ) -> None:
        """Hold the close write of an unsampled span; keep its request if this shows it matters."""
        size = _WRITE + record_size(record)
        with self._lock:
            request = self._request(trace_id, record)
            if request is None:
                return
            reason = _reason(record, end_ns - start_ns, self._slower_than_ns)
            if isinstance(record, RequestRecord) and request.open > 0:
                request.open -= 1
            state = request.state
            if state == "held":
                request.writes.append((record, trace_id, span_id, start_ns, end_ns))
                request.size += size
                self._bytes += size
                if reason is not None:
                    self._keep(request, reason)
                else:
                    self._settle(request)
                    self._bound()
                return
            self._settle(request)
        if state == "kept":
            self._delivery.span_ended(record, trace_id, span_id, start_ns, end_ns)

    def flush(self, timeout: float | None = None) -> bool:
        """Nothing to deliver until a request is kept (then delivery has it): ``True``."""
        return True

    def register_trace(self, record: RequestRecord, trace_id: str) -> None:
        """The unsampled request ``record`` starts trace ``trace_id``: register it if kept."""
        with self._lock:
            request = self._requests.get(int(trace_id, 16))
            if request is None or request.state == "dropped":
                return
            if request.state == "held":
                request.registration = record
                return
        self._delivery.register_trace(record, trace_id, wait=False)

    # ---- keeping --------------------------------------------------------------------------

    def keep_trace(self, trace_id: str, reason: str) -> bool:
        """Keep the held request of ``trace_id`` (32 hex). ``False`` when none is held: it was
        sampled (saved anyway), is kept already, or was dropped."""
        try:
            key = int(trace_id, 16)
        except ValueError:
            return False
        with self._lock:
            self._expire(time.monotonic())
            request = self._held.get(key)
            if request is None:
                return False
            self._keep(request, self._redact(reason[:_MAX_REASON]))
            return True

    def keep_session(self, session_id: str, reason: str) -> int:
        """Keep every held request labelled ``session_id``; how many there were."""
        with self._lock:
            self._expire(time.monotonic())
            found = [r for r in self._held.values() if r.session_id == session_id]
            reason = self._redact(reason[:_MAX_REASON])
            for request in found:
                self._keep(request, reason)
            return len(found)

    def close(self) -> None:
        """Drop every held request (counted) and hold nothing more. Idempotent."""
        with self._lock:
            self._closed = True
            for request in list(self._held.values()):
                self._drop(request)
            self._requests.clear()
            self._ended.clear()
            self._recently_kept.clear()

    # ---- inside the lock ------------------------------------------------------------------

    def _request(self, trace_id: int, record: Record) -> _Request | None:
        """The request ``trace_id`` belongs to, made when it is new (``None``: closed)."""
        request = self._requests.get(trace_id)
        if request is not None:
            return request
        if self._closed:
            return None
        if trace_id in self._recently_kept:
            request = _Request(trace_id)
            request.state = "kept"
        else:
            if isinstance(record, RequestRecord):
                self._expire(time.monotonic())  # a request starts: drop what is due
            request = _Request(trace_id)
            self._held[trace_id] = request
            self._bytes += request.size
        self._requests[trace_id] = request
        return request

    def _settle(self, request: _Request) -> None:
        """After a close write: when no request span of it is open, it has ended."""
        if request.open or request.ended_at is not None:
            return
        if request.state != "held":
            self._forget(request)
            return
        request.ended_at = time.monotonic()
        self._ended[request.trace_id] = request

    def _keep(self, request: _Request, reason: str) -> None:
        """Hand ``request``'s writes to delivery, in order; its later ones follow them there."""
        del self._held[request.trace_id]
        self._ended.pop(request.trace_id, None)
        self._bytes -= request.size
        request.state = "kept"
        self._kept += 1
        root = request.root
        if root is not None:
            root.metadata.setdefault(KEPT, reason)
        delivery = self._delivery
        if request.registration is not None:
            delivery.register_trace(request.registration, hex_id(request.trace_id, 32), wait=False)
        for record, trace_id, span_id, start_ns, end_ns in request.writes:
            if end_ns is None:
                delivery.span_started(record, trace_id, span_id, start_ns)
            else:
                delivery.span_ended(record, trace_id, span_id, start_ns, end_ns)
        request.writes = []
        request.registration = None
        logger.debug("an unsampled request (trace %032x) is kept: %s", request.trace_id, reason)
        if not request.open:
            self._forget(request)

    def _drop(self, request: _Request, *, evicted: bool = False) -> None:
        del self._held[request.trace_id]
        self._ended.pop(request.trace_id, None)
        self._bytes -= request.size
        request.state = "dropped"
        request.writes = []
        request.registration = None
        self._dropped += 1
        if evicted:
            self._evicted += 1
            if not self._told_full:
                self._told_full = True
                logger.info(
                    "keep: unsampled requests are dropped before their keep_window (%g s) ends "
                    "to stay within keep_max_requests=%d and keep_max_bytes=%d (counted); "
                    "raise them to hold requests longer",
                    self._window,
                    self._settings.keep_max_requests,
                    self._settings.keep_max_bytes,
                )
        if not request.open:
            self._forget(request)

    def _forget(self, request: _Request) -> None:
        """``request`` has ended and is no longer held: let go of it (kept: remember its id)."""
        if self._requests.get(request.trace_id) is request:
            del self._requests[request.trace_id]
        if request.state == "kept":
            recent = self._recently_kept
            recent[request.trace_id] = None
            while len(recent) > self._settings.keep_max_requests:
                recent.popitem(last=False)

    def _bound(self) -> None:
        """Drop the oldest held requests until the rest are within the bounds."""
        held, settings = self._held, self._settings
        while held and (
            len(held) > settings.keep_max_requests or self._bytes > settings.keep_max_bytes
        ):
            self._drop(next(iter(held.values())), evicted=True)

    def _expire(self, now: float) -> None:
        """Drop the held requests whose window has ended."""
        ended, window = self._ended, self._window
        while ended:
            request = next(iter(ended.values()))
            if request.ended_at is None:  # (never: a request that runs again leaves at once)
                ended.popitem(last=False)
                continue
            if now - request.ended_at < window:
                return
            self._drop(request)  # (leaves ``_ended``)

    def _after_fork(self) -> None:
        # The parent's requests belong to the parent; the child starts empty.
        self._lock = threading.RLock()
        self._requests.clear()
        self._held.clear()
        self._ended.clear()
        self._recently_kept.clear()
        self._bytes = 0
        self._kept = self._dropped = self._evicted = 0


def _reason(record: Record, took_ns: int, slower_than_ns: int) -> str | None:
    """Why a finished record makes its request matter, or ``None``."""
    if isinstance(record, CallRecord):
        if record.error is not None:
            return f"the call {record.name!r} failed ({record.error[0]})"
        return None
    if record.failed:
        return "the request failed"
    if took_ns > slower_than_ns:
        return f"it ran {took_ns / 1e9:.1f} s (keep_slower_than={slower_than_ns / 1e9:g} s)"
    return None
