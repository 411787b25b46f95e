"""Three financial incidents, each recorded against an ungated tool and proven fixed by replay.

Every incident has the same shape: the model reads the request and calls one tool with the wrong
numbers (``model``, call 1), the ungated tool acts on them (the tool, call 1), the model reports
back (``model``, call 2). The fix is a gated tool. Each incident is recorded against the ungated
tool, then replayed strictly with the gated tool as the only live call (the cut-point): the
model's decisions come from the recording, with no model request, and the gate runs on the very
arguments the model produced. The model's second call now reads the gate's refusal, a change the
plan declares (``expect_change``); its recorded report ("Refunded $9,800,000.00 ...") is stale,
so the proof is what the gate returned, that nothing moved, and that the refusal is what the
model is told. Any other departure from the recording fails the replay.

========  ================================================  =====================================
incident  what goes wrong                                   the gate
========  ================================================  =====================================
refund    a $9.8M refund on a $47 order: the amount is      refunds above MAX_REFUND_CENTS
          read from the order id                            ($500) are refused
invoice   a EUR 2M invoice sent as USD                      the customer's billing currency only,
                                                            and at most MAX_INVOICE_CENTS
trade     a ~$190k sell instead of ~$1k: the notional is    orders above MAX_ORDER_NOTIONAL_CENTS
          read as a share count                             ($10,000 notional) are refused
========  ================================================  =====================================

    python examples/incidents.py                 # all three: local model, local control plane
    python examples/incidents.py refund trade    # some of them
    python examples/incidents.py --live          # the real OpenAI API makes the decisions
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from local_model import (
    LIVE,
    OPENAI_MODEL,
    Model,
    divergences,
    modes,
    names,
    refusal_reaches,
    running,
)

import chronicle
from tests.support.llm_server import Reply, chat_text, chat_tool_calls, tool_call

MAX_REFUND_CENTS = 50_000
MAX_INVOICE_CENTS = 5_000_000
MAX_ORDER_NOTIONAL_CENTS = 1_000_000
CHAT = "openai.chat.completions.create"

ORDERS = {"ORD-9800000": {"item": "blender", "total_cents": 4_700}}
CUSTOMERS = {"Muller GmbH": {"currency": "EUR"}}
PRICES_CENTS = {"ACME": 19_000}
MOVED: list[str] = []
"""What the ungated tools did to the world (refunds paid, invoices sent, orders placed)."""


def dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


# ---- the tools: ungated (what ran in production) and gated (the fix) ---------------------------


def pay_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    MOVED.append(f"refunded {dollars(amount_cents)} on {order_id}")
    return {"refunded_cents": amount_cents, "order_id": order_id}


def deliver_invoice(customer: str, amount_cents: int, currency: str) -> dict[str, Any]:
    MOVED.append(f"invoiced {customer} {amount_cents / 100:,.2f} {currency}")
    return {"sent": True, "customer": customer, "amount_cents": amount_cents, "currency": currency}


def execute_order(symbol: str, side: str, quantity: int) -> dict[str, Any]:
    notional = quantity * PRICES_CENTS[symbol]
    MOVED.append(f"{side} {quantity} {symbol} ({dollars(notional)})")
    return {"filled": quantity, "symbol": symbol, "side": side, "notional_cents": notional}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund ``amount_cents`` on an order."""
    return pay_refund(order_id, amount_cents)


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund_gated(order_id: str, amount_cents: int) -> dict[str, Any]:
    """The fix: no refund above MAX_REFUND_CENTS."""
    if amount_cents > MAX_REFUND_CENTS:
        cap = dollars(MAX_REFUND_CENTS)
        return {"blocked": True, "reason": f"{dollars(amount_cents)} is over the {cap} cap"}
    return pay_refund(order_id, amount_cents)


@chronicle.boundary("send_invoice", kind="tool")
def send_invoice(customer: str, amount_cents: int, currency: str) -> dict[str, Any]:
    """Send an invoice."""
    return deliver_invoice(customer, amount_cents, currency)


@chronicle.boundary("send_invoice", kind="tool")
def send_invoice_gated(customer: str, amount_cents: int, currency: str) -> dict[str, Any]:
    """The fix: the customer's own billing currency, and no invoice above MAX_INVOICE_CENTS."""
    billing = CUSTOMERS.get(customer, {}).get("currency")
    if currency != billing:
        return {"blocked": True, "reason": f"{customer} is billed in {billing}, not {currency}"}
    if amount_cents > MAX_INVOICE_CENTS:
        return {"blocked": True, "reason": f"{amount_cents / 100:,.2f} needs an approval"}
    return deliver_invoice(customer, amount_cents, currency)


@chronicle.boundary("place_order", kind="tool")
def place_order(symbol: str, side: str, quantity: int) -> dict[str, Any]:
    """Place a market order for ``quantity`` shares."""
    return execute_order(symbol, side, quantity)


@chronicle.boundary("place_order", kind="tool")
def place_order_gated(symbol: str, side: str, quantity: int) -> dict[str, Any]:
    """The fix: no order above MAX_ORDER_NOTIONAL_CENTS of notional."""
    notional = quantity * PRICES_CENTS[symbol]
    if notional > MAX_ORDER_NOTIONAL_CENTS:
        cap = dollars(MAX_ORDER_NOTIONAL_CENTS)
        return {"blocked": True, "reason": f"{dollars(notional)} notional is over the {cap} cap"}
    return execute_order(symbol, side, quantity)


# ---- the incidents ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Incident:
    name: str
    what: str
    request: str
    tool: str
    description: str
    parameters: dict[str, Any]
    ungated: Callable[..., dict[str, Any]]
    gated: Callable[..., dict[str, Any]]
    bad_call: dict[str, Any]
    """The arguments the model produced in the recorded incident."""
    report: str


