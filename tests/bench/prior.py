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
import time
from typing import Any

import clients
import common

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


class Capture(Discard, clients.Capture):
    """The prior's client keeping each envelope's dict (in ``clients.Capture``'s list)."""

    def append_envelopes(self, envelopes: Any) -> None:
        self.envelopes.extend(e.model_dump(mode="json", exclude_none=True) for e in envelopes)


class Blocked(Discard, clients.Held):
    """The prior's client whose first batch never returns (``clients.Held``'s wait; the prior's
    own ``close`` does not release it)."""

    def append_envelopes(self, envelopes: Any) -> None:
        self.post_envelopes(b"")


tool = chronicle.boundary(common.TOOL_NAME)(common.tool_body)
llm = chronicle.boundary(common.LLM_NAME, kind="llm", provider="openai")(common.llm_body)
CALLS = common.workload(tool, llm)
"""The two calls through the prior's boundaries."""
CALLS_BARE = common.workload(common.tool_body, common.llm_body)
"""The same two calls undecorated."""


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
    counts = {"tool": cfg["n_tool"], "llm": cfg["n_llm"]}
    refs = {"bare/tool": CALLS_BARE["tool"], "bare/llm": CALLS_BARE["llm"]}
    prior = [f"prior/{kind}/{sink}" for sink in ("discard", "cp") for kind in CALLS]
    dropped: dict[str, list[int]] = {name: [] for name in prior}

    def run(name: str, n: int | None) -> float:
        kind = name.split("/")[1]
        count = n or counts[kind]
        if name in refs:
            fn, args, kwargs = refs[name]
            return common.per_call_us(fn, args, kwargs, count)
        real = name.endswith("/cp")
        if real:
            use_control_plane(url)
        else:
            use_client(Discard())
        common.settle()
        fn, args, kwargs = CALLS[kind]
        with chronicle.record("bench-calls"):
            value = common.per_call_us(fn, args, kwargs, count)
            sink = _sink()
            if n is None:
                dropped[name].append(sink.dropped if sink is not None else 0)
            if real:
                drop_queue()  # else its record() exit would wait for all of it
        chronicle.reset()
        return value

    samples = common.sample_blocks([*refs, *prior], run, cfg["blocks"])
    return {"samples_us": samples, "dropped": dropped}


# ---- section 2 --------------------------------------------------------------------------------


def scenario_wrap(cfg: dict[str, Any]) -> dict[str, Any]:
    use_client(Discard())
    clients = {
        "bare_sdk": common.openai_client(cfg["llm_url"]),
        "wrapped": chronicle.wrap(common.openai_client(cfg["llm_url"])),
    }
    with chronicle.record("bench-wrap"):  # the same ABBA call-by-call pairing as ours.py
        timed = common.alternate_calls(clients, common.WRAP_REQUEST, cfg["n"])
    return {"available": True, "where": "chronicle.wrap", **timed}


# ---- section 3 --------------------------------------------------------------------------------


def scenario_replay_setup(cfg: dict[str, Any]) -> dict[str, Any]:
    def delivered(http: Any, session: Any, recorded: int) -> dict[str, Any]:
        trace_id, span_id = session.trace_id, session.span_id
        count, _ = common.wait_for_count(http, trace_id, span_id, recorded, quiet_s=10, limit_s=600)
        _, state = common.stored(http, trace_id, span_id)
        return {"stored": count, "span_state": state}

    return common.replay_recording(use_control_plane, chronicle.record, CALLS, cfg, delivered)


def scenario_replay(cfg: dict[str, Any]) -> dict[str, Any]:
    return common.replay_timings(use_control_plane, chronicle.replay_trace, CALLS, cfg)


# ---- section 4 --------------------------------------------------------------------------------


def scenario_registration(cfg: dict[str, Any]) -> dict[str, Any]:
    # its record() exit flushes: the span writes are already delivered
    return common.registration_timings(use_control_plane, chronicle.record, cfg)


# ---- section 5 --------------------------------------------------------------------------------


def _captured_bodies(count: int) -> list[dict[str, Any]]:
    capture = Capture()
    use_client(capture)
    with chronicle.record("bench-capture"):
        for _ in range(count):
            tool(*common.TOOL_ARGS, **common.TOOL_KWARGS)
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
    common.settle()
    started = time.monotonic()
    start = perf()
    with chronicle.record("bench-burst") as session:
        common.per_call_us(tool, common.TOOL_ARGS, common.TOOL_KWARGS, calls)
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
    if bodies:
        ceilings.append(common.raw_envelope_ceiling(url, bodies, cfg["batch"]))
    found = (calls, count, state, count == calls)
    queue = (sink.dropped, dropped_at_exit, queued_at_exit)
    perf_at = (start, burst_end, exited)
    return common.burst_result(found, queue, perf_at, last_change - started, ceilings)


def scenario_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    fn, args, kwargs = CALLS[cfg["kind"]]
    use_client(Discard())
    with chronicle.record("bench-warm"):
        common.per_call_us(fn, args, kwargs, common.WARMUP_CALLS)
    use_client(Blocked())
    runtime_utils.get_environment()
    with common.memory_growth(chronicle.record, (fn, args, kwargs), cfg["calls"]) as found:
        sink = _sink()
        found.update(queued=sink._queue.qsize(), dropped=sink.dropped)
        found["implementation"] = f"agent-chronicle {chronicle.__version__}"
        common.emit(found)  # exits here: its record() exit would wait 30 s on the blocked client
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


if __name__ == "__main__":
    common.run_scenario(SCENARIOS, f"agent-chronicle {chronicle.__version__}")
