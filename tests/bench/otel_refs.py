"""The OpenTelemetry references of ``make bench``: a plain span, and a span holding the JSON of
the call's arguments and result, on a private ``TracerProvider`` whose exporter discards.

``ours.py`` (sections 1 and 6) and ``peer.py`` (section 6) time them beside Chronicle's and each
peer's decorator, so every figure can be read as a ratio to a plain span measured in the same
process. OpenTelemetry's SDK and ``common.py`` only: nothing here imports ``chronicle`` (the
prior's venv, which has no OpenTelemetry, never imports this module).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import common
from common import LLM_NAME, TOOL_ARGS, TOOL_KWARGS, TOOL_NAME, Call, per_call_us
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class DiscardExporter(SpanExporter):
    """Takes every batch and drops it (the network is the only thing skipped)."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def references() -> tuple[TracerProvider, Any]:
    """A private ``TracerProvider`` discarding what it exports (batched), and its tracer."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardExporter()))
    return provider, provider.get_tracer("bench")


def plain_span(tracer: Any, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` inside a span called ``name``, nothing recorded on it."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(name):
            return fn(*args, **kwargs)

    return wrapper


def span_with_json(tracer: Any, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The minimal recording decorator: a span plus the JSON of the arguments and the result."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(name) as span:
            span.set_attribute("input.value", json.dumps({"args": args, "kwargs": kwargs}))
            result = fn(*args, **kwargs)
            span.set_attribute("output.value", json.dumps(result))
            return result

    return wrapper


def variants(tracer: Any) -> dict[str, Call]:
    """The three references by result name: ``otel_span/tool``, ``otel_json/tool`` and
    ``otel_json/llm`` (the decorated benchmark function, its args and kwargs)."""
    plain = plain_span(tracer, TOOL_NAME, common.tool_body)
    calls = common.workload(
        span_with_json(tracer, TOOL_NAME, common.tool_body),
        span_with_json(tracer, LLM_NAME, common.llm_body),
    )
    return {
        "otel_span/tool": (plain, TOOL_ARGS, TOOL_KWARGS),
        "otel_json/tool": calls["tool"],
        "otel_json/llm": calls["llm"],
    }


def per_call_in_request(
    provider: TracerProvider,
    tracer: Any,
    call: Call,
    n: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Microseconds per ``call`` over ``n`` calls inside one ``request`` span (as Chronicle's run
    inside one ``chronicle.record``), the provider flushed before the next block."""
    fn, args, kwargs = call
    with tracer.start_as_current_span("request"):
        value = per_call_us(fn, args, kwargs, n, clock)
    provider.force_flush()
    return value
