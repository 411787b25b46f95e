"""Delivery: a bounded queue and one worker thread that save records to the control plane.

Why not the SDK's ``BatchSpanProcessor``: it drops silently when full and cannot block, its
``force_flush`` ignores its timeout, and it queues only ended spans, while Chronicle must also send
open writes at span start, never drop a span's close write, and report what it dropped.

The contract:

- ``submit_*`` never touches the network and never raises; it costs a deque append.
- The queue is bounded by memory and by count: everything waiting (envelopes, trace
  registrations and span writes alike) holds at most ``max_queue_bytes`` (approximate bytes of
  the records, measured by ``_size_of`` once the queue backs up past ``2 x batch_size``
  records: measuring walks a record's payload, so while delivery keeps up none is measured and
  the agent pays nothing; when the queue backs up, what waits is measured and the newest
  envelopes past the budget are dropped, counted), and at most ``max_queue`` envelopes and
  ``max_queue`` trace and span writes wait. Past either bound the new record is dropped
  (counted, warned about once, reported by ``flush()``), or with ``on_overflow="block"`` the
  caller waits for room, at most ``timeout`` seconds: once a wait runs out (an outage), new
  records are dropped and counted until delivery makes room again. A record alone in an empty
  queue is always taken, whatever its size.
- Every record is accounted for: saved, or counted as dropped (queue full) or rejected (the
  server refused it, or it could not be built or encoded: logged once, alone; the records
  around it are unaffected), or reported as still waiting by ``flush()`` and at shutdown.
- Envelopes go in batches that respect the server's ``max_batch`` and ``max_body_bytes`` (read
  from ``/health``). A control plane that is down, times out, answers 408/429/5xx, or answers
  with something that is not its own answer is retried with backoff; nothing queued is lost
  meanwhile. A batch the server rejects as invalid is split until the one bad record is found;
  that record is logged with the server's message and dropped, the rest are saved.
- The three kinds of write (trace registrations, span writes, envelope batches) share the
  worker's time equally when all are waiting, so none starves behind the others under load.
- A request span's open write still waiting when its close write comes is replaced by the close
  write, in its place: a backed-up queue (an outage, a burst) sends one write per ended span
  instead of two, and nothing is lost (the close write says all the open one did).
- Trace registration is the one write that may happen on the agent's thread
  (``trace_registration="sync"``), and it holds the request at most ``registration_timeout``
  (or ``timeout``, if shorter): past it, or when it fails for lack of an answer, it is queued and
  goes on in the background, and so are the next registrations until the control plane answers
  one of them (queued) within ``registration_timeout`` again with the backlog delivered (fewer
  than ``2 x batch_size`` records waiting); its answers to span writes and envelopes do not count (a
  control plane still starting, or busy with a backlog, answers those at once and may hold the
  next registration): a slow or hung control plane costs the process at most one
  ``registration_timeout`` per outage. While nothing has ever answered at the control
  plane's address, a registration finding nothing listening tries again within that same bound
  (a control plane that is starting: ``chronicle serve &`` just before the script).
- A control plane that has never answered is taken to be starting for ``STARTING_SECONDS``
  after the first attempt found nothing listening: meanwhile the worker tries again every
  ``0.1 s``, and ``flush()``, ``shutdown()`` (so a second ``configure()``) and the exit wait
  wait for it (within their own bounds); past that, they give up at once, saying what to run
  (nothing listens there: waiting longer changes nothing).
- ``flush()`` waits at most ``flush_timeout`` when given no timeout; at process exit,
  ``deliver_before_exit`` waits at most ``exit_timeout`` in total, however many times it is
  called (a SIGTERM handler, then ``atexit``), and says so in one line when it waits longer than
  a second.
- After ``os.fork()`` the child starts with empty queues, its own connections (the client's own
  fork hook) and its own worker; a ``multiprocessing`` worker delivers what it recorded when it
  ends (its exit skips ``atexit``), whatever the start method (``fork``, ``spawn``,
  ``forkserver``) and whether Chronicle was configured before the fork or inside the worker.
- Delivery is the span processor's sink: it receives plain records (``chronicle.wire``) with
  their span's ids and times, and the entities are built from them on the worker thread (traces
  and spans validated against the ``agentplane_primitives`` models, envelopes written as JSON by
  ``wire.envelope_json``, proven equal to the validated model), so the agent's thread pays only
  for the append.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from agentplane_primitives.models import Envelope, Span, Trace
from opentelemetry import context as otel_context

from chronicle.config import Settings
from chronicle.errors import ControlPlaneError, DeliveryError
from chronicle.otel.context import suppressed
from chronicle.otel.processor import Record
from chronicle.save.client import ControlPlaneClient, body_of, deadline
from chronicle.save.forks import after_fork_in_child
from chronicle.wire import (
    CallRecord,
    RequestRecord,
    envelope_json,
    hex_id,
    span_entity,
    trace_entity,
)

logger = logging.getLogger("chronicle")

Entity = Trace | Span | Envelope
Build = Callable[[], Entity | bytes]
"""Makes one validated entity, or an envelope's JSON (``wire.envelope_json``); runs on the worker
thread and raises on invalid data."""

_TRANSIENT = frozenset({401, 403, 408, 425, 429})
_KINDS = ("traces", "spans", "envelopes")
_DEFAULT_MAX_BATCH = 100
_DEFAULT_MAX_BODY = 4 * 1024 * 1024
_BATCH_OVERHEAD = len(b'{"envelopes":[]}')
_BACKOFF_START = 0.1
_BACKOFF_MAX = 5.0
STARTING_SECONDS = 3.0
"""Seconds after the first attempt found nothing listening that a control plane which has never
answered is still taken to be starting (``chronicle serve`` listens about 2 s after it starts):
``flush()`` and the exit wait wait that long for it before giving up."""
_STARTING_RETRY = 0.05
"""Seconds between a registration's attempts while the control plane may be starting."""
_SIGNAL_CHECK = 0.1
"""Seconds a wait on the caller's thread sleeps at most before it looks again. The kernel may
give a process's SIGINT to another thread (the worker, say); Python then handles it on the main
thread only once that thread runs again, so a longer sleep would swallow Ctrl-C until it ends."""

