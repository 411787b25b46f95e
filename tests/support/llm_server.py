"""A local model server speaking the real OpenAI, Anthropic, Gemini and Bedrock wire formats.

``LlmServer`` listens on ``127.0.0.1`` on a free port, in a daemon thread, and answers:

- ``POST /v1/chat/completions``: OpenAI Chat Completions (``ChatCompletion``, or SSE chunks);
- ``POST /v1/responses``: the OpenAI Responses API (``Response``, or SSE events);
- ``POST /v1/messages``: Anthropic Messages (``anthropic.types.Message``, or SSE events);
- Azure OpenAI: ``POST /openai/deployments/{deployment}/chat/completions?api-version=...``,
  ``/openai/deployments/{deployment}/responses``, ``/openai/responses`` (where
  ``AzureOpenAI(azure_endpoint=..., api_version=...)`` sends Responses calls) and the ``/openai/v1``
  forms of both;
- Google Gemini (``google-genai``, LiteLLM's ``gemini/`` models):
  ``POST [/{v1,v1beta,v1alpha}]/models/{model}:generateContent`` (a ``GenerateContentResponse``)
  and ``:streamGenerateContent?alt=sse`` (SSE chunks);
- AWS Bedrock (``boto3`` ``bedrock-runtime``): ``POST /model/{modelId}/converse`` (Converse
  JSON), ``/model/{modelId}/converse-stream`` (the binary AWS event stream), and
  ``/model/{modelId}/invoke`` with an Anthropic Messages body (answered from the ``messages``
  queue, as Claude on Bedrock does), streamed by ``invoke-with-response-stream`` (Anthropic's
  events, each in a ``chunk`` event's ``bytes``). A failing event stream ends with a
  ``modelStreamErrorException`` (boto3 raises ``EventStreamError``).

The model named in the path (Gemini, Bedrock) is ``RecordedRequest.path_model``. The Stainless
SDKs and boto3 need ``max_retries=0`` / ``retries={"total_max_attempts": 1}`` so a scripted error
is raised at once; google-genai does not retry unless told to.

Replies are scripted per API with ``reply_with(...)`` and the builders of ``llm_replies.py``,
re-exported here (text, tool calls, usage details, refusals, provider errors); with nothing
queued the server answers with
``"echo: <last user message>"``. A ``stream: true`` request gets the reply as that API's SSE
stream; ``streamed(reply, deltas=..., fail_after=...)`` says into how many deltas each text is
split and whether the stream fails part way (an error event in the API's format, or a dropped
connection). Every request is kept in ``requests``. The real SDK clients parse
the replies into their own types; pass ``max_retries=0`` to them so a scripted error is raised at
once::

    with LlmServer() as server:
        server.reply_with(chat_text("hello", usage=chat_usage(12, 3, cached_tokens=8)))
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import json
import re
import socket
import socketserver
import struct
import sys
import threading
import time
from binascii import crc32
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.llm_replies import (
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_GEMINI_MODEL,
    DEFAULT_OPENAI_MODEL,
    Api,
    RecordedRequest,
    Reply,
    ToolCall,
    _new_id,
    chat_error,
    chat_refusal,
    chat_text,
    chat_tool_calls,
    chat_usage,
    converse_error,
    converse_text,
    converse_tool_use,
    converse_usage,
    gemini_blocked,
    gemini_error,
    gemini_function_calls,
    gemini_text,
    gemini_usage,
    messages_error,
    messages_refusal,
    messages_text,
    messages_tool_use,
    messages_usage,
    responses_error,
    responses_refusal,
    responses_text,
    responses_tool_calls,
    responses_usage,
    streamed,
    tool_call,
    without,
)

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_GEMINI_MODEL",
    "DELTAS_HEADER",
    "DEFAULT_OPENAI_MODEL",
    "LlmServer",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "chat_error",
    "chat_refusal",
    "chat_text",
    "chat_tool_calls",
    "chat_usage",
    "converse_error",
    "converse_text",
    "converse_tool_use",
    "converse_usage",
    "gemini_blocked",
    "gemini_error",
    "gemini_function_calls",
    "gemini_text",
    "gemini_usage",
    "messages_error",
    "messages_refusal",
    "messages_text",
    "messages_tool_use",
    "messages_usage",
    "responses_error",
    "responses_refusal",
    "responses_text",
    "responses_tool_calls",
    "responses_usage",
    "streamed",
    "tool_call",
    "without",
]

DELTAS_HEADER = "x-llmserver-deltas"
"""A request header that sets the number of deltas per text of its streamed reply (the
benchmark's long streams use it; ``streamed(reply, deltas=...)`` does the same per reply)."""
ECHO_PREFIX = "echo: "
"""The default reply is ``ECHO_PREFIX + <text of the last user message>``."""

_ROUTES: tuple[tuple[re.Pattern[str], Api], ...] = (
    # the version segment is optional: LiteLLM's Gemini route with an api_base leaves it out
    (re.compile(r"^(/v1(beta|alpha)?)?/models/(?P<model>[^/:]+):generateContent$"), "gemini"),
    (
        re.compile(
            r"^(/v1(beta|alpha)?)?/models/(?P<model>[^/:]+):(?P<stream>stream)GenerateContent$"
        ),
        "gemini",
    ),
    (re.compile(r"^/model/(?P<model>[^/]+)/converse$"), "converse"),
    (re.compile(r"^/model/(?P<model>[^/]+)/converse(?P<stream>-stream)$"), "converse"),
    (re.compile(r"^/model/(?P<model>[^/]+)/invoke$"), "messages"),
    (re.compile(r"^/model/(?P<model>[^/]+)/invoke(?P<stream>-with-response-stream)$"), "messages"),
    (re.compile(r"^/v1/chat/completions$"), "chat"),
    (re.compile(r"^/openai/v1/chat/completions$"), "chat"),
    (re.compile(r"^/openai/deployments/(?P<deployment>[^/]+)/chat/completions$"), "chat"),
    (re.compile(r"^/v1/responses$"), "responses"),
    (re.compile(r"^/openai/v1/responses$"), "responses"),
    (re.compile(r"^/openai/responses$"), "responses"),
    (re.compile(r"^/openai/deployments/(?P<deployment>[^/]+)/responses$"), "responses"),
    (re.compile(r"^/v1/messages$"), "messages"),
)


# ---- the server --------------------------------------------------------------------------


class LlmServer:
    """A scripted model server on ``127.0.0.1:<free port>``; see the module docstring.

    ``host`` picks another loopback address to listen on (``127.0.0.2``: a host a test can leave
    out of an allow-list). Thread-safe: requests are served concurrently and
    ``reply_with``/``requests`` may be used from any thread. Replies are taken first in, first
    out, per API.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._lock = threading.Lock()
        self._queues: dict[Api, deque[Reply]] = {
            "chat": deque(),
            "responses": deque(),
            "messages": deque(),
            "gemini": deque(),
            "converse": deque(),
        }
        self._requests: list[RecordedRequest] = []
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> LlmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> LlmServer:
        """Bind a free port and serve in a daemon thread (a no-op if already started)."""
        if self._server is None:
            self._server = _HttpServer(self, self.host)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"llm-server-{self._server.server_address[1]}",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, drop open connections and join the threads."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.drop_connections()
        server.server_close()
        if thread is not None:
            thread.join()

    # ---- addresses ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, ``http://HOST:PORT`` (``127.0.0.1`` unless another host was given)."""
        if self._server is None:
            raise RuntimeError("LlmServer is not started: call start() or use it in a with block")
        return f"http://{self.host}:{self._server.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for ``openai.OpenAI`` (``<url>/v1``)."""
        return f"{self.url}/v1"

    # The other SDKs take the base URL itself, each under its own name:
    anthropic_base_url = url
    """``base_url`` for ``anthropic.Anthropic`` (the SDK appends ``/v1/messages``)."""
    azure_endpoint = url
    """``azure_endpoint`` for ``openai.AzureOpenAI``."""
    gemini_base_url = url
    """``HttpOptions(base_url=...)`` for ``google.genai.Client`` (it appends the version)."""
    bedrock_endpoint_url = url
    """``endpoint_url`` for ``boto3.client("bedrock-runtime", ...)``."""

    # ---- scripting ---------------------------------------------------------------------

    def reply_with(self, *replies: Reply) -> None:
        """Queue ``replies``, each for its own ``api``, to be sent in order."""
        with self._lock:
            for reply in replies:
                self._queues[reply.api].append(reply)

    def pending(self, api: Api | None = None) -> int:
        """How many queued replies have not been sent (for ``api``, or for all)."""
        with self._lock:
            if api is not None:
                return len(self._queues[api])
            return sum(len(queue) for queue in self._queues.values())

    def reset(self) -> None:
        """Forget queued replies and received requests."""
        with self._lock:
            for queue in self._queues.values():
                queue.clear()
            self._requests.clear()

    # ---- what was received -------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many requests were received."""
        with self._lock:
            return len(self._requests)

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request (``IndexError`` if there is none)."""
        with self._lock:
            return self._requests[-1]

    # ---- used by the handler -----------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self, api: Api) -> Reply | None:
        with self._lock:
            queue = self._queues[api]
            return queue.popleft() if queue else None


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: LlmServer, host: str) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((host, 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (getfqdn), which can be slow offline.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client went away (reset, or closed mid-stream): not a server fault
        super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        """Unblock handlers waiting on idle keep-alive connections so they can finish."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``LlmServer.requests`` instead."""

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        split = urlsplit(self.path)
        raw = self._read_body()
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        api, named = _route(split.path)
        request = RecordedRequest(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            api=api,
            deployment=named.get("deployment"),
            path_model=unquote(named["model"]) if named.get("model") else None,
            path_stream=bool(named.get("stream")),
        )
        owner = self.server.owner
        owner._record(request)
        try:
            if api is None or self.command != "POST":
                self._send_json(404, _not_found(split.path, api), {})
            elif bad_json or not isinstance(body, dict):
                error = _bad_request(api, "the request body is not a JSON object")
                self._send_json(error.status, dict(error.body), {})
            else:
                self._answer(api, request, owner._next_reply(api))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _answer(self, api: Api, request: RecordedRequest, reply: Reply | None) -> None:
        if reply is None:
            reply = _echo_reply(api, request)
        if reply.delay > 0:
            time.sleep(reply.delay)
        headers = dict(reply.headers)
        id_header = {"messages": "request-id", "converse": "x-amzn-RequestId"}.get(
            api, "x-request-id"
        )
        headers.setdefault(id_header, _new_id("req_"))
        if reply.is_error:
            self._send_json(reply.status, dict(reply.body), headers)
            return
        body = _omitted(_finalize(api, copy.deepcopy(dict(reply.body)), request), reply.omit)
        if not request.stream:
            self._send_json(reply.status, body, headers)
            return
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        deltas = request.headers.get(DELTAS_HEADER)
        split = functools.partial(_pieces, count=int(deltas) if deltas else reply.deltas)
        if api == "converse" or request.path.endswith("-with-response-stream"):
            messages = (
                _converse_stream(body, split)
                if api == "converse"
                else _invoke_stream(_messages_stream(body, split))
            )
            if reply.fail_after is not None:
                messages = _failing_event_stream(messages, reply.fail_after)
            if api == "messages":
                headers["X-Amzn-Bedrock-Content-Type"] = "application/json"
            self._send_event_stream(messages, headers)
            return
        events = {
            "chat": lambda: _chat_stream(body, include_usage, split),
            "responses": lambda: _responses_stream(body, split),
            "messages": lambda: _messages_stream(body, split),
            "gemini": lambda: _gemini_stream(body, split),
        }[api]()
        if reply.fail_after is None:
            self._send_sse(events, headers)
        else:
            self._send_sse(_failing(api, events, reply.fail_after, reply.failure), headers)

    def _send_json(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_sse(self, events: Iterator[str | None], headers: Mapping[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        for event in events:
            if event is None:  # drop the connection mid-stream, without the last chunk
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_event_stream(self, messages: Iterator[bytes], headers: Mapping[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        for data in messages:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ---- helpers -----------------------------------------------------------------------------


def _route(path: str) -> tuple[Api | None, dict[str, str]]:
    """The API of ``path`` and the named parts of its pattern (deployment, model, stream)."""
    for pattern, api in _ROUTES:
        match = pattern.match(path)
        if match:
            return api, {k: v for k, v in match.groupdict().items() if v is not None}
    return None, {}


def _not_found(path: str, api: Api | None) -> dict[str, Any]:
    message = f"LlmServer has no route for {path}"
    if api == "messages":
        return {"type": "error", "error": {"type": "not_found_error", "message": message}}
    if api == "gemini":
        return dict(gemini_error(404, message).body)
    if api == "converse":
        return {"message": message}
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


def _bad_request(api: Api, message: str) -> Reply:
    if api == "messages":
        return messages_error(400, message)
    if api == "gemini":
        return gemini_error(400, message)
    if api == "converse":
        return converse_error(400, message)
    return replace(chat_error(400, message), api=api)


def _finalize(api: Api, body: dict[str, Any], request: RecordedRequest) -> dict[str, Any]:
    """Fill ``id``, ``model`` and the creation time left ``None`` by the builders."""
    if api == "gemini":
        if body.get("modelVersion") is None:
            body["modelVersion"] = request.path_model or DEFAULT_GEMINI_MODEL
        body["responseId"] = body.get("responseId") or _new_id("resp-")
        return body
    if api == "converse":
        return body  # a Converse response names no model and has no id of its own
    default_model = DEFAULT_ANTHROPIC_MODEL if api == "messages" else DEFAULT_OPENAI_MODEL
    if body.get("model") is None:
        body["model"] = request.model or request.deployment or default_model
    if api == "chat":
        body["id"] = body.get("id") or _new_id("chatcmpl-")
        if body.get("created") is None:
            body["created"] = int(time.time())
    elif api == "responses":
        body["id"] = body.get("id") or _new_id("resp_")
        if body.get("created_at") is None:
            body["created_at"] = int(time.time())
    else:
        body["id"] = body.get("id") or _new_id("msg_")
    return body


def _omitted(body: dict[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """``body`` (changed in place) without the fields at the dotted ``paths``."""
    for path in paths:
        *parents, last = path.split(".")
        node: Any = body
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return body


def _text_of(content: Any, part_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in part_types
        )
    return ""


def _last_user_text(api: Api, body: Mapping[str, Any]) -> str:
    if api in ("gemini", "converse"):
        turns: Any = body.get("contents" if api == "gemini" else "messages")
        for turn in reversed(turns if isinstance(turns, list) else []):
            if isinstance(turn, dict) and turn.get("role", "user") == "user":
                parts = turn.get("parts" if api == "gemini" else "content") or []
                return "".join(
                    str(part.get("text", "")) for part in parts if isinstance(part, dict)
                )
        return ""
    if api == "responses":
        items: Any = body.get("input")
        if isinstance(items, str):
            return items
        part_types: tuple[str, ...] = ("input_text", "text")
    else:
        items = body.get("messages")
        part_types = ("text",)
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return _text_of(item.get("content"), part_types)
    return ""


def _echo_reply(api: Api, request: RecordedRequest) -> Reply:
    text = ECHO_PREFIX + _last_user_text(api, request.body)
    if api == "chat":
        return chat_text(text)
    if api == "responses":
        return responses_text(text)
    if api == "gemini":
        return gemini_text(text)
    if api == "converse":
        return converse_text(text)
    return messages_text(text)


Split = Callable[[str], list[str]]


def _pieces(text: str, count: int = 2) -> list[str]:
    """``text`` in ``count`` deltas (fewer for a short text, none for ""), so clients accumulate."""
    count = max(1, min(count, len(text)))
    if not text:
        return []
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def _failing(api: Api, events: Iterator[str], after: int, failure: str) -> Iterator[str | None]:
    """``events`` cut after ``after`` of them, then the failure: an error event, or a drop."""
    for position, event in enumerate(events):
        if position == after:
            break
        yield event
    if failure == "disconnect":
        yield None
    elif api == "messages":
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        yield _sse(error, event="error")
    elif api == "gemini":
        yield _sse(gemini_error(500, "stream interrupted").body)
    else:
        yield _sse({"error": {"message": "stream interrupted", "type": "server_error"}})


def _sse(data: Mapping[str, Any], event: str | None = None) -> str:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {json.dumps(data)}\n\n"


def _chat_stream(body: Mapping[str, Any], include_usage: bool, split: Split) -> Iterator[str]:
    """``ChatCompletionChunk`` events for a ``ChatCompletion`` body, then ``[DONE]``."""
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body.get("created"),
        "model": body["model"],
        "system_fingerprint": body.get("system_fingerprint"),
    }
    for key in ("object", "created"):  # a server that leaves them out of its body does here too
        if key not in body:
            del base[key]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, index: int = 0) -> str:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        extra: dict[str, Any] = {"usage": None} if include_usage else {}
        return _sse({**base, "choices": [choice], **extra})

    for choice in body.get("choices", []):
        index = int(choice.get("index", 0))
        message = choice.get("message") or {}
        content, refusal = message.get("content"), message.get("refusal")
        first = {
            "role": "assistant",
            "content": "" if isinstance(content, str) else None,
            "refusal": "" if isinstance(refusal, str) else None,
        }
        yield chunk(first, index=index)
        for piece in split(content or ""):
            yield chunk({"content": piece}, index=index)
        for piece in split(refusal or ""):
            yield chunk({"refusal": piece}, index=index)
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            head = {
                "index": position,
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": ""},
            }
            yield chunk({"tool_calls": [head]}, index=index)
            for piece in split(function.get("arguments") or ""):
                yield chunk(
                    {"tool_calls": [{"index": position, "function": {"arguments": piece}}]},
                    index=index,
                )
        yield chunk({}, finish_reason=choice.get("finish_reason"), index=index)
    if include_usage:
        yield _sse({**base, "choices": [], "usage": body.get("usage")})
    yield "data: [DONE]\n\n"


def _responses_stream(body: Mapping[str, Any], split: Split) -> Iterator[str]:
    """The Responses API event sequence for a ``Response`` body, ending ``response.completed``."""
    sequence = 0

    def event(kind: str, **fields: Any) -> str:
        nonlocal sequence
        data = {"type": kind, "sequence_number": sequence, **fields}
        sequence += 1
        return _sse(data, event=kind)

    start = {**body, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for out_index, item in enumerate(body.get("output", [])):
        item_id = item.get("id")
        if item.get("type") == "message":
            yield event(
                "response.output_item.added",
                output_index=out_index,
                item={**item, "status": "in_progress", "content": []},
            )
            for c_index, part in enumerate(item.get("content", [])):
                where = {"item_id": item_id, "output_index": out_index, "content_index": c_index}
                if part.get("type") == "output_text":
                    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    yield event("response.content_part.added", **where, part=empty)
                    for piece in split(part.get("text", "")):
                        yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
                    yield event(
                        "response.output_text.done", **where, text=part.get("text", ""), logprobs=[]
                    )
                elif part.get("type") == "refusal":
                    empty = {"type": "refusal", "refusal": ""}
                    yield event("response.content_part.added", **where, part=empty)
                    for piece in split(part.get("refusal", "")):
                        yield event("response.refusal.delta", **where, delta=piece)
                    yield event("response.refusal.done", **where, refusal=part.get("refusal", ""))
                else:
                    yield event("response.content_part.added", **where, part=part)
                yield event("response.content_part.done", **where, part=part)
        elif item.get("type") == "function_call":
            yield event(
                "response.output_item.added",
                output_index=out_index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            where = {"item_id": item_id, "output_index": out_index}
            for piece in split(item.get("arguments", "")):
                yield event("response.function_call_arguments.delta", **where, delta=piece)
            yield event(
                "response.function_call_arguments.done",
                **where,
                arguments=item.get("arguments", ""),
            )
        else:
            yield event("response.output_item.added", output_index=out_index, item=item)
        yield event("response.output_item.done", output_index=out_index, item=item)
    yield event("response.completed", response=dict(body))


def _messages_stream(body: Mapping[str, Any], split: Split) -> Iterator[str]:
    """Anthropic's ``message_start`` ... ``message_stop`` events for a ``Message`` body."""
    usage = dict(body.get("usage") or {})
    start_usage = {**usage, "output_tokens": min(1, int(usage.get("output_tokens", 0)))}
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    start.pop("stop_details", None)
    yield _sse({"type": "message_start", "message": start}, event="message_start")
    yield _sse({"type": "ping"}, event="ping")
    for index, block in enumerate(body.get("content", [])):
        kind = block.get("type")
        if kind == "text":
            opened = {**block, "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in split(block.get("text", ""))]
        elif kind == "tool_use":
            opened = {**block, "input": {}}
            arguments = json.dumps(block.get("input", {}))
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in split(arguments)]
        else:
            opened, deltas = dict(block), []
        yield _sse(
            {"type": "content_block_start", "index": index, "content_block": opened},
            event="content_block_start",
        )
        for delta in deltas:
            yield _sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                event="content_block_delta",
            )
        yield _sse({"type": "content_block_stop", "index": index}, event="content_block_stop")
    message_delta: dict[str, Any] = {
        "stop_reason": body.get("stop_reason"),
        "stop_sequence": body.get("stop_sequence"),
    }
    if body.get("stop_details") is not None:
        message_delta["stop_details"] = body["stop_details"]
    yield _sse(
        {"type": "message_delta", "delta": message_delta, "usage": usage}, event="message_delta"
    )
    yield _sse({"type": "message_stop"}, event="message_stop")


def _gemini_stream(body: Mapping[str, Any], split: Split) -> Iterator[str]:
    """``GenerateContentResponse`` chunks (``alt=sse``) for a body: a text part's text in
    pieces, other parts whole, the finish reason and usage on the last chunk."""
    base = {"modelVersion": body.get("modelVersion"), "responseId": body.get("responseId")}
    if not body.get("candidates"):
        yield _sse(dict(body))
        return
    candidate = body["candidates"][0]
    pieces: list[dict[str, Any]] = []
    for part in (candidate.get("content") or {}).get("parts", []):
        if "text" in part and set(part) <= {"text", "thought"}:
            pieces.extend({**part, "text": piece} for piece in split(part["text"]) or [""])
        else:
            pieces.append(part)
    for index, part in enumerate(pieces):
        chunk: dict[str, Any] = {
            "content": {"parts": [part], "role": "model"},
            "index": candidate.get("index", 0),
        }
        last = index == len(pieces) - 1
        if last:
            chunk["finishReason"] = candidate.get("finishReason")
        data = {"candidates": [chunk], **base}
        if last:
            data["usageMetadata"] = body.get("usageMetadata")
        yield _sse(data)


def _event_message(
    event_type: str, payload: Mapping[str, Any], message_type: str = "event"
) -> bytes:
    """One AWS event-stream message: prelude, string headers, JSON payload, CRC32 checksums."""
    headers = b""
    for name, value in (
        (":event-type" if message_type == "event" else ":exception-type", event_type),
        (":content-type", "application/json"),
        (":message-type", message_type),
    ):
        encoded = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07"
        headers += struct.pack(">H", len(encoded)) + encoded
    data = json.dumps(payload).encode()
    total = 12 + len(headers) + len(data) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + data
    return message + struct.pack(">I", crc32(message) & 0xFFFFFFFF)


def _converse_stream(body: Mapping[str, Any], split: Split) -> Iterator[bytes]:
    """ConverseStream events for a Converse body: messageStart, each block's start (tool use),
    deltas and stop, messageStop, metadata."""
    message = (body.get("output") or {}).get("message") or {}
    yield _event_message("messageStart", {"role": message.get("role", "assistant")})
    for index, block in enumerate(message.get("content", [])):
        where = {"contentBlockIndex": index}
        if "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use.get("toolUseId"), "name": use.get("name")}}
            yield _event_message("contentBlockStart", {**where, "start": start})
            for piece in split(json.dumps(use.get("input", {}))):
                delta = {"toolUse": {"input": piece}}
                yield _event_message("contentBlockDelta", {**where, "delta": delta})
        elif "reasoningContent" in block:
            thought = block["reasoningContent"].get("reasoningText") or {}
            for piece in split(thought.get("text", "")):
                delta = {"reasoningContent": {"text": piece}}
                yield _event_message("contentBlockDelta", {**where, "delta": delta})
            if thought.get("signature") is not None:
                delta = {"reasoningContent": {"signature": thought["signature"]}}
                yield _event_message("contentBlockDelta", {**where, "delta": delta})
        else:
            for piece in split(str(block.get("text", ""))):
                yield _event_message("contentBlockDelta", {**where, "delta": {"text": piece}})
        yield _event_message("contentBlockStop", where)
    yield _event_message("messageStop", {"stopReason": body.get("stopReason")})
    metadata = {"usage": body.get("usage"), "metrics": body.get("metrics", {"latencyMs": 1})}
    yield _event_message("metadata", metadata)


def _invoke_stream(events: Iterator[str]) -> Iterator[bytes]:
    """Anthropic's stream events as Bedrock sends them: each one's JSON in a ``chunk`` event's
    ``bytes`` (no pings; ``message_stop`` carries Bedrock's invocation metrics)."""
    for event in events:
        data = json.loads(event.rpartition("data: ")[2])
        if data.get("type") == "ping":
            continue
        if data.get("type") == "message_stop":
            metrics = {"inputTokenCount": 10, "outputTokenCount": 5, "invocationLatency": 1}
            data["amazon-bedrock-invocationMetrics"] = metrics
        encoded = base64.b64encode(json.dumps(data).encode()).decode()
        yield _event_message("chunk", {"bytes": encoded})


def _failing_event_stream(messages: Iterator[bytes], after: int) -> Iterator[bytes]:
    """``messages`` cut after ``after`` of them, then a ``modelStreamErrorException``."""
    for position, message in enumerate(messages):
        if position == after:
            break
        yield message
    error = {"message": "stream interrupted"}
    yield _event_message("modelStreamErrorException", error, message_type="exception")
