"""The httpx instrumenter, end to end: two agents on real local servers, one trace, replay."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import chronicle
from chronicle.integrations.asgi import ChronicleMiddleware
from chronicle.integrations.httpx import instrument_httpx, is_instrumented, uninstrument_httpx
from chronicle.integrations.propagation import inject
from chronicle.save.client import INTERNAL_EXTENSION
from tests.support.agents import AppServer, HeaderLog
from tests.support.stored import stored

# ---- agent B: answers questions about orders ---------------------------------------------------


class AgentB:
    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.sessions: list[chronicle.Session | None] = []

        @chronicle.boundary("lookup_order", kind="tool")
        def lookup_order(order_id: str) -> dict[str, str]:
            return {"order_id": order_id, "status": "shipped"}

        async def answer(request: Request) -> JSONResponse:
            self.requests.append(dict(request.headers))
            self.sessions.append(chronicle.current_session())
            body = await request.json()
            found = lookup_order(body["order_id"])
            return JSONResponse(
                {"answer": f"order {found['order_id']} is {found['status']}"},
                headers={"set-cookie": "session=do-not-record-me"},
            )

        self.app = ChronicleMiddleware(
            Starlette(routes=[Route("/answer", answer, methods=["POST"])]), service="agent-b"
        )


# ---- agent A: asks B inside a boundary ---------------------------------------------------------


class AgentA:
    def __init__(self, b_url: str) -> None:
        self.b_url = b_url
        self.sessions: list[chronicle.Session | None] = []
        self.asked = 0

        @chronicle.boundary("ask_b", kind="tool")
        async def ask_b(order_id: str) -> dict[str, Any]:
            self.asked += 1
            async with httpx.AsyncClient() as client:
                response = await client.post(f"{self.b_url}/answer", json={"order_id": order_id})
                response.raise_for_status()
                reply: dict[str, Any] = response.json()
                return reply

        self.ask_b = ask_b

        async def chat(request: Request) -> JSONResponse:
            self.sessions.append(chronicle.current_session())
            body = await request.json()
            return JSONResponse(await self.run(body["order_id"]))

        self.app = ChronicleMiddleware(
            Starlette(routes=[Route("/chat", chat, methods=["POST"])]), service="agent-a"
        )

    async def run(self, order_id: str) -> dict[str, str]:
        """The agent's logic (what a replay runs again)."""
        reply = await self.ask_b(order_id)
        return {"reply": reply["answer"]}


@pytest.fixture
def instrumented() -> Iterator[None]:
    instrument_httpx()
    try:
        yield
    finally:
        uninstrument_httpx()


@pytest.fixture
def agent_b() -> Iterator[tuple[AgentB, AppServer]]:
    agent = AgentB()
    with AppServer(agent.app) as server:
        yield agent, server


def _configure(recording: Any, *hosts: str, **settings: Any) -> None:
    chronicle.configure(
        control_plane_url=recording.control_plane.url,
        flush_interval=0.05,
        inject_hosts=list(hosts),
        **settings,
    )


