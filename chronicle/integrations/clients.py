"""``wrap(client)``: record an SDK client's model calls as ``llm`` boundaries, in place.

``chronicle.wrap(client)`` finds the client's model-call methods by the client's type, replaces
each one *on that instance* with a recording wrapper, and returns the same object. Sync and async
clients are both handled; no SDK is imported unless the object given comes from it.

What is wrapped, and the boundary names
=======================================

==========================================  ===================================  =============
Object given                                Boundary name (method wrapped)       ``provider``
==========================================  ===================================  =============
``openai.OpenAI`` / ``AsyncOpenAI``         ``openai.chat.completions.create``   ``openai``
                                            ``openai.responses.create``
``openai.AzureOpenAI`` / ``AsyncAzure...``  the same two names                   ``azure``
``anthropic.Anthropic`` / ``AsyncAnth...``  ``anthropic.messages.create``        ``anthropic``
the ``litellm`` module                      ``litellm.completion`` (both         from the model
                                            ``completion`` and ``acompletion``)  (see adapter)
a ``litellm.Router``                        ``litellm.router.completion`` (both  from the model
                                            ``completion`` and ``acompletion``)
``google.genai.Client`` (``client.models``  ``genai.models.generate_content``     ``google``
and ``client.aio.models``)                  (``generate_content`` and
                                            ``generate_content_stream``)
a ``boto3`` ``bedrock-runtime`` client      ``bedrock.converse`` (``converse``   ``bedrock``
                                            and ``converse_stream``),
                                            ``bedrock.invoke_model``
                                            (``invoke_model`` and ``invoke_model
                                            _with_response_stream``; Anthropic
                                            bodies only)
any other client with                       ``openai.chat.completions.create``   from its host
``chat.completions.create``                                                      or package,
                                                                                 else
                                                                                 ``unknown``
any other client with ``messages.create``   ``anthropic.messages.create``        the same
==========================================  ===================================  =============

The name is the library plus the SDK method path, so it stays the same for sync and async code
and for OpenAI and Azure (the same SDK method): a recording made with one replays with the other.
``provider`` (on the envelope and the span's ``llm.provider``) says who served the call: for an
OpenAI client (or a subclass) pointed at another provider's API host, and for a client detected
by shape, the host or the client's package names it (``chronicle.llm.providers``). Azure
records the deployment as ``output.deployment_id``: the client's ``azure_deployment`` when it
was built with one, else the call's ``model``.

Resource objects are accepted too, so what a framework holds can be wrapped:
``openai.resources.chat.Completions``/``AsyncCompletions`` (the ``client.chat.completions``
object; LangChain's ``ChatOpenAI`` keeps it as ``chat.client``), ``openai.resources.responses.
Responses``/``AsyncResponses`` and ``anthropic.resources.messages.Messages``/``AsyncMessages``.
A LangChain ``ChatOpenAI`` (or ``AzureChatOpenAI``) itself is accepted as well: its
``root_client`` and ``root_async_client`` are wrapped, which covers ``chat.client``.

A client of another type is wrapped by its shape: ``chat.completions.create`` is recorded as
OpenAI chat and ``messages.create`` as Anthropic Messages (Anthropic's own ``AnthropicBedrock``
and ``AnthropicVertex`` are such). Anything else raises ``TypeError`` listing what ``wrap``
supports and pointing to ``chronicle.wrap_llm`` and ``@chronicle.boundary(kind="llm")``. Wrapping
the same object (or a resource of a wrapped client) again changes nothing. Objects made later from
a wrapped one (``client.with_options(...)``, ``client.copy()``) are new clients: wrap them too.
``from litellm import completion`` done before ``wrap(litellm)`` keeps the unwrapped function.

What is recorded
================

- **Input**: the call's arguments by name, minus the per-request transport options
  (``extra_headers``, ``extra_query``, ``timeout``) and arguments left as the SDK's
  ``NOT_GIVEN``/``omit`` sentinels. ``extra_body`` is kept (it is part of the request).
- **Output**: the JSON form of the SDK's return value (``model_dump(mode="json")``); the
  canonical fields come from the provider's adapter (``chronicle.llm.openai``, ``.anthropic``,
  ``.litellm``). A provider error is recorded as a failure whose ``output.error.type`` is the SDK
  exception's class name (``BadRequestError``, ``RateLimitError``, ...), and the caller gets the
  SDK's exception unchanged.
- **Metadata** (static client identity): ``client.library`` (``openai``, ``anthropic``,
  ``litellm``), ``client.version`` (the SDK's version), ``client.base_url`` when it is not the
  provider's public default (scheme, host, port and path only: no user info, query or fragment),
  and for Azure ``client.api_version``.
- **Streams** (``stream=True``, the ``.stream(...)`` helpers, ``with_streaming_response``,
  Gemini's ``generate_content_stream``, boto3's ``converse_stream`` and
  ``invoke_model_with_response_stream``) are one envelope each, with the assembled response,
  sent when the stream ends; see ``chronicle.integrations.client_streams``.
- **Not recorded** (passed straight to the SDK, during replays too): anything the SDK does not
  route through ``create``/``completion``/``generate_content``/``converse`` (``parse``, ``beta``
  resources, ``responses.stream(response_id=...)``); ``invoke_model`` (and its stream) with a
  body that is not Anthropic's.
- Gemini: pydantic arguments are recorded without their ``None`` fields and without
  ``config.http_options``; the output leaves out ``sdk_http_response`` (transport headers).
  Bedrock: the arguments and the dict boto3 returns as they are; for ``invoke_model`` the body
  is recorded as parsed JSON, and the caller gets a ``StreamingBody`` that reads as before.
- ``with_raw_response.create(...)`` (non-streaming) *is* recorded, because frameworks use it for
  ordinary calls (LangChain's ``ChatOpenAI`` does): the envelope holds the parsed body, the caller
  gets the SDK's raw response unchanged, and a replay stub returns a ``RecordedRawResponse``
  whose ``parse()`` gives the recorded SDK object (there are no recorded headers).
- One model call makes one envelope: a wrapped method called while another wrapped method is
  running its SDK call (a ``litellm.Router`` calling a wrapped ``litellm.completion``, say) passes
  through unrecorded.

Replay
======

A stubbed call returns the SDK's own type rebuilt from ``output.raw``: ``ChatCompletion``,
``Response``, anthropic ``Message``, LiteLLM ``ModelResponse``, Gemini
``GenerateContentResponse``, and for Bedrock the dict boto3 returns (``invoke_model``'s ``body``
a ``StreamingBody``). Replay is never stricter than the SDK: a recording that does not validate
as the type is built the way the SDK builds a response from the wire (``client_streams.
model_restorer``), so what the live SDK accepted (an OpenAI-compatible server's completion
without ``created``, a field a newer google-genai added) replays; only a recording that is not
rebuildable at all (not a JSON object, a text where the type has a list) raises ``ReplayError``
naming the envelope. A recorded failure is raised as the SDK's own exception, built from what
was recorded (``recording.call.failure_detail``): ``openai``/``anthropic`` status, connection
and stream errors, google-genai ``ClientError``/``ServerError``/``APIError``, and botocore's
``ClientError``, the client's modeled class (``client.exceptions.ThrottlingException``) or
``EventStreamError``; so the agent's own ``except`` clauses run. A client detected by shape
whose types Chronicle does not know gets the recorded JSON with attribute access
(``resp.choices[0].message.content``). A stubbed streamed call returns a stream of the SDK's own
chunk or event types (for boto3, the response dict around the replayed event dicts). A stub
makes no HTTP request.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import importlib.metadata
import inspect
import json
import logging
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, cast

import httpx
from pydantic import BaseModel, JsonValue

from chronicle.integrations.client_streams import (
    AsyncRecordedStreamingResponse,
    RecordedStreamingResponse,
    StreamTypes,
    client_format,
    message_stream_body,
    message_stream_method,
    model_restorer,
    raw_flag,
    union_restorer,
)
from chronicle.llm import bedrock, gemini
from chronicle.llm.anthropic import (
    ANTHROPIC_MESSAGES,
    AnthropicMessagesAdapter,
    MessagesStreamAssembler,
    message_events,
)
from chronicle.llm.canonical import LlmAdapter
from chronicle.llm.litellm import LITELLM_COMPLETION
from chronicle.llm.openai import (
    AZURE_CHAT,
    AZURE_RESPONSES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    ChatStreamAssembler,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ResponsesStreamAssembler,
    chat_chunks,
    responses_events,
)
from chronicle.llm.providers import provider_of_client, provider_of_host
from chronicle.recording.boundary import BoundarySpec
from chronicle.recording.call import RestoreError
from chronicle.recording.capture import json_form
from chronicle.recording.stream import Flavor
from chronicle.redaction import public_url
from chronicle.replay.recorded import restore_plain
from chronicle.replay.streams import AsyncReplayedStream, ReplayedStream

__all__ = [
    "ANTHROPIC_MESSAGES_NAME",
    "BEDROCK_CONVERSE_NAME",
    "BEDROCK_INVOKE_MODEL_NAME",
    "GEMINI_GENERATE_CONTENT_NAME",
    "LITELLM_COMPLETION_NAME",
    "LITELLM_ROUTER_COMPLETION_NAME",
    "OPENAI_CHAT_NAME",
    "OPENAI_RESPONSES_NAME",
    "RecordedRawResponse",
    "wrap",
]

logger = logging.getLogger("chronicle")

T = TypeVar("T")

OPENAI_CHAT_NAME = "openai.chat.completions.create"
"""Boundary name of ``chat.completions.create`` on an OpenAI or Azure OpenAI client."""
OPENAI_RESPONSES_NAME = "openai.responses.create"
"""Boundary name of ``responses.create`` on an OpenAI or Azure OpenAI client."""
ANTHROPIC_MESSAGES_NAME = "anthropic.messages.create"
"""Boundary name of ``messages.create`` on an Anthropic client."""
LITELLM_COMPLETION_NAME = "litellm.completion"
"""Boundary name of ``litellm.completion`` and ``litellm.acompletion``."""
LITELLM_ROUTER_COMPLETION_NAME = "litellm.router.completion"
"""Boundary name of ``Router.completion`` and ``Router.acompletion``."""
GEMINI_GENERATE_CONTENT_NAME = "genai.models.generate_content"
"""Boundary name of ``models.generate_content`` on a ``google.genai`` client (sync and aio)."""
BEDROCK_CONVERSE_NAME = "bedrock.converse"
"""Boundary name of ``converse`` on a ``bedrock-runtime`` client."""
BEDROCK_INVOKE_MODEL_NAME = "bedrock.invoke_model"
"""Boundary name of ``invoke_model`` (Anthropic bodies) on a ``bedrock-runtime`` client."""

_TRANSPORT_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})
_SENTINELS = frozenset({"NotGiven", "Omit"})
_CACHED_WRAPPERS = ("with_raw_response", "with_streaming_response")
_OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
_ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"

_IN_SDK_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "chronicle_in_wrapped_llm_call", default=False
)
"""True while a wrapped method's SDK call runs (not its hooks): nested wrapped calls pass."""

