"""Finding or building the TracerProvider Chronicle records through.

- A provider passed as ``configure(tracer_provider=...)``, or an SDK provider already set as the
  global one, is used as it is: Chronicle adds its ``ChronicleSpanProcessor`` (once) and creates
  nothing else, so its spans also reach the user's exporters.
- Otherwise Chronicle builds one from the ``OTEL_*`` environment (resource and service name,
  sampler wrapped in ``ReplaySampler``, span limits), adds an OTLP exporter when an OTLP endpoint
  or ``OTEL_TRACES_EXPORTER=otlp`` is set, and makes it global when ``set_global_provider`` is on
  and no provider was set yet (so there is never an "overriding" warning).
"""

from __future__ import annotations

import logging
import os
import weakref

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import _get_from_env_or_default

from chronicle.config import Settings
from chronicle.otel.processor import ChronicleSpanProcessor, RecordSink
from chronicle.otel.sampler import ReplaySampler

logger = logging.getLogger("chronicle")

_attached: weakref.WeakKeyDictionary[TracerProvider, ChronicleSpanProcessor] = (
    weakref.WeakKeyDictionary()
)
_built: TracerProvider | None = None


def attach_chronicle(settings: Settings, sink: RecordSink) -> tuple[TracerProvider, bool]:
    """Return the provider to record through and whether Chronicle built it.

    Its ``ChronicleSpanProcessor`` (the one added before, by Chronicle or by hand, else a new
    one) is connected to ``sink``; a provider never gets two.
    """
    global _built
    provider = settings.tracer_provider
    owned = False
    if provider is None:
        current = trace_api.get_tracer_provider()
        if isinstance(current, TracerProvider) and current is not _built:
            provider = current
        elif _built is not None:
            provider, owned = _built, True
        else:
            provider = _build_provider(settings)
            owned = True
            _built = provider
            if settings.set_global_provider:
                trace_api.set_tracer_provider(provider)
    processor = _attached.get(provider) or _added_by_hand(provider)
    if processor is None:
        processor = ChronicleSpanProcessor()
        provider.add_span_processor(processor)
    _attached[provider] = processor
    processor.connect(sink)
    return provider, owned


def _added_by_hand(provider: TracerProvider) -> ChronicleSpanProcessor | None:
    """A ``ChronicleSpanProcessor`` the user added to ``provider`` themselves, if any."""
    # The SDK exposes no list of a provider's processors; read its multi-processor's tuple.
    active = getattr(provider, "_active_span_processor", None)
    for processor in getattr(active, "_span_processors", ()):
        if isinstance(processor, ChronicleSpanProcessor):
            return processor
    return None


def exports_spans(provider: TracerProvider, owned: bool) -> bool:
    """Whether spans started on ``provider`` reach any exporter besides Chronicle's processor."""
    return not owned or (provider is _built and _built_with_otlp)


_built_with_otlp = False


def _build_provider(settings: Settings) -> TracerProvider:
    global _built_with_otlp
    resource = Resource.create({SERVICE_NAME: settings.service_name})
    provider = TracerProvider(resource=resource, sampler=ReplaySampler(_get_from_env_or_default()))
    if _otlp_requested():
        # deferred: the exporter loads protobuf and requests; only when OTLP export is asked for
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        _built_with_otlp = True
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _otlp_requested() -> bool:
    exporters = {e.strip().lower() for e in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "none" in exporters:
        return False
    return bool(
        "otlp" in exporters
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )
