"""The loop most LangGraph agents are, as the tests build it: a model node and a tools node.

Import it only where LangGraph is installed (the langgraph extra).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


def asked_tools(state: MessagesState) -> list[Any]:
    """The tool calls the last message asks for (none unless it is the model's)."""
    last = state["messages"][-1]
    return last.tool_calls if isinstance(last, AIMessage) else []


def agent_loop(agent: Any, tools: Any) -> Any:
    """An uncompiled ``MessagesState`` graph: START to ``agent``; from ``agent`` to ``tools``
    while the last message asks for a tool, else to END; from ``tools`` back to ``agent``. The
    nodes are functions of the state returning an update."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", lambda state: "tools" if asked_tools(state) else END, ["tools", END]
    )
    builder.add_edge("tools", "agent")
    return builder
