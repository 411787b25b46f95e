"""The delivery targets of the benchmarks that run this Chronicle: ``ControlPlaneClient``s that
drop what they are given (``Discard``), keep it (``Capture``) or hold their first batch
(``Held``), installed with ``chronicle.runtime.install``; and ``drop_queued``, the benchmarks' one
reach into a delivery's private queues.

The envelopes are still built, validated and serialized by the delivery thread: only the network
is skipped. Standard library only, so that a callgrind child (``instructions.py``) can use them
beside any tree's Chronicle; nothing here imports ``chronicle`` (the prior implementation's client
interface is another, in ``prior.py``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

LIMITS = {"max_batch": 100, "max_body_bytes": 4 * 1024 * 1024}
"""What ``health()`` answers: the control plane's batch limits."""


class Discard:
    """A ``ControlPlaneClient`` that drops every body."""

    def health(self) -> dict[str, Any]:
        return dict(LIMITS)

    def register_trace(self, trace: object) -> None:
        pass

    def put_span(self, span: object) -> None:
        pass

    def post_envelopes(self, body: bytes) -> None:
        pass

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        return None

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


class Capture(Discard):
    """Keeps the envelope bodies it is given (to post them raw for the delivery ceiling)."""

    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []

    def post_envelopes(self, body: bytes) -> None:
        self.envelopes.extend(json.loads(body)["envelopes"])


class Held(Discard):
    """Holds its first batch post until released (``release()`` or ``close()``): the delivery
    worker sits idle and everything recorded after it stays queued."""

    def __init__(self) -> None:
        self._released = threading.Event()

    def post_envelopes(self, body: bytes) -> None:
        self._released.wait()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self.release()


def drop_queued(delivery: Any, *, in_flight: bool = False) -> None:
    """Forget what ``delivery`` (a ``chronicle.save.delivery.Delivery``) has queued, without
    delivering it, so that it does not slow the next timed block down; with ``in_flight``, the
    batch the worker holds and the queue's byte count too (the worker must be held: ``Held``).

    A private reach into the delivery, for the benchmarks only.
    """
    with delivery._lock:
        for queue in (delivery._traces, delivery._spans, delivery._envelopes):
            queue.clear()
        if in_flight:
            delivery._in_flight.clear()
            delivery._bytes, delivery._sizing = 0, False