def test_two_agents_record_one_trace_and_replay_without_calling_b(recording, instrumented, agent_b):
    b, b_server = agent_b
    a = AgentA(b_server.url)
    _configure(recording, f"127.0.0.1:{b_server.port}")
    with AppServer(a.app) as a_server, httpx.Client() as client:
        response = client.post(f"{a_server.url}/chat", json={"order_id": "42"})
    assert response.json() == {"reply": "order 42 is shipped"}

    a_session, b_session = a.sessions[0], b.sessions[0]
    assert a_session is not None and b_session is not None
    trace_id = a_session.trace_id
    envelopes = recording.saved(trace_id, 3)
    by_name = {e["name"]: e for e in envelopes}
    assert set(by_name) == {"ask_b", "http POST 127.0.0.1", "lookup_order"}
    ask, call, lookup = by_name["ask_b"], by_name["http POST 127.0.0.1"], by_name["lookup_order"]

    # one trace holding both services' spans
    trace = recording.control_plane.trace(trace_id)
    spans = {s["span_id"]: s for s in trace["spans"]}
    assert set(spans) == {a_session.span_id, b_session.span_id}
    assert spans[a_session.span_id]["service"] == "agent-a"
    assert spans[b_session.span_id]["service"] == "agent-b"
    assert b_session.trace_id == trace_id
    # B's span is parented on A's outbound-call envelope, which is inside the calling boundary
    assert spans[b_session.span_id]["parent_envelope_id"] == call["envelope_id"]
    assert spans[a_session.span_id].get("parent_envelope_id") is None
    assert call["span_id"] == a_session.span_id
    assert call["parent_envelope_id"] == ask["envelope_id"]
    assert lookup["span_id"] == b_session.span_id
    assert lookup.get("parent_envelope_id") is None

    # what B received names that envelope
    received = b.requests[0]
    assert received["traceparent"] == f"00-{trace_id}-{call['envelope_id']}-01"
    assert received["tracestate"] == f"chronicle={call['envelope_id']}"

    # what the envelope holds: the exchange, without trace headers or secrets
    assert call["kind"] == "tool"
    raw_in = call["input"]["raw"]
    assert raw_in["method"] == "POST"
    assert raw_in["url"] == f"{b_server.url}/answer"
    assert raw_in["body"] == {"order_id": "42"}
    assert raw_in["body_format"] == "json"
    assert "traceparent" not in raw_in["headers"] and "tracestate" not in raw_in["headers"]
    raw_out = call["output"]["raw"]
    assert raw_out["status_code"] == 200
    assert raw_out["body"] == {"answer": "order 42 is shipped"}
    assert "set-cookie" not in raw_out["headers"]

    # replay A with its boundary live: the outbound call is served from the recording
    before = stored(recording.control_plane, trace_id)
    b_calls = len(b.requests)
    plan = chronicle.ReplayPlan().run("ask_b")
    with chronicle.replay_trace(trace_id, a_session.span_id, plan) as run:
        replayed = asyncio.run(a.run("42"))
    assert replayed == {"reply": "order 42 is shipped"}
    assert a.asked == 2  # the boundary ran live
    assert len(b.requests) == b_calls  # B was not called
    assert [(c.name, c.invocation_index, c.mode) for c in run.call_log()] == [
        ("ask_b", 1, "run"),
        ("http POST 127.0.0.1", 1, "stub"),
    ]
    stubbed = run.captured_result("http POST 127.0.0.1", 1)
    assert isinstance(stubbed, httpx.Response)
    assert stubbed.status_code == 200
    assert stubbed.request.url == f"{b_server.url}/answer"
    assert chronicle.flush(10)
    assert stored(recording.control_plane, trace_id) == before


def test_a_host_not_allowed_gets_no_header_and_no_envelope(recording, instrumented):
    allowed, other = HeaderLog(), HeaderLog()
    with AppServer(allowed) as allowed_server, AppServer(other) as other_server:
        _configure(recording, f"127.0.0.1:{allowed_server.port}")
        with chronicle.record("mixed") as session, httpx.Client() as client:
            client.get(f"{other_server.url}/x")
            client.get(f"{allowed_server.url}/y")
            client.get(f"http://localhost:{allowed_server.port}/z")  # another host name
    envelopes = recording.saved(session.trace_id, 1)
    assert [e["name"] for e in envelopes] == ["http GET 127.0.0.1"]
    assert envelopes[0]["input"]["raw"]["url"].endswith("/y")
    assert "traceparent" not in other.requests[0] and "tracestate" not in other.requests[0]
    assert "traceparent" not in allowed.requests[1]
    assert allowed.requests[0]["traceparent"].startswith(f"00-{session.trace_id}-")


def test_a_client_created_before_instrumenting_is_covered_and_uninstrument_undoes_it(recording):
    log = HeaderLog()
    with AppServer(log) as server, httpx.Client() as client:
        _configure(recording, "127.0.0.1")
        instrument_httpx()
        instrument_httpx()  # idempotent
        try:
            assert is_instrumented()
            with chronicle.record("sync") as session:
                with client.stream("GET", f"{server.url}/stream") as streamed:
                    assert b"".join(streamed.iter_bytes()) == b'{"ok": true}'
        finally:
            uninstrument_httpx()
        uninstrument_httpx()
        assert not is_instrumented()
        with chronicle.record("after") as after:
            client.get(f"{server.url}/plain")
    envelopes = recording.saved(session.trace_id, 1)
    assert envelopes[0]["name"] == "http GET 127.0.0.1"
    assert envelopes[0]["output"]["raw"]["body"] == {"ok": True}
    assert "traceparent" in log.requests[0]
    assert "traceparent" not in log.requests[1]
    assert recording.control_plane.trace_envelopes(after.trace_id) == []


