"""Chronicle alongside OpenTelemetry: the provider it builds or joins, OTLP export, sampling.

The global TracerProvider can be set once per process, so these run in a child Python each.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.child import run_child
from tests.support.otel_child import IN_MEMORY_PROVIDER, lookup_run
from tests.support.otlp import OtlpReceiver


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


AGENT = lookup_run("otlp-run") + "chronicle.shutdown()\n"


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
        IN_MEMORY_PROVIDER
        + """
import chronicle
chronicle.configure()
chronicle.configure()  # configuring twice adds nothing twice
"""
        + lookup_run("joined")
        + """
assert trace.get_tracer_provider() is provider
names = sorted(s.name for s in exporter.get_finished_spans())
print(names, len(provider._active_span_processor._span_processors))
""",
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    trace_id, spans = result.stdout.strip().splitlines()[-2:]
    names, _, processors = spans.partition("] ")
    assert names + "]" == "['execute_tool lookup', 'joined']"  # each span once: no duplicates
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
        IN_MEMORY_PROVIDER
        + """
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
HTTPXClientInstrumentor().instrument()  # every httpx request becomes a client span
"""
        + lookup_run("own-traffic")
        + "print(sorted(s.name for s in exporter.get_finished_spans()))\n",
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    trace_id, names = result.stdout.strip().splitlines()[-2:]
    assert names == "['execute_tool lookup', 'own-traffic']"  # registration, delivery: no spans
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
