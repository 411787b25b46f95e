"""Benchmark scenarios for this Chronicle (run in the project's venv by ``run.py``).

``python tests/bench/ours.py '<json config>'`` runs one scenario (``config["scenario"]``) in this
fresh process and prints one ``BENCH-RESULT {...}`` line. ``prior.py`` runs the same scenarios
against ``agent-chronicle==1.1.1`` so the two can be compared figure by figure.

Delivery targets: ``Discard`` is a ``ControlPlaneClient`` that drops what it is given (installed
with ``chronicle.runtime.install``; the envelopes are still built, validated and serialized by the
delivery thread, only the network is skipped); ``control_plane_url`` is a real local control plane.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import corpus_bench
import keep_bench
from agentplane_primitives.models import Span, Trace
from common import (
    LLM_KWARGS,
    LLM_NAME,
    TOOL_ARGS,
    TOOL_KWARGS,
    TOOL_NAME,
    WARMUP_CALLS,
    emit,
    per_call_us,
    rotation,
    settle,
)

import chronicle
import chronicle.runtime as chronicle_runtime

_REPO = Path(__file__).resolve().parents[2]
if not Path(chronicle.__file__).resolve().is_relative_to(_REPO):
    raise SystemExit(f"ours.py must import this repo's chronicle, got {chronicle.__file__}")

_LIMITS = {"max_batch": 100, "max_body_bytes": 4 * 1024 * 1024}


class Discard:
    """A ``ControlPlaneClient`` that drops every body (the network is the only thing skipped)."""

    def health(self) -> dict[str, Any]:
        return dict(_LIMITS)

    def register_trace(self, trace: Trace) -> None:
        pass

    def put_span(self, span: Span) -> None:
        pass

    def post_envelopes(self, body: bytes) -> None:
        pass

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        return None

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


class Capture(Discard):
    """Keeps the envelope bodies it is given (to post them raw for the delivery ceiling)."""

    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []

    def post_envelopes(self, body: bytes) -> None:
        self.envelopes.extend(json.loads(body)["envelopes"])


class Blocked(Discard):
    """Holds its first batch post until released: everything recorded after it stays queued."""

    def __init__(self) -> None:
        self._released = threading.Event()

    def post_envelopes(self, body: bytes) -> None:
        self._released.wait()

    def release(self) -> None:
        self._released.set()


tool = chronicle.boundary(TOOL_NAME)(common.tool_body)
llm = chronicle.boundary(LLM_NAME, kind="llm", provider="openai")(common.llm_body)


def use_discard() -> None:
    chronicle_runtime.install(Discard())


def use_control_plane(url: str) -> None:
    chronicle.configure(control_plane_url=url)


def drop_queue() -> None:
    """Forget the configuration without delivering what is queued (between timed blocks).

    The queue is emptied first (a private reach into the delivery, for the benchmark only) so
    that ``reset()`` waits for at most the one batch in flight, not for the queue to drain.
    """
    runtime = chronicle_runtime.current()
    delivery = runtime.delivery
    with delivery._lock:
        delivery._traces.clear()
        delivery._spans.clear()
        delivery._envelopes.clear()
    if isinstance(runtime.client, Blocked):
        runtime.client.release()
    chronicle.reset()


# ---- section 1: per-call overhead ----------------------------------------------------------


def _otel_references() -> tuple[Any, Any]:
    """A private TracerProvider with ``BatchSpanProcessor`` and a discarding exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class DiscardExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardExporter()))
    return provider, provider.get_tracer("bench")


