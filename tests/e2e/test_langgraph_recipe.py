"""The 1.0 README's LangGraph recipe replays strictly: a ``MessagesState`` agent whose model node
holds a wrapped ``ChatOpenAI`` client, recorded to the real control plane, replays with zero
divergences on unchanged code (stubbed nodes give back the same ``AIMessage``; fresh LangChain
ids are volatile by default), and still fails on a changed system prompt.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import MessagesState
from pydantic import SecretStr

import chronicle
from tests.support.langgraph_loop import agent_loop, asked_tools
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, tool_call

# ---- the LangGraph recipe --------------------------------------------------------------------


@chronicle.boundary("get_weather", kind="tool")
def get_weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp_f": 70}


@tool("get_weather")
def weather_tool(city: str) -> str:
    """Current weather for a city."""
    return json.dumps(get_weather(city))


def messages_agent(server: LlmServer, system: str) -> Any:
    """A ``MessagesState`` graph: a model node with a wrapped ``ChatOpenAI``, a tools node."""
    chat = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=server.openai_base_url,
        api_key=SecretStr("sk-local"),
        max_retries=0,
        use_responses_api=False,
    )
    chronicle.wrap(chat.client)
    llm = chat.bind_tools([weather_tool])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke([SystemMessage(system), *state["messages"]])]}

    def run_tools(state: MessagesState) -> dict[str, Any]:
        return {
            "messages": [
                ToolMessage(json.dumps(get_weather(**c["args"])), tool_call_id=c["id"])
                for c in asked_tools(state)
            ]
        }

    return chronicle.instrument(agent_loop(call_model, run_tools)).compile(), chat


def test_the_langgraph_messages_agent_replays_strictly_with_zero_divergences(recording, llm_server):
    graph, chat = messages_agent(llm_server, "You are a weather assistant.")
    llm_server.reply_with(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    question = {"messages": [HumanMessage("What is the weather in Paris?")]}
    with chronicle.record("weather") as session:
        live = graph.invoke(question)
    recording.saved(session.trace_id, 7)
    requests = llm_server.request_count

    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        replayed = graph.invoke({"messages": [HumanMessage("What is the weather in Paris?")]})
    assert run.divergences() == []
    assert llm_server.request_count == requests
    # the stubbed nodes gave back the messages the live nodes returned
    final_live, final_replayed = live["messages"][-1], replayed["messages"][-1]
    assert final_replayed.content == final_live.content == "It is 70F in Paris."
    assert final_replayed.usage_metadata == final_live.usage_metadata
    assert replayed["messages"][1].tool_calls == live["messages"][1].tool_calls

    # The model node as the cut-point: its model call is stubbed and compared, and the AI
    # message the live node builds (a fresh LangChain id) flows into the next nodes' inputs.
    plan = chronicle.ReplayPlan().run("node agent")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        rerun = graph.invoke({"messages": [HumanMessage("What is the weather in Paris?")]})
    assert run.divergences() == []
    assert rerun["messages"][-1].content == "It is 70F in Paris."
    assert llm_server.request_count == requests

    changed, changed_chat = messages_agent(llm_server, "You are a pirate weather assistant.")
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True):
            changed.invoke({"messages": [HumanMessage("What is the weather in Paris?")]})
    assert "messages[0].content" in str(raised.value)
    assert "pirate" in str(raised.value)
    chat.client._client.close()
    changed_chat.client._client.close()
