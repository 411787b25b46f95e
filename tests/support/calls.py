"""What the client tests send, and the names Chronicle records the wrapped SDK calls under.

The tests of ``chronicle.wrap`` over the real ``openai`` and ``anthropic`` clients ask
``LlmServer`` the same question and look for the same boundary names in the saved envelopes.
"""

from __future__ import annotations

from typing import Any

CHAT = "openai.chat.completions.create"
"""The boundary name of an OpenAI Chat Completions call."""
RESPONSES = "openai.responses.create"
"""The boundary name of an OpenAI Responses call."""
MESSAGES = "anthropic.messages.create"
"""The boundary name of an Anthropic Messages call."""

USER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
"""The one user message the tests send (``Any``: both SDKs' message types accept it)."""


def buckets(
    *, input: int, output: int, cached_read: int = 0, cache_write: int = 0, reasoning: int = 0
) -> dict[str, int]:
    """The ``usage`` a saved model envelope holds: all five token buckets, the unnamed ones 0."""
    return {
        "input": input,
        "cached_read": cached_read,
        "cache_write": cache_write,
        "output": output,
        "reasoning": reasoning,
    }


def client_of(envelope: dict[str, Any]) -> tuple[str, str, str]:
    """The client a saved model envelope says made the call: its library, that library's
    version and the base URL it was pointed at."""
    metadata = envelope["metadata"]
    return metadata["client.library"], metadata["client.version"], metadata["client.base_url"]


def recorded_tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """The part of a saved model envelope's ``content`` for one tool call the model asked for."""
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}
