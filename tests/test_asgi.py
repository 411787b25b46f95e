"""ChronicleMiddleware: one request span per HTTP request and WebSocket, saved and joined."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

import chronicle
from chronicle.integrations.asgi import ChronicleMiddleware
from chronicle.testing import capture
from tests.support.agents import AppServer

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER_ENVELOPE = "b7ad6b7169203331"


@chronicle.boundary("echo_tool", kind="tool")
def echo_tool(text: str) -> dict[str, str]:
    return {"echo": text}


class App:
    """A Starlette app behind the middleware that remembers each request's session."""

    def __init__(self, service: str | None = "web-agent") -> None:
        self.sessions: list[chronicle.Session | None] = []
        self.lifespan_ran = False

        async def ok(request: Request) -> JSONResponse:
            self.sessions.append(chronicle.current_session())
            return JSONResponse(echo_tool(request.query_params.get("q", "hi")))

        async def boom(request: Request) -> JSONResponse:
            self.sessions.append(chronicle.current_session())
            raise RuntimeError("the handler broke")

        async def unavailable(request: Request) -> PlainTextResponse:
            self.sessions.append(chronicle.current_session())
            return PlainTextResponse("try later", status_code=503)

        async def missing(request: Request) -> PlainTextResponse:
            self.sessions.append(chronicle.current_session())
            return PlainTextResponse("no such thing", status_code=404)

        def sync_handler(request: Request) -> JSONResponse:  # Starlette runs it in a thread
            self.sessions.append(chronicle.current_session())
            return JSONResponse(echo_tool("from a thread"))

        async def socket(websocket: WebSocket) -> None:
            await websocket.accept()
            self.sessions.append(chronicle.current_session())
            text = await websocket.receive_text()
            await websocket.send_json(echo_tool(text))
            await websocket.close()

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.lifespan_ran = chronicle.current_session() is None
            yield

        self.starlette = Starlette(
            routes=[
                Route("/ok", ok),
                Route("/boom", boom),
                Route("/unavailable", unavailable),
                Route("/missing", missing),
                Route("/sync", sync_handler),
                WebSocketRoute("/ws", socket),
            ],
            lifespan=lifespan,
        )
        self.starlette.add_middleware(ChronicleMiddleware, service=service)


def _span(recording: Any, session: chronicle.Session, envelopes: int) -> dict[str, Any]:
    recording.saved(session.trace_id, envelopes)
    trace = recording.control_plane.trace(session.trace_id)
    spans: list[dict[str, Any]] = [s for s in trace["spans"] if s["span_id"] == session.span_id]
    (span,) = spans
    return span


def test_a_request_is_one_span_with_its_boundaries(recording):
    app = App()
    with TestClient(app.starlette) as client:
        assert client.get("/ok", params={"q": "hello"}).json() == {"echo": "hello"}
        assert client.get("/sync").json() == {"echo": "from a thread"}
    assert app.lifespan_ran
    first, second = app.sessions
    assert first is not None and second is not None
    assert first.trace_id != second.trace_id  # no traceparent: each request starts a trace
    span = _span(recording, first, 1)
    assert span["service"] == "web-agent"
    assert span["status"] == "success"
    assert span.get("parent_envelope_id") is None
    (envelope,) = recording.control_plane.trace_envelopes(first.trace_id)
    assert envelope["span_id"] == first.span_id
    assert envelope["output"]["raw"] == {"echo": "hello"}
    assert recording.control_plane.trace(first.trace_id)["name"] == "GET /ok"
    (threaded,) = recording.saved(second.trace_id, 1)
    assert threaded["span_id"] == second.span_id


def test_an_inbound_traceparent_joins_the_trace_and_names_the_parent_envelope(recording):
    app = App()
    with TestClient(app.starlette) as client:
        client.get("/ok", headers={"traceparent": f"00-{TRACE}-{CALLER_SPAN}-01"})
        client.get(
            "/ok",
            headers={
                "traceparent": f"00-{TRACE}-{CALLER_SPAN}-01",
                "tracestate": f"vendor=x,chronicle={CALLER_ENVELOPE}",
            },
        )
        client.get("/ok", headers={"traceparent": "00-not-a-valid-header-01"})
    plain, with_state, malformed = app.sessions
    assert plain is not None and with_state is not None and malformed is not None
    assert plain.trace_id == with_state.trace_id == TRACE
    assert plain.parent_envelope_id == CALLER_SPAN
    assert with_state.parent_envelope_id == CALLER_ENVELOPE
    assert malformed.trace_id != TRACE and malformed.parent_envelope_id is None
    recording.saved(TRACE, 2)
    spans = {s["span_id"]: s for s in recording.control_plane.trace(TRACE)["spans"]}
    assert spans[with_state.span_id]["parent_envelope_id"] == CALLER_ENVELOPE


