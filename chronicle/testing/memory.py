"""The in-memory double of the control plane: ``InMemoryControlPlane``, and ``capture()``, which
configures Chronicle to deliver to one for a block (both importable from ``chronicle.testing``,
which loads this module when first asked for one of them)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from agentplane_primitives.models import Envelope, Span, Trace
from typing_extensions import override

from chronicle import runtime, wire
from chronicle.errors import ControlPlaneError
from chronicle.save.client import ControlPlaneClient

__all__ = ["InMemoryControlPlane", "capture"]


class InMemoryControlPlane(ControlPlaneClient):
    """A ``ControlPlaneClient`` that keeps what it is sent, validated with the primitives models.

    ``traces``, ``spans`` (by ``(trace_id, span_id)``) and ``envelopes`` (every stored envelope,
    in call order within its span) are the models as the control plane would hold them.
    """

    def __init__(self, *, max_batch: int = 100, max_body_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.traces: dict[str, Trace] = {}
        self.spans: dict[tuple[str, str], Span] = {}
        self._envelopes: dict[tuple[str, str], Envelope] = {}
        self._lock = threading.Lock()

    @property
    def envelopes(self) -> list[Envelope]:
        """Every stored envelope, ordered by span and ``chronicle.sequence``."""
        with self._lock:
            stored = list(self._envelopes.values())
        return sorted(stored, key=lambda e: (e.trace_id, e.span_id, _sequence(e)))

    @override
    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        return [
            e.model_dump(mode="json", exclude_none=True)
            for e in self.envelopes
            if (e.trace_id, e.span_id) == (trace_id, span_id)
        ]

    @override
    def health(self) -> dict[str, Any]:
        return {"status": "ok", "max_batch": self.max_batch, "max_body_bytes": self.max_body_bytes}

    @override
    def register_trace(self, trace: Trace) -> None:
        model = Trace.model_validate(trace.model_dump())  # a copy, validated again
        with self._lock:
            known = self.traces.get(model.trace_id)
            if known is None:
                self.traces[model.trace_id] = model
                return
            # As the control plane does when a span or envelope created the trace first: the
            # name is set if it has none, and labels are written once.
            update: dict[str, object] = {}
            if known.name is None and model.name:
                update["name"] = model.name
            if not known.metadata and model.metadata:
                update["metadata"] = model.metadata
            if update:
                self.traces[model.trace_id] = known.model_copy(update=update)

    @override
    def put_span(self, span: Span) -> None:
        model = Span.model_validate(span.model_dump())
        key = (model.trace_id, model.span_id)
        with self._lock:
            known = self.spans.get(key)
            if known is None or known.state.value != "closed":
                self.spans[key] = model
            self.traces.setdefault(
                model.trace_id, Trace(trace_id=model.trace_id, state=model.state)
            )

    @override
    def post_envelopes(self, body: bytes) -> None:
        if len(body) > self.max_body_bytes:
            raise ControlPlaneError("payload too large", status_code=413)
        items = json.loads(body)["envelopes"]
        if len(items) > self.max_batch:
            raise ControlPlaneError(f"batch max {self.max_batch}", status_code=400)
        try:
            batch = [Envelope.model_validate(item) for item in items]
        except ValueError as exc:
            raise ControlPlaneError(f"invalid envelope: {exc}", status_code=400) from None
        with self._lock:
            for model in batch:
                key = (model.trace_id, model.envelope_id)
                known = self._envelopes.get(key)
                if known is None or known.envelope_status.state.value != "closed":
                    self._envelopes[key] = model

    @override
    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        with self._lock:
            trace = self.traces.get(trace_id)
            spans = [s for (t, _), s in self.spans.items() if t == trace_id]
        if trace is None:
            return None
        body = trace.model_dump(mode="json", exclude_none=True)
        body["spans"] = [s.model_dump(mode="json", exclude_none=True) for s in spans]
        return body

    def close(self) -> None:
        """Nothing to release."""


def _sequence(envelope: Envelope) -> int:
    sequence = wire.sequence_of(envelope)
    return sequence if sequence is not None else 1 << 62


@contextlib.contextmanager
def capture(**settings: object) -> Iterator[InMemoryControlPlane]:
    """Configure Chronicle to deliver to a fresh ``InMemoryControlPlane`` for the block.

    ``settings`` are ``configure()`` settings. On exit everything queued is flushed into the
    double (so it is complete when the block ends) and Chronicle is reset.
    """
    double = InMemoryControlPlane()
    runtime.install(double, **{"flush_interval": 0.01, **settings})
    try:
        yield double
    finally:
        runtime.flush(10)
        runtime.reset()
