"""Two services, one trace: a support agent asks a billing agent over HTTP.

- The **support agent** (this process) has an OpenAI model and one tool, ``ask_billing``, which
  POSTs to the billing service with httpx. ``chronicle.instrument_httpx()`` records that call as
  a tool envelope and sends ``traceparent`` naming it (the billing host is in ``inject_hosts``).
- The **billing agent** is an ASGI app behind ``chronicle.ChronicleMiddleware``: its request
  span joins the caller's trace, parented on that envelope. It has a Claude model and an
  ungated ``issue_refund`` tool, and it refunds $9.8M on a $47 order.

Both are saved as one trace of two spans. The fix (a refund cap) is then proven on the billing
span alone: it is replayed strictly with the gated ``issue_refund`` as the cut-point, its model
answers from the recording, and the support agent is not involved at all. The billing model's
second call now reads the cap's refusal, a change the plan declares (``expect_change``); its
recorded answer ("Refunded 980000000 cents ...") is stale, so the proof is what the gate
returned, that nothing was refunded, and that the refusal is what the model is told.

Then the whole incident is replayed from the support agent's side: its span is replayed with the
call to billing let through (``ReplayPlan().through("billing-agent")``). The request reaches the
running billing service carrying the replay, signed with the shared ``replay_token``; billing
(``accept_replay`` on) answers it by replaying *its* span with its own code, the gated
``issue_refund`` live, and both services' calls come back in one call log. One process plays
both services here, so one configuration holds the token and accepts replays; deployed, each
service has ``CHRONICLE_REPLAY_TOKEN`` and only billing's test instance
``CHRONICLE_ACCEPT_REPLAY=true``.

    python examples/multi_agent.py           # local models, local control plane
    python examples/multi_agent.py --live    # the real OpenAI and Anthropic APIs
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from local_model import (
    ANTHROPIC_MODEL,
    LIVE,
    OPENAI_MODEL,
    Model,
    divergences,
    envelopes,
    modes,
    refusal_reaches,
    running,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import chronicle
from tests.support.agents import AppServer
from tests.support.llm_server import (
    chat_text,
    chat_tool_calls,
    messages_text,
    messages_tool_use,
    tool_call,
)

MAX_REFUND_CENTS = 50_000
MESSAGES = "anthropic.messages.create"
REFUNDS: list[int] = []


# ---- the billing agent (its own service) ------------------------------------------------------


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """The tool as it ran: refunds whatever it is asked to."""
    REFUNDS.append(amount_cents)
    return {"refunded_cents": amount_cents, "order_id": order_id}


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund_gated(order_id: str, amount_cents: int) -> dict[str, Any]:
    """The fix: no refund above MAX_REFUND_CENTS."""
    if amount_cents > MAX_REFUND_CENTS:
        return {"blocked": True, "reason": f"{amount_cents} cents is over the cap"}
    REFUNDS.append(amount_cents)
    return {"refunded_cents": amount_cents, "order_id": order_id}


class Billing:
    """The billing service: an ASGI app whose handler runs ``agent``."""

    def __init__(self) -> None:
        self.model: Model | None = None
        self.client: Any = None
        self.refund = issue_refund
        self.spans: list[str] = []

        async def handle(request: Request) -> JSONResponse:
            session = chronicle.current_session()
            if session is not None:
                self.spans.append(session.span_id)
            body = await request.json()
            answer = await asyncio.to_thread(self.agent, body["order_id"], body["question"])
            return JSONResponse({"answer": answer})

        app = Starlette(routes=[Route("/ask", handle, methods=["POST"])])
        self.app = chronicle.ChronicleMiddleware(app, service="billing-agent")

    def agent(self, order_id: str, question: str) -> str:
        """The billing agent's logic (what a replay of its span runs again)."""
        tools = [
            {
                "name": "issue_refund",
                "description": "Refund an order; amount_cents in cents.",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string"},
                        "amount_cents": {"type": "integer"},
                    },
                    "required": ["order_id", "amount_cents"],
                },
            }
        ]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"Order {order_id}: {question}"}
        ]
        for _ in range(4):
            reply = self.client.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=512, messages=messages, tools=tools
            )
            uses = [block for block in reply.content if block.type == "tool_use"]
            if not uses:
                return "".join(block.text for block in reply.content if block.type == "text")
            content = [block.model_dump(exclude_none=True) for block in reply.content]
            messages.append({"role": "assistant", "content": content})
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": json.dumps(self.refund(**use.input)),
                }
                for use in uses
            ]
            messages.append({"role": "user", "content": results})
        return "gave up"


# ---- the support agent (this process) ----------------------------------------------------------


