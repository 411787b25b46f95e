"""``ChronicleSpanProcessor``: hands the record of each Chronicle span to its sink.

Chronicle starts each request span and boundary span with its record (a
``chronicle.wire.RequestRecord`` or ``CallRecord``, plain data) in the context given to
``start_span``, under ``RECORD_KEY``, never attached, so no other span inherits it. On start the
processor hands the record with the span's ids and start time to the sink (the open write); on
end, with the end time too (the close write). The sink, delivery, turns records into entities
on its own thread. Every other span is ignored (nesting across them comes from the Chronicle
state carried in the context), except where another instrumentation traces the same call, so
that it is counted once (``chronicle.otel.counted_once``): a model-call span ending right below
one of Chronicle's is noted, and a Chronicle span starting under a framework's span of the same
model call or tool run is demoted at its start.

A span its sampler drops never reaches a processor; ``UnsampledSpan`` stands in for it (the
tracer returns one, see ``chronicle.otel.provider``) and hands its record to a sink of its own,
with the same ids and times, so that a request the sampler dropped can still be kept.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from chronicle.otel.context import RECORD_KEY
from chronicle.otel.counted_once import (
    forget,
    is_model_call,
    note_model_call_below,
    note_span_started,
    seen_through,
)
from chronicle.wire import CallRecord, RequestRecord

logger = logging.getLogger("chronicle")

Record = RequestRecord | CallRecord


class RecordSink(Protocol):
    """Where the processor hands records: queued, never sent on the caller's thread."""

    def span_started(self, record: Record, trace_id: int, span_id: int, start_ns: int) -> None:
        """A Chronicle span started; must not block or raise."""
        ...

    def span_ended(
        self, record: Record, trace_id: int, span_id: int, start_ns: int, end_ns: int
    ) -> None:
        """A Chronicle span ended (its record is complete); must not block or raise."""
        ...

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver what was handed over so far, within ``timeout`` seconds."""
        ...


class ChronicleSpanProcessor(SpanProcessor):
    """Saves Chronicle's spans to the control plane through the configured delivery.

    ``configure()`` adds one to the provider it records through, or connects the one you added:
    ``provider.add_span_processor(chronicle.ChronicleSpanProcessor())``, then
    ``chronicle.configure(tracer_provider=provider)``. Until it is connected it ignores every
    span. Never blocks and never raises.
    """

    def __init__(self) -> None:
        self._sink: RecordSink | None = None
        # Span id -> record of Chronicle's live spans. Plain dict operations are atomic in
        # CPython, so spans starting and ending on many threads need no lock here.
        self._live: dict[int, Record] = {}

    def connect(self, sink: RecordSink | None) -> None:
        """Hand records to ``sink`` from now on (``None``: ignore spans)."""
        self._sink = sink

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Hand a Chronicle span's record to the sink (the open write); demote the span when the
        framework span it starts under counts the same call (``counted_once``)."""
        sink = self._sink
        if parent_context is None or sink is None:
            return
        record = parent_context.get(RECORD_KEY)
        if not isinstance(record, (RequestRecord, CallRecord)):
            return
        try:
            trace_id, span_id = span.context[:2]  # read once: SpanContext's are properties
            self._live[span_id] = record
            sink.span_started(record, trace_id, span_id, span.start_time or 0)
        except Exception:  # never break the caller's span
            logger.exception("could not queue the open write of span %s", span.name)
            return
        try:
            parent = span.parent  # None at a trace's root: nothing above counts
            if parent is not None:
                parent_id = parent[1]  # the span id, read as the tuple item it is
                ours = parent_id in self._live
                if not ours or seen_through:  # under Chronicle's own, nothing else to look at
                    note_span_started(span, span_id, record, parent_id, parent_context, ours=ours)
        except Exception:
            logger.exception("could not tell whether another span counts %s's call", span.name)

    def on_end(self, span: ReadableSpan) -> None:
        """Hand the finished record to the sink (the close write)."""
        context = span.context
        if context is None:
            return
        trace_id, span_id = context[:2]  # read once: SpanContext's are properties
        record = self._live.pop(span_id, None)
        if record is None:
            parent = span.parent
            if parent is not None and parent.span_id in self._live and is_model_call(span):
                note_model_call_below(parent.span_id)
            return
        forget(span_id)
        sink = self._sink
        if sink is None:
            return
        try:
            start = span.start_time or 0
            sink.span_ended(record, trace_id, span_id, start, span.end_time or start)
        except Exception:
            logger.exception("could not queue span %s for delivery", span.name)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Deliver what was queued; ``False`` on timeout or loss (never raises)."""
        sink = self._sink
        if sink is None:
            return True
        try:
            return sink.flush(timeout_millis / 1000)
        except Exception:  # strict mode raises from flush(); the OTel contract returns a bool
            return False

    def shutdown(self) -> None:
        """Nothing of its own to stop: delivery belongs to the configuration."""


class UnsampledSpan(trace_api.NonRecordingSpan):
    """A Chronicle span its sampler dropped: nothing is recorded on the provider (so no exporter
    sees it), but its record goes to ``sink`` as the processor would send it, at start and end.

    Like the processor, never blocks and never raises. Ending it twice hands it over once.
    """

    def __init__(
        self,
        context: trace_api.SpanContext,
        record: Record,
        sink: RecordSink,
        start_ns: int | None = None,
    ) -> None:
        super().__init__(context)
        self._record: Record | None = record
        self._sink = sink
        self._start_ns = start_ns or time.time_ns()
        try:
            sink.span_started(record, context.trace_id, context.span_id, self._start_ns)
        except Exception:  # never break the caller's span
            logger.exception("could not hold the open write of an unsampled span")

    def end(self, end_time: int | None = None) -> None:
        """Hand the finished record to the sink (once)."""
        record, self._record = self._record, None
        if record is None:
            return
        context = self.get_span_context()
        try:
            self._sink.span_ended(
                record,
                context.trace_id,
                context.span_id,
                self._start_ns,
                end_time or time.time_ns(),
            )
        except Exception:
            logger.exception("could not hold an unsampled span's record")


def unsampled_span(
    span: trace_api.Span,
    context: otel_context.Context | None,
    sink: RecordSink,
    start_ns: int | None,
) -> trace_api.Span:
    """``span``, or an ``UnsampledSpan`` in its place when it is one of Chronicle's (its record
    is in ``context``) and its sampler dropped it.

    Dropped means: not recording, not sampled, with ids of its own. A tracer that is switched
    off hands back the parent's ids, and that span is left alone.
    """
    if span.is_recording() or context is None:
        return span
    record = context.get(RECORD_KEY)
    if not isinstance(record, (RequestRecord, CallRecord)):
        return span
    ids = span.get_span_context()
    parent = trace_api.get_current_span(context).get_span_context()
    if not ids.is_valid or ids.trace_flags.sampled or ids.span_id == parent.span_id:
        return span
    return UnsampledSpan(ids, record, sink, start_ns)
