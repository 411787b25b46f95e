"""Installing the recording wrappers: a ``Target``'s method replaced on its owner by an ``llm``
boundary (``BoundarySpec``), the ``.stream(...)`` helper beside it, raw and streaming responses
(``with_raw_response``/``with_streaming_response``) and what a stub returns in their place
(built by ``raw.py`` and ``streams.py``), and the rule that a wrapped call made inside another
wrapped call's SDK call passes through."""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel

from chronicle.integrations.clients.raw import RawShape, raw_shape
from chronicle.integrations.clients.streams import (
    AsyncRecordedStreamingResponse,
    RecordedStreamingResponse,
    client_format,
    message_stream_body,
    message_stream_method,
    raw_flag,
    sent_fields,
)
from chronicle.integrations.clients.target import Target
from chronicle.recording.boundary import BoundarySpec
from chronicle.recording.stream import Flavor
from chronicle.replay.streams import AsyncReplayedStream, ReplayedStream

logger = logging.getLogger("chronicle")

_TRANSPORT_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})
_SENTINELS = frozenset({"NotGiven", "Omit"})
_CACHED_WRAPPERS = ("with_raw_response", "with_streaming_response")
_IN_SDK_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "chronicle_in_wrapped_llm_call", default=False
)
"""True while a wrapped method's SDK call runs (not its hooks): nested wrapped calls pass."""

Mode = Literal["record", "raw", "streaming"]
"""A plain call, ``with_raw_response`` and ``with_streaming_response``."""


# ---- installing the wrappers ------------------------------------------------------------------


def _request_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """The recorded input: the arguments by name, less transport options and SDK sentinels."""
    return {
        key: value
        for key, value in arguments.items()
        if key not in _TRANSPORT_OPTIONS and type(value).__name__ not in _SENTINELS
    }


def _is_raw_response(result: object) -> bool:
    return (
        not isinstance(result, BaseModel)
        and hasattr(result, "http_response")
        and callable(getattr(result, "parse", None))
    )


def _response_body(result: object) -> object:
    """The recorded output: the SDK object itself, or a raw response's parsed body (for an
    async ``parse()``, the anthropic SDK's ``AsyncAPIResponse``, the JSON body it read)."""
    if not _is_raw_response(result):
        return result
    parsed = cast(Any, result).parse()  # the SDK caches it: the caller's parse() reuses it
    if inspect.isawaitable(parsed):  # not awaited here: the body it would parse is read already
        close = getattr(parsed, "close", None)
        if callable(close):
            close()
        try:
            body: object = cast(Any, result).http_response.json()
        except Exception:  # a body not read yet, or not JSON: recorded as it is (lossy)
            return result
        return body
    return parsed


def sent_body(result: object) -> object:
    """The recorded output of an OpenAI or Anthropic SDK call: the response's fields the server
    sent, by their wire names (``streams.sent_fields``), so a replay rebuilds the SDK object with
    exactly the fields the live one had set; a raw response's parsed body the same way. Anything
    else (a body that is not an SDK model, one whose fields JSON refuses) is left to the capture's
    own JSON form."""
    body = _response_body(result)
    try:
        sent = sent_fields(body)
    except Exception:  # a value the serializer refuses in JSON mode: the capture's walk copes
        logger.debug(
            "the fields of a %s were not dumped as sent", type(body).__name__, exc_info=True
        )
        return body
    return body if sent is None else sent


def _mode(kwargs: Mapping[str, object]) -> Mode:
    flag = raw_flag(kwargs)
    if flag is None:
        return "record"
    return "streaming" if flag == "stream" else "raw"


def _stubbed(result: object) -> bool:
    """A raw-response call got a replay stub (an SDK model, recorded JSON, a replayed stream)."""
    return isinstance(result, (BaseModel, dict, ReplayedStream, AsyncReplayedStream))


def _stub_response(mode: Mode, result: object, shape: RawShape) -> object:
    """What a stubbed raw-response call returns in place of the SDK's response object."""
    if mode == "raw":
        return shape.response(result)
    if shape.is_async:
        return AsyncRecordedStreamingResponse(result)
    return RecordedStreamingResponse(result)


