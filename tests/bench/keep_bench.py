"""Section 9: keep on incident (issue 31 item 1): what an unsampled request costs when held.

Scenarios (run in a fresh process of this venv by ``ours.py``, which dispatches to them):

- ``keep_calls``: requests of ``calls`` ``tool`` calls each (the tool payload of section 1), the
  request span included, timed per call on the agent's thread in three variants interleaved
  block by block in one process: *sampled* (an ``ALWAYS_ON`` provider), *unsampled, kept*
  (``ALWAYS_OFF``, ``keep_unsampled`` on: the records are held) and *unsampled, keeping off*
  (``ALWAYS_OFF``, ``keep_unsampled=False``: the records are built and thrown away, as before).
  Delivery is parked (the client holds its first batch), so the figures are the agent thread's
  share without the delivery worker's, as section 1's "held" rows.
- ``keep_memory``: ``requests`` unsampled requests of ``calls`` tool calls held at once (nothing
  fails, the window is long): the growth of traced allocations (``tracemalloc``) per held
  request, beside the buffer's own estimate (``held_bytes``, what ``keep_max_bytes`` bounds).

``run.py`` turns their results into rows (``figures``).
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

import common
from clients import Held, drop_queued
from common import TOOL_ARGS, TOOL_KWARGS, TOOL_NAME, med, ok, ratio

TITLE = "9. Keep on incident: an unsampled request held in memory"
VARIANTS = ("sampled", "unsampled_kept", "unsampled_off")


def scenario_keep_calls(cfg: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    import chronicle  # only the scenarios need it (run.py imports this module for figures)
    from chronicle import runtime

    tool = chronicle.boundary(TOOL_NAME)(common.tool_body)
    providers = {"on": TracerProvider(sampler=ALWAYS_ON), "off": TracerProvider(sampler=ALWAYS_OFF)}
    setups = {
        "sampled": ("on", True),
        "unsampled_kept": ("off", True),
        "unsampled_off": ("off", False),
    }
    requests, calls, blocks = cfg["requests"], cfg["calls"], cfg["blocks"]

    def run(variant: str, warmup_calls: int | None) -> float:
        count = requests if warmup_calls is None else max(1, warmup_calls // calls)
        provider, keep = setups[variant]
        client = Held()
        runtime.install(client, tracer_provider=providers[provider], keep_unsampled=keep)
        common.settle()
        perf = time.perf_counter
        started = perf()
        for _ in range(count):
            with chronicle.record("bench-keep"):
                for _ in range(calls):
                    tool(*TOOL_ARGS, **TOOL_KWARGS)
        took = perf() - started
        held = runtime.current().keep
        if variant == "unsampled_kept":
            assert held is not None and held.held == min(count, 1000), "requests not held"
        drop_queued(runtime.current().delivery)  # it must not slow the next block
        client.close()
        chronicle.reset()
        return float(took / (count * calls) * 1e6)

    samples = common.sample_blocks(VARIANTS, run, blocks)
    return {"samples_us": samples, "calls": calls, "requests": requests}


def scenario_keep_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    import chronicle
    from chronicle import runtime

    tool = chronicle.boundary(TOOL_NAME)(common.tool_body)
    requests, calls = cfg["requests"], cfg["calls"]
    client = Held()
    runtime.install(
        client,
        tracer_provider=TracerProvider(sampler=ALWAYS_OFF),
        keep_window=3600.0,
        keep_max_requests=requests + 1,
        keep_max_bytes=1 << 40,
    )
    with chronicle.record("warm-up"):  # first-use caches are not the buffer's
        tool(*TOOL_ARGS, **TOOL_KWARGS)
    held = runtime.current().keep
    assert held is not None
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        counted = held.held_bytes
        for _ in range(requests):
            with chronicle.record("bench-keep", labels={"session_id": "bench"}):
                for _ in range(calls):
                    tool(*TOOL_ARGS, **TOOL_KWARGS)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held.held == requests + 1, held.held
    result = {
        "requests": requests,
        "calls": calls,
        "traced_bytes_per_request": grown / requests,
        "counted_bytes_per_request": (held.held_bytes - counted) / requests,
    }
    client.close()
    chronicle.reset()
    return result


SCENARIOS = {"keep_calls": scenario_keep_calls, "keep_memory": scenario_keep_memory}


def run(runner: Any, cfg: dict[str, Any], ours: str, log: Any) -> dict[str, Any]:
    """Section 9's processes: ``rounds`` of the interleaved calls, then one memory run."""
    log("section 9: keep on incident (unsampled requests held)")
    calls_cfg = {
        "scenario": "keep_calls",
        "requests": cfg["keep_requests"],
        "calls": cfg["keep_calls_per_request"],
        "blocks": cfg["blocks"],
    }
    memory_cfg = {
        "scenario": "keep_memory",
        "requests": cfg["keep_memory_requests"],
        "calls": cfg["keep_calls_per_request"],
    }
    found: dict[str, Any] = {
        "calls": [runner.run(ours, calls_cfg) for _ in range(cfg["rounds"])],
        "memory": [runner.run(ours, memory_cfg)],
    }
    log("section 9: instructions of an unsampled request (callgrind)")
    try:
        import instructions
        import keep_instructions

        requests = int(cfg.get("keep_instruction_requests", 10))
        counted = keep_instructions.measure([instructions.REPO], requests, 10)
        found["instructions"] = next(iter(counted.values())) | {"requests": requests}
    except SystemExit as exc:  # no valgrind, headers or compiler: said on stderr
        found["instructions"] = {"error": f"not counted (exit {exc.code})"}
    return found


