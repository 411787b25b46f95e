"""The same scenarios as ``ours.py``, for the prior implementation ``agent-chronicle==1.1.1``.

Run by ``run.py`` with the Python of a throwaway virtual environment that holds only
``agent-chronicle==1.1.1`` and what it needs (never the project's venv: both distributions are
imported as ``chronicle``). Only the prior's public API is used (``configure``, ``boundary``,
``record``, ``replay_trace``, ``wrap``, ``reset``), plus two private reads for the report (its
queue's length and ``dropped`` counter) and one private action: dropping its queue between
timed blocks, as ``chronicle.reset()`` does for ours.

Delivery targets: ``Discard`` implements the prior's ``ControlPlaneClient`` (``upsert_trace``,
``upsert_span``, ``append_envelopes``, ``read_span_envelopes``, ``close``) and serializes each
record the way its HTTP client does, then drops the bytes, so, as with ours, only the network is
skipped. ``control_plane_url`` is the same real local control plane.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import Any

import common
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

if chronicle.__version__ != "1.1.1" or "site-packages" not in chronicle.__file__:
    raise SystemExit(
        f"prior.py must run against agent-chronicle 1.1.1, got {chronicle.__version__} "
        f"from {chronicle.__file__}"
    )

from chronicle.interfaces import runtime_utils


def _dump(model: Any) -> bytes:
    return json.dumps(model.model_dump(mode="json", exclude_none=True)).encode()


class Discard:
    """The prior's ``ControlPlaneClient``: serializes like its HTTP client, then drops."""

    def upsert_trace(self, trace: Any) -> None:
        _dump(trace)

    def upsert_span(self, span: Any) -> None:
        _dump(span)

    def append_envelopes(self, envelopes: Any) -> None:
        body = {"envelopes": [e.model_dump(mode="json", exclude_none=True) for e in envelopes]}
        json.dumps(body).encode()

    def read_span_envelopes(self, trace_id: str, span_id: str) -> list[Any]:
        return []

    def close(self) -> None:
        pass


class Capture(Discard):
    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []

    def append_envelopes(self, envelopes: Any) -> None:
        self.envelopes.extend(e.model_dump(mode="json", exclude_none=True) for e in envelopes)


class Blocked(Discard):
    def __init__(self) -> None:
        self._never = threading.Event()

    def append_envelopes(self, envelopes: Any) -> None:
        self._never.wait()


tool = chronicle.boundary(TOOL_NAME)(common.tool_body)
llm = chronicle.boundary(LLM_NAME, kind="llm", provider="openai")(common.llm_body)


def _sink() -> Any:
    return runtime_utils._state.sink


def use_client(client: Any) -> None:
    chronicle.reset()
    chronicle.configure(client=client)


def use_control_plane(url: str) -> None:
    chronicle.reset()
    chronicle.configure(control_plane_url=url)


def drop_queue() -> None:
    """Empty the prior's delivery queue without delivering it (its ``reset`` would wait)."""
    sink = _sink()
    if sink is None:
        return
    while True:
        try:
            item = sink._queue.get_nowait()
        except queue.Empty:
            break
        done = getattr(item, "done", None)
        if done is not None:
            done.set()


# ---- section 1 --------------------------------------------------------------------------------


