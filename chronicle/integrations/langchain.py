"""LangChain values: messages recorded and given back through LangChain's own serialization.

A LangChain message (``AIMessage``, ``ToolMessage``, ``HumanMessage``, their chunks, ...) that a
boundary returns, a LangGraph node's update say, is recorded as the ``data`` half of
``langchain_core.messages.message_to_dict`` (every field, ``type`` included: the same JSON as
before this codec) and described as ``"langchain.message"`` (``wire.OUTPUT_TYPES``). A replay
rebuilds it with ``messages_from_dict``, so the stub returns the message the live call returned:
its class, ``id``, ``content``, ``tool_calls``, ``usage_metadata``, ``response_metadata`` and
``additional_kwargs`` as they were, where rebuilding it from a dict by hand (what LangGraph does
with a plain dict) moves fields around.

Only the message classes of ``langchain_core.messages`` are claimed; a subclass of your own, or
any other LangChain object (a ``Document``), is a pydantic model and goes through the pydantic
codec. Importing this module imports nothing of LangChain: ``claims`` looks at the type's module
first, and LangChain is imported only for a value that comes from it (so it is installed).
"""

from __future__ import annotations

from chronicle.recording.codecs import Codec, register

__all__ = ["LangChainMessages"]

_MESSAGES = "langchain_core.messages"


class LangChainMessages(Codec):
    """The ``langchain.message`` codec (registered when ``chronicle`` is imported)."""

    name = "langchain.message"

    def claims(self, cls: type) -> bool:
        """A message class of ``langchain_core.messages``."""
        if not cls.__module__.startswith(_MESSAGES):
            return False
        from langchain_core.messages import BaseMessage  # optional: langchain is installed

        return issubclass(cls, BaseMessage)

    def encode(self, value: object) -> object:
        """The message's fields, as ``message_to_dict`` gives them (with its ``type``)."""
        from langchain_core.messages import BaseMessage, message_to_dict  # optional, as above

        assert isinstance(value, BaseMessage)
        return message_to_dict(value)["data"]

    def decode(self, value: object, cls: type | None) -> object:
        """The message ``messages_from_dict`` rebuilds from the recorded fields."""
        from langchain_core.messages import messages_from_dict  # optional: only for a replay

        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise TypeError("expected a message's fields with its type")
        return messages_from_dict([{"type": value["type"], "data": value}])[0]


register(LangChainMessages())
