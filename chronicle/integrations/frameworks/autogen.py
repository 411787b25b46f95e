"""AutoGen AgentChat: every tool run a ``tool`` boundary, every OpenAI model client wrapped.

``instrument()`` patches two places of ``autogen-core``/``autogen-ext``, process-wide:

- ``BaseTool.run_json``, which an ``AssistantAgent`` reaches through its workbench for every
  tool it was given (a ``FunctionTool``, a plain function AutoGen made one, a handoff) and which
  ``ToolAgent`` calls too. Each run is the ``tool`` boundary named after ``tool.name``, recorded
  with the arguments the model gave, by name, and the tool's return value (before AutoGen turns
  it into text, so a replayed result is turned into text as a live one is). The
  ``CancellationToken`` and the model's ``call_id`` stay in the run, unrecorded; the envelope's
  ``chronicle.left_out`` names them.
- ``BaseOpenAIChatCompletionClient.__init__`` (and unpickling): the ``AsyncOpenAI`` or
  ``AsyncAzureOpenAI`` client an ``OpenAIChatCompletionClient`` or
  ``AzureOpenAIChatCompletionClient`` builds is wrapped by ``chronicle.wrap``, so each model
  call is an ``llm`` boundary. Clients built before ``instrument()`` stay unwrapped.

A ``FunctionTool`` whose function is already a ``@chronicle.boundary`` records itself and is
left alone. Streaming tools (``run_json_stream``: ``AgentTool``, ``TeamTool``) and tools reached
through an MCP workbench are not covered here (``instrument_mcp()`` records MCP tools).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from chronicle.integrations.frameworks.clients import wrap_once
from chronicle.integrations.frameworks.patching import Instrumentation, call_tool_async, is_boundary

__all__ = ["instrument", "uninstrument"]

FRAMEWORK = "autogen"
LEFT_OUT = ("cancellation_token", "call_id")
"""``run_json``'s parameters that are AutoGen's, not the tool's: never recorded."""


_inst = Instrumentation(
    "autogen_agentchat",
    "autogen-agentchat 'autogen-ext[openai]'",
    label="AutoGen AgentChat",
    name="autogen",
)


def instrument() -> None:
    """Make every AutoGen tool run a ``tool`` boundary and wrap each OpenAI model client's SDK
    client when it is built.

    Idempotent and process-wide; raises a one-line ``ImportError`` naming ``autogen-agentchat``
    when it is not installed. Call it before building the model client. Without
    ``autogen-ext[openai]`` only the tools are recorded.
    """
    with _inst.lock:
        if not _inst.begin():
            return
        from autogen_core.tools import BaseTool  # type: ignore[import-not-found,unused-ignore]

        _inst.patch(BaseTool, "run_json", _run_json)
        try:
            from autogen_ext.models import (  # type: ignore[import-not-found,unused-ignore]
                openai as models,
            )
        except ImportError:  # autogen-ext[openai] is not installed: no OpenAI client to wrap
            return
        _inst.patch(models.BaseOpenAIChatCompletionClient, "__init__", _client_init)
        for name in ("OpenAIChatCompletionClient", "AzureOpenAIChatCompletionClient"):
            owner = getattr(models, name, None)
            if owner is not None:
                _inst.patch(owner, "__setstate__", _client_setstate, optional=True)


def uninstrument() -> None:
    """Undo ``instrument()``: tools run unrecorded again and new model clients keep their SDK
    client as built (one already wrapped stays wrapped)."""
    _inst.undo()


def _run_json(original: Any) -> Any:
    @functools.wraps(original)
    async def run_json(
        self: Any, args: Mapping[str, Any], cancellation_token: Any, *rest: Any, **more: Any
    ) -> Any:
        name = getattr(self, "name", None)
        if (
            not isinstance(name, str)
            or not isinstance(args, Mapping)
            or is_boundary(getattr(self, "_func", None))
        ):
            return await original(self, args, cancellation_token, *rest, **more)

        async def run(given: dict[str, Any]) -> Any:
            return await original(self, given, cancellation_token, *rest, **more)

        return await call_tool_async(name, args, run, framework=FRAMEWORK, left_out=LEFT_OUT)

    return run_json


def _client_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _wrap_client(self)

    return __init__


def _client_setstate(original: Any) -> Any:
    @functools.wraps(original)
    def __setstate__(self: Any, state: Any) -> None:
        original(self, state)
        _wrap_client(self)

    return __setstate__


def _wrap_client(model_client: object) -> None:
    """Wrap the ``openai`` SDK client an AutoGen model client holds; leave anything else."""
    client = getattr(model_client, "_client", None)
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        return
    wrap_once(client, "an AutoGen model client")
