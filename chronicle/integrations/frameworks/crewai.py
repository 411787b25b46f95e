"""CrewAI: every tool run a ``tool`` boundary, the OpenAI client of every ``LLM`` wrapped.

CrewAI reaches a tool two ways, and ``instrument()`` patches both, process-wide:

- Native function calling (every model that supports it, ``gpt-4o`` among them): the agent
  executor calls the tool's ``run(**arguments)`` (``BaseTool.run``, or ``Tool.run`` for a
  ``@tool`` function); ``arun`` when awaited. A flow's tool action and code calling
  ``tool.run(...)`` go through the same methods.
- The ReAct text path (models without function calling: ``o1`` ones, custom LLMs): CrewAI's
  ``ToolUsage`` calls ``CrewStructuredTool.invoke(input, config=...)`` (``ainvoke`` when
  awaited), which calls the tool's body (``_run``) directly, not ``run``.

Neither path goes through the other's method, so each tool run is one ``tool`` boundary, named
after ``tool.name``, recorded with the arguments by name and what the tool returned (before
CrewAI turns it into text for the model, so a replayed result is turned into text as a live
one is). The ``config`` CrewAI hands ``invoke`` (the agent's fingerprint) is never part of the
tool's arguments: it is left out and named in the envelope's ``chronicle.left_out``.

CrewAI's bookkeeping stays outside the boundary and runs in a replay as it does live: its tool
result cache is consulted before the tool is called (a cached result is no tool run, so no
boundary), and a stubbed run counts towards ``max_usage_count`` as a live one does (the count
moves by CrewAI's own ``_claim_usage``/``_increment_usage_count``), so a tool refused for its
limit live is refused at the same point in a replay.

The model: ``crewai.LLM(model="gpt-4o")`` builds CrewAI's native OpenAI provider
(``OpenAICompletion``); every time it fetches its ``OpenAI``/``AsyncOpenAI`` client
(``_get_sync_client``/``_get_async_client``, which build it when needed) the client is wrapped
once by ``chronicle.wrap``, so each ``chat.completions`` call (CrewAI's
``with_raw_response.create``) and ``responses.create`` is an ``llm`` boundary. An ``LLM`` built
before ``instrument()`` is wrapped at its first call. The client's
``responses.input_tokens.count`` is an ``llm`` boundary too (``TOKEN_COUNT``): pointed at OpenAI
itself, CrewAI asks it for a request's token count before each model call and after each tool
result, and a replay must give that count back rather than call OpenAI.

A tool whose function is already a ``@chronicle.boundary`` (under ``@tool``) records itself and is
left alone.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Mapping
from typing import Any

from chronicle.integrations.frameworks.clients import wrap_once
from chronicle.integrations.frameworks.patching import (
    Instrumentation,
    call_tool,
    call_tool_async,
    is_boundary,
)
from chronicle.recording.boundary import wrap_llm

__all__ = ["instrument", "uninstrument"]

FRAMEWORK = "crewai"
INVOKE_LEFT_OUT = ("config",)
"""``CrewStructuredTool.invoke``'s parameter that is CrewAI's, not the tool's: never recorded."""

_log = logging.getLogger("chronicle.integrations.crewai")

_inst = Instrumentation("crewai", "crewai", label="CrewAI", name="crewai")


def instrument() -> None:
    """Make every CrewAI tool run a ``tool`` boundary and wrap the OpenAI client of every
    ``LLM`` that uses CrewAI's native OpenAI provider.

    Idempotent and process-wide; raises a one-line ``ImportError`` naming ``crewai`` when it is
    not installed. Tools and ``LLM``s built before or after it are all recorded.
    """
    with _inst.lock:
        if not _inst.begin():
            return
        from crewai.tools import base_tool, structured_tool  # type: ignore[import-not-found,unused-ignore]

        for owner in (base_tool.BaseTool, base_tool.Tool):
            _inst.patch(owner, "run", _run)
            _inst.patch(owner, "arun", _arun)
        structured = structured_tool.CrewStructuredTool
        _inst.patch(structured, "invoke", _invoke)
        _inst.patch(structured, "ainvoke", _ainvoke)
        try:
            from crewai.llms.providers.openai.completion import (  # type: ignore[import-not-found,unused-ignore]
                OpenAICompletion,
            )
        except ImportError:  # the openai extra is missing: no native OpenAI client to wrap
            return
        for method in ("_get_sync_client", "_get_async_client"):
            _inst.patch(OpenAICompletion, method, _get_client, optional=True)


