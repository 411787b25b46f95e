"""Benchmark scenarios for this Chronicle (run in the project's venv by ``run.py``).

``python tests/bench/ours.py '<json config>'`` runs one scenario (``config["scenario"]``) in this
fresh process and prints one ``BENCH-RESULT {...}`` line. ``prior.py`` runs the same scenarios
against ``agent-chronicle==1.1.1`` so the two can be compared figure by figure.

Delivery targets: ``clients.Discard`` is a ``ControlPlaneClient`` that drops what it is given
(installed with ``chronicle.runtime.install``; the envelopes are still built, validated and
serialized by the delivery thread, only the network is skipped); ``control_plane_url`` is a real
local control plane.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import clients
import common
import corpus_bench
import keep_bench
import otel_refs
from clients import Capture, Discard, Held

import chronicle
import chronicle.runtime as chronicle_runtime

_REPO = Path(__file__).resolve().parents[2]
if not Path(chronicle.__file__).resolve().is_relative_to(_REPO):
    raise SystemExit(f"ours.py must import this repo's chronicle, got {chronicle.__file__}")

tool = chronicle.boundary(common.TOOL_NAME)(common.tool_body)
llm = chronicle.boundary(common.LLM_NAME, kind="llm", provider="openai")(common.llm_body)
CALLS = common.workload(tool, llm)
"""The two calls through Chronicle's boundaries."""
CALLS_BARE = common.workload(common.tool_body, common.llm_body)
"""The same two calls undecorated."""


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
    clients.drop_queued(runtime.delivery)
    if isinstance(runtime.client, Held):
        runtime.client.release()
    chronicle.reset()


# ---- section 1: per-call overhead ----------------------------------------------------------


def scenario_calls(cfg: dict[str, Any]) -> dict[str, Any]:
    url = cfg["control_plane_url"]
    counts = {"tool": cfg["n_tool"], "llm": cfg["n_llm"]}
    provider, tracer = otel_refs.references()
    refs = {
        "bare/tool": CALLS_BARE["tool"],
        "bare/llm": CALLS_BARE["llm"],
        **otel_refs.variants(tracer),
    }
    # The same, timed in this thread's CPU time: what "thread" below compares with.
    refs["otel_json_thread/tool"] = refs["otel_json/tool"]
    refs["otel_json_thread/llm"] = refs["otel_json/llm"]
    # Each of Chronicle's two calls with each delivery target (the name's last part):
    # discard and cp (the real control plane); held, the client blocking on its first batch so
    # the worker sits idle: what the agent's thread pays by itself, without the worker's share of
    # the GIL; thread, the agent thread's share while delivery keeps up: this thread's CPU time,
    # the worker idle (held) and the queue never long enough to be measured record by record (as
    # when the worker keeps up), so only the call's own work counts.
    ours = [
        f"chronicle/{kind}/{sink}" for sink in ("discard", "cp", "held", "thread") for kind in CALLS
    ]

    def run(name: str, n: int | None) -> float:
        kind = name.split("/")[1]
        count = n or counts[kind]
        if name in refs:
            clock = time.thread_time if "_thread/" in name else time.perf_counter
            return otel_refs.per_call_in_request(provider, tracer, refs[name], count, clock)
        sink = name.rsplit("/", 1)[1]
        if sink == "cp":
            use_control_plane(url)
        elif sink == "held":
            chronicle_runtime.install(Held())
        elif sink == "thread":  # nothing measured record by record: the queue stays short
            chronicle_runtime.install(Held(), batch_size=10**6, max_queue=10**7)
        else:
            use_discard()
        common.settle()
        clock = time.thread_time if sink == "thread" else time.perf_counter
        fn, args, kwargs = CALLS[kind]
        with chronicle.record("bench-calls"):
            value = common.per_call_us(fn, args, kwargs, count, clock)
        if sink == "discard":
            chronicle.flush(120)  # the worker finishes building before the next block
        drop_queue()  # what is still queued must not slow the next block down
        return value

    return {"samples_us": common.sample_blocks([*refs, *ours], run, cfg["blocks"])}


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
    use_discard()
    bare = common.openai_client(cfg["llm_url"])
    try:
        wrapped = wrap(common.openai_client(cfg["llm_url"]))
    except Exception as exc:
        return {"available": False, "reason": f"{where} raised {type(exc).__name__}: {exc}"}
    with chronicle.record("bench-wrap"):
        timed = common.alternate_calls(
            {"bare_sdk": bare, "wrapped": wrapped}, common.WRAP_REQUEST, cfg["n"]
        )
    chronicle.flush(60)
    return {"available": True, "where": where, **timed}


# ---- section 2b: a streamed call through chronicle.wrap --------------------------------------


def scenario_stream(cfg: dict[str, Any]) -> dict[str, Any]:
    """Consume a ``cfg["chunks"]``-chunk stream through a wrapped and a bare client, alternating.

    The request is ``common.stream_request``, the timing ``common.time_streams``.
    """
    use_discard()
    url = cfg["llm_url"]
    clients = {
        "bare_sdk": common.openai_client(url),
        "wrapped": chronicle.wrap(common.openai_client(url)),
    }
    with chronicle.record("bench-stream"):
        timed = common.time_streams(clients, common.stream_request(cfg["chunks"]), cfg["n"])
    chronicle.flush(60)
    return timed


# ---- section 3: replay ------------------------------------------------------------------------


