"""``ChronicleSpanProcessor``: Chronicle's spans become Span and Envelope entities.

Chronicle starts each request span and boundary span with its record in the context handed to
``start_span`` (under ``RECORD_KEY``, never attached, so no other span inherits it). On start the
processor claims that record and queues the open write; on end it queues the close write. The
record holds the exact, redacted payload, so what is saved does not depend on the span limits
that cut the display attributes. Every other span is ignored: nesting across them comes from the
Chronicle state carried in the context.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from chronicle.otel.context import RECORD_KEY

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span

    from chronicle.save.delivery import Delivery

logger = logging.getLogger("chronicle")


class SpanRecord(Protocol):
    """What Chronicle attaches to a span it starts."""

    def claim(self) -> bool:
        """True for the first processor that asks (a provider may hold two by mistake)."""
        ...

    def started(self, span: Span, delivery: Delivery) -> None:
        """The span started: learn its ids, queue the open write if there is one."""
        ...

    def ended(self, span: ReadableSpan, delivery: Delivery) -> None:
        """The span ended: queue the close write."""
        ...


class ChronicleSpanProcessor(SpanProcessor):
    """Saves Chronicle's spans to the control plane through the configured delivery.

    ``configure()`` adds one to the provider it records through. Add it by hand to a provider
    you build yourself: ``provider.add_span_processor(chronicle.ChronicleSpanProcessor())``, then
    ``chronicle.configure(tracer_provider=provider)``. Never blocks and never raises.
    """

    def __init__(self) -> None:
        # Span id -> record of Chronicle's live spans. Plain dict operations are atomic in
        # CPython, so spans starting and ending on many threads need no lock here.
        self._live: dict[int, SpanRecord] = {}

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        if parent_context is None:
            return
        record: SpanRecord | None = parent_context.get(RECORD_KEY)  # type: ignore[assignment]
        if record is None or not record.claim():
            return
        try:
            self._live[span.context.span_id] = record
            record.started(span, _delivery())
        except Exception:  # never break the caller's span
            logger.exception("chronicle: could not queue the open write of span %s", span.name)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None:
            return
        record = self._live.pop(context.span_id, None)
        if record is None:
            return
        try:
            record.ended(span, _delivery())
        except Exception:
            logger.exception("chronicle: could not queue span %s for delivery", span.name)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        from chronicle import runtime

        try:
            return runtime.flush(timeout_millis / 1000)
        except Exception:  # strict mode raises from flush(); the OTel contract returns a bool
            return False

    def shutdown(self) -> None:
        """Nothing of its own to stop: delivery belongs to the configuration."""


def _delivery() -> Delivery:
    from chronicle.runtime import current  # the runtime imports this module: resolve late

    return current().delivery
