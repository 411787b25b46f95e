"""How Chronicle meets the OpenTelemetry setup it finds, in a fresh interpreter each.

- Building a provider from the environment follows the SDK's own rules: ``OTEL_TRACES_EXPORTER``
  (``console``, ``otlp``, lists), ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` when the gRPC
  exporter is installed, one warning and no delayed exit when it is not), headers, resource.
- ``opentelemetry-instrument`` sets the provider up: Chronicle joins it.
- A provider that is not the SDK's is reported once; the control plane still gets everything.
- Logfire re-configured after Chronicle joined: Chronicle joins the new provider.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.child import run_child
from tests.support.otel_child import lookup_run
from tests.support.otlp import GrpcOtlpReceiver, OtlpReceiver

AGENT = lookup_run("setup-run")
TOOL_SPAN = "execute_tool lookup"
"""The ``lookup`` boundary's span, named by the OpenTelemetry GenAI convention."""

NO_GRPC_EXPORTER = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    # As if opentelemetry-exporter-otlp-proto-grpc were not installed.
    def find_spec(self, name, path=None, target=None):
        if name.startswith("opentelemetry.exporter.otlp.proto.grpc"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NotInstalled())
"""


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def grpc_otlp() -> Iterator[GrpcOtlpReceiver]:
    receiver = GrpcOtlpReceiver()
    yield receiver
    receiver.close()


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_otel_traces_exporter_console_prints_the_spans(control_plane):
    result = run_child(
        AGENT, OTEL_TRACES_EXPORTER="console", CHRONICLE_CONTROL_PLANE_URL=control_plane.url
    )
    assert '"name": "setup-run"' in result.stdout
    assert f'"name": "{TOOL_SPAN}"' in result.stdout
    assert result.stderr == ""


def test_a_list_of_exporters_gets_every_one(otlp):
    result = run_child(
        AGENT,
        OTEL_TRACES_EXPORTER="console,otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
        OTEL_EXPORTER_OTLP_HEADERS="x-team=agents",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=staging",
    )
    assert f'"name": "{TOOL_SPAN}"' in result.stdout
    spans = otlp.wait_for("setup-run", TOOL_SPAN)
    assert {s.name for s in spans} == {"setup-run", TOOL_SPAN}
    assert {s.resource["deployment.environment"] for s in spans} == {"staging"}
    assert all(h.get("x-team") == "agents" for h in otlp.headers)


def test_grpc_without_the_grpc_exporter_warns_once_and_exits_at_once(otlp, control_plane):
    started = time.monotonic()
    result = run_child(
        NO_GRPC_EXPORTER + AGENT + "import time; print(time.monotonic())",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    exited = time.monotonic()
    (warning,) = lines(result.stderr)
    assert "gRPC exporter, which is not installed" in warning
    assert "pip install opentelemetry-exporter-otlp-proto-grpc" in warning
    # Exiting (after the script's last line) takes less than starting and running did (imports,
    # a request registered and flushed): no exporter waits out a timeout on the way out. A ratio
    # to the same child's own start, so a loaded machine slows both sides alike.
    script_ended = float(lines(result.stdout)[-1])
    assert exited - script_ended < script_ended - started
    assert otlp.posts == 0  # nothing posted as HTTP to the gRPC address
    trace_id = lines(result.stdout)[-2]
    assert len(control_plane.wait_for_envelopes(trace_id, 1)) == 1


def test_grpc_with_the_grpc_exporter_installed_exports_over_grpc(grpc_otlp):
    run_child(
        AGENT,
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT=grpc_otlp.endpoint,
    )
    spans = grpc_otlp.wait_for("setup-run", TOOL_SPAN)
    assert {s.name for s in spans} == {"setup-run", TOOL_SPAN}


def test_an_unknown_otlp_protocol_is_one_clear_warning(control_plane):
    result = run_child(
        AGENT,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="carrier-pigeon",
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    (warning,) = lines(result.stderr)
    assert "carrier-pigeon" in warning
    assert "set OTEL_EXPORTER_OTLP_PROTOCOL to http/protobuf or grpc" in warning


def test_chronicle_joins_the_provider_opentelemetry_instrument_set_up(otlp, control_plane):
    launcher = str(Path(sys.executable).parent / "opentelemetry-instrument")
    result = run_child(
        "import logging; logging.basicConfig(level=logging.INFO)\n" + AGENT,
        argv=[launcher],
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_SERVICE_NAME="instrumented",
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    spans = otlp.wait_for("setup-run", TOOL_SPAN)
    # Each span once (Chronicle built no second exporting provider), and no span for
    # Chronicle's own requests although the httpx instrumentation is on.
    assert sorted(s.name for s in spans) == [TOOL_SPAN, "setup-run"]
    assert {s.service for s in spans} == {"instrumented"}
    (configured,) = [line for line in lines(result.stderr) if line.startswith("INFO:chronicle")]
    assert "the global TracerProvider (opentelemetry.sdk.trace.TracerProvider)" in configured
    assert control_plane.url in configured
    assert "HTTP Request" not in result.stderr  # Chronicle's own traffic stays out of the log
    trace_id = lines(result.stdout)[-1]
    assert len(control_plane.wait_for_envelopes(trace_id, 1)) == 1


def test_a_provider_that_is_not_the_sdks_is_reported_once_and_recording_goes_on(control_plane):
    result = run_child(
        textwrap.dedent(
            """
            from opentelemetry import trace

            class VendorTracerProvider(trace.TracerProvider):  # the API only, as ddtrace's is
                def get_tracer(self, *args, **kwargs):
                    return trace.NoOpTracer()

            trace.set_tracer_provider(VendorTracerProvider())
            import chronicle
            chronicle.configure()
            """
        )
        + AGENT
        + AGENT,
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
    )
    (warning,) = lines(result.stderr)
    assert "VendorTracerProvider, which is not the OpenTelemetry SDK's" in warning
    assert "the control plane still gets everything" in warning
    for trace_id in lines(result.stdout):
        assert len(control_plane.wait_for_envelopes(trace_id, 1)) == 1


def test_logfire_configured_again_is_joined_again(otlp, control_plane):
    result = run_child(
        f"""
        import logfire
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        import chronicle

        def configure_logfire():
            exporter = OTLPSpanExporter(endpoint="{otlp.url}/v1/traces")
            logfire.configure(
                send_to_logfire=False,
                console=False,
                additional_span_processors=[SimpleSpanProcessor(exporter)],
            )

        configure_logfire()
        chronicle.configure(control_plane_url="{control_plane.url}")
        with chronicle.record("first"):
            pass
        configure_logfire()  # a new SDK provider inside Logfire's proxy
        with chronicle.record("second"):
            pass
        assert chronicle.flush(10)
        logfire.force_flush()
        """
    )
    assert {"first", "second"} <= {s.name for s in otlp.wait_for("first", "second")}
    assert "Overriding" not in result.stderr
