"""A backed-up queue sends one write per ended request span: its close write replaces the open
write still waiting, and the control plane ends up with every span closed, none lost.

Found by the database soak (``tests/e2e/test_postgres.py``): after the control plane came back,
16,000 requests' worth of writes drained at the control plane's pace, a third of them open
writes already made obsolete by their close.
"""

from __future__ import annotations

import chronicle
from chronicle import runtime
from chronicle.testing import LocalControlPlane


@chronicle.boundary("step", kind="tool")
def step(n: int) -> int:
    return n


def test_a_close_write_replaces_the_open_write_still_waiting(
    fresh_control_plane: LocalControlPlane,
) -> None:
    control_plane = fresh_control_plane
    chronicle.configure(control_plane_url=control_plane.url, trace_registration="lazy")
    delivery = runtime.current().delivery
    control_plane.kill()
    ended = []
    for n in range(50):
        with chronicle.record(f"request {n}") as session:
            step(n)
        ended.append(session.trace_id)
    # 50 trace registrations, 50 span writes, 50 envelopes (the one write the worker was
    # trying when it found the control plane away may stay as it was); it was 200.
    assert 150 <= delivery.waiting <= 152
    with chronicle.record("still running") as running:
        step(50)
        control_plane.start()
        assert chronicle.flush(30)
        # The request that is still running has its open write on the control plane.
        trace = control_plane.trace(running.trace_id)
        assert trace is not None
        assert [s["state"] for s in trace["spans"]] == ["open"]
    assert chronicle.flush(30)
    for trace_id in [*ended, running.trace_id]:
        trace = control_plane.trace(trace_id)
        assert trace is not None
        assert [(s["state"], s["status"]) for s in trace["spans"]] == [("closed", "success")]
        assert len(control_plane.trace_envelopes(trace_id)) == 1
