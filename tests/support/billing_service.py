"""A billing service in a process of its own, for the cross-service replay tests.

``python -m tests.support.billing_service`` serves ``POST /refund`` with uvicorn on a free
``127.0.0.1`` port behind ``ChronicleMiddleware(service="billing")`` and prints
``listening on <port>`` once it accepts connections. Chronicle is configured from the
environment (``CHRONICLE_*``), so a test picks the control plane, ``accept_replay`` and
``replay_token``. ``BILLING_VARIANT`` picks the code:

- ``buggy`` (the default): ``charge`` charges whatever it is asked, even past the order's total;
- ``fixed``: ``charge`` refuses an amount above the order's total (the fix under test);
- ``changed``: like ``fixed``, and ``lookup_order`` is asked for the order id in lower case
  (a change that makes the service's replay diverge from its recording);
- ``extra``: like ``fixed``, and the order is looked up twice (a call with no recording).

``BILLING_LEDGER`` names a file each real charge appends one line to (what a live run did).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import chronicle

ORDERS = {"ORD-1": {"order_id": "ORD-1", "total_cents": 4_700}}


@chronicle.boundary("lookup_order", kind="tool")
def lookup_order(order_id: str) -> dict[str, Any]:
    """The order as billing's database holds it."""
    return dict(ORDERS.get(order_id.upper(), {"order_id": order_id, "total_cents": 0}))


@chronicle.boundary("charge", kind="tool")
def charge(order_id: str, amount_cents: int, total_cents: int) -> dict[str, Any]:
    """Refund ``amount_cents`` on the order's card; the fixed variant caps it at the total."""
    if os.environ.get("BILLING_VARIANT", "buggy") != "buggy" and amount_cents > total_cents:
        return {"blocked": True, "reason": f"{amount_cents} is over the order's {total_cents}"}
    ledger = os.environ.get("BILLING_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as file:
            file.write(f"{order_id} {amount_cents}\n")
    return {"charged_cents": amount_cents, "order_id": order_id}


def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Billing's handler logic: look the order up, then charge."""
    asked = order_id.lower() if os.environ.get("BILLING_VARIANT") == "changed" else order_id
    order = lookup_order(asked)
    if os.environ.get("BILLING_VARIANT") == "extra":
        order = lookup_order(asked)
    return charge(order_id, amount_cents, order["total_cents"])


async def handle(request: Request) -> JSONResponse:
    body = await request.json()
    result = await asyncio.to_thread(refund, body["order_id"], body["amount_cents"])
    return JSONResponse({"result": result})


def app() -> chronicle.ChronicleMiddleware:
    """The billing service as an ASGI app."""
    return chronicle.ChronicleMiddleware(
        Starlette(routes=[Route("/refund", handle, methods=["POST"])]), service="billing"
    )


def main() -> None:
    chronicle.configure()
    chronicle.instrument_httpx()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(), log_level="warning", lifespan="off", ws="none"))

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"listening on {port}", flush=True)
        await task

    try:
        asyncio.run(serve())
    finally:
        chronicle.shutdown()


if __name__ == "__main__":
    main()
