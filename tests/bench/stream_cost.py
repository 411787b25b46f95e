"""What a recorded stream costs its consuming thread, beside the bare SDK (docs/benchmarks.md,
"Issue 31: the boundary's cost", "Streams (item 3)").

``.venv/bin/python tests/bench/stream_cost.py instructions [--tree DIR ...] [--chunks 500]
[--streams 3]`` counts the instructions the consuming thread executes, under valgrind's
callgrind (collection switched on around each measured stretch by ``instructions.py``'s helper,
per thread, so the delivery worker and the server are not counted), for the same
``chat.completions.create(stream=True)`` request as section 2b of ``run.py``: through a bare
``openai.OpenAI`` and through ``chronicle.wrap`` of one (discarding sink), each stream from the
call to its first chunk, and consumed whole. A loaded machine moves timed runs by tens of
percent; the instruction counts stay within a fraction of one.

``.venv/bin/python tests/bench/stream_cost.py timed [--tree DIR ...] [--processes 4]
[--streams 20]`` times the same streams as section 2b (``common.time_streams``, discarding sink)
in processes alternating between the trees, and prints per tree the median over its processes of
each process's median wrapped / median bare: wall time, time to the first chunk, thread CPU.

``.venv/bin/python tests/bench/stream_cost.py profile [--streams 20]`` prints cProfile's top
functions over wrapped streams (the time shares; ``--sort cumulative`` for the call tree).

Each starts ``LlmServer`` in a process of its own (``llm_proc.py``), as ``run.py`` does. A tree
is put first on ``PYTHONPATH``; the bench modules are always this checkout's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VARIANTS = ("bare_sdk", "wrapped")
WARMUP = 3


# ---- the child: one process measuring both clients ---------------------------------------------


def _clients(url: str, held: bool) -> dict[str, Any]:
    """The bare and the wrapped client; ``held``: delivery held (the worker sits idle), else a
    discarding sink (the worker builds every envelope, as in section 2b)."""
    import clients
    import openai

    import chronicle
    import chronicle.runtime as chronicle_runtime

    sink = clients.Held() if held else clients.Discard()
    chronicle_runtime.install(sink, max_queue=10**6)

    def client() -> Any:
        return openai.OpenAI(base_url=url, api_key="bench", max_retries=0)

    return {"bare_sdk": client(), "wrapped": chronicle.wrap(client())}


def child(url: str, chunks: int, streams: int) -> None:
    """Under callgrind: per variant, ``streams`` first chunks, then ``streams`` whole streams,
    each between one ``cgctl.start()`` and ``stop()`` (one dump each, in that order)."""
    import cgctl  # type: ignore[import-not-found]  # built by instructions.build_helper
    import common

    import chronicle

    clients, request = _clients(url, held=True), common.stream_request(chunks)
    with chronicle.record("stream-cost"):
        for name in VARIANTS:
            create = clients[name].chat.completions.create
            for _ in range(WARMUP):
                for _ in create(**request):
                    pass
            for _ in range(streams):
                cgctl.start()
                stream = create(**request)
                next(stream)
                cgctl.stop()
                for _ in stream:
                    pass
            for _ in range(streams):
                cgctl.start()
                for _ in create(**request):
                    pass
                cgctl.stop()
    print(f"CHRONICLE {chronicle.__file__}", flush=True)
    os._exit(0)


def profile(url: str, chunks: int, streams: int, sort: str) -> None:
    """cProfile over ``streams`` wrapped streams (after warm-up), the top 40 by ``sort``."""
    import common

    import chronicle

    request = common.stream_request(chunks)
    create = _clients(url, held=True)["wrapped"].chat.completions.create
    with chronicle.record("stream-profile"):
        for _ in range(WARMUP):
            for _ in create(**request):
                pass
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(streams):
            for _ in create(**request):
                pass
        profiler.disable()
    pstats.Stats(profiler).sort_stats(sort).print_stats(40)


def timed_child(url: str, chunks: int, streams: int, held: bool = False) -> None:
    """One process of ``timed``: ``common.time_streams``, printed as JSON."""
    import common

    import chronicle

    clients = _clients(url, held=held)
    with chronicle.record("stream-timed"):
        found = common.time_streams(clients, common.stream_request(chunks), streams)
    if not held:  # a held delivery never empties
        chronicle.flush(60)
    print(f"CHRONICLE {chronicle.__file__}", flush=True)
    print("TIMED " + json.dumps(found), flush=True)
    os._exit(0)


# ---- the parent --------------------------------------------------------------------------------


def count(tree: Path, helper: str, url: str, args: argparse.Namespace) -> dict[str, float]:
    """Instructions per stream of each variant and stretch, with ``tree`` first on the path."""
    import instructions

    out_dir = tempfile.mkdtemp(prefix="chronicle-callgrind-")
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join([str(tree), helper]))
    command = [
        *instructions.callgrind(out_dir),
        sys.executable,
        str(Path(__file__).resolve()),
        "child",
        "--url",
        url,
        "--chunks",
        str(args.chunks),
        "--streams",
        str(args.streams),
    ]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
        )
        imported = [line for line in done.stdout.splitlines() if line.startswith("CHRONICLE ")]
        if not imported or not Path(imported[0].split(" ", 1)[1]).is_relative_to(tree):
            raise SystemExit(f"{tree}: did not run its own chronicle\n{done.stdout}{done.stderr}")
        totals = instructions.dump_totals(out_dir)
    finally:
        if args.keep is not None:  # for callgrind_annotate
            shutil.copytree(out_dir, args.keep / tree.name, dirs_exist_ok=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    n = args.streams
    found: dict[str, float] = {}
    for i, name in enumerate(VARIANTS):
        found[f"{name} first"] = min(totals[2 * i * n : (2 * i + 1) * n])
        found[f"{name} whole"] = min(totals[(2 * i + 1) * n : (2 * i + 2) * n])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "mode", choices=["instructions", "timed", "profile", "child", "timed-child"]
    )
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--chunks", type=int, default=500)
    parser.add_argument("--streams", type=int, help="per variant (default 3; timed, profile: 20)")
    parser.add_argument("--processes", type=int, default=4, help="timed: processes per tree")
    parser.add_argument(
        "--keep", type=Path, help="instructions: copy the callgrind dumps into DIR/<tree name>"
    )
    parser.add_argument("--sort", default="tottime", help="profile: pstats sort key")
    parser.add_argument(
        "--held",
        action="store_true",
        help="timed: delivery held (the worker sits idle), so only the consuming thread counts",
    )
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.streams is None:
        args.streams = 3 if args.mode in ("instructions", "child") else 20
    if args.mode == "child":
        child(args.url, args.chunks, args.streams)
    if args.mode == "timed-child":
        timed_child(args.url, args.chunks, args.streams, args.held)
    from common import llm_server

    with llm_server() as url:
        if args.mode == "profile":
            profile(url, args.chunks, args.streams, args.sort)
        elif args.mode == "timed":
            _timed(url, args)
        else:
            _instructions(url, args)
    sys.stdout.flush()
    os._exit(0)  # the held delivery would keep the profiled process waiting at exit


def _timed(url: str, args: argparse.Namespace) -> None:
    from common import median

    trees = [tree.resolve() for tree in args.tree or [REPO]]
    ratios: dict[Path, dict[str, list[float]]] = {tree: {} for tree in trees}
    for round_ in range(args.processes):
        for tree in trees if round_ % 2 == 0 else trees[::-1]:
            env = dict(os.environ, PYTHONPATH=str(tree))
            command = [sys.executable, str(Path(__file__).resolve()), "timed-child", "--url", url]
            command += ["--chunks", str(args.chunks), "--streams", str(args.streams)]
            command += ["--held"] if args.held else []
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
            if not Path(lines.get("CHRONICLE", "/")).is_relative_to(tree):
                raise SystemExit(f"{tree}: did not run its own chronicle\n{done.stderr}")
            found = json.loads(lines["TIMED"])
            for figure in ("wall_ms", "first_chunk_ms", "thread_cpu_ms"):
                wrapped, bare = median(found[figure]["wrapped"]), median(found[figure]["bare_sdk"])
                ratios[tree].setdefault(figure, []).append(wrapped / bare)
    print(f"wrapped / bare, median over {args.processes} processes ({args.streams} streams each)")
    for tree, figures in ratios.items():
        shown = "  ".join(
            f"{figure} {median(values):.3f}x ({min(values):.3f}-{max(values):.3f})"
            for figure, values in figures.items()
        )
        print(f"{tree}: {shown}", flush=True)


def _instructions(url: str, args: argparse.Namespace) -> None:
    import instructions  # the collection switch, shared with the boundary's count

    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/valgrind/callgrind.h").exists():
        print("needs valgrind, its headers and a C compiler (see instructions.py)", file=sys.stderr)
        raise SystemExit(2)
    show: Callable[[float], str] = lambda value: f"{value / 1e6:8.3f}M"  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="chronicle-cgctl-") as helper:
        instructions.build_helper(helper)
        print(
            f"instructions on the consuming thread per stream ({args.chunks} chunks, "
            f"fewest of {args.streams}); ratios wrapped / bare"
        )
        for tree in [tree.resolve() for tree in args.tree or [REPO]]:
            found = count(tree, helper, url, args)
            first = found["wrapped first"] / found["bare_sdk first"]
            whole = found["wrapped whole"] / found["bare_sdk whole"]
            extra = (found["wrapped whole"] - found["bare_sdk whole"]) / args.chunks
            print(
                f"{tree}: first chunk {show(found['bare_sdk first'])} -> "
                f"{show(found['wrapped first'])} ({first:.3f}x); whole "
                f"{show(found['bare_sdk whole'])} -> {show(found['wrapped whole'])} "
                f"({whole:.3f}x, +{extra / 1000:.1f}k per chunk)",
                flush=True,
            )
            print(json.dumps({"tree": str(tree), **found}), flush=True)


if __name__ == "__main__":
    main()
