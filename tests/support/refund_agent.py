"""The refund incident's agent at module level, so ``chronicle replay --entry`` can import it.

``support_agent`` runs a ``billing_agent`` sub-agent (which looks the order up and refunds it),
then asks the model, through a wrapped OpenAI client against the local model server, to write
the reply. ``use(server)`` points the client at a server; ``close()`` closes it (and sets
``refund_times_out`` and ``double_lookup``, the changes a test may make, back). Entry:
``tests.support.refund_agent:support_agent``.
"""

from __future__ import annotations

import json
from typing import Any

import openai

import chronicle
from tests.support.llm_server import LlmServer

MODEL = "openai.chat.completions.create"
_client: Any = None
refund_times_out = False
"""Set by a test (and set back): the refund API times out, and the sub-agent says so."""
double_lookup = False
"""Set by a test (and set back): the sub-agent looks the order up twice."""


def use(server: LlmServer) -> None:
    """Send the agent's model calls to ``server`` (a wrapped client)."""
    global _client
    _client = chronicle.wrap(
        openai.OpenAI(base_url=server.openai_base_url, api_key="sk-local", max_retries=0)
    )


def close() -> None:
    """Close the client ``use`` made, and undo a test's changes to the agent."""
    global _client
    global refund_times_out, double_lookup
    refund_times_out = double_lookup = False
    if _client is not None:
        _client.close()
        _client = None


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "amount": 42.5, "paid": True}


@chronicle.boundary("refund", kind="tool")
def refund(order_id: str, amount: float) -> dict[str, Any]:
    if refund_times_out:
        raise TimeoutError("refund API did not answer within 5 s")
    return {"refund_id": "rf_1", "status": "refunded"}


@chronicle.boundary("billing_agent", kind="tool")
def billing_agent(order_id: str) -> dict[str, Any]:
    order = lookup_order(order_id)
    if double_lookup:
        order = lookup_order(order_id)
    try:
        done = refund(order_id, order["amount"])
    except TimeoutError as exc:
        return {"refunded": False, "reason": str(exc)}
    return {"refunded": True, "refund_id": done["refund_id"]}


@chronicle.boundary("support_agent", kind="tool")
def support_agent(ticket: str, order_id: str) -> str:
    billing = billing_agent(order_id)
    answer = _client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": "Write the customer a short reply."},
            {"role": "user", "content": f"{ticket}\nbilling: {json.dumps(billing)}"},
        ],
    )
    return answer.choices[0].message.content or ""