def test_extract_off_ignores_inbound_headers(recording):
    chronicle.configure(control_plane_url=recording.control_plane.url, extract=False)
    app = App()
    with TestClient(app.starlette) as client:
        client.get("/ok", headers={"traceparent": f"00-{TRACE}-{CALLER_SPAN}-01"})
    (session,) = app.sessions
    assert session is not None
    assert session.trace_id != TRACE
    assert session.parent_envelope_id is None


def test_a_handler_that_raises_closes_the_span_failure(recording):
    app = App()
    with TestClient(app.starlette, raise_server_exceptions=False) as client:
        assert client.get("/boom").status_code == 500
    (session,) = app.sessions
    assert session is not None
    assert chronicle.flush(10)
    assert _span(recording, session, 0)["status"] == "failure"


def test_a_5xx_answer_is_a_failure_and_a_4xx_is_not(recording):
    app = App()
    with TestClient(app.starlette) as client:
        assert client.get("/unavailable").status_code == 503
        assert client.get("/missing").status_code == 404
    unavailable, missing = app.sessions
    assert unavailable is not None and missing is not None
    assert _span(recording, unavailable, 0)["status"] == "failure"
    assert _span(recording, missing, 0)["status"] == "success"


def test_a_websocket_connection_is_one_span(recording):
    app = App(service=None)
    chronicle.configure(control_plane_url=recording.control_plane.url, service_name="socket-agent")
    with TestClient(app.starlette) as client, client.websocket_connect("/ws") as socket:
        socket.send_text("over the socket")
        assert socket.receive_json() == {"echo": "over the socket"}
    (session,) = app.sessions
    assert session is not None
    span = _span(recording, session, 1)
    assert span["service"] == "socket-agent"
    assert span["status"] == "success"
    assert recording.control_plane.trace(session.trace_id)["name"] == "WEBSOCKET /ws"
    (envelope,) = recording.control_plane.trace_envelopes(session.trace_id)
    assert envelope["span_id"] == session.span_id


def test_lifespan_and_other_scopes_pass_through():
    seen: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        assert chronicle.current_session() is None

    import asyncio

    async def nothing() -> dict[str, Any]:
        return {}

    async def ignore(message: Any) -> None:
        return None

    asyncio.run(ChronicleMiddleware(inner)({"type": "lifespan"}, nothing, ignore))
    assert seen == ["lifespan"]
    with pytest.raises(chronicle.ConfigurationError, match="service"):
        ChronicleMiddleware(inner, service="  ")


def test_it_nests_in_opentelemetrys_asgi_server_span(recording):
    otel_asgi = pytest.importorskip("opentelemetry.instrumentation.asgi")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=recording.control_plane.url, tracer_provider=provider)
    app = App()
    wrapped = otel_asgi.OpenTelemetryMiddleware(app.starlette, tracer_provider=provider)
    with TestClient(wrapped) as client:
        client.get(
            "/ok",
            headers={
                "traceparent": f"00-{TRACE}-{CALLER_SPAN}-01",
                "tracestate": f"chronicle={CALLER_ENVELOPE}",
            },
        )
    (session,) = app.sessions
    assert session is not None
    assert session.trace_id == TRACE
    assert session.parent_envelope_id == CALLER_ENVELOPE
    recording.saved(TRACE, 1)
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {int(TRACE, 16)}
    (server,) = [s for s in spans if s.kind.name == "SERVER"]
    (ours,) = [s for s in spans if s.context.span_id == int(session.span_id, 16)]
    assert server.parent is not None and server.parent.span_id == int(CALLER_SPAN, 16)
    assert ours.parent is not None and ours.parent.span_id == server.context.span_id
    (tool,) = [s for s in spans if s.name == "execute_tool echo_tool"]
    assert tool.parent is not None and tool.parent.span_id == ours.context.span_id


# ---- the request as its span's entry (record_request, record_body) ---------------------------


async def _echo_body(request: Request) -> Response:
    """Answers what it was sent: the body as JSON, with its length and the tool's echo."""
    body = await request.body()
    SESSIONS.append(chronicle.current_session())
    echo_tool(request.headers.get("content-type", "none"))
    return JSONResponse({"length": len(body), "text": body.decode("latin-1")[:40]})