Mode = Literal["record", "raw", "streaming"]
"""A plain call, ``with_raw_response`` and ``with_streaming_response``."""


# ---- public -----------------------------------------------------------------------------------


def wrap(client: T) -> T:
    """Record ``client``'s model calls as ``llm`` boundaries; wraps in place and returns it.

    ``client`` is an OpenAI, Azure OpenAI or Anthropic client (sync or async), the ``litellm``
    module, a ``litellm.Router``, a ``google.genai.Client``, a ``boto3`` ``bedrock-runtime``
    client, one of the SDK resource objects (``client.chat.completions``, ``client.responses``,
    ``client.messages``, ``client.models``), a LangChain ``ChatOpenAI``, or any client with
    ``chat.completions.create`` or ``messages.create``. See the module docstring for the
    boundary names and what is recorded. Raises ``TypeError`` for anything else. Calling it
    again on the same object is harmless.
    """
    targets = _targets(client)
    if targets is None:
        raise TypeError(_unknown_client_message(client))
    for target in targets:
        _install(target)
    return client


class RecordedRawResponse:
    """What a stubbed ``with_raw_response.create(...)`` call returns during a replay.

    ``parse()`` returns the recorded SDK object (``parse(to=Model)`` validates the recorded JSON
    as ``Model``). Nothing about the HTTP exchange was recorded: ``headers`` is empty,
    ``status_code`` is 200 and ``request_id`` is ``None``.
    """

    status_code = 200
    retries_taken = 0
    request_id: str | None = None

    def __init__(self, parsed: object) -> None:
        self._parsed = parsed

    @property
    def headers(self) -> Mapping[str, str]:
        """No headers were recorded: an empty, case-insensitive ``httpx.Headers``."""
        return httpx.Headers()

    def _json(self) -> JsonValue:
        if isinstance(self._parsed, BaseModel):
            value: JsonValue = self._parsed.model_dump(mode="json")
            return value
        return json_form(self._parsed).value

    def parse(self, *, to: type[Any] | None = None) -> Any:
        """The recorded SDK object; with ``to``, the recorded JSON as that model (or dict)."""
        if to is None:
            return self._parsed
        if isinstance(to, type) and issubclass(to, BaseModel):
            return to.model_validate(self._json())
        return self._json() if to in (dict, list) else self._parsed

    @property
    def text(self) -> str:
        """The recorded body as JSON text."""
        return json.dumps(self._json())

    @property
    def content(self) -> bytes:
        """The recorded body as UTF-8 JSON."""
        return self.text.encode()

    def __repr__(self) -> str:
        return f"<RecordedRawResponse of {type(self._parsed).__name__} (replayed)>"


