"""Instructions an unsampled request's boundaries execute, beside a sampled one's (issue 41 item 7),
counted by callgrind as ``instructions.py`` counts a call (robust to a loaded machine).

``.venv/bin/python tests/bench/keep_instructions.py [--requests 30] [--calls 10] [--tree DIR ...]``

Each variant runs in a process of its own under ``valgrind --tool=callgrind`` (collection on
only around the loop, the delivery worker's thread not counted): ``requests`` requests
(``chronicle.record``) of ``calls`` ``tool`` calls each (section 1's tool), on a private
``TracerProvider``:

- ``sampled``: ``ALWAYS_ON``;
- ``kept``: ``ALWAYS_OFF`` with ``keep_unsampled`` on (the default): the requests are held;
- ``off``: ``ALWAYS_OFF`` with ``keep_unsampled=False``: nothing can be saved.

Prints instructions per call (the request span's share included) and each unsampled variant's
ratio to ``sampled``: the targets are <= 0.1x (off) and <= 0.4x (kept). Delivery is held (its
first batch never returns; the queue is emptied between requests), as section 9 does. Needs
valgrind with its headers and a C compiler (says so and exits 2 without them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import instructions

VARIANTS = ("sampled", "kept", "off")
TARGETS = {"kept": 0.4, "off": 0.1}


def child(variant: str, requests: int, calls: int) -> None:
    import gc

    import clients
    import common
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    import chronicle
    import chronicle.runtime as chronicle_runtime

    tool = chronicle.boundary(common.TOOL_NAME)(common.tool_body)
    provider = TracerProvider(sampler=ALWAYS_ON if variant == "sampled" else ALWAYS_OFF)
    chronicle_runtime.install(
        clients.Held(),
        tracer_provider=provider,
        keep_unsampled=variant != "off",
        keep_max_requests=10 * requests + 100,
        max_queue=10**7,
    )
    delivery = chronicle_runtime.current().delivery

    def empty() -> None:
        clients.drop_queued(delivery, in_flight=True)

    def one_request() -> None:
        with chronicle.record("bench-keep"):
            for _ in range(calls):
                tool(*common.TOOL_ARGS, **common.TOOL_KWARGS)

    gc.disable()
    print(f"CHRONICLE {chronicle.__file__}", flush=True)
    for _ in range(max(1, common.WARMUP_CALLS // calls)):
        one_request()
    empty()
    import cgctl  # type: ignore[import-not-found]  # built by instructions.build_helper

    for _ in range(requests):
        cgctl.start()
        one_request()
        cgctl.stop()
        empty()
    os._exit(0)


def count(tree: Path, variant: str, helper: str, requests: int, calls: int) -> float:
    """Instructions per call of ``variant`` in ``tree`` (its request span's share included)."""
    out_dir = tempfile.mkdtemp(prefix="chronicle-callgrind-")
    try:
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join([str(tree), helper]))
        command = [*instructions.callgrind(out_dir), sys.executable, str(Path(__file__).resolve())]
        command += ["--child", variant, "--requests", str(requests), "--calls", str(calls)]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
        )
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
        if not Path(said.get("CHRONICLE", "/")).is_relative_to(tree):
            raise SystemExit(f"{tree}: did not run its own chronicle\n{done.stdout}{done.stderr}")
        totals = instructions.dump_totals(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    if len(totals) != requests:
        raise SystemExit(f"{tree} {variant}: {len(totals)} dumps for {requests} requests")
    return sum(totals) / (requests * calls)


def measure(trees: list[Path], requests: int, calls: int) -> dict[str, dict[str, float]]:
    """Instructions per call, by tree and variant. Raises ``SystemExit(2)`` without valgrind."""
    instructions.require_callgrind()
    found: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="chronicle-cgctl-") as helper:
        instructions.build_helper(helper)
        for tree in trees:
            found[str(tree)] = {v: count(tree, v, helper, requests, calls) for v in VARIANTS}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10, help="tool calls a request")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests, args.calls)
    trees = [tree.resolve() for tree in args.tree or [instructions.REPO]]
    found = measure(trees, args.requests, args.calls)
    print(f"instructions per call on the agent's thread ({args.requests} requests x {args.calls})")
    for tree, counts in found.items():
        sampled = counts["sampled"]
        shown = [f"sampled {sampled / 1000:.1f}k"]
        for variant, limit in TARGETS.items():
            shown.append(
                f"{variant} {counts[variant] / 1000:.1f}k ({counts[variant] / sampled:.2f}x, "
                f"target <= {limit}x)"
            )
        print(f"tree {tree}: {'  '.join(shown)}")


if __name__ == "__main__":
    main()
