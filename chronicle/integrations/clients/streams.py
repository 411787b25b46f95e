"""Streamed calls of wrapped model clients: how each SDK form is recorded and replayed.

``chronicle.wrap`` (``integrations/clients/``) gives every wrapped method a ``StreamFormat``
built here, which plugs the provider's stream knowledge (``chronicle.llm``: the assembler, the
rechunker) and the SDK's chunk and response types into the one stream hand-off of
``recording/stream.py``. One streamed call is one ``llm`` envelope, whatever the form:

- ``create(..., stream=True)`` (and LiteLLM's ``completion``/``acompletion``): the SDK's
  ``Stream``/``AsyncStream`` is handed back wrapped; it is recorded when it ends.
- The SDKs' ``.stream(...)`` helpers. OpenAI's call ``create(stream=True)`` themselves, so they
  are recorded through it. Anthropic's ``messages.stream(...)`` sends its request itself:
  ``message_stream_method`` swaps the request inside the ``MessageStreamManager`` it returns for
  the recorded call (a private attribute of the manager; if a future SDK renames it, the call
  passes unrecorded and a warning says so once).
- ``with_streaming_response.create(...)``: the response is handed back wrapped; the call ends
  when its body is parsed (``parse()``, ``json()``, ``read()``, ``text()``: the parsed body is
  recorded, or, for ``stream=True``, the stream ``parse()`` returns) or when it is closed
  unread (recorded incomplete, with no output). Bytes read with ``iter_bytes``/``iter_lines``
  are not seen.
- ``with_raw_response.create(..., stream=True)``: the same, through ``parse()``.
- Methods that always stream: Gemini's ``generate_content_stream`` (a generator, or for ``aio``
  an awaitable of an async generator) is handed back wrapped; boto3's ``converse_stream`` and
  ``invoke_model_with_response_stream`` return a dict whose ``stream``/``body`` holds an
  ``EventStream``: the caller gets a copy of the dict with that value wrapped.

Replay: a stubbed streamed call returns a ``ReplayedStream``/``AsyncReplayedStream`` of the
SDK's own chunk or event types, so ``for``, ``async for``, the helpers' ``text_stream``,
``get_final_message()`` and ``get_final_completion()`` work unchanged, with no request (for
boto3, inside the response dict). A stubbed ``with_streaming_response`` call returns a
``RecordedStreamingResponse`` (``AsyncRecorded...`` for an async client).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import inspect
import json
import logging
import sys
import typing
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, JsonValue, ValidationError
from pydantic_core import ErrorDetails

from chronicle.recording.stream import (
    Assembler,
    Flavor,
    StreamFormat,
    StreamingCall,
    hand_off_iterator,
)
from chronicle.replay.recorded import restore_plain
from chronicle.replay.streams import AsyncReplayedStream, ReplayedStream

logger = logging.getLogger("chronicle")

RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"
"""The header the OpenAI and Anthropic SDKs set on ``with_raw_response``/``with_streaming_response``
calls (``"true"`` and ``"stream"``)."""


def raw_flag(kwargs: Mapping[str, object]) -> object:
    """The raw-response header of a call's ``extra_headers`` (``"true"``, ``"stream"``), if any."""
    headers = kwargs.get("extra_headers")
    if not isinstance(headers, Mapping) or not headers:
        return None
    flag = headers.get(RAW_RESPONSE_HEADER)
    return flag if flag is not None else headers.get(RAW_RESPONSE_HEADER.lower())


def asks_for_stream(arguments: Mapping[str, object]) -> bool:
    """Whether a call's arguments ask for a stream (the SDKs' ``NOT_GIVEN``/``omit`` are falsy)."""
    return bool(arguments.get("stream"))


def _always_streams(arguments: Mapping[str, object]) -> bool:
    return True