def test_secrets_internal_traffic_and_inject_off(recording, instrumented):
    log = HeaderLog()
    with AppServer(log) as server, httpx.Client() as client:
        url = f"http://user:hunter2-password@127.0.0.1:{server.port}/secret"
        _configure(recording, "127.0.0.1")
        with chronicle.record("secrets") as session:
            client.post(
                url,
                content=b"plain words",
                headers={"authorization": "Bearer sk-live-123", "x-request-id": "r1"},
            )
            client.get(f"{server.url}/internal", extensions={INTERNAL_EXTENSION: True})
        _configure(recording, "127.0.0.1", inject=False)
        with chronicle.record("no-inject") as quiet:
            client.get(f"{server.url}/quiet")
    (envelope,) = recording.saved(session.trace_id, 1)
    raw = envelope["input"]["raw"]
    assert raw["url"] == f"{server.url}/secret"
    assert "authorization" not in raw["headers"]
    assert raw["headers"]["x-request-id"] == "r1"
    assert (raw["body"], raw["body_format"]) == ("plain words", "text")
    assert "hunter2" not in str(envelope)
    assert "traceparent" not in log.requests[1]  # internal traffic: untouched
    (quiet_envelope,) = recording.saved(quiet.trace_id, 1)  # inject off: recorded, no header
    assert quiet_envelope["name"] == "http GET 127.0.0.1"
    assert "traceparent" not in log.requests[2]


def test_a_failed_call_is_recorded_and_replays_as_the_same_exception(recording, instrumented):
    with AppServer(HeaderLog()) as server:
        port = server.port
    _configure(recording, "127.0.0.1")  # the server is gone: the connection is refused
    with chronicle.record("refused") as session, httpx.Client() as client:
        with pytest.raises(httpx.ConnectError):
            client.get(f"http://127.0.0.1:{port}/gone")
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "ConnectError"
    with chronicle.replay_trace(session.trace_id, session.span_id), httpx.Client() as client:
        with pytest.raises(httpx.ConnectError, match="Connection refused") as replayed:
            client.get(f"http://127.0.0.1:{port}/gone")
    assert isinstance(replayed.value.__cause__, chronicle.RecordedCallError)