# ---- what to wrap -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
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


def _library_of(obj: object) -> str | None:
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


def _targets(client: object) -> list[_Target] | None:
    if isinstance(client, type):
        return None
    finder = _FINDERS.get(_library_of(client) or "")
    found = finder(client) if finder is not None else None
    return found if found is not None else _shaped_targets(client)


def _validates_responses(client: object) -> bool:
    """Whether an OpenAI or Anthropic client validates what the server sends
    (``_strict_response_validation=True``): then a replay refuses what it would have refused."""
    return getattr(client, "_strict_response_validation", False) is True


def _is_async(resource: object) -> bool:
    """An SDK resource of an async client (``AsyncAPIResource`` in both SDKs)."""
    return any(base.__name__ == "AsyncAPIResource" for base in type(resource).__mro__)


def _version(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(module_name)
    except Exception:
        return None


def _client_metadata(
    library: str,
    base_url: object = None,
    default_url: str | None = None,
    *,
    module: str | None = None,
) -> dict[str, JsonValue]:
    """``client.library`` (its version read from ``module``, by default ``library``) and the
    base URL when it is given and not ``default_url``."""
    metadata: dict[str, JsonValue] = {"client.library": library}
    version = _version(module or library)
    if version is not None:
        metadata["client.version"] = version
    if base_url is not None:
        url = public_url(base_url)
        if url is not None and url != default_url:
            metadata["client.base_url"] = url
    return metadata


def _include_usage(arguments: Mapping[str, object]) -> bool:
    options = arguments.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


def _chat_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return chat_chunks(raw, include_usage=_include_usage(arguments))


def _responses_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return responses_events(raw)


def _messages_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return message_events(raw)


_UNSENDABLE_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})
"""Recorded response headers left off a rebuilt response: they describe the original bytes."""


