"""Chronicle alongside OpenTelemetry: the provider it builds or joins, OTLP export, sampling.

The global TracerProvider can be set once per process, so these run in a child Python each.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.child import run_child
from tests.support.otlp import OtlpReceiver


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


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
    names = {span.name: span for span in otlp.spans()}
    assert set(names) == {"otlp-run", "execute_tool lookup"}  # the GenAI convention's names
    tool = names["execute_tool lookup"]
    assert tool.attributes["chronicle.boundary"] == "lookup"
    assert tool.attributes["openinference.span.kind"] == "TOOL"
    assert tool.service == "otlp-agent"
    assert names["otlp-run"].attributes["openinference.span.kind"] == "CHAIN"
    (envelope,) = control_plane.wait_for_envelopes(trace_id, 1)
    assert envelope["output"]["raw"] == {"value": "abab"}
    assert [s["service"] for s in control_plane.trace(trace_id)["spans"]] == ["otlp-agent"]


def test_otel_traces_exporter_otlp_alone_turns_export_on(otlp):
    run_child(
        AGENT,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{otlp.url}/v1/traces",
    )
    assert {span.name for span in otlp.spans()} == {"otlp-run", "execute_tool lookup"}


def test_without_an_exporter_chronicle_keeps_its_provider_private(otlp):
    result = run_child(
        AGENT
        + """
from opentelemetry import trace
print(type(trace.get_tracer_provider()).__name__)
"""
    )
    # Nothing to export to: the global slot stays free for a tool set up later.
    assert result.stdout.strip().splitlines()[-1] == "ProxyTracerProvider"
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
    assert names + "]" == "['execute_tool tool', 'joined']"  # each span once: no duplicates
    assert processors == "2"  # the user's and one Chronicle processor
    assert "Overriding" not in result.stderr
    assert len(control_plane.wait_for_envelopes(trace_id, 1)) == 1


def test_the_environment_sampler_is_honoured(control_plane):
    result = run_child(
        AGENT, OTEL_TRACES_SAMPLER="always_off", CHRONICLE_CONTROL_PLANE_URL=control_plane.url
    )
    trace_id = result.stdout.strip().splitlines()[-1]
    assert control_plane.trace_envelopes(trace_id) == []


@pytest.mark.parametrize(
    ("setting", "global_provider"), [("True", "TracerProvider"), ("False", "ProxyTracerProvider")]
)
def test_set_global_provider_decides_whether_an_exporting_provider_becomes_global(
    otlp, setting, global_provider
):
    result = run_child(
        f"""
        from opentelemetry import trace
        import chronicle
        chronicle.configure(set_global_provider={setting})
        with chronicle.record("private"):
            pass
        print(type(trace.get_tracer_provider()).__name__)
        """,
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
    )
    assert result.stdout.strip() == global_provider


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
    assert names == "['execute_tool tool', 'own-traffic']"  # registration, delivery: no spans
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
