"""A failed call, recorded and raised again: the one format both sides of it share.

What a failure records beyond its type and message (``error_fields``) is ``failure_detail``, the
``wire.ERROR`` metadata of its envelope: the exception's class, the SDK's parsed error body, the
HTTP status, headers (credentials left out) and request, or botocore's error response. A replay
raises it again (``replay/recorded.py``: ``replayed_failure``) through the boundary's
``RestoreError``, which each wrapped SDK names (``integrations/clients/*``): the rebuilders
below read that same detail and build the SDK's own exception (``openai.RateLimitError``,
google-genai's ``ClientError``, botocore's ``ClientError`` or the client's modeled class), so the
agent's own ``except`` clauses run in a replay as they did live. A key written here is read here.
"""

from __future__ import annotations

import copy
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, cast

import httpx
from pydantic import JsonValue

from chronicle.errors import AbortCall
from chronicle.recording.capture import json_form
from chronicle.redaction import Redaction, is_secret_header, public_url
from chronicle.wire import valid_text

RestoreError = Callable[[str, str, Mapping[str, JsonValue]], "BaseException | None"]
"""Rebuilds a recorded failure from ``(type, message, detail)`` (``detail``: ``wire.ERROR``);
``None`` when it cannot."""


# ---- recording a failure ----------------------------------------------------------------------


def error_fields(error: BaseException, redaction: Redaction, limit: int) -> tuple[str, str]:
    """``(type, message)`` of a failure as recorded: redacted, then cut to ``limit``, and valid
    text (an exception message may hold lone surrogates, a file name from ``os.fsdecode``)."""
    kind = "AbortCall" if isinstance(error, AbortCall) else valid_text(type(error).__name__)
    try:
        message = str(error)
    except Exception:
        message = f"<{kind} whose str() failed>"
    form = json_form(message, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction)
    return kind, form.value if isinstance(form.value, str) else kind


_RATE_LIMIT_HEADERS = ("x-ratelimit-", "anthropic-ratelimit-")
"""Rate-limit headers name tokens (``x-ratelimit-remaining-tokens``) but hold no credential."""
_NO_BODY = object()


def failure_detail(error: BaseException, redaction: Redaction, limit: int) -> dict[str, JsonValue]:
    """What a replay needs to raise ``error`` again, beyond its type and message (``wire.ERROR``).

    Always the exception's ``class``. For an exception with an HTTP ``response`` (the provider
    SDKs' ``APIStatusError``, google-genai's ``APIError``, ``httpx.HTTPStatusError``): its status
    code and its headers without credential headers and with values redacted. The request's
    method and public URL (the response's request, else the exception's ``request``: the SDKs'
    connection errors and stream failures) and the SDK's parsed error body (``body``;
    google-genai's ``details``), whenever the exception has them. botocore's ``ClientError`` (a
    Bedrock ``ThrottlingException``, an ``EventStreamError``): its ``response`` dict (``Error``,
    and ``ResponseMetadata`` with its headers kept as above) and its ``operation_name``. Every
    value is redacted, each body and response cut to ``limit``.
    """
    kind = type(error)
    detail: dict[str, JsonValue] = {"class": f"{kind.__module__}:{kind.__qualname__}"}
    body_attribute = "details" if kind.__module__.startswith("google.genai") else "body"
    try:
        body = getattr(error, body_attribute, _NO_BODY)
    except Exception:  # a property that raises: no body
        body = _NO_BODY
    if body is not _NO_BODY:
        detail["body"] = json_form(
            body, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction
        ).value
    response = getattr(error, "response", None)
    if isinstance(response, Mapping):  # botocore: the error response, parsed
        detail["response"] = _service_error(response, redaction, limit)
        operation = getattr(error, "operation_name", None)
        if isinstance(operation, str):
            detail["operation_name"] = operation
        return detail
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        detail["status_code"] = status
        headers = getattr(response, "headers", None)
        if isinstance(headers, Mapping):
            detail["headers"] = _kept_headers(headers, redaction)
    # The response's request, else the error's own (a stream's failure, a timeout).
    source: object = response if status is not None else error
    try:
        request = getattr(source, "request", None)
    except Exception:  # httpx raises when a response or error was built without one
        request = None
    method, url = getattr(request, "method", None), public_url(getattr(request, "url", ""))
    if isinstance(method, str) and url is not None:
        detail["request"] = {"method": method, "url": url}
    return detail


def _kept_headers(headers: Mapping[object, object], redaction: Redaction) -> dict[str, JsonValue]:
    """Response headers as recorded: names lower-cased, credential headers (but rate limits)
    left out, values redacted."""
    kept: dict[str, JsonValue] = {}
    for name, value in headers.items():
        name = str(name).lower()
        if is_secret_header(name) and not name.startswith(_RATE_LIMIT_HEADERS):
            continue
        kept[name] = valid_text(redaction.text(str(value)))
    return kept


def _service_error(
    response: Mapping[object, object], redaction: Redaction, limit: int
) -> JsonValue:
    """botocore's error ``response`` as recorded: JSON form, redacted, cut to ``limit``, with
    ``ResponseMetadata.HTTPHeaders`` filtered as ``_kept_headers`` does."""
    shown: dict[object, object] = dict(response)
    metadata = shown.get("ResponseMetadata")
    if isinstance(metadata, Mapping):
        headers = metadata.get("HTTPHeaders")
        if isinstance(headers, Mapping):
            shown["ResponseMetadata"] = {
                **metadata,
                "HTTPHeaders": _kept_headers(headers, redaction),
            }
    return json_form(
        shown, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction
    ).value


# ---- raising it again: the SDKs' own exceptions ------------------------------------------------


_UNSENDABLE_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})
"""Recorded response headers left off a rebuilt response: they describe the original bytes."""


