"""What grows when ``chronicle.diff`` takes 10x the calls (docs/benchmarks.md, "8b, what grows").

``.venv/bin/python tests/bench/diff_growth.py [--sizes 1000,10000,100000] [--dir DIR]
[--probes sizes,held,files] [--tree DIR ...]``

Records section 8b's agents (``corpus_bench``: nested and flat, one changed ``lookup`` in the
middle) at each size as incident files in ``DIR`` (kept, and reused when already there: the
100,000-call ones take minutes), then, each figure in a fresh process, the process's CPU time
a diffed call, the minimum over ``--blocks`` blocks that alternate the sizes:

- *sizes*: the diff of each size's two files' envelope lists;
- *files*: the diff of each size's two incident files, as ``chronicle diff A.json B.json``
  reads them (reading, parsing and validating included: section 8b's "from files");
- *memory held*: the largest size's envelopes all loaded, and every k-th call of them diffed
  (flat: every k-th ``lookup``; nested: every k-th ``step`` with its ``lookup``s), k = 1, 10,
  100...: the calls vary, the memory they lie in does not.

Each figure also gives the diff's peak of traced allocations (``tracemalloc``, one more diff
after the timed ones: its peak minus what was allocated when it started), a call. The cyclic
collector stays on, as users run the diff.

Per-call costs that rise with the sizes but not (or less) with the calls when the memory is
held are the memory hierarchy, not the algorithm.

Each ``--tree`` (a copy of the ``chronicle`` package's parent folder, say the code before a
change, ``git archive``d) is put first on ``PYTHONPATH`` for its figures, which alternate with
the other trees' in every block (the order reversed every other block): an A/B on a shared
machine. Without it, the figures are this checkout's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from itertools import pairwise
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PER_STEP = 9


def record(folder: Path, sizes: list[int]) -> None:
    """Write ``{shape}-{size}-{a,b}.json`` for each shape and size not already in ``folder``."""
    sys.path.insert(0, str(HERE))
    import corpus_bench

    from chronicle.save.incident import Incident

    nested, flat = corpus_bench._agents()
    for shape, agent in (("nested", nested), ("flat", flat)):
        for size in sizes:
            path_a, path_b = folder / f"{shape}-{size}-a.json", folder / f"{shape}-{size}-b.json"
            if path_a.exists() and path_b.exists():
                continue
            steps = max(1, size // (PER_STEP + 1))
            lookups = steps * (PER_STEP if shape == "nested" else PER_STEP + 1)
            Incident.of(corpus_bench._record(agent, steps, PER_STEP, None)).write(path_a)
            Incident.of(corpus_bench._record(agent, steps, PER_STEP, lookups // 2)).write(path_b)
            print(f"recorded {shape} {size}", file=sys.stderr, flush=True)


def _cpu_per_call(left: Any, right: Any, calls: int, reps: int) -> tuple[float, float]:
    """The CPU time a call of ``chronicle.diff(left, right)`` (µs, min of ``reps``) and its
    peak of traced allocations a call (bytes, one more diff under ``tracemalloc``)."""
    import chronicle

    result = chronicle.diff(left, right)
    assert len(result.changed()) == 1 and result.first_divergence is not None
    del result
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        started = time.process_time()
        chronicle.diff(left, right)
        best = min(best, time.process_time() - started)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    chronicle.diff(left, right)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return best / calls * 1e6, peak / calls


def _every(envelopes: list[Any], shape: str, k: int) -> list[Any]:
    """The top call and every k-th call under it (nested: every k-th step with its lookups)."""
    from chronicle import wire

    ordered = wire.call_order(envelopes)
    if shape == "flat":
        return [ordered[0], *ordered[1::k]]
    steps = [e.envelope_id for e in ordered if e.name == "step"]
    keep = {ordered[0].envelope_id, *steps[::k]}
    return [
        e
        for e in ordered
        if e.envelope_id in keep or (e.name == "lookup" and e.parent_envelope_id in keep)
    ]


def measure(args: argparse.Namespace) -> None:
    """One figure, in this process: print ``{"calls": n, "us": per-call CPU µs}``."""
    from chronicle.replay.load import load_envelopes

    def path(which: str) -> Path:
        return Path(args.dir) / f"{args.shape}-{args.size}-{which}.json"

    left, right = load_envelopes(path("a")), load_envelopes(path("b"))
    if args.every:
        left, right = _every(left, args.shape, args.every), _every(right, args.shape, args.every)
    calls = len(left)
    import chronicle

    if args.files:  # the files themselves, read by the diff: nothing of them held before
        del left, right
        us, peak = _cpu_per_call(path("a"), path("b"), calls, args.reps)
    else:
        us, peak = _cpu_per_call(left, right, calls, args.reps)
    print(json.dumps({"calls": calls, "us": us, "peak": peak, "chronicle": chronicle.__file__}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--dir", default="/tmp/chronicle-diff-growth")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shape", default="", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--every", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--files", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probes", default="sizes,held", help="sizes, held, files (any of)")
    parser.add_argument("--tree", type=Path, action="append", help="a tree to A/B (repeatable)")
    args = parser.parse_args()
    if args.shape:
        measure(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    probes = args.probes.split(",")
    trees: list[Path | None] = [tree.resolve() for tree in args.tree] if args.tree else [None]
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    record(folder, sizes)
    largest = max(sizes)
    strides = [largest // s for s in sorted(sizes, reverse=True)]  # 1, 10, 100 for 10x sizes
    runs: list[tuple[str, str, int, list[str]]] = []
    for shape in ("nested", "flat"):
        runs += [("sizes", shape, s, []) for s in sizes if "sizes" in probes]
        runs += [("files", shape, s, ["--files"]) for s in sizes if "files" in probes]
        runs += [("held", shape, k, ["--every", str(k)]) for k in strides if "held" in probes]
    best: dict[tuple[Path | None, str, str, int], tuple[int, float, float]] = {}
    for block in range(args.blocks):
        for probe, shape, key, extra in runs if block % 2 == 0 else runs[::-1]:
            size = largest if probe == "held" else key
            command = [sys.executable, __file__, "--dir", str(folder), "--reps", str(args.reps)]
            command += ["--shape", shape, "--size", str(size), *extra]
            for tree in trees if block % 2 == 0 else trees[::-1]:
                env = dict(os.environ)
                if tree is not None:
                    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
                done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
                got = json.loads(done.stdout.strip().splitlines()[-1])
                if tree is not None and not Path(got["chronicle"]).is_relative_to(tree):
                    raise SystemExit(f"{tree}: ran {got['chronicle']}, not its own chronicle")
                old = best.get((tree, probe, shape, key), (0, 1e9, 1e18))
                best[(tree, probe, shape, key)] = (
                    got["calls"],
                    min(got["us"], old[1]),
                    min(got["peak"], old[2]),
                )
    for tree in trees:
        if tree is not None:
            print(f"{tree}:")
        held = f"memory held ({largest:,}-call files)"
        for probe, title in (("sizes", "sizes"), ("files", "files"), ("held", held)):
            for shape in ("nested", "flat"):
                rows = sorted(
                    v for (t, p, s, _), v in best.items() if (t, p, s) == (tree, probe, shape)
                )
                if not rows:
                    continue
                text = ", ".join(f"{n:,} calls {us:.2f} µs {b:,.0f} B" for n, us, b in rows)
                steps = [f"{(b[1] * b[0]) / (a[1] * a[0]):.1f}x" for a, b in pairwise(rows)]
                peaks = [f"{(b[2] * b[0]) / (a[2] * a[0]):.1f}x" for a, b in pairwise(rows)]
                print(
                    f"{title}, {shape}: {text} a call (CPU min, peak traced); "
                    f"time per step: {', '.join(steps)}; peak per step: {', '.join(peaks)}"
                )


if __name__ == "__main__":
    main()