def plain_span(tracer: Any, name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(name):
            return fn(*args, **kwargs)

    return wrapper


def span_with_json(tracer: Any, name: str, fn: Any) -> Any:
    """The minimal recording decorator: a span plus the JSON of the arguments and the result."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(name) as span:
            span.set_attribute("input.value", json.dumps({"args": args, "kwargs": kwargs}))
            result = fn(*args, **kwargs)
            span.set_attribute("output.value", json.dumps(result))
            return result

    return wrapper


def scenario_calls(cfg: dict[str, Any]) -> dict[str, Any]:
    url = cfg["control_plane_url"]
    n_tool, n_llm, blocks = cfg["n_tool"], cfg["n_llm"], cfg["blocks"]
    provider, tracer = _otel_references()
    refs = {
        "bare/tool": (common.tool_body, TOOL_ARGS, TOOL_KWARGS, n_tool),
        "bare/llm": (common.llm_body, (), LLM_KWARGS, n_llm),
        "otel_span/tool": (
            plain_span(tracer, TOOL_NAME, common.tool_body),
            TOOL_ARGS,
            TOOL_KWARGS,
            n_tool,
        ),
        "otel_json/tool": (
            span_with_json(tracer, TOOL_NAME, common.tool_body),
            TOOL_ARGS,
            TOOL_KWARGS,
            n_tool,
        ),
        "otel_json/llm": (span_with_json(tracer, LLM_NAME, common.llm_body), (), LLM_KWARGS, n_llm),
    }
    # The same, timed in this thread's CPU time: what "thread" below compares with.
    refs["otel_json_thread/tool"] = refs["otel_json/tool"]
    refs["otel_json_thread/llm"] = refs["otel_json/llm"]
    ours: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], int, str]] = {
        "chronicle/tool/discard": (tool, TOOL_ARGS, TOOL_KWARGS, n_tool, "discard"),
        "chronicle/llm/discard": (llm, (), LLM_KWARGS, n_llm, "discard"),
        "chronicle/tool/cp": (tool, TOOL_ARGS, TOOL_KWARGS, n_tool, "cp"),
        "chronicle/llm/cp": (llm, (), LLM_KWARGS, n_llm, "cp"),
        # Delivery held (the client blocks on its first batch, so the worker sits idle): what
        # the agent's thread pays by itself, without the worker's share of the GIL.
        "chronicle/tool/held": (tool, TOOL_ARGS, TOOL_KWARGS, n_tool, "held"),
        "chronicle/llm/held": (llm, (), LLM_KWARGS, n_llm, "held"),
        # The agent thread's share while delivery keeps up: this thread's CPU time, the worker
        # idle (held) and the queue never long enough to be measured record by record (as
        # when the worker keeps up), so only the call's own work counts.
        "chronicle/tool/thread": (tool, TOOL_ARGS, TOOL_KWARGS, n_tool, "thread"),
        "chronicle/llm/thread": (llm, (), LLM_KWARGS, n_llm, "thread"),
    }

    def run_ref(name: str, n: int | None = None) -> float:
        fn, args, kwargs, count = refs[name]
        clock = time.thread_time if "_thread/" in name else time.perf_counter
        with tracer.start_as_current_span("request"):
            value = per_call_us(fn, args, kwargs, n or count, clock)
        provider.force_flush()
        return value

    def run_ours(name: str, n: int | None = None) -> float:
        fn, args, kwargs, count, sink = ours[name]
        if sink == "cp":
            use_control_plane(url)
        elif sink == "held":
            chronicle_runtime.install(Blocked())
        elif sink == "thread":  # nothing measured record by record: the queue stays short
            chronicle_runtime.install(Blocked(), batch_size=10**6, max_queue=10**7)
        else:
            use_discard()
        settle()
        clock = time.thread_time if sink == "thread" else time.perf_counter
        with chronicle.record("bench-calls"):
            value = per_call_us(fn, args, kwargs, n or count, clock)
        if sink == "discard":
            chronicle.flush(120)  # the worker finishes building before the next block
        drop_queue()  # what is still queued must not slow the next block down
        return value

    names = [*refs, *ours]
    for name in names:  # warm-up: imports, caches, first-call paths
        (run_ref if name in refs else run_ours)(name, WARMUP_CALLS)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for block in range(blocks):
        for name in rotation(names, block):
            settle()
            value = (run_ref if name in refs else run_ours)(name)
            samples[name].append(value)
    return {"samples_us": samples}


# ---- section 2: chronicle.wrap on an OpenAI client -----------------------------------------


def _find_wrap() -> tuple[Any, str]:
    found = getattr(chronicle, "wrap", None)
    if callable(found):
        return found, "chronicle.wrap"
    try:
        from chronicle.integrations.clients import wrap as module_wrap
    except ImportError as exc:
        return None, f"chronicle.wrap does not exist ({exc})"
    return module_wrap, "chronicle.integrations.clients.wrap (not exported as chronicle.wrap yet)"


def scenario_wrap(cfg: dict[str, Any]) -> dict[str, Any]:
    wrap, where = _find_wrap()
    if wrap is None:
        return {"available": False, "reason": where}
    import openai

    use_discard()

    def client() -> Any:
        return openai.OpenAI(base_url=cfg["llm_url"], api_key="bench", max_retries=0)

    bare = client()
    try:
        wrapped = wrap(client())
    except Exception as exc:
        return {"available": False, "reason": f"{where} raised {type(exc).__name__}: {exc}"}
    calls = {"bare_sdk": bare, "wrapped": wrapped}
    request = {"model": LLM_KWARGS["model"], "messages": LLM_KWARGS["messages"]}
    return {"available": True, "where": where, **alternate_calls(calls, request, cfg["n"])}


def alternate_calls(calls: dict[str, Any], request: dict[str, Any], n: int) -> dict[str, Any]:
    """Time single calls alternating between the clients (ABBA...), so each pair shares a moment.

    HTTP calls to a local server on a shared machine vary by tens of percent from one second to
    the next; pairing call by call is what makes a 1 ms difference on a 15 ms call visible.
    """
    names = list(calls)
    creates = {name: calls[name].chat.completions.create for name in names}
    perf = time.perf_counter
    samples: dict[str, list[float]] = {name: [] for name in names}
    with chronicle.record("bench-wrap"):
        for i in range(n + 10):
            for name in rotation(names, i):
                start = perf()
                creates[name](**request)
                elapsed = (perf() - start) * 1e6
                if i >= 10:  # the first ten pairs warm up connections and caches
                    samples[name].append(elapsed)
    chronicle.flush(60)
    return {"samples_us": samples}


# ---- section 2b: a streamed call through chronicle.wrap --------------------------------------


def scenario_stream(cfg: dict[str, Any]) -> dict[str, Any]:
    """Consume a ``cfg["chunks"]``-chunk stream through a wrapped and a bare client, alternating.

    The request is ``common.stream_request``, the timing ``common.time_streams``.
    """
    import openai

    use_discard()

    def client() -> Any:
        return openai.OpenAI(base_url=cfg["llm_url"], api_key="bench", max_retries=0)

    clients = {"bare_sdk": client(), "wrapped": chronicle.wrap(client())}
    with chronicle.record("bench-stream"):
        timed = common.time_streams(clients, common.stream_request(cfg["chunks"]), cfg["n"])
    chronicle.flush(60)
    return timed


# ---- section 3: replay ------------------------------------------------------------------------


def scenario_replay_setup(cfg: dict[str, Any]) -> dict[str, Any]:
    import httpx

    use_control_plane(cfg["control_plane_url"])
    half = cfg["calls"] // 2
    with chronicle.record("bench-replay") as session:
        for _ in range(half):
            tool(*TOOL_ARGS, **TOOL_KWARGS)
            llm(**LLM_KWARGS)
    delivered = chronicle.flush(600)
    with httpx.Client(base_url=cfg["control_plane_url"], timeout=60) as http:
        count, state = common.stored(http, session.trace_id, session.span_id)
    return {
        "trace_id": session.trace_id,
        "span_id": session.span_id,
        "recorded": 2 * half,
        "stored": count,
        "span_state": state,
        "flush_ok": delivered,
    }


def scenario_replay(cfg: dict[str, Any]) -> dict[str, Any]:
    use_control_plane(cfg["control_plane_url"])
    trace_id, span_id, half = cfg["trace_id"], cfg["span_id"], cfg["calls"] // 2
    kinds: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = {
        "tool": (tool, TOOL_ARGS, TOOL_KWARGS),
        "llm": (llm, (), LLM_KWARGS),
    }
    fetch_ms: list[float] = []
    stub_us: dict[str, list[float]] = {"tool": [], "llm": []}
    for rep in range(cfg["reps"] + 1):  # the first one warms up and is not kept
        settle()
        start = time.perf_counter()
        scope = chronicle.replay_trace(trace_id, span_id)
        scope.__enter__()
        fetched = (time.perf_counter() - start) * 1e3
        try:
            for kind in rotation(list(kinds), rep):
                fn, args, kwargs = kinds[kind]
                value = per_call_us(fn, args, kwargs, half)
                if rep:
                    stub_us[kind].append(value)
        finally:
            scope.__exit__(None, None, None)
        if rep:
            fetch_ms.append(fetched)
    return {"fetch_ms": fetch_ms, "stub_us": stub_us}


# ---- section 4: trace registration at the root ----------------------------------------------


def scenario_registration(cfg: dict[str, Any]) -> dict[str, Any]:
    import httpx

    url = cfg["control_plane_url"]
    use_control_plane(url)
    entry: list[float] = []
    exit_: list[float] = []
    raw: list[float] = []
    perf = time.perf_counter
    with httpx.Client(base_url=url, timeout=30) as http:
        for i in range(cfg["samples"] + cfg["warmup"]):
            keep = i >= cfg["warmup"]
            for step in rotation(["raw", "record"], i):
                if step == "raw":
                    value = common.raw_trace_post_ms(http)
                    if keep:
                        raw.append(value)
                    continue
                start = perf()
                with chronicle.record():
                    entered = perf()
                done = perf()
                chronicle.flush(30)  # each sample starts with an idle control plane
                if keep:
                    entry.append((entered - start) * 1e3)
                    exit_.append((done - entered) * 1e3)
    return {"entry_ms": entry, "exit_ms": exit_, "raw_post_ms": raw}


# ---- section 5: delivery ------------------------------------------------------------------------


def _captured_bodies(count: int) -> list[dict[str, Any]]:
    capture = Capture()
    chronicle_runtime.install(capture)
    with chronicle.record("bench-capture"):
        for _ in range(count):
            tool(*TOOL_ARGS, **TOOL_KWARGS)
    chronicle.flush(60)
    chronicle.reset()
    return capture.envelopes


def scenario_burst(cfg: dict[str, Any]) -> dict[str, Any]:
    import httpx

    url, calls = cfg["control_plane_url"], cfg["calls"]
    bodies = _captured_bodies(cfg["ceiling_envelopes"])
    ceilings = [common.raw_envelope_ceiling(url, bodies, cfg["batch"])]
    use_control_plane(url)  # the default settings
    delivery = chronicle_runtime.current().delivery
    perf = time.perf_counter
    settle()
    start = perf()
    with chronicle.record("bench-burst") as session:
        for _ in range(calls):
            tool(*TOOL_ARGS, **TOOL_KWARGS)
        burst_end = perf()
    exited = perf()
    queued_at_exit = len(delivery._envelopes)  # private: only read for the report
    dropped_at_exit = delivery.dropped
    flushed = chronicle.flush(cfg["flush_timeout"])
    delivered_at = perf()
    with httpx.Client(base_url=url, timeout=120) as http:
        count, state = common.stored(http, session.trace_id, session.span_id)
    ceilings.append(common.raw_envelope_ceiling(url, bodies, cfg["batch"]))
    return {
        "recorded": calls,
        "stored": count,
        "lost": calls - count,
        "dropped": delivery.dropped,
        "dropped_at_exit": dropped_at_exit,
        "span_state": state,
        "flush_ok": flushed,
        "burst_s": burst_end - start,
        "record_exit_ms": (exited - burst_end) * 1e3,
        "queued_at_exit": queued_at_exit,
        "deliver_s": delivered_at - start,
        "delivered_per_s": count / (delivered_at - start),
        "ceiling_per_s": [c["per_s"] for c in ceilings],
    }


def scenario_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    fn, args, kwargs = (
        (tool, TOOL_ARGS, TOOL_KWARGS) if cfg["kind"] == "tool" else (llm, (), LLM_KWARGS)
    )
    use_discard()
    with chronicle.record("bench-warm"):
        per_call_us(fn, args, kwargs, WARMUP_CALLS)
    chronicle.flush(60)
    # Room for every call: what is measured is memory per queued envelope, never a drop.
    chronicle_runtime.install(Blocked(), max_queue=max(100_000, 2 * cfg["calls"]))
    delivery = chronicle_runtime.current().delivery
    settle()
    common.reset_peak_rss()
    before, _ = common.rss_kib()
    with chronicle.record("bench-memory"):
        per_call_us(fn, args, kwargs, cfg["calls"])
        time.sleep(0.2)  # let the worker take (and block on) its first batch
        settle()
        after, peak = common.rss_kib()
        queued = len(delivery._envelopes) + len(delivery._in_flight)  # private: report only
        dropped = delivery.dropped
    return {
        "calls": cfg["calls"],
        "queued": queued,
        "dropped": dropped,
        "rss_delta_kib": after - before,
        "peak_delta_kib": peak - before,
    }


# ---- section 6: beside the peers --------------------------------------------------------------


def scenario_peers(cfg: dict[str, Any]) -> dict[str, Any]:
    """Chronicle's two boundaries (discarding sink) beside the references ``peer.py`` measures."""
    n_tool, n_llm, blocks = cfg["n_tool"], cfg["n_llm"], cfg["blocks"]
    provider, tracer = _otel_references()
    counts = {"tool": n_tool, "llm": n_llm}
    variants: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], bool]] = {
        "otel_span/tool": (plain_span(tracer, TOOL_NAME, common.tool_body), *_TOOL, False),
        "otel_json/tool": (span_with_json(tracer, TOOL_NAME, common.tool_body), *_TOOL, False),
        "otel_json/llm": (span_with_json(tracer, LLM_NAME, common.llm_body), *_LLM, False),
        "tool": (tool, *_TOOL, True),
        "llm": (llm, *_LLM, True),
    }

    def run(name: str, n: int | None = None) -> float:
        fn, args, kwargs, ours = variants[name]
        count = n or counts[name.rsplit("/", 1)[-1]]
        if not ours:
            with tracer.start_as_current_span("request"):
                value = per_call_us(fn, args, kwargs, count)
            provider.force_flush()
            return value
        use_discard()
        settle()
        with chronicle.record("bench-peers"):
            value = per_call_us(fn, args, kwargs, count)
        chronicle.flush(120)
        drop_queue()
        return value

    for name in variants:
        run(name, WARMUP_CALLS)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for block in range(blocks):
        for name in rotation(list(variants), block):
            settle()
            samples[name].append(run(name))
    return {"samples_us": samples}


