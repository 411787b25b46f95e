"""Chronicle alongside OpenTelemetry: the provider it builds or joins, OTLP export, sampling.

The global TracerProvider can be set once per process, so these run in a child Python each.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OtlpReceiver:
    """A local OTLP/HTTP receiver: decodes every ``POST /v1/traces`` it gets."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[tuple[str, dict[str, object], str]]:
        """(name, attributes, service.name) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {a.key: a.value.string_value for a in span.attributes}
                        found.append((span.name, attributes, resource.get("service.name", "")))
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def run_child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CHRONICLE_"))}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


AGENT = """
import chronicle

@chronicle.boundary("lookup", kind="tool")
def lookup(key):
    return {"value": key * 2}

with chronicle.record("otlp-run") as session:
    lookup("ab")
print(session.trace_id)
assert chronicle.flush(10)
chronicle.shutdown()
"""


def test_spans_are_exported_over_otlp_and_saved_to_the_control_plane(otlp, control_plane):
    result = run_child(
        AGENT,
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
        OTEL_SERVICE_NAME="otlp-agent",
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    trace_id = result.stdout.strip().splitlines()[-1]
    names = {name: (attributes, service) for name, attributes, service in otlp.spans()}
    assert set(names) == {"otlp-run", "lookup"}
    attributes, service = names["lookup"]
    assert attributes["openinference.span.kind"] == "TOOL"
    assert service == "otlp-agent"
    assert names["otlp-run"][0]["openinference.span.kind"] == "CHAIN"
    (envelope,) = control_plane.wait_for_envelopes(trace_id, 1)
    assert envelope["output"]["raw"] == {"value": "abab"}
    assert [s["service"] for s in control_plane.trace(trace_id)["spans"]] == ["otlp-agent"]


def test_otel_traces_exporter_otlp_alone_turns_export_on(otlp):
    run_child(
        AGENT,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{otlp.url}/v1/traces",
    )
    assert {name for name, _, _ in otlp.spans()} == {"otlp-run", "lookup"}


def test_no_exporter_is_added_without_an_otlp_setting(otlp):
    result = run_child(
        AGENT
        + """
from opentelemetry import trace
provider = trace.get_tracer_provider()
print(type(provider).__name__, len(provider._active_span_processor._span_processors))
"""
    )
    assert (
        result.stdout.strip().splitlines()[-1] == "TracerProvider 1"
    )  # Chronicle's processor only
    assert otlp.spans() == []


def test_an_existing_global_provider_is_joined_not_replaced(control_plane):
    result = run_child(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import chronicle

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        chronicle.configure()
        chronicle.configure()  # configuring twice adds nothing twice

        @chronicle.boundary("tool", kind="tool")
        def tool():
            return 1

        with chronicle.record("joined") as session:
            tool()
        assert chronicle.flush(10)
        assert trace.get_tracer_provider() is provider
        names = sorted(s.name for s in exporter.get_finished_spans())
        print(names, len(provider._active_span_processor._span_processors), session.trace_id)
        """,
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    names, _, rest = result.stdout.strip().partition("] ")
    processors, trace_id = rest.split()
    assert names + "]" == "['joined', 'tool']"  # each span once: no duplicates
    assert processors == "2"  # the user's and one Chronicle processor
    assert "Overriding" not in result.stderr
    assert len(control_plane.wait_for_envelopes(trace_id, 1)) == 1


def test_the_environment_sampler_is_honoured(control_plane):
    result = run_child(
        AGENT, OTEL_TRACES_SAMPLER="always_off", CHRONICLE_CONTROL_PLANE_URL=control_plane.url
    )
    trace_id = result.stdout.strip().splitlines()[-1]
    assert control_plane.trace_envelopes(trace_id) == []


def test_set_global_provider_off_leaves_the_global_alone():
    result = run_child(
        """
        from opentelemetry import trace
        import chronicle
        chronicle.configure(set_global_provider=False)
        with chronicle.record("private"):
            pass
        print(type(trace.get_tracer_provider()).__name__)
        """
    )
    assert result.stdout.strip() == "ProxyTracerProvider"


def test_chronicles_own_traffic_never_becomes_a_span(control_plane):
    pytest.importorskip("opentelemetry.instrumentation.httpx")
    result = run_child(
        """
        from opentelemetry import trace
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import chronicle

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        HTTPXClientInstrumentor().instrument()  # every httpx request becomes a client span

        @chronicle.boundary("tool", kind="tool")
        def tool():
            return 1

        with chronicle.record("own-traffic") as session:
            tool()
        assert chronicle.flush(10)
        print(sorted(s.name for s in exporter.get_finished_spans()))
        print(session.trace_id)
        """,
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    names, trace_id = result.stdout.strip().splitlines()[-2:]
    assert names == "['own-traffic', 'tool']"  # registration and delivery made no spans
    assert len(control_plane.wait_for_envelopes(trace_id, 1)) == 1


def test_what_is_queued_is_delivered_at_process_exit(control_plane):
    result = run_child(
        """
        import chronicle

        @chronicle.boundary("tool", kind="tool")
        def tool(i):
            return i

        with chronicle.record("exit") as session:
            for i in range(300):
                tool(i)
        print(session.trace_id)
        # no flush(): the atexit handler must deliver the queue
        """,
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
        CHRONICLE_FLUSH_INTERVAL="60",
    )
    trace_id = result.stdout.strip()
    assert len(control_plane.wait_for_envelopes(trace_id, 300)) == 300
