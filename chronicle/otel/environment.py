"""A TracerProvider built from the ``OTEL_*`` environment by the OpenTelemetry SDK's own rules.

Chronicle builds a provider only when the application has none (see ``chronicle.otel.provider``).
It reuses the SDK's configuration code (``opentelemetry.sdk._configuration``, the code behind
``opentelemetry-instrument``; private to the SDK but unchanged in signature from 1.30 to 1.45):

- ``OTEL_TRACES_EXPORTER``: a comma-separated list of the exporters registered under the
  ``opentelemetry_traces_exporter`` entry point (``otlp``, ``console``, ``otlp_proto_http``,
  ``otlp_proto_grpc``, ...); ``none`` or unset: no exporter. Unset with an OTLP endpoint set
  (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) means ``otlp``.
- ``otlp`` picks its exporter by ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or
  ``OTEL_EXPORTER_OTLP_PROTOCOL``; unset, it is ``http/protobuf`` (the specification's default,
  and the exporter Chronicle depends on; the Python SDK alone would pick gRPC).
- Each exporter reads its own endpoint, headers, timeout, compression and certificates from the
  environment, and runs behind a ``BatchSpanProcessor`` (``OTEL_BSP_*``), as the SDK does.
- ``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` (built-in or entry-point samplers, wrapped
  in ``ReplaySampler``), ``OTEL_PYTHON_ID_GENERATOR``, ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_SERVICE_NAME`` and ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`` (``Resource.create``), and
  the span limits (``OTEL_SPAN_*_LIMIT``, ``OTEL_ATTRIBUTE_*``, read by the provider itself).

An exporter that cannot be loaded (``grpc`` without ``opentelemetry-exporter-otlp-proto-grpc``,
a misspelt name, a bad protocol) is left out with one warning saying what to install or set;
nothing else changes, and the control plane still gets everything.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from opentelemetry.environment_variables import OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
)
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Sampler

from chronicle.otel.sampler import ReplaySampler

logger = logging.getLogger("chronicle")

__all__ = ["BuiltProvider", "build_provider", "exporter_names"]

_OTLP = "otlp"
_OTLP_HTTP = "otlp_proto_http"
_OTLP_GRPC = "otlp_proto_grpc"
_GRPC_PACKAGE = "opentelemetry-exporter-otlp-proto-grpc"


@dataclass
class BuiltProvider:
    """A provider Chronicle built, and the exporters it was given (entry-point names)."""

    provider: TracerProvider
    exporters: list[str] = field(default_factory=list)


def build_provider(service_name: str, service_version: str | None = None) -> BuiltProvider:
    """A new SDK provider configured from the environment (see the module docstring), its
    resource naming the service (and its version) as Chronicle does."""
    named: dict[str, str] = {SERVICE_NAME: service_name}
    if service_version is not None:
        named[SERVICE_VERSION] = service_version
    resource = Resource.create(named)
    provider = TracerProvider(
        resource=resource,
        sampler=ReplaySampler(_sampler()),
        id_generator=_id_generator(),
    )
    built = BuiltProvider(provider)
    try:
        names = exporter_names()
    except RuntimeError as exc:  # the SDK's words for an unknown OTLP protocol
        logger.warning(
            "%s, so spans are not exported over OTLP (the control plane still gets "
            "everything); set OTEL_EXPORTER_OTLP_PROTOCOL to http/protobuf or grpc",
            exc,
        )
        names = []
    for name in names:
        exporter = _exporter(name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
            built.exporters.append(name)
    return built


def exporter_names() -> list[str]:
    """The trace exporters the environment asks for, as entry-point names, in order.

    Raises ``RuntimeError`` (the SDK's) for an ``OTEL_EXPORTER_OTLP_PROTOCOL`` it does not know.
    """
    # deferred: loads the SDK's metrics and logs modules, needed only when building a provider
    from opentelemetry.sdk._configuration import _get_exporter_entry_point

    raw = os.environ.get(OTEL_TRACES_EXPORTER, "").strip()
    if not raw:
        endpoint = os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or os.environ.get(
            OTEL_EXPORTER_OTLP_ENDPOINT
        )
        raw = _OTLP if endpoint and endpoint.strip() else ""
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if [name.lower() for name in names] == ["none"]:
        return []
    protocol_set = bool(
        (os.environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) or "").strip()
        or (os.environ.get(OTEL_EXPORTER_OTLP_PROTOCOL) or "").strip()
    )
    chosen: list[str] = []
    for name in names:
        if name == _OTLP and not protocol_set:
            entry = _OTLP_HTTP
        else:
            entry = _get_exporter_entry_point(name, "traces")
        if entry not in chosen:
            chosen.append(str(entry))
    return chosen


def _exporter(name: str) -> SpanExporter | None:
    """The exporter registered as ``name``, built from the environment; ``None`` (warned) if not."""
    # deferred: loads the SDK's metrics and logs modules, needed only when building a provider
    from opentelemetry.sdk._configuration import _import_exporters

    try:
        classes, _, _ = _import_exporters([name], [], [])
        return classes[name]()
    except Exception as exc:  # not installed, not importable, or failed to start
        if name == _OTLP_GRPC:
            logger.warning(
                "OTLP over gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc) needs the gRPC "
                "exporter, which is not installed, so spans are not exported over OTLP (the "
                "control plane still gets everything); pip install %s, or set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and point the endpoint at the "
                "collector's HTTP port (usually 4318)",
                _GRPC_PACKAGE,
            )
        else:
            logger.warning(
                "OTEL_TRACES_EXPORTER asks for the %r exporter, which could not be "
                "loaded (%s: %s), so it is left out; install the package that provides it or "
                "correct OTEL_TRACES_EXPORTER",
                name,
                type(exc).__name__,
                exc,
            )
        return None


def _sampler() -> Sampler:
    # deferred: loads the SDK's metrics and logs modules, needed only when building a provider
    from opentelemetry.sdk._configuration import _get_sampler, _import_sampler

    chosen: Sampler | None = _import_sampler(_get_sampler())
    return chosen if chosen is not None else DEFAULT_ON  # unset, or not loadable (the SDK warned)


def _id_generator() -> IdGenerator | None:
    # deferred: loads the SDK's metrics and logs modules, needed only when building a provider
    from opentelemetry.sdk._configuration import _get_id_generator, _import_id_generator

    try:
        generator: IdGenerator = _import_id_generator(_get_id_generator())
        return generator
    except Exception as exc:
        logger.warning(
            "OTEL_PYTHON_ID_GENERATOR could not be loaded (%s); using random ids",
            exc,
        )
        return None
