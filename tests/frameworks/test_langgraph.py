"""LangChain and LangGraph: the LangGraph quickstart agent, recorded and replayed with one line.

``chronicle.instrument_langchain()`` and nothing else: plain ``@tool`` functions, a
``ChatOpenAI`` pointed at the scripted model server, ``create_react_agent``. Also a LangChain
tool-calling loop without LangGraph, and ``chronicle.instrument(create_react_agent(...))``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import AzureChatOpenAI, ChatOpenAI
from langgraph.prebuilt import InjectedState, create_react_agent
from langgraph.types import Command
from pydantic import SecretStr

import chronicle
from tests.frameworks import quickstart
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, tool_call
from tests.support.recording import Recording

pytestmark = pytest.mark.filterwarnings(
    # LangGraph 1.x points create_react_agent to langchain.agents.create_agent (langchain 1.x)
    "ignore:create_react_agent has been moved:DeprecationWarning",
    "ignore:create_react_agent has been moved",
)

SYSTEM = "You are a helpful assistant."


@pytest.fixture(autouse=True)
def langchain_instrumented() -> Iterator[None]:
    """``chronicle.instrument_langchain()`` for the test, undone after it (it is process-wide)."""
    chronicle.instrument_langchain()
    chronicle.instrument_langchain()  # twice changes nothing
    try:
        yield
    finally:
        chronicle.uninstrument_langchain()


def model(server: LlmServer, *, responses: bool = False) -> ChatOpenAI:
    """The quickstart's model: ``ChatOpenAI`` pointed at the scripted server (Chat Completions,
    or the Responses API)."""
    return ChatOpenAI(
        model="gpt-4o",
        base_url=server.openai_base_url,
        api_key=SecretStr("t"),
        max_retries=0,
        use_responses_api=responses,
    )


def quickstart_tools(tools: quickstart.Tools) -> list[Any]:
    """The quickstart's two tools as plain LangChain ``@tool`` functions."""

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return tools.get_weather(city)

    @tool
    def get_time(city: str) -> str:
        """Get the local time in a city."""
        return tools.get_time(city)

    return [get_weather, get_time]


def quickstart_agent(
    server: LlmServer, tools: quickstart.Tools, prompt: str = SYSTEM, *, responses: bool = False
) -> Any:
    """The LangGraph quickstart: ``create_react_agent`` with a ``ChatOpenAI`` and two tools."""
    llm = model(server, responses=responses)
    return create_react_agent(llm, tools=quickstart_tools(tools), prompt=prompt)


def scripted_agent(server: LlmServer) -> tuple[quickstart.Tools, Any]:
    """The quickstart's tools and agent (Chat Completions), its three replies queued."""
    tools = quickstart.Tools()
    agent = quickstart_agent(server, tools)
    quickstart.script_chat(server)
    return tools, agent


def ask(agent: Any) -> str:
    result = agent.invoke({"messages": [HumanMessage(quickstart.QUESTION)]})
    return result["messages"][-1].text  # type: ignore[no-any-return]


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
def test_the_langgraph_quickstart_records_and_replays_with_one_line(
    llm_server: LlmServer, recording: Recording, responses: bool
) -> None:
    tools = quickstart.Tools()
    agent = quickstart_agent(llm_server, tools, responses=responses)
    qs = quickstart.Quickstart(
        run=lambda: ask(agent),
        script=quickstart.script_responses if responses else quickstart.script_chat,
        tools=tools,
        server=llm_server,
        model_boundary="openai.responses.create" if responses else "openai.chat.completions.create",
    )
    session = quickstart.check_quickstart(qs, recording)

    envelopes = recording.saved(session.trace_id, 5)
    for envelope in envelopes:
        if envelope["kind"] == "tool":
            assert envelope["metadata"]["chronicle.framework"] == "langchain"
            # what LangChain hands StructuredTool._run beside the arguments is left out
            assert envelope["metadata"]["chronicle.left_out"] == ["config", "run_manager"]

    # A changed system prompt is caught by a strict replay: the first model call's input differs.
    changed = quickstart_agent(llm_server, tools, prompt="You are a pirate.", responses=responses)
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
            ask(changed)
    assert "pirate" in str(raised.value)


def test_the_quickstart_asked_asynchronously_replays_what_the_sync_run_recorded(
    llm_server: LlmServer, recording: Recording
) -> None:
    tools, agent = scripted_agent(llm_server)
    with chronicle.record("quickstart") as session:
        assert ask(agent) == quickstart.ANSWER
    envelopes = recording.saved(session.trace_id, 5)
    assert [e["name"] for e in envelopes if e["kind"] == "tool"] == list(quickstart.TOOL_NAMES)

    async def ask_async() -> str:
        result = await agent.ainvoke({"messages": [HumanMessage(quickstart.QUESTION)]})
        return result["messages"][-1].text  # type: ignore[no-any-return]

    requests = len(llm_server.requests)
    tools.runs.clear()
    plan = chronicle.ReplayPlan().run("get_weather")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        assert asyncio.run(ask_async()) == quickstart.ANSWER
    assert run.divergences() == []
    assert tools.runs == ["get_weather"]  # the async path ran only the cut-point
    assert len(llm_server.requests) == requests