_TOOL = (TOOL_ARGS, TOOL_KWARGS)
_LLM: tuple[tuple[Any, ...], dict[str, Any]] = ((), LLM_KWARGS)


# ---- section 7: growth curves -----------------------------------------------------------------

ingest = chronicle.boundary(common.INGEST_NAME)(common.ingest_body)


def scenario_growth_calls(cfg: dict[str, Any]) -> dict[str, Any]:
    """Per-call cost of a ``tool`` call in request spans of 100 to 100,000 calls.

    Each span is timed from its first call until ``flush()`` returned (discarding sink), so the
    delivery worker's share is counted whatever the span's length: in a short span most of the
    worker's building happens after the last call, in a long one it competes with the calls.
    """
    sizes: list[int] = cfg["sizes"]
    reps = {size: max(1, cfg["calls_per_size"] // size) for size in sizes}
    use_discard()
    with chronicle.record("bench-warm"):
        per_call_us(tool, TOOL_ARGS, TOOL_KWARGS, WARMUP_CALLS)
    chronicle.flush(60)
    perf = time.perf_counter
    per_call: dict[str, list[float]] = {str(size): [] for size in sizes}
    dropped = 0
    for rep in range(max(reps.values())):
        for size in rotation(sizes, rep):
            if rep >= reps[size]:
                continue
            use_discard()
            settle()
            with chronicle.record("bench-growth"):
                start = perf()  # the span's entry (its trace registration) is not a call's cost
                for _ in range(size):
                    tool(*TOOL_ARGS, **TOOL_KWARGS)
            chronicle.flush(600)
            elapsed = perf() - start
            dropped += chronicle_runtime.current().delivery.dropped
            per_call[str(size)].append(elapsed / size * 1e6)
            drop_queue()
    return {"per_call_us": per_call, "dropped": dropped}


def scenario_growth_payload(cfg: dict[str, Any]) -> dict[str, Any]:
    """A ``tool`` call taking 100 B to 1 MB of JSON, beside ``json.dumps`` of the same payload.

    Boundary blocks run ``k`` calls and ``flush()`` (the worker builds and serializes each
    envelope: that is part of the cost); ``json.dumps`` blocks encode the payload the same way
    ``span_with_json`` does. Both alternate block by block in a rotating order. The payload
    limit is raised so that even the largest payload is recorded whole.
    """
    sizes: list[int] = cfg["sizes"]
    payloads = {size: common.documents_of(size) for size in sizes}
    calls = {size: max(3, min(1000, cfg["bytes_per_block"] // size)) for size in sizes}
    dumps_n = {size: max(10, 10 * cfg["bytes_per_block"] // size) for size in sizes}
    # Room for the whole payload (the default max_payload_bytes, 256 KiB, would cut the 1 MB one
    # and flatten the curve): what is measured is the cost of recording all of it.
    chronicle_runtime.install(Discard(), max_payload_bytes=4 * max(sizes))
    perf = time.perf_counter

    def boundary(size: int, n: int) -> float:
        payload = payloads[size]
        settle()
        with chronicle.record("bench-payload"):
            start = perf()
            for _ in range(n):
                ingest(payload)
            chronicle.flush(600)
            elapsed = perf() - start
        return elapsed / n * 1e6

    def dumps(size: int, n: int) -> float:
        payload = payloads[size]
        settle()
        start = perf()
        for _ in range(n):
            json.dumps({"args": (payload,), "kwargs": {}})
        return (perf() - start) / n * 1e6

    tasks = [(kind, size) for size in sizes for kind in ("boundary", "dumps")]
    for kind, size in tasks:  # warm-up
        (boundary if kind == "boundary" else dumps)(size, 2)
    samples: dict[str, list[float]] = {f"{kind}/{size}": [] for kind, size in tasks}
    for block in range(cfg["blocks"]):
        for kind, size in rotation(tasks, block):
            if kind == "boundary":
                samples[f"{kind}/{size}"].append(boundary(size, calls[size]))
            else:
                samples[f"{kind}/{size}"].append(dumps(size, dumps_n[size]))
    return {
        "samples_us": samples,
        "json_bytes": {str(size): len(json.dumps(payloads[size])) for size in sizes},
        "dropped": chronicle_runtime.current().delivery.dropped,
    }


def scenario_growth_replay_setup(cfg: dict[str, Any]) -> dict[str, Any]:
    """Record one request span per size (``tool`` calls) to the control plane."""
    import httpx

    use_control_plane(cfg["control_plane_url"])
    spans: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=cfg["control_plane_url"], timeout=60) as http:
        for size in cfg["sizes"]:
            with chronicle.record("bench-growth-replay") as session:
                for _ in range(size):
                    tool(*TOOL_ARGS, **TOOL_KWARGS)
            delivered = chronicle.flush(cfg["flush_timeout"])
            count, _ = common.stored(http, session.trace_id, session.span_id)
            spans[str(size)] = {
                "trace_id": session.trace_id,
                "span_id": session.span_id,
                "stored": count,
                "flush_ok": delivered,
            }
    return {"spans": spans}


def scenario_growth_replay(cfg: dict[str, Any]) -> dict[str, Any]:
    """``replay_trace`` entry (fetch, validate, index) for each recorded span, rotated."""
    use_control_plane(cfg["control_plane_url"])
    spans: dict[str, dict[str, Any]] = cfg["spans"]
    sizes = list(spans)
    entry_ms: dict[str, list[float]] = {size: [] for size in sizes}
    for rep in range(cfg["reps"] + 1):  # the first round warms up and is not kept
        for size in rotation(sizes, rep):
            span = spans[size]
            settle()
            start = time.perf_counter()
            scope = chronicle.replay_trace(span["trace_id"], span["span_id"])
            scope.__enter__()
            elapsed = (time.perf_counter() - start) * 1e3
            scope.__exit__(None, None, None)
            if rep:
                entry_ms[size].append(elapsed)
    return {"entry_ms": entry_ms}


SCENARIOS = {
    "calls": scenario_calls,
    "wrap": scenario_wrap,
    "stream": scenario_stream,
    "replay_setup": scenario_replay_setup,
    "replay": scenario_replay,
    "registration": scenario_registration,
    "burst": scenario_burst,
    "memory": scenario_memory,
    "peers": scenario_peers,
    "growth_calls": scenario_growth_calls,
    "growth_payload": scenario_growth_payload,
    "growth_replay_setup": scenario_growth_replay_setup,
    "growth_replay": scenario_growth_replay,
    **corpus_bench.SCENARIOS,
    **keep_bench.SCENARIOS,
}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    result = SCENARIOS[cfg["scenario"]](cfg)
    result["implementation"] = f"chronicle {chronicle.__version__} (this repo)"
    emit(result)


if __name__ == "__main__":
    main()
