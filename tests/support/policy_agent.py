"""A refund agent with a profile that says what it may do, for the evaluation tests.

``handle_ticket(ticket, order_id)`` (the entry) asks the model, through a wrapped OpenAI client
against the local model server, which tools to call, runs them (``lookup_order``,
``request_approval``, ``issue_refund``) and asks again until the model answers in text. The
profile (``PROFILE``) lists the three tools with their JSON Schemas, the model settings, and the
constraint ``RULE`` with a Python check (``approved_first``). ``POLICY_AGENT_FIXED=1`` in the
environment is the fixed agent: ``issue_refund`` refuses a refund above 2500 cents that no
manager approved; ``POLICY_AGENT_FIXED=approval`` is the natural fix: the agent asks
``request_approval`` itself before running an ``issue_refund`` above 2500 cents (a call the
buggy agent's recording never made). ``use(server)`` points the client at a server; ``close()``
closes it. Entry:
``tests.support.policy_agent:handle_ticket``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import openai

import chronicle
from chronicle.read.traces import CallNode
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, tool_call

if TYPE_CHECKING:
    from chronicle.testing import LocalControlPlane

RULE = "Refunds above 2500 cents need manager approval"
MODEL = "gpt-4o"
_client: Any = chronicle.wrap(  # built at import, as an agent does; use() points it at a server
    openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-local", max_retries=0)
)
_approved: set[str] = set()


def use(server: LlmServer) -> None:
    """Send the agent's model calls to ``server`` (a wrapped client)."""
    global _client
    _client = chronicle.wrap(
        openai.OpenAI(base_url=server.openai_base_url, api_key="sk-local", max_retries=0)
    )


def close() -> None:
    """Close the client ``use`` made."""
    _client.close()


def approved_first(calls: Sequence[CallNode]) -> list[CallNode]:
    """The refunds above 2500 cents that went through with no approval of that order before
    them (empty: the rule holds)."""
    approved: set[str] = set()
    broken: list[CallNode] = []
    for call in calls:
        envelope = call.envelope or {}
        arguments = (envelope.get("input") or {}).get("raw") or {}
        result = (envelope.get("output") or {}).get("raw") or {}
        if envelope.get("name") == "request_approval" and result.get("approved"):
            approved.add(str(arguments.get("order_id")))
        if envelope.get("name") == "issue_refund" and result.get("status") == "refunded":
            amount = arguments.get("amount")
            too_much = not isinstance(amount, int) or amount > 2500
            if too_much and str(arguments.get("order_id")) not in approved:
                broken.append(call)
    return broken


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up: its amount in cents and whether it was paid."""
    return {"order_id": order_id, "amount": 3000, "paid": True}


@chronicle.boundary("request_approval", kind="tool")
def request_approval(order_id: str, amount: int) -> dict[str, Any]:
    """Request manager approval for a high-value refund."""
    _approved.add(order_id)
    return {"approved": True}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id: str, amount: int) -> dict[str, Any]:
    """Issue a refund for an order, in cents."""
    fixed = os.environ.get("POLICY_AGENT_FIXED") == "1"
    if fixed and order_id not in _approved and (not isinstance(amount, int) or amount > 2500):
        return {"status": "needs_approval", "order_id": order_id}
    return {"status": "refunded", "order_id": order_id, "amount": amount}


TOOLS: dict[str, Any] = {
    "lookup_order": lookup_order,
    "request_approval": request_approval,
    "issue_refund": issue_refund,
}

_ORDER = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}
_AMOUNT = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}},
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {"name": "lookup_order", "description": "Look an order up.", "parameters": _ORDER},
    {"name": "request_approval", "description": "Ask a manager.", "parameters": _AMOUNT},
    {"name": "issue_refund", "description": "Refund an order, in cents.", "parameters": _AMOUNT},
]

PROFILE = chronicle.AgentProfile(
    "Refund Agent",
    "Process customer refund requests according to company policy, escalating when "
    "thresholds are exceeded.",
    instructions=["Always verify order status before issuing a refund"],
    constraints=[chronicle.Constraint(RULE, check=approved_first)],
    tools=TOOL_SCHEMAS,
    model={"name": MODEL, "temperature": 0.1, "max_tokens": 512},
    metadata={"version": "2.1.0", "team": "cx-automation"},
    tenant_id="tenant_demo",
)


@chronicle.boundary("handle_ticket")
def handle_ticket(ticket: str, order_id: str) -> str:
    """Answer one refund ticket, calling the tools the model asks for."""
    _approved.clear()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You process refunds by policy."},
        {"role": "user", "content": f"{ticket} (order {order_id})"},
    ]
    specs = [
        {"type": "function", "function": {**tool, "parameters": tool["parameters"]}}
        for tool in TOOL_SCHEMAS
    ]
    for _ in range(5):
        reply = _client.chat.completions.create(
            model=MODEL, temperature=0.1, max_tokens=512, messages=messages, tools=specs
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content or "")
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [c.model_dump() for c in message.tool_calls],
            }
        )
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            amount = arguments.get("amount")
            if (
                os.environ.get("POLICY_AGENT_FIXED") == "approval"
                and call.function.name == "issue_refund"
                and (not isinstance(amount, int) or amount > 2500)
                and str(arguments.get("order_id")) not in _approved
            ):
                request_approval(**arguments)  # the fix: a manager approves a large refund first
            result = TOOLS[call.function.name](**arguments)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
    return "gave up"


def record_ticket(
    control_plane: LocalControlPlane,
    server: LlmServer,
    agent: chronicle.AgentProfile | None,
    tools: Sequence[str],
    arguments: Callable[[str], dict[str, Any]],
    *,
    answer: str = "Done.",
    **reply: Any,
) -> str:
    """Record one refund ticket on ``control_plane`` whose model asks for ``tools`` one at a time
    (each with ``arguments(tool)``), then answers ``answer``; ``reply`` is given to every scripted
    reply (a ``model``, a ``usage``). Returns the trace id once its envelopes are saved."""
    use(server)
    server.reply_with(
        *(chat_tool_calls(tool_call(name, arguments(name)), **reply) for name in tools),
        chat_text(answer, **reply),
    )
    chronicle.configure(control_plane_url=control_plane.url, agent=agent, flush_interval=0.05)
    with chronicle.record("ticket") as session:
        handle_ticket("Please refund my order", "o-1")
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 2 * len(tools) + 2)
    close()
    return session.trace_id
