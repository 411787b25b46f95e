"""smolagents: every ``Tool`` call a ``tool`` boundary, every OpenAI model's client wrapped.

``instrument()`` patches two places, process-wide:

- ``Tool.__call__``, which every way smolagents reaches a tool goes through: a
  ``ToolCallingAgent`` step (``execute_tool_call``), a ``CodeAgent``'s generated code (the local
  Python executor calls the tool object), and user code calling a tool. Each call is the ``tool``
  boundary named after ``tool.name``, recorded with the tool's arguments by name (the positional
  ones bound to ``forward``'s parameters) and ``forward``'s result. smolagents' own conversion of
  agent types (``AgentText``, ``AgentImage``) happens outside the boundary on both sides, so the
  recorded input and output are the plain values and a replayed result is converted as a live
  one is. The built-in ``FinalAnswerTool`` is not a boundary: it returns its argument, which is
  already recorded in the model call that asked for it, and replaying it runs nothing; a
  ``final_answer`` tool of your own (another class) is recorded like any tool.
- ``ApiModel.__init__``: when the model holds an ``openai`` client (``OpenAIModel``, formerly
  ``OpenAIServerModel``, ``AzureOpenAIModel``, or any model given ``client=openai.OpenAI(...)``),
  it is wrapped by ``chronicle.wrap``, so each model call is an ``llm`` boundary. Models built
  before ``instrument()`` keep an unwrapped client.

A tool whose ``forward`` is already a ``@chronicle.boundary`` (under ``@tool``) records itself and
is left alone. Subclasses that replace ``__call__`` (``PipelineTool``) and managed agents (called
as agents, not tools) are not boundaries; the calls inside a managed agent are.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import weakref
from typing import Any

from chronicle.integrations.frameworks.clients import wrap_once
from chronicle.integrations.frameworks.patching import Instrumentation, call_tool, is_boundary

__all__ = ["instrument", "uninstrument"]

FRAMEWORK = "smolagents"

_log = logging.getLogger("chronicle.integrations.smolagents")

_inst = Instrumentation("smolagents", "smolagents")

_signatures: weakref.WeakKeyDictionary[type, inspect.Signature | None] = weakref.WeakKeyDictionary()
"""``forward``'s signature per tool class (``self`` dropped), read once; ``None`` when it has
none to bind to."""


def instrument() -> None:
    """Make every smolagents tool call a ``tool`` boundary and wrap each OpenAI model's client.

    Idempotent and process-wide; raises a one-line ``ImportError`` naming ``smolagents`` when it
    is not installed. Call it before building the model.
    """
    with _inst.lock:
        if not _inst.begin():
            return
        from smolagents import models, tools  # type: ignore[import-untyped]

        _inst.patch(tools.Tool, "__call__", _tool_call)
        _inst.patch(models.ApiModel, "__init__", _model_init)


def uninstrument() -> None:
    """Undo ``instrument()``: tools run unrecorded again and new models keep their client as
    built (a client already wrapped stays wrapped)."""
    _inst.undo()


def _tool_call(original: Any) -> Any:
    from smolagents.agent_types import (  # type: ignore[import-untyped]
        handle_agent_input_types,
        handle_agent_output_types,
    )
    from smolagents.default_tools import FinalAnswerTool  # type: ignore[import-untyped]

    @functools.wraps(original)
    def __call__(
        self: Any, *args: Any, sanitize_inputs_outputs: bool = False, **kwargs: Any
    ) -> Any:
        prepared = None
        if type(self) is not FinalAnswerTool:
            try:
                prepared = _prepare(
                    self, args, kwargs, sanitize_inputs_outputs, handle_agent_input_types
                )
            except Exception:  # never let Chronicle break the tool: run it as smolagents would
                _log.warning("could not record the call of tool %r", getattr(self, "name", self))
        if prepared is None:
            return original(self, *args, sanitize_inputs_outputs=sanitize_inputs_outputs, **kwargs)
        name, signature, arguments = prepared

        def run(given: dict[str, Any]) -> Any:
            bound = inspect.BoundArguments(signature, given)
            return original(self, *bound.args, **bound.kwargs)

        result = call_tool(name, arguments, run, framework=FRAMEWORK)
        if sanitize_inputs_outputs:
            result = handle_agent_output_types(result, self.output_type)
        return result

    return __call__


def _prepare(
    tool: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    sanitize: bool,
    handle_input_types: Any,
) -> tuple[str, inspect.Signature, dict[str, Any]] | None:
    """The boundary's name, ``forward``'s signature and the call's arguments by name; ``None``
    when the call is not to be recorded here (a boundary already, or arguments that do not bind:
    smolagents then raises its own error)."""
    name = getattr(tool, "name", None)
    forward = getattr(tool, "forward", None)
    if not isinstance(name, str) or forward is None or is_boundary(forward):
        return None
    signature = _signature(tool)
    if signature is None:
        return None
    inputs = getattr(tool, "inputs", None) or {}
    # As Tool.__call__ does: a single dict whose keys are all inputs is the keyword arguments.
    if len(args) == 1 and not kwargs and isinstance(args[0], dict):
        given: dict[str, Any] = args[0]
        if all(key in inputs for key in given):
            args, kwargs = (), dict(given)
    if sanitize:
        args, kwargs = handle_input_types(*args, **kwargs)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    return name, signature, dict(bound.arguments)


def _signature(tool: Any) -> inspect.Signature | None:
    cls = type(tool)
    if cls in _signatures:
        return _signatures[cls]
    try:
        signature: inspect.Signature | None = inspect.signature(tool.forward)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        params = list(signature.parameters.values())
        # @tool gives forward a signature that starts with ``self`` while it is a staticmethod.
        if params and params[0].name == "self" and "self" not in (tool.inputs or {}):
            signature = signature.replace(parameters=params[1:])
    _signatures[cls] = signature
    return signature


def _model_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _wrap_client(getattr(self, "client", None))

    return __init__


def _wrap_client(client: object) -> None:
    """Wrap an ``openai`` client (sync or async, Azure too); leave any other client as it is."""
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        return
    wrap_once(client, "a smolagents model")
