"""A small agent for the replays under faults (``tests/e2e/test_faults.py``).

``handle(order_id)`` is the request's entry (a corpus replays it as
``tests.support.fault_agent:handle``): it looks the order up and decides, two tool calls.
"""

from __future__ import annotations

import chronicle

TOTALS = {"ORD-1": 4_700, "ORD-2": 12_000}


@chronicle.boundary("look_up", kind="tool")
def look_up(order_id: str) -> dict[str, object]:
    """The order as the shop's database holds it."""
    return {"order_id": order_id, "total_cents": TOTALS.get(order_id, 900)}


@chronicle.boundary("decide", kind="tool")
def decide(total_cents: int) -> str:
    """Refund small orders at once, send the rest to a person."""
    return "refund" if total_cents < 5_000 else "escalate"


@chronicle.boundary("handle")
def handle(order_id: str) -> str:
    """The request: look the order up, then decide."""
    order = look_up(order_id)
    total = order["total_cents"]
    assert isinstance(total, int)
    return decide(total)