def sdk_error_restorer(sdk: str, wrapped_body: bool) -> RestoreError:
    """Rebuild a recorded failure as the SDK's own exception (``openai.RateLimitError``, ...).

    Status errors get a response rebuilt from the recorded status code, headers and body (the
    SDK reads ``request_id`` and the rest from it); connection errors and timeouts get the
    recorded request. The SDK's ``body`` of an OpenAI error is the ``error`` member of the
    response JSON (``wrapped_body``); Anthropic's is the whole JSON. Anything else: ``None``.
    """

    def restore(error_type: str, message: str, detail: Mapping[str, JsonValue]) -> Exception | None:
        sdk_module = sys.modules.get(sdk)
        cls = getattr(sdk_module, error_type, None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            return None
        build: Any = cls  # the SDK's constructors take keywords Exception does not
        http = http_module(cls)
        body = detail.get("body")
        content = {"error": body} if wrapped_body and body is not None else body
        request, response = recorded_exchange(http, detail, content)
        status_error = getattr(sdk_module, "APIStatusError", None)
        if response is not None and isinstance(status_error, type):
            if not issubclass(cls, status_error):
                return None
            return cast(Exception, build(message, response=response, body=body))
        timeout = getattr(sdk_module, "APITimeoutError", None)
        if isinstance(timeout, type) and issubclass(cls, timeout):
            return cast(Exception, build(request=request))
        connection = getattr(sdk_module, "APIConnectionError", None)
        if isinstance(connection, type) and issubclass(cls, connection):
            return cast(Exception, build(message=message, request=request))
        if error_type == "APIError" and "body" in detail:  # a stream's error event
            return cast(Exception, build(message, request, body=body))
        return None

    return restore


def recorded_exchange(http: Any, detail: Mapping[str, JsonValue], content: object) -> Any:
    """``(request, response)`` rebuilt with ``http`` (``httpx`` or its successor) from a
    recorded failure's detail: the recorded method and URL (else a placeholder), and, when a
    status code was recorded, a response with it, the recorded headers and ``content`` as its
    JSON body (``None``: no response was recorded)."""
    recorded = detail.get("request")
    method, url = "POST", "http://replayed.invalid/"
    if isinstance(recorded, dict):
        method = str(recorded.get("method") or method)
        url = str(recorded.get("url") or url)
    request = http.Request(method, url)
    status = detail.get("status_code")
    if not isinstance(status, int):
        return request, None
    headers = detail.get("headers")
    sent = {
        str(name): str(value)
        for name, value in (headers.items() if isinstance(headers, dict) else ())
        if name not in _UNSENDABLE_HEADERS
    }
    return request, http.Response(status, headers=sent, json=content, request=request)


def http_module(cls: type) -> Any:
    """The HTTP library an SDK's exception module uses (``httpx``, or its successor)."""
    namespace = vars(sys.modules.get(cls.__module__) or types.ModuleType("none"))
    for name in ("httpx2", "httpx"):
        module = namespace.get(name)
        if isinstance(module, types.ModuleType):
            return module
    return httpx


def gemini_error(
    error_type: str, message: str, detail: Mapping[str, JsonValue]
) -> Exception | None:
    """Rebuild a recorded google-genai failure as the SDK's own exception (``ClientError`` for a
    4xx, ``ServerError`` for a 5xx, ``APIError``), from the recorded error body (the SDK's
    ``details``) and status code as the SDK builds it from a response: ``code``, ``status`` and
    ``message`` as recorded, ``response`` an ``httpx.Response`` with the recorded status and
    headers, and the recorded message as its text. ``None`` for another type, or when no body
    was recorded (a recording from before Chronicle kept it)."""
    from google.genai import errors  # optional: only for a wrapped google-genai client

    cls = getattr(errors, error_type, None)
    body = detail.get("body")
    if not (isinstance(cls, type) and issubclass(cls, errors.APIError)) or body is None:
        return None
    _, response = recorded_exchange(httpx, detail, body)
    inner = body.get("error") if isinstance(body, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    if not isinstance(code, int):  # the SDK reads it from the body, else the status
        code = response.status_code if response is not None else 0
    rebuilt = cls(code, copy.deepcopy(body), response)
    rebuilt.args = (message,)
    return rebuilt


def boto_error_restorer(exceptions: object) -> RestoreError:
    """Rebuild a recorded botocore failure as the exception boto3 raised: the client's modeled
    class (``client.exceptions.ThrottlingException``, found by the recorded error code), else
    botocore's own (``ClientError``, ``EventStreamError``), built from the recorded ``response``
    dict and operation name as botocore builds it, so ``error.response["Error"]["Code"]`` and
    ``ResponseMetadata`` read as recorded; its text is the recorded message. ``None`` for another
    type, or when no response was recorded (a recording from before Chronicle kept it)."""

    def restore(error_type: str, message: str, detail: Mapping[str, JsonValue]) -> Exception | None:
        from botocore import exceptions as botocore_errors  # optional: a boto3 client is wrapped

        response = detail.get("response")
        if not isinstance(response, dict):
            return None
        error = response.get("Error")
        code = error.get("Code") if isinstance(error, dict) else None
        cls: object = None
        from_code = getattr(exceptions, "from_code", None)
        if isinstance(code, str) and callable(from_code):
            modeled = from_code(code)
            cls = modeled if getattr(modeled, "__name__", None) == error_type else None
        if cls is None:
            cls = getattr(botocore_errors, error_type, None)
        if not (isinstance(cls, type) and issubclass(cls, botocore_errors.ClientError)):
            return None
        operation = detail.get("operation_name")
        rebuilt: Exception = cls(
            copy.deepcopy(response), operation if isinstance(operation, str) else ""
        )
        rebuilt.args = (message,)
        return rebuilt

    return restore
