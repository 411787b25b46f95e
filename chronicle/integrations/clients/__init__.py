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
- **Output**: the JSON form of the SDK's return value (``model_dump(mode="json")``; for the
  openai and anthropic SDKs' types, the fields the server sent under their wire names, as
  ``model_dump(mode="json", exclude_unset=True, by_alias=True)`` gives them, so a replay
  rebuilds the object with the same fields set); the canonical fields come from the provider's
  adapter (``chronicle.llm.openai``, ``.anthropic``, ``.litellm``). A provider error is recorded
  as a failure whose ``output.error.type`` is the SDK exception's class name
  (``BadRequestError``, ``RateLimitError``, ...), and the caller gets the SDK's exception
  unchanged.
- **Metadata** (static client identity): ``client.library`` (``openai``, ``anthropic``,
  ``litellm``), ``client.version`` (the SDK's version), ``client.base_url`` when it is not the
  provider's public default (scheme, host, port and path only: no user info, query or fragment),
  and for Azure ``client.api_version``.
- **Streams** (``stream=True``, the ``.stream(...)`` helpers, ``with_streaming_response``,
  Gemini's ``generate_content_stream``, boto3's ``converse_stream`` and
  ``invoke_model_with_response_stream``) are one envelope each, with the assembled response,
  sent when the stream ends; see ``chronicle.integrations.clients.streams``.
- **Not recorded** (passed straight to the SDK, during replays too): anything the SDK does not
  route through ``create``/``completion``/``generate_content``/``converse`` (``parse``, ``beta``
  resources, ``responses.stream(response_id=...)``); ``invoke_model`` (and its stream) with a
  body that is not Anthropic's.
- Gemini: pydantic arguments are recorded without their ``None`` fields and without
  ``config.http_options``; the output leaves out ``sdk_http_response`` (transport headers).
  Bedrock: the arguments and the dict boto3 returns as they are; for ``invoke_model`` the body
  is recorded as parsed JSON, and the caller gets a ``StreamingBody`` that reads as before.
- ``with_raw_response.create(...)`` (non-streaming) *is* recorded, because frameworks use it for
  ordinary calls (LangChain's ``ChatOpenAI``, CrewAI): the envelope holds the parsed body, the
  caller gets the SDK's raw response unchanged, and a replay stub returns one shaped like the
  SDK's (``RecordedRawResponse`` for openai's ``LegacyAPIResponse``, ``RecordedAPIResponse``
  and its async twin for anthropic's; see ``raw.py``): ``parse()`` gives the recorded SDK
  object, ``http_response`` is a 200 response whose body is the recorded one (the live headers
  are not recorded: ``request_id`` is ``None``).
- One model call makes one envelope: a wrapped method called while another wrapped method is
  running its SDK call (a ``litellm.Router`` calling a wrapped ``litellm.completion``, say) passes
  through unrecorded.

Replay
======

A stubbed call returns the SDK's own type rebuilt from ``output.raw``: ``ChatCompletion``,
``Response``, anthropic ``Message``, LiteLLM ``ModelResponse``, Gemini
``GenerateContentResponse``, and for Bedrock the dict boto3 returns (``invoke_model``'s ``body``
a ``StreamingBody``). Replay is never stricter than the SDK: a recording that does not validate
as the type is built the way the SDK builds a response from the wire (``streams.
model_restorer``), so what the live SDK accepted (an OpenAI-compatible server's completion
without ``created``, a field a newer google-genai added) replays; only a recording that is not
rebuildable at all (not a JSON object, a text where the type has a list) raises ``ReplayError``
naming the envelope. A recorded failure is raised as the SDK's own exception, built from what
was recorded (``recording/failure.py`` holds both: ``failure_detail`` and each SDK's rebuilder):
``openai``/``anthropic`` status, connection and stream errors, google-genai
``ClientError``/``ServerError``/``APIError``, and botocore's ``ClientError``, the client's
modeled class (``client.exceptions.ThrottlingException``) or ``EventStreamError``; so the
agent's own ``except`` clauses run. A client detected by shape whose types Chronicle does not
know gets the recorded JSON with attribute access (``resp.choices[0].message.content``). A
stubbed streamed call returns a stream of the SDK's own chunk or event types (for boto3, the
response dict around the replayed event dicts). A stub makes no HTTP request.

The package
===========

One module per SDK finds that SDK's methods on a client and says how each is recorded and
rebuilt (a ``Target``): ``openai`` (with LangChain's ``ChatOpenAI``), ``anthropic``, ``litellm``,
``gemini``, ``bedrock``, and ``shaped`` for any other client by its shape. ``target`` holds what
they share, ``install`` puts the recording wrappers in place, ``streams`` records and replays the
SDKs' streams. Supporting one more SDK is a pair of files: ``chronicle/llm/<sdk>.py`` reads its
JSON (and ``chronicle/llm/<sdk>_streams.py`` folds its stream, if it has one),
``chronicle/integrations/clients/<sdk>.py`` finds and installs.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import TypeVar

from chronicle.integrations.clients.anthropic import ANTHROPIC_MESSAGES_NAME, anthropic_targets
from chronicle.integrations.clients.bedrock import (
    BEDROCK_CONVERSE_NAME,
    BEDROCK_INVOKE_MODEL_NAME,
    bedrock_targets,
)
from chronicle.integrations.clients.gemini import GEMINI_GENERATE_CONTENT_NAME, gemini_targets
from chronicle.integrations.clients.install import install
from chronicle.integrations.clients.litellm import (
    LITELLM_COMPLETION_NAME,
    LITELLM_ROUTER_COMPLETION_NAME,
    litellm_targets,
)
from chronicle.integrations.clients.openai import (
    OPENAI_CHAT_NAME,
    OPENAI_RESPONSES_NAME,
    langchain_targets,
    openai_targets,
)
from chronicle.integrations.clients.raw import RecordedRawResponse
from chronicle.integrations.clients.shaped import shaped_targets
from chronicle.integrations.clients.target import Target, library_of

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

T = TypeVar("T")


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
        install(target)
    return client


def _targets(client: object) -> list[Target] | None:
    if isinstance(client, type):
        return None
    finder = _FINDERS.get(library_of(client) or "")
    found = finder(client) if finder is not None else None
    return found if found is not None else shaped_targets(client)


_FINDERS: Mapping[str, Callable[[object], list[Target] | None]] = {
    "openai": openai_targets,
    "anthropic": anthropic_targets,
    "litellm": litellm_targets,
    "langchain_openai": langchain_targets,
    "google.genai": gemini_targets,
    "botocore": bedrock_targets,
}
"""The target finder of each library (``library_of``); a client no finder takes is tried by its
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
