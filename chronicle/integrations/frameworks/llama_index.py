"""LlamaIndex: ``chronicle.instrument_llama_index()``.

- Every ``FunctionTool`` call (``call``, ``acall`` and ``__call__``: what ``FunctionAgent``,
  ``ReActAgent``, ``AgentWorkflow`` and a direct ``tool.call(...)`` use; a plain function given
  as a tool is made one) is a ``tool`` boundary named after the tool
  (``tool.metadata.get_name()``), its input the keyword arguments by name. A tool that takes the
  workflow's ``Context`` gets it as before; it is left out of the input (``chronicle.left_out``).
  The output is the ``ToolOutput`` the tool returned, rebuilt as one in a replay, so the agent
  reads the recorded content without the tool running.
- The OpenAI LLM (``llama_index.llms.openai.OpenAI``, so ``OpenAILike`` and the Azure one too)
  builds its ``openai`` client lazily; the client it builds is wrapped (``chronicle.wrap``), so
  its chat calls, streamed (``FunctionAgent``'s default) or not, are ``llm`` boundaries named
  ``openai.chat.completions.create``. A client given to the LLM (``openai_client=``) is wrapped
  the same way when the LLM first uses it.
"""

from __future__ import annotations

from typing import Any

from chronicle.integrations.frameworks.clients import wrap_once
from chronicle.integrations.frameworks.patching import (
    Instrumentation,
    call_tool,
    call_tool_async,
    is_boundary,
)

__all__ = ["instrument", "uninstrument"]

_FRAMEWORK = "llama-index"
_instrumentation = Instrumentation(
    "llama_index.core", "llama-index-core", label="LlamaIndex", name="llama_index"
)


def _split(tool: Any, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool's own arguments, and what the framework passes besides (its ``Context``)."""
    name = (
        getattr(tool, "ctx_param_name", None) if getattr(tool, "requires_context", False) else None
    )
    if name is None or name not in kwargs:
        return dict(kwargs), {}
    arguments = {key: value for key, value in kwargs.items() if key != name}
    return arguments, {name: kwargs[name]}


def _own_function(tool: Any) -> bool:
    """Whether the tool's function records itself (``@chronicle.boundary`` under the tool)."""
    return is_boundary(getattr(tool, "_fn", None)) or is_boundary(getattr(tool, "_async_fn", None))


def _call(original: Any) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or _own_function(self):
            return original(self, *args, **kwargs)
        arguments, context = _split(self, kwargs)
        return call_tool(
            self.metadata.get_name(),
            arguments,
            lambda given: original(self, **given, **context),
            framework=_FRAMEWORK,
            left_out=tuple(context),
        )

    return call


def _acall(original: Any) -> Any:
    async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or _own_function(self):
            return await original(self, *args, **kwargs)
        arguments, context = _split(self, kwargs)
        return await call_tool_async(
            self.metadata.get_name(),
            arguments,
            lambda given: original(self, **given, **context),
            framework=_FRAMEWORK,
            left_out=tuple(context),
        )

    return acall


def _wrapped_client(original: Any) -> Any:
    def get_client(self: Any) -> Any:
        client = original(self)
        wrap_once(client, "a LlamaIndex OpenAI LLM")
        return client

    return get_client


def instrument() -> None:
    """Record LlamaIndex's tool calls and OpenAI LLM calls (see the module docstring)."""
    with _instrumentation.lock:
        if not _instrumentation.begin():
            return
        from llama_index.core.tools.function_tool import FunctionTool  # optional: the framework

        _instrumentation.patch(FunctionTool, "call", _call)
        _instrumentation.patch(FunctionTool, "acall", _acall)
        try:
            from llama_index.llms.openai import OpenAI  # optional: the framework
        except ImportError:  # the OpenAI LLM integration is a package of its own
            return
        _instrumentation.patch(OpenAI, "_get_client", _wrapped_client)
        _instrumentation.patch(OpenAI, "_get_aclient", _wrapped_client)


def uninstrument() -> None:
    """Undo ``instrument()``: tools and clients built afterwards are left as they are."""
    _instrumentation.undo()
