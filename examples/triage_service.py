"""The triage agent served over HTTP: each request it answers is a recording to replay.

``POST /triage`` with ``{"ticket": ..., "customer_tier": ...}`` runs ``triage_agent.triage`` and
answers its result as JSON. ``ChronicleMiddleware(..., record_body=True)`` records each request,
its JSON body included, as its span's entry (a call named ``"POST /triage"`` around the app,
with this app's import path), so a folder of requests saved from production replays against new
code by calling the app again, in process::

    chronicle replay tests/incidents --entry examples.triage_service:app

Serve it with ``uvicorn examples.triage_service:app``; ``TRIAGE_LLM_URL`` names the model server
(see ``triage_agent``).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from chronicle.integrations.asgi import ChronicleMiddleware
from examples import triage_agent


async def triage(request: Request) -> JSONResponse:
    """Triage the ticket in the JSON body; 422 when the body names none."""
    body = await request.json()
    ticket = body.get("ticket") if isinstance(body, dict) else None
    if not isinstance(ticket, str) or not ticket:
        return JSONResponse({"error": "the body needs a ticket"}, status_code=422)
    tier = str(body.get("customer_tier") or "standard")
    # the agent is synchronous (a blocking model client): off the event loop, in the request's
    # context, so its calls are recorded into the request's span
    answer = await run_in_threadpool(triage_agent.triage, ticket, tier)
    return JSONResponse(answer)


app = ChronicleMiddleware(
    Starlette(routes=[Route("/triage", triage, methods=["POST"])]),
    service="triage-service",
    record_body=True,
)