def test_a_langchain_tool_calling_loop_without_langgraph_records_and_replays(
    llm_server: LlmServer, recording: Recording
) -> None:
    tools = quickstart.Tools()
    by_name = {t.name: t for t in quickstart_tools(tools)}
    llm = model(llm_server).bind_tools(list(by_name.values()))

    def loop() -> str:
        messages: list[Any] = [HumanMessage(quickstart.QUESTION)]
        while True:
            reply = llm.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                messages.append(by_name[call["name"]].invoke(call))  # a ToolMessage

    qs = quickstart.Quickstart(
        run=loop, script=quickstart.script_chat, tools=tools, server=llm_server
    )
    quickstart.check_quickstart(qs, recording)


def test_a_tool_returning_a_command_or_a_message_replays_the_same_type(
    llm_server: LlmServer, recording: Recording
) -> None:
    runs: list[str] = []

    @tool
    def remember(
        city: str,
        tool_call_id: Annotated[str, InjectedToolCallId],
        state: Annotated[dict[str, Any], InjectedState],
    ) -> Command[Any]:
        """Remember the user's city."""
        runs.append("remember")
        assert state["messages"]  # LangGraph injected the graph's state
        reply = ToolMessage(f"remembered {city}", tool_call_id=tool_call_id)
        return Command(update={"messages": [reply]})

    @tool
    def shout(
        text: str, tool_call_id: Annotated[str, InjectedToolCallId], config: RunnableConfig
    ) -> ToolMessage:
        """Shout a text."""
        runs.append("shout")
        assert "configurable" in config  # LangChain handed the RunnableConfig
        return ToolMessage(text.upper(), tool_call_id=tool_call_id, artifact={"loud": True})

    def script() -> None:
        llm_server.reply_with(
            chat_tool_calls(tool_call("remember", {"city": "Paris"})),
            chat_tool_calls(tool_call("shout", {"text": "hi"})),
            chat_text("Done."),
        )

    agent = create_react_agent(model(llm_server), tools=[remember, shout])
    question = {"messages": [HumanMessage("Remember Paris, then shout hi.")]}
    script()
    with chronicle.record("commands") as session:
        live = agent.invoke(question)["messages"]
    envelopes = recording.saved(session.trace_id, 5)
    by_name = {e["name"]: e for e in envelopes}
    assert by_name["remember"]["input"]["raw"] == {"city": "Paris"}
    assert by_name["remember"]["metadata"]["chronicle.left_out"] == [
        "config",
        "run_manager",
        "state",
        "tool_call_id",
    ]
    assert by_name["shout"]["input"]["raw"] == {"text": "hi"}
    assert runs == ["remember", "shout"]

    runs.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        replayed = agent.invoke(question)["messages"]
    assert run.divergences() == []
    assert runs == []
    assert [type(m) for m in replayed] == [type(m) for m in live]
    assert [m.content for m in replayed] == [m.content for m in live]
    assert replayed[2].content == "remembered Paris"  # the Command's update reached the state
    assert isinstance(replayed[4], ToolMessage) and replayed[4].artifact == {"loud": True}


def test_instrument_takes_a_compiled_prebuilt_agent(
    llm_server: LlmServer, recording: Recording
) -> None:
    chronicle.uninstrument_langchain()  # the graph alone: its nodes, routes and tools
    tools, agent = scripted_agent(llm_server)
    assert chronicle.instrument(agent) is agent
    chronicle.instrument(agent)  # twice changes nothing
    with chronicle.record("compiled") as session:
        assert ask(agent) == quickstart.ANSWER
    envelopes = recording.saved(session.trace_id, 10)
    names = [e["name"] for e in envelopes]
    assert names == [
        "node agent",
        "route agent.should_continue",
        "node tools",
        "get_weather",
        "node agent",
        "route agent.should_continue",
        "node tools",
        "get_time",
        "node agent",
        "route agent.should_continue",
    ], names
    by_id = {e["envelope_id"]: e for e in envelopes}
    for envelope in envelopes:
        if envelope["name"] in quickstart.TOOL_NAMES:  # inside its tool node
            assert envelope["input"]["raw"] == {"city": "Paris"}
            parent = by_id[envelope["parent_envelope_id"]]
            assert parent["name"] == "node tools"

    requests = len(llm_server.requests)
    tools.runs.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        assert ask(agent) == quickstart.ANSWER
    assert run.divergences() == [] and tools.runs == []
    assert len(llm_server.requests) == requests
    # A tool as cut-point runs its tool node; the node's other recorded calls stay stubbed.
    plan = chronicle.ReplayPlan().run("get_time")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        assert ask(agent) == quickstart.ANSWER
    assert run.divergences() == [] and tools.runs == ["get_time"]
    assert len(llm_server.requests) == requests


