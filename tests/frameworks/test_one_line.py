"""What every ``instrument_<framework>()`` promises alike, checked for all nine at once."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

import chronicle

MISSING = [
    (
        chronicle.instrument_openai_agents,
        chronicle.uninstrument_openai_agents,
        "agents",
        "chronicle.instrument_openai_agents() needs the OpenAI Agents SDK: "
        "pip install openai-agents",
    ),
    (
        chronicle.instrument_pydantic_ai,
        chronicle.uninstrument_pydantic_ai,
        "pydantic_ai",
        "chronicle.instrument_pydantic_ai() needs Pydantic AI: pip install pydantic-ai",
    ),
    (
        chronicle.instrument_langchain,
        chronicle.uninstrument_langchain,
        "langchain_core",
        "chronicle.instrument_langchain() needs LangChain: pip install langchain-core",
    ),
    (
        chronicle.instrument_llama_index,
        chronicle.uninstrument_llama_index,
        "llama_index.core",
        "chronicle.instrument_llama_index() needs LlamaIndex: pip install llama-index-core",
    ),
    (
        chronicle.instrument_smolagents,
        chronicle.uninstrument_smolagents,
        "smolagents",
        "chronicle.instrument_smolagents() needs smolagents: pip install smolagents",
    ),
    (
        chronicle.instrument_autogen,
        chronicle.uninstrument_autogen,
        "autogen_agentchat",
        "chronicle.instrument_autogen() needs AutoGen AgentChat: "
        "pip install autogen-agentchat 'autogen-ext[openai]'",
    ),
    (
        chronicle.instrument_google_adk,
        chronicle.uninstrument_google_adk,
        "google.adk",
        "chronicle.instrument_google_adk() needs Google ADK: pip install google-adk",
    ),
    (
        chronicle.instrument_crewai,
        chronicle.uninstrument_crewai,
        "crewai",
        "chronicle.instrument_crewai() needs CrewAI: pip install crewai",
    ),
    (
        chronicle.instrument_mcp,
        chronicle.uninstrument_mcp,
        "mcp",
        "chronicle.instrument_mcp() needs the MCP Python SDK: pip install mcp",
    ),
]


@pytest.mark.parametrize(
    ("instrument", "uninstrument", "package", "message"),
    MISSING,
    ids=[row[0].__name__ for row in MISSING],
)
def test_a_missing_framework_is_one_line_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
    instrument: Callable[[], None],
    uninstrument: Callable[[], None],
    package: str,
    message: str,
) -> None:
    uninstrument()  # a no-op unless another test left it on
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed
    with pytest.raises(ImportError) as raised:
        instrument()
    assert str(raised.value) == message
    assert "\n" not in str(raised.value)


def test_every_instrumentor_is_in_the_table() -> None:
    """A new ``instrument_*`` in the public API is checked here too."""
    names = {name for name in chronicle.__all__ if name.startswith("instrument_")}
    names -= {"instrument_httpx", "instrument_langgraph"}
    assert {row[0].__name__ for row in MISSING} == names