_RECORD_OVERHEAD = 800
"""Approximate bytes of a queued record besides its payload: the record, the item, the ids."""


@dataclasses.dataclass(slots=True)
class _Item:
    seq: int
    build: Build
    queue: collections.deque[_Item] | None
    """The deque it came from (``None``: envelopes), to put it back after an error."""
    size: int
    """Approximate bytes it holds (``_size_of``), counted against ``max_queue_bytes``."""
    record: Record | None = None
    """The record, while it is not sized yet (``size`` is then a flat estimate)."""
    opens: tuple[int, int] | None = None
    """``(trace_id, span_id)`` of the span whose open write this is, while it waits."""


def _size_of(*values: object) -> int:
    """Approximate memory held by JSON-like values (what a record captured), in bytes.

    Strings and bytes by their length, containers by their item count, at CPython's object
    sizes; a walk without recursion (bounded by the values' size, never by their depth). A
    container's items are counted in its own loop when they are exact strings or numbers (the
    JSON form's leaves), so only containers go through the stack: a third less work for a
    captured payload than a stack round each (docs/benchmarks.md, "Issue 31: the boundary's
    cost"). The values hold no container twice (a JSON form never does; a snapshot waits as
    its frozen bytes).
    """
    size = 0
    stack = list(values)
    push, leaves = stack.append, _LEAVES
    while stack:
        value = stack.pop()
        items: Iterable[object]
        if isinstance(value, dict):
            size += 64 + 104 * len(value)
            for key in value:
                if type(key) is str:
                    size += 50 + len(key)
                else:
                    push(key)
            items = value.values()
        elif isinstance(value, (list, tuple)):
            size += 56 + 8 * len(value)
            items = value
        elif isinstance(value, (set, frozenset)):
            size += 216 + 32 * len(value)
            items = value
        else:
            size += 50 + len(value) if isinstance(value, (str, bytes, bytearray)) else 32
            continue
        for item in items:
            if type(item) is str:
                size += 50 + len(item)
            elif type(item) in leaves:
                size += 32
            else:
                push(item)
    return size


_LEAVES = frozenset({int, float, bool, type(None)})
"""Exact types ``_size_of`` counts as 32 bytes without a stack round."""


def record_size(record: Record) -> int:
    """Approximate bytes ``record`` holds (its payload walked: microseconds), for the memory
    bounds (``max_queue_bytes``, and ``keep_max_bytes`` of ``chronicle.save.keep``).

    A call's record may be settled by the delivery worker while this walks it (its open write
    built while the call runs, ``emit_open``): a dict that grows under the walk is measured
    again, once; never raises for that."""
    for _ in range(2):
        try:
            return _measured(record)
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    return _RECORD_OVERHEAD


def _measured(record: Record) -> int:
    if isinstance(record, CallRecord):
        size = _RECORD_OVERHEAD
        for copy, _ in record.deferred or ():  # frozen snapshots, or a stream's capture
            size += 50 + len(copy) if type(copy) is bytes else _size_of(copy)
        payload = (record.input_raw, record.output_raw, record.metadata, record.error)
        return size + _size_of(*[value for value in payload if value is not None])
    return _RECORD_OVERHEAD + _size_of(record.metadata, record.labels)