def test_the_chat_model_and_the_tools_run_unrecorded_after_uninstrument(
    llm_server: LlmServer, recording: Recording
) -> None:
    chronicle.uninstrument_langchain()
    tools, agent = scripted_agent(llm_server)
    with chronicle.record("off") as session:
        assert ask(agent) == quickstart.ANSWER
    chronicle.flush(10)
    assert recording.control_plane.trace_envelopes(session.trace_id) == []
    assert tools.runs == list(quickstart.TOOL_NAMES)


def test_the_replayed_messages_are_the_recorded_ones(
    llm_server: LlmServer, recording: Recording
) -> None:
    _, agent = scripted_agent(llm_server)
    with chronicle.record("messages") as session:
        live = agent.invoke({"messages": [HumanMessage(quickstart.QUESTION)]})["messages"]
    recording.saved(session.trace_id, 5)
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        replayed = agent.invoke({"messages": [HumanMessage(quickstart.QUESTION)]})["messages"]
    assert [type(m) for m in replayed] == [type(m) for m in live]
    assert [m.content for m in replayed] == [m.content for m in live]
    asked = [m for m in replayed if isinstance(m, AIMessage) and m.tool_calls]
    answers = [m for m in replayed if isinstance(m, ToolMessage)]
    # LangChain built each ToolMessage around the stubbed result, for the replayed call's id
    assert [m.tool_call_id for m in answers] == [m.tool_calls[0]["id"] for m in asked]
    assert json.loads(str(answers[0].content))["sky"] == "sunny"


def test_an_azure_chat_model_built_before_instrumenting_is_recorded_and_replayed(
    llm_server: LlmServer, recording: Recording
) -> None:
    chronicle.uninstrument_langchain()
    chat = AzureChatOpenAI(
        azure_endpoint=llm_server.azure_endpoint,
        azure_deployment="gpt-4o",
        api_version="2024-10-21",
        api_key=SecretStr("t"),
        max_retries=0,
    )
    chronicle.instrument_langchain()  # finds the model at its first call, wherever it was built
    with chat.root_client:  # its connection closed here, not by the collector in a later test
        llm_server.reply_with(chat_text("Sunny in Paris."), chat_text("Sunny in Paris."))
        with chronicle.record("azure") as session:
            streamed = "".join(str(chunk.content) for chunk in chat.stream("Weather in Paris?"))
            answered = chat.invoke("Weather in Paris?").content
        assert streamed == answered == "Sunny in Paris."
        envelopes = recording.saved(session.trace_id, 2)
        assert [e["name"] for e in envelopes] == ["openai.chat.completions.create"] * 2
        assert [e["output"]["provider"] for e in envelopes] == ["azure"] * 2

        requests = len(llm_server.requests)
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
            again = "".join(str(chunk.content) for chunk in chat.stream("Weather in Paris?"))
            assert chat.invoke("Weather in Paris?").content == answered
        assert again == streamed
        assert run.divergences() == [] and len(llm_server.requests) == requests


def test_the_documented_example_runs(
    recording: Recording, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quickstart.openai_example("langchain.md", recording, llm_server, monkeypatch) as example:
        envelopes = quickstart.assert_example_ran(example["main"](), recording, llm_server)
    assert [e["name"] for e in envelopes] == [
        "openai.chat.completions.create",
        "get_weather",
        "openai.chat.completions.create",
        "get_time",
        "openai.chat.completions.create",
    ]


def test_a_compiled_graph_whose_node_and_route_are_runnables_records_them(
    recording: Recording,
) -> None:
    from typing import TypedDict

    from langchain_core.runnables import RunnableLambda
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        question: str
        answer: str

    runs: list[str] = []

    def shout(state: State) -> State:
        runs.append("shout")
        return {"answer": state["question"].upper()}

    builder = StateGraph(State)
    builder.add_node("shout", RunnableLambda(shout))  # a Runnable, wrapped whole
    builder.add_node("ask", lambda state: {"answer": state["answer"] + "?"})
    builder.add_edge(START, "shout")
    builder.add_conditional_edges("shout", RunnableLambda(lambda _: "ask", name="pick"))
    builder.add_edge("ask", END)
    graph = chronicle.instrument(builder.compile())
    with chronicle.record("runnables") as session:
        assert graph.invoke({"question": "hi"})["answer"] == "HI?"
    names = [e["name"] for e in recording.saved(session.trace_id, 3)]
    assert names == ["node shout", "route shout.pick", "node ask"]
    runs.clear()
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        assert graph.invoke({"question": "hi"})["answer"] == "HI?"
    assert runs == [] and run.divergences() == []
