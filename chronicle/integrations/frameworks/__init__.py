"""One line per agent framework: ``chronicle.instrument_<framework>()`` and its ``uninstrument``.

Each instrumentor is process-wide and idempotent, as OpenTelemetry's are: it makes every tool
call the framework makes a ``tool`` boundary named after the tool (its arguments by name, the
framework's context object left out), with no decorator on the tool, and wraps the model client
the framework builds, so its model calls are ``llm`` boundaries. A framework that is not
installed raises a one-line ``ImportError`` naming the package. Each lives in a module of its own
here, imported only when its function is called; ``patching.py`` holds what they share.
"""

from __future__ import annotations

import importlib

__all__ = [
    "instrument_autogen",
    "instrument_crewai",
    "instrument_google_adk",
    "instrument_langchain",
    "instrument_llama_index",
    "instrument_mcp",
    "instrument_openai_agents",
    "instrument_pydantic_ai",
    "instrument_smolagents",
    "uninstrument_autogen",
    "uninstrument_crewai",
    "uninstrument_google_adk",
    "uninstrument_langchain",
    "uninstrument_llama_index",
    "uninstrument_mcp",
    "uninstrument_openai_agents",
    "uninstrument_pydantic_ai",
    "uninstrument_smolagents",
]


def _module(name: str) -> object:
    return importlib.import_module(f"chronicle.integrations.frameworks.{name}")


def instrument_openai_agents() -> None:
    """Record the OpenAI Agents SDK: every ``FunctionTool`` run and the models' OpenAI client."""
    _module("openai_agents").instrument()  # type: ignore[attr-defined]


def uninstrument_openai_agents() -> None:
    """Undo ``instrument_openai_agents()``."""
    _module("openai_agents").uninstrument()  # type: ignore[attr-defined]


def instrument_pydantic_ai() -> None:
    """Record Pydantic AI: every tool run (``RunContext`` left out) and its model client."""
    _module("pydantic_ai").instrument()  # type: ignore[attr-defined]


def uninstrument_pydantic_ai() -> None:
    """Undo ``instrument_pydantic_ai()``."""
    _module("pydantic_ai").uninstrument()  # type: ignore[attr-defined]


def instrument_langchain() -> None:
    """Record LangChain (so LangGraph's prebuilt agents): every ``BaseTool`` run, chat models."""
    _module("langchain").instrument()  # type: ignore[attr-defined]


def uninstrument_langchain() -> None:
    """Undo ``instrument_langchain()``."""
    _module("langchain").uninstrument()  # type: ignore[attr-defined]


def instrument_llama_index() -> None:
    """Record LlamaIndex: every ``FunctionTool`` run and its OpenAI LLM's client."""
    _module("llama_index").instrument()  # type: ignore[attr-defined]


def uninstrument_llama_index() -> None:
    """Undo ``instrument_llama_index()``."""
    _module("llama_index").uninstrument()  # type: ignore[attr-defined]


def instrument_smolagents() -> None:
    """Record smolagents: every ``Tool`` run and its OpenAI model's client."""
    _module("smolagents").instrument()  # type: ignore[attr-defined]


def uninstrument_smolagents() -> None:
    """Undo ``instrument_smolagents()``."""
    _module("smolagents").uninstrument()  # type: ignore[attr-defined]


def instrument_autogen() -> None:
    """Record AutoGen AgentChat: every ``FunctionTool`` run and its OpenAI model client."""
    _module("autogen").instrument()  # type: ignore[attr-defined]


def uninstrument_autogen() -> None:
    """Undo ``instrument_autogen()``."""
    _module("autogen").uninstrument()  # type: ignore[attr-defined]


def instrument_google_adk() -> None:
    """Record Google ADK: every ``FunctionTool`` run (``ToolContext`` left out) and its model."""
    _module("google_adk").instrument()  # type: ignore[attr-defined]


def uninstrument_google_adk() -> None:
    """Undo ``instrument_google_adk()``."""
    _module("google_adk").uninstrument()  # type: ignore[attr-defined]


def instrument_crewai() -> None:
    """Record CrewAI: every tool run and the model calls its ``LLM`` makes."""
    _module("crewai").instrument()  # type: ignore[attr-defined]


def uninstrument_crewai() -> None:
    """Undo ``instrument_crewai()``."""
    _module("crewai").uninstrument()  # type: ignore[attr-defined]


def instrument_mcp() -> None:
    """Record MCP on the client side: every ``ClientSession.call_tool`` and ``list_tools``."""
    _module("mcp").instrument()  # type: ignore[attr-defined]


def uninstrument_mcp() -> None:
    """Undo ``instrument_mcp()``."""
    _module("mcp").uninstrument()  # type: ignore[attr-defined]