def support_agent(client: Any, billing_url: str, message: str) -> str:
    """Ask the model; it hands billing questions to the billing agent over HTTP."""

    @chronicle.boundary("ask_billing", kind="tool")
    def ask_billing(order_id: str, question: str) -> str:
        reply = httpx.post(
            f"{billing_url}/ask", json={"order_id": order_id, "question": question}, timeout=120
        )
        reply.raise_for_status()
        return str(reply.json()["answer"])

    tools = [
        {
            "type": "function",
            "function": {
                "name": "ask_billing",
                "description": "Hand a billing question about an order to the billing agent.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}, "question": {"type": "string"}},
                    "required": ["order_id", "question"],
                },
            },
        }
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": message}]
    for _ in range(4):
        reply = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=tools)
        choice = reply.choices[0].message
        if not choice.tool_calls:
            return str(choice.content)
        messages.append(choice.model_dump(exclude_none=True))
        for call in choice.tool_calls:
            answer = ask_billing(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": answer})
    return "gave up"


def show_trace(control_plane: str, trace_id: str) -> dict[str, dict[str, Any]]:
    """Print the trace's spans (service, parent envelope) and their envelopes; return the spans."""
    trace = httpx.get(f"{control_plane}/v1/traces/{trace_id}", timeout=10).json()
    spans = {span["span_id"]: span for span in trace["spans"]}
    for span_id, span in spans.items():
        found = envelopes(control_plane, trace_id, span_id)
        parent = span.get("parent_envelope_id")
        joined = f", parented on envelope {parent}" if parent else " (the root)"
        print(f"   span {span_id} of {span['service']}{joined}")
        for envelope in found:
            print(f"     - {envelope['envelope_id']} {envelope['name']}")
    return spans


def main() -> int:
    billing = Billing()
    with AppServer(billing.app) as server:
        settings = {
            "inject_hosts": [f"127.0.0.1:{server.port}"],
            "accept_replay": True,  # billing answers a replay the support agent lets through
            "replay_token": "multi-agent-example-token",
        }
        with running("support-agent", **settings) as (model, control_plane):
            chronicle.instrument_httpx()
            billing.model = model
            billing.client = chronicle.wrap(model.anthropic())
            support = chronicle.wrap(model.openai())
            model.script(
                chat_tool_calls(
                    tool_call(
                        "ask_billing",
                        {"order_id": "ORD-9800000", "question": "Refund the $47.00 blender."},
                    )
                ),
                messages_tool_use(
                    tool_call(
                        "issue_refund", {"order_id": "ORD-9800000", "amount_cents": 980_000_000}
                    )
                ),
                messages_text("Refunded 980000000 cents on ORD-9800000."),
                chat_text("Billing has refunded your order."),
            )

            labels = {"session_id": "refund-2207", "user_id": "customer-23"}
            with chronicle.record("support-chat", labels=labels) as session:
                answer = support_agent(
                    support, server.url, "Please refund my $47 blender, ORD-9800000."
                )
            chronicle.flush(10)
            print("1. recorded one request across two services")
            print(f"   the support agent answered: {answer!r}")
            print(f"   refunded: {REFUNDS}")
            spans = show_trace(control_plane, session.trace_id)
            services = sorted(span["service"] for span in spans.values())
            billing_span = billing.spans[0]
            call = next(
                e
                for e in envelopes(control_plane, session.trace_id, session.span_id)
                if e["name"].startswith("http POST")
            )
            linked = spans[billing_span].get("parent_envelope_id") == call["envelope_id"]
            print(f"   one trace, services {services}; billing parented on the HTTP call: {linked}")

            print("2. replayed the billing span alone, the gated issue_refund as the cut-point")
            REFUNDS.clear()
            billing.refund = issue_refund_gated
            before = model.requests
            # The gated tool runs live; the billing model's second call reads its refusal, a
            # change the fix makes on purpose. Strict: any other departure is an error.
            plan = chronicle.ReplayPlan().run("issue_refund").expect_change(MESSAGES, 2)
            try:
                with chronicle.replay_trace(
                    session.trace_id, billing_span, plan, strict=True
                ) as run:
                    billing.agent("ORD-9800000", "Refund the $47.00 blender.")
            except chronicle.ReplayDivergenceError as error:
                print(f"   the replay diverged from its recording, so nothing is proven:\n{error}")
                return 1
            requests = model.requests - before
            result = run.captured_result("issue_refund", 1)
            told = run.captured_input(MESSAGES, 2)["messages"][-1]["content"][0]["content"]
            print(f"   call log: {modes(run)}")
            print(f"   issue_refund returned: {result}")
            print(f"   the billing model's second call now reads: {told}")
            print(f"   divergences: {divergences(run)}")
            print(f"   refunded by the replay: {REFUNDS}")
            print(f"   model requests during the replay: {requests}")

            print("3. replayed the incident across both services, from the support agent's side")
            REFUNDS.clear()
            before = model.requests
            # The call to billing is let through, carrying the replay: billing runs its own code
            # against its own recording, the gated issue_refund live; the billing model's second
            # call reads the refusal (declared); everything else is served from the recording.
            across = (
                chronicle.ReplayPlan()
                .through("billing-agent")
                .run("issue_refund")
                .expect_change(MESSAGES, 2)
            )
            try:
                with chronicle.replay_trace(
                    session.trace_id, session.span_id, across, strict=True
                ) as both:
                    support_agent(support, server.url, "Please refund my $47 blender, ORD-9800000.")
            except chronicle.ReplayError as error:
                print(f"   the replay across services failed, so nothing is proven:\n{error}")
                return 1
            across_requests = model.requests - before
            served = [(c.service, c.name, c.mode) for c in both.call_log()]
            print("   call log: " + ", ".join(f"{s}:{name}:{mode}" for s, name, mode in served))
            print(f"   divergences: {divergences(both)}")
            print(f"   refunded by the replay: {REFUNDS}")
            print(f"   model requests during the replay: {across_requests}")
            chronicle.uninstrument_httpx()

    blocked = isinstance(result, dict) and result.get("blocked") is True
    proven = refusal_reaches(run, (MESSAGES, 2), result, told) and not REFUNDS and requests == 0
    if LIVE and not blocked:
        print("   (the live model asked for a refund under the cap: no incident to fix)")
        proven = requests == 0
    in_billing = ("billing-agent", "issue_refund", "run") in served
    proven = proven and in_billing and not REFUNDS and across_requests == 0
    holds = linked and services == ["billing-agent", "support-agent"] and proven
    print(f"\none trace across two services, and the fix holds: {holds}")
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
