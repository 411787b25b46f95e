"""One application beside one OpenTelemetry tool, in a fresh interpreter (providers are global).

Run as ``python -m tests.support.tool_scenario TOOL ORDER`` with ``OTLP_URL`` (the test's OTLP
receiver), ``CONTROL_PLANE_URL`` and ``LLM_URL`` (the local model server) in the environment.
TOOL is ``phoenix``, ``langfuse``, ``logfire`` or ``otlp`` (the user's own SDK provider with an
OTLP exporter, as for Jaeger); ORDER is ``tool-first`` or ``chronicle-first``.

The application, as a user of that tool writes it: the tool set up its documented way with its
exporter pointed at the receiver, the tool's own spans (``tool-span-1`` right after it is set up,
``tool-span-2`` at the end, then a plain OTel span ``plain-span``), an app span ``app-request``
around a Chronicle request span ``citizen-run`` holding a wrapped OpenAI call and a tool
boundary ``lookup``. It prints one JSON line: the Chronicle trace id and the session's ``url``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import openai
from opentelemetry import trace

import chronicle

OTLP = os.environ["OTLP_URL"]
CONTROL_PLANE = os.environ["CONTROL_PLANE_URL"]
LLM = os.environ["LLM_URL"]


class Tool:
    """What the scenario needs from a tool: set up, its own span, the app span, flush."""

    def setup(self) -> None:
        raise NotImplementedError

    def own_span(self, name: str) -> None:
        with trace.get_tracer("tool").start_as_current_span(name):
            pass

    @contextlib.contextmanager
    def app_span(self) -> Iterator[None]:
        with trace.get_tracer("app").start_as_current_span("app-request"):
            yield

    def flush(self) -> None:
        provider = trace.get_tracer_provider()
        flush: Callable[[], Any] | None = getattr(provider, "force_flush", None)
        if flush is not None:
            flush()


class Phoenix(Tool):
    """``phoenix.otel.register()`` with OpenInference's auto-instrumentation (openai)."""

    def setup(self) -> None:
        from phoenix.otel import register

        register(
            endpoint=f"{OTLP}/v1/traces",
            protocol="http/protobuf",
            project_name="citizen",
            auto_instrument=True,
            verbose=False,
        )


class Langfuse(Tool):
    """``Langfuse(...)`` (its span processor with the default filter); spans made its way."""

    def setup(self) -> None:
        from langfuse import Langfuse as Client

        self.client = Client(
            public_key="pk-lf-local",
            secret_key="sk-lf-local",
            base_url=OTLP,
            flush_at=1,
        )

    def own_span(self, name: str) -> None:
        with self.client.start_as_current_observation(name=name, as_type="span"):
            pass

    @contextlib.contextmanager
    def app_span(self) -> Iterator[None]:
        with self.client.start_as_current_observation(name="app-request", as_type="span"):
            yield

    def flush(self) -> None:
        self.client.flush()


class Logfire(Tool):
    """``logfire.configure()`` sending to the receiver instead of Logfire's service."""

    def setup(self) -> None:
        import logfire
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        self.logfire = logfire
        logfire.configure(
            send_to_logfire=False,
            console=False,
            service_name="citizen",
            additional_span_processors=[
                SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{OTLP}/v1/traces"))
            ],
        )

    def own_span(self, name: str) -> None:
        with self.logfire.span(name):
            pass

    def flush(self) -> None:
        self.logfire.force_flush()


class Otlp(Tool):
    """The user's own SDK provider exporting OTLP/HTTP (a collector, Jaeger, Tempo, ...)."""

    def setup(self) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{OTLP}/v1/traces")))
        trace.set_tracer_provider(provider)


TOOLS: dict[str, type[Tool]] = {
    "phoenix": Phoenix,
    "langfuse": Langfuse,
    "logfire": Logfire,
    "otlp": Otlp,
}


def main(tool_name: str, order: str) -> None:
    tool = TOOLS[tool_name]()

    def configure_chronicle() -> None:
        chronicle.configure(control_plane_url=CONTROL_PLANE, service_name="citizen")

    if order == "chronicle-first":
        configure_chronicle()
        tool.setup()
        tool.own_span("tool-span-1")
    else:
        tool.setup()
        tool.own_span("tool-span-1")
        configure_chronicle()

    client = chronicle.wrap(openai.OpenAI(base_url=f"{LLM}/v1", api_key="sk-local", max_retries=0))

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str) -> dict[str, list[str]]:
        return {"hits": [f"policy for {query}"]}

    with tool.app_span():
        with chronicle.record("citizen-run", labels={"session_id": "conv-1"}) as run:
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "refund?"}]
            )
            lookup("refunds")
    tool.own_span("tool-span-2")
    trace.get_tracer("probe").start_span("plain-span").end()  # Langfuse's filter drops this one
    assert chronicle.flush(10), "Chronicle did not deliver to the control plane"
    tool.flush()
    print(json.dumps({"trace_id": run.trace_id, "url": run.url}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
