"""LangChain: every tool run a ``tool`` boundary, every ``ChatOpenAI`` client wrapped.

``instrument()`` (``chronicle.instrument_langchain()``) is process-wide and covers whatever runs
LangChain tools and chat models: a plain ``llm.bind_tools(...)`` loop calling ``tool.invoke``,
LangGraph's ``ToolNode`` and ``create_react_agent`` (tested), ``langchain.agents.create_agent``
(whose tools are LangChain tools too; not tested here).

- **Tools.** Every ``BaseTool`` run (``@tool`` functions, ``StructuredTool``, ``Tool`` and any
  subclass of your own, sync or async, by ``invoke``/``ainvoke``/``run``/``arun``) is the
  ``tool`` boundary named after ``tool.name``. The seam is the tool's own ``_run``/``_arun``,
  reached after LangChain has parsed and validated the input: the boundary's input is the
  tool's arguments by name (a single string input under the schema's one argument name), its
  output what the tool returned (a string, a ``(content, artifact)`` tuple, a ``ToolMessage``
  or a LangGraph ``Command``, each replayed as the same type). LangChain builds the
  ``ToolMessage`` around that result itself, live and replayed alike, so it carries the current
  call's ``tool_call_id``. What LangChain injects is left out of the input (and named in the
  envelope's ``chronicle.left_out``): ``run_manager``, ``callbacks``, the ``RunnableConfig``
  parameter, ``ToolRuntime`` and every argument annotated ``InjectedToolArg`` (LangGraph's
  ``InjectedState``, ``InjectedStore``, ``InjectedToolCallId``); a cut-point gets them back.
  A tool whose function is already a ``@chronicle.boundary`` (under ``@tool``) records itself
  and is left alone.
- **Chat models.** A ``ChatOpenAI`` or ``AzureChatOpenAI`` (any ``BaseChatOpenAI``) has its
  OpenAI clients (``root_client`` and ``root_async_client``, or the ``client`` you gave it)
  wrapped by ``chronicle.wrap`` the first time it calls the model, whenever it was built, so
  each model call is an ``llm`` boundary (``openai.chat.completions.create`` or
  ``openai.responses.create``). Other chat model classes are not wrapped: wrap their client.

``uninstrument()`` puts LangChain's methods back; clients already wrapped stay wrapped. A
LangGraph graph given to ``chronicle.instrument(compiled_graph)`` asks for its tool node's tools
with ``record_tools``: those stay boundaries after ``uninstrument()`` (see
``chronicle/integrations/langgraph.py``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from chronicle.integrations import langchain as _messages  # noqa: F401  # the message codec
from chronicle.integrations.clients import wrap
from chronicle.integrations.frameworks.patching import (
    Instrumentation,
    call_tool,
    call_tool_async,
    is_boundary,
)

__all__ = ["instrument", "record_tools", "uninstrument"]

FRAMEWORK = "langchain"

_log = logging.getLogger("chronicle.integrations.langchain")

_FILTERED = ("run_manager", "callbacks")
"""What LangChain hands a tool's ``_run`` beside its arguments, whatever the tool
(``langchain_core.tools.base.FILTERED_ARGS``)."""

_CHAT_METHODS = (
    "_generate",
    "_agenerate",
    "_stream",
    "_astream",
    "_stream_responses",
    "_astream_responses",
)
"""``BaseChatOpenAI``'s ways to the model: each wraps the instance's clients before it runs."""

_SEAM = "__chronicle_tool_seam__"


class _LangChain(Instrumentation):
    """LangChain's patch set; its one-line ``ImportError`` names ``instrument_langchain()``."""

    def require(self) -> ModuleType:
        """``langchain_core``, imported; a one-line ``ImportError`` naming it if absent."""
        try:
            return super().require()
        except ImportError:
            raise ImportError(
                "chronicle.instrument_langchain() needs LangChain: pip install langchain-core"
            ) from None


_inst = _LangChain("langchain_core", "langchain-core", label="LangChain")
"""``instrument()``: while active every tool run is recorded, and chat models are patched."""

_seams = _LangChain("langchain_core", "langchain-core", label="LangChain")
"""The tool seams: ``BaseTool.run``/``arun`` (which put the seam on a tool's class the first
time it runs) and each tool class's ``_run``/``_arun``. In place while ``instrument()`` is, or
while a tool chosen by ``record_tools`` is alive."""

_seamed: set[type] = set()
"""Tool classes whose ``_run``/``_arun`` (their own and their bases') carry the seam."""

_chosen: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
"""Tools recorded even without ``instrument()`` (a compiled graph's tool node), by ``id``."""

_wrapped_clients: weakref.WeakSet[Any] = weakref.WeakSet()
"""OpenAI clients of chat models wrapped already (``chronicle.wrap`` is idempotent; this saves
building its targets again on every model call)."""