class Delivery:
    """Queues records and saves them from a background thread. Thread-safe."""

    def __init__(self, client: ControlPlaneClient | None, settings: Settings) -> None:
        self._client = client
        self._settings = settings
        self._seq = itertools.count(1)
        self._traces: collections.deque[_Item] = collections.deque()
        self._spans: collections.deque[_Item] = collections.deque()
        self._envelopes: collections.deque[_Item] = collections.deque()
        self._in_flight: list[_Item] = []
        self._open_writes: dict[tuple[int, int], _Item] = {}
        """The request spans' open writes waiting in ``_spans``, by ``(trace_id, span_id)``:
        what a close write replaces."""
        # Re-entrant: a signal handler (SIGTERM) may deliver on the main thread while it was
        # inside one of these critical sections.
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._stopping = False
        self._deadline: float | None = None
        self._limits: tuple[int, int] | None = None
        self._last_submitted = 0
        self._bytes = 0
        """Approximate bytes held by what is queued or in flight (``_Item.size``)."""
        self._sizing = False
        """Whether new records are measured (the queue backed up past ``_size_from``)."""
        self._size_from = 2 * settings.batch_size
        self._superseded = 0
        """Open writes replaced by their close write since the queue was last empty: records
        that came, counted with those waiting to tell a backed-up queue (``_size_from``)."""
        self._exit_deadline: float | None = None
        """When the exit wait must end: set by the first ``deliver_before_exit``."""
        self._dropped = 0
        self._rejected = 0
        self._reported_dropped = 0
        self._reported_rejected = 0
        self._warned_full = False
        self._warned_nowhere = False
        self._outage_logged = False
        self._refusals = 0  # attempts that found nothing listening at the control plane's address
        self._first_refusal: float | None = None  # when the first of them was (monotonic)
        self._last_failure: ControlPlaneError | None = None
        self._gave_up_blocking = False
        self._registration_lazy = False
        self._registration_failure = ""
        self._registration_waits = 0
        self._registrations_unanswered = 0
        self._rejections_logged: set[str] = set()
        self._spent = dict.fromkeys(_KINDS, 0.0)
        """Seconds of the worker each kind of write had (relative): who goes next."""
        self._thread: threading.Thread | None = None
        if client is not None:
            self._start_worker()
            after_fork_in_child(self._after_fork)

    @property
    def waiting(self) -> int:
        """Records queued or in flight now."""
        with self._lock:
            return self._waiting_count()

    # ---- the agent's side -----------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether records go anywhere (a control plane is configured and not shut down)."""
        if self._client is None:
            if not self._warned_nowhere:
                self._warned_nowhere = True
                logger.warning(
                    "no control_plane_url is set, so recorded calls are not saved; "
                    "set CHRONICLE_CONTROL_PLANE_URL or configure(control_plane_url=...)"
                )
            return False
        return not self._stopping

    # ---- the span processor's sink -------------------------------------------------------

    def span_started(self, record: Record, trace_id: int, span_id: int, start_ns: int) -> None:
        """Queue the open write of a request span (and of a call, with ``emit_open``)."""
        if self.sends_open(record):
            self._queue_write(record, trace_id, span_id, start_ns, None)

    def sends_open(self, record: Record) -> bool:
        """Whether ``span_started`` sends anything for ``record``: a request span's open write
        always, a call's only with ``emit_open``."""
        return isinstance(record, RequestRecord) or self._settings.emit_open

    def span_ended(
        self, record: Record, trace_id: int, span_id: int, start_ns: int, end_ns: int
    ) -> None:
        """Queue the close write; a span's close wakes the worker, nothing here waits for it."""
        self._queue_write(record, trace_id, span_id, start_ns, end_ns)

    def _queue_write(
        self, record: Record, trace_id: int, span_id: int, start_ns: int, end_ns: int | None
    ) -> None:
        if isinstance(record, CallRecord):  # the boundary span's id is the envelope id
            build: Build = functools.partial(
                envelope_json, record, hex_id(span_id, 16), start_ns, end_ns
            )
            self.submit_envelope(build, record=record)
        else:
            build = functools.partial(
                span_entity, record, hex_id(trace_id, 32), hex_id(span_id, 16), start_ns, end_ns
            )
            if end_ns is None:
                self._submit(self._spans, build, record, urgent=False, opens=(trace_id, span_id))
            elif not self._supersede((trace_id, span_id), build, record):
                self._submit(self._spans, build, record, urgent=True)

    def _supersede(self, key: tuple[int, int], build: Build, record: Record) -> bool:
        """Put the close write ``build`` in the place of the span's open write, when that still
        waits (not sent, not being sent); ``False`` when it does not."""
        if not self.active:
            return True  # (nothing is queued once delivery stopped)
        with self._lock:
            item = self._open_writes.pop(key, None)
            if item is None:
                return False
            item.build, item.opens = build, None
            if item.record is None:  # measured: the close write is measured in its place
                size = record_size(record)
                self._bytes += size - item.size
                item.size = size
            else:
                item.record = record
                self._superseded += 1
                if self._waiting_count() + self._superseded >= self._size_from:
                    self._start_sizing()
            self._wake.notify()
            return True

    def register_trace(self, record: RequestRecord, trace_id: str, *, wait: bool) -> None:
        """Register a new trace: now (``wait``, with ``trace_registration="sync"``) or queued.

        A registration that fails now is logged and queued, or raises ``ControlPlaneError``
        when ``registration_fail_open`` is off.
        """
        if not self.active:
            return
        build = functools.partial(trace_entity, record, trace_id)
        client = self._client
        if not wait or self._settings.trace_registration == "lazy" or client is None:
            self._submit(self._traces, build, record, urgent=False)
            return
        if self._registration_lazy:
            # The last registration got no answer in time and none has been answered in time
            # since: do not make this request wait the same; queue it (or fail fast when strict).
            if not self._settings.registration_fail_open:
                raise ControlPlaneError(self._registration_failure)
            self._submit(self._traces, build, record, urgent=False)
            return
        with self._lock:
            self._registration_waits += 1
        try:
            self._register_now(client, build)
        except ControlPlaneError as exc:
            if _is_transient(exc):
                with self._lock:
                    self._registrations_unanswered += 1
                self._note_failure(exc)
                self._registration_lazy = True
                self._registration_failure = str(exc)
            if not self._settings.registration_fail_open:
                raise
            if self._first_to_say_outage():  # the worker's retries need not say it again
                logger.warning(
                    "trace %s could not be registered now (%s); the registration goes on "
                    "in the background (queued), and so do the next ones until the control "
                    "plane answers a registration within registration_timeout (%g s) again",
                    trace_id,
                    exc,
                    self._registration_bound(),
                )
            self._submit(self._traces, build, record, urgent=False)
        except Exception as exc:  # a record that cannot be built or encoded: never the agent's
            self._count_rejected(_unsendable("trace registration", exc))

    def _register_now(self, client: ControlPlaneClient, build: Callable[[], Trace]) -> None:
        """Register a trace on the caller's thread, within ``registration_timeout``: a control
        plane that has never answered and refuses the connection is tried again until then (it
        may be starting). Raises the last ``ControlPlaneError``."""
        entity = build()
        until = time.monotonic() + self._registration_bound()
        while True:
            try:
                with deadline(max(until - time.monotonic(), 0.0)):
                    client.register_trace(entity)
                return
            except ControlPlaneError as exc:
                starting = exc.refused and not getattr(client, "reached", True)
                if not starting or time.monotonic() + _STARTING_RETRY >= until:
                    raise
                self._note_failure(exc)
            time.sleep(_STARTING_RETRY)

    def submit_envelope(self, build: Build, *, record: Record | None = None) -> None:
        """Queue an envelope (built from ``record``); bounded by ``max_queue`` and
        ``max_queue_bytes`` as ``on_overflow`` says."""
        if not self.active:
            return
        size = self._size(record)
        with self._lock:
            if not self._admit(self._envelopes, size):
                return
            self._append(self._envelopes, build, size, record)
            if len(self._envelopes) >= self._settings.batch_size:
                self._wake.notify()

    @property
    def queued_bytes(self) -> int:
        """Approximate bytes held by the records queued or in flight now."""
        return self._bytes

    def _full(self, queue: collections.deque[_Item], size: int) -> str:
        """Which bound a new record of ``size`` bytes would pass (lock held), else ``""``."""
        settings = self._settings
        if self._bytes and self._bytes + size > settings.max_queue_bytes:
            return (
                f"max_queue_bytes={settings.max_queue_bytes}: about {self._bytes} bytes of "
                "records are waiting"
            )
        if queue is self._envelopes:
            waiting, what = len(queue), "envelopes"
        else:
            waiting, what = len(self._traces) + len(self._spans), "trace and span writes"
        if waiting >= settings.max_queue:
            return f"max_queue={settings.max_queue} {what} are waiting"
        return ""

    def _admit(self, queue: collections.deque[_Item], size: int) -> bool:
        """Whether a new record of ``size`` bytes fits (lock held), after waiting for room with
        ``on_overflow="block"``; a record that does not is counted as dropped."""
        full = self._full(queue, size)
        if not full:
            return True
        if self._settings.on_overflow == "block" and not self._gave_up_blocking:
            self._block_for_room(queue, size)
            full = self._full(queue, size)
            if not full:
                return True
        self._note_dropped(full)
        return False

    def _note_dropped(self, full: str) -> None:
        """A record was dropped because of ``full`` (lock held): counted, warned about once."""
        self._dropped += 1
        if not self._warned_full:
            self._warned_full = True
            logger.warning(
                "the delivery queue is full (%s), so new records are being dropped "
                "(counted; flush() reports them); raise max_queue or max_queue_bytes, or set "
                "on_overflow='block', or check that the control plane keeps up",
                full,
            )

    def _block_for_room(self, queue: collections.deque[_Item], size: int) -> None:
        """Wait (lock held) for room in the queue, at most ``timeout`` seconds.

        When the wait runs out, the control plane is not keeping up (an outage): blocking gives
        way to dropping until delivery makes room again, so the agent waits once per outage.
        """
        until = time.monotonic() + self._settings.timeout
        while self._full(queue, size) and not self._stopping:
            remaining = until - time.monotonic()
            if remaining <= 0:
                self._gave_up_blocking = True
                logger.warning(
                    "the delivery queue stayed full for %g s (on_overflow='block'), so "
                    "new records are dropped and counted until the control plane catches up",
                    self._settings.timeout,
                )
                return
            self._wake.notify()
            self._room.wait(min(remaining, _SIGNAL_CHECK))

    def _submit(
        self,
        queue: collections.deque[_Item],
        build: Build,
        record: Record,
        *,
        urgent: bool,
        opens: tuple[int, int] | None = None,
    ) -> None:
        if not self.active:
            return
        size = self._size(record)
        with self._lock:
            if not self._admit(queue, size):
                return
            self._append(queue, build, size, record)
            if opens is not None:
                item = queue[-1]
                item.opens = opens
                self._open_writes[opens] = item
            if urgent:
                self._wake.notify()

    def _size(self, record: Record | None) -> int:
        """A new record's size for ``max_queue_bytes``: measured while the queue is backed up,
        else a flat estimate (measured later if the queue backs up: ``_append``)."""
        if record is None or not self._sizing:
            return _RECORD_OVERHEAD
        return record_size(record)

    def _append(
        self, queue: collections.deque[_Item], build: Build, size: int, record: Record | None
    ) -> None:
        seq = next(self._seq)
        self._last_submitted = seq
        self._bytes += size
        unsized = None if self._sizing else record
        queue.append(_Item(seq, build, None if queue is self._envelopes else queue, size, unsized))
        if not self._sizing and self._waiting_count() + self._superseded >= self._size_from:
            self._start_sizing()

    def _start_sizing(self) -> None:
        """The queue backed up (lock held): measure what waits, and every record from now on.

        Measuring a record walks its payload (microseconds, on the agent's thread), so while
        delivery keeps up records count as a flat estimate; ``docs/benchmarks.md`` has the
        figures (section "The queue's byte budget").
        """
        self._sizing = True
        for queue in (self._traces, self._spans, self._envelopes):
            for item in queue:
                if item.record is not None:
                    measured = record_size(item.record)
                    self._bytes += measured - item.size
                    item.size, item.record = measured, None
        # What was let in unmeasured may hold more than the budget: the newest envelopes go,
        # counted, as they would have had they been measured when they came.
        budget, envelopes = self._settings.max_queue_bytes, self._envelopes
        while self._bytes > budget and len(envelopes) > 1:
            self._bytes -= envelopes.pop().size
            self._note_dropped(f"max_queue_bytes={budget}: about {self._bytes} bytes waiting")

    def _release(self, items: list[_Item]) -> None:
        """``items`` are resolved (saved, rejected or dropped): their bytes are free again."""
        with self._lock:
            self._bytes -= sum(item.size for item in items)

    def _registration_bound(self) -> float:
        return min(self._settings.registration_timeout, self._settings.timeout)

    # ---- flush and shutdown ---------------------------------------------------------------

    def drain(self, timeout: float) -> bool:
        """Wait until everything submitted before this call is resolved, at most ``timeout`` s.

        Resolved: saved, or counted as rejected. Logs nothing and raises nothing.
        """
        if self._client is None:
            return True
        deadline = time.monotonic() + timeout
        with self._lock:
            target = self._last_submitted
            refusals = self._refusals
            self._wake.notify()  # the worker tries now, whatever its backoff
            while self._oldest_pending() <= target and self._thread is not None:
                if self._refusals > refusals and self.never_reached and not self._starting():
                    break  # nothing ever listened there: waiting longer changes nothing
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._done.wait(min(remaining, _SIGNAL_CHECK))
            return self._oldest_pending() > target

    @property
    def never_reached(self) -> bool:
        """Whether nothing has answered at the control plane's address since this process
        started, and the last attempt found nothing listening (a control plane not started, or
        a wrong ``control_plane_url``), as opposed to one that went away."""
        client = self._client
        return self._refusals > 0 and client is not None and not getattr(client, "reached", True)

    def _starting(self) -> bool:
        """Whether a control plane that has never answered may still be starting: less than
        ``STARTING_SECONDS`` since the first attempt found nothing listening."""
        first = self._first_refusal
        return first is None or time.monotonic() - first < STARTING_SECONDS

    def _wait_for_start(self, bound: float) -> bool:
        """While the control plane has never answered and may be starting, wait for it (and
        what is queued) at most ``bound`` seconds; ``True`` when everything was delivered."""
        if not (self.never_reached and self._starting()) or self._first_refusal is None:
            return False
        left = STARTING_SECONDS - (time.monotonic() - self._first_refusal)
        return self.drain(max(min(left, bound), 0.0))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted before this call is saved, or ``timeout`` passes.

        ``None`` waits at most ``flush_timeout`` seconds. Returns ``True`` when it all arrived
        and nothing was dropped or rejected since the last flush. With ``fail_open=False`` the
        other outcomes raise ``DeliveryError``.
        """
        if self._client is None:
            return True
        bound = self._settings.flush_timeout if timeout is None else timeout
        started = time.monotonic()
        in_time = self.drain(min(1.0, bound))
        if not in_time and self._thread is not None:
            in_time = self._wait_for_start(bound - (time.monotonic() - started))
        if not in_time and self._thread is not None and not self.never_reached and bound > 1.0:
            logger.warning(
                "flush: waiting up to %s more for %d record(s) to reach the control plane at %s%s",
                _seconds(bound - (time.monotonic() - started)),
                self.waiting,
                _where(self._client),
                self._last_outage(),
            )
            in_time = self.drain(max(bound - (time.monotonic() - started), 0.0))
        with self._lock:
            dropped = self._dropped - self._reported_dropped
            rejected = self._rejected - self._reported_rejected
            self._reported_dropped, self._reported_rejected = self._dropped, self._rejected
            waiting = self._waiting_count()
        ok = in_time and not dropped and not rejected
        if not ok:
            problem = _problem(in_time, dropped, rejected, waiting, self._unreachable())
            if not self._settings.fail_open:
                raise DeliveryError(problem)
            logger.warning("flush: %s", problem)
        return ok

    def shutdown(self, timeout: float | None) -> bool:
        """Deliver what is queued within ``timeout`` seconds, then stop. Idempotent.

        ``None`` waits at most ``flush_timeout`` seconds.
        """
        if timeout is None:
            timeout = self._settings.flush_timeout
        return self._stop(timeout, join=timeout + 1.0)

    def _stop(self, timeout: float, *, join: float) -> bool:
        """``shutdown``, waiting at most ``join`` seconds for the worker to end."""
        thread = self._thread
        if thread is None:
            return True
        with self._lock:
            self._stopping = True
            self._deadline = time.monotonic() + timeout
            self._wake.notify()
            self._room.notify_all()
        until = time.monotonic() + join
        while thread.is_alive() and (remaining := until - time.monotonic()) > 0:
            thread.join(min(remaining, _SIGNAL_CHECK))
        with self._lock:
            left = self._waiting_count()
            self._let_go()
            self._done.notify_all()
        if self._client is not None:
            self._client.close()
        if left and self.never_reached:
            logger.error("shutdown: %d record(s) are lost: %s", left, self._unreachable())
        elif left:
            logger.error(
                "%d record(s) were not delivered before shutdown because the control "
                "plane did not take them in time; they are lost. Give shutdown()/flush() more "
                "time, or check the control plane",
                left,
            )
        return left == 0 and self._dropped == self._reported_dropped

    def deliver_before_exit(self, why: str, *, stop: bool = True) -> None:
        """Deliver what is queued before the process ends, waiting at most ``exit_timeout``.

        Says so in one line when the wait goes past a second (what it waits for, how many
        records, what is lost if it gives up), and in one line what was lost. Ctrl-C during the
        wait gives up at once, quietly (no traceback). ``stop`` also stops the worker (the
        process is ending); without it (a SIGTERM handler of the user's runs next, and the
        process may go on) delivery keeps running. Never raises.
        """
        if self._client is None or self._thread is None:
            return
        started = time.monotonic()
        if self._exit_deadline is None:
            self._exit_deadline = started + self._settings.exit_timeout
        bound = self.exit_time_left()
        try:
            done = self.drain(min(1.0, bound))
            if not done:
                done = self._wait_for_start(bound - (time.monotonic() - started))
            if not done and self.never_reached:
                logger.error(
                    "%s: %d record(s) are lost: %s",
                    why,
                    self.waiting,
                    self._unreachable(),
                )
                self._abandon()
                return
            if not done and bound - (time.monotonic() - started) > 0:
                logger.warning(
                    "%s: delivering %d queued record(s) to the control plane at %s, "
                    "waiting up to %s more; what is not delivered by then is lost (Ctrl-C "
                    "gives up now)",
                    why,
                    self.waiting,
                    _where(self._client),
                    _seconds(bound - (time.monotonic() - started)),
                )
                done = self.drain(max(bound - (time.monotonic() - started), 0.0))
        except KeyboardInterrupt:
            logger.warning(
                "%s: interrupted; %d record(s) not delivered are lost", why, self.waiting
            )
            self._abandon()
            if stop:
                _die_interrupted()  # as an interrupted process does: killed by SIGINT (130)
            return
        if stop:
            self._stop(0, join=self.exit_time_left())
        elif not done:
            logger.error(
                "%s: %d record(s) were not delivered within exit_timeout (%g s) and "
                "may be lost; raise exit_timeout, or check the control plane",
                why,
                self.waiting,
                self._settings.exit_timeout,
            )

    def exit_time_left(self) -> float:
        """Seconds left of the exit wait (``exit_timeout`` from the first
        ``deliver_before_exit``; all of it before that)."""
        if self._exit_deadline is None:
            return self._settings.exit_timeout
        return max(self._exit_deadline - time.monotonic(), 0.0)

    def _abandon(self) -> None:
        """Stop at once, leaving what is queued (the user gave up waiting; it was reported)."""
        with self._lock:
            self._stopping = True
            self._deadline = time.monotonic()
            self._let_go()
            self._wake.notify()
            self._done.notify_all()
            self._room.notify_all()

    def _let_go(self) -> None:
        """Empty the queues and forget the worker (the lock held; it has stopped or given up)."""
        self._traces.clear()
        self._spans.clear()
        self._envelopes.clear()
        self._open_writes.clear()
        self._superseded = 0
        self._bytes = 0
        self._thread = None

    @property
    def dropped(self) -> int:
        """Envelopes dropped because the queue was full, since start."""
        return self._dropped

    @property
    def rejected(self) -> int:
        """Records the control plane rejected as invalid, since start."""
        return self._rejected

    @property
    def registration_waits(self) -> int:
        """Trace registrations made on the agent's thread since start (``trace_registration=
        "sync"``): each held its request, at most ``registration_timeout``. Requests that are
        queued (lazy registration, kept requests, an outage) do not count: they never wait."""
        return self._registration_waits

    @property
    def registrations_unanswered(self) -> int:
        """Of ``registration_waits``, those the control plane did not answer in time (or
        refused): the requests that waited the whole bound. At most one per outage, since the
        next registrations are queued until the control plane answers one in time again."""
        return self._registrations_unanswered

    def _oldest_pending(self) -> int:
        heads = [q[0].seq for q in (self._traces, self._spans, self._envelopes) if q]
        heads.extend(item.seq for item in self._in_flight)
        return min(heads) if heads else self._last_submitted + 1

    def _waiting_count(self) -> int:
        return len(self._traces) + len(self._spans) + len(self._envelopes) + len(self._in_flight)

    # ---- the worker -----------------------------------------------------------------------

    def _start_worker(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chronicle-delivery", daemon=True)
        # Started in an empty context: the worker must not carry (and keep alive) the request or
        # replay of whoever happened to start it.
        token = otel_context.attach(otel_context.Context())
        try:
            self._thread.start()
        finally:
            otel_context.detach(token)

    def _after_fork(self) -> None:
        # The parent's queue belongs to the parent; the child starts empty with its own worker
        # (and its own connections: the client has a fork hook of its own).
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._traces.clear()
        self._spans.clear()
        self._envelopes.clear()
        self._open_writes.clear()
        self._superseded = 0
        self._bytes = 0
        self._exit_deadline = None
        self._in_flight = []
        self._dropped = self._rejected = self._reported_dropped = self._reported_rejected = 0
        self._registration_waits = self._registrations_unanswered = 0
        self._outage_logged = self._gave_up_blocking = self._registration_lazy = False
        if self._thread is not None and not self._stopping:
            self._start_worker()
            # A multiprocessing worker ends with os._exit(), which skips atexit, after running
            # its finalizers; those are cleared when the worker starts, and then its after-fork
            # callbacks run: that is where the finalizer is added. (Only with multiprocessing.)
            util = sys.modules.get("multiprocessing.util")
            if util is not None:
                util.register_after_fork(self, _add_worker_finalizer)

    def _run(self) -> None:
        otel_context.attach(suppressed())
        backoff = 0.0
        while True:
            with self._lock:
                if backoff:
                    self._wake.wait(self._pause(backoff))
                elif not self._due():
                    self._wake.wait(self._settings.flush_interval)
                if self._stopping and (not self._waiting_count() or self._past_deadline()):
                    return
            try:
                delivered = self._deliver_all()
            except Exception:  # a bug here must not kill the worker and strand the queue
                logger.exception("delivery failed unexpectedly; retrying")
                self._requeue_in_flight()
                delivered = False
            if delivered:
                self._last_failure = None
                if self._outage_logged:
                    self._outage_logged = False
                    logger.warning("the control plane is reachable again; delivering")
                backoff = 0.0
            elif self.never_reached and self._starting():
                backoff = _BACKOFF_START  # a control plane that may be starting: look again soon
            else:
                backoff = min(max(backoff * 2, _BACKOFF_START), _BACKOFF_MAX)

    def _due(self) -> bool:
        """Whether to deliver now rather than wait for the next interval (lock held)."""
        if self._traces or self._spans or self._stopping:
            return True
        return len(self._envelopes) >= self._settings.batch_size

    def _past_deadline(self) -> bool:
        """Whether a stopping worker stops trying: its deadline passed, or nothing has ever
        answered at the control plane's address and it is no longer taken to be starting
        (waiting longer changes nothing: ``shutdown()``, and so ``configure()`` again, give up
        at once, as the exit wait does)."""
        if self._deadline is None:
            return False
        return time.monotonic() >= self._deadline or (self.never_reached and not self._starting())

    def _pause(self, backoff: float) -> float:
        if self._deadline is None:
            return backoff
        return max(0.0, min(backoff, self._deadline - time.monotonic()))

    def _deliver_all(self) -> bool:
        """Send what is queued, the kinds taking turns. ``False`` when the control plane is away.

        Each step sends one request (a trace registration, a span write, or a batch of
        envelopes) of the kind that has had the least of the worker's time so far, among those
        with something queued: under sustained load each kind gets an equal share of the time,
        so a stream of one kind never holds the others back. A kind gets no credit for time it
        had nothing to send.
        """
        spent = self._spent
        while True:
            with self._lock:
                active = [kind for kind in _KINDS if self._queue_for(kind)]
            if not active:
                return True
            floor = min(spent[kind] for kind in active)
            for kind in _KINDS:
                spent[kind] = spent[kind] - floor if kind in active else 0.0
            kind = min(active, key=spent.__getitem__)
            started = time.monotonic()
            if kind == "envelopes":
                sent = self._send_batch()
            else:
                send = self._send_trace if kind == "traces" else self._send_span
                sent = self._send_next(self._queue_for(kind), send)
            spent[kind] += time.monotonic() - started
            if sent is False:
                return False

    def _queue_for(self, kind: str) -> collections.deque[_Item]:
        if kind == "traces":
            return self._traces
        return self._spans if kind == "spans" else self._envelopes

    def _send_next(
        self, queue: collections.deque[_Item], send: Callable[[Any], None]
    ) -> bool | None:
        """Send the oldest item of ``queue``: ``None`` if empty, ``False`` if it must wait."""
        with self._lock:
            if not queue:
                return None
            item = queue.popleft()
            if item.opens is not None:  # on its way: a close write no longer replaces it
                self._open_writes.pop(item.opens, None)
                item.opens = None
            self._in_flight = [item]
        started = time.monotonic()
        answered = self._send_one(item, send)
        if answered is False:
            with self._lock:
                queue.appendleft(item)
                self._in_flight = []
            return False
        self._release([item])
        if answered and queue is self._traces:
            self._registered(time.monotonic() - started)
        self._resolved()
        return True

    def _send_batch(self) -> bool | None:
        """Send one batch of envelopes: ``None`` if none wait, ``False`` if they must wait."""
        batch, bodies = self._take_batch()
        if not batch:
            return None
        if not self._send_envelopes(batch, bodies):
            with self._lock:
                self._envelopes.extendleft(reversed(batch))
                self._in_flight = []
            return False
        self._release(batch)
        self._resolved()
        return True

    def _registered(self, took: float) -> None:
        """A queued trace registration was answered in ``took`` seconds: when that is within
        ``registration_timeout`` and the backlog is delivered (fewer than ``2 x batch_size``
        records wait: the queue is not backed up), the control plane registers in time again,
        so the next request's registration may wait for its answer again. Only a
        registration's answer says so, and only once the backlog is through: a control plane
        still starting answers a span write at once and may hold the next registration, and one
        receiving the backlog answers a registration between two batches and holds the next
        behind a batch (the burst soak saw each make requests wait in vain again, 3 to 8 times,
        after the outage)."""
        if took <= self._registration_bound():
            with self._lock:
                caught_up = self._waiting_count() < self._size_from
            if caught_up:
                self._registration_lazy = False

    def _requeue_in_flight(self) -> None:
        """Put what was being sent back at the head of its queue (after an unexpected error)."""
        with self._lock:
            items, self._in_flight = self._in_flight, []
            if items:
                logger.debug("%d record(s) requeued", len(items))
            for item in reversed(items):
                self._queue_of(item).appendleft(item)

    def _queue_of(self, item: _Item) -> collections.deque[_Item]:
        return item.queue if item.queue is not None else self._envelopes

    def _resolved(self) -> None:
        with self._lock:
            self._in_flight = []
            if self._sizing and not self._waiting_count():
                self._sizing = False  # caught up: new records count as flat estimates again
            if not self._waiting_count():
                self._superseded = 0
            if self._gave_up_blocking and len(self._envelopes) < self._settings.max_queue:
                self._gave_up_blocking = False  # delivery made room: block again when full
            self._done.notify_all()
            self._room.notify_all()

    def _send_one(self, item: _Item, send: Callable[[Any], None]) -> bool | None:
        """Send one record: ``True`` when the control plane answered it (stored or rejected),
        ``False`` when it must wait (no answer, or a transient one), ``None`` when it was never
        sent (it could not be built or encoded: counted as rejected)."""
        entity = self._build(item)
        if entity is None:
            return None
        try:
            send(entity)
        except ControlPlaneError as exc:
            if _is_transient(exc):
                self._log_outage(exc)
                return False
            self._reject(exc, 1)
        except Exception as exc:  # it could not be encoded: this record alone is lost, counted
            self._count_rejected(_unsendable(type(entity).__name__.lower(), exc))
            return None
        return True

    def _send_trace(self, trace: Trace) -> None:
        assert self._client is not None
        self._client.register_trace(trace)

    def _send_span(self, span: Span) -> None:
        assert self._client is not None
        self._client.put_span(span)

    def _take_batch(self) -> tuple[list[_Item], list[bytes]]:
        max_batch, max_body = self._server_limits()
        count_limit = max(1, min(self._settings.batch_size, max_batch))
        with self._lock:  # one acquisition per batch, so the agent's appends never queue behind us
            taken = [
                self._envelopes.popleft() for _ in range(min(count_limit, len(self._envelopes)))
            ]
            self._in_flight.extend(taken)
        batch: list[_Item] = []
        bodies: list[bytes] = []
        dropped: list[_Item] = []
        size = _BATCH_OVERHEAD
        for position, item in enumerate(taken):
            built = self._build(item)
            if built is None:
                dropped.append(item)
                continue
            try:
                body = built if isinstance(built, bytes) else body_of(built)
            except Exception as exc:  # it cannot be encoded: it alone is lost, and counted
                self._count_rejected(_unsendable("envelope", exc))
                dropped.append(item)
                continue
            if len(body) + _BATCH_OVERHEAD > max_body:
                self._count_rejected(
                    f"an envelope of {len(body)} bytes is over the server's max_body_bytes "
                    f"({max_body}); lower max_payload_bytes so long strings are cut"
                )
                dropped.append(item)
                continue
            if batch and size + len(body) + 1 > max_body:
                # Does not fit: it and the rest open the next batch, in their order.
                rest = taken[position:]
                with self._lock:
                    self._envelopes.extendleft(reversed(rest))
                    for other in rest:
                        self._in_flight.remove(other)
                break
            batch.append(item)
            bodies.append(body)
            size += len(body) + 1
        if dropped:
            with self._lock:
                for item in dropped:
                    self._in_flight.remove(item)
            self._release(dropped)
        return batch, bodies

    def _send_envelopes(self, batch: list[_Item], bodies: list[bytes]) -> bool:
        """Post ``bodies``; on an invalid-payload answer, split until the bad one is isolated."""
        assert self._client is not None
        try:
            self._client.post_envelopes(b'{"envelopes":[' + b",".join(bodies) + b"]}")
            return True
        except ControlPlaneError as exc:
            if _is_transient(exc):
                self._log_outage(exc)
                return False
            if exc.status_code == 413:
                self._limits = None  # the server's limit may have changed; read it again
            if len(bodies) == 1:
                self._reject(exc, 1)
                return True
            half = len(bodies) // 2
            return self._send_envelopes(batch[:half], bodies[:half]) and self._send_envelopes(
                batch[half:], bodies[half:]
            )

    def _build(self, item: _Item) -> Any:
        try:
            return item.build()
        except Exception as exc:  # invalid data: a bug report, not a reason to stop delivery
            self._count_rejected(
                f"a record could not be built and is dropped ({type(exc).__name__}: "
                f"{str(exc)[:300]}); please report this with the boundary that produced it"
            )
            return None

    def _server_limits(self) -> tuple[int, int]:
        if self._limits is None:
            assert self._client is not None
            try:
                health = self._client.health()
                max_batch = health.get("max_batch")
                max_body = health.get("max_body_bytes")
                self._limits = (
                    max_batch
                    if isinstance(max_batch, int) and max_batch > 0
                    else _DEFAULT_MAX_BATCH,
                    max_body if isinstance(max_body, int) and max_body > 0 else _DEFAULT_MAX_BODY,
                )
            except ControlPlaneError:
                return _DEFAULT_MAX_BATCH, _DEFAULT_MAX_BODY  # ask again next time
        return self._limits

    def _reject(self, exc: ControlPlaneError, count: int) -> None:
        self._count_rejected(f"the control plane rejected a record and it is dropped: {exc}", count)

    def _count_rejected(self, message: str, count: int = 1) -> None:
        with self._lock:
            self._rejected += count
            first = message not in self._rejections_logged
            if first and len(self._rejections_logged) < 100:
                self._rejections_logged.add(message)
        if first:
            logger.error("%s", message)

    def _note_failure(self, exc: ControlPlaneError) -> None:
        """An attempt found the control plane away: remember why (for what flush and exit say)."""
        with self._lock:
            self._last_failure = exc
            if exc.refused:
                self._refusals += 1
                if self._first_refusal is None:
                    self._first_refusal = time.monotonic()
                self._done.notify_all()  # a flush waiting on a control plane never reached

    def _last_outage(self) -> str:
        failure = self._last_failure
        return f" (the last attempt: {failure})" if failure is not None else ""

    def _unreachable(self) -> str:
        """What to say when nothing ever answered at the control plane's address, else ``""``."""
        if not self.never_reached or self._client is None:
            return ""
        return (
            f"nothing has answered at {_where(self._client)} since the process started "
            "(connection refused): start the control plane, or set control_plane_url"
        )

    def _first_to_say_outage(self) -> bool:
        """Whether the caller is the first to find this outage, and so the one to say it: the
        worker's retry and a registration on the agent's thread may find it at the same time
        (the request span's open write is queued before its trace is registered), and a person
        reads one line for one outage."""
        with self._lock:
            first, self._outage_logged = not self._outage_logged, True
        return first

    def _log_outage(self, exc: ControlPlaneError) -> None:
        self._note_failure(exc)
        if self._first_to_say_outage():
            logger.warning(
                "%s; retrying with backoff, %d record(s) waiting (nothing is lost "
                "while the queue has room)",
                exc,
                self._waiting_count(),
            )


