"""Local OTLP receivers for the tests: what an OpenTelemetry backend would receive, decoded.

``OtlpReceiver`` answers OTLP/HTTP (``POST`` of a protobuf ``ExportTraceServiceRequest`` on any
path, gzip or not: Phoenix posts to ``/v1/traces``, Langfuse to ``/api/public/otel/v1/traces``).
``GrpcOtlpReceiver`` is the same over gRPC. Both keep every span as a ``ReceivedSpan``.
"""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support.served import Served


@dataclass
class ReceivedSpan:
    """One span as the backend got it."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    scope: str
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(repr=False)
    kind: str = "SPAN_KIND_UNSPECIFIED"
    """The span's kind as OTLP names it: ``SPAN_KIND_CLIENT``, ``SPAN_KIND_INTERNAL``, ..."""

    @property
    def service(self) -> str:
        return str(self.resource.get("service.name", ""))


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        scope=scope_spans.scope.name,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        resource=resource,
                        kind=Span.SpanKind.Name(span.kind),
                    )
                )
    return found


class _Collected:
    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        """The HTTP headers of each export request (lower-case names), OTLP/HTTP only."""
        self._lock = threading.Lock()

    def add(self, path: str, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.paths.append(path)
            self._spans.extend(decode(request))

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def named(self, name: str) -> ReceivedSpan:
        """The one span called ``name`` (fails if there are none or several)."""
        matches = [s for s in self.spans() if s.name == name]
        assert len(matches) == 1, f"{len(matches)} spans named {name!r} in {self.spans()}"
        return matches[0]

    def wait_for(self, *names: str, timeout: float = 10.0) -> list[ReceivedSpan]:
        """Every span received once spans with all of ``names`` arrived (or the timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if set(names) <= {s.name for s in self.spans()}:
                break
            time.sleep(0.05)
        return self.spans()


class OtlpReceiver(_Collected):
    """A local OTLP/HTTP receiver on a free port; ``url`` is its base address."""

    def __init__(self) -> None:
        super().__init__()
        self.posts = 0
        """How many POST requests arrived, on any path."""
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.posts += 1
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path.endswith("/v1/traces"):
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                    receiver.add(self.path, request)
                    payload = ExportTraceServiceResponse().SerializeToString()
                    content_type = "application/x-protobuf"
                else:  # any other API call a tool's client makes: accept and ignore
                    payload, content_type = b"{}", "application/json"
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self._served = Served(Handler)
        self.url = self._served.url
        self._served.start()

    def close(self) -> None:
        self._served.close()


class GrpcOtlpReceiver(_Collected):
    """A local OTLP/gRPC receiver on a free port; ``endpoint`` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        import grpc  # type: ignore[import-untyped]  # deferred: only the gRPC test needs it
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        super().__init__()
        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
                receiver.add("grpc", request)
                return ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            Service(), self.server
        )
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.server.stop(grace=None)
