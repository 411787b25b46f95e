"""Instructions per boundary call on the agent's thread, counted by callgrind (docs/benchmarks.md,
"Issue 31: the boundary's cost").

``.venv/bin/python tests/bench/instructions.py [--workloads tool,llm,span,json_tool,json_llm]
[--calls 300] [--state keeping-up|backed-up] [--settings JSON] [--tree DIR ...]``

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

Needs valgrind with its headers and a C compiler; says so and exits 2 without them.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

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


def build_helper(directory: str) -> None:
    """Compile the collection switch (``cgctl.start``/``stop``) into ``directory``."""
    source = Path(directory, "cgctl.c")
    source.write_text(HELPER_C)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    command = ["cc", "-O2", "-shared", "-fPIC", f"-I{include}", str(source)]
    subprocess.run([*command, "-o", str(Path(directory, f"cgctl{suffix}"))], check=True)


# ---- the child: runs under callgrind ------------------------------------------------------------


class _Held:
    """A ``ControlPlaneClient`` whose first batch post never returns: the worker sits idle."""

    def __init__(self) -> None:
        self._never = threading.Event()

    def health(self) -> dict[str, Any]:
        return {"max_batch": 100, "max_body_bytes": 4 * 1024 * 1024}

    def register_trace(self, trace: object) -> None:
        pass

    def put_span(self, span: object) -> None:
        pass

    def post_envelopes(self, body: bytes) -> None:
        self._never.wait()

    def get_trace(self, trace_id: str) -> None:
        return None

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def child(workloads: list[str], calls: int, state: str, settings: dict[str, Any]) -> None:
    # The tree's own bench modules, so that ``ours`` finds the chronicle it expects.
    sys.path.insert(0, str(Path(os.environ["PYTHONPATH"].split(os.pathsep)[0], "tests", "bench")))
    import cgctl  # type: ignore[import-not-found]  # built by build_helper
    import common
    import ours  # the references' wrappers (section 1's)

    import chronicle
    import chronicle.runtime as chronicle_runtime

    def empty() -> None:  # a private reach into the delivery, for the benchmark only
        delivery = chronicle_runtime.current().delivery
        with delivery._lock:
            for queue in (delivery._traces, delivery._spans, delivery._envelopes):
                queue.clear()
            delivery._in_flight.clear()
            delivery._bytes, delivery._sizing = 0, False

    _, tracer = ours._otel_references()
    tool_args, llm_args = (common.TOOL_ARGS, common.TOOL_KWARGS), ((), common.LLM_KWARGS)
    table = {
        "span": (ours.plain_span(tracer, common.TOOL_NAME, common.tool_body), tool_args),
        "json_tool": (ours.span_with_json(tracer, common.TOOL_NAME, common.tool_body), tool_args),
        "tool": (chronicle.boundary(common.TOOL_NAME)(common.tool_body), tool_args),
        "json_llm": (ours.span_with_json(tracer, common.LLM_NAME, common.llm_body), llm_args),
        "llm": (
            chronicle.boundary(common.LLM_NAME, kind="llm", provider="openai")(common.llm_body),
            llm_args,
        ),
    }
    chronicle_runtime.install(_Held(), **{"max_queue": 10**7, **settings})
    gc.disable()
    with chronicle.record("instructions"):
        for name in workloads:
            fn, (args, kwargs) = table[name]
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
    print(f"CHRONICLE {chronicle.__file__}", flush=True)
    os._exit(0)


# ---- the parent -------------------------------------------------------------------------------


def count(tree: Path, helper: str, args: argparse.Namespace) -> dict[str, float]:
    """Instructions per call of each workload, with ``tree`` first on the path."""
    out_dir = tempfile.mkdtemp(prefix="chronicle-callgrind-")
    env = dict(os.environ, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(tree), helper])
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        "--cache-sim=no",
        f"--callgrind-out-file={out_dir}/cg.%p",
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
    ]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
        )
        imported = [line for line in done.stdout.splitlines() if line.startswith("CHRONICLE ")]
        if not imported or not Path(imported[0].split(" ", 1)[1]).is_relative_to(tree):
            raise SystemExit(f"{tree}: did not run its own chronicle\n{done.stdout}{done.stderr}")
        dumps = glob.glob(f"{out_dir}/cg.*.*")  # cg.<pid>.<n>: one per stop, in order
        dumps.sort(key=lambda path: int(path.rsplit(".", 1)[1]))
        totals = []
        for path in dumps:
            with open(path) as dump:
                totals.append(
                    next(int(line.split()[1]) for line in dump if line.startswith("totals:"))
                )
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    per = len(totals) // len(args.workloads)
    return {
        name: sum(totals[i * per : (i + 1) * per]) / args.calls
        for i, name in enumerate(args.workloads)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--state", choices=["keeping-up", "backed-up"], default="keeping-up")
    parser.add_argument("--settings", type=json.loads, default={}, help="configure() settings")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    if args.child:
        child(args.workloads, args.calls, args.state, args.settings)
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/valgrind/callgrind.h").exists():
        print(
            f"needs valgrind, its headers (valgrind/callgrind.h) and a C compiler; missing: "
            f"{', '.join(missing) or 'valgrind/callgrind.h'} (apt-get install valgrind gcc)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    trees = [tree.resolve() for tree in args.tree or [REPO]]
    with tempfile.TemporaryDirectory(prefix="chronicle-cgctl-") as helper:
        build_helper(helper)
        print(f"instructions per call on the agent's thread ({args.state}, {args.calls} calls)")
        for tree in trees:
            found = count(tree, helper, args)
            shown = "  ".join(f"{name} {value / 1000:8.1f}k" for name, value in found.items())
            print(f"{tree}: {shown}", flush=True)


if __name__ == "__main__":
    main()
