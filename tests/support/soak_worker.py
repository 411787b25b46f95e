"""One recording process of the soak test (``tests/e2e/test_soak.py``).

``record_for(url, seconds, name, out)`` records traces of twenty calls each (about forty calls a
second, which a loaded machine's control plane keeps up with) for ``seconds``,
writing a line ``<trace_id> <call_id>`` to ``out`` as each call returns (line-buffered, so a
process killed by a signal leaves every line it wrote), then flushes and writes a summary line
``{"dropped": n, "rejected": n, "flushed": bool}``. Run it as a ``multiprocessing`` target (fork
or spawn) or as a script: ``python -m tests.support.soak_worker URL SECONDS NAME OUT``.
"""

from __future__ import annotations

import json
import sys
import time

import chronicle
from chronicle import runtime


@chronicle.boundary("soak_step", kind="tool")
def soak_step(call_id: str) -> str:
    return call_id


def record_for(url: str, seconds: float, name: str, out: str) -> None:
    """Record for ``seconds`` into the control plane at ``url``; see the module docstring."""
    chronicle.configure(
        control_plane_url=url,
        service_name=name,
        flush_interval=0.2,
        timeout=2,
        exit_timeout=60,
        max_queue=1_000_000,
    )
    deadline = time.monotonic() + seconds
    count = 0
    with open(out, "w", buffering=1, encoding="utf-8") as lines:
        while time.monotonic() < deadline:
            with chronicle.record(f"soak {name}", labels={"session_id": name}) as run:
                for _ in range(20):
                    call_id = f"{name}-{count}"
                    soak_step(call_id)
                    lines.write(f"{run.trace_id} {call_id}\n")
                    count += 1
            time.sleep(0.5)
        flushed = chronicle.flush(120)
        delivery = runtime.current().delivery
        summary = {"dropped": delivery.dropped, "rejected": delivery.rejected, "flushed": flushed}
        lines.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    record_for(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4])
