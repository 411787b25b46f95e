"""What ``wrap`` installs, described: a ``Target`` (one SDK method of one client object and how
it is recorded and rebuilt), and what every SDK's target finder shares: the client's library and
version, its non-default base URL, whether a resource is async. A recorded failure is rebuilt
as the SDK's own exception by ``recording/failure.py``, beside what records it."""

from __future__ import annotations

import importlib.metadata
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from chronicle.integrations.clients.streams import StreamTypes
from chronicle.llm.canonical import LlmAdapter
from chronicle.recording.failure import RestoreError
from chronicle.redaction import public_url

# ---- what to wrap -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Target:
    """One SDK method of one client object, and how its calls are recorded and rebuilt; built
    by keyword (its fields are many, and several of one type)."""

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
