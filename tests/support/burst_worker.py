"""The agent of the keep-on-incident burst (``tests/e2e/test_faults.py``), in a process of its own.

``python -m tests.support.burst_worker URL OUT`` records ``BURST_REQUESTS`` (20,000) requests as
fast as it can into the control plane at ``URL``, sampled at the ratio the environment gives
(``OTEL_TRACES_SAMPLER=traceidratio``, ``OTEL_TRACES_SAMPLER_ARG``), each a request span holding
one tool call with a ``BURST_NOTE_BYTES`` (20,000) character note in its input; every
``BURST_FAIL_EVERY``-th (50th) call raises (the request catches it and answers anyway). Halfway it
writes ``half`` on stdout and waits for a line on stdin (the test brings the control plane back
meanwhile). Then it flushes (at most 300 s) and writes one JSON object to ``OUT``:

- ``failed``/``sampled``: the trace ids of the requests whose call failed / that were sampled;
- ``slowest``: the longest request, in seconds (a figure to print); ``seconds``: the whole burst;
- ``held_bytes_max``: the most ``KeepBuffer.held_bytes`` was after any request, with
  ``keep_max_bytes``; ``rss_start``/``rss_peak``: the process's resident memory before the burst
  and the most it was (read every 500 requests and at the end), in bytes;
- ``keep``: the buffer's counters (``kept``, ``dropped``, ``evicted``, ``held``);
  ``delivery``: ``dropped``, ``rejected``, ``flushed``, and ``registration_waits`` /
  ``registrations_unanswered`` (the requests that waited on a trace registration / waited the
  whole ``registration_timeout`` for one: ``Delivery``'s counters).
"""

from __future__ import annotations

import json
import os
import sys
import time

import psutil  # type: ignore[import-untyped]  # (a dependency of the control plane)
from opentelemetry import trace

import chronicle
from chronicle import runtime

REQUESTS = int(os.environ.get("BURST_REQUESTS", "20000"))
NOTE = "n" * int(os.environ.get("BURST_NOTE_BYTES", "20000"))
FAIL_EVERY = int(os.environ.get("BURST_FAIL_EVERY", "50"))


class PaymentDeclined(Exception):
    """The tool's failure: what makes a request matter."""


@chronicle.boundary("charge_card", kind="tool")
def charge_card(request: int, note: str) -> dict[str, int]:
    if request % FAIL_EVERY == 0:
        raise PaymentDeclined(f"request {request}: card declined")
    return {"request": request, "charged": 1}


def burst(url: str, out: str) -> None:
    """Run the burst; see the module docstring."""
    chronicle.configure(control_plane_url=url, service_name="burst", exit_timeout=300)
    rt = runtime.current()
    keep = rt.keep
    assert keep is not None, "keep on incident is off: the burst tests nothing"
    process = psutil.Process()
    rss_start = rss_peak = process.memory_info().rss
    failed: list[str] = []
    sampled: list[str] = []
    slowest = 0.0
    held_bytes_max = 0
    began = time.monotonic()
    for index in range(REQUESTS):
        if index == REQUESTS // 2:
            print("half", flush=True)
            sys.stdin.readline()
        started = time.perf_counter()
        with chronicle.record("burst", labels={"session_id": f"s{index}"}) as run:
            try:
                charge_card(index, NOTE)
            except PaymentDeclined:
                failed.append(run.trace_id)
            if trace.get_current_span().get_span_context().trace_flags.sampled:
                sampled.append(run.trace_id)
        slowest = max(slowest, time.perf_counter() - started)
        held_bytes_max = max(held_bytes_max, keep.held_bytes)
        if index % 500 == 0:
            rss_peak = max(rss_peak, process.memory_info().rss)
    seconds = time.monotonic() - began
    rss_peak = max(rss_peak, process.memory_info().rss)
    flushed = chronicle.flush(300)
    summary = {
        "failed": failed,
        "sampled": sampled,
        "slowest": slowest,
        "seconds": seconds,
        "held_bytes_max": held_bytes_max,
        "keep_max_bytes": rt.settings.keep_max_bytes,
        "registration_timeout": rt.settings.registration_timeout,
        "rss_start": rss_start,
        "rss_peak": rss_peak,
        "keep": {
            "kept": keep.kept,
            "dropped": keep.dropped,
            "evicted": keep.evicted,
            "held": keep.held,
        },
        "delivery": {
            "dropped": rt.delivery.dropped,
            "rejected": rt.delivery.rejected,
            "flushed": flushed,
            "registration_waits": rt.delivery.registration_waits,
            "registrations_unanswered": rt.delivery.registrations_unanswered,
        },
    }
    with open(out, "w", encoding="utf-8") as file:
        json.dump(summary, file)


if __name__ == "__main__":
    burst(sys.argv[1], sys.argv[2])
