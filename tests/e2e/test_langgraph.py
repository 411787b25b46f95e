"""LangGraph: nodes and routing decisions recorded as boundaries and replayed."""

from __future__ import annotations

import asyncio
import operator
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig

import chronicle
from chronicle.integrations.langgraph import instrument, instrument_langgraph
from tests.support.stored import stored

langgraph_graph = pytest.importorskip(
    "langgraph.graph", reason="the langgraph extra is not installed"
)
StateGraph, START, END = langgraph_graph.StateGraph, langgraph_graph.START, langgraph_graph.END
if TYPE_CHECKING:
    from langgraph.graph import MessagesState
else:
    MessagesState = langgraph_graph.MessagesState  # LangGraph reads the annotations at run time


class State(TypedDict, total=False):
    question: str
    kind: str
    answer: str
    steps: Annotated[list[str], operator.add]


class Calls:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def hit(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1


def build(calls: Calls, *, fixed: bool = False) -> Any:
    def classify(state: State) -> dict[str, Any]:
        calls.hit("classify")
        kind = "math" if any(ch.isdigit() for ch in state["question"]) else "chat"
        return {"kind": kind, "steps": ["classify"]}

    def route(state: State) -> str:
        calls.hit("route")
        return "math" if state["kind"] == "math" else "chat"

    def math(state: State) -> dict[str, Any]:
        calls.hit("math")
        left, right = state["question"].split("+")
        total = int(left) + int(right)
        return {"answer": str(total if fixed else total + 1), "steps": ["math"]}  # off by one

    async def chat(state: State, config: RunnableConfig) -> dict[str, Any]:
        calls.hit("chat")
        assert config["configurable"] is not None  # LangGraph still injects it
        await asyncio.sleep(0)
        return {"answer": f"you said {state['question']}", "steps": ["chat"]}

    builder = StateGraph(State)
    builder.add_node("classify", classify)
    builder.add_node("math", math)
    builder.add_node("chat", chat)
    builder.add_edge(START, "classify")
    builder.add_conditional_edges("classify", route, {"math": "math", "chat": "chat"})
    builder.add_edge("math", END)
    builder.add_edge("chat", END)
    assert instrument(builder) is builder
    instrument(builder)  # twice changes nothing
    return builder.compile()


def test_a_graph_with_a_conditional_edge_records_and_replays_with_a_node_as_cut_point(recording):
    calls = Calls()
    graph = build(calls)
    with chronicle.record("graph") as session:
        out = graph.invoke({"question": "2+3"})
    assert out["answer"] == "6"  # the bug
    envelopes = recording.saved(session.trace_id, 3)
    assert [e["name"] for e in envelopes] == ["node classify", "route classify.route", "node math"]
    assert {e["span_id"] for e in envelopes} == {session.span_id}
    classify, route, math = envelopes
    assert classify["input"]["raw"] == {"state": {"question": "2+3", "steps": []}}
    assert classify["output"]["raw"] == {"kind": "math", "steps": ["classify"]}
    assert route["output"]["raw"] == "math"
    assert math["output"]["raw"] == {"answer": "6", "steps": ["math"]}

    before = stored(recording.control_plane, session.trace_id)
    fixed_calls = Calls()
    fixed = build(fixed_calls, fixed=True)
    plan = chronicle.ReplayPlan().run("node math")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
        replayed = fixed.invoke({"question": "2+3"})
    assert replayed["answer"] == "5"  # the fix, proven with the rest stubbed
    assert replayed["steps"] == ["classify", "math"]
    assert fixed_calls.counts == {"math": 1}  # classify and the router did not run
    assert [(c.name, c.mode) for c in run.call_log()] == [
        ("node classify", "stub"),
        ("route classify.route", "stub"),
        ("node math", "run"),
    ]
    assert run.captured_result("node math") == {"answer": "5", "steps": ["math"]}
    assert chronicle.flush(10)
    assert stored(recording.control_plane, session.trace_id) == before


def test_an_async_graph_takes_the_recorded_route(recording):
    calls = Calls()
    graph = build(calls)

    async def main(question: str) -> dict[str, Any]:
        result: dict[str, Any] = await graph.ainvoke({"question": question})
        return result

    with chronicle.record("async-graph") as session:
        out = asyncio.run(main("hello"))
    assert out["answer"] == "you said hello"
    envelopes = recording.saved(session.trace_id, 3)
    assert [e["name"] for e in envelopes] == ["node classify", "route classify.route", "node chat"]
    assert envelopes[2]["input"]["raw"] == {
        "state": {"question": "hello", "kind": "chat", "steps": ["classify"]}
    }

    counts = dict(calls.counts)
    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        replayed = asyncio.run(main("a question with 1 digit"))  # would route to math if live
    assert replayed["answer"] == "you said hello"
    assert calls.counts == counts
    assert [c.mode for c in run.call_log()] == ["stub", "stub", "stub"]


def test_instrument_langgraph_wraps_a_dict_of_node_functions(recording):
    from langgraph.types import Command

    def plan(state: State) -> Command[Any]:
        return Command(update={"steps": ["plan"]}, goto="act")

    async def act(state: State) -> dict[str, Any]:
        return {"answer": "acted", "steps": ["act"]}

    nodes = instrument_langgraph({"plan": plan, "act": act})
    assert set(nodes) == {"plan", "act"} and nodes["plan"] is not plan
    builder = StateGraph(State)
    for name, fn in nodes.items():
        builder.add_node(name, fn)
    builder.add_edge(START, "plan")
    builder.add_edge("act", END)
    graph = builder.compile()

    async def main() -> dict[str, Any]:
        result: dict[str, Any] = await graph.ainvoke({"question": "go"})
        return result

    with chronicle.record("commands") as session:
        assert asyncio.run(main())["steps"] == ["plan", "act"]
    envelopes = recording.saved(session.trace_id, 2)
    assert envelopes[0]["output"]["raw"]["__command__"]["goto"] == "act"
    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        assert asyncio.run(main())["steps"] == ["plan", "act"]
    assert [c.name for c in run.call_log()] == ["node plan", "node act"]


class Jokes(TypedDict, total=False):
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]


