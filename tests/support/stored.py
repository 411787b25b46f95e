"""What a control plane holds, read cheaply enough to compare before and after a replay.

``LocalControlPlane.snapshot()`` reads every trace in full, two requests each: on the worker's
shared control plane (every earlier test's traces) it costs more the longer the run goes.
``stored(control_plane, *trace_ids)`` reads what any write a step can make changes, in a form
that compares with ``==``:

- the summary of every trace (one request per 500): a new trace, a new or ended span, a label
  or a state changed all show there;
- the traces ``trace_ids`` in full (the trace, its envelopes by ``envelope_id``): an envelope
  added to a span that already exists shows only there, and a step can add one only to a trace
  whose id it holds (the one it replays, or records in). A step that holds no trace's id can
  only add a trace: ``stored(control_plane)`` shows that.
"""

from __future__ import annotations

from typing import Any

from chronicle.save.client import HttpControlPlane
from chronicle.testing import LocalControlPlane

_PAGE = 500
"""The largest ``limit`` the control plane accepts on ``GET /v1/traces``."""


def stored(control_plane: LocalControlPlane, *trace_ids: str) -> dict[str, Any]:
    """Every trace's summary, and ``trace_ids`` in full (see the module docstring)."""
    client = HttpControlPlane(control_plane.url, control_plane.api_key, 10)
    try:
        summaries: list[dict[str, Any]] = []
        while len(page := client.find_traces(limit=_PAGE, offset=len(summaries))) == _PAGE:
            summaries.extend(page)
        summaries.extend(page)
        full = {
            trace_id: {
                "trace": client.get_trace(trace_id),
                "envelopes": sorted(
                    client.trace_envelopes(trace_id), key=lambda e: str(e.get("envelope_id"))
                ),
            }
            for trace_id in trace_ids
        }
    finally:
        client.close()
    return {"summaries": summaries, "traces": full}