def scenario_calls(cfg: dict[str, Any]) -> dict[str, Any]:
    url = cfg["control_plane_url"]
    n_tool, n_llm, blocks = cfg["n_tool"], cfg["n_llm"], cfg["blocks"]
    refs = {
        "bare/tool": (common.tool_body, TOOL_ARGS, TOOL_KWARGS, n_tool),
        "bare/llm": (common.llm_body, (), LLM_KWARGS, n_llm),
    }
    prior = {
        "prior/tool/discard": (tool, TOOL_ARGS, TOOL_KWARGS, n_tool, False),
        "prior/llm/discard": (llm, (), LLM_KWARGS, n_llm, False),
        "prior/tool/cp": (tool, TOOL_ARGS, TOOL_KWARGS, n_tool, True),
        "prior/llm/cp": (llm, (), LLM_KWARGS, n_llm, True),
    }
    dropped: dict[str, list[int]] = {name: [] for name in prior}

    def run_ref(name: str, n: int | None = None) -> float:
        fn, args, kwargs, count = refs[name]
        return per_call_us(fn, args, kwargs, n or count)

    def run_prior(name: str, n: int | None = None) -> float:
        fn, args, kwargs, count, real = prior[name]
        if real:
            use_control_plane(url)
        else:
            use_client(Discard())
        settle()
        with chronicle.record("bench-calls"):
            value = per_call_us(fn, args, kwargs, n or count)
            sink = _sink()
            if n is None:
                dropped[name].append(sink.dropped if sink is not None else 0)
            if real:
                drop_queue()  # else its record() exit would wait for all of it
        chronicle.reset()
        return value

    names = [*refs, *prior]
    for name in names:
        (run_ref if name in refs else run_prior)(name, WARMUP_CALLS)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for block in range(blocks):
        for name in rotation(names, block):
            settle()
            samples[name].append((run_ref if name in refs else run_prior)(name))
    return {"samples_us": samples, "dropped": dropped}


# ---- section 2 --------------------------------------------------------------------------------


def scenario_wrap(cfg: dict[str, Any]) -> dict[str, Any]:
    import openai

    use_client(Discard())

    def client() -> Any:
        return openai.OpenAI(base_url=cfg["llm_url"], api_key="bench", max_retries=0)

    calls = {"bare_sdk": client(), "wrapped": chronicle.wrap(client())}
    request = {"model": LLM_KWARGS["model"], "messages": LLM_KWARGS["messages"]}
    names = list(calls)
    creates = {name: calls[name].chat.completions.create for name in names}
    perf = time.perf_counter
    samples: dict[str, list[float]] = {name: [] for name in names}
    with chronicle.record("bench-wrap"):  # the same ABBA call-by-call pairing as ours.py
        for i in range(cfg["n"] + 10):
            for name in rotation(names, i):
                start = perf()
                creates[name](**request)
                elapsed = (perf() - start) * 1e6
                if i >= 10:
                    samples[name].append(elapsed)
    return {"available": True, "where": "chronicle.wrap", "samples_us": samples}


# ---- section 3 --------------------------------------------------------------------------------


def scenario_replay_setup(cfg: dict[str, Any]) -> dict[str, Any]:
    import httpx

    url = cfg["control_plane_url"]
    use_control_plane(url)
    half = cfg["calls"] // 2
    with chronicle.record("bench-replay") as session:
        for _ in range(half):
            tool(*TOOL_ARGS, **TOOL_KWARGS)
            llm(**LLM_KWARGS)
    with httpx.Client(base_url=url, timeout=60) as http:
        count, _ = common.wait_for_count(
            http, session.trace_id, session.span_id, 2 * half, quiet_s=10, limit_s=600
        )
        _, state = common.stored(http, session.trace_id, session.span_id)
    return {
        "trace_id": session.trace_id,
        "span_id": session.span_id,
        "recorded": 2 * half,
        "stored": count,
        "span_state": state,
    }


def scenario_replay(cfg: dict[str, Any]) -> dict[str, Any]:
    use_control_plane(cfg["control_plane_url"])
    trace_id, span_id, half = cfg["trace_id"], cfg["span_id"], cfg["calls"] // 2
    kinds = {"tool": (tool, TOOL_ARGS, TOOL_KWARGS), "llm": (llm, (), LLM_KWARGS)}
    fetch_ms: list[float] = []
    stub_us: dict[str, list[float]] = {"tool": [], "llm": []}
    for rep in range(cfg["reps"] + 1):
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


# ---- section 4 --------------------------------------------------------------------------------


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
                done = perf()  # its exit flushes: the span writes are already delivered
                if keep:
                    entry.append((entered - start) * 1e3)
                    exit_.append((done - entered) * 1e3)
    return {"entry_ms": entry, "exit_ms": exit_, "raw_post_ms": raw}


# ---- section 5 --------------------------------------------------------------------------------