def test_a_router_that_returns_send_packets_records_and_replays(recording):
    send = pytest.importorskip("langgraph.types").Send
    calls = Calls()

    def fan_out(state: Jokes) -> list[Any]:
        calls.hit("fan_out")
        return [send("joke", {"subject": subject}) for subject in state["subjects"]]

    def joke(state: dict[str, str]) -> dict[str, Any]:
        calls.hit("joke")
        return {"jokes": [f"a joke about {state['subject']}"]}

    builder = StateGraph(Jokes)
    builder.add_node("joke", joke)
    builder.add_conditional_edges(START, fan_out, ["joke"])
    builder.add_edge("joke", END)
    graph = instrument(builder).compile()
    with chronicle.record("map-reduce") as session:
        out = graph.invoke({"subjects": ["cats", "dogs", "owls"]})
    envelopes = recording.saved(session.trace_id, 4)
    (route,) = [e for e in envelopes if e["name"].startswith("route ")]
    assert route["output"]["raw"] == [
        {"__send__": {"node": "joke", "arg": {"subject": subject}}}
        for subject in ("cats", "dogs", "owls")
    ]
    assert "chronicle.lossy_output" not in route["metadata"]

    before = dict(calls.counts)
    with chronicle.replay_trace(
        session.trace_id, session.span_id, match="input", strict=True
    ) as run:
        replayed = graph.invoke({"subjects": ["cats", "dogs", "owls"]})
    assert calls.counts == before  # neither the router nor the sent-to nodes ran
    assert sorted(replayed["jokes"]) == sorted(out["jokes"])
    assert sorted(c.name for c in run.call_log()) == [
        "node joke",
        "node joke",
        "node joke",
        route["name"],
    ]


def test_instrument_takes_a_compiled_graph_and_refuses_anything_else(recording):
    builder = StateGraph(State)
    builder.add_node("only", lambda state: {"answer": "x"})
    builder.add_edge(START, "only")
    graph = builder.compile()
    assert instrument(graph) is graph  # compiled: its nodes become boundaries all the same
    with chronicle.record("compiled") as session:
        assert graph.invoke({"question": "q"})["answer"] == "x"
    assert [e["name"] for e in recording.saved(session.trace_id, 1)] == ["node only"]
    with pytest.raises(TypeError, match="StateGraph"):
        instrument({"not": "a graph"})


