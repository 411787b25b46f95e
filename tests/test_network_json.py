"""JSON read from the network is bounded (issue 40, item 4): a replay header or a report header
nested too deep, or holding a number no field can take, is the clear error that header already
has, on both sides of a cross-service replay, never a ``RecursionError`` or ``OverflowError``.
The caller side runs a real replay through a real HTTP server; the service side a real
``ChronicleMiddleware`` app."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import chronicle
from chronicle.replay import travel
from chronicle.testing import LocalControlPlane
from tests.support.agents import AppServer

TOKEN = "test-replay-token-0123456789"
HTTP = "http POST 127.0.0.1"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def signed_payload(text: str, token: str = TOKEN) -> str:
    """A ``chronicle-replay`` header value carrying ``text`` as its payload, validly signed
    (``v1.<payload>.<HMAC-SHA256 of the payload>``, as the header's format says)."""
    payload = b64(text.encode("utf-8"))
    mac = hmac.new(token.encode("utf-8"), payload.encode("ascii"), hashlib.sha256).digest()
    return f"v1.{payload}.{b64(mac)}"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def replay_fields(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "trace_id": "a" * 32,
        "span_id": "b" * 16,
        "parent_envelope_id": "0" * 16,
        "entries": [],
        "models": [],
        "strict": True,
        "match": "order",
        "ignore": [],
        "nonce": os.urandom(16).hex(),
        "expires": time.time() + 60,
        "caller": "support",
        "record_into": None,
    }
    return fields | changes


# ---- the service: a validly signed replay header it cannot read -------------------------------


@pytest.fixture
def service() -> Iterator[tuple[TestClient, list[str]]]:
    """An app behind ChronicleMiddleware that accepts replays; yields a client and the
    requests its handler ran."""
    ran: list[str] = []

    async def refund(request: Request) -> JSONResponse:
        ran.append(str(await request.json()))
        return JSONResponse({"ok": True})

    chronicle.configure(accept_replay=True, replay_token=TOKEN, service_name="billing")
    app = chronicle.ChronicleMiddleware(
        Starlette(routes=[Route("/refund", refund, methods=["POST"])])
    )
    with TestClient(app) as client:
        yield client, ran


@pytest.mark.parametrize(
    "payload",
    [
        '{"entries": ' + nested(100_000) + "}",  # past what Python's JSON decoder can read
        json.dumps(replay_fields(ignore=json.loads(nested(300)))),  # readable, deeper than any
        json.dumps(replay_fields(expires=10**400)),  # a number no float holds
    ],
    ids=["100000-deep", "300-deep", "huge-number"],
)
def test_a_signed_replay_header_it_cannot_read_is_refused_400_and_nothing_runs(
    service: tuple[TestClient, list[str]], payload: str
) -> None:
    client, ran = service
    answer = client.post(
        "/refund", json={"order": 1}, headers={travel.HEADER: signed_payload(payload)}
    )
    assert answer.status_code == 400
    assert "is signed but its payload is not a replay" in answer.json()["error"]
    assert ran == []  # refused: the handler never ran
    # the same app still serves a plain request
    assert client.post("/refund", json={"order": 2}).json() == {"ok": True}
    assert ran == ["{'order': 2}"]


# ---- the caller: a report header it cannot read -----------------------------------------------


def hostile_service(report: str) -> Starlette:
    """A service that answers normally, and with ``report`` as its replay report when a replay
    comes (as a proxy between the two services could answer: the report is not signed)."""

    async def refund(request: Request) -> JSONResponse:
        headers = {travel.REPORT_HEADER: report} if travel.HEADER in request.headers else {}
        return JSONResponse({"ok": True}, headers=headers)

    return Starlette(routes=[Route("/refund", refund, methods=["POST"])])


@chronicle.boundary("ask_billing", kind="tool")
def ask_billing(url: str) -> Any:
    return httpx.post(f"{url}/refund", json={"order": 1}, timeout=30).json()


@pytest.mark.parametrize(
    "body",
    [
        nested(20_000),  # the issue's: 20,000 deep
        json.dumps(  # a report readable but for one value deeper than any recording holds
            {
                "service": "billing",
                "calls": [],
                "divergences": [],
                "matched": [],
                "values": [["charge", 1, {"order": json.loads(nested(250))}]],
            }
        ),
        '{"service": "billing", "calls": [], "divergences": [], "matched": [], "omitted": 1e999}',
    ],
    ids=["20000-deep", "250-deep", "infinite-count"],
)
def test_a_report_header_the_caller_cannot_read_is_a_replay_error(
    control_plane: LocalControlPlane, body: str
) -> None:
    report = b64(body.encode("utf-8"))
    with AppServer(hostile_service(report)) as server:
        chronicle.configure(
            control_plane_url=control_plane.url,
            flush_interval=0.05,
            inject_hosts=["127.0.0.1"],
            replay_token=TOKEN,
        )
        chronicle.instrument_httpx()
        try:
            with chronicle.record("support") as session:
                assert ask_billing(server.url) == {"ok": True}
            assert chronicle.flush(10)
            control_plane.wait_for_envelopes(session.trace_id, 2)
            plan = chronicle.ReplayPlan().run("ask_billing").through(HTTP)
            with pytest.raises(chronicle.ReplayError) as raised:
                with chronicle.replay_trace(session.trace_id, session.span_id, plan):
                    ask_billing(server.url)
        finally:
            chronicle.uninstrument_httpx()
            chronicle.reset()
    assert "header that is not a replay report" in str(raised.value)
    assert "127.0.0.1" in str(raised.value)
