"""Google ADK: ``chronicle.instrument_google_adk()``.

- Every ``FunctionTool`` run (``run_async``: what an ``LlmAgent`` does for each function call
  the model makes; a plain function given as a tool is made one) is a ``tool`` boundary named
  after the tool, its input the arguments the model gave, by name. The ``ToolContext`` ADK
  passes is left out of the input (``chronicle.left_out: ["tool_context"]``) and handed to the
  tool as before. The output is what ``run_async`` returned (the function's result, or the
  error dict ADK gives the model for missing arguments).
- The Gemini model (``google.adk.models.Gemini``, what ``model="gemini-..."`` builds) makes its
  ``google.genai.Client`` lazily, once per event loop; each client it makes is wrapped
  (``chronicle.wrap``), so its calls are ``llm`` boundaries named
  ``genai.models.generate_content`` (streamed or not).
"""

from __future__ import annotations

from typing import Any

from chronicle.integrations.frameworks.clients import wrap_once
from chronicle.integrations.frameworks.patching import (
    Instrumentation,
    call_tool_async,
    is_boundary,
)

__all__ = ["instrument", "uninstrument"]

_FRAMEWORK = "google-adk"
_instrumentation = Instrumentation(
    "google.adk", "google-adk", label="Google ADK", name="google_adk"
)


def _run_async(original: Any) -> Any:
    async def run_async(self: Any, *, args: dict[str, Any], tool_context: Any) -> Any:
        if is_boundary(getattr(self, "func", None)) or not isinstance(args, dict):
            return await original(self, args=args, tool_context=tool_context)
        return await call_tool_async(
            self.name,
            args,
            lambda given: original(self, args=given, tool_context=tool_context),
            framework=_FRAMEWORK,
            left_out=("tool_context",),
        )

    return run_async


def _api_client(original: Any) -> Any:
    def api_client(self: Any) -> Any:
        client = original.__get__(self, type(self))
        wrap_once(client, "an ADK Gemini model")
        return client

    return property(api_client, doc=getattr(original, "__doc__", None))


def instrument() -> None:
    """Record ADK's tool runs and Gemini calls (see the module docstring)."""
    with _instrumentation.lock:
        if not _instrumentation.begin():
            return
        from google.adk.models.google_llm import Gemini  # optional: the framework
        from google.adk.tools.function_tool import FunctionTool  # optional: the framework

        _instrumentation.patch(FunctionTool, "run_async", _run_async)
        _instrumentation.patch(Gemini, "api_client", _api_client)


def uninstrument() -> None:
    """Undo ``instrument()``: a client already wrapped stays wrapped."""
    _instrumentation.undo()
