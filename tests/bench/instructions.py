"""Instructions per boundary call on the agent's thread, counted by callgrind (docs/benchmarks.md,
"Issue 31: the boundary's cost").

``.venv/bin/python tests/bench/instructions.py [--workloads tool,llm,span,json_tool,json_llm]
[--calls 300] [--state keeping-up|backed-up] [--settings JSON] [--tree DIR ...] [--site DIR ...]
[--timed [--processes 6]]``

A loaded shared machine moves timed figures by tens of percent; the instructions a call
executes it does not move (repeated runs agree within 0.3%), so an A/B of a small change reads
here. Each ``--tree`` (a checkout such as a ``git worktree``; default: this repository) runs in
a process of its own under ``valgrind --tool=callgrind``, first on ``PYTHONPATH``; collection is
turned on only around the timed loop by a small C helper built here with ``cc`` against
``valgrind/callgrind.h``, and callgrind collects per thread, so the delivery worker is not in
the count. The references (``span``, ``json_tool``, ``json_llm``) are those of section 1 on a
private ``TracerProvider``. Delivery is held (a client whose first batch never returns):
``keeping-up`` empties the queue and the batch in flight every 50 calls, ``backed-up`` never
does (the byte budget then measures every record, as when the worker falls behind).

``--site DIR`` measures an installed Chronicle instead of a checkout, with this repository's
bench modules: the compiled wheel, say (``make compiled``, then ``pip install --no-deps --target
DIR dist/*.whl``); the line says whether its capture module is compiled. Trees and sites can be
given together, and are measured in the order given.

``--timed`` reads thread time instead (no valgrind): per call, the fastest of ``--calls / 50``
blocks of 50 calls, every workload's blocks interleaved in one process; ``--processes`` processes
per tree or site, alternating; the median over processes, and each process's ratio of ``tool``
and ``llm`` to their span + JSON references.

Counting needs valgrind with its headers and a C compiler; says so and exits 2 without them.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import clients  # this folder's bench modules (none imports chronicle): the same payloads and
import common  # references whichever tree's Chronicle is measured
import otel_refs
from common import Call

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKLOADS = ("span", "json_tool", "tool", "json_llm", "llm")
BLOCK = 50

HELPER_C = r"""
#include <Python.h>
#include <valgrind/callgrind.h>
static PyObject* start(PyObject* s, PyObject* a) {
    CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT;
    Py_RETURN_NONE;
}
static PyObject* stop(PyObject* s, PyObject* a) {
    CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION;
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"start", start, METH_NOARGS, ""}, {"stop", stop, METH_NOARGS, ""}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cgctl", 0, -1, methods};
PyMODINIT_FUNC PyInit_cgctl(void) { return PyModule_Create(&module); }
"""


def require_callgrind() -> None:
    """Raise ``SystemExit(2)``, having said on stderr what to install, unless valgrind, its
    ``callgrind.h`` header and a C compiler (``cc``) are all here."""
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/valgrind/callgrind.h").exists():
        print(
            f"needs valgrind, its headers (valgrind/callgrind.h) and a C compiler; missing: "
            f"{', '.join(missing) or 'valgrind/callgrind.h'} (apt-get install valgrind gcc)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def build_helper(directory: str) -> None:
    """Compile the collection switch (``cgctl.start``/``stop``) into ``directory``."""
    source = Path(directory, "cgctl.c")
    source.write_text(HELPER_C)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    command = ["cc", "-O2", "-shared", "-fPIC", f"-I{include}", str(source)]
    subprocess.run([*command, "-o", str(Path(directory, f"cgctl{suffix}"))], check=True)


# ---- the child: runs under callgrind ------------------------------------------------------------


def child(
    workloads: list[str], calls: int, state: str, settings: dict[str, Any], timed: bool
) -> None:
    import chronicle
    import chronicle.recording.capture
    import chronicle.runtime as chronicle_runtime

    def empty() -> None:
        clients.drop_queued(chronicle_runtime.current().delivery, in_flight=True)

    _, tracer = otel_refs.references()
    references = otel_refs.variants(tracer)
    ours = common.workload(
        chronicle.boundary(common.TOOL_NAME)(common.tool_body),
        chronicle.boundary(common.LLM_NAME, kind="llm", provider="openai")(common.llm_body),
    )
    table = {
        "span": references["otel_span/tool"],
        "json_tool": references["otel_json/tool"],
        "tool": ours["tool"],
        "json_llm": references["otel_json/llm"],
        "llm": ours["llm"],
    }
    chronicle_runtime.install(clients.Held(), **{"max_queue": 10**7, **settings})
    gc.disable()
    print(f"CHRONICLE {chronicle.__file__}", flush=True)
    print(f"CAPTURE {chronicle.recording.capture.__file__}", flush=True)
    if timed:
        with chronicle.record("thread-time"):
            held = empty if state == "keeping-up" else None
            fastest = thread_time(table, workloads, calls, common.WARMUP_CALLS + 100, held)
        print(f"TIMED {json.dumps(fastest)}", flush=True)
        os._exit(0)
    import cgctl  # type: ignore[import-not-found]  # built by build_helper

    with chronicle.record("instructions"):
        for name in workloads:
            fn, args, kwargs = table[name]
            for _ in range(common.WARMUP_CALLS + 100):
                fn(*args, **kwargs)
            empty()
            cgctl.start()
            for done in range(0, calls, BLOCK):
                for _ in range(min(BLOCK, calls - done)):
                    fn(*args, **kwargs)
                if state == "keeping-up":
                    cgctl.stop()  # one dump per block: summed by the parent
                    empty()
                    cgctl.start()
            cgctl.stop()
            empty()
    os._exit(0)


def thread_time(
    table: dict[str, Call],
    workloads: list[str],
    calls: int,
    warmup: int,
    empty: Callable[[], None] | None,
) -> dict[str, float]:
    """Per workload, the fastest block's thread time per call (µs), the blocks interleaved."""
    for name in workloads:
        fn, args, kwargs = table[name]
        for _ in range(warmup):
            fn(*args, **kwargs)
    if empty is not None:
        empty()
    clock = time.thread_time_ns
    fastest = {name: float("inf") for name in workloads}
    for block in range(max(calls // BLOCK, 1)):
        turn = block % len(workloads)  # each workload first, middle and last in turn
        for name in workloads[turn:] + workloads[:turn]:
            fn, args, kwargs = table[name]
            start = clock()
            for _ in range(BLOCK):
                fn(*args, **kwargs)
            fastest[name] = min(fastest[name], (clock() - start) / BLOCK / 1000)
            if empty is not None:
                empty()
    return fastest


# ---- the parent -------------------------------------------------------------------------------


class Target(NamedTuple):
    """What is measured: the Chronicle of the tree ``path`` with its bench modules; ``name``
    says where it came from (a checkout, or the site dir an install was copied from)."""

    path: Path
    name: str

    def label(self, capture_file: str) -> str:
        kind = "compiled" if capture_file.endswith(EXT_SUFFIX) else "pure Python"
        return f"{self.name} ({kind})"


EXT_SUFFIX = str(sysconfig.get_config_var("EXT_SUFFIX"))


def callgrind(out_dir: str) -> list[str]:
    """valgrind's callgrind, collecting nothing until ``cgctl.start``, one dump per ``cgctl.stop``
    into ``out_dir`` (``cg.<pid>.<n>``); put before the Python command it runs."""
    switched = ("--instr-atstart=no", "--collect-atstart=no")
    return [
        "valgrind",
        "--tool=callgrind",
        *switched,
        "--cache-sim=no",
        f"--callgrind-out-file={out_dir}/cg.%p",
    ]


def run_child(
    target: Target, args: argparse.Namespace, prefix: list[str], helper: str | None
) -> tuple[str, str]:
    """Run the child for ``target`` (under ``prefix``, e.g. valgrind); its stdout and the label."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(target.path), *([helper] if helper else [])])
    command = [
        *prefix,
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--workloads",
        ",".join(args.workloads),
        "--calls",
        str(args.calls),
        "--state",
        args.state,
        "--settings",
        json.dumps(args.settings),
        *(["--timed"] if args.timed else []),
    ]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    if "CHRONICLE" not in lines or not Path(lines["CHRONICLE"]).is_relative_to(target.path):
        raise SystemExit(
            f"{target.path}: did not run its own chronicle\n{done.stdout}{done.stderr}"
        )
    return done.stdout, target.label(lines["CAPTURE"])


def dump_totals(out_dir: str) -> list[int]:
    """The instructions of each of ``callgrind``'s dumps in ``out_dir``, in the order taken."""
    dumps = glob.glob(f"{out_dir}/cg.*.*")  # cg.<pid>.<n>: one per stop, in order
    dumps.sort(key=lambda path: int(path.rsplit(".", 1)[1]))
    totals = []
    for path in dumps:
        with open(path) as dump:
            totals.append(next(int(line.split()[1]) for line in dump if line.startswith("totals:")))
    return totals


def count(target: Target, helper: str, args: argparse.Namespace) -> tuple[dict[str, float], str]:
    """Instructions per call of each workload, with ``target`` first on the path; its label."""
    out_dir = tempfile.mkdtemp(prefix="chronicle-callgrind-")
    try:
        _, label = run_child(target, args, callgrind(out_dir), helper)
        totals = dump_totals(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    per = len(totals) // len(args.workloads)
    found = {
        name: sum(totals[i * per : (i + 1) * per]) / args.calls
        for i, name in enumerate(args.workloads)
    }
    return found, label


def timed(targets: list[Target], args: argparse.Namespace) -> None:
    """Thread time per call: ``--processes`` processes per target, alternating; medians."""
    runs: dict[Target, list[dict[str, float]]] = {target: [] for target in targets}
    labels: dict[Target, str] = {}
    for round_ in range(args.processes):
        for target in targets[round_ % len(targets) :] + targets[: round_ % len(targets)]:
            stdout, labels[target] = run_child(target, args, [], None)
            line = next(line for line in stdout.splitlines() if line.startswith("TIMED "))
            runs[target].append(json.loads(line.split(" ", 1)[1]))
    print(
        f"thread time per call on the agent's thread, µs ({args.state}; fastest of "
        f"{max(args.calls // BLOCK, 1)} blocks of {BLOCK} per process; median of "
        f"{args.processes} processes)"
    )
    for target in targets:
        found = runs[target]
        shown = "  ".join(
            f"{name} {statistics.median(run[name] for run in found):7.1f}"
            for name in args.workloads
        )
        print(f"{labels[target]}: {shown}")
        for call, reference in (("tool", "json_tool"), ("llm", "json_llm")):
            if call in args.workloads and reference in args.workloads:
                ratios = sorted(run[call] / run[reference] for run in found)
                print(
                    f"    {call} / span + JSON: median {statistics.median(ratios):.2f}x "
                    f"(processes {ratios[0]:.2f}x-{ratios[-1]:.2f}x)"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--state", choices=["keeping-up", "backed-up"], default="keeping-up")
    parser.add_argument("--settings", type=json.loads, default={}, help="configure() settings")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument(
        "--site", type=Path, action="append", help="an installed Chronicle's site dir (repeatable)"
    )
    parser.add_argument("--timed", action="store_true", help="thread time instead of instructions")
    parser.add_argument("--processes", type=int, default=6, help="with --timed: per tree or site")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    if args.child:
        child(args.workloads, args.calls, args.state, args.settings, args.timed)
    with tempfile.TemporaryDirectory(prefix="chronicle-sites-") as copies:
        targets = targets_of(sys.argv[1:], args, Path(copies))
        if args.timed:
            timed(targets, args)
        else:
            counted(targets, args)


def counted(targets: list[Target], args: argparse.Namespace) -> None:
    """Instructions per call of each target, one line each."""
    require_callgrind()
    with tempfile.TemporaryDirectory(prefix="chronicle-cgctl-") as helper:
        build_helper(helper)
        print(f"instructions per call on the agent's thread ({args.state}, {args.calls} calls)")
        for target in targets:
            found, label = count(target, helper, args)
            shown = "  ".join(f"{name} {value / 1000:8.1f}k" for name, value in found.items())
            print(f"{label}: {shown}", flush=True)


def targets_of(argv: list[str], args: argparse.Namespace, copies: Path) -> list[Target]:
    """The ``--tree`` and ``--site`` arguments in the order given (this repository if none).

    A site's ``chronicle`` package is copied into a tree of its own under ``copies``, beside
    this repository's bench modules (which measure only the Chronicle of their own tree)."""
    trees, sites = iter(args.tree or []), iter(args.site or [])
    targets = []
    for word in argv:
        flag = word.split("=", 1)[0]
        if flag == "--tree":
            tree = next(trees).resolve()
            targets.append(Target(tree, f"tree {tree}"))
        elif flag == "--site":
            site = next(sites).resolve()
            tree = copies / str(len(targets))
            shutil.copytree(site / "chronicle", tree / "chronicle")
            shutil.copytree(
                HERE, tree / "tests" / "bench", ignore=shutil.ignore_patterns("__pycache__")
            )
            targets.append(Target(tree, f"site {site}"))
    return targets or [Target(REPO, f"tree {REPO}")]


if __name__ == "__main__":
    main()