def sent_fields(chunk: object) -> JsonValue | None:
    """An SDK chunk's or response's JSON: the fields the server sent, by their wire names
    (``async``, not ``async_``), its defaults left out; ``None`` if it is not a pydantic model.

    An SDK model rebuilt from it (``model_restorer``) has exactly those fields set, as the live
    one had: the SDKs' stream accumulators read a chunk's set fields only (a ``type: null`` would
    override the tool call's type), and the OpenAI Agents SDK sends a response's output items
    back with ``model_dump(exclude_unset=True)``, so a field set to ``None`` on replay would be
    sent where the live run sent nothing. The model's own serializer is called directly: this
    runs once per chunk. Raises what pydantic's serializer raises (a value JSON refuses).
    """
    if isinstance(chunk, BaseModel):
        value: JsonValue = type(chunk).__pydantic_serializer__.to_python(
            chunk, mode="json", exclude_unset=True, by_alias=True, warnings=False
        )
        return value
    return None


# ---- rebuilding SDK objects -------------------------------------------------------------------


def model_restorer(
    model: type[BaseModel] | None, *, strict: bool = False
) -> Callable[[JsonValue], object]:
    """Rebuild an SDK model from recorded JSON as its SDK builds it from the wire, never stricter.

    A recording that validates as ``model`` is validated (the fast path, and what the SDK gives
    for such a body). One that does not is built the SDK's own lenient way (see
    ``sdk_construct``): what a server sent and the live SDK accepted (an OpenAI-compatible
    server's completion without ``created``, a usage without a detail the type requires) replays
    as the SDK type the caller got live. ``strict``: the client validates responses
    (``_strict_response_validation``), so a recording that does not validate is refused, as the
    live SDK would have refused it. Raises ``ValueError`` for what is not rebuildable (a
    recording that is not a JSON object, or has a text or number where the type has an object or
    an array; a strict client's invalid recording): a half-built model would fail later, in the
    user's code, far from the recording.
    """

    def restore(raw: JsonValue) -> object:
        if model is None:
            return restore_plain(raw)
        if not isinstance(raw, dict):
            raise ValueError(f"a {model.__name__} was recorded as {type(raw).__name__}")
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            errors = exc.errors()
            misshapen = [e for e in errors if _misshapen(e)]
            built = None if strict or misshapen else sdk_construct(model, raw)
            if built is not None:
                return built
            first = (misshapen or errors)[0]
            raise ValueError(
                f"it is not a valid {model.__name__} ({first['msg']} at {list(first['loc'])})"
            ) from None

    return restore


_CONTAINER_ERRORS = frozenset(
    {"model_type", "model_attributes_type", "dict_type", "list_type", "tuple_type"}
)
"""pydantic's errors for a value where the type has an object or an array."""


def _misshapen(error: ErrorDetails) -> bool:
    """A text, number or boolean recorded where the type has an object or an array (a hand-edited
    recording, ``"choices": "..."``): the SDK would build it, and the caller's code would fail far
    from the recording on the first attribute it reads, so it is refused instead. A missing
    field, a ``null``, an unknown value or tag is not this: those replay as the SDK built them."""
    value = error.get("input")
    return error["type"] in _CONTAINER_ERRORS and isinstance(value, (str, int, float, bool))


def sdk_construct(model: type[BaseModel], raw: dict[str, JsonValue]) -> BaseModel | None:
    """``raw`` built as ``model`` by the model's SDK without validation, as the SDK builds a
    response from the wire; ``None`` when the SDK has no such construction (or it fails).

    - The OpenAI and Anthropic SDKs (``<sdk>._models.construct_type``, what their clients use
      unless ``_strict_response_validation`` is set): fields missing or of another type are kept
      as sent, nested models built the same way.
    - google-genai (``BaseModel._from_response``): fields this SDK version does not know (a
      recording made with a newer one) are dropped, then the rest is validated.
    """
    root = model.__module__.partition(".")[0]
    construct = getattr(sys.modules.get(f"{root}._models"), "construct_type", None)
    try:
        if callable(construct):
            built = construct(type_=model, value=raw)
            return built if isinstance(built, model) else None
        from_response = getattr(model, "_from_response", None)
        if callable(from_response) and root == "google":
            # It removes unknown fields in place: give it a copy of the recording.
            built = from_response(response=copy.deepcopy(raw), kwargs={})
            return built if isinstance(built, model) else None
    except Exception:
        logger.debug("the SDK could not build a %s", model.__name__, exc_info=True)
    return None