# ---- LangChain messages come back as themselves ------------------------------------------------


def weather_agent(llm_server: Any, calls: Calls) -> Any:
    """The MessagesState recipe: a ``ChatOpenAI`` model node that may ask for a tool, a tool
    node, and the route between them."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from tests.support.langgraph_loop import agent_loop, asked_tools

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"70F and sunny in {city}"

    llm = ChatOpenAI(
        model="gpt-4o-mini",
        api_key=SecretStr("test-key"),
        base_url=llm_server.openai_base_url,
        max_retries=0,
    ).bind_tools([get_weather])

    def agent(state: MessagesState) -> dict[str, Any]:
        calls.hit("agent")
        return {"messages": [llm.invoke(state["messages"])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        calls.hit("tools")
        return {
            "messages": [
                ToolMessage(
                    get_weather.invoke(call["args"]), tool_call_id=call["id"], id=call["id"]
                )
                for call in asked_tools(state)
            ]
        }

    return instrument(agent_loop(agent, tools)).compile()


def test_a_stubbed_node_returns_the_same_ai_message_the_live_node_returned(llm_server, recording):
    pytest.importorskip("langchain_openai")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from tests.support.llm_server import chat_text, chat_tool_calls, chat_usage, tool_call

    llm_server.reply_with(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"}), usage=chat_usage(31, 9)),
        chat_text("It is 70F and sunny in Paris.", usage=chat_usage(57, 11, cached_tokens=32)),
    )
    calls = Calls()
    graph = weather_agent(llm_server, calls)
    question = {"messages": [HumanMessage("What is the weather in Paris?", id="question-1")]}
    with chronicle.record("messages") as session:
        live = graph.invoke(question)["messages"]
    asked, tool_reply, answer = live[1:]
    assert asked.tool_calls[0]["args"] == {"city": "Paris"}
    assert answer.usage_metadata["input_token_details"]["cache_read"] == 32
    envelopes = recording.saved(session.trace_id, 5)
    agent_node = envelopes[0]
    assert agent_node["name"] == "node agent"
    assert agent_node["metadata"]["chronicle.output_types"] == {"/messages/0": "langchain.message"}
    assert agent_node["output"]["raw"]["messages"][0]["usage_metadata"] == asked.usage_metadata

    requests, counts = llm_server.request_count, dict(calls.counts)
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        replayed = graph.invoke(question)["messages"]
    assert llm_server.request_count == requests and calls.counts == counts  # nothing ran
    assert [c.mode for c in run.call_log()] == ["stub"] * 5
    assert not run.divergences()  # the tool node got the same AIMessage as its input
    assert replayed == live
    assert [type(message) for message in replayed] == [
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    for again, recorded in zip(replayed[1:], live[1:], strict=True):
        assert again.id == recorded.id
        assert again.response_metadata == recorded.response_metadata
        assert again.additional_kwargs == recorded.additional_kwargs  # no usage moved in here
    assert replayed[1].tool_calls == asked.tool_calls
    assert replayed[3].usage_metadata == answer.usage_metadata
    assert replayed[2].tool_call_id == tool_reply.tool_call_id


def test_a_boundary_returning_messages_with_no_annotation_naming_them_gets_them_back(recording):
    from langchain_core.messages import AIMessage, AIMessageChunk

    @chronicle.boundary("summarize")
    def summarize(text: str) -> Any:  # names no type, on purpose
        return [
            AIMessage(
                "short",
                id="run-1",
                usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
                response_metadata={"model_name": "gpt-4o-mini", "finish_reason": "stop"},
            ),
            AIMessageChunk(content="par", id="run-2"),
        ]

    with chronicle.record("summary") as session:
        live = summarize("a long text")
    recording.saved(session.trace_id, 1)
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        replayed = summarize("a long text")
    assert replayed == live
    assert [type(message) for message in replayed] == [AIMessage, AIMessageChunk]
