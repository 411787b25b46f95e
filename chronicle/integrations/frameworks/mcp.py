"""``chronicle.instrument_mcp()``: MCP on the client side, recorded and replayed.

Every agent framework that reaches MCP tools in Python (the OpenAI Agents SDK's and Pydantic AI's
``MCPServerStdio``/``MCPServerStreamableHttp``, Google ADK's ``McpToolset``, the plain ``mcp``
client) holds an ``mcp.ClientSession`` and calls its methods, so this module patches the session
class itself, and whatever framework holds the session is recorded:

- ``ClientSession.call_tool(name, arguments, ...)`` is a ``tool`` boundary named after the MCP tool
  (``refund``), its input the tool's ``arguments`` by name, its output the ``CallToolResult``. A
  result the server marks ``isError`` is recorded as the result it is, not as an exception. The
  server's name (its ``serverInfo.name`` from the initialize handshake) is in the envelope's
  metadata under ``chronicle.mcp.server``. The request options (``read_timeout_seconds``,
  ``progress_callback``, ``meta``, and mcp 2.x's ``input_responses``/``request_state``/
  ``allow_*``) are not recorded; the envelope's ``chronicle.left_out`` names them.
- ``ClientSession.list_tools(...)`` is a ``tool`` boundary named ``mcp.list_tools[<server>]``
  (``mcp.list_tools`` when the server did not say its name), its input the page's ``cursor`` when
  there is one, its output the ``ListToolsResult``. A listing the session makes itself inside
  ``call_tool`` (to validate a result against the tool's output schema) is part of that call.

Results are recorded as the JSON the server sent (the fields it set, by their wire names:
``isError``, ``structuredContent``, ``_meta``), the same whichever mcp major recorded them. In a
replay a stubbed ``call_tool`` returns the recorded ``CallToolResult``, validated from that JSON as
the session validates the server's answer, and sends nothing to the server, so the server's tool
never runs; a stubbed ``list_tools`` returns the recorded ``ListToolsResult`` (and the session
keeps the tools' output schemas from it, as a live listing does); a recording this mcp cannot
validate raises ``ReplayError`` saying so. The connection itself (starting a stdio server, the
initialize handshake) is the framework's and is not a boundary: it still happens in a replay,
and no tool listing or tool call reaches the server unless the plan runs it.

Inside a tool boundary of the same name (the Agents SDK's ``FunctionTool`` for an MCP tool, when
``instrument_openai_agents()`` is on too) ``call_tool`` is that same tool run and is not recorded
twice. ``uninstrument()`` puts the session's methods back. Supports mcp 1.x and 2.x.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import JsonValue

from chronicle.errors import ReplayError
from chronicle.integrations.frameworks.patching import Instrumentation, call_tool_async

__all__ = ["LIST_TOOLS", "SERVER", "instrument", "uninstrument"]

FRAMEWORK = "mcp"

SERVER = "chronicle.mcp.server"
"""Envelope metadata: the name the MCP server gave itself (``serverInfo.name``)."""

LIST_TOOLS = "mcp.list_tools"
"""The name of a ``list_tools`` boundary, then ``[<server name>]`` when the server has one."""

_CALL_OPTIONS = ("read_timeout_seconds", "progress_callback", "meta")
"""``call_tool``'s parameters after ``arguments``, in mcp 1.x's and 2.x's order: never recorded."""

logger = logging.getLogger("chronicle")

_instrumentation = Instrumentation("mcp", "mcp", label="the MCP Python SDK")

_server_names: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
"""mcp 1.x: each session's server name, kept from its initialize result (1.x does not keep it)."""

_in_call_tool: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "chronicle_mcp_in_call_tool", default=False
)
"""Set while a recorded ``call_tool`` runs: the listing it makes to validate a result is part of
that call, not a boundary of its own."""


def instrument() -> None:
    """Record every ``ClientSession.call_tool`` and ``list_tools``; idempotent.

    Raises a one-line ``ImportError`` naming ``mcp`` when the MCP SDK is not installed.
    """
    inst = _instrumentation
    with inst.lock:
        if not inst.begin():
            return
        from mcp.client.session import ClientSession  # optional: the mcp package

        try:
            inst.patch(ClientSession, "call_tool", _call_tool_recorded)
            inst.patch(ClientSession, "list_tools", _list_tools_recorded)
            if not hasattr(ClientSession, "server_info"):  # mcp 1.x: remember the server's name
                inst.patch(ClientSession, "initialize", _initialize_remembered)
        except BaseException:
            inst.undo()
            raise


def uninstrument() -> None:
    """Undo ``instrument()``: MCP tool calls and listings go unrecorded again."""
    _instrumentation.undo()


def _server_name(session: object) -> str | None:
    """The name the session's server gave itself, or ``None`` before the handshake (or unnamed)."""
    try:
        info = getattr(session, "server_info", None)  # mcp 2.x
        name = getattr(info, "name", None)
        if not isinstance(name, str):
            name = _server_names.get(session)
    except Exception:  # a property that raises, a session that is not weak-referenceable
        return None
    return name or None