def lenient(restore: Callable[[JsonValue], object]) -> Callable[[JsonValue], object]:
    """``restore``, or the plain recorded JSON when it does not validate.

    For what hooks and ``captured_result`` see of a stream that stopped early: its assembled
    response lacks what only the end brings (a finish reason, say).
    """

    def rebuild(raw: JsonValue) -> object:
        try:
            return restore(raw)
        except ValueError:
            return restore_plain(raw)

    return rebuild


def union_restorer(union: object, *, strict: bool = False) -> Callable[[JsonValue], object]:
    """Rebuild one of a union of SDK event models (tagged by ``type``) from recorded JSON.

    The member is found by its ``type`` literal (a lookup, not a trial of each member) and
    rebuilt by ``model_restorer`` (``strict`` as there), as the SDKs build a tagged union's
    member; an unknown ``type`` comes back as plain recorded JSON.
    """
    members: dict[str, Callable[[JsonValue], object]] = {}
    for member in _union_members(union):
        field = member.model_fields.get("type")
        for tag in typing.get_args(field.annotation) if field is not None else ():
            if isinstance(tag, str):
                members[tag] = model_restorer(member, strict=strict)

    def restore(raw: JsonValue) -> object:
        tag = raw.get("type") if isinstance(raw, dict) else None
        rebuild = members.get(tag) if isinstance(tag, str) else None
        return rebuild(raw) if rebuild is not None else restore_plain(raw)

    return restore


def _union_members(union: object) -> list[type[BaseModel]]:
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return [
        member
        for member in typing.get_args(union)
        if isinstance(member, type) and issubclass(member, BaseModel)
    ]


# ---- formats ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamTypes:
    """What one SDK method streams: its assembler, chunk type, response type and rechunker.

    ``item_json`` is a live chunk's recorded JSON (``None``: walked like any value).
    ``container`` names the key of the response dict that holds the stream (boto3's
    ``converse_stream`` returns ``{"stream": EventStream, ...}``); ``None``: the response is the
    stream. A replay returns ``replay_fields`` beside the replayed stream in that dict.
    """

    assembler: Callable[[int], Assembler]
    chunk: Callable[[JsonValue], object]
    response: Callable[[JsonValue], object]
    rechunk: Callable[[JsonValue, Mapping[str, object]], list[JsonValue] | None]
    item_json: Callable[[object], JsonValue | None] | None = sent_fields
    container: str | None = None
    replay_fields: Mapping[str, JsonValue] = field(default_factory=dict)


def client_format(types: StreamTypes, flavor: Flavor, *, helper: bool = False) -> StreamFormat:
    """The ``StreamFormat`` of a wrapped SDK method (``helper``: a method that always streams,
    such as a ``.stream()`` helper returning the raw stream from its recorded body, Gemini's
    ``generate_content_stream`` or boto3's ``converse_stream``)."""
    hand_off: Callable[[Flavor, object, StreamingCall], object] = (
        _hand_off_helper if helper else _hand_off_client
    )
    replay: Callable[[Iterator[object]], object] = (
        AsyncReplayedStream if flavor == "async" else ReplayedStream
    )
    if helper and types.container is not None:
        hand_off = functools.partial(_hand_off_container, types.container)
        replay = functools.partial(_replay_container, types.container, types.replay_fields, flavor)
    return StreamFormat(
        hand_off=functools.partial(hand_off, flavor),
        assembler=types.assembler,
        replay=replay,
        keeps_items=True,
        assembled=lenient(types.response),
        requested=_always_streams if helper else asks_for_stream,
        item_json=types.item_json,
        restore_item=types.chunk,
        rechunk=types.rechunk,
    )


def _hand_off_client(flavor: Flavor, result: object, call: StreamingCall) -> object:
    kwargs = call.kwargs
    flag = raw_flag(kwargs)
    if flag is None:
        return hand_off_iterator(result, call, flavor) if kwargs.get("stream") else None
    if flag == "stream":
        if flavor == "async":
            return AsyncLateResponse(result, call, flavor)
        return LateResponse(result, call, flavor)
    if kwargs.get("stream"):  # with_raw_response on a stream: its parse() gives the stream
        return LateResponse(result, call, flavor)
    return None


