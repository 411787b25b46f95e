"""What a stubbed ``with_raw_response.create(...)`` call returns during a replay.

The SDKs give two shapes of raw response, and a replay gives back the one the client's SDK
gives, with the same attributes and methods:

- ``RecordedRawResponse``: the openai SDK's ``LegacyAPIResponse`` (sync and async clients alike):
  ``parse()``, and ``text`` and ``content`` as properties.
- ``RecordedAPIResponse`` and ``AsyncRecordedAPIResponse``: the anthropic SDK's ``APIResponse``
  and ``AsyncAPIResponse``: ``parse()``, ``read()``, ``text()``, ``json()``, ``close()`` and the
  ``iter_*`` methods (awaited on the async one).

Each has an ``http_response``: a response of the SDK's own HTTP library (``httpx``, or its
successor ``httpx2``) with status 200, a ``content-type`` header and, as its body, the recorded
response as JSON (the fields the server sent, by their wire names); its ``request`` is a
``POST`` to the endpoint under the client's base URL. ``headers``, ``status_code``, ``url``,
``method``, ``http_request``, ``http_version``, ``elapsed`` (zero: nothing was sent),
``is_closed`` and ``retries_taken`` read from it as the SDK's do. The live response's own headers
(request id, rate limits) were not recorded, so ``request_id`` is ``None``. A raw response on a
stream (``stream=True``) has an empty ``text/event-stream`` body; ``parse()`` gives the replayed
stream.
"""

from __future__ import annotations

import datetime
import json
import sys
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, JsonValue

from chronicle.integrations.clients.streams import sent_fields
from chronicle.recording.capture import json_form
from chronicle.replay.streams import AsyncReplayedStream, ReplayedStream

_PLACEHOLDER_URL = "http://replayed.invalid/"


@dataclass(frozen=True)
class RawShape:
    """How one wrapped method's raw responses look: the SDK's style (``legacy``: openai's
    ``LegacyAPIResponse``; ``api``: anthropic's ``APIResponse``), whether its client is async,
    the SDK's HTTP library and the URL its requests go to."""

    style: str
    is_async: bool
    http: Any
    url: str

    def response(self, parsed: object) -> object:
        """What a stubbed raw-response call returns for the replayed ``parsed`` result."""
        http_response = _http_response(self.http, self.url, parsed)
        if self.style == "legacy":
            return RecordedRawResponse(parsed, http_response)
        if self.is_async:
            return AsyncRecordedAPIResponse(parsed, http_response)
        return RecordedAPIResponse(parsed, http_response)


def raw_shape(owner: object, path: str | None, is_async: bool) -> RawShape:
    """The ``RawShape`` of ``owner``'s methods (an SDK resource: ``client.chat.completions``),
    whose endpoint is ``path`` under the client's base URL (``None``: a placeholder URL).

    The style is the one the resource's module builds its raw responses with (a module that
    imports the SDK's ``_legacy_response`` builds ``LegacyAPIResponse``); the HTTP library is
    the SDK's own."""
    module = sys.modules.get(type(owner).__module__)
    namespace = vars(module) if module is not None else {}
    style = "legacy" if "_legacy_response" in namespace else "api"
    root = type(owner).__module__.partition(".")[0]
    http: Any = httpx
    for name in ("_response", "_legacy_response", "_base_client"):
        sdk_module = vars(sys.modules.get(f"{root}.{name}") or types.ModuleType(name))
        found = sdk_module.get("httpx2") or sdk_module.get("httpx")
        if isinstance(found, types.ModuleType):
            http = found
            break
    url = _PLACEHOLDER_URL
    base_url = getattr(getattr(owner, "_client", None), "base_url", None)
    if base_url is not None and path is not None:
        url = f"{str(base_url).rstrip('/')}/{path}"
    return RawShape(style, is_async, http, url)


def _body(parsed: object) -> JsonValue:
    """The recorded result as the JSON body the server sent."""
    try:
        sent = sent_fields(parsed)
    except Exception:  # a value JSON refuses: the capture's JSON form
        sent = None
    if sent is not None:
        return sent
    return json_form(parsed).value


def _http_response(http: Any, url: str, parsed: object) -> Any:
    request = http.Request("POST", url)
    if isinstance(parsed, (ReplayedStream, AsyncReplayedStream)):
        headers = {"content-type": "text/event-stream"}
        response = http.Response(200, headers=headers, content=b"", request=request)
    else:
        content = json.dumps(_body(parsed)).encode()
        headers = {"content-type": "application/json"}
        response = http.Response(200, headers=headers, content=content, request=request)
    response.elapsed = datetime.timedelta(0)
    return response