async def _stream(request: Request) -> StreamingResponse:
    async def lines() -> AsyncIterator[str]:
        for n in range(3):
            yield f"data: {echo_tool(str(n))['echo']}\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream")


async def _image(request: Request) -> Response:
    return Response(b"\x89PNG" + bytes(range(256)), media_type="image/png")


def entry_app(**options: bool) -> ChronicleMiddleware:
    """The echo app behind the middleware with ``options``, bound to ``ENTRY_APP`` (a module
    global, so its import path is what the entry records)."""
    global ENTRY_APP
    SESSIONS.clear()
    routes = [
        Route("/echo", _echo_body, methods=["POST"]),
        Route("/stream", _stream),
        Route("/image", _image),
    ]
    ENTRY_APP = ChronicleMiddleware(Starlette(routes=routes), service="echo", **options)
    return ENTRY_APP


ENTRY_APP: ChronicleMiddleware | None = None
SESSIONS: list[chronicle.Session | None] = []
"""The request span of each request ``_echo_body`` answered."""


def test_record_body_records_the_request_and_its_response_as_the_spans_entry(recording):
    app = entry_app(record_body=True)
    with AppServer(app) as server:
        answer = httpx.post(
            f"{server.url}/echo?page=2",
            json={"ticket": "refund my order", "api_key": "sk-live-123456789012345678901234"},
            headers={
                "Authorization": "Bearer sk-secret-token",
                "Cookie": "s=1",
                "x-request-id": "r1",
            },
        )
    assert answer.status_code == 200
    sent_length = answer.json()["length"]
    assert sent_length > 40  # the app read the whole body, read ahead of it or not
    (session,) = SESSIONS
    assert session is not None
    entry, tool = recording.saved(session.trace_id, 2)
    assert (entry["name"], entry.get("parent_envelope_id")) == ("POST /echo", None)
    assert tool["name"] == "echo_tool" and tool["parent_envelope_id"] == entry["envelope_id"]
    assert entry["metadata"]["chronicle.entry"] == f"{__name__}:ENTRY_APP"  # as pytest named it
    request = entry["input"]["raw"]["request"]
    assert {k: request[k] for k in ("method", "scheme", "path", "query")} == {
        "method": "POST",
        "scheme": "http",
        "path": "/echo",
        "query": "page=2",
    }
    headers = request["headers"]
    assert headers["x-request-id"] == "r1" and headers["content-type"] == "application/json"
    for left_out in ("authorization", "cookie", "content-length"):
        assert left_out not in headers  # credentials never; the length is the body's
    assert request["body_format"] == "json"
    assert request["body"]["ticket"] == "refund my order"
    assert request["body"]["api_key"] != "sk-live-123456789012345678901234"  # redacted
    assert "sk-secret-token" not in json.dumps(entry)
    output = entry["output"]["raw"]
    assert output["status"] == 200 and output["body_format"] == "json"
    assert output["body"]["length"] == sent_length


def test_without_record_body_nothing_of_either_body_is_recorded(recording):
    secret_text = "the body of this request is never recorded"
    sessions = []
    for options in ({}, {"record_request": True}):
        with TestClient(entry_app(**options)) as client:
            echoed = client.post(
                "/echo", content=secret_text, headers={"content-type": "text/plain"}
            )
        assert echoed.json()["text"] == secret_text[:40]
        sessions += SESSIONS
    plain, requests_only = sessions
    assert plain is not None and requests_only is not None
    without = recording.saved(plain.trace_id, 1)
    with_request = recording.saved(requests_only.trace_id, 2)
    assert [e["name"] for e in without] == ["echo_tool"]  # the default: no entry call at all
    entry = with_request[0]
    assert entry["name"] == "POST /echo"
    request = entry["input"]["raw"]["request"]
    assert "body" not in request and "body_format" not in request
    assert request["headers"]["content-length"] == str(len(secret_text))  # it had a body
    assert "body" not in entry["output"]["raw"]
    assert secret_text not in json.dumps(with_request) and secret_text[:40] not in json.dumps(
        with_request
    )