def _hand_off_helper(flavor: Flavor, result: object, call: StreamingCall) -> object:
    return hand_off_iterator(result, call, flavor)


def _hand_off_container(key: str, flavor: Flavor, result: object, call: StreamingCall) -> object:
    """A copy of the response dict whose ``key`` holds the stream, recorded (boto3's)."""
    if not isinstance(result, Mapping) or key not in result:
        return None
    stream = result[key]
    if not hasattr(type(stream), "__next__") and hasattr(type(stream), "__iter__"):
        stream = IteratedStream(stream)
    handed = hand_off_iterator(stream, call, flavor)
    if handed is None:
        return None
    return {**result, key: handed}


def _replay_container(
    key: str, fields: Mapping[str, JsonValue], flavor: Flavor, items: Iterator[object]
) -> object:
    stream = AsyncReplayedStream(items) if flavor == "async" else ReplayedStream(items)
    return {**copy.deepcopy(dict(fields)), key: stream}


class IteratedStream:
    """An iterable stream that is not an iterator (botocore's ``EventStream``) as one: ``next``
    steps its iterator, ``close()`` closes it and then the iteration; other attributes are its."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._items = iter(inner)

    def __iter__(self) -> IteratedStream:
        return self

    def __next__(self) -> Any:
        return next(self._items)

    def close(self) -> None:
        """Close the stream (its connection), then the iteration over it."""
        close = getattr(self._inner, "close", None)
        try:
            if callable(close):
                close()
        finally:
            stop = getattr(self._items, "close", None)
            if callable(stop):
                stop()

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_items"):
            raise AttributeError(name)
        return getattr(self._inner, name)


# ---- responses read after the call returned ---------------------------------------------------


def _abandoned(call: StreamingCall) -> None:
    try:
        call.end_stream(None, incomplete=True)
    except BaseException:
        logger.exception("ending an abandoned response failed")


def _body(data: object) -> object:
    """A response body read as bytes or text: its JSON when it is JSON, else the text."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    if isinstance(text, str):
        try:
            parsed: object = json.loads(text)
        except ValueError:
            return text
        return parsed
    return data