def figures(raw: dict[str, Any], table: Any) -> None:
    """Add section 9's rows to ``table``."""
    runs = ok(raw.get("calls", []))
    if not runs:
        table.add(TITLE, "keep", "", "failed", key="keep", note=str(raw.get("calls")))
        return

    def blocks(variant: str) -> list[list[float]]:
        return [run["samples_us"][variant] for run in runs]

    def paired(variant: str, ref: str) -> float | None:
        found: list[float | None] = []
        for a, b in zip(blocks(variant), blocks(ref), strict=False):
            found.extend(ratio(x, y) for x, y in zip(a, b, strict=False))
        return med([r for r in found if r is not None])

    calls = runs[0]["calls"]
    labels = {
        "sampled": "sampled request: a `tool` call (its share of the request span included)",
        "unsampled_kept": "unsampled request, held (keep_unsampled on, the default)",
        "unsampled_off": "unsampled request, keeping off (no record built)",
    }
    for variant in VARIANTS:
        value = med([v for block in blocks(variant) for v in block])
        ref = None if variant == "sampled" else "sampled"
        table.add(
            TITLE,
            f"{labels[variant]}, {calls} calls a request",
            "us",
            value,
            reference=ref and "sampled call",
            reference_value=med([v for block in blocks("sampled") for v in block]) if ref else None,
            ratio_to_reference=paired(variant, "sampled") if ref else None,
            key=f"keep_{variant}",
            note=f"{paired('unsampled_kept', 'unsampled_off'):.2f}x keeping off"
            if variant == "unsampled_kept" and paired("unsampled_kept", "unsampled_off")
            else None,
        )
    counted = raw.get("instructions") or {}
    if "sampled" in counted:
        for variant, label in (("sampled", "sampled"), ("kept", "held"), ("off", "keeping off")):
            table.add(
                TITLE,
                f"instructions a call, {label} request ({calls} calls a request, callgrind)",
                "k",
                counted[variant] / 1000,
                reference=None if variant == "sampled" else "sampled request",
                reference_value=None if variant == "sampled" else counted["sampled"] / 1000,
                ratio_to_reference=None
                if variant == "sampled"
                else ratio(counted[variant], counted["sampled"]),
                key=f"keep_instructions_{variant}",
                note=f"{counted['requests']} requests; robust to a loaded machine"
                if variant == "sampled"
                else None,
            )
    memory = ok(raw.get("memory", []))
    if memory:
        found = memory[0]
        table.add(
            TITLE,
            f"memory per held request ({found['calls']} tool calls), traced allocations",
            "B",
            found["traced_bytes_per_request"],
            reference="the buffer's estimate (keep_max_bytes)",
            reference_value=found["counted_bytes_per_request"],
            ratio_to_reference=ratio(
                found["traced_bytes_per_request"], found["counted_bytes_per_request"]
            ),
            key="keep_memory",
            note=f"{found['requests']:,} requests held at once",
        )