def test_binary_bodies_replay_byte_for_byte(recording, instrumented):
    payload = bytes(range(256))

    async def binary(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 201,
                "headers": [(b"content-type", b"application/octet-stream"), (b"x-kind", b"b")],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    with AppServer(binary) as server:
        _configure(recording, "127.0.0.1")
        with chronicle.record("binary") as session, httpx.Client() as client:
            live = client.put(f"{server.url}/blob", content=payload)
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["raw"]["body_format"] == "base64"

    async def replay_async() -> httpx.Response:
        async with httpx.AsyncClient() as client:
            return await client.put(f"{server.url}/blob", content=payload)

    with chronicle.replay_trace(session.trace_id, session.span_id):
        stubbed = asyncio.run(replay_async())
    assert stubbed.status_code == live.status_code == 201
    assert stubbed.content == live.content == payload
    assert stubbed.headers["x-kind"] == "b"
    assert stubbed.headers["content-length"] == "256"


def test_a_model_call_inside_an_llm_boundary_gets_no_trace_ids(recording, instrumented):
    log = HeaderLog()
    with AppServer(log) as server, httpx.Client() as client:
        _configure(recording, "127.0.0.1")

        def complete(model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
            response = client.post(f"{server.url}/v1/chat", json={"model": model})
            return {"id": "x", "ok": response.json()["ok"]}

        model = chronicle.wrap_llm("local_model", complete, provider="openai")
        with chronicle.record("llm") as session:
            model(model="m", messages=[{"role": "user", "content": "hi"}])
            assert inject(url=f"{server.url}/x") != {}  # outside it: allowed
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["name"] == "local_model"
    assert "traceparent" not in log.requests[0] and "tracestate" not in log.requests[0]


# ---- the same across A2A (a2a-sdk, optional) ---------------------------------------------------


def test_two_agents_speaking_a2a_record_one_trace_and_replay(recording, instrumented):
    pytest.importorskip("sse_starlette", reason="a2a-sdk[http-server] is not installed")
    pytest.importorskip("a2a.server.routes", reason="a2a-sdk 1.x is not installed")
    from a2a.client import ClientConfig, ClientFactory
    from a2a.helpers.proto_helpers import get_message_text, new_text_message
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Role,
        SendMessageRequest,
    )
    from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

    def card(url: str) -> AgentCard:
        return AgentCard(
            name="orders",
            description="answers questions about orders",
            version="1.0",
            supported_interfaces=[
                AgentInterface(
                    protocol_binding=TransportProtocol.JSONRPC,
                    url=url,
                    protocol_version=PROTOCOL_VERSION_CURRENT,
                )
            ],
            capabilities=AgentCapabilities(streaming=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[AgentSkill(id="orders", name="orders", description="orders", tags=["o"])],
        )

    b_sessions: list[chronicle.Session | None] = []
    b_calls: list[str] = []

    @chronicle.boundary("lookup_order", kind="tool")
    def lookup_order(order_id: str) -> str:
        b_calls.append(order_id)
        return "shipped"

    class Orders(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            b_sessions.append(chronicle.current_session())
            order_id = context.get_user_input()
            text = f"order {order_id} is {lookup_order(order_id)}"
            await event_queue.enqueue_event(
                new_text_message(text, context_id=context.context_id, task_id=context.task_id)
            )

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    placeholder = card("http://127.0.0.1/")
    handler = DefaultRequestHandler(
        agent_executor=Orders(), task_store=InMemoryTaskStore(), agent_card=placeholder
    )
    b_app = ChronicleMiddleware(
        Starlette(
            routes=[*create_agent_card_routes(placeholder), *create_jsonrpc_routes(handler, "/")]
        ),
        service="a2a-orders",
    )

    with AppServer(b_app) as b_server:
        b_url = f"{b_server.url}/"

        @chronicle.boundary("ask_orders_agent", kind="tool")
        async def ask_orders_agent(order_id: str) -> str:
            async with httpx.AsyncClient() as http:
                config = ClientConfig(streaming=False, httpx_client=http)
                client = ClientFactory(config).create(card(b_url))
                message = new_text_message(order_id, role=Role.ROLE_USER)
                replies = [
                    get_message_text(event.message)
                    async for event in client.send_message(SendMessageRequest(message=message))
                ]
                return replies[-1]

        _configure(recording, f"127.0.0.1:{b_server.port}")
        with chronicle.record("a2a") as session:
            assert asyncio.run(ask_orders_agent("7")) == "order 7 is shipped"

        envelopes = recording.saved(session.trace_id, 3)
        by_name = {e["name"]: e for e in envelopes}
        assert set(by_name) == {"ask_orders_agent", "http POST 127.0.0.1", "lookup_order"}
        call = by_name["http POST 127.0.0.1"]
        assert call["parent_envelope_id"] == by_name["ask_orders_agent"]["envelope_id"]
        assert call["input"]["raw"]["body"]["method"] == "SendMessage"
        (b_session,) = b_sessions
        assert b_session is not None
        spans = {s["span_id"]: s for s in recording.control_plane.trace(session.trace_id)["spans"]}
        assert set(spans) == {session.span_id, b_session.span_id}
        assert spans[b_session.span_id]["service"] == "a2a-orders"
        assert spans[b_session.span_id]["parent_envelope_id"] == call["envelope_id"]
        assert by_name["lookup_order"]["span_id"] == b_session.span_id

        before = stored(recording.control_plane, session.trace_id)
        plan = chronicle.ReplayPlan().run("ask_orders_agent")
        with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
            assert asyncio.run(ask_orders_agent("7")) == "order 7 is shipped"
        assert b_calls == ["7"]  # the orders agent was not called again
        assert [c.mode for c in run.call_log()] == ["run", "stub"]
        assert chronicle.flush(10)
        assert stored(recording.control_plane, session.trace_id) == before