def scenario_replay_setup(cfg: dict[str, Any]) -> dict[str, Any]:
    def delivered(http: Any, session: Any, recorded: int) -> dict[str, Any]:
        flushed = chronicle.flush(600)
        count, state = common.stored(http, session.trace_id, session.span_id)
        return {"stored": count, "span_state": state, "flush_ok": flushed}

    return common.replay_recording(use_control_plane, chronicle.record, CALLS, cfg, delivered)


def scenario_replay(cfg: dict[str, Any]) -> dict[str, Any]:
    return common.replay_timings(use_control_plane, chronicle.replay_trace, CALLS, cfg)


# ---- section 4: trace registration at the root ----------------------------------------------


def scenario_registration(cfg: dict[str, Any]) -> dict[str, Any]:
    # each sample starts with an idle control plane
    return common.registration_timings(
        use_control_plane, chronicle.record, cfg, after=lambda: chronicle.flush(30)
    )


# ---- section 5: delivery ------------------------------------------------------------------------


def _captured_bodies(count: int) -> list[dict[str, Any]]:
    capture = Capture()
    chronicle_runtime.install(capture)
    with chronicle.record("bench-capture"):
        for _ in range(count):
            tool(*common.TOOL_ARGS, **common.TOOL_KWARGS)
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
    common.settle()
    start = perf()
    with chronicle.record("bench-burst") as session:
        common.per_call_us(tool, common.TOOL_ARGS, common.TOOL_KWARGS, calls)
        burst_end = perf()
    exited = perf()
    queued_at_exit = len(delivery._envelopes)  # private: only read for the report
    dropped_at_exit = delivery.dropped
    flushed = chronicle.flush(cfg["flush_timeout"])
    delivered_at = perf()
    with httpx.Client(base_url=url, timeout=120) as http:
        count, state = common.stored(http, session.trace_id, session.span_id)
    ceilings.append(common.raw_envelope_ceiling(url, bodies, cfg["batch"]))
    found = (calls, count, state, flushed)
    queue = (delivery.dropped, dropped_at_exit, queued_at_exit)
    perf_at = (start, burst_end, exited)
    return common.burst_result(found, queue, perf_at, delivered_at - start, ceilings)


def scenario_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    fn, args, kwargs = CALLS[cfg["kind"]]
    use_discard()
    with chronicle.record("bench-warm"):
        common.per_call_us(fn, args, kwargs, common.WARMUP_CALLS)
    chronicle.flush(60)
    # Room for every call: what is measured is memory per queued envelope, never a drop.
    chronicle_runtime.install(Held(), max_queue=max(100_000, 2 * cfg["calls"]))
    delivery = chronicle_runtime.current().delivery
    with common.memory_growth(chronicle.record, (fn, args, kwargs), cfg["calls"]) as found:
        queued = len(delivery._envelopes) + len(delivery._in_flight)  # private: report only
        dropped = delivery.dropped
    return {**found, "queued": queued, "dropped": dropped}


# ---- section 6: beside the peers --------------------------------------------------------------


def scenario_peers(cfg: dict[str, Any]) -> dict[str, Any]:
    """Chronicle's two boundaries (discarding sink) beside the references ``peer.py`` measures."""
    counts = {"tool": cfg["n_tool"], "llm": cfg["n_llm"]}
    provider, tracer = otel_refs.references()
    refs = otel_refs.variants(tracer)

    def run(name: str, n: int | None) -> float:
        count = n or counts[name.rsplit("/", 1)[-1]]
        if name in refs:
            return otel_refs.per_call_in_request(provider, tracer, refs[name], count)
        fn, args, kwargs = CALLS[name]
        use_discard()
        common.settle()
        with chronicle.record("bench-peers"):
            value = common.per_call_us(fn, args, kwargs, count)
        chronicle.flush(120)
        drop_queue()
        return value

    return {"samples_us": common.sample_blocks([*refs, *CALLS], run, cfg["blocks"])}


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
        common.per_call_us(tool, common.TOOL_ARGS, common.TOOL_KWARGS, common.WARMUP_CALLS)
    chronicle.flush(60)
    perf = time.perf_counter
    per_call: dict[str, list[float]] = {str(size): [] for size in sizes}
    dropped = 0
    for rep in range(max(reps.values())):
        for size in common.rotation(sizes, rep):
            if rep >= reps[size]:
                continue
            use_discard()
            common.settle()
            with chronicle.record("bench-growth"):
                start = perf()  # the span's entry (its trace registration) is not a call's cost
                for _ in range(size):
                    tool(*common.TOOL_ARGS, **common.TOOL_KWARGS)
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
        common.settle()
        with chronicle.record("bench-payload"):
            start = perf()
            for _ in range(n):
                ingest(payload)
            chronicle.flush(600)
            elapsed = perf() - start
        return elapsed / n * 1e6

    def dumps(size: int, n: int) -> float:
        payload = payloads[size]
        common.settle()
        start = perf()
        for _ in range(n):
            json.dumps({"args": (payload,), "kwargs": {}})
        return (perf() - start) / n * 1e6

    tasks = [(kind, size) for size in sizes for kind in ("boundary", "dumps")]
    for kind, size in tasks:  # warm-up
        (boundary if kind == "boundary" else dumps)(size, 2)
    samples: dict[str, list[float]] = {f"{kind}/{size}": [] for kind, size in tasks}
    for block in range(cfg["blocks"]):
        for kind, size in common.rotation(tasks, block):
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
                    tool(*common.TOOL_ARGS, **common.TOOL_KWARGS)
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
        for size in common.rotation(sizes, rep):
            span = spans[size]
            common.settle()
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


if __name__ == "__main__":
    common.run_scenario(SCENARIOS, f"chronicle {chronicle.__version__} (this repo)")