def install(target: Target) -> bool:
    """Replace ``target.owner.<attr>`` with its recording wrapper; ``False`` if already done."""
    owner, attr = target.owner, target.attr
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "__chronicle_boundary__", None) is not None:
        return False
    body = (_async_body if target.is_async else _sync_body)(original, target.prepare)
    flavor: Flavor = "async" if target.is_async else "sync"
    spec = BoundarySpec(
        body,
        target.name,
        "llm",
        provider=target.provider,
        extract_input=target.extract_input or _request_arguments,
        extract_result=target.extract_result or _response_body,
        adapter=target.adapter,
        metadata=target.metadata,
        restore=target.restore,
        stream_format=None
        if target.streams is None
        else client_format(target.streams, flavor, helper=target.always_streams),
        restore_error=target.restore_error,
    )
    recorded = spec.wrapper()
    make = _async_method if target.is_async else _sync_method
    method = make(
        original, recorded, raw_shape(owner, target.path, target.is_async), target.accepts
    )
    method.__chronicle_boundary__ = spec  # type: ignore[attr-defined]
    setattr(owner, attr, method)
    if target.helper is not None:
        _install_stream_helper(target, flavor)
    if not isinstance(owner, types.ModuleType):
        # ``with_raw_response`` and friends copy ``create`` when first built: rebuild them.
        cached = getattr(owner, "__dict__", {})
        for name in _CACHED_WRAPPERS:
            cached.pop(name, None)
    return True


def _install_stream_helper(target: Target, flavor: Flavor) -> None:
    """Record ``target.helper`` (Anthropic's ``messages.stream``) as the same boundary."""
    assert target.helper is not None
    assert target.streams is not None  # a target with a helper streams
    original = getattr(target.owner, target.helper, None)
    if original is None or getattr(original, "__chronicle_boundary__", None) is not None:
        return
    body = _in_sdk_call(message_stream_body(original, target.is_async), target.is_async)
    spec = BoundarySpec(
        body,
        target.name,
        "llm",
        provider=target.provider,
        extract_input=_streamed_request_arguments,
        adapter=target.adapter,
        metadata=target.metadata,
        restore=target.restore,
        is_async=target.is_async,
        stream_format=client_format(target.streams, flavor, helper=True),
        restore_error=target.restore_error,
    )
    method = message_stream_method(original, spec.wrapper(), target.is_async)
    method.__chronicle_boundary__ = spec  # type: ignore[attr-defined]
    setattr(target.owner, target.helper, method)


def _streamed_request_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """A ``.stream(...)`` helper's input, recorded as the ``create(stream=True)`` it stands for."""
    return {**_request_arguments(arguments), "stream": True}


def _in_sdk_call(body: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    return _async_body(body) if is_async else _sync_body(body)


Prepare = Callable[[object], object] | None
Accepts = Callable[[Mapping[str, object]], bool] | None


def _sync_body(original: Callable[..., Any], prepare: Prepare = None) -> Callable[..., Any]:
    @functools.wraps(original)
    def body(*args: Any, **kwargs: Any) -> Any:
        token = _IN_SDK_CALL.set(True)
        try:
            result = original(*args, **kwargs)
        finally:
            _IN_SDK_CALL.reset(token)
        return prepare(result) if prepare is not None else result

    return body


def _async_body(original: Callable[..., Any], prepare: Prepare = None) -> Callable[..., Any]:
    # The SDKs' async ``create`` is a plain function returning a coroutine (a decorator hides the
    # ``async def``), so the recording wrapper is told it is async through this coroutine function.
    @functools.wraps(original)
    async def body(*args: Any, **kwargs: Any) -> Any:
        token = _IN_SDK_CALL.set(True)
        try:
            result = await original(*args, **kwargs)
        finally:
            _IN_SDK_CALL.reset(token)
        return prepare(result) if prepare is not None else result

    return body


def _sync_method(
    original: Callable[..., Any],
    recorded: Callable[..., Any],
    shape: RawShape,
    accepts: Accepts = None,
) -> Callable[..., Any]:
    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        if _IN_SDK_CALL.get() or (accepts is not None and not accepts(kwargs)):
            return original(*args, **kwargs)
        mode = _mode(kwargs)
        result = recorded(*args, **kwargs)
        if mode != "record" and _stubbed(result):
            return _stub_response(mode, result, shape)
        return result

    return method


def _async_method(
    original: Callable[..., Any],
    recorded: Callable[..., Any],
    shape: RawShape,
    accepts: Accepts = None,
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def method(*args: Any, **kwargs: Any) -> Any:
        if _IN_SDK_CALL.get() or (accepts is not None and not accepts(kwargs)):
            return await original(*args, **kwargs)
        mode = _mode(kwargs)
        result = await recorded(*args, **kwargs)
        if mode != "record" and _stubbed(result):
            return _stub_response(mode, result, shape)
        return result

    return method
