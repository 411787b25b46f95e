"""Finding, joining or building the TracerProvider Chronicle records through.

Chronicle records through one OpenTelemetry SDK ``TracerProvider`` at a time, chosen in order:

1. ``configure(tracer_provider=...)``: that one (or the SDK provider it wraps), for as long as
   the configuration lasts.
2. The global provider, whenever it exposes an SDK ``TracerProvider``: the SDK's own, a subclass
   (Phoenix's), or a wrapper that holds one (Logfire's ``ProxyTracerProvider``; any object with
   the SDK provider in an attribute). Chronicle *follows* the global: a provider set after
   ``configure()`` (``phoenix.otel.register()``, ``logfire.configure()``, the provider
   ``opentelemetry-instrument`` sets up) is joined at Chronicle's next span, so the order in
   which the tools are set up does not matter.
3. Otherwise a provider Chronicle builds from the ``OTEL_*`` environment
   (``chronicle.otel.environment``). It becomes the global one only when it exports somewhere
   (and ``set_global_provider`` is on); without exporters it stays private, so a tool set up
   later can still install its own and Chronicle joins that.

Joining adds one ``ChronicleSpanProcessor`` (or reuses the one added by hand) connected to the
configuration's record sink, and nothing else: no processor is replaced or removed (an
``add_span_processor`` that takes ``replace_default_processor``, as Phoenix's does, gets
``False``), and Chronicle never sets a global provider over another, so there is no "Overriding
of current TracerProvider" warning. A global provider that is not the SDK's (ddtrace's, say)
cannot be joined: Chronicle says so once and records through a provider of its own, and the
control plane still gets everything.
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes
from typing_extensions import override

from chronicle.config import Settings
from chronicle.errors import ConfigurationError
from chronicle.otel.context import RECORD_KEY
from chronicle.otel.environment import BuiltProvider, build_provider
from chronicle.otel.processor import (
    ChronicleSpanProcessor,
    RecordSink,
    UnsampledSpan,
    unsampled_span,
)
from chronicle.otel.sampler import drops_below_dropped
from chronicle.wire import CallRecord, RequestRecord

logger = logging.getLogger("chronicle")

_TRACER_NAME = "chronicle"

# Where wrappers keep the provider they wrap: Logfire's ``provider``, wrapt's ``__wrapped__``,
# and the usual private names. Any other attribute holding an SDK provider is found as well.
_WRAPPED_ATTRIBUTES = (
    "provider",
    "tracer_provider",
    "_tracer_provider",
    "_provider",
    "_real_provider",
    "_delegate",
    "__wrapped__",
)
_UNSET_TYPES = (trace_api.ProxyTracerProvider, trace_api.NoOpTracerProvider)
_UNREADABLE = object()
"""``trace_api._TRACER_PROVIDER`` is OpenTelemetry's own global: read directly, an unset global
costs one attribute read per span instead of ``get_tracer_provider``'s ``os.environ`` lookup
(docs/benchmarks.md, "Figures behind the code's choices"). While it stays unset, the answer
``get_tracer_provider`` gave at configure holds (``OTEL_PYTHON_TRACER_PROVIDER`` is read then).
Should a release rename it, every span asks ``get_tracer_provider`` again, as before."""

_lock = threading.RLock()
_joined: weakref.WeakKeyDictionary[TracerProvider, ChronicleSpanProcessor] = (
    weakref.WeakKeyDictionary()
)
_built: BuiltProvider | None = None
_warned_foreign: set[str] = set()


def sdk_provider_of(candidate: object, depth: int = 3) -> TracerProvider | None:
    """The SDK ``TracerProvider`` that ``candidate`` is or wraps, or ``None``."""
    if isinstance(candidate, TracerProvider):
        return candidate
    if depth <= 0 or candidate is None:
        return None
    for name in _WRAPPED_ATTRIBUTES:
        try:
            inner = getattr(candidate, name, None)
        except Exception:  # a property that fails: not a wrapper we understand
            continue
        if inner is not None and inner is not candidate:
            found = sdk_provider_of(inner, depth - 1)
            if found is not None:
                return found
    try:
        held = list(vars(candidate).values())
    except TypeError:  # no __dict__
        return None
    return next((value for value in held if isinstance(value, TracerProvider)), None)


def require_sdk_provider(provider: object) -> TracerProvider:
    """The SDK provider ``provider`` is or wraps; ``ConfigurationError`` if there is none."""
    found = sdk_provider_of(provider)
    if found is None:
        raise ConfigurationError(
            "tracer_provider",
            f"{describe(provider)} is not an OpenTelemetry SDK TracerProvider and wraps none, so "
            "Chronicle cannot add its span processor to it; pass the SDK provider, or leave "
            "tracer_provider unset and Chronicle records through a provider of its own",
        )
    return found


def describe(provider: object) -> str:
    """``module.Class`` of a provider, for log lines."""
    kind = type(provider)
    return f"{kind.__module__}.{kind.__qualname__}"


def join(provider: TracerProvider, sink: RecordSink) -> None:
    """Connect ``provider``'s ``ChronicleSpanProcessor`` to ``sink``, adding one if it has none.

    Adding one removes or replaces nothing the provider had; a provider never gets two.
    """
    with _lock:
        processor = _joined.get(provider) or _added_by_hand(provider)
        if processor is None:
            processor = ChronicleSpanProcessor()
            _add_without_harm(provider, processor)
        _joined[provider] = processor
        processor.connect(sink)


def _add_without_harm(provider: TracerProvider, processor: ChronicleSpanProcessor) -> None:
    before = _processors(provider)
    add = provider.add_span_processor
    if _takes_keyword(add, "replace_default_processor"):
        add(processor, replace_default_processor=False)  # type: ignore[call-arg]
    else:
        add(processor)
    after = _processors(provider)
    lost = [p for p in before if all(p is not q for q in after)]
    if lost:
        logger.warning(
            "adding its span processor to %s removed %s; that provider replaces "
            "processors when one is added, so add chronicle.ChronicleSpanProcessor() to it "
            "yourself before your own and pass configure(tracer_provider=...)",
            describe(provider),
            ", ".join(describe(p) for p in lost),
        )


_renamed_warned: set[tuple[int, str]] = set()


def _warn_if_renamed(provider: TracerProvider, service: str, shown: str) -> None:
    """Warn once when ``provider``'s resource names the service otherwise than Chronicle does:
    the other backends and the control plane would show one service under two names."""
    try:
        named = provider.resource.attributes.get("service.name")
    except Exception:  # a provider without a readable resource: nothing to compare
        return
    key = (id(provider), service)
    if service == Settings.service_name:  # neither side was named: nothing to reconcile
        return
    if not isinstance(named, str) or named == service or key in _renamed_warned:
        return
    _renamed_warned.add(key)
    logger.warning(
        "the TracerProvider it records through (%s) names the service %r, Chronicle "
        "names it %r (service_name): your other backends and the control plane will show one "
        "service under two names; set OTEL_SERVICE_NAME=%s before that provider is built (or "
        "give its Resource service.name=%r)",
        shown,
        named,
        service,
        service,
        service,
    )


def _added_by_hand(provider: TracerProvider) -> ChronicleSpanProcessor | None:
    """A ``ChronicleSpanProcessor`` the user added to ``provider`` themselves, if any."""
    return next((p for p in _processors(provider) if isinstance(p, ChronicleSpanProcessor)), None)


def own_provider(settings: Settings, sink: RecordSink) -> BuiltProvider:
    """The provider Chronicle built (once per process, built now if needed), joined to ``sink``."""
    global _built
    with _lock:
        if _built is None:
            _built = build_provider(settings.service_name, settings.service_version)
            if _built.exporters and settings.set_global_provider:
                current = trace_api.get_tracer_provider()
                if isinstance(current, trace_api.ProxyTracerProvider):
                    trace_api.set_tracer_provider(_built.provider)
        join(_built.provider, sink)
        return _built


class ChronicleTracer(trace_api.Tracer):
    """Chronicle's tracer: starts spans on the provider Chronicle records through (see above).

    ``provider`` is the SDK provider in use, ``display`` whether its spans reach an exporter
    besides Chronicle's, and ``description`` says which provider it is. Following the global is
    one identity check per span; a change re-targets under a lock. A Chronicle span the sampler
    drops comes back as an ``UnsampledSpan`` handing its record to ``unsampled`` (when given):
    still unrecorded on the provider, so the sampler alone decides what its exporters get.
    """

    def __init__(
        self,
        settings: Settings,
        sink: RecordSink,
        version: str,
        unsampled: RecordSink | None = None,
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._unsampled = unsampled
        self._version = version
        self._seen: object = None
        self._unset = False
        self._wrapper = False
        self._tracer: trace_api.Tracer = trace_api.NoOpTracer()
        self.provider: TracerProvider | None = None
        self._drops_below = False
        """The provider's sampler drops every span under a local parent it dropped."""
        self.display = False
        self.owned = False
        self.description = ""
        fixed = settings.tracer_provider
        self._fixed = fixed is not None
        if fixed is not None:
            sdk = require_sdk_provider(fixed)
            self._use(fixed, sdk, "the TracerProvider passed as tracer_provider")
        else:
            self._follow(trace_api.get_tracer_provider(), at_configure=True)

    # ---- following the global ---------------------------------------------------------------

    def refresh(self) -> ChronicleTracer:
        """Re-target if the global provider (or the SDK provider it wraps) changed."""
        if self._fixed:
            return self
        current = getattr(trace_api, "_TRACER_PROVIDER", _UNREADABLE)
        if current is None and self._unset:
            return self  # still no global: ``get_tracer_provider`` would say so again, slower
        if current is None or current is _UNREADABLE:
            current = trace_api.get_tracer_provider()
        if current is not self._seen or (
            self._wrapper and sdk_provider_of(current) is not self.provider
        ):
            self._follow(current, at_configure=False)
        return self

    def _follow(self, current: object, *, at_configure: bool) -> None:
        with _lock:
            sdk = sdk_provider_of(current)
            own = _built.provider if _built is not None else None
            if sdk is not None and sdk is not own:
                how = "the global TracerProvider" + (
                    "" if at_configure else ", set after configure()"
                )
                self._use(current, sdk, how)
                if not at_configure:
                    logger.info("spans now join %s", self.description)
            else:
                if sdk is None and not isinstance(current, _UNSET_TYPES):
                    _warn_foreign(current)
                built = own_provider(self._settings, self._sink)
                self._use(built.provider, built.provider, "")
                self.owned = True
                self.display = bool(built.exporters)
                self.description = _describe_own(built, global_=built.provider is current)
            self._seen = current
            self._unset = isinstance(current, trace_api.ProxyTracerProvider)

    def _use(self, current: object, sdk: TracerProvider, how: str) -> None:
        join(sdk, self._sink)
        _warn_if_renamed(sdk, self._settings.service_name, describe(current))
        self._wrapper = current is not sdk
        getter = getattr(current, "get_tracer", None) if self._wrapper else None
        source = current if callable(getter) else sdk
        self._tracer = source.get_tracer(_TRACER_NAME, self._version)  # type: ignore[attr-defined]
        self.provider = sdk
        self._drops_below = drops_below_dropped(sdk.sampler)
        self.owned = False
        self.display = True
        wrapped = f" wrapping {describe(sdk)}" if self._wrapper else ""
        self.description = f"{how} ({describe(current)}{wrapped})"

    # ---- the Tracer API ---------------------------------------------------------------------

    @override
    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        span = self.refresh()._tracer.start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
        unsampled = self._unsampled
        if unsampled is None or span.is_recording():
            return span
        return unsampled_span(span, context, unsampled, start_time)

    @property
    def drops_below(self) -> bool:
        """Whether the provider's sampler drops every span under a local parent it dropped
        (``sampler.drops_below_dropped``): then nothing under a dropped request is sampled."""
        return self._drops_below

    def start_unsampled(
        self,
        name: str,
        context: Context,
        kind: SpanKind = SpanKind.INTERNAL,
        start_time: int | None = None,
    ) -> trace_api.Span:
        """A Chronicle span under a parent the sampler dropped (a held request's call): the
        ``UnsampledSpan`` the sampler's answer would have made, made without asking it when its
        answer is known (``sampler.drops_below_dropped``): a new span id from the provider's id
        generator, the parent's trace, not sampled. Otherwise (another sampler, a sampled or
        remote parent, no sink for unsampled spans) it is ``start_span``'s."""
        provider, unsampled = self.refresh().provider, self._unsampled
        if provider is not None and unsampled is not None and self._drops_below:
            parent = trace_api.get_current_span(context).get_span_context()
            record = context.get(RECORD_KEY)
            if (
                parent.is_valid
                and not parent.is_remote
                and not parent.trace_flags.sampled
                and isinstance(record, (RequestRecord, CallRecord))
            ):
                ids = trace_api.SpanContext(
                    parent.trace_id,
                    provider.id_generator.generate_span_id(),
                    is_remote=False,
                    trace_flags=trace_api.TraceFlags(trace_api.TraceFlags.DEFAULT),
                    trace_state=parent.trace_state,
                )
                return UnsampledSpan(ids, record, unsampled, start_time)
        return self.start_span(name, context, kind, start_time=start_time)

    @override
    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace_api.Span]:
        with self.refresh()._tracer.start_as_current_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
            end_on_exit,
        ) as span:
            yield span


