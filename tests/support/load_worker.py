"""One recording process of the database soak (``tests/e2e/test_postgres.py``).

``python -m tests.support.load_worker URL NAME REQUESTS OUT`` records ``REQUESTS`` requests into
the control plane at ``URL`` as fast as it can, each a request span (``chronicle.record``,
labelled ``session_id=NAME``) holding one tool call, with Chronicle's default delivery settings
(the exit wait raised, so the flush at the end is what bounds it). As each request ends it writes
``<trace_id> <call_id>`` to ``OUT`` (line-buffered: a line is a request this process says it
sent). Then it flushes (at most ``FLUSH_SECONDS``) and writes a summary line
``{"sent": n, "dropped": n, "rejected": n, "flushed": bool, "seconds": s}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import chronicle
from chronicle import runtime

FLUSH_SECONDS = 300.0


@chronicle.boundary("load_step", kind="tool")
def load_step(call_id: str) -> str:
    return call_id


def worker_output(path: Path) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
    """What a worker wrote to ``OUT`` (this one, or test_soak's, in the same format): the
    ``(trace_id, call_id)`` pairs in ``path``, in order, and its summary line (``None``
    when the worker was stopped before it wrote one)."""
    calls: list[tuple[str, str]] = []
    summary = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            summary = json.loads(line)
        elif line.strip():
            trace_id, call_id = line.split()
            calls.append((trace_id, call_id))
    return calls, summary


def record(url: str, name: str, requests: int, out: str) -> None:
    """Record ``requests`` requests into ``url``; see the module docstring."""
    chronicle.configure(control_plane_url=url, service_name=name, exit_timeout=FLUSH_SECONDS)
    started = time.monotonic()
    with open(out, "w", buffering=1, encoding="utf-8") as lines:
        for count in range(requests):
            call_id = f"{name}-{count}"
            with chronicle.record("load", labels={"session_id": name}) as run:
                load_step(call_id)
            lines.write(f"{run.trace_id} {call_id}\n")
        flushed = chronicle.flush(FLUSH_SECONDS)
        delivery = runtime.current().delivery
        summary = {
            "sent": requests,
            "dropped": delivery.dropped,
            "rejected": delivery.rejected,
            "flushed": flushed,
            "seconds": round(time.monotonic() - started, 1),
        }
        lines.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    record(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
