"""Profile one boundary call's hot path on the agent's thread (cProfile; docs/benchmarks.md).

``.venv/bin/python tests/bench/profile_call.py [tool|llm|stub-tool|stub-llm] [--calls N]``

Records into a discarding sink (``clients.Discard``) inside one ``chronicle.record`` span, so only
the agent thread's work is profiled (cProfile profiles the calling thread; the delivery worker
builds envelopes on its own thread and is not in the numbers). Prints the functions by own time
and by cumulative time, then a small ablation: the same call timed with default redaction off
and with capture off, to attribute the cost.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clients
import common
import ours
from common import per_call_us

import chronicle
import chronicle.runtime as chronicle_runtime


def target(kind: str) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    return ours.CALLS["tool" if kind.endswith("tool") else "llm"]


def profile(kind: str, calls: int) -> None:
    fn, args, kwargs = target(kind)
    chronicle_runtime.install(clients.Discard())
    profiler = cProfile.Profile()
    if kind.startswith("stub"):
        envelopes = []
        capture = clients.Capture()
        chronicle_runtime.install(capture)
        with chronicle.record("profile-capture"):
            per_call_us(fn, args, kwargs, calls + common.WARMUP_CALLS)
        chronicle.flush(60)
        envelopes = capture.envelopes
        with chronicle.replay(envelopes):
            per_call_us(fn, args, kwargs, common.WARMUP_CALLS)
            profiler.enable()
            per_call_us(fn, args, kwargs, calls)
            profiler.disable()
    else:
        with chronicle.record("profile"):
            per_call_us(fn, args, kwargs, common.WARMUP_CALLS)
            profiler.enable()
            per_call_us(fn, args, kwargs, calls)
            profiler.disable()
        chronicle.flush(60)
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats(order).print_stats(30)
        print(f"==== {kind}: {calls} calls, by {order} " + "=" * 40)
        print(out.getvalue().split("\n", 6)[-1])


def ablation(kind: str, calls: int) -> None:
    fn, args, kwargs = target(kind)
    variants = {
        "defaults": {},
        "default_redactors=False": {"default_redactors": False},
        "capture_input/output=False": {"capture_input": False, "capture_output": False},
        "enabled=False (hooks only)": {"enabled": False},
    }
    found: dict[str, list[float]] = {name: [] for name in variants}
    for block in range(3):
        for name in common.rotation(list(variants), block):
            chronicle_runtime.install(clients.Discard(), **variants[name])
            with chronicle.record("ablation"):
                per_call_us(fn, args, kwargs, common.WARMUP_CALLS)
                common.settle()
                found[name].append(per_call_us(fn, args, kwargs, calls))
            chronicle.flush(60)
    print(f"==== {kind}: ablation (median of 3 blocks of {calls} calls, discarding sink)")
    for name, values in found.items():
        print(f"  {name:30s} {common.median(values):9.1f} us/call")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "kind", nargs="?", default="tool", choices=["tool", "llm", "stub-tool", "stub-llm"]
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--no-ablation", action="store_true")
    args = parser.parse_args()
    profile(args.kind, args.calls)
    if not args.no_ablation and not args.kind.startswith("stub"):
        ablation(args.kind, args.calls)


if __name__ == "__main__":
    main()
