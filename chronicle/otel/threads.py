"""The OpenTelemetry context follows work into threads and thread pools.

A new thread starts with an empty context, so without help a boundary called there sees no
request span (and no replay). ``carry_context_into_threads(True)`` patches, process-wide and
once:

- ``threading.Thread.start``: the thread runs in the context current where ``start()`` was
  called (``threading.Timer`` and subclasses that override ``run`` included);
- ``concurrent.futures.ThreadPoolExecutor.submit``: each submitted call runs in the submitter's
  context, and so do ``map`` and ``loop.run_in_executor`` (which submits from the running task).

This is what OpenTelemetry's ``opentelemetry-instrumentation-threading`` does; Chronicle does it
itself because that package pins an exact ``opentelemetry-instrumentation`` version, which
conflicts with the user's other instrumentations whenever their releases differ. Both can be
active at once: the same context is attached twice, which changes nothing.

The context carried is the one current at ``start()``/``submit()``; it does not outlive its
request span. A thread that runs on after the request ended (a heartbeat, a poller) records
each later call in a request span of its own, in a new trace, as a call outside any request
is recorded (``recording/session.py``, ``current_session_in``): not into the closed request,
whose Span was already written and whose trace would otherwise go on growing after the
request ended, and not flagged there either, since such a call belongs to no request.

The patches wrap whatever ``start``/``submit`` are at the time (another instrumentation's
wrapper included) and are never removed; ``carry_context_into_threads(False)`` makes them pass
straight through. A pool's worker threads are started in an empty context, so an idle worker
keeps no request (or replay) alive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from opentelemetry import context as otel_context

_lock = threading.Lock()
_enabled = False
_installed = False


def carry_context_into_threads(enabled: bool) -> None:
    """Carry the OTel context into threads and pools from now on (or stop). Idempotent."""
    global _enabled, _installed
    with _lock:
        _enabled = enabled
        if enabled and not _installed:
            _install()
            _installed = True


def carries_context() -> bool:
    """Whether threads and pools started from now on carry the OTel context."""
    return _enabled


def in_context(ctx: otel_context.Context, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run in ``ctx`` (attached for the call, detached after), from any thread."""

    def run_in_context(*args: Any, **kwargs: Any) -> Any:
        token = otel_context.attach(ctx)
        try:
            return fn(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return run_in_context


def _install() -> None:
    previous_start = threading.Thread.start
    previous_submit = ThreadPoolExecutor.submit

    def start(self: threading.Thread) -> None:
        ctx = otel_context.get_current()
        if _enabled and ctx:  # an empty context has nothing to carry
            # An instance attribute shadows the class's run(), a subclass's override included.
            self.run = in_context(ctx, self.run)  # type: ignore[method-assign]
        previous_start(self)

    def submit(
        self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        ctx = otel_context.get_current()
        if not (_enabled and ctx):
            return previous_submit(self, fn, *args, **kwargs)
        # The pool may start a worker thread here: it must not keep this context while idle.
        token = otel_context.attach(otel_context.Context())
        try:
            return previous_submit(self, in_context(ctx, fn), *args, **kwargs)
        finally:
            otel_context.detach(token)

    start.__wrapped__ = previous_start  # type: ignore[attr-defined]
    submit.__wrapped__ = previous_submit  # type: ignore[attr-defined]
    threading.Thread.start = start  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = submit  # type: ignore[method-assign, assignment]
