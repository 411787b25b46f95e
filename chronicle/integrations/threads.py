"""Boundaries in worker threads: carry the request span (and a replay) into an executor.

Chronicle's state (the request span, the enclosing boundary, an active replay) lives in the
OpenTelemetry Context, a context variable. A new thread starts with an empty context, so a
boundary called there would see no request span and record a trace of its own. What carries
the context over:

- ``asyncio.to_thread(fn, ...)`` copies the context by itself: nothing to do.
- ``loop.run_in_executor(...)`` and ``ThreadPoolExecutor.submit``/``map`` do **not**. Use one
  of:

  - ``ChronicleExecutor(max_workers=...)``: a ``ThreadPoolExecutor`` whose ``submit`` (and so
    ``map``, and ``loop.run_in_executor(executor, ...)``) runs each call in the OpenTelemetry
    context of the code that submitted it. ``loop.set_default_executor(ChronicleExecutor())``
    makes ``loop.run_in_executor(None, ...)`` do the same.
  - ``propagate(fn)``: ``fn`` bound to the context current *now*; call it in any thread
    (``pool.submit(chronicle.propagate(fn), x)``, ``loop.run_in_executor(None, propagate(fn))``,
    ``threading.Thread(target=propagate(fn))``).

A boundary called through either is recorded into the submitting request span, parented on the
boundary that was active at submission (if any), and is stubbed in a replay like any other. Only
the OpenTelemetry context is carried (what OpenTelemetry's own threading instrumentation does);
for your own context variables use ``contextvars.copy_context().run``.

Concurrent calls of the same boundary are numbered in the order they start. Replay matches by
name and number, so calls of one name whose start order varies between runs can be matched to
each other's recordings: give them distinct names, or start them in a fixed order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from opentelemetry import context as otel_context
from typing_extensions import override

__all__ = ["ChronicleExecutor", "propagate"]

P = ParamSpec("P")
R = TypeVar("R")


def propagate(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run in the OpenTelemetry context current when ``propagate`` was called.

    The returned callable may be called any number of times, from any thread, concurrently.
    """
    if not callable(fn):
        raise TypeError(f"propagate() takes a callable, got {type(fn).__name__}")
    captured = otel_context.get_current()

    @functools.wraps(fn)
    def run_in_context(*args: P.args, **kwargs: P.kwargs) -> R:
        token = otel_context.attach(captured)
        try:
            return fn(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return run_in_context


class ChronicleExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that runs each submitted call in its submitter's OTel context."""

    @override
    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return super().submit(propagate(fn), *args, **kwargs)
