"""Fair progress under sustained load: how much of each kind of write delivery gets through.

An agent thread opens small traces for ``--seconds`` (each: a lazily queued trace registration,
the request span's open and close writes, and ``--calls`` envelopes, each call doing ``--work``
seconds of work), more than the control plane can take, against one real control plane. A
client wrapper counts what the control plane accepted of each kind. Printed: what was produced
and delivered of each kind during the load, and the share of the produced that was delivered.

Run it from the repository root: ``.venv/bin/python tests/bench/fairness.py``. To compare with
another checkout, put that checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from typing import Any

from agentplane_primitives.models import Span, Trace

import chronicle
from chronicle import runtime
from chronicle.save.client import HttpControlPlane
from chronicle.testing import LocalControlPlane


class CountingClient(HttpControlPlane):
    """The real client, counting what the control plane accepted of each kind."""

    def __init__(self, url: str) -> None:
        super().__init__(url, None, 10.0)
        self.accepted: Counter[str] = Counter()
        self.lock = threading.Lock()

    def _count(self, kind: str, n: int = 1) -> None:
        with self.lock:
            self.accepted[kind] += n

    def register_trace(self, trace: Trace) -> None:
        super().register_trace(trace)
        self._count("traces")

    def put_span(self, span: Span) -> None:
        super().put_span(span)
        self._count("spans")

    def post_envelopes(self, body: bytes) -> None:
        super().post_envelopes(body)
        self._count("envelopes", body.count(b'"envelope_id"'))


@chronicle.boundary("step", kind="tool")
def step(i: int, work: float) -> int:
    if work:
        time.sleep(work)  # the agent's own work: it releases the GIL, as I/O would
    return i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--calls", type=int, default=10, help="envelopes per trace")
    parser.add_argument("--work", type=float, default=0.0005, help="seconds of work per call")
    options = parser.parse_args()
    with LocalControlPlane() as control_plane:
        client = CountingClient(control_plane.url)
        runtime.install(client, trace_registration="lazy", flush_interval=0.1)
        produced: Counter[str] = Counter()
        deadline = time.monotonic() + options.seconds
        while time.monotonic() < deadline:
            with chronicle.record("small"):
                for i in range(options.calls):
                    step(i, options.work)
            produced.update(traces=1, spans=2, envelopes=options.calls)
        with client.lock:
            delivered: dict[str, Any] = dict(client.accepted)
        chronicle.reset()
    print(
        f"{options.seconds:g} s of sustained load, {options.calls} envelopes per trace, "
        f"{options.work * 1000:g} ms of work per call"
    )
    print(f"{'kind':<10} {'produced':>9} {'delivered':>9} {'share':>6}")
    for kind in ("traces", "spans", "envelopes"):
        share = delivered.get(kind, 0) / produced[kind] if produced[kind] else 0.0
        print(f"{kind:<10} {produced[kind]:>9} {delivered.get(kind, 0):>9} {share:>6.0%}")


if __name__ == "__main__":
    main()