INCIDENTS = {
    "refund": Incident(
        "refund",
        "a $9.8M refund on a $47 order (the amount read from the order id)",
        "Order ORD-9800000: the customer returned the $47.00 blender. Refund them.",
        "issue_refund",
        "Refund an order; amount_cents is the amount in cents.",
        {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        issue_refund,
        issue_refund_gated,
        {"order_id": "ORD-9800000", "amount_cents": 980_000_000},
        "Refunded $9,800,000.00 for order ORD-9800000.",
    ),
    "invoice": Incident(
        "invoice",
        "a EUR 2M invoice sent as USD",
        "Send Muller GmbH their annual licence invoice: EUR 2,000,000.00.",
        "send_invoice",
        "Send an invoice; amount_cents in cents of the currency (ISO code).",
        {
            "customer": {"type": "string"},
            "amount_cents": {"type": "integer"},
            "currency": {"type": "string"},
        },
        send_invoice,
        send_invoice_gated,
        {"customer": "Muller GmbH", "amount_cents": 200_000_000, "currency": "USD"},
        "Invoice for 2,000,000.00 USD sent to Muller GmbH.",
    ),
    "trade": Incident(
        "trade",
        "a ~$190k sell instead of ~$1k (the notional read as a share count)",
        "Sell $1,000 worth of ACME (last price $190.00).",
        "place_order",
        "Place a market order; quantity is a number of shares.",
        {
            "symbol": {"type": "string"},
            "side": {"type": "string", "enum": ["buy", "sell"]},
            "quantity": {"type": "integer"},
        },
        place_order,
        place_order_gated,
        {"symbol": "ACME", "side": "sell", "quantity": 1000},
        "Sold 1000 ACME.",
    ),
}


def run_agent(client: Any, incident: Incident, tool: Callable[..., dict[str, Any]]) -> str:
    """The agent: ask the model, run the tool it calls, hand the result back, until it answers."""
    schema = {
        "type": "function",
        "function": {
            "name": incident.tool,
            "description": incident.description,
            "parameters": {
                "type": "object",
                "properties": incident.parameters,
                "required": list(incident.parameters),
            },
        },
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a back-office agent. Act with the tool."},
        {"role": "user", "content": incident.request},
    ]
    for _ in range(4):
        reply = client.chat.completions.create(
            model=OPENAI_MODEL, messages=messages, tools=[schema]
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = tool(**json.loads(call.function.arguments))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
    return "gave up"


def script(model: Model, incident: Incident) -> None:
    replies: tuple[Reply, ...] = (
        chat_tool_calls(tool_call(incident.tool, incident.bad_call)),
        chat_text(incident.report),
    )
    model.script(*replies)


def record_and_fix(model: Model, control_plane: str, incident: Incident) -> bool:
    client = chronicle.wrap(model.openai())
    script(model, incident)
    MOVED.clear()
    with chronicle.record(f"incident-{incident.name}", labels={"incident": incident.name}) as run:
        answer = run_agent(client, incident, incident.ungated)
    chronicle.flush(10)
    moved = list(MOVED)
    print(f"\n{incident.name}: {incident.what}")
    print(f"  recorded:  {names(control_plane, run)}")
    print(f"  the ungated tool: {'; '.join(moved) or 'nothing'}")
    print(f"  the agent said: {answer}")

    MOVED.clear()
    before = model.requests
    # The gated tool runs live; the model's second call reads its refusal, a change the fix
    # makes on purpose. Strict: any other departure from the recording is an error.
    plan = chronicle.ReplayPlan().run(incident.tool).expect_change(CHAT, 2)
    try:
        with chronicle.replay_trace(run.trace_id, run.span_id, plan, strict=True) as replay:
            run_agent(client, incident, incident.gated)
    except chronicle.ReplayDivergenceError as error:  # the code departed from the recording
        print(f"  the replay diverged from its recording, so nothing is proven:\n{error}")
        print("  fixed: False")
        return False
    requests = model.requests - before
    verdict = replay.captured_result(incident.tool, 1)
    asked = replay.captured_input(incident.tool, 1)
    told = replay.captured_input(CHAT, 2)["messages"][-1]["content"]
    print(f"  replayed:  {modes(replay)}")
    print(f"  the gated tool, on the recorded arguments {asked}: {verdict}")
    print(f"  the model's second call now reads: {told}")
    print(f"  divergences: {divergences(replay)}")
    print(f"  moved by the replay: {'; '.join(MOVED) or 'nothing'}")
    print(f"  model requests during the replay: {requests}")
    blocked = isinstance(verdict, dict) and verdict.get("blocked") is True
    fixed = refusal_reaches(replay, (CHAT, 2), verdict, told) and not MOVED and requests == 0
    if LIVE and not blocked:
        print("  (the live model did not repeat the incident: the gate let its call through)")
        fixed = requests == 0
    print(f"  fixed: {fixed}")
    return fixed


def main() -> int:
    chosen = [a for a in sys.argv[1:] if not a.startswith("--")] or list(INCIDENTS)
    unknown = [name for name in chosen if name not in INCIDENTS]
    if unknown:
        print(f"unknown incident {', '.join(unknown)}; choose from {', '.join(INCIDENTS)}")
        return 2
    with running("back-office-agent") as (model, control_plane):
        print(f"model: {'the real OpenAI API' if LIVE else 'local scripted server'}")
        results = [record_and_fix(model, control_plane, INCIDENTS[name]) for name in chosen]
    holds = all(results)
    print(f"\nevery incident is fixed: {holds}")
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
