"""LangGraph: every node and every routing decision of a graph becomes a boundary.

Needs the ``langgraph`` extra (``pip install 'agentplane-chronicle[langgraph]'``); langgraph is
imported only when these functions are called.

``instrument(graph)`` takes a ``StateGraph`` after its nodes and edges are added, or a compiled
graph (``CompiledStateGraph``: every prebuilt agent, such as ``create_react_agent(...)``), changes
it in place and returns it::

    graph = chronicle.instrument(builder)  # then graph.compile()
    agent = chronicle.instrument(create_react_agent(model, tools))

A compiled graph keeps its builder and shares each node's runnable with it: the builder is
instrumented, and a node or route that had to be wrapped (a ``Runnable`` that is not a plain
function) is put where the compiled graph holds it (the node's ``PregelNode.bound``, the route's
writer). Its ``ToolNode``'s tools become ``tool`` boundaries named after each tool, recorded as
``chronicle.instrument_langchain()`` records a tool (``integrations/frameworks/langchain.py``),
inside the ``"node tools"`` boundary; they stay boundaries for as long as the tools live.

- Each node is a ``tool`` boundary named ``"node <name>"``; its input is the state it is given
  (what LangGraph injects, ``config``, ``writer``, ``store``, ``runtime``, ``previous`` and
  ``error``, is left out), its output the update it returns. A ``Command`` is recorded as
  ``{"__command__": {graph, update, resume, goto}}`` and replayed as a ``Command``.
- Each conditional edge (the ``path`` function given to ``add_conditional_edges``) is a
  boundary named ``"route <source>.<path name>"`` whose output is the route it chose: a node
  name, a list of them, or ``Send(node, arg)`` packets (alone or in a list), each recorded as
  ``{"__send__": {"node", "arg"}}`` and replayed as a ``Send`` (its ``timeout`` is not kept).
  A ``Command``'s ``goto`` may hold them too.
- Sync and async nodes and paths are covered, in ``invoke``/``stream`` and ``ainvoke``/
  ``astream`` alike. LangGraph runs nodes in worker threads and tasks with the context copied,
  so they record into the request span active when the graph was invoked (open one around
  ``graph.invoke``, or let the ASGI middleware do it).
- In a replay a stubbed node returns its recorded update (dicts with attribute access) without
  running, a stubbed route returns its recorded choice, so the graph takes the recorded path;
  ``ReplayPlan().run("node tools")`` makes that node a cut-point that runs live. The values in
  an update or a ``Send`` come back as the types they were recorded as (``wire.OUTPUT_TYPES``):
  a LangChain message as the same message (``chronicle/integrations/langchain.py``), a
  dataclass, a pydantic model or a ``datetime`` as itself.
- A compiled subgraph used as a node is left as it is (``chronicle.instrument(subgraph)`` makes
  its own nodes boundaries); any other ``Runnable`` node is wrapped whole. Instrumenting twice
  changes nothing.
- A tool of a tool node as cut-point (``ReplayPlan().run("get_time")``) runs the ``"node tools"``
  call that made it (a call enclosing a cut-point runs), whose other tools stay stubbed.

``instrument_langgraph(nodes)`` takes a dict of node functions and returns a new dict of the same
functions as ``"node <name>"`` boundaries, keeping their signatures (so LangGraph still injects
``config`` and the rest), for ``builder.add_node(name, fn)`` yourself.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from chronicle.integrations import langchain  # noqa: F401  # registers the message codec
from chronicle.integrations.frameworks.langchain import record_tools
from chronicle.recording.boundary import BoundarySpec
from chronicle.recording.codecs import DecodedRestore
from chronicle.replay.recorded import restore_plain

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = ["instrument", "instrument_langgraph"]

logger = logging.getLogger("chronicle")

G = TypeVar("G")

_INJECTED = frozenset({"config", "writer", "store", "runtime", "previous", "error"})
_COMMAND = "__command__"
_SEND = "__send__"


def _require_langgraph() -> None:
    try:
        import langgraph  # noqa: F401  # optional: the langgraph extra
    except ImportError:
        raise ImportError(
            "chronicle's LangGraph integration needs langgraph: "
            "pip install 'agentplane-chronicle[langgraph]' (or pip install langgraph)"
        ) from None


def _state_only(arguments: Mapping[str, object]) -> object:
    return {key: value for key, value in arguments.items() if key not in _INJECTED}


def _route_result(result: object) -> object:
    """A route as recorded: ``Send`` packets (alone or in a list) as ``{"__send__": ...}``."""
    from langgraph.types import Send  # optional: the langgraph extra

    if isinstance(result, Send):
        return {_SEND: {"node": result.node, "arg": result.arg}}
    if isinstance(result, (list, tuple)):
        return [_route_result(item) for item in result]
    return result


def _restore_route(raw: object) -> object:
    """A recorded route given back: ``{"__send__": ...}`` as ``Send``, the rest as recorded
    (its described values rebuilt already, see ``DecodedRestore``)."""
    fields = raw.get(_SEND) if isinstance(raw, dict) and len(raw) == 1 else None
    if isinstance(fields, dict) and isinstance(fields.get("node"), str):
        from langgraph.types import Send  # optional: the langgraph extra

        return Send(str(fields["node"]), restore_plain(fields.get("arg")))
    if isinstance(raw, list):
        return [_restore_route(item) for item in raw]
    return restore_plain(raw)


def _node_result(result: object) -> object:
    from langgraph.types import Command  # optional: the langgraph extra

    if isinstance(result, Command):
        return {
            _COMMAND: {
                "graph": result.graph,
                "update": result.update,
                "resume": result.resume,
                "goto": _route_result(result.goto),
            }
        }
    return result


def _restore_node(raw: object) -> object:
    """A recorded update given back: ``{"__command__": ...}`` as ``Command``, the rest as
    recorded (its described values rebuilt already, see ``DecodedRestore``)."""
    fields = raw.get(_COMMAND) if isinstance(raw, dict) and len(raw) == 1 else None
    if isinstance(fields, dict):
        from langgraph.types import Command  # optional: the langgraph extra

        goto = _restore_route(fields.get("goto"))
        graph = fields.get("graph")
        return Command(
            graph=graph if isinstance(graph, str) else None,
            update=restore_plain(fields.get("update")),
            resume=restore_plain(fields.get("resume")),
            goto=goto if goto is not None else (),
        )
    return restore_plain(raw)


def _boundary(fn: Callable[..., Any], name: str, *, node: bool) -> Callable[..., Any]:
    if getattr(fn, "__chronicle_boundary__", None) is not None:
        return fn  # already a boundary
    spec = BoundarySpec(
        fn,
        name,
        "tool",
        extract_input=_state_only,
        extract_result=_node_result if node else _route_result,
        restore=DecodedRestore(_restore_node if node else _restore_route),
    )
    return spec.wrapper()


def _wrapped_runnable(runnable: Any, name: str, *, node: bool) -> Any:
    """The runnable made a boundary: in place for a ``RunnableCallable``, else a wrapper."""
    from langgraph._internal._runnable import RunnableCallable  # optional: langgraph extra
    from langgraph.pregel import Pregel  # optional: the langgraph extra

    if isinstance(runnable, RunnableCallable):
        if runnable.func is not None:
            runnable.func = _boundary(runnable.func, name, node=node)
        if runnable.afunc is not None:
            runnable.afunc = _boundary(runnable.afunc, name, node=node)
        return runnable
    if isinstance(runnable, Pregel):
        logger.info(
            "%r is a compiled subgraph and is not instrumented as one boundary; "
            "call chronicle.instrument on the subgraph itself",
            name,
        )
        return runnable
    if getattr(runnable, "__chronicle_boundary__", None) is not None:
        return runnable

    def invoke(state: Any, config: RunnableConfig) -> Any:
        return runnable.invoke(state, config)

    async def ainvoke(state: Any, config: RunnableConfig) -> Any:
        return await runnable.ainvoke(state, config)

    wrapper = RunnableCallable(
        _boundary(invoke, name, node=node),
        _boundary(ainvoke, name, node=node),
        name=getattr(runnable, "name", None) or name,
        trace=False,
        recurse=False,
    )
    wrapper.__chronicle_boundary__ = name  # type: ignore[attr-defined]
    return wrapper


def instrument(graph: G) -> G:
    """Make every node and conditional edge of a LangGraph graph a boundary, in place.

    ``graph`` is a ``StateGraph`` (before or after its ``compile()``) or a compiled one
    (``CompiledStateGraph``: every prebuilt agent, ``create_react_agent(...)`` say), whose tool
    nodes' tools become ``tool`` boundaries too. Returns ``graph``; calling it again changes
    nothing.
    """
    _require_langgraph()
    from langgraph.graph import StateGraph  # optional: the langgraph extra
    from langgraph.graph.state import CompiledStateGraph  # optional: the langgraph extra

    if isinstance(graph, CompiledStateGraph):
        _instrument_compiled(graph)
        return graph
    if not isinstance(graph, StateGraph):
        raise TypeError(
            "instrument() takes a langgraph StateGraph or a compiled one (create_react_agent(...)"
            f" is one), got {type(graph).__name__}; for a graph of the functional API "
            "(@entrypoint), decorate its @task functions with @chronicle.boundary"
        )
    _instrument_builder(graph)
    return graph


def _instrument_builder(graph: Any) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    """Instrument a ``StateGraph``'s nodes and paths in place; returns the runnables it replaced
    by a wrapper (node name to the old one, ``(source, path name)`` to the old ``BranchSpec``)."""
    nodes: dict[str, Any] = {}
    for node_name, node_spec in graph.nodes.items():
        runnable = _wrapped_runnable(node_spec.runnable, f"node {node_name}", node=True)
        if runnable is not node_spec.runnable:
            nodes[node_name] = node_spec.runnable
            node_spec.runnable = runnable
    branches: dict[tuple[str, str], Any] = {}
    for source, specs in graph.branches.items():
        for branch_name, branch in list(specs.items()):
            path = _wrapped_runnable(branch.path, f"route {source}.{branch_name}", node=False)
            if path is not branch.path:
                branches[(source, branch_name)] = branch
                specs[branch_name] = branch._replace(path=path)
    return nodes, branches


def _instrument_compiled(compiled: Any) -> None:
    """A compiled graph: its builder instrumented, and what that replaced by a wrapper put where
    the compiled graph holds it (a ``PregelNode``'s ``bound``, a route's writer).

    A node or path that is a plain function is a ``RunnableCallable`` whose function is made a
    boundary in place, which the compiled graph shares with its builder.
    """
    builder = getattr(compiled, "builder", None)
    from langgraph.graph import StateGraph  # optional: the langgraph extra

    if not isinstance(builder, StateGraph):
        raise TypeError(
            "instrument() got a compiled graph that keeps no StateGraph builder; instrument "
            "its StateGraph before compile(), or decorate its nodes with @chronicle.boundary"
        )
    replaced_nodes, replaced_branches = _instrument_builder(builder)
    for node_name, old in replaced_nodes.items():
        pregel_node = compiled.nodes.get(node_name)
        if pregel_node is not None and pregel_node.bound is old:
            pregel_node.bound = builder.nodes[node_name].runnable
            vars(pregel_node).pop("node", None)  # the cached runnable of bound and writers
    for (source, branch_name), old in replaced_branches.items():
        new = builder.branches[source][branch_name]
        pregel_node = compiled.nodes.get(source)
        for writer in getattr(pregel_node, "writers", ()):
            if getattr(getattr(writer, "func", None), "__self__", None) is old:
                writer.func, writer.afunc = new._route, new._aroute
    _record_tool_nodes(compiled)


def _record_tool_nodes(compiled: Any) -> None:
    """The tools of the compiled graph's ``ToolNode``s as ``tool`` boundaries by name."""
    try:
        from langgraph.prebuilt import ToolNode  # optional: langgraph-prebuilt
    except ImportError:
        return
    tools: list[Any] = []
    for pregel_node in compiled.nodes.values():
        bound = getattr(pregel_node, "bound", None)
        if isinstance(bound, ToolNode):
            tools.extend(bound.tools_by_name.values())
    if tools:
        record_tools(tools)


def instrument_langgraph(nodes: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """A new dict of the node functions as ``"node <name>"`` boundaries (sync or async kept)."""
    if not isinstance(nodes, Mapping):
        raise TypeError(
            "instrument_langgraph() takes a dict of node name to function, got "
            f"{type(nodes).__name__}"
        )
    instrumented: dict[str, Callable[..., Any]] = {}
    for name, fn in nodes.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"node names are non-empty strings, got {name!r}")
        if not callable(fn):
            raise TypeError(f"node {name!r} is not callable: {type(fn).__name__}")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(f"node {name!r} is a generator function, which cannot be a boundary")
        instrumented[name] = _boundary(fn, f"node {name}", node=True)
    return instrumented