def uninstrument() -> None:
    """Undo ``instrument()``: tools run unrecorded again (a client already wrapped stays
    wrapped: ``chronicle.wrap`` has no undo)."""
    _inst.undo()


# ---- the native path: BaseTool.run / Tool.run ------------------------------------------------


def _run_call(
    tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any], int] | None:
    """The boundary's name, the call's arguments by name and how many were positional; ``None``
    when the call is left to CrewAI unrecorded (a ``@chronicle.boundary`` body, more positional
    arguments than the schema names)."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or is_boundary(_body(tool)):
        return None
    if not args:
        return name, dict(kwargs), 0
    fields = list(getattr(getattr(tool, "args_schema", None), "model_fields", None) or ())
    if len(args) > len(fields) or any(field in kwargs for field in fields[: len(args)]):
        return None
    return name, {**dict(zip(fields, args, strict=False)), **kwargs}, len(args)


def _split(given: dict[str, Any], positional: int) -> tuple[list[Any], dict[str, Any]]:
    """The arguments handed on, in the shape the caller used (the first ``positional`` of them
    by position, as CrewAI skips keyword validation for a positional call)."""
    items = list(given.items())
    return [value for _, value in items[:positional]], dict(items[positional:])


def _settle_run(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """What ``run`` does before the tool's body, for a run the replay stubbed: the usage claim
    (after the keyword validation that would have refused the call first)."""
    try:
        if not args:
            tool._validate_kwargs(kwargs)
        claim = getattr(tool, "_claim_usage", None)
        if claim is not None:
            claim()
    except Exception:  # the live run would have failed before claiming: nothing to count
        return


def _run(original: Any) -> Any:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _safely(_run_call, self, args, kwargs)
        if call is None:
            return original(self, *args, **kwargs)
        name, arguments, positional = call
        ran = False

        def live(given: dict[str, Any]) -> Any:
            nonlocal ran
            ran = True
            before, rest = _split(given, positional)
            return original(self, *before, **rest)

        try:
            return call_tool(name, arguments, live, framework=FRAMEWORK)
        finally:
            if not ran:
                _settle_run(self, args, kwargs)

    return run


def _arun(original: Any) -> Any:
    @functools.wraps(original)
    async def arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _safely(_run_call, self, args, kwargs)
        if call is None:
            return await original(self, *args, **kwargs)
        name, arguments, positional = call
        ran = False

        async def live(given: dict[str, Any]) -> Any:
            nonlocal ran
            ran = True
            before, rest = _split(given, positional)
            return await original(self, *before, **rest)

        try:
            return await call_tool_async(name, arguments, live, framework=FRAMEWORK)
        finally:
            if not ran:
                _settle_run(self, args, kwargs)

    return arun


# ---- the ReAct path: CrewStructuredTool.invoke -----------------------------------------------


def _invoke_call(
    tool: Any, given_input: Any, kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any]] | None:
    """The boundary's name and the call's arguments by name (``input`` parsed and validated as
    CrewAI does, with any extra keyword arguments it passes on to the function); ``None`` when
    the call is left to CrewAI (a boundary body, an input CrewAI refuses: it raises its error)."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or is_boundary(_body(tool)):
        return None
    parsed = tool._parse_args(given_input)
    if not isinstance(parsed, Mapping) or any(key in parsed for key in kwargs):
        return None
    return name, {**parsed, **kwargs}