class _Replayed:
    """What both shapes read from their ``http_response``."""

    retries_taken = 0

    def __init__(self, parsed: object, http_response: Any) -> None:
        self._parsed = parsed
        self.http_response = http_response

    @property
    def request_id(self) -> str | None:
        """``None``: the live response's headers were not recorded."""
        return None

    @property
    def headers(self) -> Any:
        """The replayed response's headers (``content-type`` and ``content-length``)."""
        return self.http_response.headers

    @property
    def http_request(self) -> Any:
        """The replayed request: ``POST`` to the endpoint under the client's base URL."""
        return self.http_response.request

    @property
    def status_code(self) -> int:
        """200: the call was recorded as a success."""
        status: int = self.http_response.status_code
        return status

    @property
    def url(self) -> Any:
        """The replayed request's URL."""
        return self.http_response.url

    @property
    def method(self) -> str:
        """``POST``."""
        method: str = self.http_request.method
        return method

    @property
    def http_version(self) -> str:
        """The replayed response's HTTP version."""
        version: str = self.http_response.http_version
        return version

    @property
    def elapsed(self) -> datetime.timedelta:
        """Zero: nothing was sent."""
        elapsed: datetime.timedelta = self.http_response.elapsed
        return elapsed

    @property
    def is_closed(self) -> bool:
        """The body is all there: closed, as a read raw response is."""
        closed: bool = self.http_response.is_closed
        return closed

    def _parse(self, to: object) -> Any:
        """``parse(to=...)`` as the SDKs do it: the recorded object, else the body as ``to``
        (a pydantic model, ``dict``/``list``/``object``, ``str``, ``bytes``, the HTTP
        library's ``Response``)."""
        if to is None:
            return self._parsed
        if isinstance(to, type) and issubclass(to, BaseModel):
            return to.model_validate(self.http_response.json())
        if to in (dict, list, object):
            return self.http_response.json()
        if to is str:
            return self.http_response.text
        if to is bytes:
            return self.http_response.content
        if isinstance(to, type) and isinstance(self.http_response, to):
            return self.http_response
        return self._parsed

    def __repr__(self) -> str:
        return f"<{type(self).__name__} [200] of {type(self._parsed).__name__} (replayed)>"


class RecordedRawResponse(_Replayed):
    """A replayed openai ``LegacyAPIResponse``: ``parse()`` gives the recorded SDK object
    (``parse(to=...)`` the body as that type); ``text`` and ``content`` are the body."""

    def parse(self, *, to: type[Any] | None = None) -> Any:
        """The recorded SDK object (the replayed stream for ``stream=True``); with ``to``,
        the body as that type."""
        return self._parse(to)

    @property
    def text(self) -> str:
        """The body: the recorded response as JSON text."""
        text: str = self.http_response.text
        return text

    @property
    def content(self) -> bytes:
        """The body: the recorded response as UTF-8 JSON."""
        content: bytes = self.http_response.content
        return content


class RecordedAPIResponse(_Replayed):
    """A replayed anthropic ``APIResponse``."""

    @property
    def workspace_id(self) -> str | None:
        """``None``: the live response's headers were not recorded."""
        return None

    def parse(self, *, to: type[Any] | None = None) -> Any:
        """The recorded SDK object (the replayed stream for ``stream=True``); with ``to``,
        the body as that type."""
        return self._parse(to)

    def read(self) -> bytes:
        """The body: the recorded response as UTF-8 JSON."""
        content: bytes = self.http_response.content
        return content

    def text(self) -> str:
        """The body as text."""
        text: str = self.http_response.text
        return text

    def json(self) -> object:
        """The body as JSON."""
        return self.http_response.json()

    def close(self) -> None:
        """Nothing to release: no request was sent."""
        self.http_response.close()

    def iter_bytes(self, chunk_size: int | None = None) -> Iterator[bytes]:
        """The body in pieces of ``chunk_size`` bytes."""
        yield from self.http_response.iter_bytes(chunk_size)

    def iter_text(self, chunk_size: int | None = None) -> Iterator[str]:
        """The body's text in pieces."""
        yield from self.http_response.iter_text(chunk_size)

    def iter_lines(self) -> Iterator[str]:
        """The body's text, line by line."""
        yield from self.http_response.iter_lines()


class AsyncRecordedAPIResponse(_Replayed):
    """A replayed anthropic ``AsyncAPIResponse``: its methods are awaited."""

    @property
    def workspace_id(self) -> str | None:
        """``None``: the live response's headers were not recorded."""
        return None

    async def parse(self, *, to: type[Any] | None = None) -> Any:
        """The recorded SDK object (the replayed stream for ``stream=True``); with ``to``,
        the body as that type."""
        return self._parse(to)

    async def read(self) -> bytes:
        """The body: the recorded response as UTF-8 JSON."""
        content: bytes = self.http_response.content
        return content

    async def text(self) -> str:
        """The body as text."""
        text: str = self.http_response.text
        return text

    async def json(self) -> object:
        """The body as JSON."""
        return self.http_response.json()

    async def close(self) -> None:
        """Nothing to release: no request was sent."""
        self.http_response.close()

    async def iter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        """The body in pieces of ``chunk_size`` bytes."""
        for chunk in self.http_response.iter_bytes(chunk_size):
            yield chunk

    async def iter_text(self, chunk_size: int | None = None) -> AsyncIterator[str]:
        """The body's text in pieces."""
        for chunk in self.http_response.iter_text(chunk_size):
            yield chunk

    async def iter_lines(self) -> AsyncIterator[str]:
        """The body's text, line by line."""
        for line in self.http_response.iter_lines():
            yield line