class _LateBase:
    def __init__(self, inner: Any, call: StreamingCall, flavor: Flavor) -> None:
        self._inner = inner
        self._call = call
        self._flavor = flavor
        self._parsed: dict[object, object] = {}
        self._ended = False
        self._stream: Any = None
        self._finalizer = weakref.finalize(self, _abandoned, call)

    def _settle(self, value: object) -> object:
        """``value`` was read from the body: a stream ends the call later, anything else now."""
        if not self._first_end():
            return value
        handed = hand_off_iterator(value, self._call, self._flavor)
        if handed is not None:
            self._stream = handed  # closing the response closes it too
            return handed
        self._call.end_with(value)
        return value

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Around a read of the body: one that raises ends the call as failed, and raises."""
        try:
            yield
        except BaseException as exc:
            if self._first_end():
                self._call.end_stream(exc, incomplete=True)
            raise

    def _closed(self) -> None:
        if self._stream is not None:
            self._stream._closed()
        if self._first_end():
            self._call.end_stream(None, incomplete=True)

    def _first_end(self) -> bool:
        """Whether the call has not ended yet; it has from now on (the finalizer let go)."""
        if self._ended:
            return False
        self._ended = True
        self._finalizer.detach()
        return True

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"<recorded {self._inner!r}>"


class LateResponse(_LateBase):
    """A raw response whose body is read after the call returned (sync ``parse``)."""

    def parse(self, **options: Any) -> Any:
        """The body parsed (cached per ``to``): a stream is handed back recorded."""
        key = options.get("to")
        if key not in self._parsed:
            with self._reading():
                parsed = self._inner.parse(**options)
            self._parsed[key] = self._settle(parsed)
        return self._parsed[key]

    def _read(self, method: str, *args: Any) -> Any:
        with self._reading():
            value = getattr(self._inner, method)(*args)
        self._settle(_body(value))
        return value

    def json(self) -> Any:
        """The body as JSON; it is recorded."""
        return self._read("json")

    def read(self) -> Any:
        """The body as bytes; it is recorded (as JSON when it is)."""
        return self._read("read")

    def text(self) -> Any:
        """The body as text; it is recorded (as JSON when it is)."""
        return self._read("text")

    def close(self) -> None:
        """Close the response; unread, the call is recorded incomplete."""
        close = getattr(self._inner, "close", None)
        try:
            if close is not None:
                close()
        finally:
            self._closed()


class AsyncLateResponse(_LateBase):
    """A raw response of an async client whose body is read after the call returned."""

    async def parse(self, **options: Any) -> Any:
        """The body parsed (cached per ``to``): a stream is handed back recorded."""
        key = options.get("to")
        if key not in self._parsed:
            with self._reading():
                parsed = await self._inner.parse(**options)
            self._parsed[key] = self._settle(parsed)
        return self._parsed[key]

    async def _read(self, method: str) -> Any:
        with self._reading():
            value = await getattr(self._inner, method)()
        self._settle(_body(value))
        return value

    async def json(self) -> Any:
        """The body as JSON; it is recorded."""
        return await self._read("json")

    async def read(self) -> Any:
        """The body as bytes; it is recorded (as JSON when it is)."""
        return await self._read("read")

    async def text(self) -> Any:
        """The body as text; it is recorded (as JSON when it is)."""
        return await self._read("text")

    async def close(self) -> None:
        """Close the response; unread, the call is recorded incomplete."""
        try:
            await self._inner.close()
        finally:
            self._closed()


# ---- what a stubbed with_streaming_response call returns --------------------------------------


class RecordedStreamingResponse:
    """What a stubbed ``with_streaming_response.create(...)`` returns during a replay.

    ``parse()`` gives the recorded SDK object (or, for ``stream=True``, the replayed stream);
    ``json()``, ``read()`` and ``text()`` give its JSON. Nothing about the HTTP exchange was
    recorded: ``headers`` is empty, ``status_code`` is 200 and ``request_id`` is ``None``.
    """

    status_code = 200
    retries_taken = 0
    request_id: str | None = None
    is_closed = False

    def __init__(self, parsed: object) -> None:
        self._parsed = parsed

    @property
    def headers(self) -> httpx.Headers:
        """No headers were recorded: an empty, case-insensitive ``httpx.Headers``."""
        return httpx.Headers()

    def _json(self) -> object:
        if isinstance(self._parsed, BaseModel):
            return self._parsed.model_dump(mode="json")
        return self._parsed

    def _parse(self, to: type[Any] | None) -> Any:
        if to is None:
            return self._parsed
        if isinstance(to, type) and issubclass(to, BaseModel):
            return to.model_validate(self._json())
        return self._json() if to in (dict, list) else self._parsed

    def parse(self, *, to: type[Any] | None = None) -> Any:
        """The recorded SDK object (or replayed stream); with ``to``, the JSON as that type."""
        return self._parse(to)

    def json(self) -> object:
        """The recorded body as JSON."""
        return self._json()

    def text(self) -> str:
        """The recorded body as JSON text."""
        return json.dumps(self._json())

    def read(self) -> bytes:
        """The recorded body as UTF-8 JSON."""
        return self.text().encode()

    def iter_lines(self) -> Iterator[str]:
        """The recorded body's JSON text as one line."""
        yield self.text()

    def close(self) -> None:
        """Nothing to release: no request was sent."""
        self.is_closed = True

    def __repr__(self) -> str:
        return f"<RecordedStreamingResponse of {type(self._parsed).__name__} (replayed)>"


