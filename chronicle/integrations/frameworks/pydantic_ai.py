"""``chronicle.instrument_pydantic_ai()``: Pydantic AI's function tools and OpenAI models, recorded.

Tools: every function tool (``@agent.tool``, ``@agent.tool_plain``, ``Tool(...)``, ``tools=[...]``,
a ``FunctionToolset``) runs through ``FunctionToolset.call_tool``, which this module wraps: each
run is a ``tool`` boundary named after the tool (``get_weather``), recorded with the arguments
Pydantic AI validated (the tool's own, by name) and the tool's return value. The ``RunContext`` an
``@agent.tool`` function takes is never recorded (its parameter name is listed in the envelope's
``chronicle.left_out``), so a strict replay of unchanged code needs no ``ignore=``. In a replay a
stubbed tool returns its recording and its function is not called; a ``ModelRetry`` (or any
exception) a tool raises is recorded as a failure. A tool whose function is already a
``@chronicle.boundary`` records itself and is left alone.

Models: ``OpenAIChatModel`` and ``OpenAIResponsesModel`` reach their ``AsyncOpenAI`` client
through their ``client`` property (the provider's: ``OpenAIProvider(base_url=..., api_key=...)``,
``'openai:gpt-4o'``, or any OpenAI-compatible provider); this module wraps the client it returns
with ``chronicle.wrap`` (in place, once), and the per-request copy Pydantic AI makes when
``ModelSettings['max_retries']`` is set. Model calls are then ``llm`` boundaries named
``openai.chat.completions.create`` or ``openai.responses.create``. Without the ``openai``
package only the tools are instrumented.

``uninstrument()`` puts Pydantic AI's methods back; a client already wrapped stays wrapped
(``chronicle.wrap`` has no undo): its calls stay recorded, as if the user had wrapped it.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from chronicle.integrations.frameworks.clients import wrap_once
from chronicle.integrations.frameworks.patching import (
    Instrumentation,
    call_tool_async,
    is_boundary,
)

__all__ = ["instrument", "uninstrument"]

FRAMEWORK = "pydantic-ai"

_instrumentation = Instrumentation(
    "pydantic_ai", "pydantic-ai", label="Pydantic AI", name="pydantic_ai"
)

_context_parameters: weakref.WeakKeyDictionary[Callable[..., Any], tuple[str, ...]] = (
    weakref.WeakKeyDictionary()
)


def instrument() -> None:
    """Record every function tool run and the OpenAI models' client; idempotent.

    Raises a one-line ``ImportError`` naming ``pydantic-ai`` when it is not installed.
    """
    inst = _instrumentation
    with inst.lock:
        if not inst.begin():
            return
        # optional package, imported when instrumented (begin() checked it is there)
        from pydantic_ai.toolsets.function import FunctionToolset

        try:
            inst.patch(FunctionToolset, "call_tool", _call_tool_recorded)
            _patch_openai_models(inst)
        except BaseException:
            inst.undo()
            raise


def uninstrument() -> None:
    """Undo ``instrument()``: tools run unrecorded again and model clients are not wrapped."""
    _instrumentation.undo()


def _patch_openai_models(inst: Instrumentation) -> None:
    try:
        # optional: Pydantic AI's OpenAI models need the openai package as well
        from pydantic_ai.models.openai import _chat_model, _responses_model
    except ImportError:  # no openai package: Pydantic AI's other models are not wrapped here
        return
    for module, model in (
        (_chat_model, _chat_model.OpenAIChatModel),
        (_responses_model, _responses_model.OpenAIResponsesModel),
    ):
        inst.patch(model, "client", _client_wrapped)
        # The copy of the client a request with ``max_retries`` goes through is a new client.
        inst.patch(module, "with_max_retries", _copy_wrapped, optional=True)


def _call_tool_recorded(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def call_tool(
        self: Any, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any
    ) -> Any:
        schema = getattr(getattr(tool, "call_func", None), "__self__", None)
        function = getattr(schema, "function", None)
        if is_boundary(function) or not isinstance(tool_args, dict):
            return await original(self, name, tool_args, ctx, tool)

        async def run(arguments: dict[str, Any]) -> Any:
            return await original(self, name, arguments, ctx, tool)

        return await call_tool_async(
            name,
            tool_args,
            run,
            framework=FRAMEWORK,
            left_out=_context_parameter(schema, function),
        )

    return call_tool


def _context_parameter(schema: object, function: object) -> tuple[str, ...]:
    """The name of a tool's ``RunContext`` parameter (its first), if it takes one, else ``()``."""
    if not getattr(schema, "takes_ctx", False) or not callable(function):
        return ()
    try:
        return _context_parameters[function]
    except (KeyError, TypeError):
        pass
    try:
        first = next(iter(inspect.signature(function).parameters), "ctx")
    except (TypeError, ValueError):
        first = "ctx"
    with contextlib.suppress(TypeError):  # not weak-referenceable: read again next time
        _context_parameters[function] = (first,)
    return (first,)


def _client_wrapped(original: property) -> property:
    read = original.fget
    if read is None:  # not a readable property: leave it as it is
        return original

    def client(self: Any) -> Any:
        held = read(self)
        wrap_once(held, type(self).__name__)
        return held

    return property(client, original.fset, original.fdel, original.__doc__)


def _copy_wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
    def with_max_retries(client: Any, *args: Any, **kwargs: Any) -> Any:
        copy = original(client, *args, **kwargs)
        if copy is not client:
            wrap_once(copy, "Pydantic AI")
        return copy

    return with_max_retries
