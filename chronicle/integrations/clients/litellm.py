"""LiteLLM: ``completion``/``acompletion`` of the ``litellm`` module or of a ``Router``. The
module is never imported here: the module or Router given is used as it is. The JSON is
OpenAI chat's, read by ``chronicle.llm.litellm``."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Callable

from pydantic import JsonValue

from chronicle.integrations.clients.openai import chat_rechunk
from chronicle.integrations.clients.streams import StreamTypes
from chronicle.integrations.clients.target import Target, client_metadata
from chronicle.llm.litellm import LITELLM_COMPLETION
from chronicle.llm.openai_streams import ChatStreamAssembler
from chronicle.replay.recorded import restore_plain

logger = logging.getLogger("chronicle")

LITELLM_COMPLETION_NAME = "litellm.completion"
"""Boundary name of ``litellm.completion`` and ``litellm.acompletion``."""
LITELLM_ROUTER_COMPLETION_NAME = "litellm.router.completion"
"""Boundary name of ``Router.completion`` and ``Router.acompletion``."""


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
        chat_rechunk,
    )


def litellm_targets(obj: object) -> list[Target] | None:
    """The ``litellm`` module's or a ``Router``'s ``completion``/``acompletion``; ``None`` for
    another object."""
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
    metadata = client_metadata("litellm")
    restore, streams = _litellm_restorer(module), _litellm_streams(module)
    return [
        Target(
            owner=owner,
            attr=attr,
            name=name,
            provider="litellm",
            adapter=LITELLM_COMPLETION,
            restore=restore,
            is_async=is_async,
            metadata=metadata,
            streams=streams,
        )
        for attr, is_async in (("completion", False), ("acompletion", True))
        if callable(getattr(owner, attr, None))
    ]