class AsyncRecordedStreamingResponse(RecordedStreamingResponse):
    """``RecordedStreamingResponse`` for an async client: its methods are awaited."""

    async def parse(self, *, to: type[Any] | None = None) -> Any:
        """The recorded SDK object (or replayed stream); with ``to``, the JSON as that type."""
        return self._parse(to)

    async def json(self) -> object:
        """The recorded body as JSON."""
        return self._json()

    async def text(self) -> str:  # type: ignore[override]
        """The recorded body as JSON text."""
        return json.dumps(self._json())

    async def read(self) -> bytes:  # type: ignore[override]
        """The recorded body as UTF-8 JSON."""
        return json.dumps(self._json()).encode()

    async def close(self) -> None:  # type: ignore[override]
        """Nothing to release: no request was sent."""
        self.is_closed = True


# ---- Anthropic's messages.stream() ------------------------------------------------------------


@dataclass
class _Prebuilt:
    """The request a ``MessageStreamManager`` was built with, for the recorded call to send."""

    request: Any
    kwargs: dict[str, object]
    used: bool = False


_PREBUILT: contextvars.ContextVar[_Prebuilt | None] = contextvars.ContextVar(
    "chronicle_prebuilt_stream_request", default=None
)
_warned_unrouted = False


def _request_attribute(manager: object) -> str | None:
    """The name of the attribute holding a stream manager's request (a private one)."""
    for name in vars(manager):
        if name.endswith("__api_request"):
            return name
    return None


def _warn_unrouted(manager: object) -> None:
    global _warned_unrouted
    if not _warned_unrouted:
        _warned_unrouted = True
        logger.warning(
            "%s has no request Chronicle knows how to record (the SDK changed), so "
            "messages.stream() calls pass unrecorded; use messages.create(stream=True) to record "
            "them",
            type(manager).__name__,
        )


def message_stream_body(original: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    """The recorded body of ``messages.stream(...)``: send the request, return the raw stream.

    It sends the request the manager was built with, unless hooks patched the arguments: then
    it builds the manager again from the patched ones.
    """
    if is_async:

        @functools.wraps(original)
        async def async_body(*args: Any, **kwargs: Any) -> Any:
            prebuilt = _PREBUILT.get()
            if prebuilt is not None and prebuilt.kwargs == kwargs:
                prebuilt.used = True
                return await prebuilt.request
            manager = original(*args, **kwargs)
            name = _request_attribute(manager)
            if name is None:
                raise TypeError(f"{type(manager).__name__} has no request to send")
            return await getattr(manager, name)

        return async_body

    @functools.wraps(original)
    def body(*args: Any, **kwargs: Any) -> Any:
        prebuilt = _PREBUILT.get()
        if prebuilt is not None and prebuilt.kwargs == kwargs:
            prebuilt.used = True
            return prebuilt.request()
        manager = original(*args, **kwargs)
        name = _request_attribute(manager)
        if name is None:
            raise TypeError(f"{type(manager).__name__} has no request to send")
        return getattr(manager, name)()

    return body


def message_stream_method(
    original: Callable[..., Any], recorded: Callable[..., Any], is_async: bool
) -> Callable[..., Any]:
    """``messages.stream`` wrapped: the SDK's own manager, whose request is the recorded call."""

    @functools.wraps(original)
    def stream(*args: Any, **kwargs: Any) -> Any:
        manager = original(*args, **kwargs)
        name = _request_attribute(manager)
        if name is None:
            _warn_unrouted(manager)
            return manager
        prebuilt = _Prebuilt(getattr(manager, name), dict(kwargs))
        if is_async:
            setattr(manager, name, _send_async(prebuilt, recorded, args, kwargs))
        else:
            setattr(manager, name, functools.partial(_send, prebuilt, recorded, args, kwargs))
        return manager

    return stream


def _send(
    prebuilt: _Prebuilt, recorded: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> Any:
    token = _PREBUILT.set(prebuilt)
    try:
        return recorded(*args, **kwargs)
    finally:
        _PREBUILT.reset(token)


async def _send_async(
    prebuilt: _Prebuilt, recorded: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: Any
) -> Any:
    token = _PREBUILT.set(prebuilt)
    try:
        return await recorded(*args, **kwargs)
    finally:
        _PREBUILT.reset(token)
        if not prebuilt.used and inspect.iscoroutine(prebuilt.request):
            prebuilt.request.close()  # stubbed, or rebuilt after a hook's patch: never sent
