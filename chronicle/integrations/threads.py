"""Boundaries in worker threads: the request span (and a replay) follow the work.

Chronicle's state (the request span, the enclosing boundary, an active replay) lives in the
OpenTelemetry Context. By default (the ``thread_context`` setting) Chronicle carries that context
into ``threading.Thread``, ``threading.Timer``, ``ThreadPoolExecutor.submit``/``map`` and so
``loop.run_in_executor`` (see ``chronicle.otel.threads``), the way OpenTelemetry's threading
instrumentation does; ``asyncio.to_thread`` copies it by itself. A boundary called there is
recorded into the submitting request span, parented on the boundary that was active at
submission (if any), and is stubbed in a replay like any other. Once that request span has
closed, a thread still running (a heartbeat, a poller) records each call in a request span of
its own, in a new trace: a finished request gains nothing after its end.

For explicit use (``thread_context=False``, another kind of executor, a callback handed to a
library that runs it later):

- ``ChronicleExecutor(max_workers=...)``: a ``ThreadPoolExecutor`` whose ``submit`` (and so
  ``map``, and ``loop.run_in_executor(executor, ...)``) always runs each call in the OpenTelemetry
  context of the code that submitted it.
- ``propagate(fn)``: ``fn`` bound to the context current *now*; call it in any thread.

Only the OpenTelemetry context is carried; for your own context variables use
``contextvars.copy_context().run``. Concurrent calls of one boundary are numbered in the order
they start; replay them with ``match="input"`` when that order varies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar, cast

from opentelemetry import context as otel_context
from typing_extensions import override

from chronicle.otel.threads import in_context

__all__ = ["ChronicleExecutor", "propagate"]

P = ParamSpec("P")
R = TypeVar("R")


def propagate(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run in the OpenTelemetry context current when ``propagate`` was called.

    The returned callable may be called any number of times, from any thread, concurrently.
    """
    if not callable(fn):
        raise TypeError(f"propagate() takes a callable, got {type(fn).__name__}")
    return cast(Callable[P, R], functools.wraps(fn)(in_context(otel_context.get_current(), fn)))


class ChronicleExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that runs each submitted call in its submitter's OTel context."""

    @override
    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return super().submit(propagate(fn), *args, **kwargs)