def _invoke_arguments(
    given: dict[str, Any], arguments: dict[str, Any], given_input: Any, extra: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """``invoke``'s ``input`` and keyword arguments for the arguments the boundary hands on: the
    caller's own ``input`` when they are the recorded ones, else the changed ones."""
    if given == arguments:
        return given_input, dict(extra)
    rest = {key: value for key, value in given.items() if key in extra}
    return {key: value for key, value in given.items() if key not in extra}, rest


def _settle_invoke(tool: Any) -> None:
    """What ``invoke`` does before the tool's body, for a run the replay stubbed: count it,
    unless the tool was past its limit (then the live call raised before counting)."""
    try:
        if not tool.has_reached_max_usage_count():
            tool._increment_usage_count()
    except Exception:
        _log.debug("could not count a replayed run of tool %r", getattr(tool, "name", tool))


def _invoke(original: Any) -> Any:
    @functools.wraps(original)
    def invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        call = _safely(_invoke_call, self, input, kwargs)
        if call is None:
            return original(self, input, config, **kwargs)
        name, arguments = call
        ran = False

        def live(given: dict[str, Any]) -> Any:
            nonlocal ran
            ran = True
            handed, extra = _invoke_arguments(given, arguments, input, kwargs)
            return original(self, handed, config, **extra)

        try:
            return call_tool(name, arguments, live, framework=FRAMEWORK, left_out=INVOKE_LEFT_OUT)
        finally:
            if not ran:
                _settle_invoke(self)

    return invoke


def _ainvoke(original: Any) -> Any:
    @functools.wraps(original)
    async def ainvoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        call = _safely(_invoke_call, self, input, kwargs)
        if call is None:
            return await original(self, input, config, **kwargs)
        name, arguments = call
        ran = False

        async def live(given: dict[str, Any]) -> Any:
            nonlocal ran
            ran = True
            handed, extra = _invoke_arguments(given, arguments, input, kwargs)
            return await original(self, handed, config, **extra)

        try:
            return await call_tool_async(
                name, arguments, live, framework=FRAMEWORK, left_out=INVOKE_LEFT_OUT
            )
        finally:
            if not ran:
                _settle_invoke(self)

    return ainvoke


# ---- shared ----------------------------------------------------------------------------------


def _body(tool: Any) -> object:
    """The function a tool runs: a ``@tool``'s function, a ``BaseTool`` subclass's ``_run``, a
    structured tool's own function or that of the tool it was made from."""
    original_tool = getattr(tool, "_original_tool", None)
    if original_tool is not None:
        return _body(original_tool)
    func = getattr(tool, "func", None)
    if func is not None:
        return func
    return getattr(type(tool), "_run", None)


def _safely(prepare: Any, *args: Any) -> Any:
    """``prepare(*args)``, or ``None`` (the call runs unrecorded) when it fails: CrewAI then
    raises its own error for an input it refuses, and a Chronicle bug never breaks a tool."""
    try:
        return prepare(*args)
    except Exception:
        return None


def _get_client(original: Any) -> Any:
    @functools.wraps(original)
    def get_client(self: Any) -> Any:
        client = original(self)
        wrap_once(client, "CrewAI's LLM")
        _wrap_token_count(client)
        return client

    return get_client


TOKEN_COUNT = "openai.responses.input_tokens.count"
"""The ``llm`` boundary of the token count CrewAI asks OpenAI for before each model call and
after each tool result (``responses.input_tokens.count``), when its client points at OpenAI."""

_counted: weakref.WeakSet[object] = weakref.WeakSet()
"""Clients whose ``responses.input_tokens.count`` is a boundary already."""


def _wrap_token_count(client: object) -> None:
    """Make ``client.responses.input_tokens.count`` an ``llm`` boundary, once per client.

    CrewAI counts a request's tokens with it (an ``Agent`` respects its context window by
    default) when the client points at OpenAI itself; recorded, a replay gives the recorded count
    back instead of calling OpenAI outside any boundary. Never raises: the count stays live."""
    try:
        if client in _counted:
            return
        _counted.add(client)
        resource = client.responses.input_tokens  # type: ignore[attr-defined]
        if getattr(resource.count, "__chronicle_boundary__", None) is not None:
            return
        resource.count = wrap_llm(TOKEN_COUNT, _unbound_count(resource), provider="openai")
    except Exception:  # an SDK without the endpoint, or a client of another kind
        _log.debug("CrewAI's token count is not recorded for %s", type(client).__name__)


def _unbound_count(resource: Any) -> Any:
    """``resource.count`` as a function holding ``resource`` weakly: the boundary is stored on
    ``resource``, and a strong reference back would keep an unused client (and its open
    connection) alive until the garbage collector breaks the cycle, instead of closing it."""
    method = type(resource).count
    held = weakref.ref(resource)
    signature = inspect.signature(resource.count)
    if inspect.iscoroutinefunction(method):

        async def acount(*args: Any, **kwargs: Any) -> Any:
            return await method(held(), *args, **kwargs)

        acount.__signature__ = signature  # type: ignore[attr-defined]
        return acount

    def count(*args: Any, **kwargs: Any) -> Any:
        return method(held(), *args, **kwargs)

    count.__signature__ = signature  # type: ignore[attr-defined]
    return count