def _sdk_error_restorer(sdk: str, wrapped_body: bool) -> RestoreError:
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
        http = _http_module(cls)
        body = detail.get("body")
        content = {"error": body} if wrapped_body and body is not None else body
        request, response = _recorded_exchange(http, detail, content)
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


def _recorded_exchange(http: Any, detail: Mapping[str, JsonValue], content: object) -> Any:
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


def _gemini_error(
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
    _, response = _recorded_exchange(httpx, detail, body)
    inner = body.get("error") if isinstance(body, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    if not isinstance(code, int):  # the SDK reads it from the body, else the status
        code = response.status_code if response is not None else 0
    rebuilt = cls(code, copy.deepcopy(body), response)
    rebuilt.args = (message,)
    return rebuilt


def _boto_error_restorer(exceptions: object) -> RestoreError:
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


def _http_module(cls: type) -> Any:
    """The HTTP library an SDK's exception module uses (``httpx``, or its successor)."""
    namespace = vars(sys.modules.get(cls.__module__) or types.ModuleType("none"))
    for name in ("httpx2", "httpx"):
        module = namespace.get(name)
        if isinstance(module, types.ModuleType):
            return module
    return httpx


_OPENAI_ERRORS = _sdk_error_restorer("openai", wrapped_body=True)
_ANTHROPIC_ERRORS = _sdk_error_restorer("anthropic", wrapped_body=False)


# -- openai


def _openai_targets(obj: object) -> list[_Target] | None:
    import openai  # optional: only for an object that comes from the openai SDK
    from openai.resources.chat import AsyncCompletions, Completions  # optional, as above

    responses_types: tuple[type[Any], ...] = ()
    try:
        from openai.resources.responses import AsyncResponses, Responses  # optional

        responses_types = (Responses, AsyncResponses)
    except ImportError:  # an SDK from before the Responses API
        pass

    if isinstance(obj, (openai.OpenAI, openai.AsyncOpenAI)):
        client: object = obj
        chat = getattr(getattr(obj, "chat", None), "completions", None)
        responses = getattr(obj, "responses", None)
    elif isinstance(obj, (Completions, AsyncCompletions)):
        client, chat, responses = getattr(obj, "_client", None), obj, None
    elif responses_types and isinstance(obj, responses_types):
        client, chat, responses = getattr(obj, "_client", None), None, obj
    else:
        return None

    azure = isinstance(client, (openai.AzureOpenAI, openai.AsyncAzureOpenAI))
    base_url = getattr(client, "base_url", None)
    if azure:
        provider = "azure"
        metadata = _client_metadata("openai", base_url)
        api_version = getattr(client, "_api_version", None)
        if isinstance(api_version, str):
            metadata["client.api_version"] = api_version
        deployment = getattr(client, "_azure_deployment", None)
        chat_adapter: LlmAdapter = AZURE_CHAT
        responses_adapter: LlmAdapter = AZURE_RESPONSES
        if isinstance(deployment, str) and deployment:
            chat_adapter = OpenAIChatAdapter("azure", azure=True, deployment=deployment)
            responses_adapter = OpenAIResponsesAdapter("azure", azure=True, deployment=deployment)
    else:
        provider = provider_of_client(client, base_url) if client is not None else "openai"
        metadata = _client_metadata("openai", base_url, _OPENAI_DEFAULT_URL)
        chat_adapter, responses_adapter = OPENAI_CHAT, OPENAI_RESPONSES
        if provider != "openai":  # a subclass from another package, or another provider's host
            chat_adapter = OpenAIChatAdapter(provider)
            responses_adapter = OpenAIResponsesAdapter(provider)

    strict = _validates_responses(client)
    targets: list[_Target] = []
    if chat is not None:
        from openai.types.chat import (  # optional: openai is installed here
            ChatCompletion,
            ChatCompletionChunk,
        )

        completion = model_restorer(ChatCompletion, strict=strict)
        chunk = model_restorer(ChatCompletionChunk, strict=strict)
        chat_streams = StreamTypes(ChatStreamAssembler, chunk, completion, _chat_rechunk)
        targets.append(
            _Target(
                chat,
                "create",
                OPENAI_CHAT_NAME,
                provider,
                chat_adapter,
                completion,
                _is_async(chat),
                metadata,
                chat_streams,
                restore_error=_OPENAI_ERRORS,
            )
        )
    if responses is not None:
        from openai.types.responses import (  # optional: openai is installed here
            Response,
            ResponseStreamEvent,
        )

        response = model_restorer(Response, strict=strict)
        event = union_restorer(ResponseStreamEvent, strict=strict)
        responses_streams = StreamTypes(
            ResponsesStreamAssembler, event, response, _responses_rechunk
        )
        targets.append(
            _Target(
                responses,
                "create",
                OPENAI_RESPONSES_NAME,
                provider,
                responses_adapter,
                response,
                _is_async(responses),
                metadata,
                responses_streams,
                restore_error=_OPENAI_ERRORS,
            )
        )
    return targets


# -- anthropic


def _anthropic_targets(obj: object) -> list[_Target] | None:
    import anthropic  # optional: only for an object that comes from the anthropic SDK
    from anthropic.resources.messages import AsyncMessages, Messages  # optional, as above
    from anthropic.types import Message, RawMessageStreamEvent  # optional, as above

    if isinstance(obj, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        client: object = obj
        messages = getattr(obj, "messages", None)
    elif isinstance(obj, (Messages, AsyncMessages)):
        client, messages = getattr(obj, "_client", None), obj
        if not isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
            return None  # Bedrock, Vertex, ...: another provider, detected by shape
    else:
        return None  # AnthropicBedrock, AnthropicVertex, ...: detected by shape
    if messages is None:
        return []
    base_url = getattr(client, "base_url", None)
    metadata = _client_metadata("anthropic", base_url, _ANTHROPIC_DEFAULT_URL)
    provider = provider_of_client(client, base_url)
    adapter = ANTHROPIC_MESSAGES if provider == "anthropic" else AnthropicMessagesAdapter(provider)
    strict = _validates_responses(client)
    message = model_restorer(Message, strict=strict)
    event = union_restorer(RawMessageStreamEvent, strict=strict)
    streams = StreamTypes(MessagesStreamAssembler, event, message, _messages_rechunk)
    return [
        _Target(
            messages,
            "create",
            ANTHROPIC_MESSAGES_NAME,
            provider,
            adapter,
            message,
            _is_async(messages),
            metadata,
            streams,
            helper="stream",
            restore_error=_ANTHROPIC_ERRORS,
        )
    ]


# -- litellm (never imported here: the module or Router given is used as it is)


def _litellm_restorer(
    module: types.ModuleType | None, name: str = "ModelResponse"
) -> Callable[[JsonValue], object]:
    """Rebuild LiteLLM's ``ModelResponse`` (or, with ``name``, its ``ModelResponseStream``)."""

    def restore(raw: JsonValue) -> object:
        litellm = module if module is not None else sys.modules.get("litellm")
        model = getattr(litellm, name, None)
        if isinstance(raw, dict) and callable(model):
            try:
                return model(**raw)
            except Exception:
                logger.debug("could not rebuild a %s", name, exc_info=True)
        return restore_plain(raw)

    return restore


def _litellm_streams(module: types.ModuleType | None) -> StreamTypes:
    """LiteLLM streams OpenAI-shaped ``ModelResponseStream`` chunks."""
    return StreamTypes(
        ChatStreamAssembler,
        _litellm_restorer(module, "ModelResponseStream"),
        _litellm_restorer(module),
        _chat_rechunk,
    )


def _litellm_targets(obj: object) -> list[_Target] | None:
    if isinstance(obj, types.ModuleType):
        if obj.__name__ != "litellm":
            return None
        owner: object = obj
        name = LITELLM_COMPLETION_NAME
        module: types.ModuleType | None = obj
    elif type(obj).__name__ == "Router":
        owner, name, module = obj, LITELLM_ROUTER_COMPLETION_NAME, None
    else:
        return None
    metadata = _client_metadata("litellm")
    restore, streams = _litellm_restorer(module), _litellm_streams(module)
    return [
        _Target(
            owner, attr, name, "litellm", LITELLM_COMPLETION, restore, is_async, metadata, streams
        )
        for attr, is_async in (("completion", False), ("acompletion", True))
        if callable(getattr(owner, attr, None))
    ]


# -- google-genai


def _gemini_targets(obj: object) -> list[_Target] | None:
    from google.genai.client import AsyncClient, Client  # optional: a google.genai object
    from google.genai.models import AsyncModels, Models  # optional, as above
    from google.genai.types import GenerateContentResponse  # optional, as above

    resources: list[object]
    if isinstance(obj, Client):
        resources = [obj.models, obj.aio.models]
    elif isinstance(obj, AsyncClient):
        resources = [obj.models]
    elif isinstance(obj, (Models, AsyncModels)):
        resources = [obj]
    else:
        return None
    api_client = getattr(resources[0], "_api_client", None)
    base_url = getattr(getattr(api_client, "_http_options", None), "base_url", None)
    if provider_of_host(base_url) == "google":
        base_url = None  # the public Gemini or Vertex AI endpoint
    metadata = _client_metadata("google-genai", base_url, module="google.genai")
    if getattr(api_client, "vertexai", False):
        metadata["client.vertexai"] = True
    response = model_restorer(GenerateContentResponse)
    streams = StreamTypes(
        gemini.GeminiStreamAssembler,
        response,  # each chunk is a GenerateContentResponse
        response,
        _gemini_rechunk,
        item_json=gemini.chunk_json,
    )
    return [
        _Target(
            resource,
            attr,
            GEMINI_GENERATE_CONTENT_NAME,  # one name: either form replays the other
            "google",
            gemini.GEMINI_GENERATE_CONTENT,
            response,
            isinstance(resource, AsyncModels),
            metadata,
            streams,
            always_streams=attr == "generate_content_stream",
            extract_input=gemini.compact_arguments,
            extract_result=gemini.response_json,
            restore_error=_gemini_error,
        )
        for resource in resources
        for attr in ("generate_content", "generate_content_stream")
    ]


def _gemini_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return gemini.response_chunks(raw)


# -- boto3 bedrock-runtime (botocore builds the client class at run time: found by its service)


def _boto_dict(raw: JsonValue) -> object:
    """A recorded boto3 response: the plain dict boto3 returns."""
    return copy.deepcopy(raw) if isinstance(raw, dict) else restore_plain(raw)


def _invoke_restorer(raw: JsonValue) -> object:
    restored = bedrock.restore_invoke_response(raw)
    return restored if restored is not None else restore_plain(raw)


def _bedrock_targets(obj: object) -> list[_Target] | None:
    meta = getattr(obj, "meta", None)
    if getattr(getattr(meta, "service_model", None), "service_name", None) != "bedrock-runtime":
        return None
    endpoint = getattr(meta, "endpoint_url", None)
    if provider_of_host(endpoint) == "bedrock":
        endpoint = None  # the public regional endpoint: the region says it
    metadata = _client_metadata("boto3", endpoint)
    region = getattr(meta, "region_name", None)
    if isinstance(region, str):
        metadata["client.region"] = region
    errors = _boto_error_restorer(getattr(obj, "exceptions", None))
    converse_streams = StreamTypes(
        bedrock.ConverseStreamAssembler,
        _boto_dict,
        _boto_dict,
        _converse_rechunk,
        item_json=None,  # plain dicts
        container="stream",
        replay_fields={"ResponseMetadata": _REPLAYED_METADATA},
    )
    invoke_streams = StreamTypes(
        bedrock.InvokeStreamAssembler,
        bedrock.restore_invoke_chunk,
        _invoke_restorer,
        _invoke_rechunk,
        item_json=bedrock.invoke_chunk_json,
        container="body",
        replay_fields={"ResponseMetadata": _REPLAYED_METADATA, "contentType": "application/json"},
    )
    converse = _Target(
        obj,
        "converse",
        BEDROCK_CONVERSE_NAME,  # converse_stream too: either form replays the other
        "bedrock",
        bedrock.BEDROCK_CONVERSE,
        _boto_dict,
        False,
        metadata,
        converse_streams,
        extract_input=dict,
        restore_error=errors,
    )
    invoke = _Target(
        obj,
        "invoke_model",
        BEDROCK_INVOKE_MODEL_NAME,  # invoke_model_with_response_stream too
        "bedrock",
        bedrock.BEDROCK_INVOKE_ANTHROPIC,
        _invoke_restorer,
        False,
        metadata,
        invoke_streams,
        accepts=bedrock.is_anthropic_body,
        extract_input=bedrock.invoke_arguments,
        prepare=bedrock.buffered_invoke_response,
        extract_result=bedrock.invoke_response_json,
        restore_error=errors,
    )
    return [
        converse,
        replace(converse, attr="converse_stream", always_streams=True),
        invoke,
        replace(
            invoke,
            attr="invoke_model_with_response_stream",
            always_streams=True,
            prepare=None,
            extract_result=None,
        ),
    ]


_REPLAYED_METADATA: dict[str, JsonValue] = {
    "HTTPStatusCode": 200,
    "HTTPHeaders": {},
    "RetryAttempts": 0,
}
"""The ``ResponseMetadata`` of a replayed boto3 stream: no request was sent, so no request id
or headers (a stream's own were not recorded)."""


def _converse_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return bedrock.converse_events(raw)


def _invoke_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return bedrock.invoke_events(raw)


# -- any other client, by its shape


def _create_of(obj: object, *path: str) -> object | None:
    """``obj.<path>`` when it has a callable ``create``, else ``None``."""
    resource: object = obj
    try:  # an arbitrary object: its attributes may be properties that raise
        for name in path:
            resource = getattr(resource, name)
        return resource if callable(getattr(resource, "create", None)) else None
    except Exception:
        return None


def _create_is_async(resource: object) -> bool:
    create = getattr(resource, "create", None)
    return _is_async(resource) or inspect.iscoroutinefunction(create)


def _shaped_targets(obj: object) -> list[_Target] | None:
    """Targets for a client of no known type that has ``chat.completions.create`` (OpenAI chat)
    or ``messages.create`` (Anthropic Messages). Its ``stream=True`` calls are recorded when
    they return an iterator (an async one for an async client) of chunks or events in that API's
    shape (SDK objects or dicts), replayed as the recorded JSON with attribute access; the
    Anthropic SDK's own clients (``AnthropicBedrock``, ``AnthropicVertex``) are recorded and
    replayed as ``anthropic.Anthropic``'s are, with ``messages.stream()``."""
    chat = _create_of(obj, "chat", "completions")
    messages = _create_of(obj, "messages")
    if chat is None and messages is None:
        return None
    base_url = next(
        (url for url in (getattr(obj, a, None) for a in ("base_url", "api_base")) if url), None
    )
    provider = provider_of_client(obj, base_url)
    library = (type(obj).__module__ or "").partition(".")[0]
    metadata = _client_metadata(library, base_url)
    targets: list[_Target] = []
    if chat is not None:
        restore: Callable[[JsonValue], object] = restore_plain
        chunk: Callable[[JsonValue], object] = restore_plain
        if library == "openai":
            from openai.types.chat import (  # optional: an openai object
                ChatCompletion,
                ChatCompletionChunk,
            )

            restore = model_restorer(ChatCompletion, strict=_validates_responses(obj))
            chunk = model_restorer(ChatCompletionChunk, strict=_validates_responses(obj))
        chat_streams = StreamTypes(ChatStreamAssembler, chunk, restore, _chat_rechunk)
        adapter: LlmAdapter = OpenAIChatAdapter(provider)
        chat_async = _create_is_async(chat)
        targets.append(
            _Target(
                chat,
                "create",
                OPENAI_CHAT_NAME,
                provider,
                adapter,
                restore,
                chat_async,
                metadata,
                chat_streams,
            )
        )
    if messages is not None:
        adapter = AnthropicMessagesAdapter(provider)
        messages_async = _create_is_async(messages)
        if library == "anthropic":
            from anthropic.types import (  # optional: an anthropic client
                Message,
                RawMessageStreamEvent,
            )

            message = model_restorer(Message, strict=_validates_responses(obj))
            event = union_restorer(RawMessageStreamEvent, strict=_validates_responses(obj))
            streams = StreamTypes(MessagesStreamAssembler, event, message, _messages_rechunk)
            targets.append(
                _Target(
                    messages,
                    "create",
                    ANTHROPIC_MESSAGES_NAME,
                    provider,
                    adapter,
                    message,
                    messages_async,
                    metadata,
                    streams,
                    helper="stream",
                )
            )
        else:
            plain_streams = StreamTypes(
                MessagesStreamAssembler, restore_plain, restore_plain, _messages_rechunk
            )
            targets.append(
                _Target(
                    messages,
                    "create",
                    ANTHROPIC_MESSAGES_NAME,
                    provider,
                    adapter,
                    restore_plain,
                    messages_async,
                    metadata,
                    plain_streams,
                )
            )
    return targets


# -- langchain


def _langchain_targets(obj: object) -> list[_Target] | None:
    clients = [getattr(obj, attr, None) for attr in ("root_client", "root_async_client")]
    found = [c for c in clients if c is not None and _library_of(c) == "openai"]
    if not found:
        return None
    targets: list[_Target] = []
    for client in found:
        targets.extend(_openai_targets(client) or ())
    return targets


_FINDERS: Mapping[str, Callable[[object], list[_Target] | None]] = {
    "openai": _openai_targets,
    "anthropic": _anthropic_targets,
    "litellm": _litellm_targets,
    "langchain_openai": _langchain_targets,
    "google.genai": _gemini_targets,
    "botocore": _bedrock_targets,
}
"""The target finder of each library (``_library_of``); a client no finder takes is tried by its
shape."""


def _unknown_client_message(client: object) -> str:
    kind = type(client)
    what = f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(client, type):
        what = f"the class {client.__module__}.{client.__qualname__} (pass an instance)"
    elif isinstance(client, types.ModuleType):
        what = f"the module {client.__name__}"
    return (
        f"chronicle.wrap does not know how to wrap {what}. It wraps openai.OpenAI, "
        "openai.AsyncOpenAI, openai.AzureOpenAI, openai.AsyncAzureOpenAI, anthropic.Anthropic, "
        "anthropic.AsyncAnthropic, google.genai.Client, a boto3 bedrock-runtime client, the "
        "litellm module, a litellm.Router, the resources client.chat.completions, "
        "client.responses, client.messages and client.models, LangChain's ChatOpenAI, and any "
        "client with chat.completions.create (OpenAI-compatible) or messages.create "
        "(Anthropic-style). For any other client, wrap the function that calls the model with "
        'chronicle.wrap_llm("my_model", fn, provider=...) or decorate it with '
        '@chronicle.boundary("my_model", kind="llm").'
    )


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
    """The recorded output: the SDK object itself, or a raw response's parsed body."""
    if not _is_raw_response(result):
        return result
    parsed = cast(Any, result).parse()  # the SDK caches it: the caller's parse() reuses it
    if inspect.isawaitable(parsed):  # an SDK whose parse() is async: not recordable here
        close = getattr(parsed, "close", None)
        if callable(close):
            close()
        return result
    return parsed


def _mode(kwargs: Mapping[str, object]) -> Mode:
    flag = raw_flag(kwargs)
    if flag is None:
        return "record"
    return "streaming" if flag == "stream" else "raw"


def _stubbed(result: object) -> bool:
    """A raw-response call got a replay stub (an SDK model, recorded JSON, a replayed stream)."""
    return isinstance(result, (BaseModel, dict, ReplayedStream, AsyncReplayedStream))


def _stub_response(mode: Mode, result: object, is_async: bool) -> object:
    """What a stubbed raw-response call returns in place of the SDK's response object."""
    if mode == "raw":
        return RecordedRawResponse(result)
    if is_async:
        return AsyncRecordedStreamingResponse(result)
    return RecordedStreamingResponse(result)


def _install(target: _Target) -> bool:
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
    method = make(original, recorded, target.accepts)
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


def _install_stream_helper(target: _Target, flavor: Flavor) -> None:
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
    original: Callable[..., Any], recorded: Callable[..., Any], accepts: Accepts = None
) -> Callable[..., Any]:
    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        if _IN_SDK_CALL.get() or (accepts is not None and not accepts(kwargs)):
            return original(*args, **kwargs)
        mode = _mode(kwargs)
        result = recorded(*args, **kwargs)
        if mode != "record" and _stubbed(result):
            return _stub_response(mode, result, is_async=False)
        return result

    return method


def _async_method(
    original: Callable[..., Any], recorded: Callable[..., Any], accepts: Accepts = None
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def method(*args: Any, **kwargs: Any) -> Any:
        if _IN_SDK_CALL.get() or (accepts is not None and not accepts(kwargs)):
            return await original(*args, **kwargs)
        mode = _mode(kwargs)
        result = await recorded(*args, **kwargs)
        if mode != "record" and _stubbed(result):
            return _stub_response(mode, result, is_async=True)
        return result

    return method
