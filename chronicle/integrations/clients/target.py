"""What ``wrap`` installs, described: a ``Target`` (one SDK method of one client object and how
it is recorded and rebuilt), and what every SDK's target finder shares: the client's library and
version, its non-default base URL, whether a resource is async, and SDK errors rebuilt from a
recorded failure's status, headers and body."""

from __future__ import annotations

import importlib.metadata
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx
from pydantic import JsonValue

from chronicle.integrations.clients.streams import StreamTypes
from chronicle.llm.canonical import LlmAdapter
from chronicle.recording.call import RestoreError
from chronicle.redaction import public_url

# ---- what to wrap -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One SDK method of one client object, and how its calls are recorded and rebuilt."""

    owner: object
    """The resource instance (or the litellm module / Router) whose attribute is replaced."""
    attr: str
    name: str
    provider: str
    adapter: LlmAdapter
    restore: Callable[[JsonValue], object]
    is_async: bool
    metadata: Mapping[str, JsonValue]
    streams: StreamTypes | None
    """What the method streams; ``None``: it never returns a stream (Gemini's, Bedrock's)."""
    helper: str | None = None
    """A ``.stream(...)`` helper on ``owner`` that sends its request itself (Anthropic's)."""
    always_streams: bool = False
    """The method always returns a stream (Gemini's ``generate_content_stream``, boto3's
    ``converse_stream``): recorded with ``streams``, whatever its arguments say."""
    accepts: Callable[[Mapping[str, object]], bool] | None = None
    """Which calls are recorded (by their keyword arguments); the others pass through."""
    extract_input: Callable[[Mapping[str, object]], object] | None = None
    """The recorded input; ``None``: the arguments less transport options and SDK sentinels."""
    prepare: Callable[[object], object] | None = None
    """Applied to the SDK's return value before the caller and the recorder get it."""
    extract_result: Callable[[object], object] | None = None
    """The recorded output; ``None``: the SDK object (or a raw response's parsed body)."""
    restore_error: RestoreError | None = None
    path: str | None = None
    """The method's endpoint under the client's base URL (``chat/completions``), for the
    request a replayed raw response names; ``None``: a placeholder URL."""


def library_of(obj: object) -> str | None:
    """The package (``openai``, ``anthropic``, ``google.genai``, ``botocore``, ...) of ``obj``'s
    type or a base."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    for base in type(obj).__mro__:
        module = getattr(base, "__module__", None) or ""
        top = module.partition(".")[0]
        if top in ("openai", "anthropic", "litellm", "langchain_openai", "botocore"):
            return top
        if module.startswith("google.genai."):
            return "google.genai"
    return None


def validates_responses(client: object) -> bool:
    """Whether an OpenAI or Anthropic client validates what the server sends
    (``_strict_response_validation=True``): then a replay refuses what it would have refused."""
    return getattr(client, "_strict_response_validation", False) is True


def is_async_resource(resource: object) -> bool:
    """An SDK resource of an async client (``AsyncAPIResource`` in both SDKs)."""
    return any(base.__name__ == "AsyncAPIResource" for base in type(resource).__mro__)


def library_version(module_name: str) -> str | None:
    """The installed version of ``module_name`` (its ``__version__``, else the distribution's)."""
    module = sys.modules.get(module_name)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(module_name)
    except Exception:
        return None


def client_metadata(
    library: str,
    base_url: object = None,
    default_url: str | None = None,
    *,
    module: str | None = None,
) -> dict[str, JsonValue]:
    """``client.library`` (its version read from ``module``, by default ``library``) and the
    base URL when it is given and not ``default_url``."""
    metadata: dict[str, JsonValue] = {"client.library": library}
    version = library_version(module or library)
    if version is not None:
        metadata["client.version"] = version
    if base_url is not None:
        url = public_url(base_url)
        if url is not None and url != default_url:
            metadata["client.base_url"] = url
    return metadata


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