def _describe_own(built: BuiltProvider, *, global_: bool) -> str:
    if built.exporters:
        where = "global" if global_ else "private"
        return (
            f"a {where} TracerProvider Chronicle built from OTEL_* "
            f"(exporters: {', '.join(built.exporters)})"
        )
    return (
        "a private TracerProvider Chronicle built (no OTEL_TRACES_EXPORTER or OTLP endpoint is "
        "set); a provider set up later, by phoenix.otel.register() or logfire.configure() say, "
        "is joined at the next span"
    )


def _warn_foreign(current: object) -> None:
    name = describe(current)
    if name in _warned_foreign:
        return
    _warned_foreign.add(name)
    logger.warning(
        "the global TracerProvider is %s, which is not the OpenTelemetry SDK's, so "
        "Chronicle's spans cannot join it and do not reach its backend (the control plane still "
        "gets everything); to see them there, use the OpenTelemetry SDK's TracerProvider with "
        "that backend's OTLP endpoint, or pass configure(tracer_provider=...) an SDK provider",
        name,
    )


def _processors(provider: TracerProvider) -> tuple[object, ...]:
    active = getattr(provider, "_active_span_processor", None)
    found = getattr(active, "_span_processors", ())
    return tuple(found) if isinstance(found, (tuple, list)) else ()


def _takes_keyword(method: object, name: str) -> bool:
    try:
        parameters = inspect.signature(method).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return name in parameters
