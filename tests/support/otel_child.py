"""Scripts the OpenTelemetry tests run in a fresh interpreter (``tests.support.child.run_child``).

The global TracerProvider can be set once per process, so each test that meets a provider runs a
script of its own; the parts they share are here, as unindented source to join with ``+``.
"""

from __future__ import annotations

IN_MEMORY_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
"""
"""The user's own SDK provider, set as the global one before Chronicle loads; its finished spans
are in ``exporter``."""


def lookup_run(run: str) -> str:
    """A script recording one call of a ``lookup`` tool boundary (its span ``execute_tool
    lookup``) in a request named ``run``: it prints the trace id, then asserts that
    ``chronicle.flush`` delivered everything."""
    return f"""
import chronicle

@chronicle.boundary("lookup", kind="tool")
def lookup(key):
    return {{"value": key * 2}}

with chronicle.record({run!r}) as session:
    lookup("ab")
print(session.trace_id)
assert chronicle.flush(10)
"""