def _call_tool_recorded(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def call_tool(
        self: Any, name: str, arguments: Any = None, *options: Any, **keywords: Any
    ) -> Any:
        if (arguments is not None and not _by_name(arguments)) or not isinstance(name, str):
            # Not a tool call the SDK can send: it raises its own error, recorded or not.
            return await original(self, name, arguments, *options, **keywords)

        async def send(given: dict[str, Any]) -> Any:
            token = _in_call_tool.set(True)
            try:
                sent = None if arguments is None and not given else given
                return await original(self, name, sent, *options, **keywords)
            finally:
                _in_call_tool.reset(token)

        return await _recorded(
            name,
            dict(arguments or {}),
            send,
            lambda raw: _call_tool_result(self, name, raw),
            server=_server_name(self),
            left_out=_CALL_OPTIONS + tuple(k for k in keywords if k not in _CALL_OPTIONS),
        )

    return call_tool


def _by_name(arguments: object) -> bool:
    return isinstance(arguments, Mapping) and all(isinstance(key, str) for key in arguments)


def _list_tools_recorded(
    original: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def list_tools(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _in_call_tool.get():
            return await original(self, *args, **kwargs)
        cursor = _cursor(args, kwargs)

        async def send(given: dict[str, Any]) -> Any:
            return await original(self, *args, **kwargs)

        server = _server_name(self)
        name = f"{LIST_TOOLS}[{server}]" if server else LIST_TOOLS
        return await _recorded(
            name,
            {"cursor": cursor} if cursor is not None else {},
            send,
            lambda raw: _list_tools_result(self, name, raw, complete=cursor is None),
            server=server,
        )

    return list_tools


async def _recorded(
    name: str,
    arguments: dict[str, Any],
    send: Callable[[dict[str, Any]], Awaitable[Any]],
    rebuild: Callable[[Any], Any],
    *,
    server: str | None,
    left_out: tuple[str, ...] = (),
) -> Any:
    """One session request as the ``tool`` boundary ``name``: ``send(arguments)`` is the SDK's
    request, its result recorded as the JSON the server sent (``_wire``). Live, the caller gets
    the SDK's own result object; stubbed, ``rebuild`` makes it again from the recording, as the
    SDK builds it from the server's JSON."""
    results: list[Any] = []

    async def run(given: dict[str, Any]) -> Any:
        result = await send(given)
        results.append(result)
        return _wire(result)

    value = await call_tool_async(
        name,
        arguments,
        run,
        framework=FRAMEWORK,
        left_out=left_out,
        metadata={SERVER: server} if server else None,
    )
    if results:
        return results[-1]
    return rebuild(value)


def _wire(result: Any) -> Any:
    """The JSON the server sent for ``result``: the fields it set, by their wire names (``isError``,
    ``_meta``), so a recording reads the same whichever mcp major made it and a replay rebuilds
    exactly what the server said (``model_dump``'s own names do not validate back in mcp 1.x)."""
    dump = getattr(result, "model_dump", None)
    if not callable(dump):
        return result
    try:
        return dump(mode="json", by_alias=True, exclude_unset=True)
    except Exception:  # not the SDK's model after all: the capture records it as it can
        return result


def _plain(value: Any) -> Any:
    """A recorded value with its attribute-access dicts and lists made plain again."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _call_tool_result(session: Any, name: str, raw: Any) -> Any:
    """A stubbed ``call_tool``'s result: the recorded JSON validated as the session validates a
    ``tools/call`` answer (mcp 2.x: with the result types it negotiated)."""
    if not isinstance(raw, Mapping):  # a plan's override gave an object: it is the result
        return raw
    from mcp import types  # optional: the mcp package, imported for a replay's stub

    adapter = getattr(session, "_call_tool_adapter", None)  # mcp 2.x
    validate = getattr(adapter, "validate_python", None)
    if not callable(validate):
        validate = types.CallToolResult.model_validate
    return _validated(validate, _plain(raw), f"the result of MCP tool {name!r}", name)


def _list_tools_result(session: Any, name: str, raw: Any, *, complete: bool) -> Any:
    """A stubbed ``list_tools``'s result, which the session learns from (``_absorb_listing``)."""
    if not isinstance(raw, Mapping):
        return raw
    from mcp import types  # optional: the mcp package, imported for a replay's stub

    result = _validated(types.ListToolsResult.model_validate, _plain(raw), "a tool listing", name)
    _absorb_listing(session, result, complete=complete)
    return result


def _validated(validate: Callable[[Any], Any], raw: Any, what: str, name: str) -> Any:
    try:
        return validate(raw)
    except ValueError as error:  # pydantic's ValidationError
        raise ReplayError(
            f"replay: {what} was recorded in a form this version of mcp cannot read ({error}); "
            f"record the trace again with it, or run the call live with "
            f"ReplayPlan().run({name!r})"
        ) from None


def _cursor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> JsonValue:
    """The page a ``list_tools`` call asks for: mcp 1.x's ``cursor`` (by position or name), or
    the ``cursor`` of ``params`` (both majors); ``None`` for the first page."""
    cursor = args[0] if args else kwargs.get("cursor")
    if cursor is None:
        cursor = getattr(kwargs.get("params"), "cursor", None)
    return cursor if isinstance(cursor, str) else None


def _absorb_listing(session: Any, result: Any, *, complete: bool) -> None:
    """Keep the tools' output schemas of a replayed listing in the session, as ``list_tools``
    does live, so a tool a plan runs live validates its result without listing again."""
    try:
        absorb = getattr(session, "_absorb_tool_listing", None)  # mcp 2.x
        if callable(absorb):
            complete = complete and getattr(result, "next_cursor", None) is None
            absorb(result, complete=complete)
            return
        schemas = getattr(session, "_tool_output_schemas", None)  # mcp 1.x
        if isinstance(schemas, dict):
            for tool in result.tools:
                schemas[tool.name] = tool.outputSchema
    except Exception:  # the session's bookkeeping is an optimisation; never fail the call
        logger.debug("mcp: could not keep a replayed tool listing in the session", exc_info=True)


def _initialize_remembered(
    original: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def initialize(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        name = getattr(getattr(result, "serverInfo", None), "name", None)
        if isinstance(name, str):
            # A session that is not weak-referenceable: its envelopes go without the name.
            with contextlib.suppress(TypeError):
                _server_names[self] = name
        return result

    return initialize
