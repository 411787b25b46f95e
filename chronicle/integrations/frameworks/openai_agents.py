"""``chronicle.instrument_openai_agents()``: the OpenAI Agents SDK's tools and models, recorded.

Tools: the runner executes every ``FunctionTool`` (``@function_tool`` functions, the tools the SDK
builds from MCP servers, agents as tools, hand-made ``FunctionTool`` objects) through one function
of ``agents.tool``, which this module wraps: each run is a ``tool`` boundary named after the tool
(``get_weather``), recorded with the model's JSON arguments parsed (the tool's own arguments by
name) and the tool's output. The ``ToolContext``/``RunContextWrapper`` a tool may take is never
recorded (its parameter name is listed in the envelope's ``chronicle.left_out``). In a replay a
stubbed tool returns its recorded output and its function is not called. A tool whose function is
already a ``@chronicle.boundary`` (under ``@function_tool``) records itself and is left alone; a
tool input that is not a JSON object (the SDK rejects it before the function runs) is passed
through unrecorded.

Models: ``OpenAIResponsesModel`` (the SDK's default, the Responses API) and
``OpenAIChatCompletionsModel`` get their ``AsyncOpenAI`` client through one method; this module
wraps the client it returns with ``chronicle.wrap`` (in place, once), whichever way it was given:
``set_default_openai_client(...)``, an ``OpenAIProvider``, the model's constructor, or the client
the SDK builds from the environment. Model calls are then ``llm`` boundaries named
``openai.responses.create`` or ``openai.chat.completions.create``.

``uninstrument()`` puts the SDK's functions back. A client already wrapped stays wrapped
(``chronicle.wrap`` wraps an object in place and has no undo): its calls stay recorded, as if
the user had wrapped it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import typing
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

FRAMEWORK = "openai-agents"

_instrumentation = Instrumentation(
    "agents", "openai-agents", label="the OpenAI Agents SDK", name="openai_agents"
)

_context_parameters: weakref.WeakKeyDictionary[Callable[..., Any], tuple[str, ...]] = (
    weakref.WeakKeyDictionary()
)


def instrument() -> None:
    """Record every ``FunctionTool`` run and the models' OpenAI client; idempotent.

    Raises a one-line ``ImportError`` naming ``openai-agents`` when the SDK is not installed.
    """
    inst = _instrumentation
    with inst.lock:
        if not inst.begin():
            return
        # The SDK is an optional package, imported when instrumented (begin() checked it is there).
        import agents.tool  # optional
        from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel  # optional
        from agents.models.openai_responses import OpenAIResponsesModel  # optional
        from agents.run_internal import tool_execution  # optional

        result_type = agents.tool._FunctionToolInvocationResult
        try:
            # ``tool_execution`` imported the function by name; ``invoke_function_tool`` (the
            # realtime session's path) calls it through ``agents.tool``: both names are wrapped.
            for owner in (agents.tool, tool_execution):
                inst.patch(
                    owner,
                    "_invoke_function_tool_with_metadata",
                    lambda original: _invoke_recorded(original, result_type),
                )
            for model in (OpenAIResponsesModel, OpenAIChatCompletionsModel):
                inst.patch(model, "_get_client", _get_client_wrapped)
        except BaseException:
            inst.undo()
            raise


def uninstrument() -> None:
    """Undo ``instrument()``: tools run unrecorded again and new clients are not wrapped."""
    _instrumentation.undo()


def _invoke_recorded(
    original: Callable[..., Awaitable[Any]], result_type: Callable[[Any], Any]
) -> Callable[..., Awaitable[Any]]:
    async def invoke(*, function_tool: Any, context: Any, arguments: str) -> Any:
        parsed = _parse_arguments(arguments)
        if parsed is None or is_boundary(function_tool):
            return await original(function_tool=function_tool, context=context, arguments=arguments)
        invocations: list[Any] = []

        async def run(given: dict[str, Any]) -> Any:
            # The model's own JSON goes on unchanged unless the boundary changed the arguments.
            raw = arguments if given == parsed else json.dumps(given)
            invocation = await original(function_tool=function_tool, context=context, arguments=raw)
            invocations.append(invocation)
            return invocation.output

        output = await call_tool_async(
            str(function_tool.name),
            parsed,
            run,
            framework=FRAMEWORK,
            left_out=_context_parameter(function_tool),
        )
        if invocations and invocations[-1].output is output:
            return invocations[-1]
        return result_type(output)  # a replayed tool: its recorded output, no SDK error flag

    return invoke


def _parse_arguments(arguments: object) -> dict[str, Any] | None:
    """The tool call's JSON arguments as a dict (``""`` is ``{}``, as the SDK reads it), or
    ``None`` when they are not a JSON object."""
    if arguments == "":
        return {}
    if not isinstance(arguments, str):
        return None
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _context_parameter(function_tool: object) -> tuple[str, ...]:
    """The name of the ``RunContextWrapper``/``ToolContext`` parameter of a ``@function_tool``
    function (its first), as the SDK itself detects it; ``()`` when it takes none."""
    fn = getattr(function_tool, "__wrapped__", None)
    if not callable(fn):
        return ()
    try:
        return _context_parameters[fn]
    except (KeyError, TypeError):
        pass
    found = _first_context_parameter(fn)
    with contextlib.suppress(TypeError):  # not weak-referenceable: found again next time
        _context_parameters[fn] = found
    return found


def _first_context_parameter(fn: Callable[..., Any]) -> tuple[str, ...]:
    # optional package: only reached once instrument() has imported it
    from agents.run_context import RunContextWrapper

    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return ()
    if not parameters:
        return ()
    first = parameters[0]
    try:
        annotation = typing.get_type_hints(fn).get(first.name, first.annotation)
    except Exception:  # an annotation that does not resolve: read it as written
        annotation = first.annotation
    origin = typing.get_origin(annotation) or annotation
    if isinstance(origin, type) and issubclass(origin, RunContextWrapper):
        return (first.name,)
    return ()


def _get_client_wrapped(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def _get_client(self: Any) -> Any:
        client = original(self)
        wrap_once(getattr(self, "_client", None), type(self).__name__)
        if client is not getattr(self, "_client", None):  # a per-request copy (retry options)
            wrap_once(client, type(self).__name__)
        return client

    return _get_client