def _seconds(value: float) -> str:
    """A wait as a person reads it: ``9 s``, ``0.5 s``."""
    value = max(value, 0.0)
    return f"{value:.0f} s" if value >= 1.5 else f"{value:.1f} s"


def _die_interrupted() -> None:
    """End the process as Ctrl-C ends one (killed by SIGINT: exit status 130 in a shell)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except (OSError, ValueError):  # not the main thread, or no such signal: exit normally
        pass


def _unsendable(what: str, exc: Exception) -> str:
    return (
        f"a {what} could not be encoded and is dropped alone ({type(exc).__name__}: "
        f"{str(exc)[:300]}); please report this with the call that produced it"
    )


def _where(client: ControlPlaneClient) -> str:
    shown = getattr(client, "shown_url", None)
    return shown if isinstance(shown, str) else type(client).__name__


def deliver_at_worker_exit(delivery: Delivery) -> None:
    """In a ``multiprocessing`` worker process, deliver ``delivery``'s queue when it ends.

    For a delivery built inside the worker (its initializer, or first use there), whatever the
    start method: ``forkserver`` and ``fork`` workers end with ``os._exit()``, which skips
    ``atexit``, so only a multiprocessing finalizer runs. (A delivery built before a ``fork``
    gets its finalizer in ``_after_fork``.) Nothing happens outside a worker, or when
    ``multiprocessing`` was never imported (then this is no worker).
    """
    mp = sys.modules.get("multiprocessing")
    if delivery._client is None or mp is None or mp.parent_process() is None:
        return
    _add_worker_finalizer(delivery)


def _add_worker_finalizer(delivery: Delivery) -> None:
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        weak = weakref.WeakMethod(delivery.deliver_before_exit)
        util.Finalize(None, _finalize_worker, args=(weak,), exitpriority=100)


def _finalize_worker(weak: weakref.WeakMethod[Callable[..., None]]) -> None:
    method = weak()
    if method is not None:
        method("multiprocessing worker exit")


def _is_transient(exc: ControlPlaneError) -> bool:
    code = exc.status_code
    return code is None or code in _TRANSIENT or code >= 500


def _problem(in_time: bool, dropped: int, rejected: int, waiting: int, unreachable: str) -> str:
    parts = []
    if not in_time and unreachable:
        said = (
            f"{waiting} record(s) not delivered: {unreachable}; they stay queued and are retried "
            "in the background"
        )
        if dropped:
            said += f"; {dropped} record(s) dropped because the queue was full meanwhile"
        return said
    if not in_time:
        parts.append(f"{waiting} record(s) still waiting when the timeout passed")
    if dropped:
        parts.append(
            f"{dropped} record(s) dropped because the queue was full (max_queue or max_queue_bytes)"
        )
    if rejected:
        parts.append(f"{rejected} record(s) rejected as invalid (see the earlier error)")
    return "; ".join(parts) + "; check the control plane, or raise max_queue / the flush timeout"
