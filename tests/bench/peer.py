"""The peers of ``make bench``: other agent tracers' decorators on the same two payloads.

Run by ``run.py`` with the Python of a throwaway virtual environment holding one peer (and never
Chronicle): ``python peer.py '<json config>'`` with ``config["peer"]`` one of ``PEERS``. Prints
one ``BENCH-RESULT {...}`` line, as ``ours.py`` and ``prior.py`` do.

Each peer is set up the way its documentation shows, with every exporter replaced by one that
discards (``DiscardExporter`` behind the SDK's ``BatchSpanProcessor``, or the peer's own
processor where it insists on one), so what is measured is the agent thread's cost of the
decorator plus the span pipeline, never the network:

- ``langfuse``: ``@observe`` (``as_type="generation"`` for the model call), a ``Langfuse``
  client given ``span_exporter=DiscardExporter()`` and a private ``TracerProvider``.
- ``logfire``: ``@logfire.instrument(extract_args=True, record_return=True)`` after
  ``logfire.configure(send_to_logfire=False, console=False, additional_span_processors=[...])``.
- ``traceloop``: OpenLLMetry's ``@task`` after ``Traceloop.init(exporter=DiscardExporter(),
  instruments=set(), telemetry_enabled=False)``.
- ``openinference``: ``tracer.tool`` / ``tracer.llm`` / ``tracer.chain`` of an
  ``openinference.instrumentation.TracerProvider`` with a discarding ``BatchSpanProcessor``.

Every call runs inside one parent span of the peer's own (as Chronicle's run inside one
``chronicle.record``). The same process also measures the two references of section 1 on its own
OpenTelemetry SDK (a plain span, and a span with two ``json.dumps`` attributes), so each peer's
figure can be read as a ratio to a plain span measured beside it.

Standard library, OpenTelemetry and the peer only: ``common.py`` is shared with the other
scenario scripts, ``otel_refs.py`` (the references and ``DiscardExporter``) with ``ours.py``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import common
import otel_refs
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_refs import DiscardExporter

PEERS = ("langfuse", "logfire", "traceloop", "openinference")


class Peer:
    """One peer set up to record into a discarding exporter."""

    def __init__(
        self,
        version: str,
        variants: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]],
        parent: Callable[[], contextlib.AbstractContextManager[Any]],
        flush: Callable[[], Any],
    ) -> None:
        self.version = version
        self.variants = variants
        """variant name (``tool``, ``llm``, ...) -> (decorated function, args, kwargs)."""
        self.parent = parent
        self.flush = flush


def _version(distribution: str) -> str:
    import importlib.metadata

    return f"{distribution} {importlib.metadata.version(distribution)}"


def langfuse_peer() -> Peer:
    from langfuse import Langfuse, observe

    provider = TracerProvider()
    client = Langfuse(
        public_key="pk-lf-bench",
        secret_key="sk-lf-bench",
        base_url="http://127.0.0.1:9",  # never reached: the exporter discards
        span_exporter=DiscardExporter(),
        tracer_provider=provider,
    )
    tool = observe(name=common.TOOL_NAME)(common.tool_body)
    llm = observe(name=common.LLM_NAME, as_type="generation")(common.llm_body)

    @contextlib.contextmanager
    def parent() -> Iterator[Any]:
        with client.start_as_current_observation(name="request") as span:
            yield span

    return Peer(
        _version("langfuse"),
        common.workload(tool, llm),
        parent,
        client.flush,
    )


def logfire_peer() -> Peer:
    import logfire

    logfire.configure(
        send_to_logfire=False,
        console=False,
        metrics=False,
        inspect_arguments=False,
        additional_span_processors=[BatchSpanProcessor(DiscardExporter())],
    )
    tool = logfire.instrument(common.TOOL_NAME, extract_args=True, record_return=True)(
        common.tool_body
    )
    llm = logfire.instrument(common.LLM_NAME, extract_args=True, record_return=True)(
        common.llm_body
    )
    return Peer(
        _version("logfire"),
        common.workload(tool, llm),
        lambda: logfire.span("request"),
        logfire.force_flush,
    )


def traceloop_peer() -> Peer:
    from opentelemetry import trace
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import task

    Traceloop.init(
        app_name="bench",
        api_endpoint="http://127.0.0.1:9",  # never reached: the exporter discards
        exporter=DiscardExporter(),
        telemetry_enabled=False,
        instruments=set(),
    )
    tool = task(name=common.TOOL_NAME)(common.tool_body)
    llm = task(name=common.LLM_NAME)(common.llm_body)
    tracer = trace.get_tracer("bench")
    provider = trace.get_tracer_provider()
    return Peer(
        _version("traceloop-sdk"),
        common.workload(tool, llm),
        lambda: tracer.start_as_current_span("request"),
        lambda: provider.force_flush(),  # type: ignore[attr-defined]
    )


def openinference_peer() -> Peer:
    from openinference.instrumentation import TracerProvider as OITracerProvider

    provider = OITracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardExporter()))
    tracer = provider.get_tracer("bench")
    tool = tracer.tool(name=common.TOOL_NAME)(common.tool_body)
    chain = tracer.chain(name=common.TOOL_NAME)(common.tool_body)
    decorate_llm: Any = tracer.llm(name=common.LLM_NAME)  # its stub types no ``**kwargs`` function
    llm = decorate_llm(common.llm_body)
    calls = common.workload(tool, llm)
    return Peer(
        _version("openinference-instrumentation"),
        {
            "tool": calls["tool"],
            "chain": (chain, common.TOOL_ARGS, common.TOOL_KWARGS),
            "llm": calls["llm"],
        },
        lambda: tracer.start_as_current_span("request", openinference_span_kind="chain"),
        provider.force_flush,
    )


SETUP: dict[str, Callable[[], Peer]] = {
    "langfuse": langfuse_peer,
    "logfire": logfire_peer,
    "traceloop": traceloop_peer,
    "openinference": openinference_peer,
}


def scenario_peers(cfg: dict[str, Any]) -> dict[str, Any]:
    peer = SETUP[cfg["peer"]]()
    provider, tracer = otel_refs.references()
    refs = otel_refs.variants(tracer)
    counts = {"tool": cfg["n_tool"], "chain": cfg["n_tool"], "llm": cfg["n_llm"]}

    def run(name: str, n: int | None) -> float:
        count = n or counts[name.rsplit("/", 1)[-1]]
        if name in refs:
            return otel_refs.per_call_in_request(provider, tracer, refs[name], count)
        fn, args, kwargs = peer.variants[name]
        with peer.parent():
            value = common.per_call_us(fn, args, kwargs, count)
        peer.flush()
        return value

    samples = common.sample_blocks([*refs, *peer.variants], run, cfg["blocks"])
    return {"samples_us": samples, "implementation": peer.version}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    if cfg["scenario"] != "peers":
        raise SystemExit(f"peer.py runs only the peers scenario, not {cfg['scenario']!r}")
    common.emit(scenario_peers(cfg))


if __name__ == "__main__":
    main()