def _captured_bodies(count: int) -> list[dict[str, Any]]:
    capture = Capture()
    use_client(capture)
    with chronicle.record("bench-capture"):
        for _ in range(count):
            tool(*TOOL_ARGS, **TOOL_KWARGS)
    chronicle.reset()
    return capture.envelopes


def scenario_burst(cfg: dict[str, Any]) -> dict[str, Any]:
    import httpx

    url, calls = cfg["control_plane_url"], cfg["calls"]
    bodies = _captured_bodies(cfg["ceiling_envelopes"]) if cfg["ceiling_envelopes"] else []
    ceilings = [common.raw_envelope_ceiling(url, bodies, cfg["batch"])] if bodies else []
    use_control_plane(url)  # the default settings
    runtime_utils.get_environment()  # builds the sink now, not inside the timed burst
    perf = time.perf_counter
    settle()
    started = time.monotonic()
    start = perf()
    with chronicle.record("bench-burst") as session:
        for _ in range(calls):
            tool(*TOOL_ARGS, **TOOL_KWARGS)
        burst_end = perf()
        sink = _sink()
        queued_at_exit = sink._queue.qsize()
        dropped_at_exit = sink.dropped
    exited = perf()  # its record() exit flushes (and gives up after 30 s)
    with httpx.Client(base_url=url, timeout=120) as http:
        limit = cfg["flush_timeout"]
        count, last_change = common.wait_for_count(
            http, session.trace_id, session.span_id, calls - sink.dropped, quiet_s=10, limit_s=limit
        )
        more, last = common.wait_for_count(  # a straggler, if its span write was the drop
            http, session.trace_id, session.span_id, calls, quiet_s=2, limit_s=limit
        )
        if more > count:
            count, last_change = more, last
        _, state = common.stored(http, session.trace_id, session.span_id)
    delivered_s = last_change - started
    if bodies:
        ceilings.append(common.raw_envelope_ceiling(url, bodies, cfg["batch"]))
    return {
        "recorded": calls,
        "stored": count,
        "lost": calls - count,
        "dropped": sink.dropped,
        "dropped_at_exit": dropped_at_exit,
        "span_state": state,
        "flush_ok": count == calls,
        "burst_s": burst_end - start,
        "record_exit_ms": (exited - burst_end) * 1e3,
        "queued_at_exit": queued_at_exit,
        "deliver_s": delivered_s,
        "delivered_per_s": count / delivered_s if delivered_s > 0 else 0.0,
        "ceiling_per_s": [c["per_s"] for c in ceilings],
    }


def scenario_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    fn, args, kwargs = (
        (tool, TOOL_ARGS, TOOL_KWARGS) if cfg["kind"] == "tool" else (llm, (), LLM_KWARGS)
    )
    use_client(Discard())
    with chronicle.record("bench-warm"):
        per_call_us(fn, args, kwargs, WARMUP_CALLS)
    use_client(Blocked())
    runtime_utils.get_environment()
    settle()
    common.reset_peak_rss()
    before, _ = common.rss_kib()
    with chronicle.record("bench-memory"):
        per_call_us(fn, args, kwargs, cfg["calls"])
        time.sleep(0.2)
        settle()
        after, peak = common.rss_kib()
        sink = _sink()
        queued = sink._queue.qsize()
        dropped = sink.dropped
        emit(
            {
                "calls": cfg["calls"],
                "queued": queued,
                "dropped": dropped,
                "rss_delta_kib": after - before,
                "peak_delta_kib": peak - before,
                "implementation": f"agent-chronicle {chronicle.__version__}",
            }
        )  # exits here: its record() exit would wait 30 s on the blocked client
    return {}


SCENARIOS = {
    "calls": scenario_calls,
    "wrap": scenario_wrap,
    "replay_setup": scenario_replay_setup,
    "replay": scenario_replay,
    "registration": scenario_registration,
    "burst": scenario_burst,
    "memory": scenario_memory,
}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    result = SCENARIOS[cfg["scenario"]](cfg)
    result["implementation"] = f"agent-chronicle {chronicle.__version__}"
    emit(result)


if __name__ == "__main__":
    main()