_clients_lock = threading.Lock()

_injected: weakref.WeakKeyDictionary[type, dict[tuple[type, tuple[str, ...]], frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)
"""Per tool schema class, per (tool class, names given to ``_run``): the names LangChain
injected among them."""

_config_params: dict[Callable[..., Any], str | None] = {}
"""The ``RunnableConfig`` parameter's name of each ``_run``/``_arun``, read once."""


def instrument() -> None:
    """Make every LangChain tool run a ``tool`` boundary and wrap every ``ChatOpenAI``'s clients.

    Idempotent and process-wide; raises a one-line ``ImportError`` naming ``langchain-core`` when
    it is not installed. Chat models are covered when ``langchain-openai`` is installed.
    """
    with _inst.lock:
        if not _inst.begin():
            return
        _install_seams()
        try:
            # optional: langchain-openai, installed apart from langchain-core
            from langchain_openai.chat_models.base import BaseChatOpenAI
        except ImportError:  # tools only: no OpenAI chat model to find
            return
        for method in _CHAT_METHODS:
            _inst.patch(BaseChatOpenAI, method, _with_wrapped_clients, optional=True)


def uninstrument() -> None:
    """Undo ``instrument()``: tools run unrecorded again (but for those ``record_tools`` chose)
    and chat models call their clients as built (a client already wrapped stays wrapped)."""
    with _inst.lock:
        _inst.undo()
        if not _chosen:
            with _seams.lock:
                _seams.undo()
                _seamed.clear()


def record_tools(tools: Iterable[Any]) -> list[str]:
    """Record each of these ``BaseTool`` instances as a ``tool`` boundary, with or without
    ``instrument()``, for as long as the tool lives; returns their names.

    ``chronicle.instrument(graph)`` calls it with a compiled graph's tool node's tools.
    Choosing a tool twice changes nothing.
    """
    from langchain_core.tools import BaseTool  # optional: the framework, when instrumented

    names: list[str] = []
    with _inst.lock:
        _install_seams()
        for tool in tools:
            if not isinstance(tool, BaseTool):
                continue
            _chosen[id(tool)] = tool
            _seam(type(tool))
            names.append(tool.name)
    return names


def _install_seams() -> None:
    """Put ``BaseTool.run``/``arun``'s entry patches in place (once)."""
    with _seams.lock:
        if not _seams.begin():
            return
        from langchain_core.tools import BaseTool  # optional: the framework, when instrumented

        _seams.patch(BaseTool, "run", _entry)
        _seams.patch(BaseTool, "arun", _async_entry)


def _records(tool: Any) -> bool:
    return _inst.active or _chosen.get(id(tool)) is tool


# ---- tools ------------------------------------------------------------------------------------


def _entry(original: Any) -> Any:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if type(self) not in _seamed:
            _seam(type(self))
        return original(self, *args, **kwargs)

    return run


def _async_entry(original: Any) -> Any:
    @functools.wraps(original)
    async def arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        if type(self) not in _seamed:
            _seam(type(self))
        return await original(self, *args, **kwargs)

    return arun


def _seam(cls: type) -> None:
    """Put the seam on ``cls``'s ``_run``/``_arun`` and on those of its bases that define them."""
    from langchain_core.tools import BaseTool  # optional: the framework, when instrumented

    with _seams.lock:
        if cls in _seamed or not _seams.active:
            return
        try:
            for klass in cls.__mro__:
                if not (isinstance(klass, type) and issubclass(klass, BaseTool)):
                    continue
                for attribute, make in (("_run", _sync_seam), ("_arun", _async_seam)):
                    own = vars(klass).get(attribute)
                    if not inspect.isfunction(own) or getattr(own, _SEAM, False):
                        continue
                    if getattr(own, "__isabstractmethod__", False):
                        continue  # BaseTool._run: never called
                    _seams.patch(klass, attribute, make)
        except Exception:  # a class Chronicle cannot patch: its tools run unrecorded
            _log.warning("could not record the runs of LangChain tool class %s", cls.__qualname__)
        _seamed.add(cls)


def _sync_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
        prepared = _prepare(self, original, args, kwargs) if _records(self) else None
        if prepared is None:
            return original(self, *args, **kwargs)
        arguments, positional, injected = prepared

        def run(given: dict[str, Any]) -> Any:
            values = dict(given)
            head = [values.pop(name) for name in positional if name in values]
            return original(self, *head, **values, **injected)

        result = call_tool(
            self.name, arguments, run, framework=FRAMEWORK, left_out=tuple(sorted(injected))
        )
        return _as_returned(self, result)

    setattr(_run, _SEAM, True)
    return _run


def _async_seam(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def _arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        prepared = _prepare(self, original, args, kwargs) if _records(self) else None
        if prepared is None:
            return await original(self, *args, **kwargs)
        arguments, positional, injected = prepared

        async def run(given: dict[str, Any]) -> Any:
            values = dict(given)
            head = [values.pop(name) for name in positional if name in values]
            return await original(self, *head, **values, **injected)

        result = await call_tool_async(
            self.name, arguments, run, framework=FRAMEWORK, left_out=tuple(sorted(injected))
        )
        return _as_returned(self, result)

    setattr(_arun, _SEAM, True)
    return _arun


def _prepare(
    tool: Any, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], list[str], dict[str, Any]] | None:
    """The tool's arguments by name, the names of those passed by position, and what LangChain
    injected (left out, handed back to a run); ``None`` to run the tool unrecorded here (its
    function records itself, or Chronicle cannot read the call)."""
    try:
        if is_boundary(getattr(tool, "func", None)) or is_boundary(
            getattr(tool, "coroutine", None)
        ):
            return None
        name = tool.name
        if not isinstance(name, str) or not name:
            return None
        positional = _positional_names(tool, len(args))
        arguments = dict(zip(positional, args, strict=True))
        kept = _kept(tool, kwargs)
        left_out = {key for key in kwargs if key not in kept}
        config = _config_param(original)
        if config is not None and config in kwargs:
            left_out.add(config)
        injected = {key: value for key, value in kwargs.items() if key in left_out}
        overlap = set(arguments) & set(kwargs)
        if overlap:
            return None
        arguments.update((key, value) for key, value in kwargs.items() if key not in left_out)
        return arguments, positional, injected
    except Exception:  # never let Chronicle break the tool: it runs unrecorded
        _log.warning("could not record the run of LangChain tool %r", getattr(tool, "name", tool))
        return None


def _positional_names(tool: Any, count: int) -> list[str]:
    """Names for a tool's positional arguments (a single string input): its schema's."""
    if count == 0:
        return []
    try:
        names = [str(name) for name in tool.args]
    except Exception:
        names = []
    names = names[:count]
    return names + [f"arg{index}" for index in range(len(names), count)]


def _kept(tool: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without what LangChain injects (``_filter_injected_args``, where it exists).

    Which names those are depends on the tool's schema and the names given, not their values:
    for a tool with a schema class it is worked out once per set of names.
    """
    schema = getattr(tool, "args_schema", None)
    cache = _injected.setdefault(schema, {}) if isinstance(schema, type) else None
    key = (type(tool), tuple(kwargs))
    injected = cache.get(key) if cache is not None else None
    if injected is None:
        kept = {key: value for key, value in kwargs.items() if key not in _FILTERED}
        filtering = getattr(tool, "_filter_injected_args", None)
        if callable(filtering):
            try:
                filtered = filtering(kept)
            except Exception:
                filtered = kept
            if isinstance(filtered, dict):
                kept = filtered
        injected = frozenset(kwargs).difference(kept)
        if cache is not None:
            cache[key] = injected
    return {key: value for key, value in kwargs.items() if key not in injected}


def _config_param(original: Callable[..., Any]) -> str | None:
    """The parameter of ``original`` LangChain hands the ``RunnableConfig`` to, if any."""
    try:
        return _config_params[original]
    except KeyError:
        pass
    name: str | None = None
    try:
        # optional: the framework, when instrumented
        from langchain_core.tools.base import _get_runnable_config_param

        name = _get_runnable_config_param(original)
    except Exception:
        name = "config" if "config" in inspect.signature(original).parameters else None
    _config_params[original] = name
    return name


def _as_returned(tool: Any, result: Any) -> Any:
    """A ``(content, artifact)`` pair as the tuple LangChain checks for."""
    if (
        getattr(tool, "response_format", None) == "content_and_artifact"
        and isinstance(result, list)
        and len(result) == 2
    ):
        return tuple(result)
    return result


# ---- chat models ------------------------------------------------------------------------------


def _with_wrapped_clients(original: Any) -> Any:
    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        _wrap_clients(self)
        return original(self, *args, **kwargs)

    return method


def _wrap_clients(chat: Any) -> None:
    """Wrap the chat model's OpenAI clients (or the resources it was given) once each."""
    try:
        found = [getattr(chat, name, None) for name in ("root_client", "root_async_client")]
        if found[0] is None:
            found.append(getattr(chat, "client", None))
        if found[1] is None:
            found.append(getattr(chat, "async_client", None))
        clients = [client for client in found if client is not None]
        if all(client in _wrapped_clients for client in clients):
            return
        with _clients_lock:
            for client in clients:
                if client not in _wrapped_clients:
                    wrap(client)
                    _wrapped_clients.add(client)
    except Exception:  # the model must still answer, unrecorded
        _log.warning(
            "could not wrap the OpenAI client of a LangChain chat model (%s); its calls are "
            "not recorded: pass its client to chronicle.wrap",
            type(chat).__name__,
        )
