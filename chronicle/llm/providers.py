"""Who serves a call made through a client Chronicle does not know by type.

An OpenAI- or Anthropic-*shaped* client (a gateway's SDK, another vendor's OpenAI-compatible
client, a small home-made one) is recorded with the adapter of the API it speaks; its
``provider`` is what the client itself names:

1. its base URL's host, when it is a known provider's API host (``api.groq.com`` is ``groq``,
   ``bedrock-runtime.<region>.amazonaws.com`` is ``bedrock``, ...);
2. else its package, when it is a known provider's SDK (``groq``, ``mistralai``, ...; the
   Anthropic SDK's Bedrock and Vertex clients are ``bedrock`` and ``google``);
3. else ``unknown``. An unknown host (a gateway of your own, a local server) is not guessed
   from: the host is recorded as the envelope's ``client.base_url`` metadata instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from agentplane_primitives.types import UNKNOWN_PROVIDER

__all__ = ["PROVIDER_HOSTS", "PROVIDER_PACKAGES", "provider_of_client", "provider_of_host"]

PROVIDER_HOSTS: Mapping[str, str] = {
    "api.openai.com": "openai",
    "openai.azure.com": "azure",
    "services.ai.azure.com": "azure",
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "google",
    "aiplatform.googleapis.com": "google",
    "bedrock-runtime.amazonaws.com": "bedrock",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral",
    "api.together.xyz": "together",
    "api.together.ai": "together",
    "api.fireworks.ai": "fireworks",
    "api.deepseek.com": "deepseek",
    "api.x.ai": "xai",
    "api.perplexity.ai": "perplexity",
    "openrouter.ai": "openrouter",
    "api.cerebras.ai": "cerebras",
    "api.cohere.com": "cohere",
    "api.cohere.ai": "cohere",
    "integrate.api.nvidia.com": "nvidia",
    "api.deepinfra.com": "deepinfra",
    "api.moonshot.ai": "moonshot",
}
"""API hosts and the provider each one is. A host matches itself and its subdomains; a regional
host matches too (``bedrock-runtime.us-east-1.amazonaws.com``,
``us-east5-aiplatform.googleapis.com``)."""

PROVIDER_PACKAGES: Mapping[str, str] = {
    "anthropic.lib.bedrock": "bedrock",
    "anthropic.lib.vertex": "google",
    "openai": "openai",
    "anthropic": "anthropic",
    "groq": "groq",
    "mistralai": "mistral",
    "together": "together",
    "fireworks": "fireworks",
    "cerebras": "cerebras",
    "cohere": "cohere",
    "xai_sdk": "xai",
    "portkey_ai": "portkey",
}
"""Packages of provider SDKs (a package matches itself and its modules; the longest match wins)
and the provider each one is."""


def _regionless(host: str) -> str:
    """``host`` without its region: ``bedrock-runtime.us-east-1.amazonaws.com`` is
    ``bedrock-runtime.amazonaws.com``, ``us-east5-aiplatform.googleapis.com`` is
    ``aiplatform.googleapis.com``."""
    labels = host.split(".")
    if host.endswith(".amazonaws.com") and len(labels) == 4:
        return ".".join((labels[0], *labels[2:]))
    if host.endswith(".googleapis.com") and labels[0].endswith("-aiplatform"):
        return ".".join(("aiplatform", *labels[1:]))
    return host


def provider_of_host(url: object) -> str | None:
    """The provider whose API host ``url`` names, or ``None`` for any other host."""
    try:
        host = (urlsplit(str(url)).hostname or "").lower().rstrip(".")
    except ValueError:
        return None
    host = _regionless(host)
    for known, provider in PROVIDER_HOSTS.items():
        if host == known or host.endswith("." + known):
            return provider
    return None


def provider_of_client(client: object, base_url: object = None) -> str:
    """The provider of a shape-detected ``client``: by ``base_url``'s host, else by the package
    its type comes from, else ``unknown``."""
    if base_url is not None:
        by_host = provider_of_host(base_url)
        if by_host is not None:
            return by_host
    for base in type(client).__mro__:
        module = getattr(base, "__module__", None) or ""
        for package in _BY_LENGTH:
            if module == package or module.startswith(package + "."):
                return PROVIDER_PACKAGES[package]
    return UNKNOWN_PROVIDER


_BY_LENGTH = sorted(PROVIDER_PACKAGES, key=len, reverse=True)