@pytest.mark.parametrize(
    ("content", "content_type", "recorded"),
    [
        pytest.param(
            b"a=1&b=two&a=3",
            "application/x-www-form-urlencoded",
            {"body_format": "form", "body": {"a": ["1", "3"], "b": "two"}},
            id="form",
        ),
        pytest.param(
            "h\u00e9llo".encode("latin-1"),
            "text/plain; charset=latin-1",
            {"body_format": "text", "body": "h\u00e9llo"},
            id="text",
        ),
        pytest.param(
            b"\x89PNG...",
            "image/png",
            {"body_omitted": "a image/png body (JSON, form and text bodies are recorded)"},
            id="binary",
        ),
        pytest.param(
            b'{"big": "' + b"x" * 3000 + b'"}',
            "application/json",
            {"body_omitted": "larger than max_payload_bytes (2048 bytes)"},
            id="too-large",
        ),
    ],
)
def test_record_body_keeps_form_and_text_and_says_why_another_body_is_left_out(
    content, content_type, recorded
):
    app = entry_app(record_body=True)
    with capture(max_payload_bytes=2048) as sent:
        with TestClient(app) as client:
            answer = client.post("/echo", content=content, headers={"content-type": content_type})
    assert answer.json()["length"] == len(content)  # the app got the whole body regardless
    entry = next(e for e in sent.envelopes if e.name == "POST /echo")
    assert entry.input is not None
    request: Any = entry.input.raw["request"]
    assert {k: v for k, v in request.items() if k.startswith("body")} == recorded


def test_a_streamed_response_still_streams_and_its_text_is_the_entrys_result():
    app = entry_app(record_body=True)
    with capture() as sent:
        with TestClient(app) as client, client.stream("GET", "/stream") as answer:
            chunks = list(answer.iter_text())
    assert "".join(chunks) == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
    entry = next(e for e in sent.envelopes if e.name == "GET /stream")
    assert entry.output is not None
    result: Any = entry.output.raw
    assert result["body"] == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert result["body_format"] == "text"
    assert [e.name for e in sent.envelopes].count("echo_tool") == 3


def test_record_request_takes_true_or_false():
    with pytest.raises(chronicle.ConfigurationError, match="record_body"):
        ChronicleMiddleware(Starlette(), record_body="yes")  # type: ignore[arg-type]


def test_a_replay_that_serves_the_entry_from_its_recording_answers_the_recorded_response():
    app = entry_app(record_body=True)
    with capture() as sent:
        with TestClient(app) as client:
            recorded = client.post("/echo", json={"q": "once"})
    (session,) = SESSIONS
    assert session is not None
    envelopes = sent.span_envelopes(session.trace_id, session.span_id)
    SESSIONS.clear()
    with chronicle.replay(envelopes) as run:
        with TestClient(app) as client:
            replayed = client.post("/echo", json={"q": "once"})
    assert SESSIONS == []  # the app did not run: its answer came from the recording
    assert (replayed.status_code, replayed.json()) == (200, recorded.json())
    assert replayed.headers["content-type"] == "application/json"
    assert [(c.name, c.mode) for c in run.call_log()] == [("POST /echo", "stub")]


def test_a_body_sent_in_pieces_without_a_length_header_is_recorded_whole():
    import asyncio

    app = entry_app(record_body=True)
    pieces = [b'{"ticket": "refund', b' my order"}']
    answer: list[Any] = []

    async def receive() -> dict[str, Any]:  # as HTTP/2 or a chunked upload arrives
        if pieces:
            body = pieces.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pieces)}
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        answer.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/echo",
        "raw_path": b"/echo",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "http_version": "2",
        "scheme": "https",
        "server": ("127.0.0.1", 443),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
        "asgi": {"version": "3.0"},
    }
    with capture() as sent:
        asyncio.run(app(scope, receive, send))
    (body,) = [m for m in answer if m["type"] == "http.response.body"]
    assert json.loads(body["body"])["length"] == len(b'{"ticket": "refund my order"}')
    entry = next(e for e in sent.envelopes if e.name == "POST /echo")
    assert entry.input is not None
    request: Any = entry.input.raw["request"]
    assert request["body"] == {"ticket": "refund my order"}


def test_a_response_body_of_a_type_not_recorded_is_left_out_saying_so():
    app = entry_app(record_body=True)
    with capture() as sent:
        with TestClient(app) as client:
            answer = client.get("/image")
    assert answer.content.startswith(b"\x89PNG") and len(answer.content) == 260
    (entry,) = [e for e in sent.envelopes if e.name == "GET /image"]
    assert entry.output is not None
    result: Any = entry.output.raw
    assert result["status"] == 200 and "body" not in result
    assert result["body_omitted"] == "a image/png body (JSON, form and text bodies are recorded)"
